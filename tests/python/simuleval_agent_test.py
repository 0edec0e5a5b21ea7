#!/usr/bin/env python3
"""The SimulEval agent (gpeserve.simuleval_agent) against gpe-client eval, on the held-out corpus
(`gpe make-corpus --seed 3 --count 200 --exclude` the training set) and the built-in model:

`simuleval --agent .../simuleval_agent.py --source src.txt --target tgt.txt --no-use-ref-len
--end-unit </end>` (src.txt: each source with the end unit appended, so SimulEval counts the
end segment as gpeserve does) must give every sentence exactly gpe-client's output, the same
BLEU, and AL and LAAL within 0.01 of gpe-client eval's (they are equal by construction: the
agent READs on the server's WaitingForSource and writes the words completed with the words
sent so far).

usage: simuleval_agent_test.py --gpeserve BIN --client BIN --gpe BIN --work DIR [--count N]
"""
import argparse
import csv
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
from server_process_test import FAILURES, Server, check  # noqa: E402

import gpeserve.simuleval_agent  # noqa: E402

END_UNIT = "</end>"


def run(*args, timeout=900):
    r = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        print(r.stdout[-3000:], r.stderr[-3000:])
    return r


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpeserve", required=True)
    parser.add_argument("--client", required=True)
    parser.add_argument("--gpe", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--wait_k", type=int, default=3)
    a = parser.parse_args()
    os.makedirs(a.work, exist_ok=True)
    train, data = os.path.join(a.work, "train.json"), os.path.join(a.work, "test.json")
    r = run(a.gpe, "make-corpus", "--seed", "1", "--count", "20000", "--out", train)
    r = r.returncode == 0 and run(a.gpe, "make-corpus", "--seed", "3", "--count", str(a.count),
                                  "--exclude", train, "--out", data)
    check("make-corpus writes the held-out split", bool(r) and r.returncode == 0)
    if FAILURES:
        sys.exit(1)
    with open(data, encoding="utf-8") as f:
        items = json.load(f)
    src, tgt = os.path.join(a.work, "src.txt"), os.path.join(a.work, "tgt.txt")
    with open(src, "w", encoding="utf-8") as f:
        f.writelines(" ".join(item["en"].split() + [END_UNIT]) + "\n" for item in items)
    with open(tgt, "w", encoding="utf-8") as f:
        f.writelines(item["de"] + "\n" for item in items)

    server = Server(a.gpeserve)
    try:
        settings = ["--wait_k", str(a.wait_k), "--max_new_tokens", "80"]
        out = os.path.join(a.work, "gpe-client.jsonl")
        r = run(a.client, "eval", "--server", server.address, "--data", data, "--concurrency", "1",
                "--out", out, *settings)
        check("gpe-client eval runs", r.returncode == 0, r.stderr)
        bleu = re.search(r"BLEU = ([\d.]+)", r.stdout)
        lagging = re.search(r"AL = ([\d.]+)\s+LAAL = ([\d.]+)", r.stdout)
        with open(out, encoding="utf-8") as f:
            outputs = [json.loads(line)["output"] for line in f]

        def simuleval(source, output_dir, *extra):
            return run(sys.executable, "-m", "simuleval.cli",
                       "--agent", gpeserve.simuleval_agent.__file__, "--source", source,
                       "--target", tgt, "--output", output_dir, "--no-use-ref-len",
                       "--quality-metrics", "BLEU", "--latency-metrics", "AL", "LAAL",
                       "--no-progress-bar", "--server", server.address,
                       "--wait-k", str(a.wait_k), "--max-new-tokens", "80", *extra)

        output_dir = os.path.join(a.work, "simuleval")
        r = simuleval(src, output_dir, "--end-unit", END_UNIT)
        check("simuleval runs the agent", r.returncode == 0, r.stderr[-2000:])
        # Without the end unit (SimulEval's own units): the last word and the end go together.
        plain_src = os.path.join(a.work, "src-plain.txt")
        with open(plain_src, "w", encoding="utf-8") as f:
            f.writelines(item["en"] + "\n" for item in items)
        plain_dir = os.path.join(a.work, "simuleval-plain")
        r = simuleval(plain_src, plain_dir)
        check("simuleval runs the agent without --end-unit", r.returncode == 0, r.stderr[-2000:])
    finally:
        server.stop()
    if FAILURES:
        sys.exit(1)

    with open(os.path.join(output_dir, "instances.log"), encoding="utf-8") as f:
        instances = sorted((json.loads(line) for line in f), key=lambda i: i["index"])
    predictions = [i["prediction"] for i in instances]
    differ = [i for i, (p, o) in enumerate(zip(predictions, outputs)) if p != " ".join(o.split())]
    check(f"every sentence's output equals gpe-client's ({len(items)} sentences)",
          len(predictions) == len(outputs) == len(items) and not differ,
          [(i, predictions[i], outputs[i]) for i in differ[:3]])
    check("SimulEval's source length is gpeserve's |X| = words + 1",
          all(i["source_length"] == len(item["en"].split()) + 1
              for i, item in zip(instances, items)))
    with open(os.path.join(output_dir, "scores.tsv"), encoding="utf-8") as f:
        scores = next(csv.DictReader(f, delimiter="\t"))
    print(f"gpe-client eval: BLEU {bleu.group(1)}, AL {lagging.group(1)}, "
          f"LAAL {lagging.group(2)}")
    print(f"simuleval:       BLEU {float(scores['BLEU']):.2f}, AL {float(scores['AL']):.3f}, "
          f"LAAL {float(scores['LAAL']):.3f}")
    check("the same BLEU", abs(float(scores["BLEU"]) - float(bleu.group(1))) < 0.005,
          (scores, bleu.group(1)))
    check("AL within 0.01", abs(float(scores["AL"]) - float(lagging.group(1))) <= 0.01,
          (scores["AL"], lagging.group(1)))
    check("LAAL within 0.01", abs(float(scores["LAAL"]) - float(lagging.group(2))) <= 0.01,
          (scores["LAAL"], lagging.group(2)))

    # Without the end unit SimulEval scores |X| = words and caps delays at it (docs/GPE.md 6):
    # its AL must be gpe score's on the server's delays so transformed.
    with open(os.path.join(plain_dir, "instances.log"), encoding="utf-8") as f:
        plain = sorted((json.loads(line) for line in f), key=lambda i: i["index"])
    check("without --end-unit: the same outputs",
          [i["prediction"] for i in plain] == predictions)
    with open(out, encoding="utf-8") as f:
        results = [json.loads(line) for line in f]
    cases = os.path.join(a.work, "plain-latency.jsonl")
    with open(cases, "w") as f:
        for result in results:
            n = len(result["source"].split())
            f.write(json.dumps({"delays": [min(d, n) for d in result["delays"]],
                                "source_length": n,
                                "target_length": len(result["output"].split())}) + "\n")
    r = run(a.gpe, "score", "--latency", cases, "--json")
    means = json.loads(r.stdout.splitlines()[-1]) if r.returncode == 0 else {}
    with open(os.path.join(plain_dir, "scores.tsv"), encoding="utf-8") as f:
        plain_scores = next(csv.DictReader(f, delimiter="\t"))
    print(f"simuleval without --end-unit: AL {float(plain_scores['AL']):.3f}, "
          f"LAAL {float(plain_scores['LAAL']):.3f}")
    check("without --end-unit: SimulEval's AL is gpe's with |X| = words, delays capped at it",
          means and abs(float(plain_scores["AL"]) - means["mean_AL"]) < 0.0015 and
          abs(float(plain_scores["LAAL"]) - means["mean_LAAL"]) < 0.0015,
          (plain_scores, means))
    print(f"{len(FAILURES)} failure(s)" if FAILURES else "all checks passed")
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
