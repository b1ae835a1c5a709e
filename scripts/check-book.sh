#!/usr/bin/env bash
# Builds the book under docs/ with mdBook (installed and cached by scripts/install-mdbook.sh)
# into target/book and checks every internal link and anchor offline
# (scripts/check-book-links.py). Fails on a build error or any broken link.
set -euo pipefail
cd "$(dirname "$0")/.."
mdbook="$(scripts/install-mdbook.sh)"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
if ! "$mdbook" build docs --dest-dir "$PWD/target/book" >"$log" 2>&1; then
  cat "$log" >&2
  echo "check-book: mdbook build failed" >&2
  exit 1
fi
python3 scripts/check-book-links.py target/book
# User pages say what, how and why; the history of a measurement (which issue, which commit,
# which earlier run) belongs in docs/benchmarks/, where a run is dated and named.
history='issue [0-9]+|this commit|earlier note'
if grep -rnEi --include='*.md' "$history" docs | grep -Ev '^docs/benchmarks(/|\.md:)'; then
  echo "check-book: the lines above cite an issue, a commit or a note outside docs/benchmarks/" >&2
  exit 1
fi
