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
    # Sliding windows shorter than the context (index window i - W < j <= i, as transformers).
    ("mistral-window", ["--arch", "mistral", "--sliding_window", "5"], "fp32", LONG, None, None),
    ("mistral-window-two-groups", ["--arch", "mistral", "--sliding_window", "3"], "fp32", TOKENS,
     [0, 1, 2, 3, 4, 0, 1, 2, 3], None),
    # Gemma 2: sandwich norms, (1 + w) norms, gelu-tanh, scaled embeddings, query_pre_attn_scalar,
    # windows on even layers, soft-capping (caps small enough to be active on random weights).
    ("gemma2", ["--arch", "gemma2"], "fp32", TOKENS, None, None),
    ("gemma2-softcap-window", ["--arch", "gemma2", "--sliding_window", "4",
                               "--attn_logit_softcapping", "0.5", "--final_logit_softcapping",
                               "2"], "fp32", LONG, None, None),
    ("gemma2-window-two-groups", ["--arch", "gemma2", "--sliding_window", "3",
                                  "--final_logit_softcapping", "2"], "fp32", TOKENS,
     [0, 1, 2, 3, 4, 0, 1, 2, 3], None),
    ("gemma2-untied-batch-mixed", ["--arch", "gemma2", "--tie_word_embeddings", "false",
                                   "--sliding_window", "2"], "fp32", TOKENS, None, [6, 3]),
    ("gemma2-bf16-prefill", ["--arch", "gemma2", "--dtype", "bf16", "--sliding_window", "8",
                             "--attn_logit_softcapping", "0.5"], "bf16", LONG, None, None),
    ("gemma2-bf16-one-token", ["--arch", "gemma2", "--dtype", "bf16"], "bf16", [42], [9], None),
    ("gemma2-int8", ["--arch", "gemma2", "--sliding_window", "4"], "int8", LONG, None, None),
    # Phi-3: fused qkv / gate_up, partial rotary, longrope (positions at or beyond the original
    # length take the long factors), its window on every layer.
    ("phi3", ["--arch", "phi3"], "fp32", TOKENS, None, None),
    ("phi3-window", ["--arch", "phi3", "--sliding_window", "5"], "fp32", LONG, None, None),
    ("phi3-partial-rotary-two-groups", ["--arch", "phi3", "--partial_rotary_factor", "0.5"],
     "fp32", TOKENS, [0, 1, 2, 3, 4, 0, 1, 2, 3], None),
    ("phi3-longrope-short", ["--arch", "phi3", "--rope_scaling", "longrope",
                             "--original_max_position_embeddings", "64"], "fp32", TOKENS,
     [0, 1, 2, 3, 10, 20, 30, 40, 63], None),
    ("phi3-longrope-long", ["--arch", "phi3", "--rope_scaling", "longrope",
                            "--original_max_position_embeddings", "64",
                            "--partial_rotary_factor", "0.75"], "fp32", TOKENS,
     [64, 65, 66, 100, 101, 102, 103, 2000, 4000], None),
    ("phi3-longrope-beyond-table", ["--arch", "phi3", "--rope_scaling", "longrope",
                                    "--original_max_position_embeddings", "64",
                                    "--max_position_embeddings", "65536"], "fp32", [42], [40000],
     None),
    ("phi3-bf16-prefill", ["--arch", "phi3", "--dtype", "bf16", "--sliding_window", "6"], "bf16",
     LONG, None, None),
    ("phi3-int8-folder", ["--arch", "phi3"], "int8-folder", TOKENS, None, [4, 5]),
]

