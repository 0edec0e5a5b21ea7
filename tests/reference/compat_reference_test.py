#!/usr/bin/env python3
"""Reference test: `gpe eval --compat reference` against an oracle of the reference code's loop.

The oracle is a second, independent implementation of the reference evaluation code's
group-streaming loop as docs/GPE.md section 8 describes it, written in that code's own shape
(one loop: read when asked, feed the pending tokens, take the greedy token, apply the stop
rules to every token since the last discard, record the read counter at each stop, read one
more unit, pop the previous token's cache entry on a discard, check the 100-word distance),
with Hugging Face transformers computing every step by full recomputation (no cache: each
target token sees the source that was read when it was fed, the header tokens see each other).
For every sentence the served output ids, delays (cut to the words of the text) and text must
equal the oracle's, and so must the corpus AL.

Models: the built-in default model (real words, punctuation and end of turn) at wait-k 1, 3
and 5 (k = 5 on short sentences reads everything first: rule 3), and a random-weight model
(end of turn rare: the cap of rule 4 and the distance limit of rule 5).

usage: compat_reference_test.py --gpe BIN --work DIR
"""
import argparse
import json
import os
import subprocess
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

PROMPT = {  # the qwen2.5 profile (engine/policy/profiles/qwen2.5.json)
    "instruct": "<|im_start|>system\nTranslate the following English paragraph to German"
                "<|im_end|>\n",
    "user": "<|im_start|>user\n",
    "assistant": "<|im_start|>assistant\n",
    "end": "<|im_end|>\n",
}
PUNCTUATION = {".", ",", ":", ";", "?", "!"}
MAX_WRITE = 50
MAX_DISTANCE = 100


def eos_ids(folder, tok):
    ids = set()
    for name in ("config.json", "generation_config.json"):
        path = os.path.join(folder, name)
        if os.path.exists(path):
            value = json.load(open(path)).get("eos_token_id")
            ids.update(value if isinstance(value, list) else [] if value is None else [value])
    if tok.eos_token_id is not None:
        ids.add(tok.eos_token_id)
    return ids


class Oracle:
    def __init__(self, folder):
        self.tok = AutoTokenizer.from_pretrained(folder)
        self.model = AutoModelForCausalLM.from_pretrained(
            folder, torch_dtype=torch.float32, attn_implementation="eager").eval()
        self.eos = eos_ids(folder, self.tok)

    def encode(self, text):
        return self.tok.encode(text, add_special_tokens=False)

    def next_token(self, source, fed, header):
        """Greedy token after the last fed target token: one full forward, GPE positions."""
        s, t = len(source), len(fed)
        ids = source + [token for token, _ in fed]
        positions = list(range(s)) + list(range(t))  # phi = 0
        allowed = torch.zeros(s + t, s + t, dtype=torch.bool)
        allowed[:s, :s] = torch.ones(s, s, dtype=torch.bool).tril()
        for j, (_, seen) in enumerate(fed):
            allowed[s + j, :seen] = True
            allowed[s + j, s:s + max(j + 1, header if j < header else 0)] = True
        mask = torch.zeros(1, 1, s + t, s + t)
        mask.masked_fill_(~allowed, torch.finfo(torch.float32).min)
        with torch.no_grad():
            logits = self.model(torch.tensor([ids]), position_ids=torch.tensor([positions]),
                                attention_mask=mask).logits[0, -1]
        return int(logits.argmax())

    def session(self, words, k, max_new_tokens):
        segments = [self.encode(PROMPT["instruct"] + PROMPT["user"])]
        segments += [self.encode((" " if i > 0 else "") + w) for i, w in enumerate(words)]
        segments.append(self.encode(PROMPT["end"]))
        units = len(segments) - 1  # words + the end segment
        header = self.encode(PROMPT["assistant"])
        end_text = PROMPT["end"].strip()

        counter = k  # the read counter starts at k, whatever the source's length
        source = [t for seg in segments[:min(k, units) + 1] for t in seg]
        fed = []  # target tokens fed so far, with the source length each one saw
        pending = list(header)
        kept, since_discard, delays = [], [], []
        since_read = 0
        returned = None
        while returned is None:
            fed += [(t, len(source)) for t in pending]
            since_read += 1
            token = self.next_token(source, fed, len(header))
            since_discard.append(token)
            text = self.tok.decode(since_discard, skip_special_tokens=False)
            alone = self.tok.decode([token], skip_special_tokens=False)
            new_word = " " in text[1:]
            discard = new_word and len(since_discard) >= 2
            # The end string as the profile holds it, untrimmed ("<|im_end|>\n", in no single
            # token's text), as the reference code tests `end_Instruct in token_text`.
            stop = (new_word or alone in PUNCTUATION or since_read >= MAX_WRITE or
                    PROMPT["end"] in alone)
            end_of_sequence = token in self.eos or alone.strip() == end_text
            if not discard and not end_of_sequence:
                kept.append(token)
            pending = [token]
            if stop:
                delays.append(counter)
                if counter < units:  # one more unit, read before the next write
                    counter += 1
                    source += segments[counter]
                    since_read = 0
                if discard:
                    since_discard = []
                    fed.pop()  # the previous token is fed again, after the read
                    pending = [kept[-1]]
                if len(delays) - counter > MAX_DISTANCE:
                    returned = kept + ([token] if discard else [])
            if end_of_sequence or len(kept) >= max_new_tokens:
                returned = kept
        text = self.tok.decode(header + returned, skip_special_tokens=True)
        return returned, delays[:len(text.split())], text, units


