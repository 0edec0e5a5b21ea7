#!/usr/bin/env python3
"""Checks deploy/ and the Dockerfile against the real binaries, then scales out on loopback.

Static checks: the Prometheus configuration passes `promtool check config`; the compose files,
Kubernetes manifests and Grafana provisioning parse; every gpeserve/gpe-client flag and port
they use is one the binaries accept (their --help) or the image serves (Dockerfile ENTRYPOINT).

Scale-out: two gpeserve replicas, Debian's nginx with deploy/nginx/nginx.conf and Debian's
prometheus with deploy/prometheus/prometheus.yml (addresses substituted: everything on free
127.0.0.1 ports), 20 sessions through nginx, then one replica stopped while new sessions go on.
The Grafana dashboard's queries run against that Prometheus, and every metric they name must be
in a real scrape. Every process the test starts is stopped, on failure too.

Standard library and PyYAML only; sessions and health checks use gpe-client.
"""

import argparse
import collections
import concurrent.futures
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import traceback
import urllib.error
import urllib.parse

import yaml

from loopback import Processes, free_ports, http_get, nginx_config, scrape, wait_until

SOURCES = [
    "The dog sees the cat.",
    "My mother reads a book.",
    "We are going home now.",
    "The children play in the garden.",
    "Is the weather good today?",
]

# Session ends that are not failures (session_finished_total's other reasons are).
NORMAL_ENDS = {"end_of_sequence", "max_new_tokens", "max_lag"}


class Results:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            print(f"PASS {name}", flush=True)
        else:
            self.failed += 1
            print(f"FAIL {name}{': ' + detail if detail else ''}", flush=True)
        return ok


# ---- Helpers ---------------------------------------------------------------------------------


def help_flags(command):
    """The --flags a binary documents in its --help."""
    out = subprocess.run(command + ["--help"], capture_output=True, text=True, timeout=30)
    return set(re.findall(r"^\s+--([a-z_]+)", out.stdout + out.stderr, re.MULTILINE))


def flags_of(args):
    """Flag names in an argument list (`--name value` or `--name=value`)."""
    return [a[2:].split("=", 1)[0] for a in args if a.startswith("--")]


def flag_value(args, flag):
    for i, a in enumerate(args):
        if a == f"--{flag}" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(f"--{flag}="):
            return a.split("=", 1)[1]
    return None


def port_of(address):
    return int(address.rsplit(":", 1)[1])


def sessions_finished(port):
    """Sessions a replica ended, by reason (its own /metrics)."""
    by_reason = {}
    for (name, labels), value in scrape(port).items():
        if name == "gpeserve:session_finished_total":
            reason = dict(labels)["reason"]
            by_reason[reason] = by_reason.get(reason, 0) + value
    return by_reason


# After the drain, gpeserve gives the gRPC server this long to shut down (server/main.cc).
SHUTDOWN_SECONDS = 5


