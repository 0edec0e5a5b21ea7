#!/usr/bin/env python3
"""Golden test: LoRA adapters in gpeserve against PEFT + transformers.

For every case `gpe make-model` writes a random base model and PEFT makes a random adapter on it
(init_lora_weights=False: B is not zero, so the adapter changes the output; modules saved whole
get noise added), saved with save_pretrained as users' training runs save theirs. Then, within
1e-4 of the logit scale (fp32):
  * `gpe logits --adapter DIR` (the unmerged low-rank updates) == PEFT's unmerged model;
  * `gpe logits --adapter DIR --merge_adapter` (folded at load) == the same;
  * `gpe merge-adapter` writes a folder that transformers alone loads and gets the same from,
    and that `gpe logits` serves the same;
and an adapter written by `gpe make-adapter` loads in PEFT unchanged (PeftModel.from_pretrained)
and gives the logits `gpe logits --adapter` gives. Cases: list, regex and all-linear targets,
layers_to_transform, rslora with rank_pattern and alpha_pattern, modules_to_save of the LM head
and the embeddings, LoRA on a tied embedding and head, Phi-3's fused projections, Gemma 2,
Qwen 3, two position groups.

usage: adapter_reference_test.py --gpe BIN --tokenizer DIR --work DIR [--keep] [--only NAME]
"""
import argparse
import os
import shutil
import subprocess
import sys

import numpy as np
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM

TOLERANCE = 1e-4
TOKENS = [5, 17, 99, 3, 250, 42, 7, 300, 11]
TWO_GROUPS = [0, 1, 2, 3, 4, 0, 1, 2, 3]
PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

# name, make-model flags, LoraConfig arguments, position ids (None: 0..).
CASES = [
    ("qwen2-qv", ["--arch", "qwen2"], dict(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"]),
     None),
    ("llama-rslora-patterns", ["--arch", "llama"],
     dict(r=4, lora_alpha=8, use_rslora=True, target_modules=PROJECTIONS,
          rank_pattern={"down_proj": 2}, alpha_pattern={"o_proj": 3.0}), TWO_GROUPS),
    ("qwen2-regex-target", ["--arch", "qwen2"],
     dict(r=4, lora_alpha=4, target_modules=r".*\.layers\.1\.(self_attn\.k_proj|mlp\.up_proj)"),
     None),
    ("llama-layers-to-transform", ["--arch", "llama"],
     dict(r=4, lora_alpha=8, target_modules=["q_proj", "down_proj"], layers_to_transform=[0]),
     None),
    ("mistral-all-linear", ["--arch", "mistral"],
     dict(r=2, lora_alpha=4, target_modules="all-linear"), None),
    ("qwen2-save-lm-head", ["--arch", "qwen2"],
     dict(r=4, lora_alpha=8, target_modules=["q_proj"], modules_to_save=["lm_head"]), None),
    ("llama-save-embeddings", ["--arch", "llama"],
     dict(r=4, lora_alpha=8, target_modules=["v_proj"], modules_to_save=["embed_tokens"]), None),
    ("qwen2-tied-embed-and-head-lora", ["--arch", "qwen2", "--tie_word_embeddings", "true"],
     dict(r=4, lora_alpha=8, target_modules=["q_proj", "embed_tokens", "lm_head"]), TWO_GROUPS),
    ("phi3-fused", ["--arch", "phi3"],
     dict(r=4, lora_alpha=8, target_modules=["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]),
     None),
    ("gemma2-embed-lora", ["--arch", "gemma2"],
     dict(r=4, lora_alpha=8, target_modules=["embed_tokens", "q_proj", "down_proj"]), None),
    ("qwen3", ["--arch", "qwen3"], dict(r=4, lora_alpha=8, target_modules=PROJECTIONS),
     TWO_GROUPS),
]

# Adapters written by `gpe make-adapter`, loaded by PEFT: name, make-model flags, make-adapter
# flags.
OURS = [
    ("ours-qwen2", ["--arch", "qwen2"], ["--lora_r", "4", "--lora_alpha", "8"]),
    ("ours-llama-rslora-save-head", ["--arch", "llama"],
     ["--lora_r", "8", "--lora_alpha", "4", "--use_rslora", "--lora_targets", "q_proj,down_proj",
      "--modules_to_save", "lm_head"]),
    ("ours-phi3-fused", ["--arch", "phi3"],
     ["--lora_r", "4", "--lora_alpha", "8", "--lora_targets", "qkv_proj,gate_up_proj"]),
    # Trained by `gpe train --lora_r` (streaming mode) instead of drawn at random.
    ("ours-trained-qwen2", ["--arch", "qwen2"],
     ["train", "--lora_r", "4", "--lora_alpha", "8", "--lora_targets",
      "q_proj,v_proj,down_proj,embed_tokens", "--mode", "streaming"]),
    ("ours-trained-phi3-rslora", ["--arch", "phi3"],
     ["train", "--lora_r", "4", "--lora_alpha", "4", "--use_rslora", "--lora_targets",
      "qkv_proj,o_proj,gate_up_proj", "--mode", "batch"]),
]


def run(command):
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:2])} exited {proc.returncode}: {proc.stderr}")
    return proc


