#!/usr/bin/env python3
"""Quality of the committed default model (models/default, compiled into gpe).

On the fixed held-out 200-sentence test split (`gpe make-corpus --seed 3 --count 200 --exclude`
the seed-1 training set: none of its sentences was trained on; the split that
scripts/train-default-model and docs/training.md report), the default model must keep its
measured quality, which meets the issue's targets: GPE streaming BLEU >= 80 at wait-3 (86.8
measured) with its wait-3 AL near 3 source units (it must not buy quality by waiting), and batch
BLEU >= 90 (90.7 measured; docs/training.md). The model under test is the one gpe loads without
--model, so this also checks the embedding. Serving dtypes: the default (auto: the model's
own bf16 wherever a kernel serves it, fp32 otherwise) is the same model as fp32 serving (BLEU
within 0.2 with an fp32 KV cache, summation order only), auto's bf16 KV cache (the default for
a bf16 model) keeps BLEU within 0.5 of fp32's, and int8 weights (quantized at load) and bf16
activations into the bf16 weights (--cpu_activations bf16) keep BLEU within 0.5 of fp32's. The built-in German-to-English adapter on the same split read the other way: GPE
wait-3 BLEU >= 80 (docs/adapters.md), merged or not. Standard-library Python only.
"""
import argparse
import json
import os
import re
import subprocess
import sys

BATCH_TARGET = 90.0
WAIT3_TARGET = 80.0
INT8_BLEU_LOSS = 0.5  # issue 16: int8 within 0.5 BLEU of fp32
AUTO_BLEU_DIFFERENCE = 0.2
KV16_BLEU_DIFFERENCE = 0.5  # issue 50: a 16-bit KV cache within 0.5 BLEU of fp32
BF16_ACTIVATIONS_BLEU_LOSS = 0.5  # issue 46: bf16 activations within 0.5 BLEU of fp32

failures = 0
passed = 0


def check(name, ok, detail=""):
    global failures, passed
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else f": {detail}"), flush=True)
    if ok:
        passed += 1
    else:
        failures += 1


