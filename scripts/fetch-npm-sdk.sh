#!/usr/bin/env bash
# Installs the official TypeSafe npm SDK (@typesafe-ai/sdk 0.6.0) into a cache outside the
# repository, once. Prints the install prefix; tests read it from SYSTEMONE_NPM_SDK and run
# tests/sdk/*.mjs with NODE_PATH pointing at its node_modules.
set -euo pipefail
version="0.6.0"
prefix="${SYSTEMONE_CACHE:-$HOME/.cache/systemone}/npm-sdk"
installed="$prefix/node_modules/@typesafe-ai/sdk/package.json"
if [ ! -s "$installed" ] || ! grep -q "\"version\": *\"$version\"" "$installed"; then
  mkdir -p "$prefix"
  npm install --silent --no-audit --no-fund --prefix "$prefix" "@typesafe-ai/sdk@$version" >&2
fi
echo "$prefix"
