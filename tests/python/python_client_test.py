#!/usr/bin/env python3
"""The Python client package (client/python, installed with pip by setup_client_venv) against a
real gpeserve on loopback, on the built-in model:

- sync and asyncio sessions give exactly gpe-client's output (text, ids, delays) for the same
  source, pushed as words or as text cut mid-word; generate() equals `gpe eval --mode batch`;
  models() and health() equal gpe-client's;
- report_waiting: one WaitingForSource per pushed word, after every token those words allow,
  with the units read; the output is the same;
- errors surface as the documented exceptions (InvalidArgument, NotFound, Unauthenticated,
  Unavailable, DeadlineExceeded);
- cancelling a session (sync and asyncio) frees it on the server (/metrics: no session left,
  one more `cancelled`).

usage: python_client_test.py --gpeserve BIN --client BIN --gpe BIN --work DIR
"""
import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
from server_process_test import FAILURES, Server, check  # noqa: E402

import gpeserve  # noqa: E402
from gpeserve import AsyncClient, Client  # noqa: E402


SENTENCES = [
    "the speaker said that our city will build a new bridge",
    "Do I see his bird?",
    "Ten friends buy a letter.",
]


def expect_error(name, error_class, call, pattern=""):
    try:
        call()
    except error_class as e:
        message = getattr(e, "message", str(e))
        check(name, re.search(pattern, message) is not None, message)
        return
    except Exception as e:  # noqa: BLE001 (the wrong exception is the failure reported)
        check(name, False, f"{type(e).__name__}: {e}")
        return
    check(name, False, "no error")


def metrics(server):
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics").read()
    return text.decode()


def metric_sum(text, name, labels=""):
    total = 0.0
    for m in re.finditer(rf"^gpeserve:{name}\{{([^}}]*)\}} (\S+)$", text, re.M):
        if labels in m.group(1):
            total += float(m.group(2))
    return total


def wait_idle(server, cancelled_before, timeout=30):
    """Polls /metrics until no session runs or waits and one more was cancelled, or with
    `cancelled_before` None until the cancelled count holds still over a poll; returns (whether
    it came, what was last seen)."""
    deadline = time.time() + timeout
    last = None
    while True:
        text = metrics(server)
        seen = {"running": metric_sum(text, "num_sessions_running"),
                "waiting": metric_sum(text, "num_sessions_waiting"),
                "cancelled": metric_sum(text, "session_finished_total", 'reason="cancelled"'),
                "cancelled before": cancelled_before}
        want = last if cancelled_before is None else cancelled_before + 1
        if seen["running"] == 0 and seen["waiting"] == 0 and seen["cancelled"] == want:
            return True, seen
        last = seen["cancelled"]
        if time.time() > deadline:
            return False, seen
        time.sleep(0.1)