def duration_seconds(text):
    """Seconds of a compose duration such as 40s, 1m30s or 2m (a bare number: seconds)."""
    text = str(text)
    if re.fullmatch(r"\d+", text):
        return int(text)
    parts = re.findall(r"(\d+)(h|m|s)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {text!r}")
    return sum(int(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)


# ---- Static checks ---------------------------------------------------------------------------


def dockerfile_image(repo):
    """What the image serves: the ENTRYPOINT's arguments, EXPOSEd ports, HEALTHCHECK command."""
    text = open(os.path.join(repo, "Dockerfile")).read().replace("\\\n", " ")
    entrypoint = json.loads(re.findall(r"^ENTRYPOINT\s+(\[.*\])\s*$", text, re.MULTILINE)[-1])
    exposed = {int(p) for line in re.findall(r"^EXPOSE\s+(.*)$", text, re.MULTILINE)
               for p in line.split()}
    health = json.loads(re.search(r"^HEALTHCHECK\s.*?CMD\s+(\[.*\])\s*$", text,
                                  re.MULTILINE).group(1))
    return entrypoint, exposed, health


def check_static(r, repo, gpeserve_flags, health_flags, promtool):
    deploy = os.path.join(repo, "deploy")

    out = subprocess.run([promtool, "check", "config",
                          os.path.join(deploy, "prometheus", "prometheus.yml")],
                         capture_output=True, text=True, timeout=60)
    r.check("promtool check config deploy/prometheus/prometheus.yml", out.returncode == 0,
            out.stdout + out.stderr)

    # The image: its gRPC and metrics ports are what gpeserve is told to listen on.
    entrypoint, exposed, health = dockerfile_image(repo)
    image_flags = flags_of(entrypoint[1:])
    r.check("Dockerfile ENTRYPOINT runs gpeserve with flags it accepts",
            entrypoint[0] == "gpeserve" and set(image_flags) <= gpeserve_flags, str(entrypoint))
    grpc_port = port_of(flag_value(entrypoint, "listen"))
    metrics_port = port_of(flag_value(entrypoint, "metrics_listen"))
    r.check("Dockerfile EXPOSEs the gRPC and metrics ports", exposed == {grpc_port, metrics_port},
            f"EXPOSE {exposed}, listen {grpc_port}, metrics {metrics_port}")
    r.check("Dockerfile HEALTHCHECK is gpe-client health on the gRPC port",
            health[:2] == ["gpe-client", "health"] and set(flags_of(health)) <= health_flags
            and port_of(flag_value(health, "server")) == grpc_port, str(health))

    # Compose: replicas run the image with known flags; nginx and Prometheus point at them.
    compose = yaml.safe_load(open(os.path.join(deploy, "docker-compose.yml")))
    gpu = yaml.safe_load(open(os.path.join(deploy, "docker-compose.gpu.yml")))
    services = compose["services"]
    replicas = sorted(n for n, s in services.items()
                      if str(s.get("image", "")).startswith("gpeserve"))
    r.check("compose runs two gpeserve replicas", len(replicas) == 2, str(replicas))
    # The GPU override's services merge into the base ones: expose and grace period come from there.
    for label, name, service in ([(n, n, services[n]) for n in replicas]
                                 + [(f"{n} (GPU)", n, s) for n, s in gpu["services"].items()]):
        command = [str(a) for a in service.get("command", [])]
        unknown = set(flags_of(command)) - gpeserve_flags
        r.check(f"compose {label}: gpeserve flags exist", not unknown, f"unknown {unknown}")
        exposes = {int(p) for p in services[name].get("expose", [])}
        r.check(f"compose {label}: exposes the image's ports", exposes and exposes <= exposed,
                str(exposes))
        drain = int(flag_value(command, "drain_seconds") or 30)
        grace = services[name].get("stop_grace_period", "10s")
        r.check(f"compose {label}: stop_grace_period > --drain_seconds + shutdown",
                duration_seconds(grace) > drain + SHUTDOWN_SECONDS, f"{grace} vs {drain}")

    nginx_conf = open(os.path.join(deploy, "nginx", "nginx.conf")).read()
    upstreams = re.findall(r"^\s*server\s+([\w.-]+):(\d+)", nginx_conf, re.MULTILINE)
    r.check("nginx upstream: every compose replica on the gRPC port",
            sorted(upstreams) == sorted((n, str(grpc_port)) for n in replicas), str(upstreams))
    listen = int(re.search(r"^\s*listen\s+(\d+)\s+http2", nginx_conf, re.MULTILINE).group(1))
    published = [p for p in services["nginx"].get("ports", []) if str(p).endswith(f":{listen}")]
    r.check("compose publishes nginx's HTTP/2 listen port", bool(published),
            f"listen {listen}, ports {services['nginx'].get('ports')}")
    r.check("nginx uses grpc_pass with long stream timeouts",
            "grpc_pass grpc://gpeserve;" in nginx_conf
            and re.search(r"grpc_read_timeout\s+\d+h;", nginx_conf) is not None
            and re.search(r"grpc_send_timeout\s+\d+h;", nginx_conf) is not None)

    prometheus = yaml.safe_load(open(os.path.join(deploy, "prometheus", "prometheus.yml")))
    targets = [t for job in prometheus["scrape_configs"] for sc in job.get("static_configs", [])
               for t in sc["targets"]]
    r.check("Prometheus scrapes every replica's metrics port",
            sorted(targets) == sorted(f"{n}:{metrics_port}" for n in replicas), str(targets))

    # Mounted configuration files exist in the repository.
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                r.check(f"compose {name}: mounts {source}",
                        os.path.exists(os.path.join(deploy, source)))

    # Grafana provisioning: the data source the dashboard names is the provisioned one.
    datasources = yaml.safe_load(open(os.path.join(
        deploy, "grafana", "provisioning", "datasources", "prometheus.yml")))["datasources"]
    dashboard = json.load(open(os.path.join(deploy, "grafana", "dashboards", "gpeserve.json")))
    uids = {d["uid"] for d in datasources}
    used = {t["datasource"]["uid"] for p in dashboard["panels"] for t in p["targets"]}
    r.check("Grafana dashboard JSON parses and uses the provisioned data source", used <= uids,
            f"{used} vs {uids}")
    prom_host = urllib.parse.urlparse(datasources[0]["url"])
    r.check("Grafana data source is the compose Prometheus",
            prom_host.hostname in services and prom_host.port == 9090, datasources[0]["url"])

    check_k8s(r, os.path.join(deploy, "k8s"), gpeserve_flags, grpc_port, metrics_port)
    return grpc_port, metrics_port, dashboard


def check_k8s(r, k8s, gpeserve_flags, grpc_port, metrics_port):
    docs = []
    for name in sorted(os.listdir(k8s)):
        if name.endswith(".yaml") and name != "prometheus-adapter-values.yaml":
            docs += [d for d in yaml.safe_load_all(open(os.path.join(k8s, name))) if d]
    r.check("k8s manifests parse and all have apiVersion and kind",
            docs and all("apiVersion" in d and "kind" in d for d in docs))
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)

    pod_labels = []
    for dep in by_kind.get("Deployment", []):
        name = dep["metadata"]["name"]
        pod = dep["spec"]["template"]["spec"]
        pod_labels.append(dep["spec"]["template"]["metadata"]["labels"])
        container = pod["containers"][0]
        args = [str(a) for a in container.get("args", [])]
        unknown = set(flags_of(args)) - gpeserve_flags
        r.check(f"k8s {name}: gpeserve flags exist", not unknown, f"unknown {unknown}")
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        r.check(f"k8s {name}: container ports are the image's",
                ports == {"grpc": grpc_port, "metrics": metrics_port}, str(ports))
        probes = [container.get(k, {}) for k in ("startupProbe", "readinessProbe", "livenessProbe")]
        r.check(f"k8s {name}: gRPC startup, readiness and liveness probes on the gRPC port",
                all(p.get("grpc", {}).get("port") == grpc_port for p in probes))
        drain = int(flag_value(args, "drain_seconds") or 30)
        pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
        sleep = int(pre_stop[1]) if pre_stop[0] == "sleep" else 0
        grace = pod["terminationGracePeriodSeconds"]
        r.check(f"k8s {name}: terminationGracePeriodSeconds > preStop + drain + shutdown",
                grace > sleep + drain + SHUTDOWN_SECONDS, f"{grace} vs {sleep} + {drain}")
        liveness = container["livenessProbe"]
        r.check(f"k8s {name}: liveness outlasts a drain (NOT_SERVING)",
                liveness["periodSeconds"] * liveness["failureThreshold"] > drain)
        r.check(f"k8s {name}: resources requested", "requests" in container.get("resources", {}))
    gpu = [d for d in by_kind.get("Deployment", [])
           if "nvidia.com/gpu" in d["spec"]["template"]["spec"]["containers"][0]["resources"]
           .get("limits", {})]
    r.check("k8s: a GPU Deployment requests nvidia.com/gpu and serves on cuda",
            len(gpu) == 1 and flag_value([str(a) for a in gpu[0]["spec"]["template"]["spec"]
                                          ["containers"][0]["args"]], "device") == "cuda")

    def selects(selector):
        return any(all(labels.get(k) == v for k, v in selector.items()) for labels in pod_labels)

    services = by_kind.get("Service", [])
    headless = [s for s in services if s["spec"].get("clusterIP") == "None"]
    cluster_ip = [s for s in services if s["spec"].get("clusterIP") != "None"]
    r.check("k8s: a headless Service and a ClusterIP Service", headless and cluster_ip)
    for service in services:
        name = service["metadata"]["name"]
        r.check(f"k8s Service {name}: selects the gpeserve pods and named container ports",
                selects(service["spec"]["selector"])
                and all(p["targetPort"] in ("grpc", "metrics") for p in service["spec"]["ports"]))
    deployments = {d["metadata"]["name"] for d in by_kind.get("Deployment", [])}
    for hpa in by_kind.get("HorizontalPodAutoscaler", []):
        r.check("k8s HPA scales a Deployment on a Pods metric",
                hpa["spec"]["scaleTargetRef"]["name"] in deployments
                and hpa["spec"]["metrics"][0]["type"] == "Pods")
    for pdb in by_kind.get("PodDisruptionBudget", []):
        r.check("k8s PodDisruptionBudget selects the gpeserve pods",
                selects(pdb["spec"]["selector"]["matchLabels"]))
    for monitor in by_kind.get("ServiceMonitor", []):
        wanted = monitor["spec"]["selector"]["matchLabels"]
        matched = [s for s in services
                   if all(s["metadata"].get("labels", {}).get(k) == v for k, v in wanted.items())]
        port = monitor["spec"]["endpoints"][0]["port"]
        r.check("k8s ServiceMonitor selects one Service with the metrics port",
                len(matched) == 1 and port in [p["name"] for p in matched[0]["spec"]["ports"]])
    r.check("k8s: every kind the deployment needs is there",
            {"Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget",
             "ServiceMonitor"} <= set(by_kind), str(sorted(by_kind)))


