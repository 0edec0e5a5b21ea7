"""Loopback plumbing shared by the deploy test and the soak: free ports, /metrics scrapes,
started processes that are always stopped, and deploy/nginx/nginx.conf on loopback ports."""

import os
import re
import signal
import socket
import subprocess
import time
import urllib.request


def free_ports(count):
    """Distinct free loopback ports (held open together, so that they differ)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode()


def scrape(port):
    """Samples of a /metrics page: {(name, frozenset(labels)): value}."""
    samples = {}
    for line in http_get(f"http://127.0.0.1:{port}/metrics").splitlines():
        if not line or line.startswith("#"):
            continue
        match = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
        if match:
            labels = frozenset(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
            samples[(match.group(1), labels)] = float(match.group(3))
    return samples


def wait_until(predicate, timeout, interval=0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True
        except OSError:
            pass
        time.sleep(interval)
    return False


class Processes:
    """Every process the test starts, stopped at the end whatever happened."""

    def __init__(self, work):
        self.work = work
        self.procs = []

    def start(self, name, command):
        log = open(os.path.join(self.work, f"{name}.log"), "w")
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        proc.name = name
        self.procs.append(proc)
        return proc

    def log(self, name):
        with open(os.path.join(self.work, f"{name}.log"), errors="replace") as f:
            return f.read()[-2000:]

    def stop_all(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def nginx_config(repo, work, listen_port, replica_ports):
    """deploy/nginx/nginx.conf with loopback addresses, and temp files in the work folder (the
    test may run unprivileged; nginx's compiled-in paths are root's)."""
    text = open(os.path.join(repo, "deploy", "nginx", "nginx.conf")).read()
    names = iter(replica_ports)
    text = re.sub(r"(^\s*server\s+)[\w.-]+:\d+",
                  lambda m: f"{m.group(1)}127.0.0.1:{next(names)}", text, flags=re.MULTILINE)
    text = re.sub(r"(^\s*listen\s+)\d+", rf"\g<1>127.0.0.1:{listen_port}", text,
                  flags=re.MULTILINE)
    temp = "".join(f"  {kind}_temp_path {work}/nginx/{kind};\n"
                   for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    text = text.replace("access_log /dev/stdout", f"access_log {work}/nginx/access.log")
    text = re.sub(r"^http\s*\{\n", lambda m: m.group(0) + temp, text, count=1, flags=re.MULTILINE)
    path = os.path.join(work, "nginx", "nginx.conf")
    with open(path, "w") as f:
        f.write(text)
    return path
