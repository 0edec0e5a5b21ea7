#!/usr/bin/env python3
"""Reference test: `gpe tokenize` / `gpe detokenize` against Hugging Face `tokenizers`.

Encodes a fixed multilingual corpus plus seeded random strings with both implementations and
requires id-for-id equality (plain, with add_special_tokens, with special tokens split as
text); decodes the reference encodings, truncated ones and random id sequences and requires
text equality (skipping special tokens or not, with the tokenizer's clean-up setting and with
clean-up forced on), and that the incremental detokenizer's pieces concatenate to the same text.

usage: tokenizer_reference_test.py --gpe BIN --vocab DIR --corpus FILE [--random N] [--seed S]
"""
import argparse
import json
import os
import random
import subprocess
import sys

from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerBase

SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|begin_of_text|>", "<|eot_id|>",
            "<s>", "</s>", "<unk>", "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>",
            "<unused3>", "<h5>", "</sup>", "<mask>"]
POOLS = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "0123456789",
    " .,;:!?'\"()[]{}<>-_/\\|@#$%^&*+=~`",
    "    \t\n\r\u00a0\u3000\u2003\u0085",
    "你好世界中文字符测试机器翻译",
    "こんにちはカタカナ漢字",
    "안녕하세요한국어",
    "مرحبابالعالم",
    "नमस्तेदुनिया",
    "äöüßéèêçñÅ\u0301\u0308\u0327",
    "😀👍🏽👨‍👩‍👧❤️🇫🇷\u200d\ufe0f",
    "ſﬁǄİı𝔘𝟙",
]


def random_text(rng):
    parts = []
    for _ in range(rng.randint(1, 12)):
        if rng.random() < 0.08:
            parts.append(rng.choice(SPECIALS))
            continue
        pool = rng.choice(POOLS)
        parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 10))))
    return "".join(parts)


def run_gpe(gpe, args, lines):
    proc = subprocess.run([gpe] + args, input="".join(json.dumps(l) + "\n" for l in lines),
                          capture_output=True, text=True, encoding="utf-8")
    if proc.returncode != 0:
        sys.exit(f"gpe {' '.join(args)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    out = [json.loads(l) for l in proc.stdout.split("\n") if l]
    if len(out) != len(lines):
        sys.exit(f"gpe {' '.join(args)}: {len(out)} output lines for {len(lines)} inputs")
    return out


class Checker:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def expect_equal(self, what, got, want):
        if got == want:
            self.passed += 1
            return
        self.failed += 1
        if self.failed <= 10:
            print(f"MISMATCH {what}\n  got:  {got!r}\n  want: {want!r}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpe", required=True)
    parser.add_argument("--vocab", required=True)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--random", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args()

    if not os.path.isfile(os.path.join(args.vocab, "tokenizer.json")):
        sys.exit(f"missing {args.vocab}/tokenizer.json (the developers' shared/ folder)")
    hf = Tokenizer.from_file(os.path.join(args.vocab, "tokenizer.json"))
    config_path = os.path.join(args.vocab, "tokenizer_config.json")
    config = json.load(open(config_path, encoding="utf-8")) if os.path.exists(config_path) else {}
    clean_default = bool(config.get("clean_up_tokenization_spaces", False))
    clean = lambda text: PreTrainedTokenizerBase.clean_up_tokenization(None, text)

    rng = random.Random(args.seed)
    with open(args.corpus, encoding="utf-8") as f:
        texts = [json.loads(l) for l in f if l.strip()]
    texts += [random_text(rng) for _ in range(args.random)]
    check = Checker()
    model = ["--model", args.vocab]

    # Encode.
    for flags, special, split in [([], False, False), (["--add_special_tokens"], True, False),
                                  (["--split_special_tokens"], False, True)]:
        hf.encode_special_tokens = split
        got = run_gpe(args.gpe, ["tokenize"] + model + flags, texts)
        for text, g in zip(texts, got):
            want = hf.encode(text, add_special_tokens=special).ids
            check.expect_equal(f"encode{flags} {text!r}", g.get("ids", g), want)
    hf.encode_special_tokens = False

    # Decode: reference encodings, truncations (cut UTF-8 characters) and random id lists.
    id_lists = [hf.encode(t, add_special_tokens=True).ids for t in texts]
    id_lists += [ids[: rng.randint(0, len(ids))] for ids in id_lists]
    vocab_size = hf.get_vocab_size(with_added_tokens=True)
    byte_ids = [i for i in (hf.token_to_id(f"<0x{b:02X}>") for b in range(256)) if i is not None]
    added = [i for i in hf.get_added_tokens_decoder()]
    for _ in range(args.random):
        ids = []
        for _ in range(rng.randint(1, 30)):
            r = rng.random()
            pool = byte_ids if r < 0.25 and byte_ids else added if r < 0.35 else None
            ids.append(rng.choice(pool) if pool else rng.randrange(vocab_size))
        id_lists.append([i for i in ids if hf.id_to_token(i) is not None])
    for skip in (False, True):
        for clean_flag in (None, True):
            flags = (["--skip_special_tokens"] if skip else []) + ["--stream"]
            if clean_flag is not None:
                flags += ["--clean_up_spaces", "true"]
            cleaned = clean_default if clean_flag is None else clean_flag
            got = run_gpe(args.gpe, ["detokenize"] + model + flags, id_lists)
            for ids, g in zip(id_lists, got):
                want = hf.decode(ids, skip_special_tokens=skip)
                if cleaned:
                    want = clean(want)
                check.expect_equal(f"decode{flags} {ids}", g.get("text", g), want)
                check.expect_equal(f"stream{flags} {ids}", "".join(g.get("pieces", [])), want)

    print(f"{os.path.basename(os.path.normpath(args.vocab))}: {len(texts)} texts, "
          f"{len(id_lists)} id lists")
    print(f"{check.passed} passed, {check.failed} failed")
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