def peft_logits(model, positions):
    ids = torch.tensor([TOKENS])
    pos = torch.tensor([positions or list(range(len(TOKENS)))])
    with torch.no_grad():
        return model(ids, position_ids=pos, attention_mask=torch.ones_like(ids),
                     use_cache=False).logits[0].float().numpy()


def gpe_logits(args, model, out, positions, extra=()):
    command = [args.gpe, "logits", "--model", model, "--dtype", "fp32", "--threads", "2",
               "--tokens", ",".join(map(str, TOKENS)), "--out", out] + list(extra)
    if positions:
        command += ["--positions", ",".join(map(str, positions))]
    run(command)
    return np.load(out)


def error(ours, ref):
    if ours.shape != ref.shape:
        return float("inf")
    return float(np.abs(ours - ref).max()) / float(np.abs(ref).max())


def load_base(folder):
    return AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32,
                                                attn_implementation="eager").eval()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpe", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--keep", action="store_true", help="keep the folders")
    parser.add_argument("--only", help="run the cases whose name contains this")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    passed = failed = 0

    def check(name, what, ours, ref):
        nonlocal passed, failed
        err = error(ours, ref)
        ok = err <= TOLERANCE
        passed += ok
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name:32} {what:22} max error / scale {err:.2e}",
              flush=True)

    def make_base(name, flags, seed):
        folder = os.path.join(args.work, name)
        run([args.gpe, "make-model", "--preset", "tiny", "--tokenizer", args.tokenizer, "--seed",
             str(seed), "--init_std", "0.2", "--out", folder] + flags)
        return folder

    for seed, (name, flags, lora, positions) in enumerate(CASES):
        if args.only and args.only not in name:
            continue
        try:
            base_dir = make_base(name, flags, seed)
            adapter_dir = base_dir + "-adapter"
            torch.manual_seed(seed)
            peft_model = get_peft_model(load_base(base_dir),
                                        LoraConfig(init_lora_weights=False, **lora))
            with torch.no_grad():
                # Scale the random updates up so that they move the logits visibly, and make
                # the modules saved whole differ from the base.
                for pname, p in peft_model.named_parameters():
                    if "lora_" in pname:
                        p.mul_(2.0)
                    elif "modules_to_save" in pname:
                        p.add_(torch.randn_like(p) * 0.2)
            peft_model.eval()
            peft_model.save_pretrained(adapter_dir)
            ref = peft_logits(peft_model, positions)
            base_ref = peft_logits(load_base(base_dir), positions)
            moved = error(ref, base_ref)
            if moved < 1e-3:
                raise RuntimeError(f"the adapter barely changes the logits ({moved:.1e})")
            out = os.path.join(base_dir, "logits.npy")
            check(name, "unmerged", gpe_logits(args, base_dir, out, positions,
                                               ["--adapter", adapter_dir]), ref)
            check(name, "merged at load", gpe_logits(args, base_dir, out, positions,
                                                     ["--adapter", adapter_dir,
                                                      "--merge_adapter"]), ref)
            merged_dir = base_dir + "-merged"
            run([args.gpe, "merge-adapter", "--model", base_dir, "--adapter", adapter_dir,
                 "--out", merged_dir])
            check(name, "merge-adapter folder", peft_logits(load_base(merged_dir), positions),
                  ref)
            check(name, "served merged folder", gpe_logits(args, merged_dir, out, positions), ref)
        except Exception as e:  # one case's failure is reported, the others still run
            print(f"FAIL {name}: {e}")
            failed += 1
        if not args.keep:
            for suffix in ("", "-adapter", "-merged"):
                shutil.rmtree(os.path.join(args.work, name) + suffix, ignore_errors=True)

    for seed, (name, flags, adapter_flags) in enumerate(OURS, start=len(CASES)):
        if args.only and args.only not in name:
            continue
        try:
            base_dir = make_base(name, flags, seed)
            adapter_dir = base_dir + "-adapter"
            if adapter_flags[0] == "train":
                data = os.path.join(args.work, "train.json")
                run([args.gpe, "make-corpus", "--seed", "3", "--count", "16", "--out", data])
                run([args.gpe, "train", "--init", base_dir, "--data", data, "--out", adapter_dir,
                     "--lr", "1e-2", "--batch_size", "4", "--threads", "2",
                     "--seed", str(seed)] + adapter_flags[1:])
            else:
                run([args.gpe, "make-adapter", "--model", base_dir, "--seed", str(seed),
                     "--init_std", "0.2", "--out", adapter_dir] + adapter_flags)
            peft_model = PeftModel.from_pretrained(load_base(base_dir), adapter_dir).eval()
            ref = peft_logits(peft_model, None)
            if error(ref, peft_logits(load_base(base_dir), None)) < 1e-3:
                raise RuntimeError("PEFT's model is the base model: the adapter was not applied")
            out = os.path.join(base_dir, "logits.npy")
            check(name, "loaded by PEFT", gpe_logits(args, base_dir, out, None,
                                                     ["--adapter", adapter_dir]), ref)
        except Exception as e:
            print(f"FAIL {name}: {e}")
            failed += 1
        if not args.keep:
            for suffix in ("", "-adapter"):
                shutil.rmtree(os.path.join(args.work, name) + suffix, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
