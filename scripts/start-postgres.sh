#!/usr/bin/env bash
# Starts a throwaway PostgreSQL for the tests (the decision ledger shared by replicas): a
# fresh cluster in a temp dir, trust auth, listening on 127.0.0.1 on a free port (its unix
# socket in a temp dir too), in the background, and waits until it accepts connections.
# Installs Debian's postgresql first when initdb is not found (apt-get; sudo when not root).
# As root, the server runs as the `postgres` user (PostgreSQL refuses to run as root).
#
#   scripts/start-postgres.sh             a new cluster
#   scripts/start-postgres.sh DIR PORT    the cluster in DIR again, on PORT (a fault test
#                                         restarting the server it stopped)
#
# Prints POSTGRES_URL=postgres://postgres@127.0.0.1:PORT/postgres, POSTGRES_PID=… and
# POSTGRES_DIR=… (the cluster; remove it when done) on stdout.
set -euo pipefail
find_bin() {
  local dir
  dir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
  if [ -n "$dir" ] && [ -x "$dir/initdb" ]; then echo "$dir"; return; fi
  if command -v initdb >/dev/null 2>&1; then dirname "$(command -v initdb)"; fi
}
bin="$(find_bin)"
if [ -z "$bin" ]; then
  sudo=""
  if [ "$(id -u)" != "0" ]; then sudo="sudo"; fi
  echo "start-postgres: installing postgresql (apt-get)" >&2
  install() { $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql >&2; }
  install || { $sudo apt-get update >&2 && install; }
  bin="$(find_bin)"
fi
as_owner=()
if [ "$(id -u)" = "0" ]; then as_owner=(runuser -u postgres --); fi
if [ $# -ge 2 ]; then
  dir="$1"; port="$2"
else
  dir="$(mktemp -d /tmp/systemone-pg.XXXXXX)"
  if [ "$(id -u)" = "0" ]; then chown postgres "$dir"; fi
  "${as_owner[@]}" "$bin/initdb" -D "$dir/data" -U postgres --auth=trust --encoding=UTF8 \
    --no-instructions >/dev/null
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
fi
"${as_owner[@]}" "$bin/postgres" -D "$dir/data" -p "$port" -h 127.0.0.1 -k "$dir" \
  -c max_connections=200 -c log_min_messages=warning >"$dir/postgres.log" 2>&1 &
pid=$!
for _ in $(seq 1 200); do
  if "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" 2>/dev/null; then
    echo "POSTGRES_URL=postgres://postgres@127.0.0.1:$port/postgres"
    # The postmaster itself (as root, $! is runuser's).
    echo "POSTGRES_PID=$(head -n 1 "$dir/data/postmaster.pid")"
    echo "POSTGRES_DIR=$dir"
    exit 0
  fi
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "start-postgres: postgres exited (port $port):" >&2
    cat "$dir/postgres.log" >&2
    exit 1
  fi
  sleep 0.1
done
echo "start-postgres: postgres did not accept connections within 20 s" >&2
kill "$pid" 2>/dev/null || true
exit 1