def lagging(delays, x, y):
    """AL as the reference code's lagging script computes it."""
    if not delays:
        return 0.0
    if delays[0] > x:
        return float(delays[0])
    gamma = y / x
    total, tau = 0.0, 0
    for t, d in enumerate(delays):
        total += d - t / gamma
        tau = t + 1
        if d >= x:
            break
    return total / tau


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpe", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    default_dir, random_dir = (os.path.join(args.work, n) for n in ("default", "random"))
    subprocess.run([args.gpe, "default-model", "--out", default_dir], check=True,
                   capture_output=True)
    subprocess.run([args.gpe, "make-model", "--preset", "tiny", "--tokenizer", default_dir,
                    "--seed", "7", "--init_std", "0.5", "--out", random_dir], check=True,
                   capture_output=True)
    data = os.path.join(args.work, "data.json")
    subprocess.run([args.gpe, "make-corpus", "--seed", "5", "--count", "12", "--out", data],
                   check=True, capture_output=True)
    items = json.load(open(data))
    items.append({"en": "He works.", "de": "Er arbeitet."})  # shorter than k = 5
    json.dump(items, open(data, "w"))
    short = os.path.join(args.work, "short.json")
    json.dump(items[:3] + items[-1:], open(short, "w"))

    failures = 0
    for folder, dataset, ks, max_new in ((default_dir, data, (1, 3, 5), 200),
                                         (random_dir, short, (2, 4), 400)):
        oracle = Oracle(folder)
        for k in ks:
            out = os.path.join(args.work, f"{os.path.basename(folder)}-k{k}.jsonl")
            proc = subprocess.run(
                [args.gpe, "eval", "--model", folder, "--data", dataset, "--wait_k", str(k),
                 "--compat", "reference", "--max_new_tokens", str(max_new), "--threads", "2",
                 "--concurrency", "4", "--out", out], capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"FAIL {folder} k={k}: gpe eval exited {proc.returncode}: {proc.stderr}")
                failures += 1
                continue
            served = [json.loads(line) for line in open(out)]
            als = []
            for i, item in enumerate(json.load(open(dataset))):
                ids, delays, text, units = oracle.session(item["en"].split(), k, max_new)
                als.append(lagging(delays, units, len(text.split())))
                got = served[i]
                same = (got["output_ids"], got["delays"], got["output"]) == (ids, delays, text)
                if not same:
                    failures += 1
                    print(f"FAIL {os.path.basename(folder)} k={k} item {i} {item['en']!r}\n"
                          f"  served {got['output_ids']} {got['delays']} {got['output']!r}\n"
                          f"  oracle {ids} {delays} {text!r}")
            al = sum(als) / len(als)
            printed = float(proc.stdout.split("AL = ")[1].split()[0])
            ok = abs(printed - al) < 5e-4
            failures += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {os.path.basename(folder)} k={k}: "
                  f"{len(served)} sentences, AL {printed:.3f} (oracle {al:.3f})")
    print(f"{failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