def done_of(text):
    """The SessionDone JSON gpe-client stream --json prints last."""
    return json.loads(text.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpeserve", required=True)
    parser.add_argument("--client", required=True)
    parser.add_argument("--gpe", required=True)
    parser.add_argument("--work", required=True)
    a = parser.parse_args()
    os.makedirs(a.work, exist_ok=True)
    token_file = os.path.join(a.work, "token")
    with open(token_file, "w") as f:
        f.write("s3cret\n")

    server = Server(a.gpeserve, "--drain_seconds", "5")
    secured = Server(a.gpeserve, "--auth_token_file", token_file, "--drain_seconds", "5")
    try:
        run(a, server, secured)
    finally:
        server.stop()
        secured.stop()
    print(f"{len(FAILURES)} failure(s)" if FAILURES else "all checks passed")
    sys.exit(1 if FAILURES else 0)


def run(a, server, secured):
    def gpe_client(*args):
        return subprocess.run([a.client, *args, "--server", server.address], capture_output=True,
                              text=True, timeout=120)

    client = Client(server.address)

    # ---- Outputs equal gpe-client's ----
    for wait_k in (1, 3):
        for sentence in SENTENCES:
            r = gpe_client("stream", "--text", sentence, "--wait_k", str(wait_k),
                           "--words_per_second", "0", "--max_new_tokens", "40", "--json")
            if r.returncode != 0:
                check("gpe-client stream runs", False, r.stderr)
                continue
            want = done_of(r.stdout)
            with client.stream(wait_k=wait_k, max_new_tokens=40) as session:
                for word in sentence.split():
                    session.push([word])
                words = session.result()
            with client.stream(wait_k=wait_k, max_new_tokens=40) as session:
                cut = len(sentence) // 2  # text chunks, a word cut across them
                session.push(sentence[:cut])
                session.push(sentence[cut:])
                text = session.result()
            for how, done in (("words", words), ("text", text)):
                check(f"wait-{wait_k} {sentence[:20]!r} ({how}) == gpe-client",
                      (done.text, list(done.ids), list(done.delays)) ==
                      (want["text"], want["ids"], want["delays"]),
                      (done.text, list(done.delays), want["text"], want["delays"]))

    async def async_session(sentence, wait_k):
        async with AsyncClient(server.address) as aclient:
            session = await aclient.stream(wait_k=wait_k, max_new_tokens=40)
            deltas = []

            async def read():
                async for message in session:
                    if isinstance(message, gpeserve.TokenDelta):
                        deltas.extend(message.ids)
            reader = asyncio.create_task(read())
            for word in sentence.split():
                await session.push([word])
            await session.end()
            await reader
            return session.done, deltas

    for sentence in SENTENCES:
        done, deltas = asyncio.run(async_session(sentence, 3))
        sync = client.stream(wait_k=3, max_new_tokens=40)
        sync.push(sentence)
        want = sync.result()
        check(f"asyncio {sentence[:20]!r} == sync (and its deltas add up)",
              done is not None and (done.text, list(done.ids), list(done.delays)) ==
              (want.text, list(want.ids), list(want.delays)) and deltas == list(done.ids),
              (done, want))

    # generate() is batch mode: gpe eval --mode batch offline on the same built-in model.
    data = os.path.join(a.work, "data.json")
    with open(data, "w") as f:
        json.dump([{"en": s, "de": "x"} for s in SENTENCES], f)
    out = os.path.join(a.work, "batch.jsonl")
    r = subprocess.run([a.gpe, "eval", "--data", data, "--mode", "batch", "--max_new_tokens", "40",
                        "--threads", "1", "--out", out], capture_output=True, text=True,
                       timeout=300)
    check("gpe eval --mode batch runs", r.returncode == 0, r.stderr)
    if r.returncode == 0:
        with open(out) as f:
            offline = [json.loads(line)["output"] for line in f]
        online = [client.generate(s, max_new_tokens=40).text for s in SENTENCES]
        check("generate() == gpe eval --mode batch", online == offline, (online, offline))

    models = client.models()
    r = gpe_client("models")
    listed = [json.loads(line) for line in r.stdout.splitlines()] if r.returncode == 0 else None
    check("models() == gpe-client models (one JSON object per model)",
          listed is not None and [m.name for m in models] == [m["name"] for m in listed] and
          list(models[0].profiles) == listed[0]["profiles"] and
          [x.name for x in models[0].adapters] == [x["name"] for x in listed[0]["adapters"]],
          (models, r.stdout))
    check("health() is True while gpe-client health says SERVING",
          client.health() is True and gpe_client("health").stdout.strip() == "SERVING")

    check_step_log(a, server, data)

    # ---- report_waiting through the API ----
    words = SENTENCES[0].split()
    with client.stream(wait_k=2, max_new_tokens=40, report_waiting=True) as session:
        waits, ids_at_wait, ids = [], [], []

        def until_wait():
            for message in session:
                if isinstance(message, gpeserve.TokenDelta):
                    ids.extend(message.ids)
                elif isinstance(message, gpeserve.WaitingForSource):
                    waits.append(message.source_units_read)
                    ids_at_wait.append(len(ids))
                    return True
            return False  # the session ended
        until_wait()
        pushed, ended_early = 0, False
        for word in words:
            session.push([word])
            pushed += 1
            if not until_wait():
                ended_early = True  # the target ended before the source
                break
        done = session.result()
    plain = client.stream(wait_k=2, max_new_tokens=40)
    plain.push(words)
    want = plain.result()
    check("report_waiting: one WaitingForSource per word pushed, with the units read",
          waits == list(range(len(waits))) and
          len(waits) == pushed + (0 if ended_early else 1), (waits, pushed, ended_early))
    check("report_waiting: the output is the same", list(done.ids) == list(want.ids) and
          list(done.delays) == list(want.delays), (done, want))
    # wait-2: after word w (w >= 2) the session has written w - 1 words; tokens at each wait
    # never shrink and all of them come before the end.
    check("report_waiting: tokens come before the wait that follows them",
          ids_at_wait == sorted(ids_at_wait) and ids_at_wait[1] == 0 and ids_at_wait[-1] > 0,
          ids_at_wait)

    # ---- Errors ----
    expect_error("wait_k 5000 -> InvalidArgument", gpeserve.InvalidArgument,
                 lambda: client.stream(wait_k=5000).result(), "wait_k")
    expect_error("invalid UTF-8 -> InvalidArgument", gpeserve.InvalidArgument,
                 lambda: (lambda s: (s.push([b"ok", b"\xff\xfe"]), s.result()))(client.stream()),
                 "UTF-8")
    expect_error("an unknown adapter -> NotFound", gpeserve.NotFound,
                 lambda: client.stream(adapter="nope").result(), "nope")
    expect_error("a bad split -> ValueError before any call", ValueError,
                 lambda: client.stream(split="letters"))
    expect_error("no token -> Unauthenticated", gpeserve.Unauthenticated,
                 lambda: Client(secured.address).models())
    expect_error("a wrong token -> Unauthenticated", gpeserve.Unauthenticated,
                 lambda: Client(secured.address, token="wrong").stream(wait_k=2).result())
    with Client(secured.address, token="s3cret") as ok:
        s = ok.stream(max_new_tokens=10)
        s.push("hello world")
        check("the right token is accepted", s.result().finish_reason != "")
    expect_error("nothing listening -> Unavailable", gpeserve.Unavailable,
                 lambda: Client("127.0.0.1:1", timeout=5).models())
    expect_error("a stream past its timeout -> DeadlineExceeded", gpeserve.DeadlineExceeded,
                 lambda: list(client.stream(timeout=1.0, wait_k=2)))
    expect_error("asyncio: wait_k 5000 -> InvalidArgument", gpeserve.InvalidArgument,
                 lambda: asyncio.run(async_error(server.address)), "wait_k")

    # ---- Cancellation frees the server's session ----
    # From a quiet server: the sessions of the error cases above (the deadline's, cancelled by
    # the server) must be gone first, or their ends would count with this one's.
    quiet, seen = wait_idle(server, None)
    check("the error cases' sessions are gone from the server", quiet, seen)
    cancelled = seen["cancelled"]
    session = client.stream(wait_k=1, max_new_tokens=40, report_waiting=True)
    session.push(words[:4])
    for message in session:
        if isinstance(message, gpeserve.WaitingForSource) and message.source_units_read == 4:
            break
    running = metric_sum(metrics(server), "num_sessions_running")
    session.cancel()
    idle, seen = wait_idle(server, cancelled)
    check("cancel() frees the session on the server (sync)", running == 1 and idle,
          f"running before the cancel {running}; after: {seen}")
    expect_error("a cancelled session raises Cancelled", gpeserve.Cancelled, lambda: next(session))

    async def async_cancel():
        async with AsyncClient(server.address) as aclient:
            s = await aclient.stream(wait_k=1, max_new_tokens=40, report_waiting=True)
            await s.push(words[:4])
            async for message in s:
                if isinstance(message, gpeserve.WaitingForSource) and \
                        message.source_units_read == 4:
                    break
            s.cancel()
    cancelled = metric_sum(metrics(server), "session_finished_total", 'reason="cancelled"')
    asyncio.run(async_cancel())
    check("cancel() frees the session on the server (asyncio)", *wait_idle(server, cancelled))
    client.close()


def ca_lagging(delays_ms, x, y, unit_ms):
    """Computation-aware AL (engine/eval/report.h), written again here as the oracle."""
    if not delays_ms:
        return 0.0
    gamma = max(1.0, y) / x
    return sum(d - t / gamma * unit_ms for t, d in enumerate(delays_ms)) / len(delays_ms)


def check_step_log(a, server, data):
    """gpe-client eval --log: a line per response; gpe score --latency reads it."""
    log = os.path.join(a.work, "steps.jsonl")
    r = subprocess.run([a.client, "eval", "--server", server.address, "--data", data,
                        "--wait_k", "2", "--max_new_tokens", "40", "--words_per_second", "20",
                        "--concurrency", "2", "--log", log], capture_output=True, text=True,
                       timeout=300)
    check("gpe-client eval --log runs", r.returncode == 0, r.stderr)
    if r.returncode != 0:
        return
    al = float(re.search(r"AL = ([\d.]+)", r.stdout).group(1))
    with open(log) as f:
        lines = [json.loads(line) for line in f]
    kinds = {}
    for line in lines:
        kinds.setdefault(line["session"], []).append(line["kind"])
    check("the log: per session a start, its deltas, then done",
          sorted(kinds) == list(range(len(SENTENCES))) and
          all(k[0] == "start" and k[-1] == "done" and set(k[1:-1]) == {"delta"}
              for k in kinds.values()), kinds)
    check("the log's deltas carry source sent, units read and both clocks",
          all({"source_sent", "source_units_read", "server_time_us", "client_time_us",
               "client_elapsed_ms", "ids", "text"} <= set(line)
              for line in lines if line["kind"] == "delta"))
    r = subprocess.run([a.gpe, "score", "--latency", log, "--json"], capture_output=True,
                       text=True, timeout=60)
    check("gpe score --latency reads the log", r.returncode == 0, r.stderr)
    if r.returncode != 0:
        return
    scored = [json.loads(line) for line in r.stdout.splitlines()]
    check("its ideal AL is gpe-client eval's", abs(scored[-1]["mean_AL"] - al) < 0.0005,
          (scored[-1], al))
    for session in range(len(SENTENCES)):
        own = [line for line in lines if line["session"] == session]
        done = own[-1]
        word_ms = [line["client_elapsed_ms"] for line in own
                   if line["kind"] == "delta" and line["word_complete"]]
        delays_ms = [word_ms[t] if t < len(word_ms) else done["client_elapsed_ms"]
                     for t in range(len(done["delays"]))]
        want = ca_lagging(delays_ms, own[0]["source_words"] + 1, len(done["text"].split()), 50.0)
        got = next(s for s in scored[:-1] if s["session"] == session)
        check(f"session {session}: computation-aware AL from the log's client times",
              abs(got["AL_ms"] - want) < 1e-6, (got, want))
    bad = os.path.join(a.work, "bad.jsonl")
    with open(bad, "w") as f:
        f.write(json.dumps({"kind": "delta", "session": 0}) + "\n")
    r = subprocess.run([a.gpe, "score", "--latency", bad], capture_output=True, text=True)
    check("a log line before its session's start is refused with its line number",
          r.returncode == 1 and "bad.jsonl:1:" in r.stderr and "start" in r.stderr, r.stderr)


async def async_error(address):
    async with AsyncClient(address) as aclient:
        s = await aclient.stream(wait_k=5000)
        await s.result()


if __name__ == "__main__":
    main()
