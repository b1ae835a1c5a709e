#!/usr/bin/env python3
"""How soon a real llama-server stops a prompt whose read the service timed out (issue 29).

Starts `systemone serve` (the built binary) with `--read-timeout-secs 2.5` (or `--read-timeout`) in front of a running
llama-server, sends requests whose state is ~10,000 tokens (a fresh prefix each, so the prompt
cache cannot shorten them), and for each reads llama-server's log for its `cancel task` and
`stop processing` lines. Prints, per request: the 504's time, and when llama-server logged
the cancel and freed the slot, counted from the 504, with the prompt tokens it had evaluated.

    scripts/llama-cancel-timeline.py --llama-url URL --llama-log PATH [--bin target/debug/systemone] [--runs 5] [--read-timeout 2.5]

Nothing polls llama-server meanwhile: every answer it sends (a `/slots` answer too) restarts
its 1 s wait before it looks for closed connections.
"""
import argparse, json, os, re, subprocess, time, urllib.error, urllib.request

def serve(binary, llama_url, read_timeout):
    proc = subprocess.Popen(
        [binary, "serve", "--listen", "127.0.0.1:0", "--backend", "llamacpp", "--backend-url", llama_url,
         "--model", "gemma-3-270m", "--token-table", "gemma-3", "--read-timeout-secs", read_timeout],
        stderr=subprocess.PIPE, text=True, env={**os.environ, "RUST_LOG": "warn,systemone::cli=info", "NO_COLOR": "1"})
    for line in proc.stderr:
        if "address=" in line:
            return proc, line.split("address=")[1].split()[0]
    raise SystemExit("the service exited before listening")

def ask(addr, state):
    body = json.dumps({"state": state, "questions": {"team": {"type": "choice",
        "criteria": {"billing": None, "shipping": None, "sales": None}}}}).encode()
    req = urllib.request.Request(f"http://{addr}/v1/systemone", body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code

def main():
    p = argparse.ArgumentParser()
    p.add_argument("--llama-url", required=True)
    p.add_argument("--llama-log", required=True)
    p.add_argument("--bin", default="target/debug/systemone")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--read-timeout", default="2.5", help="the service's --read-timeout-secs")
    a = p.parse_args()
    proc, addr = serve(a.bin, a.llama_url, a.read_timeout)
    print("| run | status | 504 after | cancel logged after the 504 | slot free after the 504 | prompt tokens evaluated |")
    print("|---:|---:|---:|---:|---:|---:|")
    try:
        for run in range(1, a.runs + 1):
            state = f"Ticket {time.time_ns()}. " + "The customer writes that the parcel arrived late and the box was crushed. " * 700
            start = os.path.getsize(a.llama_log)
            t0 = time.monotonic()
            status = ask(addr, state)
            t504 = time.monotonic()
            cancel = None
            while time.monotonic() - t504 < 120:
                with open(a.llama_log) as f:
                    f.seek(start)
                    text = f.read()
                now = time.monotonic() - t504
                if cancel is None and "cancel task" in text:
                    cancel = now
                done = re.search(r"stop processing: n_tokens = +(\d+)", text)
                if done:
                    shown = "never" if cancel is None else f"{cancel:.2f} s"
                    print(f"| {run} | {status} | {t504 - t0:.2f} s | {shown} | {now:.2f} s | {done.group(1)} |")
                    break
                time.sleep(0.02)
    finally:
        proc.kill()

if __name__ == "__main__":
    main()
