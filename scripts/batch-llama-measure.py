#!/usr/bin/env python3
"""Batch jobs on llama-server: prompt tokens evaluated per line against the floor, and
online latency with a batch running against online latency alone.

    eval "$(scripts/install-llama.sh | tail -3)"; export LLAMA_SERVER
    SYSTEMONE_LLAMA_ARGS=--metrics scripts/start-llama.sh 0     # LLAMA_URL=http://127.0.0.1:PORT/v1
    scripts/batch-llama-measure.py --binary target/release/systemone --llama http://127.0.0.1:PORT \
        [--states 200] [--questions 5] [--online 30] [--shares 0.5,0.0625]
    # latency only, two builds alternating, each with its own service flags:
    scripts/batch-llama-measure.py --latency-only --rounds 2 --llama http://127.0.0.1:PORT \
        --service "old=/path/old/systemone --batch-share 0.0625" \
        --service "new=target/release/systemone --batch-upstream-slots 1"

Each state (a ticket of a few sentences) is asked `--questions` one-question lines (a noul or
a choice), shuffled. Tokens are llama-server's `llamacpp:prompt_tokens_total` (`--metrics`)
before and after:

* floor: the lines sent online one at a time, sorted by state, so each state's head is
  evaluated once and every other line of the state finds it in the slot's cache;
* batch: the shuffled lines as one batch (the service runs a state's lines together).

Latency: `--online` one-question requests about states of their own, one at a time, alone
and then while a batch of the shuffled lines runs, for each `--batch-share`. Each phase
uses texts of its own (a tag in every state), so no phase finds another's in the cache.
With `--service` (repeated), each round starts each service in turn (the order reversed
every other round), and measures online p50 alone and with a batch running on it, so two
builds or two flag sets are compared side by side under the same load. Prints a Markdown
table. Standard library only.
"""

import argparse
import json
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

QUESTIONS = [
    {"type": "noul", "instructions": "Does the customer ask for money back?"},
    {"type": "choice", "instructions": "Which team handles it?",
     "criteria": {"billing": "charges and invoices", "tech": "defects", "sales": "plans", "other": None}},
    {"type": "noul", "instructions": "Is the customer angry?"},
    {"type": "choice", "instructions": "How urgent is it?",
     "criteria": {"low": None, "normal": None, "high": None}},
    {"type": "noul", "instructions": "Does the customer mention another company?"},
]
TOPICS = ["an invoice charged twice", "a login that fails", "a plan upgrade", "a late delivery",
          "a broken export", "a missing refund", "a password reset", "a price question"]


def state(tag, i):
    topic = TOPICS[i % len(TOPICS)]
    return (f"Ticket {tag}-{i}. Customer {i * 37 % 1000} writes about {topic}. They have been a "
            f"customer for {i % 9 + 1} years and write from the {['web', 'app', 'phone'][i % 3]} "
            f"form. The message: I need this sorted out this week, ticket {tag}{i}, thanks.")


def body(tag, i, q):
    return {"state": state(tag, i), "questions": {f"q{q}": QUESTIONS[q % len(QUESTIONS)]}}


def http(method, url, data=None, headers=None, timeout=600):
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        return reply.status, reply.read()


def post_json(url, value):
    return http("POST", url, json.dumps(value).encode(), {"content-type": "application/json"})


def prompt_tokens(llama):
    _, text = http("GET", f"{llama}/metrics")
    match = re.search(rb"^llamacpp:prompt_tokens_total\s+([0-9.e+]+)", text, re.M)
    if not match:
        sys.exit("llama-server has no llamacpp:prompt_tokens_total: start it with --metrics")
    return float(match.group(1))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_service(binary, llama, share, state_dir, flags=()):
    port = free_port()
    args = [binary, "serve", "--listen", f"127.0.0.1:{port}", "--backend-url", f"{llama}/v1",
            "--state-dir", state_dir, "--read-timeout-secs", "300", "--request-timeout-secs", "600"]
    args += ["--batch-share", share] if share else []
    args += list(flags)
    log = open(f"{state_dir}/service.log", "w")
    child = subprocess.Popen(args, stdout=log, stderr=log)
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if http("GET", f"{base}/readyz", timeout=2)[0] == 200:
                return child, base
        except Exception:
            pass
        time.sleep(0.2)
    child.kill()
    sys.exit(f"the service did not get ready; see {state_dir}/service.log")


def submit(base, lines):
    content = "".join(json.dumps({"custom_id": f"l{n}", "method": "POST", "url": "/v1/systemone",
                                  "body": b}) + "\n" for n, b in enumerate(lines))
    boundary = "batchmeasure"
    form = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"l.jsonl\"\r\n\r\n"
            ).encode() + content.encode() + f"\r\n--{boundary}--\r\n".encode()
    _, up = http("POST", f"{base}/v1/files", form,
                 {"content-type": f"multipart/form-data; boundary={boundary}"})
    _, made = post_json(f"{base}/v1/batches", {"input_file_id": json.loads(up)["id"],
                                               "endpoint": "/v1/systemone", "completion_window": "24h"})
    return json.loads(made)["id"]


def wait_batch(base, batch_id):
    while True:
        _, now = http("GET", f"{base}/v1/batches/{batch_id}")
        now = json.loads(now)
        if now["status"] not in ("validating", "in_progress", "finalizing", "cancelling"):
            return now
        time.sleep(0.5)


