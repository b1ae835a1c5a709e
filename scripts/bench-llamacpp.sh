#!/usr/bin/env bash
# Benchmarks the service against a real llama.cpp backend (benches/llamacpp.rs): overhead
# against llama-server directly, the `accuracy` vs `cost` layouts, and the peer
# `system-one-adapter` on the same backend. Starts its own llama-server (Gemma 3 270M) on a
# free port, installs the peer into .venv, runs the bench, and stops the server on exit.
#
#   scripts/bench-llamacpp.sh            knobs: BENCH_* environment variables (see the bench)
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(scripts/start-llama.sh 0)"
trap 'kill "$LLAMA_PID" 2>/dev/null || true' EXIT
echo "bench-llamacpp: llama-server $LLAMA_URL (pid $LLAMA_PID, log $LLAMA_LOG)" >&2
.venv/bin/python -m pip install --quiet 'system-one-adapter[openai]==0.2.1' >&2
export SYSTEMONE_LLAMA_URL="$LLAMA_URL"
export SYSTEMONE_PYTHON="$PWD/.venv/bin/python"
cargo bench --bench llamacpp "$@"
