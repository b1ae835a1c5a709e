# shellcheck shell=bash
# Sourced by the scripts: `with_progress WHAT CMD...` runs CMD and, while it runs, prints
# "WHAT: still working (N s)" on stderr every 30 s (SYSTEMONE_PROGRESS_SECS), so a long
# quiet step (a llama.cpp build, a release build, a vLLM install) is never mistaken for a
# hang. Returns CMD's exit status.
with_progress() {
  local what="$1" start ticker rc=0
  shift
  start="$(date +%s)"
  (
    while sleep "${SYSTEMONE_PROGRESS_SECS:-30}"; do
      echo "$what: still working ($(($(date +%s) - start)) s)" >&2
    done
  ) >/dev/null & # its stdout is not a caller's `$(...)`, which would wait for its last sleep
  ticker=$!
  "$@" || rc=$?
  kill "$ticker" 2>/dev/null || true
  wait "$ticker" 2>/dev/null || true
  return "$rc"
}
