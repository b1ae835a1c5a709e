#!/usr/bin/env python3
"""Measures escalation when unsure on held-out labelled data (issue 27), through the product:
`systemone serve` fronts and `systemone eval`.

    scripts/escalation-eval.py --out-dir escalation-run [--spam-per-group 30] [--sotu-options 4]

What runs, all on 127.0.0.1:

- llama-server with Gemma 3 270M: `$SYSTEMONE_LLAMA_URL` (or `--llama-url`) when set, else
  started here by `scripts/start-llama.sh 0` and stopped on exit;
- the **strong** model: a second `systemone serve` over that llama-server, started with
  `--permutations P` (`--strong-permutations`, default 4: every question it is asked is
  read in min(P, options) rotated option orders and averaged, which cancels Gemma's
  preference for a label position), reached by the fronts as a native upstream
  (`backend = "systemone"`);
- per configuration a front `systemone serve --config <registry>` whose `cheap` model is
  the same llama-server read once (the default, one order), and `systemone eval --url` on it.

Configurations, one front each: `cheap` alone; `strong` alone (the front serving the native
model); `cheap` escalating to `strong` below each of two confidence thresholds. The
thresholds are picked on each task's **development** split, never on the evaluation split:
the cheap model's confidences on the dev lines (`eval --raw-out`, confidence = 1 − entropy /
ln n as the service computes it), and the thresholds are their `--dev-quantile`s (default
0.25 and 0.5: escalate about the least sure quarter, and half).

Data, by the project's scripts: SpamAssassin (`scripts/spam-data.py`: dev = `--split train`,
evaluation = `--split heldout`, i.e. easy-ham-2, hard-ham-1, spam-2; subject plus the body
cut to `--spam-chars`) and the State of the Union (`scripts/sotu-data.py --options K`: dev =
even years, evaluation = odd years, `--sotu-per-president` addresses each; `--sotu-lines N`
keeps the first N lines of each split, which the script already shuffled with its seed).

Reported per task and configuration: the scored answers, accuracy and ECE (equal-size 15
bins and equal-width 10, from `eval`'s report), upstream requests per answer as the front
counted them (`usage.upstream_requests` summed: its llama-server reads plus its requests to
the native upstream, from the front's `systemone_upstream_responses_total` before and after),
llama-server reads per answer in total (the front's plus the strong upstream's own), and the
escalated share (`systemone_escalated_answers_total`). Writes `results.json`, `results.md`
and every eval report under `--out-dir`.
"""

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = "gemma-3-270m"


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def counters(base: str) -> dict:
    """The service's counters this script reads, from its `/metrics`."""
    out = {"llamacpp": 0.0, "systemone": 0.0, "escalated": 0.0}
    for line in get(f"{base}/metrics").splitlines():
        m = re.match(r'systemone_upstream_responses_total\{dialect="(\w+)",status="[^"]*"\} (\S+)', line)
        if m and m.group(1) in out:
            out[m.group(1)] += float(m.group(2))
        m = re.match(r"systemone_escalated_answers_total\{[^}]*\} (\S+)", line)
        if m:
            out["escalated"] += float(m.group(1))
    return out


