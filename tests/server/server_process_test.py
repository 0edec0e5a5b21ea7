#!/usr/bin/env python3
"""The gpeserve process end to end: a Python client (grpcio, stubs generated from our .proto
by grpcio-tools) completes sessions, gpe-client streams and checks health, /metrics answers,
TLS with a bearer token works (certificate made here), and SIGTERM drains: health turns
NOT_SERVING, new sessions get UNAVAILABLE, the running session finishes, the process exits 0.

and gpe-client eval against a served model folder equals `gpe eval` offline on the same
folder, sentence by sentence.

usage: server_process_test.py --gpeserve BIN --client BIN --gpe BIN --tokenizer DIR
                              --proto DIR --work DIR
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

FAILURES = []


def check(name, condition, detail=""):
    print(("ok   " if condition else "FAIL ") + name + ("" if condition else f": {detail}"))
    if not condition:
        FAILURES.append(name)


class Server:
    def __init__(self, binary, *flags):
        self.proc = subprocess.Popen([binary, "--listen", "127.0.0.1:0", "--metrics_listen",
                                      "127.0.0.1:0", "--threads", "1", *flags],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines = []
        m = None
        while not m and len(self.lines) < 20:  # the kernel path line, then "serving ... on"
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line)
            m = re.search(r"on [\d.]+:(\d+), metrics on port (\d+)", line)
        if not m:
            self.proc.kill()
            raise RuntimeError("gpeserve did not start: " + "".join(self.lines) +
                               self.proc.stdout.read())
        self.port, self.metrics_port = int(m.group(1)), int(m.group(2))
        self.address = f"127.0.0.1:{self.port}"
        threading.Thread(target=self._drain_output, daemon=True).start()

    def _drain_output(self):
        for line in self.proc.stdout:
            self.lines.append(line)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpeserve", required=True)
    parser.add_argument("--client", required=True)
    parser.add_argument("--gpe", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--proto", required=True)
    parser.add_argument("--work", required=True)
    a = parser.parse_args()
    os.makedirs(a.work, exist_ok=True)

    # Stubs from our .proto, as any other-language client would make them.
    from grpc_tools import protoc
    rc = protoc.main(["protoc", f"-I{a.proto}", f"--python_out={a.work}",
                      f"--grpc_python_out={a.work}", "gpeserve/v1/gpeserve.proto"])
    check("grpcio-tools compiles the .proto", rc == 0, rc)
    sys.path.insert(0, a.work)
    import grpc
    from gpeserve.v1 import gpeserve_pb2 as pb
    from gpeserve.v1 import gpeserve_pb2_grpc as pb_grpc

    def session(stub, words, pace=0.0, metadata=None, **config):
        def requests():
            yield pb.StreamRequest(config=pb.SessionConfig(**config))
            for w in words:
                if pace:
                    time.sleep(pace)
                yield pb.StreamRequest(chunk=pb.SourceChunk(words=[w.encode()]))
            yield pb.StreamRequest(end=pb.EndOfSource())
        ids, done = [], None
        for response in stub.Stream(requests(), metadata=metadata):
            if response.HasField("delta"):
                ids.extend(response.delta.ids)
            else:
                done = response.done
        return ids, done

    def client(*args):
        return subprocess.run([a.client, *args], capture_output=True, text=True, timeout=120)

    # ---- A plain server on the default model ----
    server = Server(a.gpeserve, "--drain_seconds", "20")
    check("the kernel path is logged before serving (the default model: auto -> its bf16 "
          "weights on a CPU with AVX2, fp32 without)",
          re.search(r"gpeserve: cpu (scalar|avx2|avx512), 1 threads: (bf16|fp32) weights, fp32 "
                    r"activations", "".join(server.lines)) is not None, server.lines)
    channel = grpc.insecure_channel(server.address)
    stub = pb_grpc.GpeserveStub(channel)
    models = stub.ListModels(pb.ListModelsRequest()).models
    check("ListModels names the default model", len(models) == 1 and
          models[0].name == "gpeserve-en-de-small" and "qwen2.5" in models[0].profiles, models)
    words = "the speaker said that our city will build a new bridge".split()
    ids, done = session(stub, words, wait_k=2, max_new_tokens=20)
    check("Python client completes a session", done is not None and list(done.ids) == ids and
          len(ids) > 0 and done.finish_reason in ("end_of_sequence", "max_new_tokens", "max_lag"),
          (ids, done))
    again, done_again = session(stub, words, pace=0.01, wait_k=2, max_new_tokens=20)
    check("paced and unpaced sessions agree (greedy)", again == ids, (again, ids))
    try:
        session(stub, ["x"], wait_k=5000)
        check("bad config refused", False, "no error")
    except grpc.RpcError as e:
        check("bad config refused with INVALID_ARGUMENT",
              e.code() == grpc.StatusCode.INVALID_ARGUMENT and "wait_k" in e.details(), e)

    r = client("health", "--server", server.address)
    check("gpe-client health: SERVING", r.returncode == 0 and "SERVING" in r.stdout, r)
    r = client("stream", "--server", server.address, "--text", " ".join(words),
               "--words_per_second", "50", "--wait_k", "2", "--max_new_tokens", "20")
    check("gpe-client stream prints text, delays and AL",
          r.returncode == 0 and "text: " in r.stdout and "delays: [" in r.stdout and
          "AL = " in r.stdout, r)
    r = client("stream", "--server", server.address, "--text",
               "The young woman reads a new book because the small dog sees the cat.",
               "--words_per_second", "50", "--wait_k", "3")
    check("the default model translates English to German live",
          r.returncode == 0 and "text: Die junge Frau liest ein neues Buch, weil der kleine Hund "
          "die Katze sieht.\n" in r.stdout, r)
    # The built-in de-en adapter rides along with the default model, its instruction with it.
    check("ListModels lists the built-in de-en adapter with its instruction",
          [x.name for x in models[0].adapters] == ["de-en"] and
          models[0].adapters[0].instruction ==
          "Translate the following German paragraph to English", models)
    r = client("stream", "--server", server.address, "--adapter", "de-en", "--text",
               "Die junge Frau liest ein neues Buch, weil der kleine Hund die Katze sieht.",
               "--words_per_second", "50", "--wait_k", "3")
    check("the built-in de-en adapter translates German to English live",
          r.returncode == 0 and "text: The young woman reads a new book because the small dog "
          "sees the cat.\n" in r.stdout, r)
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics").read()
    metrics = metrics.decode()
    for family in ("time_to_first_token_seconds", "inter_token_latency_seconds",
                   "e2e_session_latency_seconds", "queue_time_seconds", "num_sessions_running",
                   "num_sessions_waiting", "kv_cache_usage_perc", "source_tokens_total",
                   "generation_tokens_total", "num_preemptions_total",
                   "prefix_cache_queries_total", "prefix_cache_hits_total",
                   "session_finished_total", "iteration_tokens", "word_lag_words",
                   "word_lag_seconds", "request_errors_total"):
        check(f"/metrics has gpeserve:{family}", f"# TYPE gpeserve:{family} " in metrics)
    m = re.search(r'gpeserve:e2e_session_latency_seconds_count\{adapter="base",model="[^"]*"\} '
                  r'(\d+)', metrics)
    # Two Python sessions and two of gpe-client on the base (the refused one never opened; the
    # warm-up runs on the engine directly), one on de-en.
    check("/metrics counts the sessions run", m is not None and int(m.group(1)) == 4,
          m and m.group(0))
    m = re.search(r'gpeserve:e2e_session_latency_seconds_count\{adapter="de-en",model="[^"]*"\} '
                  r'(\d+)', metrics)
    check("/metrics counts the de-en session under its adapter",
          m is not None and int(m.group(1)) == 1, m and m.group(0))
    m = re.search(r'gpeserve:request_errors_total\{code="INVALID_ARGUMENT",model="[^"]*"\} (\d+)',
                  metrics)
    check("/metrics counts the refused call", m is not None and int(m.group(1)) == 1,
          m and m.group(0))

    # A long-form session (issue 20) through gpe-client: a talk of three lines, one of them
    # without a full stop (a boundary after each line cuts it), each segment translated as the
    # sentence alone is; the segments show in /metrics.
    talk = os.path.join(a.work, "talk.txt")
    with open(talk, "w", encoding="utf-8") as f:
        f.write("The young woman reads a new book because the small dog sees the cat.\n"
                "The dog sees the small cat\nThe teacher calls the mother.\n")
    r = client("stream", "--server", server.address, "--long_form", "--file", talk,
               "--words_per_second", "100", "--wait_k", "3", "--json")
    summary = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {}
    alone = client("stream", "--server", server.address, "--text", "The dog sees the small cat",
                   "--words_per_second", "0", "--wait_k", "3")
    alone_text = re.search(r"^text: (.*)$", alone.stdout, re.M)
    check("gpe-client stream --long_form translates each segment as its sentence alone",
          r.returncode == 0 and alone_text is not None and
          f"boundary] {alone_text.group(1)}  (LAAL" in r.stdout and
          "sentence_mark] Die junge Frau liest ein neues Buch, weil der kleine Hund die Katze "
          "sieht.  (LAAL" in r.stdout and
          "sentence_mark] Der Lehrer ruft die Mutter an.  (LAAL" in r.stdout and
          summary.get("segments") == 3 and
          summary.get("kv_blocks_high_water", 0) > 0 and
          summary.get("finish_reason") == "end_of_source", r)
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics").read()
    check("/metrics counts the long-form segments",
          re.search(r'gpeserve:segments_total\{adapter="base",model="[^"]*"\} 3', metrics.decode())
          is not None, metrics)

    # Drain: a slow session (its reference computed unpaced first) runs while SIGTERM arrives.
    long_words = (words * 3)[:30]
    long_ids, long_done = session(stub, long_words, wait_k=2, max_new_tokens=300)
    result = {}

    def slow():
        try:
            result["ids"], result["done"] = session(stub, long_words, pace=0.15, wait_k=2,
                                                    max_new_tokens=300)
        except grpc.RpcError as e:
            result["error"] = e
    t = threading.Thread(target=slow)
    t.start()
    time.sleep(0.8)
    server.proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    still_running = t.is_alive()
    check("the slow session outlasts the first second of the drain", still_running,
          long_done.finish_reason)
    r = client("health", "--server", server.address)
    check("draining: health NOT_SERVING", r.returncode == 1 and "NOT_SERVING" in r.stdout, r)
    try:
        session(stub, ["x"])
        check("draining: new session refused", False, "no error")
    except grpc.RpcError as e:
        check("draining: new session UNAVAILABLE",
              e.code() == grpc.StatusCode.UNAVAILABLE and "shutting down" in e.details(), e)
    t.join(timeout=60)
    check("draining: the running session finishes", "done" in result and
          result["ids"] == long_ids, result)
    code = server.stop()
    check("SIGTERM: exit 0", code == 0, "".join(server.lines))

    # ---- TLS and a bearer token ----
    cert, key = os.path.join(a.work, "cert.pem"), os.path.join(a.work, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", key, "-out", cert], check=True, capture_output=True)
    token_file = os.path.join(a.work, "token")
    with open(token_file, "w") as f:
        f.write("t0ken\n")
    secure = Server(a.gpeserve, "--tls_cert", cert, "--tls_key", key, "--auth_token_file",
                    token_file)
    with open(cert, "rb") as f:
        credentials = grpc.ssl_channel_credentials(root_certificates=f.read())
    tls = pb_grpc.GpeserveStub(grpc.secure_channel(secure.address, credentials))
    ids_tls, done_tls = session(tls, words, metadata=[("authorization", "Bearer t0ken")],
                                wait_k=2, max_new_tokens=20)
    check("TLS + token: session completes", done_tls is not None and ids_tls == ids,
          (ids_tls, ids))
    try:
        session(tls, words, wait_k=2)
        check("TLS without token refused", False, "no error")
    except grpc.RpcError as e:
        check("TLS without token: UNAUTHENTICATED",
              e.code() == grpc.StatusCode.UNAUTHENTICATED, e)
    r = client("health", "--server", secure.address, "--tls_ca", cert)
    check("gpe-client health over TLS", r.returncode == 0, r)
    r = client("stream", "--server", secure.address, "--tls_ca", cert, "--auth_token_file",
               token_file, "--text", "hello world", "--words_per_second", "0")
    check("gpe-client stream over TLS with token", r.returncode == 0 and "text: " in r.stdout, r)
    try:
        pb_grpc.GpeserveStub(grpc.insecure_channel(secure.address)).ListModels(
            pb.ListModelsRequest(), timeout=5)
        check("plaintext to a TLS server fails", False, "no error")
    except grpc.RpcError as e:
        check("plaintext to a TLS server fails", e.code() == grpc.StatusCode.UNAVAILABLE, e)
    check("TLS server exits 0", secure.stop() == 0, "".join(secure.lines))

    # ---- gpe-client eval (live, paced, concurrent) == gpe eval (offline) on a model folder ----
    model_dir = os.path.join(a.work, "model")
    r = subprocess.run([a.gpe, "make-model", "--tokenizer", a.tokenizer, "--out", model_dir,
                        "--init_std", "0.3", "--seed", "4"], capture_output=True, text=True)
    check("make-model", r.returncode == 0, r.stderr)
    data = os.path.join(a.work, "data.json")
    sentences = ["the dog sees the cat", "hello", "a big red house in the garden today",
                 "we will talk about how machines listen", "good morning ladies and gentlemen",
                 "one two three four five six seven"]
    with open(data, "w") as f:
        json.dump([{"en": s_, "de": "x"} for s_ in sentences], f)
    served = Server(a.gpeserve, "--model", model_dir, "--drain_seconds", "1")
    for compat in ("none", "reference"):
        flags = ["--data", data, "--wait_k", "2", "--max_new_tokens", "16", "--compat", compat]
        live_out = os.path.join(a.work, f"live-{compat}.jsonl")
        offline_out = os.path.join(a.work, f"off-{compat}.jsonl")
        r = client("eval", "--server", served.address, "--concurrency", "3", "--words_per_second",
                   "40", "--out", live_out, *flags)
        check(f"gpe-client eval runs (compat {compat})", r.returncode == 0 and
              "computation-aware AL" in r.stdout and "throughput" in r.stdout, r)
        r2 = subprocess.run([a.gpe, "eval", "--model", model_dir, "--threads", "1", "--out",
                             offline_out, *flags], capture_output=True, text=True)
        check(f"gpe eval runs (compat {compat})", r2.returncode == 0, r2.stderr)
        if r.returncode == 0 and r2.returncode == 0:
            live = [json.loads(line) for line in open(live_out)]
            offline = [json.loads(line) for line in open(offline_out)]
            check(f"live (server) == offline (gpe eval), sentence by sentence (compat {compat})",
                  [(x["output_ids"], x["delays"], x["output"]) for x in live] ==
                  [(x["output_ids"], x["delays"], x["output"]) for x in offline], (live, offline))
            # BLEU, then AL and LAAL: the same numbers live and offline.
            lines = lambda out: out.splitlines()[0] + re.search(r"AL = \S+  LAAL = \S+", out)[0]
            check(f"same BLEU, AL and LAAL (compat {compat})", lines(r.stdout) == lines(r2.stdout),
                  (r.stdout, r2.stdout))
    # ---- Each model family served with its own profile: ListModels says the architecture
    # and the profile auto picked; live sessions equal gpe eval offline. ----
    for arch, flags_, cls, profile in [
            ("gemma2", ["--sliding_window", "6", "--final_logit_softcapping", "3"],
             "Gemma2ForCausalLM", "gemma2"),
            ("qwen3", ["--sliding_window", "5", "--max_window_layers", "1"], "Qwen3ForCausalLM",
             "qwen3"),
            ("phi3", ["--sliding_window", "7", "--rope_scaling", "longrope",
                      "--original_max_position_embeddings", "16"], "Phi3ForCausalLM", "phi3")]:
        family_dir = os.path.join(a.work, "model-" + arch)
        r = subprocess.run([a.gpe, "make-model", "--arch", arch, "--tokenizer", a.tokenizer,
                            "--out", family_dir, "--init_std", "0.3", "--seed", "5"] + flags_,
                           capture_output=True, text=True)
        check(f"make-model --arch {arch}", r.returncode == 0, r.stderr)
        family = Server(a.gpeserve, "--model", family_dir, "--drain_seconds", "1")
        listed = pb_grpc.GpeserveStub(grpc.insecure_channel(family.address)).ListModels(
            pb.ListModelsRequest(), timeout=10).models
        check(f"ListModels: {arch} folder served as {cls} with the {profile} profile",
              len(listed) == 1 and listed[0].architecture == cls and
              listed[0].default_profile == profile, listed)
        live_out = os.path.join(a.work, f"live-{arch}.jsonl")
        offline_out = os.path.join(a.work, f"off-{arch}.jsonl")
        flags_ = ["--data", data, "--wait_k", "2", "--max_new_tokens", "12"]
        r = client("eval", "--server", family.address, "--concurrency", "3",
                   "--words_per_second", "40", "--out", live_out, *flags_)
        r2 = subprocess.run([a.gpe, "eval", "--model", family_dir, "--threads", "1", "--out",
                             offline_out, *flags_], capture_output=True, text=True)
        check(f"{arch}: gpe-client eval and gpe eval run", r.returncode == 0 and
              r2.returncode == 0, (r, r2.stderr))
        if r.returncode == 0 and r2.returncode == 0:
            live = [json.loads(line) for line in open(live_out)]
            offline = [json.loads(line) for line in open(offline_out)]
            check(f"{arch}: live (server) == offline (gpe eval)",
                  [(x["output_ids"], x["delays"]) for x in live] ==
                  [(x["output_ids"], x["delays"]) for x in offline], (live, offline))
        check(f"{arch} server exits 0", family.stop() == 0, "".join(family.lines))

    # ---- LoRA adapters: two served next to the base, sessions of all three run at once, each
    # equal to gpe eval with its adapter offline; one folded into the weights. ----
    adapters = {}
    for name, seed, extra in [("one", 1, []),
                              ("two", 2, ["--lora_targets", "q_proj,v_proj,down_proj",
                                          "--use_rslora", "--modules_to_save", "lm_head"])]:
        adapters[name] = os.path.join(a.work, "adapter-" + name)
        r = subprocess.run([a.gpe, "make-adapter", "--model", model_dir, "--seed", str(seed),
                            "--init_std", "0.3", "--out", adapters[name]] + extra,
                           capture_output=True, text=True)
        check(f"make-adapter {name}", r.returncode == 0, r.stderr)
    multi = Server(a.gpeserve, "--model", model_dir, "--drain_seconds", "1",
                   "--adapter", "one=" + adapters["one"], "--adapter", "two=" + adapters["two"])
    multi_stub = pb_grpc.GpeserveStub(grpc.insecure_channel(multi.address))
    listed = multi_stub.ListModels(pb.ListModelsRequest(), timeout=10).models
    check("ListModels lists the adapters",
          len(listed) == 1 and [x.name for x in listed[0].adapters] == ["one", "two"] and
          listed[0].adapters[1].modules_to_save == ["lm_head"] and
          not listed[0].adapters[0].merged, listed)
    flags_ = ["--data", data, "--wait_k", "2", "--max_new_tokens", "12"]
    results = {}

    def live_eval(name):
        out = os.path.join(a.work, f"live-adapter-{name or 'base'}.jsonl")
        extra = ["--adapter", name] if name else []
        results[name] = (client("eval", "--server", multi.address, "--concurrency", "2",
                                "--words_per_second", "40", "--out", out, *flags_, *extra), out)
    threads = [threading.Thread(target=live_eval, args=(n,)) for n in ("", "one", "two")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    outputs = {}
    for name in ("", "one", "two"):
        r, live_out = results[name]
        offline_out = os.path.join(a.work, f"off-adapter-{name or 'base'}.jsonl")
        extra = ["--adapter", adapters[name]] if name else []
        r2 = subprocess.run([a.gpe, "eval", "--model", model_dir, "--threads", "1", "--out",
                             offline_out, *flags_, *extra], capture_output=True, text=True)
        check(f"adapter '{name}': gpe-client eval and gpe eval run",
              r.returncode == 0 and r2.returncode == 0, (r, r2.stderr))
        if r.returncode == 0 and r2.returncode == 0:
            live = [json.loads(line) for line in open(live_out)]
            offline = [json.loads(line) for line in open(offline_out)]
            outputs[name] = [x["output_ids"] for x in offline]
            check(f"adapter '{name}': live (sessions of three adapters at once) == offline",
                  [(x["output_ids"], x["delays"]) for x in live] ==
                  [(x["output_ids"], x["delays"]) for x in offline], (live, offline))
    check("the adapters change the output",
          len(outputs) == 3 and outputs["one"] != outputs[""] and outputs["two"] != outputs[""],
          outputs)
    try:
        session(multi_stub, ["x"], adapter="three")
        check("an unknown adapter is refused", False, "no error")
    except grpc.RpcError as e:
        check("an unknown adapter is refused with NOT_FOUND naming the known ones",
              e.code() == grpc.StatusCode.NOT_FOUND and "three" in e.details() and
              "one, two" in e.details(), e)
    metrics = urllib.request.urlopen(
        f"http://127.0.0.1:{multi.metrics_port}/metrics").read().decode()
    counts = {n: re.search(r'gpeserve:e2e_session_latency_seconds_count\{adapter="' + n +
                           r'",model="[^"]*"\} (\d+)', metrics) for n in ("base", "one", "two")}
    check("/metrics counts sessions by adapter",
          all(m is not None and int(m.group(1)) == len(sentences) for m in counts.values()),
          {n: m and m.group(0) for n, m in counts.items()})
    check("adapter server exits 0", multi.stop() == 0, "".join(multi.lines))
    merged = Server(a.gpeserve, "--model", model_dir, "--drain_seconds", "1",
                    "--adapter", "one=" + adapters["one"], "--merge_adapters")
    listed = pb_grpc.GpeserveStub(grpc.insecure_channel(merged.address)).ListModels(
        pb.ListModelsRequest(), timeout=10).models
    check("ListModels marks the merged adapter", listed[0].adapters[0].merged, listed)
    live_out = os.path.join(a.work, "live-merged.jsonl")
    offline_out = os.path.join(a.work, "off-merged.jsonl")
    r = client("eval", "--server", merged.address, "--concurrency", "2", "--out", live_out,
               "--adapter", "one", *flags_)
    r2 = subprocess.run([a.gpe, "eval", "--model", model_dir, "--threads", "1", "--out",
                         offline_out, "--adapter", adapters["one"], "--merge_adapter", *flags_],
                        capture_output=True, text=True)
    if r.returncode == 0 and r2.returncode == 0:
        check("merged adapter: live == gpe eval --merge_adapter offline",
              [json.loads(x)["output_ids"] for x in open(live_out)] ==
              [json.loads(x)["output_ids"] for x in open(offline_out)])
    else:
        check("merged adapter: gpe-client eval and gpe eval run", False, (r, r2.stderr))
    check("merged-adapter server exits 0", merged.stop() == 0, "".join(merged.lines))

    r = client("bench", "--server", served.address, "--sessions", "3", "--duration", "1",
               "--words", "6", "--words_per_second", "0", "--max_new_tokens", "8")
    m = re.search(r"completed (\d+) sessions", r.stdout)
    check("gpe-client bench completes sessions without errors",
          r.returncode == 0 and m is not None and int(m.group(1)) >= 3, r)

    # A drain that runs out of time: the session still waiting for words ends UNAVAILABLE and
    # is told how much of its source was never read.
    release = threading.Event()
    outcome = {}

    def waiting_session():
        def requests():
            yield pb.StreamRequest(config=pb.SessionConfig(wait_k=5))
            yield pb.StreamRequest(chunk=pb.SourceChunk(words=[b"one", b"two"]))
            release.wait(60)
        try:
            for _ in pb_grpc.GpeserveStub(grpc.insecure_channel(served.address)).Stream(
                    requests()):
                pass
            outcome["ok"] = True
        except grpc.RpcError as e:
            outcome["error"] = e
    t = threading.Thread(target=waiting_session)
    t.start()
    time.sleep(1.0)
    served.proc.send_signal(signal.SIGTERM)
    t.join(timeout=30)
    release.set()
    e = outcome.get("error")
    check("drain ran out: the waiting session ends UNAVAILABLE with its unread units",
          e is not None and e.code() == grpc.StatusCode.UNAVAILABLE and
          "drain_seconds" in e.details() and "of 2 source units received were not read" in
          e.details(), outcome)
    check("served model exits 0", served.stop() == 0, "".join(served.lines))

    print(f"{len(FAILURES)} failed")
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
