#!/usr/bin/env python3
"""The soak (scripts/soak): two gpeserve replicas behind deploy/nginx/nginx.conf on loopback,
under generated load with faults, for a given number of minutes.

Load: --concurrency workers, each opening one session after another through nginx (a client of
its own each), English sentences of `gpe make-corpus` pushed word by word at speech pace. Each
session is one of:

- normal: words at --words_per_second (exponential gaps), then EndOfSource;
- slow reader: words at once, responses read with pauses (flow control holds the server back);
- disconnect: the client cancels after a random part of the source;
- deadline: a gRPC deadline of 0.5-3 s, shorter than the source takes (DEADLINE_EXCEEDED,
  or INTERNAL "RST_STREAM" when the server's copy of the deadline fires first and nginx resets
  the stream, unless the session ends first);
- malformed: a request the server must refuse (a chunk before the config, a second config, an
  unknown profile, a chunk after the end, invalid UTF-8, an oversized word), after a valid
  config and words where the kind allows: the documented code, and nothing else lost. (A chunk
  after the end may come after the session completed and its call ended OK: that passes when
  the SessionDone is a completion.)

Every session that ends normally must give exactly the output the same sentence gets alone
(greedy; computed first, one session at a time); a refusal while a replica drains
(UNAVAILABLE before any output) is retried, as a client would. The run is cut in --phases
phases; in the middle of each, replica B gets SIGTERM (it drains for --drain_seconds, must exit
0) and is started again. At each phase's end the load pauses until no session is open, and
both replicas must have no session and no KV block in use.

Report (stdout and --report JSON): per phase the sessions by kind and outcome, errors by code,
KV use after, RSS of both replicas, p50/p99 inter-token latency (the gaps between TokenDeltas
after EndOfSource, when the model writes without waiting for source) and word latency (a word
pushed to the next TokenDelta, when one follows before the next word). Checks: no lost or
wrong output, KV empty after every phase, replica A's RSS drift from the end of phase 1 to the
end < --max_rss_drift, p99 of the second half <= --max_p99_growth x the first half's.

usage: soak.py --gpeserve BIN --gpe BIN --work DIR --minutes M [options]
"""
import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "deploy"))
from loopback import Processes, free_ports, nginx_config, scrape, wait_until  # noqa: E402

import grpc  # noqa: E402

import gpeserve  # noqa: E402
from gpeserve.v1 import gpeserve_pb2 as pb  # noqa: E402

KINDS = {"normal": 0.55, "slow_reader": 0.12, "disconnect": 0.12, "deadline": 0.08,
         "malformed": 0.13}
MAX_NEW_TOKENS = 64
WAIT_K = 3


# ---- Malformed requests: what is sent, and the status the server must answer --------------


def config_request(**settings):
    return pb.StreamRequest(config=gpeserve.session_config(wait_k=WAIT_K, **settings))


def words_request(words):
    return pb.StreamRequest(chunk=pb.SourceChunk(words=[w.encode() for w in words]))


def end_request():
    return pb.StreamRequest(end=pb.EndOfSource())


MALFORMED = {
    # name: (requests given the sentence's words, code, part of the message)
    "chunk_first": (lambda w: [words_request(w[:2])], grpc.StatusCode.INVALID_ARGUMENT,
                    "must be a SessionConfig"),
    "second_config": (lambda w: [config_request(), words_request(w[:2]), config_request()],
                      grpc.StatusCode.INVALID_ARGUMENT, "second SessionConfig"),
    "unknown_profile": (lambda w: [config_request(profile="klingon")],
                        grpc.StatusCode.INVALID_ARGUMENT, "unknown profile"),
    "chunk_after_end": (lambda w: [config_request(), words_request(w[:3]), end_request(),
                                   words_request(w[3:4] or ["late"])],
                        grpc.StatusCode.FAILED_PRECONDITION, "after EndOfSource"),
    "invalid_utf8": (lambda w: [config_request(), words_request(w[:2]),
                                pb.StreamRequest(chunk=pb.SourceChunk(text=b"bad \xff\xfe word"))],
                     grpc.StatusCode.INVALID_ARGUMENT, "not valid UTF-8"),
    "oversized_word": (lambda w: [config_request(), words_request(w[:2]),
                                  words_request(["x" * 5000])],
                       grpc.StatusCode.INVALID_ARGUMENT, "bytes"),
}


