#!/usr/bin/env bash
# Starts the local backend: llama-server with Gemma 3 270M on 127.0.0.1, in the background,
# and waits until it is healthy. Installs it first when needed (scripts/install-llama.sh).
#
#   scripts/start-llama.sh [PORT]      default port: $SYSTEMONE_LLAMA_PORT or 8081; 0 picks a free one
#
# Prints LLAMA_URL=http://127.0.0.1:PORT/v1, LLAMA_PID=… and LLAMA_LOG=… on stdout.
# $SYSTEMONE_LLAMA_ARGS, when set, is appended to llama-server's arguments.
#
# `-b 256 -ub 256`: llama-server cancels a task whose client left only between batches, so a
# smaller batch frees the slot of a timed-out read sooner: about 1 s after the close instead
# of up to one 2048-token batch (~6 s here). Prompt speed is the same here (Gemma 3 270M, 2
# cores: 433-438 tokens/s at 330 tokens, 354-357 at 5,000, for -b 2048/512/256).
set -euo pipefail
cd "$(dirname "$0")/.."
port="${1:-${SYSTEMONE_LLAMA_PORT:-8081}}"
if [ "$port" = "0" ]; then
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
fi
vars="$(scripts/install-llama.sh)"
eval "$vars"
cache="${SYSTEMONE_CACHE:-$HOME/.cache/systemone}"
log="$cache/llama-server-$port.log"
# One slot (best for one caller on 2 cores), full SWA cache so a shared prompt head is
# reused, and a bounded prompt cache (the default let RSS grow to several GB).
$LLAMA_SERVER -m "$GEMMA_GGUF" --chat-template-file "$GEMMA_TEMPLATE" \
  --alias gemma-3-270m --host 127.0.0.1 --port "$port" -np 1 -c 16384 --swa-full --cache-ram 512 \
  -b 256 -ub 256 --no-webui -t "${SYSTEMONE_LLAMA_THREADS:-2}" ${SYSTEMONE_LLAMA_ARGS:-} >"$log" 2>&1 &
pid=$!
for tick in $(seq 1 240); do
  if [ $((tick % 60)) = 0 ]; then
    echo "start-llama: still starting ($((tick / 2)) s of at most 120; log: $log)" >&2
  fi
  if curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then
    echo "LLAMA_URL=http://127.0.0.1:$port/v1"
    echo "LLAMA_PID=$pid"
    echo "LLAMA_LOG=$log"
    exit 0
  fi
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "start-llama: llama-server exited; last lines of $log:" >&2
    tail -20 "$log" >&2
    exit 1
  fi
  sleep 0.5
done
echo "start-llama: llama-server did not become healthy within 120 s (log: $log)" >&2
kill "$pid" 2>/dev/null || true
exit 1
