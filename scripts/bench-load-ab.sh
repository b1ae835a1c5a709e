#!/usr/bin/env bash
# Side-by-side load benchmark: the base commit's `systemone` against this working tree's.
#
#   scripts/bench-load-ab.sh [BASE_COMMIT]     (default: the merge base with main)
#
# Builds BASE_COMMIT's binary in a temporary git worktree as the bench builds this tree's
# (`cargo bench`: the same profile and features) in the same target directory
# ($CARGO_TARGET_DIR, else target/: the dependencies both share are compiled once), caches
# it per commit under ab-base/ there, removes the worktree, then runs `cargo bench --bench load` with
# LOAD_BASE_BIN set: both binaries run at once against one fake vLLM and every row
# alternates between them (see benches/load.rs for the knobs: LOAD_SECS, LOAD_ROUNDS, LOAD_LEVELS,
# LOAD_SCENARIOS, LOAD_LOGS, ...).
set -euo pipefail
root=$(git rev-parse --show-toplevel)
base=${1:-$(git -C "$root" merge-base HEAD main)}
sha=$(git -C "$root" rev-parse --short=12 "$base^{commit}")
target=${CARGO_TARGET_DIR:-$root/target}
bin="$target/ab-base/systemone-$sha"
if [[ ! -x "$bin" ]]; then
    tree=$(mktemp -d "${TMPDIR:-/tmp}/systemone-base-XXXXXX")
    trap 'git -C "$root" worktree remove --force "$tree/src" >/dev/null 2>&1 || true; rm -rf "$tree"' EXIT
    git -C "$root" worktree add --detach "$tree/src" "$sha" >&2
    # Cargo names a workspace's own units by a hash that leaves out where the workspace
    # is: with the same dependencies, the base's lib, bin and bench would overwrite this
    # tree's, which Cargo then takes for fresh (measured: "new" ran the base's binary).
    # Full debug info for the base's own package changes that hash and no instruction.
    CARGO_TARGET_DIR="$target" cargo bench --bench load --no-run \
        --config 'profile.bench.package.systemone.debug=1' \
        --manifest-path "$tree/src/Cargo.toml" >&2
    mkdir -p "$target/ab-base"
    cp "$target/release/systemone" "$bin"
    git -C "$root" worktree remove --force "$tree/src" && rm -rf "$tree"
fi
echo "base $sha: $bin" >&2
cd "$root"
LOAD_BASE_BIN="$bin" exec cargo bench --bench load