# ---- One session of each kind ----------------------------------------------------------------


class Outcome:
    """What one session did: kind, result (ok, wrong, cut, refused, error), code, timings."""

    def __init__(self, kind, phase):
        self.kind = kind
        self.phase = phase
        self.result = None
        self.code = "OK"
        self.detail = ""
        self.retries = 0
        self.itl = []  # seconds between TokenDeltas after EndOfSource
        self.word_latency = []  # seconds from a pushed word to the next TokenDelta


class Reader(threading.Thread):
    """Reads a session's responses as they come (with pauses for a slow reader)."""

    def __init__(self, session, pause=0.0):
        super().__init__(daemon=True)
        self.session = session
        self.pause = pause
        self.deltas = []  # (arrival, token count)
        self.error = None
        self.done = None

    def run(self):
        try:
            for message in self.session:
                if isinstance(message, pb.TokenDelta):
                    self.deltas.append((time.monotonic(), len(message.ids)))
                if self.pause:
                    time.sleep(self.pause)
            self.done = self.session.done
        except gpeserve.GpeserveError as e:
            self.error = e


def speech_gap(rng, words_per_second):
    return min(rng.expovariate(words_per_second), 4.0 / words_per_second)


def refusal(message):
    """A draining replica's refusal of a new session (the client retries it)."""
    return "shutting down" in message


def run_stream(client, words, expected, kind, rng, args, out):
    """A live session of kind normal, slow_reader, disconnect or deadline."""
    timeout = rng.uniform(0.5, 3.0) if kind == "deadline" else None
    cut_at = rng.randint(1, max(1, len(words) - 1)) if kind == "disconnect" else None
    session = client.stream(wait_k=WAIT_K, max_new_tokens=MAX_NEW_TOKENS, timeout=timeout)
    reader = Reader(session, pause=0.2 if kind == "slow_reader" else 0.0)
    reader.start()
    pushed = []  # (time, word index)
    for i, word in enumerate(words):
        if kind == "disconnect" and i == cut_at:
            break
        if reader.error is not None:
            break
        session.push([word])
        pushed.append(time.monotonic())
        if kind != "slow_reader":
            time.sleep(speech_gap(rng, args.words_per_second))
    if kind == "disconnect":
        session.cancel()
        reader.join(30)
        out.result = "cut"
        out.code = "CANCELLED"
        return
    ended = time.monotonic()
    session.end()
    reader.join(120)
    if reader.is_alive():
        session.cancel()
        out.result, out.code, out.detail = "error", "HANG", "no SessionDone within 120 s"
        return
    if reader.error is not None:
        out.code = reader.error.code.name
        out.detail = reader.error.message
        if kind == "deadline" and out.code == "DEADLINE_EXCEEDED":
            out.result = "cut"
        elif kind == "deadline" and out.code == "INTERNAL" and "RST_STREAM" in out.detail:
            out.result = "cut"  # the server's deadline fired first; nginx reset the stream
        elif out.code == "UNAVAILABLE" and not reader.deltas and refusal(out.detail):
            out.result = "refused"
        elif out.code == "UNAVAILABLE" and "drain_seconds" in out.detail:
            out.result = "cut"  # the replica's drain time ran out under it
        else:
            out.result = "error"
        return
    done = reader.done
    got = list(done.ids)
    if got != expected:
        out.result = "wrong"
        out.detail = f"ids {got} != alone {expected}"
        return
    out.result = "ok"
    if kind == "slow_reader":
        return  # its gaps are its own pauses
    times = [t for t, _ in reader.deltas]
    tail = [t for t in times if t > ended]
    out.itl = [b - a for a, b in zip(tail, tail[1:])]
    for i, t in enumerate(pushed):
        nxt = pushed[i + 1] if i + 1 < len(pushed) else ended
        after = [d for d in times if t <= d < nxt]
        if after:
            out.word_latency.append(after[0] - t)


