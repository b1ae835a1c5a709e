#!/usr/bin/env python3
"""Prompt tokens llama-server replicas evaluate per 5-question call, side by side
(docs/fleet.md): one replica alone (the floor), the service in front of a per-connection
round-robin TCP balancer over the replicas (what a Kubernetes Service does), the service in
front of vllm-router (PyPI) with its default policy (`cache_aware`) and with
`consistent_hash` (keyed by the `x-session-id` routing key the service sends), and the
service's own replica list (`--backend-url a,b,c`: rendezvous hashing on the state).

Starts its own llama-servers (`scripts/start-llama.sh 0`, with `--metrics`), its own
balancer, two vllm-routers (`--worker-urls` the replicas; from
`~/.cache/systemone/vllm-router/bin/vllm-router` or `$SYSTEMONE_VLLM_ROUTER`, skipped when
absent: `python3 -m venv ~/.cache/systemone/vllm-router &&
~/.cache/systemone/vllm-router/bin/pip install vllm-router==0.1.17`) and one
`systemone serve` per setup, and stops them all when done. Each setup gets its
own states (so one setup's cache does not help another), each asked once new and once again
later, interleaved. Counts come from the replicas' own `/metrics`
(`llamacpp:prompt_tokens_total`, summed over replicas) and from the answers' `usage`.

    scripts/fleet-measure.py [--replicas 3] [--states 4] [--binary target/debug/systemone]
    scripts/fleet-measure.py --kill 12     # a replica killed mid-run and started again
    scripts/fleet-measure.py --skew 48     # one hot state: bounded load against none
"""

import argparse
import asyncio
import http.server
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
started_pids = []


def stop_all():
    for pid in started_pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_llama():
    env = dict(os.environ, SYSTEMONE_LLAMA_ARGS="--metrics",
               SYSTEMONE_LLAMA_THREADS=os.environ.get("SYSTEMONE_LLAMA_THREADS", "1"))
    out = subprocess.run([f"{ROOT}/scripts/start-llama.sh", "0"], env=env, check=True,
                         capture_output=True, text=True, cwd=ROOT).stdout
    values = dict(line.split("=", 1) for line in out.split() if "=" in line)
    started_pids.append(int(values["LLAMA_PID"]))
    return values["LLAMA_URL"]


def prompt_tokens(url):
    """`llamacpp:prompt_tokens_total` of the llama-server at `url` (its `/v1` base)."""
    root = url.rsplit("/v1", 1)[0]
    text = urllib.request.urlopen(f"{root}/metrics", timeout=10).read().decode()
    match = re.search(r"^llamacpp:prompt_tokens_total\s+([0-9.e+]+)", text, re.M)
    return float(match.group(1)) if match else 0.0


class RoundRobin:
    """A TCP balancer that sends each new connection to the next backend in turn."""

    def __init__(self, urls):
        self.backends = [tuple(u.split("//")[1].split("/")[0].split(":")) for u in urls]
        self.next = 0
        self.port = free_port()
        loop = asyncio.new_event_loop()
        threading.Thread(target=self._run, args=(loop,), daemon=True).start()
        time.sleep(0.5)

    def _run(self, loop):
        asyncio.set_event_loop(loop)
        loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", self.port))
        loop.run_forever()

    async def _serve(self, reader, writer):
        host, port = self.backends[self.next % len(self.backends)]
        self.next += 1
        up_reader, up_writer = await asyncio.open_connection(host, int(port))

        async def pipe(src, dst):
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except ConnectionError:
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def url(self):
        return f"http://127.0.0.1:{self.port}/v1"


ROUTER = os.environ.get("SYSTEMONE_VLLM_ROUTER",
                        os.path.expanduser("~/.cache/systemone/vllm-router/bin/vllm-router"))


def start_router(urls, policy):
    """vllm-router (PyPI) over the replicas' roots with static worker URLs; `policy` None is
    its default. Returns its `/v1` URL, or None when it is not installed."""
    if not os.path.exists(ROUTER):
        print(f"skipping vllm-router: {ROUTER} not found", file=sys.stderr)
        return None
    port = free_port()
    # Each router its own Prometheus port: the default (29000) is taken by the first.
    args = [ROUTER, "--host", "127.0.0.1", "--port", str(port), "--prometheus-port", str(free_port()),
            "--worker-urls", *[u.rsplit("/v1", 1)[0] for u in urls]]
    if policy:
        args += ["--policy", policy]
    log = open(f"/tmp/vllm-router-{port}.log", "w")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    started_pids.append(proc.pid)
    for _ in range(240):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5)
            return f"http://127.0.0.1:{port}/v1"
        except Exception:
            if proc.poll() is not None:
                raise SystemExit(f"vllm-router exited: see /tmp/vllm-router-{port}.log")
            time.sleep(0.5)
    raise SystemExit(f"vllm-router did not become healthy: see /tmp/vllm-router-{port}.log")