def shuffled(tag, states, questions, seed):
    lines = [body(tag, i, q) for i in range(states) for q in range(questions)]
    random.Random(seed).shuffle(lines)
    return lines


def latencies(base, tag, n):
    out = []
    for i in range(n):
        started = time.monotonic()
        status, _ = post_json(f"{base}/v1/systemone", body(tag, i, i % len(QUESTIONS)))
        assert status == 200
        out.append(time.monotonic() - started)
    return out


def busy_p50(base, tag, states, questions, online):
    """Online p50 while a batch of the shuffled lines runs (cancelled after), and its counts
    when the online requests ended."""
    running = submit(base, shuffled(tag, states, questions, 2))
    time.sleep(2)
    busy = statistics.median(latencies(base, f"O{tag}", online))
    _, left = http("GET", f"{base}/v1/batches/{running}")
    try:
        post_json(f"{base}/v1/batches/{running}/cancel", {})
    except urllib.error.HTTPError as e:
        assert e.code == 409, e  # it had ended: the row says so
    wait_batch(base, running)
    return busy, json.loads(left)["request_counts"]


def compare(a):
    """Each `--service` in turn, `--rounds` times: online p50 alone, then with a batch."""
    services = [s.split("=", 1) for s in a.service]
    print("| round | service | flags | online p50 alone | with a batch running | x alone | batch lines done |")
    print("|---:|---|---|---:|---:|---:|---:|")
    for r in range(a.rounds):
        for k, (label, command) in enumerate(services if r % 2 == 0 else services[::-1]):
            binary, *flags = command.split()
            tag = f"{r}{k}{label}"
            with tempfile.TemporaryDirectory() as state_dir:
                child, base = start_service(binary, a.llama, None, state_dir, flags)
                try:
                    alone = statistics.median(latencies(base, f"A{tag}", a.online))
                    busy, counts = busy_p50(base, f"R{tag}", a.states, a.questions, a.online)
                finally:
                    child.kill()
                    child.wait()
            print(f"| {r + 1} | {label} | `{' '.join(flags)}` | {alone * 1000:.0f} ms | "
                  f"{busy * 1000:.0f} ms | **{busy / alone:.2f}** | "
                  f"{counts['completed']} of {counts['total']} |", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--binary")
    p.add_argument("--service", action="append", default=[],
                   help="label=binary [flags...]; with --latency-only, compared side by side")
    p.add_argument("--latency-only", action="store_true")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--llama", required=True, help="llama-server's base URL, without /v1")
    p.add_argument("--states", type=int, default=200)
    p.add_argument("--questions", type=int, default=5)
    p.add_argument("--online", type=int, default=30)
    p.add_argument("--shares", default="0.5,0.0625")
    a = p.parse_args()
    if a.latency_only:
        return compare(a)
    lines_n = a.states * a.questions
    rows = []
    for n, share in enumerate(a.shares.split(",")):
        with tempfile.TemporaryDirectory() as state_dir:
            child, base = start_service(a.binary, a.llama, share, state_dir)
            try:
                if n == 0:
                    ordered = [body("F", i, q) for i in range(a.states) for q in range(a.questions)]
                    before = prompt_tokens(a.llama)
                    started = time.monotonic()
                    for b in ordered:
                        assert post_json(f"{base}/v1/systemone", b)[0] == 200
                    floor = (prompt_tokens(a.llama) - before) / lines_n
                    rows.append(("floor: online, one at a time, sorted by state", "-", floor, 1.0,
                                 time.monotonic() - started))
                    before = prompt_tokens(a.llama)
                    started = time.monotonic()
                    done = wait_batch(base, submit(base, shuffled("B", a.states, a.questions, 1)))
                    assert done["request_counts"]["completed"] == lines_n, done
                    per_line = (prompt_tokens(a.llama) - before) / lines_n
                    rows.append(("batch of the shuffled lines", share, per_line, per_line / floor,
                                 time.monotonic() - started))
                    alone = statistics.median(latencies(base, "A", a.online))
                    print(f"online p50 alone: {alone * 1000:.0f} ms", flush=True)
                busy, counts = busy_p50(base, f"R{n}", a.states, a.questions, a.online)
                print(f"share {share}: online p50 with a batch running {busy * 1000:.0f} ms "
                      f"({busy / alone:.2f}x alone); the batch had finished {counts['completed']} "
                      f"of {counts['total']} lines by then", flush=True)
                rows.append((f"online p50 with a batch running (alone {alone * 1000:.0f} ms)", share,
                             busy * 1000, busy / alone, None))
            finally:
                child.kill()
                child.wait()
    print(f"\n{a.states} states x {a.questions} questions = {lines_n} lines\n")
    print("| measure | --batch-share | value | x floor / x alone | seconds |")
    print("|---|---:|---:|---:|---:|")
    for what, share, value, ratio, secs in rows:
        unit = "ms" if "p50" in what else "prompt tokens/line"
        print(f"| {what} | {share} | {value:.1f} {unit} | {ratio:.2f} | "
              f"{'' if secs is None else f'{secs:.0f}'} |")


if __name__ == "__main__":
    main()