def run_malformed(client, words, rng, out):
    name = rng.choice(sorted(MALFORMED))
    make, code, fragment = MALFORMED[name]
    out.kind = f"malformed:{name}"
    requests = make(words)
    call = client._stub.Stream(iter(requests), timeout=30)  # raw requests, on purpose
    try:
        responses = list(call)
        done = responses[-1].done if responses and responses[-1].HasField("done") else None
        if name == "chunk_after_end" and done is not None and done.finish_reason != "cancelled":
            # The session completed before the late chunk was read: the call had ended OK and
            # the chunk was never seen (the server cannot refuse what comes after its answer).
            out.result, out.code = "ok", "OK"
        else:
            out.result, out.code, out.detail = "error", "OK", f"{name}: accepted"
    except grpc.RpcError as e:
        out.code = e.code().name
        message = e.details() or ""
        if e.code() == grpc.StatusCode.UNAVAILABLE and refusal(message):
            out.result = "refused"
        elif e.code() == code and fragment in message:
            out.result = "ok"
        else:
            out.result = "error"
            out.detail = f"{name}: expected {code.name} '{fragment}', got {message}"


def run_session(client, sentences, expected, rng, args, phase):
    words_index = rng.randrange(len(sentences))
    words = sentences[words_index]
    kind = rng.choices(list(KINDS), weights=list(KINDS.values()))[0]
    for attempt in range(6):
        out = Outcome(kind, phase)
        out.retries = attempt
        try:
            if kind == "malformed":
                run_malformed(client, words, rng, out)
            else:
                run_stream(client, words, expected[words_index], kind, rng, args, out)
        except Exception as e:  # noqa: BLE001 (a failure of the driver is reported as one)
            out.result, out.code = "error", "DRIVER"
            out.detail = f"{type(e).__name__}: {e}\n{traceback.format_exc()}"
        if out.result != "refused":
            return out
        time.sleep(0.5)
    return out


# ---- Replicas, nginx, metrics ------------------------------------------------------------------


class Replica:
    def __init__(self, name, procs, args, grpc_port, metrics_port):
        self.name = name
        self.procs = procs
        self.args = args
        self.grpc_port = grpc_port
        self.metrics_port = metrics_port
        self.proc = None
        self.starts = 0

    def start(self):
        self.starts += 1
        self.proc = self.procs.start(f"{self.name}-{self.starts}", [
            self.args.gpeserve, "--listen", f"127.0.0.1:{self.grpc_port}",
            "--metrics_listen", f"127.0.0.1:{self.metrics_port}", "--threads",
            str(self.args.threads), "--drain_seconds", str(self.args.drain_seconds)])
        address = f"127.0.0.1:{self.grpc_port}"

        def healthy():
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}")
            try:
                with gpeserve.Client(address, timeout=2) as c:
                    return c.health()
            except gpeserve.GpeserveError:
                return False
        if not wait_until(healthy, 120):
            raise RuntimeError(f"{self.name} did not become healthy")

    def rss_mib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def state(self):
        s = scrape(self.metrics_port)

        def value(name):
            return sum(v for (n, _), v in s.items() if n == f"gpeserve:{name}")
        return {"running": value("num_sessions_running"), "waiting": value("num_sessions_waiting"),
                "kv_usage": value("kv_cache_usage_perc"), "rss_mib": round(self.rss_mib(), 1)}


def percentile(values, q):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def compute_expected(address, sentences):
    """Each sentence's output alone (one session at a time, words at once)."""
    expected = []
    with gpeserve.Client(address) as client:
        for words in sentences:
            with client.stream(wait_k=WAIT_K, max_new_tokens=MAX_NEW_TOKENS) as session:
                session.push(words)
                expected.append(list(session.result().ids))
    return expected


# ---- The run -------------------------------------------------------------------------------