def start_service(binary, backend_urls, extra=()):
    port = free_port()
    env = dict(os.environ, SYSTEMONE_READ_TIMEOUT_SECS="600", SYSTEMONE_REQUEST_TIMEOUT_SECS="1200")
    env.pop("SYSTEMONE_API_KEYS", None)
    proc = subprocess.Popen([binary, "serve", "--backend", "llamacpp", "--backend-url",
                             ",".join(backend_urls), "--listen", f"127.0.0.1:{port}", *extra],
                            env=env, stdout=subprocess.DEVNULL,
                            stderr=open(f"/tmp/fleet-measure-service-{port}.log", "w"))
    started_pids.append(proc.pid)
    for _ in range(1200):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5)
            return proc, port
        except Exception:
            if proc.poll() is not None:
                break
            time.sleep(0.5)
    raise SystemExit(f"the service did not become ready: see /tmp/fleet-measure-service-{port}.log")


def state(setup, i):
    """A ticket of about 300 tokens, its own per setup and index."""
    lines = [f"Ticket {setup}-{i}: the customer writes about order {1000 + i}."]
    lines += [f"Line {k}: the parcel {i}-{k} arrived late and the invoice shows item {k * 7 + i} "
              f"twice, which the customer wants refunded to card ending {k:02d}{i:02d}." for k in range(12)]
    return "\n".join(lines)


QUESTIONS = {
    f"q{j}": {"type": "choice", "instructions": text,
              "criteria": {"refund": "a refund", "replace": "a replacement", "other": "something else"}}
    for j, text in enumerate([
        "What does the customer want?", "What should support offer?",
        "What would resolve the ticket?", "What is the customer's main request?",
        "What action should follow?"])
}


def ask(port, body):
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/systemone",
                                     data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
    return json.loads(urllib.request.urlopen(request, timeout=1200).read())


def run_setup(name, binary, service_urls, replica_urls, states):
    proc, port = start_service(binary, service_urls)
    plan = []  # (state index, repeated?) interleaved: new i, then i-1 again
    for i in range(states):
        plan.append((i, False))
        if i >= 1:
            plan.append((i - 1, True))
    plan.append((states - 1, True))
    rows = []
    for i, repeated in plan:
        before = sum(prompt_tokens(u) for u in replica_urls)
        answer = ask(port, {"state": state(name, i), "questions": QUESTIONS})
        after = sum(prompt_tokens(u) for u in replica_urls)
        rows.append((i, repeated, after - before, answer["usage"]["evaluated_tokens"]))
    proc.terminate()
    proc.wait()
    started_pids.remove(proc.pid)
    first = {i: metered for i, rep, metered, _ in rows if not rep}
    new = [m for _, rep, m, _ in rows if not rep]
    again = [m for _, rep, m, _ in rows if rep]
    hits = sum(1 for i, rep, m, _ in rows if rep and m <= 0.5 * first[i])
    return {
        "setup": name,
        "calls": len(rows),
        "per_call": sum(m for _, _, m, _ in rows) / len(rows),
        "new": sum(new) / len(new),
        "repeated": sum(again) / len(again),
        "hit_rate": hits / len(again),
        "usage_per_call": sum(u for *_, u in rows) / len(rows),
    }


