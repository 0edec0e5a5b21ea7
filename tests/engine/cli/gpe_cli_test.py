#!/usr/bin/env python3
"""Behaviour of the `gpe` binary on good and bad input: exit codes, error lines, --help.

usage: gpe_cli_test.py --gpe BIN --model DIR   (DIR: any tokenizer folder)
Only the standard library is used.
"""
import argparse
import json
import subprocess
import sys

failures = []
passes = []


def check(name, condition, detail=""):
    (passes.append(name) if condition else failures.append(f"{name}: {detail}"))


def run(args, stdin=b""):
    proc = subprocess.run(args, input=stdin, capture_output=True)
    return proc.returncode, proc.stdout.decode("utf-8"), proc.stderr.decode("utf-8", "replace")


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

    for command in ("tokenize", "detokenize", "train-tokenizer"):
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