# Qwen 3 and Gemma 3 need transformers >= 4.51, which needs torch 2: their cases run in a second
# venv (--family torch2), with Qwen 2's windowed layers (which 4.49 gets wrong).
TORCH2_CASES = [
    ("qwen3", ["--arch", "qwen3"], "fp32", TOKENS, None, None),
    ("qwen3-tied-two-groups", ["--arch", "qwen3", "--tie_word_embeddings", "true"], "fp32",
     TOKENS, [0, 1, 2, 3, 4, 0, 1, 2, 3], None),
    ("qwen3-bias-batch-mixed", ["--arch", "qwen3", "--attention_bias", "true"], "fp32", TOKENS,
     None, [5, 1, 3]),
    ("qwen3-bf16-prefill", ["--arch", "qwen3", "--dtype", "bf16"], "bf16", LONG, None, None),
    ("qwen3-bf16-one-token", ["--arch", "qwen3", "--dtype", "bf16"], "bf16", [42], [9], None),
    ("qwen3-int8", ["--arch", "qwen3"], "int8", TOKENS, None, None),
    # use_sliding_window: layers from max_window_layers on are windowed (transformers 4.57's
    # layer_types; 4.49 masked every layer of Qwen 2 alike).
    ("qwen3-window", ["--arch", "qwen3", "--sliding_window", "4", "--max_window_layers", "1"],
     "fp32", LONG, None, None),
    ("qwen2-window", ["--arch", "qwen2", "--sliding_window", "3", "--max_window_layers", "1"],
     "fp32", LONG, None, None),
    # Gemma 3: Gemma 2's norms and scales with q/k norms, no soft-capping unless configured,
    # windowed ("local") layers rotating with base 1e4 and no rope scaling, global ones with 1e6
    # and the scaling. --sliding_window_pattern 2: layers 0 and 2 local, 1 global.
    ("gemma3-local-global", ["--arch", "gemma3", "--num_layers", "3", "--sliding_window_pattern",
                             "2", "--sliding_window", "4"], "fp32", LONG, None, None),
    ("gemma3-two-groups", ["--arch", "gemma3", "--sliding_window_pattern", "2",
                           "--sliding_window", "3"], "fp32", TOKENS, [0, 1, 2, 3, 4, 0, 1, 2, 3],
     None),
    ("gemma3-linear-rope-global", ["--arch", "gemma3", "--sliding_window_pattern", "2",
                                   "--rope_scaling", "linear"], "fp32", TOKENS,
     [0, 1, 2, 40, 41, 300, 301, 2000, 3000], None),
    # The default pattern (every 6th layer global; config.json without layer_types).
    ("gemma3-default-pattern", ["--arch", "gemma3", "--num_layers", "7", "--sliding_window", "5"],
     "fp32", LONG, None, None),
    ("gemma3-softcap-untied-batch-mixed", ["--arch", "gemma3", "--tie_word_embeddings", "false",
                                           "--final_logit_softcapping", "2"], "fp32", TOKENS,
     None, [6, 3]),
    ("gemma3-bf16-prefill", ["--arch", "gemma3", "--dtype", "bf16", "--sliding_window_pattern",
                             "2", "--sliding_window", "8"], "bf16", LONG, None, None),
    ("gemma3-bf16-one-token", ["--arch", "gemma3", "--dtype", "bf16", "--sliding_window_pattern",
                               "2"], "bf16", [42], [9], None),
    ("gemma3-int8", ["--arch", "gemma3", "--sliding_window_pattern", "2", "--sliding_window", "4"],
     "int8", LONG, None, None),
]


def quantize_rows(w):
    """gpeserve's int8: per output row, scale = max |w| / 127 (1 for a zero row), ties to even."""
    scale = w.abs().amax(dim=1) / 127
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    return torch.round(w / scale[:, None]).clamp(-127, 127) * scale[:, None]


def reference_logits(folder, dtype, tokens, positions, segments):
    # Eager attention: the sliding window and soft-capping as transformers writes them.
    model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32,
                                                 attn_implementation="eager").eval()
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
            # No cache: Gemma 2's hybrid cache needs torch 2; the full forward is the reference.
            outputs.append(model(ids, position_ids=pos, attention_mask=torch.ones_like(ids),
                                 use_cache=False).logits[0].float().numpy())
            start += length
    return np.concatenate(outputs, 0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpe", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--keep", action="store_true", help="keep the model folders")
    parser.add_argument("--family", choices=["torch1", "torch2"], default="torch1",
                        help="which cases: those transformers 4.49 on torch 1.13 runs, or those "
                             "that need 4.57 on torch 2 (Qwen 3, Gemma 3)")
    parser.add_argument("--only", help="run the cases whose name contains this")
    args = parser.parse_args()
    cases = TORCH2_CASES if args.family == "torch2" else CASES
    cases = [c for c in cases if not args.only or args.only in c[0]]
    torch.manual_seed(0)
    os.makedirs(args.work, exist_ok=True)
    passed = failed = 0
    for seed, (name, flags, dtype, tokens, positions, segments) in enumerate(cases):
        folder = os.path.join(args.work, name)
        made = subprocess.run([args.gpe, "make-model", "--preset", "tiny", "--tokenizer",
                               args.tokenizer, "--seed", str(seed), "--init_std", "0.2", "--out",
                               folder] + flags, capture_output=True, text=True)
        if made.returncode != 0:
            print(f"FAIL {name}: gpe make-model exited {made.returncode}: {made.stderr}")
            failed += 1
            continue
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
