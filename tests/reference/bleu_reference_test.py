#!/usr/bin/env python3
"""Reference test: `gpe score` against sacreBLEU's corpus_bleu with default settings.

Random and adversarial hypothesis/reference sets (punctuation, numbers with periods, commas
and dashes, HTML entities, <skipped>, Unicode spaces, empty segments, non-Latin scripts,
partial and exact matches, short and long corpora) must give the same score, n-gram counts,
totals, brevity penalty and lengths.

usage: bleu_reference_test.py --gpe BIN --work DIR
"""
import argparse
import json
import os
import random
import subprocess
import sys

import sacrebleu

WORDS = ("the a cat dog sat on mat , . ! ? ( ) 3.14 1,000 3-5 - -- & &amp; &quot; &lt;tag&gt; "
         "<skipped> don't it's l'été Größe 5€ über 東京 は 日本 مرحبا नमस्ते ... '' \" / @ "
         "# $ % ^ * + = [ ] { } | ~ ` : ;").split()
SPACES = [" ", " ", " ", "  ", "\t", "\u00a0", "\u3000", "\u2009", "\u0085", "\x1f"]


def random_segment(rng, words):
    return "".join(rng.choice(words) + rng.choice(SPACES) for _ in range(rng.randint(0, 25)))


def mutate(rng, segment, words):
    tokens = segment.split()
    for _ in range(rng.randint(0, 4)):
        op = rng.random()
        if op < 0.3 and tokens:
            tokens.pop(rng.randrange(len(tokens)))
        elif op < 0.6:
            tokens.insert(rng.randint(0, len(tokens)), rng.choice(words))
        elif tokens:
            tokens[rng.randrange(len(tokens))] = rng.choice(words)
    return " ".join(tokens)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpe", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--trials", type=int, default=150)
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    rng = random.Random(5)
    cases = [(["the cat sat on the mat"], ["the cat sat on the mat"]),
             (["a b c d e"], ["a b c x e"]),
             ([""], ["something"]), (["something"], [""]), ([""], [""]),
             (["the cat"], ["the cat sat"])]
    for _ in range(args.trials):
        n = rng.randint(1, 20)
        refs = [random_segment(rng, WORDS) for _ in range(n)]
        hyps = [mutate(rng, r, WORDS) if rng.random() < 0.8 else random_segment(rng, WORDS)
                for r in refs]
        cases.append((hyps, refs))
    passed = failed = 0
    hyp_path, ref_path = os.path.join(args.work, "hyp.txt"), os.path.join(args.work, "ref.txt")
    for i, (hyps, refs) in enumerate(cases):
        # One segment per line: keep line breaks out of the segments.
        hyps = [h.replace("\n", " ").replace("\r", " ") for h in hyps]
        refs = [r.replace("\n", " ").replace("\r", " ") for r in refs]
        with open(hyp_path, "w", encoding="utf-8", newline="\n") as f:
            f.write("".join(h + "\n" for h in hyps))
        with open(ref_path, "w", encoding="utf-8", newline="\n") as f:
            f.write("".join(r + "\n" for r in refs))
        proc = subprocess.run([args.gpe, "score", "--hyp", hyp_path, "--ref", ref_path, "--json"],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"FAIL case {i}: gpe score exited {proc.returncode}: {proc.stderr}")
            failed += 1
            continue
        ours = json.loads(proc.stdout)
        ref = sacrebleu.corpus_bleu(hyps, [refs])
        same = (abs(ours["score"] - ref.score) < 1e-9 and ours["counts"] == list(ref.counts)
                and ours["totals"] == list(ref.totals) and abs(ours["bp"] - ref.bp) < 1e-12
                and ours["sys_len"] == ref.sys_len and ours["ref_len"] == ref.ref_len
                and all(abs(a - b) < 1e-9 for a, b in zip(ours["precisions"], ref.precisions)))
        if same:
            passed += 1
        else:
            failed += 1
            if failed <= 5:
                print(f"MISMATCH case {i}\n  hyps {hyps!r}\n  refs {refs!r}\n  ours {ours}\n"
                      f"  sacrebleu {ref} counts {ref.counts} totals {ref.totals}")
    metric = sacrebleu.BLEU()
    metric.corpus_score(["a"], [["a"]])
    signature = str(metric.get_signature())
    if ours["signature"] == signature:
        passed += 1
    else:
        failed += 1
        print(f"MISMATCH signature: sacrebleu {signature!r}, ours {ours['signature']!r}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
