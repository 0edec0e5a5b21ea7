#!/usr/bin/env python3
"""Behaviour of the `gpe` binary on good and bad input: exit codes, error lines, --help.

usage: gpe_cli_test.py --gpe BIN --model DIR   (DIR: any tokenizer folder)
Only the standard library is used.
"""
import argparse
import array
import json
import re
import subprocess
import sys

failures = []
passes = []


def check(name, condition, detail=""):
    (passes.append(name) if condition else failures.append(f"{name}: {detail}"))


def run(args, stdin=b""):
    proc = subprocess.run(args, input=stdin, capture_output=True)
    return proc.returncode, proc.stdout.decode("utf-8"), proc.stderr.decode("utf-8", "replace")


def safetensors_floats(path):
    """{name: list of floats} of an F32 safetensors file (the format's header, then raw data)."""
    with open(path, "rb") as f:
        blob = f.read()
    size = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + size])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        values = array.array("f")
        values.frombytes(blob[8 + size + begin:8 + size + end])
        out[name] = values
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpe", required=True)
    parser.add_argument("--model", required=True)
    a = parser.parse_args()
    gpe, model = a.gpe, ["--model", a.model]

    # Good lines alone, for comparison.
    rc, out, _ = run([gpe, "tokenize"] + model, b'"ok"\n"fine"\n')
    check("good input exits 0", rc == 0, rc)
    good = [json.loads(l) for l in out.splitlines()]
    check("one output per line", len(good) == 2 and all("ids" in g for g in good), out)
    # A folder given as --tokenizer is read as --model reads it (not parsed as JSON).
    rc_dir, out_dir, err_dir = run([gpe, "tokenize", "--tokenizer", a.model], b'"ok"\n"fine"\n')
    check("tokenize --tokenizer DIR == --model DIR", rc_dir == 0 and out_dir == out, err_dir)

    # Bad lines are reported in place; the others are still processed.
    bad = b'"ok"\n{bad\n"\xff\xfe"\n"\\ud800"\n42\n"fine"\n'
    rc, out, err = run([gpe, "tokenize"] + model, bad)
    lines = [json.loads(l) for l in out.split("\n") if l]
    check("bad input exits 1", rc == 1, rc)
    check("six output lines", len(lines) == 6, out)
    if len(lines) == 6:
        check("good lines unchanged", lines[0] == good[0] and lines[5] == good[1], lines)
        for i in (1, 2, 3, 4):
            check(f"line {i + 1} is an error naming its line",
                  lines[i].get("error", "").startswith(f"line {i + 1}: "), lines[i])
    check("errors also on stderr", "line 3:" in err, err)

    # Hyphenated flag names are synonyms.
    rc1, out1, _ = run([gpe, "tokenize", "--add_special_tokens"] + model, b'"x"\n')
    rc2, out2, _ = run([gpe, "tokenize", "--add-special-tokens"] + model, b'"x"\n')
    check("flag synonyms", rc1 == 0 and rc2 == 0 and out1 == out2, (out1, out2))

    rc, out, _ = run([gpe, "detokenize"] + model, b'[1,2]\n[999999]\n["x"]\n[-1]\n')
    lines = [json.loads(l) for l in out.split("\n") if l]
    check("detokenize exit code", rc == 1, rc)
    check("detokenize lines", len(lines) == 4 and "text" in lines[0] and
          all("error" in l for l in lines[1:]), lines)
    check("unknown id named", "token id 999999" in out, out)

    rc, out, _ = run([gpe, "detokenize", "--clean_up_spaces", "maybe"] + model, b"[1]\n")
    check("bad flag value exits 2", rc == 2, rc)

    # gpe eval on a random-weight model folder: streaming and batch both run end to end.
    import os
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = os.path.join(tmp, "model")
        rc, _, err = run([gpe, "make-model", "--tokenizer", a.model, "--out", model_dir,
                          "--init_std", "0.3"])
        check("make-model", rc == 0, err)
        # Shape overrides of the preset reach config.json and the tensors (the default model's
        # script uses them); a bad value is refused with exit 2.
        shaped = os.path.join(tmp, "shaped")
        rc, _, err = run([gpe, "make-model", "--tokenizer", a.model, "--out", shaped,
                          "--num_layers", "3", "--hidden_size", "48", "--intermediate_size", "80",
                          "--num_heads", "6", "--head_dim", "8", "--num_kv_heads", "3",
                          "--max_position_embeddings", "9000"])
        check("make-model with shape overrides", rc == 0, err)
        if rc == 0:
            config = json.load(open(os.path.join(shaped, "config.json")))
            want = {"num_hidden_layers": 3, "hidden_size": 48, "intermediate_size": 80,
                    "num_attention_heads": 6, "head_dim": 8, "num_key_value_heads": 3,
                    "max_position_embeddings": 9000}
            check("overrides in config.json", all(config.get(k) == v for k, v in want.items()),
                  config)
            with open(os.path.join(shaped, "model.safetensors"), "rb") as f:
                header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
            layers = {k.split(".")[2] for k in header if k.startswith("model.layers.")}
            check("overrides in the tensors",
                  layers == {"0", "1", "2"} and
                  header["model.layers.2.self_attn.k_proj.weight"]["shape"] == [24, 48] and
                  header["model.layers.0.mlp.up_proj.weight"]["shape"] == [80, 48], header)
        rc, _, err = run([gpe, "make-model", "--tokenizer", a.model, "--out", shaped + "2",
                          "--num_layers", "0"])
        check("make-model --num_layers 0 exits 2 and says why",
              rc == 2 and "--num_layers takes a whole number >= 1" in err, (rc, err))
        data = os.path.join(tmp, "data.json")
        with open(data, "w") as f:
            json.dump([{"en": "the dog sees the cat", "de": "der Hund sieht die Katze"},
                       {"en": "hello", "de": "hallo"}], f)
        for mode in ("streaming", "batch", "reencode", "interleaved"):
            results = os.path.join(tmp, f"{mode}.jsonl")
            flags = (["--mode", mode] if mode in ("streaming", "batch") else
                     ["--paradigm", mode])
            rc, out, err = run([gpe, "eval", "--model", model_dir, "--data", data] + flags +
                               ["--wait_k", "2", "--max_new_tokens", "8", "--threads", "1",
                                "--out", results])
            check(f"eval {mode} exits 0", rc == 0, err)
            check(f"eval {mode} prints BLEU and latency",
                  out.startswith("BLEU = ") and "signature: nrefs:1|" in out and "AL = " in out,
                  out)
            lines = [json.loads(l) for l in open(results)] if rc == 0 else []
            check(f"eval {mode} writes one line per sentence", len(lines) == 2, lines)
            for line in lines:
                check(f"eval {mode} line fields",
                      set(line) >= {"source", "reference", "output", "output_ids", "delays",
                                    "forward_tokens", "reason"} and
                      0 < len(line["output_ids"]) <= 8, line)
        # Re-encode recomputes the target after each read: more forward tokens than GPE.
        long_data = os.path.join(tmp, "long.json")
        with open(long_data, "w") as f:
            json.dump([{"en": "the dog sees the cat in the big garden today", "de": "x"}], f)
        forward = {}
        for paradigm in ("gpe", "reencode"):
            results = os.path.join(tmp, f"long-{paradigm}.jsonl")
            rc, out, err = run([gpe, "eval", "--model", model_dir, "--data", long_data,
                                "--paradigm", paradigm, "--wait_k", "1", "--max_new_tokens",
                                "30", "--threads", "1", "--out", results])
            forward[paradigm] = json.loads(open(results).read())["forward_tokens"] if rc == 0 else 0
        check("reencode computes more than gpe", forward["reencode"] > forward["gpe"] > 0, forward)
        # The engine (--concurrency) gives every sentence what it gets alone, also when the
        # KV cache is small enough to force preemption and the token budget splits reads.
        many = os.path.join(tmp, "many.json")
        rng_words = "the dog sees cat in a big garden today and runs home fast".split()
        with open(many, "w") as f:
            json.dump([{"en": " ".join(rng_words[(3 * i) % 7:(3 * i) % 7 + 2 + i % 6]),
                        "de": "x"} for i in range(9)], f)
        for paradigm in ("gpe", "reencode"):
            outputs = {}
            for concurrency in ("1", "4"):
                results = os.path.join(tmp, f"many-{paradigm}-{concurrency}.jsonl")
                rc, out, err = run([gpe, "eval", "--model", model_dir, "--data", many,
                                    "--paradigm", paradigm, "--wait_k", "2",
                                    "--max_new_tokens", "12", "--threads", "1",
                                    "--concurrency", concurrency, "--kv_blocks", "25",
                                    "--block_size", "4", "--max_batch_tokens", "6",
                                    "--out", results])
                check(f"eval {paradigm} --concurrency {concurrency} exits 0", rc == 0, err)
                if concurrency == "4":
                    m = re.search(r"engine: (\d+) steps, ([\d.]+) tokens and ([\d.]+) sessions "
                                  r"per step, (\d+) preemptions", out)
                    check(f"eval {paradigm}: batched steps and preemption",
                          m is not None and float(m.group(3)) > 1 and int(m.group(4)) > 0, out)
                outputs[concurrency] = [(l["output_ids"], l["delays"], l["forward_tokens"] > 0)
                                        for l in map(json.loads, open(results))] if rc == 0 else []
            check(f"eval {paradigm}: concurrent sessions == one at a time",
                  len(outputs["1"]) == 9 and
                  [o[:2] for o in outputs["4"]] == [o[:2] for o in outputs["1"]], outputs)
            # Long-form: the nine items as one stream (and as three), a boundary after each,
            # give the same outputs and delays; the KV high-water mark is printed.
            for streams in ("1", "3"):
                results = os.path.join(tmp, f"long-{paradigm}-{streams}.jsonl")
                rc, out, err = run([gpe, "eval", "--model", model_dir, "--data", many,
                                    "--paradigm", paradigm, "--wait_k", "2",
                                    "--max_new_tokens", "12", "--threads", "1", "--long_form",
                                    "--concurrency", streams, "--kv_blocks", "25",
                                    "--block_size", "4", "--out", results])
                check(f"eval {paradigm} --long_form ({streams} streams) exits 0", rc == 0, err)
                check(f"eval {paradigm} --long_form prints segments and the KV high-water",
                      f"long-form: 9 segments in {streams} streams" in out and
                      re.search(r"KV high-water \d+ blocks", out) is not None, out)
                long_outputs = [(l["output_ids"], l["delays"])
                                for l in map(json.loads, open(results))] if rc == 0 else []
                check(f"eval {paradigm} --long_form ({streams} streams): segments == sessions",
                      long_outputs == [o[:2] for o in outputs["1"]], long_outputs)
        # gpe make-corpus + gpe train (batch mode): the loss falls and the output folder loads.
        corpus = os.path.join(tmp, "corpus.json")
        rc, _, err = run([gpe, "make-corpus", "--seed", "5", "--count", "24", "--out", corpus])
        check("make-corpus", rc == 0 and len(json.load(open(corpus))) == 24, err)
        trained = os.path.join(tmp, "trained")
        rc, _, err = run([gpe, "train", "--init", model_dir, "--data", corpus, "--out", trained,
                          "--batch_size", "8", "--epochs", "4", "--lr", "0.003", "--log_every",
                          "1", "--save_every", "6", "--threads", "1"])
        losses = [float(x) for x in re.findall(r"loss ([\d.]+)", err)]
        check("train exits 0 and logs every step", rc == 0 and len(losses) == 12, err)
        check("train lowers the loss", len(losses) == 12 and losses[-1] < losses[0], losses)
        check("train writes the model and checkpoints",
              os.path.exists(os.path.join(trained, "model.safetensors")) and
              os.path.exists(os.path.join(trained, "checkpoint-6", "model.safetensors")), trained)
        rc, out, err = run([gpe, "eval", "--model", trained, "--data", corpus, "--limit", "2",
                            "--max_new_tokens", "8", "--threads", "1"])
        check("a trained folder evaluates", rc == 0 and out.startswith("BLEU = "), err)
        # --resume from checkpoint-6 runs steps 7..12 only and ends where the whole run ended.
        resumed = os.path.join(tmp, "resumed")
        rc, _, err = run([gpe, "train", "--init", model_dir, "--data", corpus, "--out", resumed,
                          "--batch_size", "8", "--epochs", "4", "--lr", "0.003", "--log_every",
                          "1", "--threads", "1", "--resume",
                          os.path.join(trained, "checkpoint-6")])
        steps = [int(x) for x in re.findall(r"step (\d+)/12", err)]
        check("resume continues at step 7", rc == 0 and "resuming" in err and
              steps == list(range(7, 13)), err)
        whole, again = (safetensors_floats(os.path.join(d, "model.safetensors"))
                        for d in (trained, resumed))
        check("resumed run ends with the uninterrupted run's weights",
              whole.keys() == again.keys() and all(
                  max(abs(x - y) for x, y in zip(whole[k], again[k])) < 1e-5 for k in whole),
              sorted(whole))
        rc, _, err = run([gpe, "train", "--init", model_dir, "--data", corpus, "--out", resumed,
                          "--resume", trained])
        check("resume from a folder without trainer state exits 1",
              rc == 1 and "trainer_state" in err, err)
        rc, _, err = run([gpe, "train", "--init", model_dir, "--data", corpus, "--out",
                          os.path.join(tmp, "mixed"), "--mode", "mixed", "--wait_k", "1-3",
                          "--batch_fraction", "0.5", "--batch_size", "8", "--epochs", "2",
                          "--lr", "0.003", "--log_every", "1", "--threads", "1"])
        losses = [float(x) for x in re.findall(r"loss ([\d.]+)", err)]
        check("mixed training with a wait-k range runs and lowers the loss",
              rc == 0 and len(losses) == 6 and losses[-1] < losses[0], err)
        rc, _, err = run([gpe, "train", "--init", model_dir, "--data", corpus, "--out", resumed,
                          "--wait_k", "3-1"])
        check("a reversed wait-k range exits 2", rc == 2 and "--wait_k" in err, err)
        streamed = os.path.join(tmp, "streamed")
        rc, _, err = run([gpe, "train", "--init", model_dir, "--data", corpus, "--out", streamed,
                          "--mode", "streaming", "--wait_k", "2", "--batch_size", "8",
                          "--epochs", "2", "--lr", "0.003", "--log_every", "1", "--threads", "1"])
        losses = [float(x) for x in re.findall(r"loss ([\d.]+)", err)]
        check("streaming training runs and lowers the loss",
              rc == 0 and len(losses) == 6 and losses[-1] < losses[0], err)
        rc, _, err = run([gpe, "train", "--init", model_dir, "--data", corpus, "--out", streamed,
                          "--mode", "sideways"])
        check("unknown training mode exits 2", rc == 2 and "--mode takes" in err, err)
        rc, _, err = run([gpe, "eval", "--model", model_dir, "--data", data, "--concurrency", "0"])
        check("bad concurrency exits 2", rc == 2 and "--concurrency" in err, err)
        rc, _, err = run([gpe, "eval", "--model", model_dir, "--data", data, "--paradigm",
                          "sideways"])
        check("unknown paradigm exits 2", rc == 2 and "--paradigm takes gpe" in err, err)
        rc, _, err = run([gpe, "eval", "--model", model_dir, "--data", data, "--long_form",
                          "--mode", "batch"])
        check("long-form batch refused", rc == 2 and "--long_form streams" in err, err)
        rc, _, err = run([gpe, "eval", "--model", model_dir, "--data", data, "--long_form",
                          "--sentence_marks", " "])
        check("empty sentence marks refused", rc == 2 and "--sentence_marks" in err, err)
        rc, _, err = run([gpe, "eval", "--model", model_dir, "--data", data, "--source_key", "fr"])
        check("missing field named", rc == 1 and "item 0 needs string fields 'fr'" in err, err)

    # gpe bench --pace: its flags, and its rows against its capacity line (a tiny random model;
    # --lag_slo 0 admits no count, 1 s each one that stays within it).
    rc, _, err = run([gpe, "bench", "--preset", "tiny", "--pace", "2", "--adapters", "2"])
    check("pace with adapters refused", rc == 2 and "--pace runs alone" in err, err)
    rc, _, err = run([gpe, "bench", "--preset", "tiny", "--long_form"])
    check("long_form without pace refused",
          rc == 2 and "--long_form is a --pace option" in err, err)
    row_re = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)s\s+([\d.]+)s\s+([\d.]+)s\s+([\d.]+)s"
                        r"\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(yes|no)$")
    for slo in (0.0, 1.0):
        rc, out, err = run([gpe, "bench", "--preset", "tiny", "--pace", "8", "--sessions", "1,2",
                            "--seconds", "0.5", "--threads", "1", "--lag_slo", str(slo)])
        rows = [m.groups() for m in map(row_re.match, out.splitlines()) if m]
        check(f"pace {slo}: exits 0 with a row per count",
              rc == 0 and [int(r[0]) for r in rows] == [1, 2], out + err)
        for r in rows:
            words, p50, p99, waiting, computing = int(r[1]), float(r[2]), float(r[3]), \
                float(r[4]), float(r[5])
            check(f"pace {slo}, {r[0]} sessions: words lagged, p50 <= p99",
                  words > 0 and p50 <= p99, r)
            check(f"pace {slo}, {r[0]} sessions: waiting and computing within p99",
                  0 <= waiting and 0 <= computing and waiting + computing <= p99 + 0.01, r)
            if abs(p99 - slo) > 0.01:
                check(f"pace {slo}, {r[0]} sessions: within the SLO as its p99 says",
                      (r[10] == "yes") == (p99 <= slo), r)
        capacity = re.search(r"capacity at p99 word lag <= [\d.]+ s: (\d+) sessions", out)
        largest = max([int(r[0]) for r in rows if r[10] == "yes"], default=0)
        check(f"pace {slo}: capacity is the largest count within the SLO",
              capacity is not None and int(capacity.group(1)) == largest, out)
        if slo == 0:
            check("pace 0: no count within a zero SLO", largest == 0, out)

    for command in ("tokenize", "detokenize", "train-tokenizer", "make-model", "make-corpus",
                    "logits", "bench-forward", "bench-stream", "bench-long", "bench", "score",
                    "eval", "train"):
        rc, out, _ = run([gpe, command, "--help"])
        check(f"{command} --help", rc == 0 and "usage: gpe " + command in out, out)
    rc, out, _ = run([gpe, "--help"])
    check("gpe --help", rc == 0 and "tokenize" in out, out)
    rc, _, err = run([gpe, "tokenize", "--bogus"])
    check("unknown flag exits 2", rc == 2 and "unknown flag '--bogus'" in err, err)
    rc, _, err = run([gpe, "tokenize"])
    check("missing model exits 2", rc == 2 and "--model" in err, err)
    rc, _, err = run([gpe, "tokenize", "--model", "/nonexistent/dir"])
    check("missing file named", rc == 1 and "/nonexistent/dir/tokenizer.json" in err, err)
    rc, _, err = run([gpe, "frobnicate"])
    check("unknown command exits 2", rc == 2 and "unknown command" in err, err)

    for f in failures:
        print("FAIL", f)
    print(f"{len(passes)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
