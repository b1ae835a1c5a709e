"""Converts the Gemma 3 270M GGUF (Q4_K_M) into a Hugging Face checkpoint vLLM can serve.

    python convert-gemma-hf.py GGUF TOKENIZER_DIR OUT_DIR

Run by scripts/install-vllm.sh inside the vLLM virtualenv (transformers, accelerate, gguf).
transformers dequantizes the GGUF (and undoes llama.cpp's `norm + 1`), but refuses to save
a GGUF-quantized model, so its state dict is copied into a fresh `Gemma3ForCausalLM` whose
config has no `quantization_config`. The weights are saved in float32, exactly the
dequantized values: vLLM then serves them with `--dtype float32` and its numbers are
deterministic to within float32 rounding (bf16 would round them and can flip near-ties).
`TOKENIZER_DIR` holds `tokenizer.json` and `tokenizer_config.json` (with the chat
template), copied beside the weights. Progress goes to stderr.
"""

import os
import shutil
import sys

import torch
from transformers import AutoModelForCausalLM, Gemma3ForCausalLM


def main() -> None:
    gguf, tokenizer_dir, out = sys.argv[1:4]
    print(f"convert-gemma-hf: dequantizing {gguf}", file=sys.stderr)
    quantized = AutoModelForCausalLM.from_pretrained(
        os.path.dirname(os.path.abspath(gguf)),
        gguf_file=os.path.basename(gguf),
        dtype=torch.float32,
    )
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.eos_token_id = [1, 106]
    config.bos_token_id = 2
    config.pad_token_id = 0
    config.rms_norm_eps = 1e-6
    model = Gemma3ForCausalLM(config).to(torch.float32)
    missing, unexpected = model.load_state_dict(quantized.state_dict(), strict=False)
    # The output head is tied to the embeddings: its absence is expected, nothing else's.
    missing = [k for k in missing if k != "lm_head.weight"]
    if missing or unexpected:
        sys.exit(f"convert-gemma-hf: state dict mismatch: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    model.eval()
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(tokenizer_dir, name), os.path.join(out, name))
    print(f"convert-gemma-hf: wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