def restart_b(b, log):
    """SIGTERM replica B mid-phase; it must drain and exit 0; then it starts again."""
    t0 = time.monotonic()
    b.proc.send_signal(signal.SIGTERM)
    try:
        rc = b.proc.wait(timeout=b.args.drain_seconds + 30)
    except subprocess.TimeoutExpired:
        b.proc.kill()
        rc = "killed"
    drained = time.monotonic() - t0
    b.start()
    log.append({"exit_code": rc, "drain_s": round(drained, 2),
                "down_s": round(time.monotonic() - t0, 2)})


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpeserve", required=True)
    p.add_argument("--gpe", required=True)
    p.add_argument("--nginx", default="/usr/sbin/nginx")
    p.add_argument("--repo", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "..", ".."))
    p.add_argument("--work", required=True)
    p.add_argument("--minutes", type=float, default=60)
    p.add_argument("--phases", type=int, default=0, help="default: one per 6 minutes, >= 2")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--words_per_second", type=float, default=2.5)
    p.add_argument("--sentences", type=int, default=120)
    p.add_argument("--threads", type=int, default=1, help="gpeserve --threads of each replica")
    p.add_argument("--drain_seconds", type=int, default=30)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max_rss_drift", type=float, default=0.05)
    p.add_argument("--max_p99_growth", type=float, default=1.5)
    p.add_argument("--report", default="")
    args = p.parse_args()
    phases = args.phases or max(2, round(args.minutes / 6))
    phase_seconds = args.minutes * 60 / phases
    os.makedirs(os.path.join(args.work, "nginx"), exist_ok=True)

    corpus = os.path.join(args.work, "corpus.json")
    subprocess.run([args.gpe, "make-corpus", "--seed", "17", "--count", str(args.sentences),
                    "--out", corpus], check=True, timeout=120)
    with open(corpus, encoding="utf-8") as f:
        sentences = [item["en"].split() for item in json.load(f)]

    procs = Processes(args.work)
    # SIGTERM (a timeout, an operator) still stops the replicas and nginx (the finally below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    failures = []
    try:
        grpc_a, grpc_b, metrics_a, metrics_b, nginx_port = free_ports(5)
        a = Replica("replica-a", procs, args, grpc_a, metrics_a)
        b = Replica("replica-b", procs, args, grpc_b, metrics_b)
        a.start()
        b.start()
        conf = nginx_config(args.repo, args.work, nginx_port, [grpc_a, grpc_b])
        procs.start("nginx", [args.nginx, "-p", f"{args.work}/nginx", "-c", conf, "-e",
                              f"{args.work}/nginx/error.log", "-g",
                              f"daemon off; pid {args.work}/nginx/nginx.pid;"])
        front = f"127.0.0.1:{nginx_port}"
        t0 = time.monotonic()
        expected = compute_expected(f"127.0.0.1:{grpc_a}", sentences)
        print(f"soak: {len(sentences)} sentences alone in {time.monotonic() - t0:.1f} s; "
              f"{phases} phases of {phase_seconds:.0f} s, {args.concurrency} sessions at a time "
              f"through nginx at {front}", flush=True)

        rng = random.Random(args.seed)
        report = {"args": vars(args), "phases": []}
        for phase in range(phases):
            outcomes, lock = [], threading.Lock()
            stop = threading.Event()
            seeds = [rng.randrange(1 << 30) for _ in range(args.concurrency)]

            def worker(seed, phase=phase, outcomes=outcomes, lock=lock, stop=stop):
                wrng = random.Random(seed)
                with gpeserve.Client(front) as client:
                    while not stop.is_set():
                        out = run_session(client, sentences, expected, wrng, args, phase)
                        with lock:
                            outcomes.append(out)
            workers = [threading.Thread(target=worker, args=(s,), daemon=True) for s in seeds]
            started = time.monotonic()
            for w in workers:
                w.start()
            restarts = []
            time.sleep(phase_seconds / 2)
            restart_b(b, restarts)
            time.sleep(max(0.0, started + phase_seconds - time.monotonic()))
            stop.set()
            for w in workers:
                w.join(300)
            hung = sum(w.is_alive() for w in workers)
            def empty(r):
                state = r.state()  # one scrape
                return state["running"] == 0 and state["waiting"] == 0
            idle = wait_until(lambda: empty(a) and empty(b), 30)
            states = {r.name: r.state() for r in (a, b)}
            summary = summarize(phase, outcomes, states, restarts, time.monotonic() - started)
            summary["hung_workers"] = hung
            report["phases"].append(summary)
            print_phase(summary)
            if hung or not idle:
                failures.append(f"phase {phase + 1}: {hung} workers hung, idle={idle}")
            for name, state in states.items():
                if state["kv_usage"] != 0 or state["running"] or state["waiting"]:
                    failures.append(f"phase {phase + 1}: {name} not empty after the phase: "
                                    f"{state}")
            if any(r["exit_code"] != 0 for r in restarts):
                failures.append(f"phase {phase + 1}: replica B's drain: {restarts}")
            for out in outcomes:
                if out.result in ("error", "wrong"):
                    failures.append(f"phase {phase + 1}: {out.kind} {out.result} {out.code}: "
                                    f"{out.detail[:300]}")
                    print(f"FAIL {failures[-1]}", flush=True)  # as they come, in a long run
        check_trends(report, args, failures)
        report["failures"] = failures
        if args.report:
            with open(args.report, "w") as f:
                json.dump(report, f, indent=1)
    finally:
        procs.stop_all()
    for f in failures[:50]:
        print(f"FAIL {f}")
    print(f"soak: {'passed' if not failures else f'{len(failures)} failures'}")
    return 1 if failures else 0


