#!/usr/bin/env bash
# Starts a real vLLM (CPU) serving Gemma 3 270M in float32 on 127.0.0.1, in the background,
# waits until it is healthy and has answered one warm-up completion (a cold server takes
# 6-20 s over its first request). Installs it first when needed (scripts/install-vllm.sh).
#
#   scripts/start-vllm.sh [PORT]      default port: $SYSTEMONE_VLLM_PORT or 8082; 0 picks a free one
#
# SYSTEMONE_VLLM_SERVE picks the model (served under that name):
#   gemma-3-270m   (default) Gemma 3 270M, converted by scripts/install-vllm.sh;
#   qwen3-random   a small Qwen 3 with random weights and the real Qwen 3 tokenizer, built
#                  once by scripts/make-qwen3-random.py into $SYSTEMONE_CACHE/vllm/qwen3-random:
#                  the model family vLLM's own /v1/systemone reads (benches/vllm_native.rs).
# SYSTEMONE_VLLM_ARGS adds flags to vLLM's command line (split on whitespace), e.g.
# SYSTEMONE_VLLM_ARGS="--block-size 32", what the README recommends for throughput and
# benches/vllm_native.rs measures.
#
# SYSTEMONE_VLLM_OTLP_TRACES_ENDPOINT=http://HOST:PORT/v1/traces makes vLLM export its spans
# there over OTLP/HTTP (`--otlp-traces-endpoint`, with OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=
# http/protobuf: vLLM's default is gRPC), each request's `llm_request` span under the
# `traceparent` its request carried (tests/live/vllm_traces.rs). Spans are sent in batches
# every OTEL_BSP_SCHEDULE_DELAY ms (500 here unless set; the SDK's default is 5000). Nothing
# need listen there: an export that fails is dropped off vLLM's request path.
#
# SYSTEMONE_VLLM_KERNELS=avx2 runs vLLM's AVX2 kernels even on an AVX-512 CPU (what
# scripts/preflight.sh asks for when SYSTEMONE_CPU_FLAGS leaves out avx512f); the kernel
# library vLLM loaded is named on the "ready" line.
#
# Prints VLLM_URL=http://127.0.0.1:PORT/v1, VLLM_PID=…, VLLM_LOG=… and VLLM_MODEL=… on stdout. The server
# is a process group of its own (an API server and an engine process): stop it with
# `kill -- -$VLLM_PID`. It holds ~8 GB of RAM: do not start two.
set -euo pipefail
cd "$(dirname "$0")/.."
port="${1:-${SYSTEMONE_VLLM_PORT:-8082}}"
if [ "$port" = "0" ]; then
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
fi
vars="$(scripts/install-vllm.sh)"
eval "$vars"
served="${SYSTEMONE_VLLM_SERVE:-gemma-3-270m}"
case "$served" in
  gemma-3-270m)
    model_dir="$VLLM_MODEL_DIR"
    warm_ids="236771,236770" # "0", "1"
    ;;
  qwen3-random)
    model_dir="$VLLM_HOME/qwen3-random"
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HOME="$VLLM_HOME/hf-home" \
      "$VLLM_PYTHON" scripts/make-qwen3-random.py "$model_dir" >&2
    warm_ids="15,16" # "0", "1"
    ;;
  *)
    echo "start-vllm: SYSTEMONE_VLLM_SERVE=$served: expected gemma-3-270m or qwen3-random" >&2
    exit 2
    ;;
esac
cache="${SYSTEMONE_CACHE:-$HOME/.cache/systemone}"
log="$cache/vllm-server-$port.log"
# Startup takes 80-120 s on 2 shared cores (more when the machine is busy).
bound="${SYSTEMONE_VLLM_START_SECS:-600}"
# --enforce-eager: torch.compile mode starts in 160-200 s and its cache does not reload;
# float32: the numbers equal transformers' fp32 (bf16 moves them by 0.03-0.06).
# --enable-prompt-tokens-details: usage reports the prompt tokens served from the prefix cache.
# The block size stays vLLM's CPU default (128) for the tests: a smaller block lets more reads
# reuse keys and values computed in another batch, whose float32 sums can differ in the last
# bits, and the tests compare two requests' probabilities to 1e-12 (one of 2 full runs of
# tests/live/vllm_real.rs failed so at 32). For throughput serve with --block-size 32 (README).
# --max-model-len 16384 (as llama-server's -c): a read of a 150-option question with short
# option texts is ~8,100 tokens (measured), so 255 options need ~14,000.
# SYSTEMONE_VLLM_KERNELS=avx2 (scripts/preflight.sh sets it for a CPU without avx512f): on
# a CPU that has AVX-512 anyway, vLLM is made to load its AVX2 kernels and torch, oneDNN and
# MKL are capped at AVX2 (scripts/vllm-avx2/sitecustomize.py), so the AVX2 path really runs.
kernel_env=()
want_kernels=""
if [ "${SYSTEMONE_VLLM_KERNELS:-}" = avx2 ]; then
  want_kernels="_C_AVX2"
  if grep -m1 '^flags' /proc/cpuinfo | grep -qw avx512f; then
    kernel_env=("PYTHONPATH=$PWD/scripts/vllm-avx2${PYTHONPATH:+:$PYTHONPATH}"
      ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2)
    echo "start-vllm: SYSTEMONE_VLLM_KERNELS=avx2 on an AVX-512 CPU: vLLM runs its AVX2 kernels" >&2
  fi
