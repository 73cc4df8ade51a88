"""One reconciler per data dir (issue 9). Prints figures; not a test.

    .venv/bin/python benchmarks/local_lease.py [--failovers 3] [--verdicts 5]

(a) failover: two real `jupyter server` processes on one data dir; the lease
    holder is SIGKILLed and the time until the other one holds the lease
    (its GET /health says isHolder) is measured, and the time until a job
    submitted to the follower just after the kill has its verdict.
    Default lease: LocalBackend.lease_duration 10 s, retry_period 1 s.
(b) time-to-verdict of `jupyter nbvalidation submit NB --wait --no-build`
    (a small notebook) run alone (the CLI takes the lease and validates in
    its own process) against the same command beside a running server that
    holds the lease (the CLI submits into the shared store and waits; the
    server validates), alternated in one run; the ratio is beside/alone.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from helpers import write_notebook  # noqa: E402

SMALL = ["import math", "x = [math.sqrt(i) for i in range(1000)]", "print(sum(x))"]


class Server:
    def __init__(self, base: Path, name: str):
        self.base, self.name = base, name
        self.token = secrets.token_hex(8)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/nbvalidation/api/v1/"
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Server":
        (self.base / "runtime").mkdir(exist_ok=True)
        argv = [sys.executable, "-m", "jupyter_server", "--no-browser", "--allow-root", f"--port={self.port}",
                "--ip=127.0.0.1", f"--ServerApp.token={self.token}", f"--ServerApp.root_dir={self.base / 'root'}",
                f"--LocalBackend.data_dir={self.base / 'data'}", "--ServerApp.port_retries=0"]
        env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(self.base / "runtime")}
        self.log = open(self.base / f"{self.name}.log", "a")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                self.get("health")
                return self
            except Exception:
                time.sleep(0.2)
        raise RuntimeError(f"{self.name} did not come up")

    def get(self, path: str, body: dict | None = None) -> dict:
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode() if body else None,
                                     method="POST" if body else "GET",
                                     headers={"Authorization": f"token {self.token}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)


def failover(base: Path, n: int) -> None:
    takeover, verdict = [], []
    write_notebook(base / "root" / "nb.ipynb", SMALL)
    servers = [Server(base, "a").start(), Server(base, "b").start()]
    try:
        for _ in range(n):
            holder = next(s for s in servers if s.get("health")["lease"]["isHolder"])
            follower = next(s for s in servers if s is not holder)
            holder.stop(signal.SIGKILL)
            t0 = time.monotonic()
            name = follower.get("jobs", {"notebook": {"path": "nb.ipynb"},
                                         "podConfig": {"buildConfig": {"enabled": False}}})["metadata"]["name"]
            while not follower.get("health")["lease"]["isHolder"]:
                time.sleep(0.05)
            takeover.append(time.monotonic() - t0)
            while follower.get(f"jobs/{name}")["status"].get("phase") not in ("Succeeded", "Failed"):
                time.sleep(0.05)
            verdict.append(time.monotonic() - t0)
            servers[servers.index(holder)] = Server(base, holder.name + "'").start()  # back to two
            print(f"  failover {len(takeover)}: lease taken after {takeover[-1]:.2f} s, "
                  f"verdict of a job submitted at the kill after {verdict[-1]:.2f} s", flush=True)
    finally:
        for s in servers:
            s.stop()
    print(f"(a) SIGKILL of the holder -> follower holds the lease: median {statistics.median(takeover):.2f} s, "
          f"max {max(takeover):.2f} s (lease_duration 10 s); -> verdict of a job submitted at the kill: "
          f"median {statistics.median(verdict):.2f} s (n={n})")


def cli(base: Path) -> float:
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "jupyter_nbvalidation.cli.main", "submit", str(base / "root" / "nb.ipynb"),
                        "--wait", "--no-build", "--local", "--root-dir", str(base / "root"),
                        "--data-dir", str(base / "data"), "-o", "json"], capture_output=True, text=True,
                       env={**os.environ, "JUPYTER_RUNTIME_DIR": str(base / "cli-runtime")})
    took = time.monotonic() - t0
    if p.returncode != 0 or json.loads(p.stdout)["status"]["phase"] != "Succeeded":
        st = json.loads(p.stdout)["status"] if p.stdout.strip().startswith("{") else {}
        raise RuntimeError(f"exit {p.returncode}: {st.get('reason')}: {st.get('message')} {p.stderr[-2000:]}")
    return took


def verdicts(alone_base: Path, beside_base: Path, n: int) -> None:
    for b in (alone_base, beside_base):
        write_notebook(b / "root" / "nb.ipynb", SMALL)
    server = Server(beside_base, "holder").start()
    alone, beside = [], []
    try:
        cli(alone_base), cli(beside_base)  # warm-up (imports, page cache)
        for i in range(n):
            alone.append(cli(alone_base))
            beside.append(cli(beside_base))
            print(f"  round {i + 1}: alone {alone[-1]:.2f} s, beside a holder {beside[-1]:.2f} s", flush=True)
    finally:
        server.stop()
    ma, mb = statistics.median(alone), statistics.median(beside)
    print(f"(b) `submit --wait` time-to-verdict: alone median {ma:.2f} s, beside a running holder median "
          f"{mb:.2f} s; ratio beside/alone {mb / ma:.2f} (n={n})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--failovers", type=int, default=3)
    ap.add_argument("--verdicts", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="nbv-lease-bench-") as tmp:
        tmp = Path(tmp)
        for d in ("fail", "alone", "beside"):
            (tmp / d / "root").mkdir(parents=True)
        failover(tmp / "fail", args.failovers)
        verdicts(tmp / "alone", tmp / "beside", args.verdicts)


if __name__ == "__main__":
    main()
