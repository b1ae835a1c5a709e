#!/usr/bin/env python3
"""Checks every internal link of the built book, offline: the file it names exists and,
when it names an anchor, the page has an element with that id.

Usage: scripts/check-book-links.py [BOOK_DIR]   (default target/book, what `mdbook build docs`
writes). The README's links into the book (plain Markdown, as a repository host renders them)
are checked the same way against the Markdown sources. External links (http, https, mailto) are counted, not fetched: CI has no internet to
spare, and a page moving elsewhere is not this repository's breakage. Exits 1 on any broken
link, printing each as `page: link (why)`.
"""
import os
import re
import sys
from html.parser import HTMLParser
from urllib.parse import unquote, urlsplit


class Page(HTMLParser):
    """The ids a page defines and the links it makes."""

    def __init__(self):
        super().__init__()
        self.ids, self.links = set(), []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("name"):
            self.ids.add(attrs["name"])
        for key in ("href", "src"):
            if attrs.get(key) is not None and tag in ("a", "img", "link", "script"):
                self.links.append(attrs[key])


def parse(path):
    page = Page()
    with open(path, encoding="utf-8") as f:
        page.feed(f.read())
    return page


def slug(heading):
    """A heading's anchor as mdBook and repository hosts make it."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    return "".join("-" if c == " " else c for c in text if c.isalnum() or c in " -_")


def markdown_anchors(path):
    """The anchors of a Markdown file's headings (fenced code skipped)."""
    anchors, fenced = set(), False
    with open(path, encoding="utf-8") as f:
        for line in f:
            fenced ^= line.startswith("```")
            match = None if fenced else re.match(r"^#+ (.*)", line)
            if match:
                anchors.add(slug(match.group(1)))
    return anchors


def readme_broken(readme):
    """Links of the README (outside code) whose file or heading is missing."""
    base, broken, fenced, text = os.path.dirname(readme), [], False, []
    with open(readme, encoding="utf-8") as f:
        for line in f:
            fenced ^= line.startswith("```")
            if not fenced:
                text.append(line)
    for link in re.findall(r"\]\(([^)\s]+)\)", "".join(text)):
        parts = urlsplit(link)
        if parts.scheme:
            continue
        file = os.path.join(base, parts.path) if parts.path else readme
        if not os.path.exists(file):
            broken.append(f"README.md: {link} (no such file)")
        elif parts.fragment and parts.fragment not in markdown_anchors(file):
            broken.append(f"README.md: {link} (no such anchor)")
    return broken


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "target/book")
    pages = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            if name.endswith(".html"):
                path = os.path.join(dirpath, name)
                pages[path] = parse(path)
    broken, internal, external = [], 0, 0
    for path, page in sorted(pages.items()):
        # mdBook's print.html repeats every page; its links are checked on the pages themselves.
        if os.path.basename(path) in ("print.html", "toc.html", "404.html"):
            continue
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or link.startswith("//"):
                external += 1
                continue
            internal += 1
            file = path if not parts.path else os.path.normpath(
                os.path.join(os.path.dirname(path), unquote(parts.path)))
            if os.path.isdir(file):
                file = os.path.join(file, "index.html")
            rel = os.path.relpath(path, root)
            if not os.path.exists(file):
                broken.append(f"{rel}: {link} (no such file)")
            elif parts.fragment and file.endswith(".html"):
                target = pages.get(file) or parse(file)
                if unquote(parts.fragment) not in target.ids:
                    broken.append(f"{rel}: {link} (no such anchor)")
    readme = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "README.md")
    broken += readme_broken(os.path.normpath(readme))
    for line in broken:
        print(line)
    print(f"check-book-links: {len(pages)} pages, {internal} internal links checked, "
          f"{len(broken)} broken; {external} external links not fetched")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
