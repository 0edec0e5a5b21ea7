#!/usr/bin/env python3
"""Reference test: AL and LAAL of `gpe score --latency` against SimulEval's scorers.

Random sentences with the delays a wait-k policy produces (non-decreasing source-unit counts
within the source, |X| = words + 1), including wait-k schedules, writes that all come after the
whole source, first delays beyond |X|, single-word targets, hypotheses longer and shorter than
the reference and fractional (millisecond) delays: gpeserve's per-sentence scores and means
must equal SimulEval's ALScorer and LAALScorer (use_ref_len, text input) to 1e-9.

The one place docs/GPE.md section 6 and SimulEval differ is a later delay beyond |X| (SimulEval
counts it in tau, GPE.md stops at the last delay within |X|); the policy never produces one, so
it is left out here and covered by the hand-worked cases of latency_test.

usage: latency_reference_test.py --gpe BIN --work DIR
"""
import argparse
import json
import os
import random
import subprocess
import sys
import types
import warnings

warnings.filterwarnings("ignore")  # simuleval imports pydub, which warns about ffmpeg
from simuleval.evaluator.scorers.latency_scorer import ALScorer, LAALScorer  # noqa: E402


def random_case(rng):
    source = rng.randint(1, 40) + 1  # words + the end segment
    kind = rng.random()
    hyp_len = rng.randint(1, 60)
    if kind < 0.3:  # a wait-k schedule
        k = rng.randint(1, 8)
        delays = [min(k + t, source) for t in range(hyp_len)]
    elif kind < 0.4:  # everything written after the whole source
        delays = [source] * hyp_len
    elif kind < 0.5:  # the first word already beyond the source (AL = LAAL = d1)
        delays = [source + rng.randint(1, 5)] + [source + 6] * (hyp_len - 1)
    elif kind < 0.6:  # millisecond delays
        start = rng.uniform(0, 500)
        delays, d = [], start
        for _ in range(hyp_len):
            d = min(d + rng.uniform(0, 300), 1000.0 * source)
            delays.append(d)
        source = 1000.0 * source
    else:  # random non-decreasing reads
        d, delays = rng.randint(1, source), []
        for _ in range(hyp_len):
            d = min(source, d + (rng.randint(0, 3) if rng.random() < 0.5 else 0))
            delays.append(d)
    ref_len = max(1, hyp_len + rng.randint(-10, 10)) if rng.random() < 0.9 else hyp_len
    return {"delays": delays, "source_length": source, "target_length": ref_len}


def simuleval_scores(case):
    ins = types.SimpleNamespace(delays=case["delays"], source_length=case["source_length"],
                                reference="x", reference_length=case["target_length"],
                                metrics={})
    return ALScorer().compute(ins), LAALScorer().compute(ins)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpe", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--cases", type=int, default=2000)
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    rng = random.Random(11)
    cases = [{"delays": [1], "source_length": 2, "target_length": 1},
             {"delays": [2, 2, 2], "source_length": 2, "target_length": 5},
             {"delays": [3, 4, 5, 6, 6, 6], "source_length": 6, "target_length": 4}]
    cases += [random_case(rng) for _ in range(args.cases)]
    path = os.path.join(args.work, "latency.jsonl")
    with open(path, "w") as f:
        for case in cases:
            f.write(json.dumps(case) + "\n")
    out = subprocess.run([args.gpe, "score", "--latency", path, "--json"], check=True,
                         capture_output=True, text=True).stdout.splitlines()
    rows = [json.loads(line) for line in out]
    if len(rows) != len(cases) + 1:
        sys.exit(f"expected {len(cases) + 1} lines from gpe score, got {len(rows)}")
    failures = 0
    als, laals = [], []
    for case, row in zip(cases, rows):
        al, laal = simuleval_scores(case)
        als.append(al)
        laals.append(laal)
        if abs(al - row["AL"]) > 1e-9 or abs(laal - row["LAAL"]) > 1e-9:
            failures += 1
            if failures <= 10:
                print(f"MISMATCH {case}: gpe AL {row['AL']} LAAL {row['LAAL']}, "
                      f"simuleval AL {al} LAAL {laal}")
    means = rows[-1]
    if abs(means["mean_AL"] - sum(als) / len(als)) > 1e-9 or \
            abs(means["mean_LAAL"] - sum(laals) / len(laals)) > 1e-9:
        failures += 1
        print(f"MISMATCH means: gpe {means}, simuleval {sum(als) / len(als)}, "
              f"{sum(laals) / len(laals)}")
    print(f"{len(cases)} sentences, {failures} mismatches")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
