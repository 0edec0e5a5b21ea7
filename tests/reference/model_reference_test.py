#!/usr/bin/env python3
"""Golden test: `gpe logits` against Hugging Face transformers on `gpe make-model` folders.

For every case a random-weight folder is written by `gpe make-model`; transformers loads it
unchanged (which proves the folder is valid) and computes reference logits; `gpe logits` must
match within 1e-4 of the logit scale (max |logit|). On the CPU every serving dtype computes in
fp32 (bf16/fp16 weights widened in registers, int8 weights times their row scale), so the
reference is transformers in fp32 on the very values served: the stored bf16/fp16 weights, or
for int8 the weights quantized as gpeserve quantizes them (per output row, symmetric, ties to
even), at load (--dtype int8) or by `gpe quantize`. Cases: each architecture, GQA and MHA, tied
and untied heads, biases, llama3 and linear rope scaling, non-contiguous position ids (two
groups starting at 0, as group position encoding produces), large positions, one forward
mixing independent sequences of different lengths, single tokens (the decode kernels) and more
tokens than the decode kernels take (weight tiles widened for the fp32 GEMM).

usage: model_reference_test.py --gpe BIN --tokenizer DIR --work DIR [--keep]
"""
import argparse
import os
import shutil
import subprocess
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM

TOLERANCE = 1e-4

# name, make-model flags, serving dtype, tokens, positions (None = 0..), segments (None = one).
# Serving dtype "int8-folder": `gpe quantize` first, then served with --dtype auto.
TOKENS = [5, 17, 99, 3, 250, 42, 7, 300, 11]
LONG = [(7 * i + 3) % 300 for i in range(37)]  # more rows than the decode kernels take
CASES = [
    ("qwen2-gqa-untied", ["--arch", "qwen2"], "fp32", TOKENS, None, None),
    ("qwen2-tied", ["--arch", "qwen2", "--tie_word_embeddings", "true"], "fp32", TOKENS, None,
     None),
    ("qwen2-mha", ["--arch", "qwen2", "--num_kv_heads", "4"], "fp32", TOKENS, None, None),
    ("qwen2-two-groups", ["--arch", "qwen2"], "fp32", TOKENS, [0, 1, 2, 3, 4, 0, 1, 2, 3], None),
    ("qwen2-batch-mixed", ["--arch", "qwen2"], "fp32", TOKENS, None, [5, 1, 3]),
    ("llama-gqa-llama3-rope", ["--arch", "llama", "--rope_scaling", "llama3"], "fp32", TOKENS,
     [0, 1, 2, 40, 41, 300, 301, 2000, 3000], None),
    ("llama-mha-biases", ["--arch", "llama", "--num_kv_heads", "4", "--attention_bias", "true",
                          "--mlp_bias", "true", "--tie_word_embeddings", "true"], "fp32", TOKENS,
     None, None),
    ("llama-linear-rope-two-groups", ["--arch", "llama", "--rope_scaling", "linear"], "fp32",
     TOKENS, [0, 1, 2, 3, 0, 1, 2, 3, 4], None),
    ("mistral", ["--arch", "mistral"], "fp32", TOKENS, None, None),
    ("mistral-batch-mixed", ["--arch", "mistral"], "fp32", TOKENS, None, [2, 7]),
    ("qwen2-bf16", ["--arch", "qwen2", "--dtype", "bf16"], "bf16", TOKENS, None, None),
    # One token: the decode path (one-row kernels).
    ("qwen2-bf16-one-token", ["--arch", "qwen2", "--dtype", "bf16"], "bf16", [42], None, None),
    ("qwen2-bf16-prefill", ["--arch", "qwen2", "--dtype", "bf16"], "bf16", LONG, None, None),
    ("llama-fp16-biases", ["--arch", "llama", "--dtype", "fp16", "--attention_bias", "true",
                           "--mlp_bias", "true"], "fp16", TOKENS, None, None),
    ("mistral-fp16-prefill", ["--arch", "mistral", "--dtype", "fp16"], "fp16", LONG, None, None),
    ("qwen2-int8-at-load", ["--arch", "qwen2"], "int8", TOKENS, None, None),
    ("qwen2-int8-one-token", ["--arch", "qwen2"], "int8", [42], [9], None),
    ("llama-int8-tied-prefill", ["--arch", "llama", "--tie_word_embeddings", "true"], "int8",
     LONG, None, None),
    ("qwen2-int8-folder", ["--arch", "qwen2"], "int8-folder", TOKENS, None, [4, 5]),
    ("llama-fp32-one-token", ["--arch", "llama", "--attention_bias", "true"], "fp32", [42], [7],
     None),
    ("llama-bf16-stored-fp32-served", ["--arch", "llama", "--dtype", "bf16"], "fp32", TOKENS,
     None, None),
]


def quantize_rows(w):
    """gpeserve's int8: per output row, scale = max |w| / 127 (1 for a zero row), ties to even."""
    scale = w.abs().amax(dim=1) / 127
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    return torch.round(w / scale[:, None]).clamp(-127, 127) * scale[:, None]


def reference_logits(folder, dtype, tokens, positions, segments):
    model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
    if dtype.startswith("int8"):
        with torch.no_grad():
            for _, p in model.named_parameters():  # a tied head is listed once
                if p.dim() == 2:
                    p.copy_(quantize_rows(p))
    segments = segments or [len(tokens)]
    outputs, start = [], 0
    with torch.no_grad():
        for length in segments:
            ids = torch.tensor([tokens[start:start + length]])
            pos = torch.tensor([positions[start:start + length]] if positions else
                               [list(range(length))])
            outputs.append(model(ids, position_ids=pos).logits[0].float().numpy())
            start += length
    return np.concatenate(outputs, 0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpe", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--keep", action="store_true", help="keep the model folders")
    args = parser.parse_args()
    torch.manual_seed(0)
    os.makedirs(args.work, exist_ok=True)
    passed = failed = 0
    for seed, (name, flags, dtype, tokens, positions, segments) in enumerate(CASES):
        folder = os.path.join(args.work, name)
        subprocess.run([args.gpe, "make-model", "--preset", "tiny", "--tokenizer", args.tokenizer,
                        "--seed", str(seed), "--init_std", "0.2", "--out", folder] + flags,
                       check=True, capture_output=True)
        served, serve_dtype = folder, dtype
        if dtype == "int8-folder":
            served, serve_dtype = folder + "-int8", "auto"
            subprocess.run([args.gpe, "quantize", "--model", folder, "--out", served],
                           check=True, capture_output=True)
        out = os.path.join(folder, "logits.npy")
        command = [args.gpe, "logits", "--model", served, "--dtype", serve_dtype, "--threads", "2",
                   "--tokens", ",".join(map(str, tokens)), "--out", out]
        if positions:
            command += ["--positions", ",".join(map(str, positions))]
        if segments:
            command += ["--segments", ",".join(map(str, segments))]
        proc = subprocess.run(command, capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"FAIL {name}: gpe logits exited {proc.returncode}: {proc.stderr}")
            failed += 1
            continue
        ours = np.load(out)
        ref = reference_logits(folder, dtype, tokens, positions, segments)
        scale = float(np.abs(ref).max())
        err = float(np.abs(ours - ref).max()) / scale if ours.shape == ref.shape else float("inf")
        tol = TOLERANCE
        ok = err <= tol
        passed += ok
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name:32} shape {ours.shape} scale {scale:8.3f} "
              f"max error / scale {err:.2e} (tolerance {tol:.0e})")
        if not args.keep:
            shutil.rmtree(folder)
            shutil.rmtree(served, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