class Serve:
    """A `systemone serve` on a free port; stopped by `stop()`."""

    def __init__(self, binary: str, args: list, log: str):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = open(log, "w")
        cmd = [binary, "serve", "--listen", f"127.0.0.1:{self.port}"] + args
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT)
        for _ in range(600):
            if self.proc.poll() is not None:
                sys.exit(f"escalation-eval: {' '.join(cmd)} exited; see {log}")
            try:
                get(f"{self.base}/readyz")
                return
            except OSError:
                time.sleep(0.2)
        self.stop()
        sys.exit(f"escalation-eval: {' '.join(cmd)} not ready in 120 s; see {log}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


TIMEOUTS = ["--read-timeout-secs", "300", "--request-timeout-secs", "900"]


def cheap_model(llama: str, rule: str) -> str:
    return (f'[[model]]\nname = "cheap"\ndefault = true\nbackend = "llamacpp"\n'
            f'backend_url = "{llama}"\nupstream_model = "{MODEL}"\ntoken_table = "gemma-3"\n'
            f"token_check_interval_secs = 0\n{rule}\n")


def strong_model(url: str, default: bool) -> str:
    return (f'[[model]]\nname = "strong"\n{"default = true" if default else ""}\n'
            f'backend = "systemone"\nbackend_url = "{url}/v1"\nupstream_model = "{MODEL}"\n')


def run_eval(binary: str, data: str, url: str, report: str, raw: str, concurrency: int) -> dict:
    cmd = [binary, "eval", "--data", data, "--url", url, "--report", report,
           "--concurrency", str(concurrency), "--progress", "false"]
    if raw:
        cmd += ["--raw-out", raw]
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    print(out, file=sys.stderr, flush=True)
    with open(report, encoding="utf-8") as f:
        return json.load(f)


def confidence(p: list) -> float:
    """1 − entropy / ln n, as the service computes an answer's confidence."""
    import math
    if len(p) < 2:
        return 1.0
    h = -sum(x * math.log(x) for x in p if x > 0)
    return min(1.0, max(0.0, 1.0 - h / math.log(len(p))))


def quantile(xs: list, q: float) -> float:
    xs = sorted(xs)
    i = min(len(xs) - 1, max(0, int(round(q * (len(xs) - 1)))))
    return xs[i]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--binary", default=os.path.join(ROOT, "target", "debug", "systemone"))
    ap.add_argument("--llama-url", default=os.environ.get("SYSTEMONE_LLAMA_URL"))
    ap.add_argument("--tasks", default="spam,sotu")
    ap.add_argument("--spam-per-group", type=int, default=30, help="evaluation messages per held-out group")
    ap.add_argument("--spam-dev-per-group", type=int, default=20, help="dev messages per train group")
    ap.add_argument("--spam-chars", type=int, default=800)
    ap.add_argument("--sotu-options", type=int, default=4)
    ap.add_argument("--sotu-per-president", type=int, default=1)
    ap.add_argument("--sotu-lines", type=int, default=0,
                    help="keep only the first N lines of each sotu split (its own seeded shuffle); 0: all")
    ap.add_argument("--strong-permutations", type=int, default=4)
    ap.add_argument("--dev-quantile", type=float, action="append",
                    help="dev confidence quantiles for the two thresholds (default 0.25 and 0.5)")
    ap.add_argument("--concurrency", type=int, default=2)
    args = ap.parse_args()
    quantiles = args.dev_quantile or [0.25, 0.5]
    out = os.path.abspath(args.out_dir)
    os.makedirs(out, exist_ok=True)
    binary = os.path.abspath(args.binary)

    tasks = {
        "spam": {
            "dev": ["scripts/spam-data.py", "--split", "train", "--per-group", str(args.spam_dev_per_group),
                    "--chars", str(args.spam_chars)],
            "eval": ["scripts/spam-data.py", "--split", "heldout", "--per-group", str(args.spam_per_group),
                     "--chars", str(args.spam_chars)],
        },
        "sotu": {
            "dev": ["scripts/sotu-data.py", "--split", "dev", "--options", str(args.sotu_options),
                    "--per-president", str(args.sotu_per_president)],
            "eval": ["scripts/sotu-data.py", "--split", "eval", "--options", str(args.sotu_options),
                     "--per-president", str(args.sotu_per_president)],
        },
    }
    chosen = [t for t in args.tasks.split(",") if t]
    started = []
    llama = args.llama_url
    llama_pid = None
    try:
        if not llama:
            env = subprocess.run(["scripts/start-llama.sh", "0"], cwd=ROOT, check=True,
                                 capture_output=True, text=True).stdout
            vals = dict(line.split("=", 1) for line in env.split())
            llama, llama_pid = vals["LLAMA_URL"], int(vals["LLAMA_PID"])
        print(f"escalation-eval: llama-server {llama}, binary {binary}", file=sys.stderr)
        strong = Serve(binary, ["--backend", "llamacpp", "--backend-url", llama, "--model", MODEL,
                                "--token-table", "gemma-3", "--token-check-interval-secs", "0",
                                "--permutations", str(args.strong_permutations)] + TIMEOUTS,
                       os.path.join(out, "strong.log"))
        started.append(strong)
        results = {"llama_url": llama, "binary": binary, "strong_permutations": args.strong_permutations,
                   "dev_quantiles": quantiles, "tasks": {}}
        for task in chosen:
            files = {}
            for split, cmd in tasks[task].items():
                files[split] = os.path.join(out, f"{task}-{split}.jsonl")
                subprocess.run(cmd + ["--out", files[split]], cwd=ROOT, check=True)
                if task == "sotu" and args.sotu_lines:
                    with open(files[split], encoding="utf-8") as f:
                        kept = f.readlines()[: args.sotu_lines]
                    write(out, os.path.basename(files[split]), "".join(kept))
            # Thresholds from the cheap model's confidences on the dev split only.
            front = Serve(binary, ["--config", write(out, f"{task}-dev.toml", cheap_model(llama, ""))] + TIMEOUTS,
                          os.path.join(out, f"{task}-dev-front.log"))
            raw = os.path.join(out, f"{task}-dev.raw.jsonl")
            try:
                dev = run_eval(binary, files["dev"], front.base, os.path.join(out, f"{task}-dev.report.json"),
                               raw, args.concurrency)
            finally:
                front.stop()
            with open(raw, encoding="utf-8") as f:
                confs = [confidence(json.loads(line)["probabilities"]) for line in f if line.strip()]
            thresholds = [round(quantile(confs, q), 4) for q in quantiles]
            configs = [("cheap alone", cheap_model(llama, "")),
                       ("strong alone", cheap_model(llama, "").replace("default = true\n", "")
                        + strong_model(strong.base, True))]
            for q, t in zip(quantiles, thresholds):
                rule = f'escalate_to = "strong"\nescalate_below = {t}\n'
                configs.append((f"cheap, escalate_below {t} (dev q{q:g})",
                                cheap_model(llama, rule) + strong_model(strong.base, False)))
            task_result = {"dev_lines": dev["lines"], "dev_confidences": len(confs),
                           "thresholds": dict(zip([str(q) for q in quantiles], thresholds)), "rows": []}
            for i, (name, registry) in enumerate(configs):
                front = Serve(binary, ["--config", write(out, f"{task}-{i}.toml", registry)] + TIMEOUTS,
                              os.path.join(out, f"{task}-{i}-front.log"))
                try:
                    before = (counters(front.base), counters(strong.base))
                    report = run_eval(binary, files["eval"], front.base,
                                      os.path.join(out, f"{task}-{i}.report.json"), "", args.concurrency)
                    after = (counters(front.base), counters(strong.base))
                finally:
                    front.stop()
                fam = next(iter(report["families"].values()))
                n = report["scored_answers"]
                d = {k: after[0][k] - before[0][k] for k in after[0]}
                strong_reads = after[1]["llamacpp"] - before[1]["llamacpp"]
                row = {
                    "config": name, "answers": n, "lines": report["lines"],
                    "failures": len(report["failures"]),
                    "accuracy": fam["accuracy"], "ece15": fam["ece_equal_size_15"],
                    "ece10w": fam["ece_equal_width_10"], "brier": fam["brier"],
                    "macro_f1": fam["macro_f1"], "mean_confidence": fam["mean_confidence"],
                    "front_requests_per_answer": (d["llamacpp"] + d["systemone"]) / n,
                    "native_requests_per_answer": d["systemone"] / n,
                    "llama_reads_per_answer": (d["llamacpp"] + strong_reads) / n,
                    "escalated_share": d["escalated"] / n,
                    "seconds": report["seconds"],
                }
                task_result["rows"].append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
            results["tasks"][task] = task_result
            write(out, "results.json", json.dumps(results, indent=2) + "\n")
        table = markdown(results)
        write(out, "results.md", table)
        print(table)
    finally:
        for s in started:
            s.stop()
        if llama_pid:
            os.kill(llama_pid, signal.SIGTERM)
    return 0


def write(out: str, name: str, text: str) -> str:
    path = os.path.join(out, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def markdown(results: dict) -> str:
    lines = []
    for task, r in results["tasks"].items():
        lines.append(f"\n{task}: {r['rows'][0]['lines']} evaluation lines; thresholds from "
                     f"{r['dev_lines']} dev lines: {r['thresholds']}\n")
        lines.append("| configuration | answers | accuracy | macro F1 | ECE (15 equal-size) "
                     "| ECE (10 equal-width) | mean top probability "
                     "| upstream requests / answer (front) | llama-server reads / answer (all) "
                     "| escalated | seconds |")
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for row in r["rows"]:
            lines.append(f"| {row['config']} | {row['answers']} | {row['accuracy']:.3f} | {row['macro_f1']:.3f} "
                         f"| {row['ece15']:.3f} | {row['ece10w']:.3f} | {row['mean_confidence']:.3f} "
                         f"| {row['front_requests_per_answer']:.2f} | {row['llama_reads_per_answer']:.2f} "
                         f"| {row['escalated_share']:.1%} | {row['seconds']:.0f} |")
    return "\n".join(lines) + "\n"

if __name__ == "__main__":
    sys.exit(main())
