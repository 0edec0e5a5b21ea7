#!/usr/bin/env python3
"""The built-in prompt profiles against the chat templates of the models they serve.

A profile lays a streaming session out as: instruct (with the instruction) + user + the source
+ end + assistant, then the target. Rendered by each model family's own chat template (Jinja,
as transformers renders it: trim_blocks, lstrip_blocks, loop controls) for a conversation
whose user turn holds the source, the template's text must equal the profile's. Templates: the
tokenizer_config.json of the real vocabularies (Qwen3, Llama 3, Gemma 3) and Phi-3's template
(written here: the Llama 2 vocabulary that serves Phi-3 test folders has none).

With --gpe, the profile's text is also tokenized by gpeserve's tokenizer with the family's real
vocabulary: every chat marker of the profile (an added token of that vocabulary, e.g.
<start_of_turn>) must come out as its one token id, not as pieces of text.

usage: profile_template_test.py --profiles DIR --vocabs DIR [--gpe BIN]
"""
import argparse
import json
import os
import sys

import subprocess

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

SOURCE = "SOURCE WORDS"

# Phi-3-mini-4k-instruct's chat_template.
PHI3_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'system' %}"
    "{{'<|system|>\n' + message['content'] + '<|end|>\n'}}"
    "{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}"
    "{% elif message['role'] == 'assistant' %}"
    "{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}")


def render(template, messages, config, **extra):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(
        messages=messages, add_generation_prompt=True, bos_token=config.get("bos_token") or "",
        eos_token=config.get("eos_token") or "", **extra)


def check_markers(gpe, vocab_dir, name, pieces):
    """Each added token written in the pieces is tokenized as its own id."""
    path = os.path.join(vocab_dir, "tokenizer.json")
    with open(path) as f:
        added = {t["content"]: t["id"] for t in json.load(f)["added_tokens"]}
    lines = "".join(json.dumps(piece) + "\n" for piece in pieces)
    r = subprocess.run([gpe, "tokenize", "--tokenizer", path], input=lines, capture_output=True,
                       text=True)
    if r.returncode != 0:
        print(f"FAIL {name}: gpe tokenize: {r.stderr}")
        return False
    ok = True
    checked = 0
    for piece, line in zip(pieces, r.stdout.splitlines()):
        ids = json.loads(line)["ids"]
        for marker, marker_id in added.items():
            if marker in piece:
                checked += 1
                if ids.count(marker_id) != piece.count(marker):
                    print(f"FAIL {name}: {marker!r} in {piece!r} is not token {marker_id}: {ids}")
                    ok = False
    print(f"{'ok  ' if ok and checked else 'FAIL'} {name:8} {checked} chat markers are single "
          f"tokens of {os.path.basename(vocab_dir)}")
    return ok and checked > 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", required=True, help="engine/policy/profiles")
    parser.add_argument("--vocabs", required=True, help="the shared tokenizer folders")
    parser.add_argument("--gpe", help="the gpe binary: also check the markers' token ids")
    args = parser.parse_args()

    def template_of(vocab):
        with open(os.path.join(args.vocabs, vocab, "tokenizer_config.json")) as f:
            config = json.load(f)
        return config["chat_template"], config

    # profile, template source, whether the template has a system turn, template arguments,
    # the vocabulary whose added tokens the markers are (None: the shared vocabularies have
    # none of Phi-3's markers).
    cases = [
        ("qwen2.5", template_of("qwen3"), True, {}, "qwen3"),  # ChatML without thinking
        ("qwen3", template_of("qwen3"), True, {"enable_thinking": False}, "qwen3"),
        ("llama3", template_of("llama3"), True, {}, "llama3"),
        ("gemma2", template_of("gemma3"), False, {}, "gemma3"),
        ("phi3", (PHI3_TEMPLATE, {"eos_token": "<|endoftext|>"}), True, {}, None),
    ]
    failed = 0
    covered = set()
    for name, (template, config), has_system, extra, vocab in cases:
        with open(os.path.join(args.profiles, name + ".json")) as f:
            p = json.load(f)
        covered.add(name)
        instruction = p["instruction"]
        if has_system:
            messages = [{"role": "system", "content": instruction},
                        {"role": "user", "content": SOURCE}]
        else:  # the instruction opens the user turn
            messages = [{"role": "user", "content": instruction + "\n" + SOURCE}]
        want = render(template, messages, config, **extra)
        got = (p["instruct"].replace("{instruction}", instruction) + p["user"] + SOURCE + p["end"]
               + p["assistant"])
        ok = got == want
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name:8} {json.dumps(got)}")
        if not ok:
            print(f"     template: {json.dumps(want)}")
        if args.gpe and vocab:
            failed += not check_markers(args.gpe, os.path.join(args.vocabs, vocab), name, [
                p["instruct"].replace("{instruction}", instruction), p["user"], p["end"],
                p["assistant"]])
    missing = {f[:-5] for f in os.listdir(args.profiles) if f.endswith(".json")} - covered
    if missing:
        print(f"FAIL profiles without a template case: {sorted(missing)}")
        failed += 1
    print(f"{failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
