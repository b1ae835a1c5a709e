#!/usr/bin/env bash
# Benchmarks multi-token option labels against a real llama.cpp backend (benches/labels.rs):
# latency, reads and prompt tokens per option count, and the trie's wave schedule against
# level by level. Starts its own llama-server (Gemma 3 270M) on a free port, runs the
# bench, and stops the server on exit.
#
#   scripts/bench-labels.sh            knobs: BENCH_* environment variables (see the bench)
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(scripts/start-llama.sh 0)"
trap 'kill "$LLAMA_PID" 2>/dev/null || true' EXIT
echo "bench-labels: llama-server $LLAMA_URL (pid $LLAMA_PID, log $LLAMA_LOG)" >&2
export SYSTEMONE_LLAMA_URL="$LLAMA_URL"
cargo bench --bench labels "$@"
