"""Loads the kernel library vLLM picks for this CPU, as vLLM does at start, and names it.

vLLM's CPU wheel ships `_C` (AVX-512 with BF16), `_C_AVX512` and `_C_AVX2`;
`vllm.platforms.cpu.CpuPlatform.import_kernels` loads one by what torch says the CPU has.
Prints the library's name and torch's own CPU capability on stdout; exits 1 when no kernel
library loaded (vLLM only logs that and fails later, on its first custom op).
"""

import re
import sys

import torch
from vllm.platforms import current_platform

current_platform.import_kernels()
with open("/proc/self/maps") as maps:
    loaded = sorted(set(re.findall(r"vllm/(_C\w*)\.abi3\.so", maps.read())))
if not loaded or not hasattr(torch.ops._C, "rms_norm"):
    print(f"no vLLM kernel library loaded (found {loaded})", file=sys.stderr)
    sys.exit(1)
print(f"{', '.join(loaded)} (torch: {torch.backends.cpu.get_cpu_capability()})")
