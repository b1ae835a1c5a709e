#!/usr/bin/env bash
# Starts a throwaway redis-server for the tests (the per-key limit store shared by
# replicas): on 127.0.0.1, a free port, no persistence (no RDB snapshots, no AOF), in the
# background, and waits until it answers PING. Installs Debian's redis-server first when it
# is not on PATH (apt-get; sudo when not root).
#
#   scripts/start-redis.sh
#
# Prints REDIS_URL=redis://127.0.0.1:PORT and REDIS_PID=… on stdout.
set -euo pipefail
if ! command -v redis-server >/dev/null 2>&1; then
  sudo=""
  if [ "$(id -u)" != "0" ]; then sudo="sudo"; fi
  echo "start-redis: installing redis-server (apt-get)" >&2
  $sudo apt-get install -y redis-server >&2 || { $sudo apt-get update >&2 && $sudo apt-get install -y redis-server >&2; }
fi
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
  --loglevel warning >/dev/null 2>&1 &
pid=$!
for _ in $(seq 1 200); do
  if [ "$(redis-cli -p "$port" ping 2>/dev/null)" = "PONG" ]; then
    echo "REDIS_URL=redis://127.0.0.1:$port"
    echo "REDIS_PID=$pid"
    exit 0
  fi
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "start-redis: redis-server exited (port $port)" >&2
    exit 1
  fi
  sleep 0.1
done
echo "start-redis: redis-server did not answer within 20 s" >&2
kill "$pid" 2>/dev/null || true
exit 1