def summarize(phase, outcomes, states, restarts, seconds):
    by_kind, codes = {}, {}
    for out in outcomes:
        kind = out.kind.split(":")[0]
        by_kind.setdefault(kind, {}).setdefault(out.result, 0)
        by_kind[kind][out.result] += 1
        codes[out.code] = codes.get(out.code, 0) + 1
    itl = [x for out in outcomes for x in out.itl]
    words = [x for out in outcomes for x in out.word_latency]
    ms = lambda v: None if v is None else round(v * 1000, 1)  # noqa: E731
    return {"phase": phase + 1, "seconds": round(seconds, 1), "sessions": len(outcomes),
            "retried_refusals": sum(out.retries for out in outcomes),
            "by_kind": by_kind, "codes": codes, "restarts": restarts, "replicas": states,
            "itl_ms": {"p50": ms(percentile(itl, 0.5)), "p99": ms(percentile(itl, 0.99)),
                       "n": len(itl)},
            "word_latency_ms": {"p50": ms(percentile(words, 0.5)),
                                "p99": ms(percentile(words, 0.99)), "n": len(words)},
            "lost_or_wrong": sum(out.result in ("error", "wrong") for out in outcomes)}


def print_phase(s):
    kinds = ", ".join(f"{k} {sum(v.values())} ({' '.join(f'{r} {n}' for r, n in sorted(v.items()))})"
                      for k, v in sorted(s["by_kind"].items()))
    replicas = "; ".join(f"{n}: kv {st['kv_usage']:.3f}, rss {st['rss_mib']} MiB"
                         for n, st in s["replicas"].items())
    print(f"phase {s['phase']}: {s['sessions']} sessions in {s['seconds']} s: {kinds}; codes "
          f"{s['codes']}; lost/wrong {s['lost_or_wrong']}; ITL p50/p99 {s['itl_ms']['p50']}/"
          f"{s['itl_ms']['p99']} ms (n {s['itl_ms']['n']}); word latency p50/p99 "
          f"{s['word_latency_ms']['p50']}/{s['word_latency_ms']['p99']} ms; B restart "
          f"{s['restarts']}; {replicas}", flush=True)


def check_trends(report, args, failures):
    phases = report["phases"]
    first = phases[0]["replicas"]["replica-a"]["rss_mib"]
    last = phases[-1]["replicas"]["replica-a"]["rss_mib"]
    drift = (last - first) / first
    report["rss_drift_a"] = round(drift, 4)
    print(f"soak: replica A RSS {first} MiB after phase 1, {last} MiB at the end: drift "
          f"{drift * 100:+.2f} %")
    if drift >= args.max_rss_drift:
        failures.append(f"replica A's RSS grew {drift * 100:.2f} % (limit "
                        f"{args.max_rss_drift * 100:.0f} %)")
    half = len(phases) // 2
    p99 = [ph["itl_ms"]["p99"] for ph in phases if ph["itl_ms"]["p99"] is not None]
    if len(p99) >= 2:
        early = statistics.median(p99[:max(1, half)])
        late = statistics.median(p99[max(1, half):])
        report["itl_p99_growth"] = round(late / early, 3)
        print(f"soak: ITL p99 median {early} ms in the first half, {late} ms in the second "
              f"(x{late / early:.2f})")
        if late > args.max_p99_growth * early:
            failures.append(f"ITL p99 grew from {early} to {late} ms")
    lost = sum(ph["lost_or_wrong"] for ph in phases)
    total = sum(ph["sessions"] for ph in phases)
    print(f"soak: {total} sessions, {lost} lost or wrong")


if __name__ == "__main__":
    sys.exit(main())