def adapter_metrics(k8s):
    """The HPA metric name and the Prometheus metric prometheus-adapter serves it from."""
    values = yaml.safe_load(open(os.path.join(k8s, "prometheus-adapter-values.yaml")))
    rule = values["rules"]["custom"][0]
    source = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", rule["seriesQuery"]).group(0)
    hpa = yaml.safe_load(open(os.path.join(k8s, "hpa.yaml")))
    return rule["name"]["as"], hpa["spec"]["metrics"][0]["pods"]["metric"]["name"], source


# ---- Loopback scale-out ----------------------------------------------------------------------


def prometheus_config(repo, work, metrics_ports):
    """deploy/prometheus/prometheus.yml scraping the loopback replicas every second (the
    repository's 5 s interval would only make the test wait longer)."""
    config = yaml.safe_load(open(os.path.join(repo, "deploy", "prometheus", "prometheus.yml")))
    config["global"]["scrape_interval"] = "1s"
    job = [j for j in config["scrape_configs"] if j["job_name"] == "gpeserve"][0]
    job["static_configs"] = [{"targets": [f"127.0.0.1:{p}" for p in metrics_ports]}]
    path = os.path.join(work, "prometheus.yml")
    with open(path, "w") as f:
        yaml.safe_dump(config, f)
    return path


