"""vLLM on its AVX2 kernels on a CPU that has AVX-512: what an AVX2-only CPU runs.

scripts/start-vllm.sh puts this folder on PYTHONPATH when SYSTEMONE_VLLM_KERNELS=avx2 and
the CPU has avx512f (scripts/preflight.sh decides that from SYSTEMONE_CPU_FLAGS), so every
vLLM process (API server, engine core) loads it first. vLLM picks its kernel library by
asking torch whether the CPU has AVX-512 (vllm/platforms/cpu.py, `import_kernels`): told
no, it loads `_C_AVX2` instead of `_C` or `_C_AVX512`. torch's own kernels, oneDNN and MKL
are capped at AVX2 by the environment start-vllm.sh sets with it (ATEN_CPU_CAPABILITY,
ONEDNN_MAX_CPU_ISA, MKL_ENABLE_INSTRUCTIONS).
"""

import torch.cpu

torch.cpu._is_avx512_supported = lambda: False
torch.cpu._is_avx512_bf16_supported = lambda: False
