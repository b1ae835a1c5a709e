#!/usr/bin/env bash
# Side-by-side load benchmark: the base commit's `systemone` against this working tree's.
#
#   scripts/bench-load-ab.sh [BASE_COMMIT]     (default: the merge base with main)
#
# Builds BASE_COMMIT's binary (release) in a temporary git worktree, with its own target
# directory under target/ab-base (kept, so the next build is incremental, and the binary
# cached per commit), removes the worktree, then runs `cargo bench --bench load` with
# LOAD_BASE_BIN set: both binaries run at once against one fake vLLM and every row
# alternates between them (see benches/load.rs for the knobs: LOAD_SECS, LOAD_ROUNDS, LOAD_LEVELS,
# LOAD_SCENARIOS, LOAD_LOGS, ...).
set -euo pipefail
root=$(git rev-parse --show-toplevel)
base=${1:-$(git -C "$root" merge-base HEAD main)}
sha=$(git -C "$root" rev-parse --short=12 "$base^{commit}")
target="$root/target/ab-base"
bin="$target/systemone-$sha"
if [[ ! -x "$bin" ]]; then
    tree=$(mktemp -d "${TMPDIR:-/tmp}/systemone-base-XXXXXX")
    trap 'git -C "$root" worktree remove --force "$tree/src" >/dev/null 2>&1 || true; rm -rf "$tree"' EXIT
    git -C "$root" worktree add --detach "$tree/src" "$sha" >&2
    CARGO_TARGET_DIR="$target" cargo build --release --bin systemone \
        --manifest-path "$tree/src/Cargo.toml" >&2
    cp "$target/release/systemone" "$bin"
fi
echo "base $sha: $bin" >&2
cd "$root"
LOAD_BASE_BIN="$bin" exec cargo bench --bench load
