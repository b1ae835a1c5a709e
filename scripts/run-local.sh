#!/usr/bin/env bash
# README command 1: the service on its embedded default, from a fresh clone.
# Installs llama.cpp's llama-server and Gemma 3 270M when missing (first run ~6 minutes,
# later runs seconds), starts the backend, builds and starts the service on
# $SYSTEMONE_LISTEN (default 127.0.0.1:8080), and prints how to ask a question.
set -euo pipefail
cd "$(dirname "$0")/.."
listen="${SYSTEMONE_LISTEN:-127.0.0.1:8080}"
llama_port="${SYSTEMONE_LLAMA_PORT:-8081}"
if curl -sf "http://127.0.0.1:$llama_port/health" >/dev/null 2>&1; then
  echo "run-local: llama-server already answers on port $llama_port; using it" >&2
else
  eval "$(scripts/start-llama.sh "$llama_port")"
  trap 'kill "$LLAMA_PID" 2>/dev/null || true' EXIT
fi
# The first release build takes several minutes on 2 cores (17 were seen on a loaded
# machine); cargo's own progress shows it is working.
echo "run-local: building the service (cargo build --release; minutes the first time)" >&2
cargo build --release
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
  target/release/systemone serve