fi
trace_env=()
trace_args=()
if [ -n "${SYSTEMONE_VLLM_OTLP_TRACES_ENDPOINT:-}" ]; then
  trace_env=(OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf
    OTEL_BSP_SCHEDULE_DELAY="${OTEL_BSP_SCHEDULE_DELAY:-500}")
  trace_args=(--otlp-traces-endpoint "$SYSTEMONE_VLLM_OTLP_TRACES_ENDPOINT")
fi
started=$SECONDS
env "${kernel_env[@]}" "${trace_env[@]}" VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 \
  DO_NOT_TRACK=1 VLLM_CPU_KVCACHE_SPACE="${SYSTEMONE_VLLM_KVCACHE_GB:-1}" \
  VLLM_CACHE_ROOT="$VLLM_HOME/run-cache/vllm" TORCHINDUCTOR_CACHE_DIR="$VLLM_HOME/run-cache/inductor" \
  HF_HOME="$VLLM_HOME/hf-home" \
  setsid "$VLLM_PYTHON" -m vllm.entrypoints.openai.api_server --model "$model_dir" \
  --served-model-name "$served" --host 127.0.0.1 --port "$port" --dtype float32 \
  --max-model-len "${SYSTEMONE_VLLM_MAX_MODEL_LEN:-16384}" --generation-config vllm --enforce-eager \
  --enable-prompt-tokens-details "${trace_args[@]}" ${SYSTEMONE_VLLM_ARGS:-} \
  >"$log" 2>&1 </dev/null &
pid=$!
stop() { kill -- -"$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true; }
root="http://127.0.0.1:$port"
noted=$SECONDS
while [ $((SECONDS - started)) -lt "$bound" ]; do
  if [ $((SECONDS - noted)) -ge 30 ]; then
    echo "start-vllm: still starting ($((SECONDS - started)) s of at most $bound; log: $log)" >&2
    noted=$SECONDS
  fi
  if curl -sf "$root/health" >/dev/null 2>&1; then
    echo "start-vllm: healthy after $((SECONDS - started)) s; warming up" >&2
    # One masked one-token read, as the service sends them.
    warm='{"model":"'"$served"'","messages":[{"role":"user","content":"Pick a number."},
      {"role":"assistant","content":"answer="}],"continue_final_message":true,
      "add_generation_prompt":false,"max_tokens":1,"temperature":0,"logprobs":true,
      "top_logprobs":2,"logprob_token_ids":['"$warm_ids"'],"allowed_token_ids":['"$warm_ids"']}'
    if ! curl -sf -m 300 -H 'content-type: application/json' -d "$warm" \
      "$root/v1/chat/completions" >/dev/null; then
      echo "start-vllm: the warm-up completion failed; last lines of $log:" >&2
      tail -20 "$log" >&2
      stop
      exit 1
    fi
    # The kernel library each of vLLM's processes mapped (its engine runs the model).
    kernels="$(for p in $(pgrep -g "$pid"); do
      grep -o 'vllm/_C[A-Za-z0-9_]*\.abi3\.so' "/proc/$p/maps" 2>/dev/null || true
    done | sed 's|vllm/||; s|\.abi3\.so||' | sort -u | tr '\n' ' ')"
    kernels="${kernels% }"
    if [ -n "$want_kernels" ] && [ "$kernels" != "$want_kernels" ]; then
      echo "start-vllm: asked for $want_kernels, vLLM loaded '${kernels:-none}' (log: $log)" >&2
      stop
      exit 1
    fi
    echo "start-vllm: ready after $((SECONDS - started)) s, kernels ${kernels:-unknown} (log: $log)" >&2
    echo "VLLM_URL=$root/v1"
    echo "VLLM_PID=$pid"
    echo "VLLM_LOG=$log"
    echo "VLLM_MODEL=$served"
    exit 0
  fi
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "start-vllm: vLLM exited; last lines of $log:" >&2
    tail -20 "$log" >&2
    exit 1
  fi
  sleep 1
done
echo "start-vllm: vLLM did not become healthy within $bound s (log: $log)" >&2
stop
exit 1