def evaluate(gpe, data, *flags):
    # Eight sessions at a time on the engine: the same outputs as one at a time (invariant 2),
    # in about half the time.
    r = subprocess.run([gpe, "eval", "--data", data, "--max_new_tokens", "80", "--threads", "2",
                        "--concurrency", "8", *flags], capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        return None, None, r.stderr
    bleu = re.search(r"^BLEU = ([0-9.]+)", r.stdout, re.M)
    al = re.search(r"^AL = ([0-9.]+)", r.stdout, re.M)
    return (float(bleu.group(1)) if bleu else None), (float(al.group(1)) if al else None), r.stdout


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--gpe", required=True)
    p.add_argument("--work", required=True)
    a = p.parse_args()
    os.makedirs(a.work, exist_ok=True)
    train, data = os.path.join(a.work, "train.json"), os.path.join(a.work, "test.json")
    r = subprocess.run([a.gpe, "make-corpus", "--seed", "1", "--count", "20000", "--out", train],
                       capture_output=True, text=True, timeout=120)
    check("make-corpus writes the training set", r.returncode == 0, r.stderr)
    r = subprocess.run([a.gpe, "make-corpus", "--seed", "3", "--count", "200", "--exclude", train,
                        "--out", data], capture_output=True, text=True, timeout=120)
    check("make-corpus writes the held-out test split", r.returncode == 0, r.stderr)
    with open(train, encoding="utf-8") as f:
        seen = {item["en"] for item in json.load(f)}
    with open(data, encoding="utf-8") as f:
        test = [item["en"] for item in json.load(f)]
    check("the test split is 200 distinct sentences, none trained on",
          len(test) == 200 and len(set(test)) == 200 and not seen & set(test))

    bleu, _, out = evaluate(a.gpe, data, "--mode", "batch")
    print(f"batch: BLEU {bleu}")
    check(f"batch BLEU >= {BATCH_TARGET}", bleu is not None and bleu >= BATCH_TARGET, out)
    sentences = os.path.join(a.work, "sentences.jsonl")
    bleu, al, out = evaluate(a.gpe, data, "--wait_k", "3", "--out", sentences)
    print(f"gpe wait-3: BLEU {bleu} AL {al}")
    check(f"GPE wait-3 BLEU >= {WAIT3_TARGET}", bleu is not None and bleu >= WAIT3_TARGET, out)
    check("GPE wait-3 AL within [2, 4] source units", al is not None and 2 <= al <= 4, out)
    auto_bleu = bleu

    # Long-form (issue 20): the 200 sentences streamed as one session, a boundary after each,
    # give per segment exactly the tokens and delays of the 200 separate sessions above.
    long_form = os.path.join(a.work, "long_form.jsonl")
    lf_bleu, lf_al, out = evaluate(a.gpe, data, "--wait_k", "3", "--long_form", "--concurrency",
                                   "1", "--out", long_form)
    print(f"gpe wait-3 long-form, one session: BLEU {lf_bleu} StreamLAAL's AL {lf_al}")
    with open(sentences, encoding="utf-8") as f:
        alone = [json.loads(line) for line in f]
    segments = []
    if os.path.exists(long_form):
        with open(long_form, encoding="utf-8") as f:
            segments = [json.loads(line) for line in f]
    same = [i for i, (x, y) in enumerate(zip(alone, segments))
            if x["output_ids"] == y["output_ids"] and x["delays"] == y["delays"]]
    check("one long-form session over the 200 sentences: each segment equals its separate "
          "session (tokens and delays)", len(segments) == 200 and len(same) == 200,
          f"{len(same)} of {len(segments)} equal; {out}")
    check("long-form BLEU and AL equal the separate sessions'", lf_bleu == bleu and lf_al == al,
          out)

    # Its KV high-water mark does not grow with the stream: 200 vs 2,000 sentences (eight
    # streams each, so the 2,000 take a minute).
    def high_water(*flags):
        _, _, text = evaluate(a.gpe, data, "--wait_k", "3", "--long_form", *flags)
        m = re.search(r"KV high-water (\d+) blocks", text or "")
        return (int(m.group(1)) if m else None), text
    hw200, out200 = high_water()
    hw2000, out2000 = high_water("--repeat", "10")
    print(f"long-form KV high-water: 200 sentences {hw200} blocks, 2000 sentences {hw2000}")
    check("long-form KV high-water over 200 and 2000 sentences is the same",
          hw200 is not None and hw200 == hw2000, out200 + "\n" + str(out2000))

    fp32, _, out = evaluate(a.gpe, data, "--wait_k", "3", "--dtype", "fp32")
    print(f"gpe wait-3 fp32: BLEU {fp32}")
    fp32_kv, _, out = evaluate(a.gpe, data, "--wait_k", "3", "--kv_cache_dtype", "fp32")
    print(f"gpe wait-3 auto weights, fp32 KV: BLEU {fp32_kv}")
    check(f"auto weights with an fp32 KV cache and fp32 within {AUTO_BLEU_DIFFERENCE} BLEU",
          fp32 is not None and fp32_kv is not None
          and abs(fp32 - fp32_kv) <= AUTO_BLEU_DIFFERENCE, out)
    check(f"auto (bf16 KV cache) and fp32 within {KV16_BLEU_DIFFERENCE} BLEU",
          fp32 is not None and auto_bleu is not None
          and abs(fp32 - auto_bleu) <= KV16_BLEU_DIFFERENCE, out)
    int8, _, out = evaluate(a.gpe, data, "--wait_k", "3", "--dtype", "int8")
    print(f"gpe wait-3 int8: BLEU {int8}")
    check(f"int8 within {INT8_BLEU_LOSS} BLEU of fp32",
          int8 is not None and fp32 is not None and int8 >= fp32 - INT8_BLEU_LOSS, out)
    bf16_act, _, out = evaluate(a.gpe, data, "--wait_k", "3", "--dtype", "bf16",
                                "--cpu_activations", "bf16")
    print(f"gpe wait-3 bf16 weights and activations: BLEU {bf16_act}")
    check(f"bf16 activations within {BF16_ACTIVATIONS_BLEU_LOSS} BLEU of fp32",
          bf16_act is not None and fp32 is not None
          and bf16_act >= fp32 - BF16_ACTIVATIONS_BLEU_LOSS, out)

    # One sentence as a user would type it: live German, word for word what the grammar says.
    sentence = os.path.join(a.work, "sentence.json")
    with open(sentence, "w", encoding="utf-8") as f:
        f.write('[{"en": "The dog sees the small cat.", "de": "Der Hund sieht die kleine Katze."}]')
    bleu, _, out = evaluate(a.gpe, sentence, "--wait_k", "3")
    check("a typed sentence is translated exactly", bleu is not None and bleu > 99.9, out)

    # The built-in de-en adapter (models/default/de-en): the same test split read the other way,
    # with the instruction it carries (no --instruction here: its prompt.json gives it).
    de_en = ("--adapter", "de-en", "--source_key", "de", "--target_key", "en")
    bleu, _, out = evaluate(a.gpe, data, *de_en, "--mode", "batch")
    print(f"de-en batch: BLEU {bleu}")
    check("de-en batch BLEU is measured", bleu is not None, out)
    bleu, al, out = evaluate(a.gpe, data, *de_en, "--wait_k", "3")
    print(f"de-en gpe wait-3: BLEU {bleu} AL {al}")
    check(f"de-en GPE wait-3 BLEU >= {WAIT3_TARGET}", bleu is not None and bleu >= WAIT3_TARGET,
          out)
    check("de-en GPE wait-3 AL within [2, 4] source units", al is not None and 2 <= al <= 4, out)
    merged, _, out = evaluate(a.gpe, data, *de_en, "--wait_k", "3", "--merge_adapter")
    print(f"de-en gpe wait-3 merged: BLEU {merged}")
    check(f"de-en merged into the weights within {INT8_BLEU_LOSS} BLEU of unmerged",
          merged is not None and bleu is not None and abs(merged - bleu) <= INT8_BLEU_LOSS, out)
    bleu, _, out = evaluate(a.gpe, sentence, *de_en, "--wait_k", "3")
    check("a typed German sentence is translated exactly", bleu is not None and bleu > 99.9, out)
    print(f"{passed} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