def prom_query(port, query):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    try:
        return json.loads(http_get(url))
    except urllib.error.HTTPError as e:  # a bad query answers 400 with a JSON error
        return json.loads(e.read().decode())


def run_sessions(client, address, count, concurrency, max_new_tokens):
    """`count` gpe-client stream sessions; returns a list of (ok, detail)."""

    def one(i):
        command = [client, "stream", "--server", address, "--text", SOURCES[i % len(SOURCES)],
                   "--words_per_second", "0", "--max_new_tokens", str(max_new_tokens), "--json"]
        try:
            out = subprocess.run(command, capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            return False, f"session {i}: timed out"
        done = [line for line in out.stdout.splitlines() if line.startswith("{")]
        if out.returncode != 0 or not done:
            return False, f"session {i}: exit {out.returncode}: {out.stderr.strip()[-300:]}"
        reason = json.loads(done[-1]).get("finish_reason")
        return reason in NORMAL_ENDS, f"session {i}: {reason}"

    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(one, range(count)))


def check_scale_out(r, args, procs, dashboard, adapter_source):
    work = args.work
    os.makedirs(os.path.join(work, "nginx"), exist_ok=True)
    grpc_a, grpc_b, metrics_a, metrics_b, nginx_port, prom_port = free_ports(6)
    replicas = {"a": (grpc_a, metrics_a), "b": (grpc_b, metrics_b)}
    model = ["--model", args.model] if args.model else []

    servers = {}
    for name, (grpc, metrics) in replicas.items():
        servers[name] = procs.start(f"gpeserve-{name}", [
            args.gpeserve, "--listen", f"127.0.0.1:{grpc}", "--metrics_listen",
            f"127.0.0.1:{metrics}", "--threads", "1", "--max_new_tokens", "8",
            "--drain_seconds", "10"] + model)

    def healthy(port):
        return subprocess.run([args.client, "health", "--server", f"127.0.0.1:{port}",
                               "--timeout", "2"], capture_output=True, timeout=10).returncode == 0

    for name, (grpc, _) in replicas.items():
        ok = wait_until(lambda: servers[name].poll() is None and healthy(grpc)
                        or servers[name].poll() is not None, 120)
        if not r.check(f"replica {name} SERVING on 127.0.0.1:{grpc}",
                       ok and servers[name].poll() is None, procs.log(f"gpeserve-{name}")):
            return

    nginx_conf = nginx_config(args.repo, work, nginx_port, [grpc_a, grpc_b])
    out = subprocess.run([args.nginx, "-t", "-p", f"{work}/nginx", "-c", nginx_conf, "-e",
                          f"{work}/nginx/error.log", "-g", f"pid {work}/nginx/nginx.pid;"],
                         capture_output=True, text=True, timeout=30)
    if not r.check("nginx -t accepts the repository's config (grpc_pass, http2)",
                   out.returncode == 0, out.stderr):
        return
    nginx = procs.start("nginx", [args.nginx, "-p", f"{work}/nginx", "-c", nginx_conf, "-e",
                                  f"{work}/nginx/error.log", "-g",
                                  f"daemon off; pid {work}/nginx/nginx.pid;"])
    if not r.check("health through nginx", wait_until(
            lambda: nginx.poll() is None and healthy(nginx_port), 20), procs.log("nginx")):
        return

    prom_conf = prometheus_config(args.repo, work, [metrics_a, metrics_b])
    prom = procs.start("prometheus", [
        args.prometheus, f"--config.file={prom_conf}",
        f"--storage.tsdb.path={work}/prometheus-data",
        f"--web.listen-address=127.0.0.1:{prom_port}"])
    if not r.check("Prometheus ready", wait_until(
            lambda: prom.poll() is None
            and "Ready" in http_get(f"http://127.0.0.1:{prom_port}/-/ready"), 30),
            procs.log("prometheus")):
        return

    # 20 sessions through nginx, 4 at a time.
    before = {name: sum(sessions_finished(m).values()) for name, (_, m) in replicas.items()}
    results = run_sessions(args.client, f"127.0.0.1:{nginx_port}", 20, 4, 8)
    failures = [d for ok, d in results if not ok]
    r.check("20 sessions through nginx all completed", not failures, "; ".join(failures[:5]))
    after = {name: sessions_finished(m) for name, (_, m) in replicas.items()}
    served = {name: sum(after[name].values()) - before[name] for name in replicas}
    r.check("both replicas served sessions (their own session_finished_total)",
            all(n > 0 for n in served.values()), str(served))
    r.check("the replicas' counters add up to the 20 sessions", sum(served.values()) == 20,
            str(served))
    bad = {name: {k: v for k, v in reasons.items() if k not in NORMAL_ENDS and v}
           for name, reasons in after.items()}
    r.check("no session ended in error or cancelled", not any(bad.values()), str(bad))

    # nginx logs each call's grpc-status: from the trailers after responses, and from the headers
    # of a call refused before any (trailers-only).
    refused = subprocess.run([args.client, "stream", "--server", f"127.0.0.1:{nginx_port}",
                              "--text", SOURCES[0], "--profile", "no-such-profile"],
                             capture_output=True, text=True, timeout=60)
    r.check("a session with an unknown profile is refused through nginx: INVALID_ARGUMENT",
            refused.returncode != 0 and "INVALID_ARGUMENT" in refused.stderr, refused.stderr)
    with open(os.path.join(work, "nginx", "access.log")) as f:
        statuses = collections.Counter(
            m.group(1) for m in re.finditer(r'/Stream HTTP/2.0" \d+ grpc-status=(\S+)', f.read()))
    r.check("nginx's access log has each Stream call's grpc-status (20 OK, 1 INVALID_ARGUMENT)",
            statuses == {"0": 20, "3": 1}, str(dict(statuses)))

    # Prometheus' view of both replicas equals their own counters.
    want = {f"127.0.0.1:{m}": sum(after[name].values()) for name, (_, m) in replicas.items()}
    seen = {}

    def prometheus_agrees():
        answer = prom_query(prom_port, "sum by (instance) (gpeserve:session_finished_total)")
        seen.clear()
        seen.update({s["metric"]["instance"]: float(s["value"][1])
                     for s in answer["data"]["result"]})
        return seen == want

    r.check("Prometheus API returns both replicas' session counters",
            wait_until(prometheus_agrees, 30), f"want {want}, got {seen}")

    # The dashboard: every metric it names is in a real scrape, every query evaluates.
    scraped = {name for name, _ in scrape(metrics_a)}
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs.append(dashboard["templating"]["list"][0]["definition"])
    named = set(re.findall(r"gpeserve:[a-zA-Z0-9_]+", " ".join(exprs)))
    r.check(f"Grafana dashboard: its {len(named)} metrics exist in a gpeserve scrape",
            named and named <= scraped, f"missing {sorted(named - scraped)}")
    errors = []
    for expr in exprs[:-1]:
        query = expr.replace("$__rate_interval", "1m").replace("$instance", ".*")
        answer = prom_query(prom_port, query)
        if answer.get("status") != "success":
            errors.append(f"{expr}: {answer.get('error')}")
    r.check(f"Grafana dashboard: its {len(exprs) - 1} queries evaluate in Prometheus", not errors,
            "; ".join(errors[:3]))
    r.check(f"HPA metric source {adapter_source} exists in a gpeserve scrape",
            adapter_source in scraped)

    # One replica stops (SIGTERM: drain, exit 0); nginx sends new sessions to the other.
    servers["b"].send_signal(signal.SIGTERM)
    try:
        code = servers["b"].wait(timeout=30)
    except subprocess.TimeoutExpired:
        code = None
    r.check("replica b drains and exits 0 on SIGTERM", code == 0, procs.log("gpeserve-b"))
    before_a = sum(sessions_finished(metrics_a).values())
    results = run_sessions(args.client, f"127.0.0.1:{nginx_port}", 6, 2, 8)
    failures = [d for ok, d in results if not ok]
    r.check("with replica b stopped, 6 new sessions through nginx all completed", not failures,
            "; ".join(failures[:5]) + "\n" + procs.log("nginx"))
    r.check("replica a served them", sum(sessions_finished(metrics_a).values()) - before_a == 6)
    r.check("Prometheus marks replica b down", wait_until(lambda: [
        s["value"][1] for s in prom_query(prom_port, f'up{{instance="127.0.0.1:{metrics_b}"}}')
        ["data"]["result"]] == ["0"], 15))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpeserve", required=True)
    parser.add_argument("--client", required=True, help="gpe-client")
    parser.add_argument("--repo", required=True, help="the repository root")
    parser.add_argument("--work", required=True, help="scratch folder (emptied first)")
    parser.add_argument("--model", help="a model folder for the replicas (default: built-in)")
    parser.add_argument("--nginx", default="/usr/sbin/nginx")
    parser.add_argument("--prometheus", default="/usr/bin/prometheus")
    parser.add_argument("--promtool", default="/usr/bin/promtool")
    args = parser.parse_args()
    args.work = os.path.abspath(args.work)
    for tool in (args.nginx, args.prometheus, args.promtool):
        if not os.access(tool, os.X_OK):
            print(f"FAIL {tool} not found (scripts/setup installs nginx and prometheus)")
            print("0 passed, 1 failed")
            return 1
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)

    r = Results()
    gpeserve_flags = help_flags([args.gpeserve])
    health_flags = help_flags([args.client, "health"])
    client_flags = help_flags([args.client, "stream"])
    r.check("gpeserve and gpe-client --help list their flags",
            {"listen", "metrics_listen", "drain_seconds"} <= gpeserve_flags
            and "server" in health_flags and "server" in client_flags)
    procs = Processes(args.work)
    # SIGTERM, like Ctrl-C, unwinds through `finally`, which stops them.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("deploy test: terminated"))
    try:
        _, _, dashboard = check_static(r, args.repo, gpeserve_flags, health_flags, args.promtool)
        k8s = os.path.join(args.repo, "deploy", "k8s")
        served_as, hpa_metric, source = adapter_metrics(k8s)
        r.check("HPA scales on the metric prometheus-adapter serves", served_as == hpa_metric,
                f"{hpa_metric} vs {served_as}")
        check_scale_out(r, args, procs, dashboard, source)
    except Exception as e:  # a malformed file: a failure with its traceback, then the summary
        traceback.print_exc()
        r.check("deploy test ran to the end", False, f"{type(e).__name__}: {e}")
    finally:
        procs.stop_all()
        print(f"{r.passed} passed, {r.failed} failed", flush=True)
    return 0 if r.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