def replica_reads(port):
    """`systemone_replica_reads_total` by (replica label, status class)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {(replica, status): float(value) for replica, status, value in re.findall(
        r'^systemone_replica_reads_total\{[^}]*replica="([^"]+)",status="([^"]+)"\}\s+([0-9.e+]+)',
        text, re.M)}


def kill_run(binary, urls, calls):
    """A replica killed mid-run, then started again on its port: each call's status, time
    and the replicas that served it."""
    proc, port = start_service(binary, urls)
    victim = urls[-1]
    victim_port = victim.split(":")[2].split("/")[0]
    victim_pid = started_pids[len(urls) - 1]
    print("| call | event | status | seconds | served by | tried first, failed |")
    print("|---|---|---|---|---|---|")
    for n in range(calls):
        event = ""
        if n == calls // 3:
            os.kill(victim_pid, signal.SIGKILL)
            started_pids.remove(victim_pid)
            event = f"replica :{victim_port} killed before this call"
        if n == 2 * calls // 3:
            env = dict(os.environ, SYSTEMONE_LLAMA_ARGS="--metrics", SYSTEMONE_LLAMA_THREADS="1")
            out = subprocess.run([f"{ROOT}/scripts/start-llama.sh", victim_port], env=env, check=True,
                                 capture_output=True, text=True, cwd=ROOT).stdout
            values = dict(line.split("=", 1) for line in out.split() if "=" in line)
            started_pids.append(int(values["LLAMA_PID"]))
            event = f"replica :{victim_port} started again before this call"
        before = replica_reads(port)
        started = time.time()
        try:
            ask(port, {"state": state("kill", n), "questions": QUESTIONS})
            status = 200
        except urllib.error.HTTPError as e:
            status = e.code
        seconds = time.time() - started
        after = replica_reads(port)
        grew = [(r.split(":")[1], st) for (r, st) in after if after[(r, st)] > before.get((r, st), 0)]
        served = ", ".join(f":{r}" for r, st in grew if st == "2xx")
        failed = ", ".join(f":{r} ({st})" for r, st in grew if st != "2xx")
        print(f"| {n} | {event} | {status} | {seconds:.1f} | {served} | {failed} |")
    proc.terminate()
    proc.wait()
    started_pids.remove(proc.pid)


def skew_run(binary, urls, calls, callers=6, hot_share=0.9):
    """One hot state: `callers` concurrent callers make `calls` 5-question calls, each on
    the hot state with probability `hot_share` (else a new state), once with the default
    bounded load (`--replica-load-factor 1.25`) and once with the bound lifted (the largest
    factor, 100: pure affinity). The same seeded plan for both."""
    import random
    rng = random.Random(7)
    plan = [rng.random() < hot_share for _ in range(calls)]
    print("| replica load factor | calls | statuses | calls/s | p50 s | p95 s | reads per replica "
          "| prompt tokens evaluated per call |")
    print("|---|---|---|---|---|---|---|---|", flush=True)
    for factor in ["1.25", "100"]:
        proc, port = start_service(binary, urls, ["--replica-load-factor", factor])
        hot = state(f"hot-{factor}", 0)
        ask(port, {"state": hot, "questions": QUESTIONS})  # the hot head cached once
        before_reads = replica_reads(port)
        before_tokens = sum(prompt_tokens(u) for u in urls)
        times, statuses = [], []
        lock = threading.Lock()
        queue = list(enumerate(plan))

        def caller():
            while True:
                with lock:
                    if not queue:
                        return
                    n, is_hot = queue.pop(0)
                body = {"state": hot if is_hot else state(f"cold-{factor}", n), "questions": QUESTIONS}
                started = time.time()
                status = 200
                try:
                    ask(port, body)
                except urllib.error.HTTPError as e:
                    status = e.code
                with lock:
                    times.append(time.time() - started)
                    statuses.append(status)

        started = time.time()
        threads = [threading.Thread(target=caller) for _ in range(callers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.time() - started
        after_reads = replica_reads(port)
        tokens = sum(prompt_tokens(u) for u in urls) - before_tokens
        proc.terminate()
        proc.wait()
        started_pids.remove(proc.pid)
        per_replica = {}
        for (replica, status), value in after_reads.items():
            if status == "2xx":
                per_replica[replica] = value - before_reads.get((replica, status), 0)
        shares = " / ".join(f"{per_replica.get(u.split('//')[1].split('/')[0], 0):.0f}"
                            for u in urls)
        times.sort()
        p50 = times[len(times) // 2]
        p95 = times[min(len(times) - 1, int(0.95 * len(times)))]
        answered = ", ".join(f"{statuses.count(st)} x {st}" for st in sorted(set(statuses)))
        print(f"| {factor} | {calls} | {answered} | {calls / wall:.3f} | {p50:.1f} | {p95:.1f} "
              f"| {shares} | {tokens / calls:.0f} |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--states", type=int, default=4)
    parser.add_argument("--kill", type=int, default=0,
                        help="instead: this many calls with the replica list, the last replica "
                             "killed a third of the way and started again at two thirds")
    parser.add_argument("--skew", type=int, default=0,
                        help="instead: this many calls from 6 callers, 9 in 10 on one hot state, "
                             "with the default bounded load and with the bound lifted")
    parser.add_argument("--binary", default=f"{os.environ.get('CARGO_TARGET_DIR', ROOT + '/target')}/debug/systemone")
    args = parser.parse_args()
    try:
        urls = [start_llama() for _ in range(args.replicas)]
        print(f"replicas: {urls}", file=sys.stderr)
        if args.kill:
            kill_run(args.binary, urls, args.kill)
            return
        if args.skew:
            skew_run(args.binary, urls, args.skew)
            return
        rr = RoundRobin(urls)
        setups = [
            ("one replica alone", [urls[0]], [urls[0]]),
            ("round-robin TCP balancer", [rr.url()], urls),
        ]
        for label, policy in [("default policy", None), ("consistent_hash on x-session-id", "consistent_hash")]:
            router = start_router(urls, policy)
            if router:
                setups.append((f"vllm-router, {label}", [router], urls))
        setups.append(("the service's replica list", urls, urls))
        print("| setup | calls | prompt tokens evaluated per call (replicas' /metrics) | x floor "
              "| per new call | per repeated call | repeated-state hit rate | evaluated per call (answers' usage) |")
        print("|---|---|---|---|---|---|---|---|", flush=True)
        floor = None
        for name, service_urls, replica_urls in setups:
            print(f"running: {name}", file=sys.stderr)
            r = run_setup(name, args.binary, service_urls, replica_urls, args.states)
            floor = floor or r["per_call"]
            print(f"| {r['setup']} | {r['calls']} | {r['per_call']:.0f} | {r['per_call'] / floor:.2f} "
                  f"| {r['new']:.0f} | {r['repeated']:.0f} | {r['hit_rate']:.0%} | {r['usage_per_call']:.0f} |",
                  flush=True)
    finally:
        stop_all()


if __name__ == "__main__":
    main()
