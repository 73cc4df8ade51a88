"""REST latency and event-loop stalls under load (issue 3). Prints figures; not a test.

    .venv/bin/python benchmarks/rest_latency.py [--stored 200] [--running 10] [--building 4] [--requests 500]

A real `jupyter server` subprocess (local backend) holds N stored jobs (written
to its SQLite store before it starts) while R validations (notebooks that
compute for a while) and B environment builds (venv + pip) run. Over one
persistent HTTP connection it measures GET /jobs (first page, 50 items) and
GET /jobs/{name}, and, as the baseline a user already has, Jupyter's own
GET /api/contents of the root folder, in the same run. The largest
event-loop stall comes from the server's own monitor (/health maxLoopLagMs).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from helpers import write_notebook  # noqa: E402

from jupyter_nbvalidation.core.model import Phase, new_job  # noqa: E402
from jupyter_nbvalidation.engine.transitions import new_status  # noqa: E402
from jupyter_nbvalidation.store.sqlite import SQLiteJobStore  # noqa: E402


def pct(values, p):
    values = sorted(values)
    k = (len(values) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


async def seed(db: Path, n: int) -> None:
    store = SQLiteJobStore(path=db)
    await store.start()
    for i in range(n):
        job = new_job({"notebook": {"path": f"old/nb{i % 20}.ipynb"}, "podConfig": {"buildConfig": {"enabled": False}}})
        job = await store.create(job)
        for phase, reason in [(Phase.INITIALIZING, "Accepted"), (Phase.VALIDATION_RUNNING, "ValidationStarted"),
                              (Phase.SUCCEEDED, "ValidationSucceeded")]:
            st = new_status(job, phase, reason, "seeded")
            if phase == Phase.SUCCEEDED:
                st["results"] = [{"cellIndex": c, "status": "Success", "executionTime": "0.010s"} for c in range(10)]
            job = await store.update_status(job["metadata"]["name"], st, job["metadata"]["resourceVersion"])
    await store.stop()


class Conn:
    def __init__(self, port: int, token: str):
        self.c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.h = {"Authorization": f"token {token}", "Content-Type": "application/json"}

    def call(self, method: str, path: str, body=None):
        t0 = time.perf_counter()
        self.c.request(method, path, body=json.dumps(body) if body is not None else None, headers=self.h)
        r = self.c.getresponse()
        data = r.read()
        dt = (time.perf_counter() - t0) * 1000
        if r.status >= 300:
            raise RuntimeError(f"{method} {path}: {r.status} {data[:300]!r}")
        return json.loads(data) if data else None, dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--stored", type=int, default=200)
    ap.add_argument("--running", type=int, default=10)
    ap.add_argument("--building", type=int, default=4)
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--server-arg", action="append", default=[], help="extra argument for jupyter server")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="nbv-rest-bench-"))
    root, data = work / "root", work / "data"
    root.mkdir()
    asyncio.run(seed(data / "nbvalidation.db", args.stored))
    write_notebook(root / "busy.ipynb", ["import time\nt = time.time()\nwhile time.time() - t < 40:\n    sum(range(10000))"])
    write_notebook(root / "build.ipynb", ["print('built')"])
    token = secrets.token_hex(8)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter_server", "--no-browser", "--allow-root", f"--port={port}", "--ip=127.0.0.1",
         f"--ServerApp.token={token}", f"--ServerApp.root_dir={root}", f"--LocalBackend.data_dir={data}",
         f"--LocalBackend.max_parallel_validations={args.running}", "--LocalBackend.max_parallel_builds=2",
         *args.server_arg],
        stdout=open(work / "server.log", "w"), stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "JUPYTER_RUNTIME_DIR": str(work / "runtime")})
    try:
        for _ in range(300):
            try:
                conn = Conn(port, token)
                conn.call("GET", "/nbvalidation/api/v1/health")
                break
            except (OSError, RuntimeError):
                time.sleep(0.2)
        base = "/nbvalidation/api/v1"
        for _ in range(args.running):
            conn.call("POST", f"{base}/jobs", {"notebook": {"path": "busy.ipynb"},
                                               "podConfig": {"buildConfig": {"enabled": False}}})
        for i in range(args.building):
            conn.call("POST", f"{base}/jobs", {"notebook": {"path": "build.ipynb"}, "podConfig": {"buildConfig": {
                "strategy": "venv", "requirements": [f"six!=0.0.{i}"]}}})
        # wait until the validations really run (kernels started)
        deadline = time.time() + 120
        while time.time() < deadline:
            jobs, _ = conn.call("GET", f"{base}/jobs", None)
            running = sum(1 for j in jobs["items"] if j["status"].get("phase") == "ValidationRunning")
            if running >= args.running:
                break
            time.sleep(0.5)
        time.sleep(3)
        names = [j["metadata"]["name"] for j in conn.call("GET", f"{base}/jobs?limit=200")[0]["items"]]
        # warm-up: first calls pay one-time costs (Jupyter's contents manager took ~0.5 s)
        for _ in range(3):
            conn.call("GET", f"{base}/jobs")
            conn.call("GET", f"{base}/jobs/{names[0]}")
            conn.call("GET", "/api/contents?content=1")
        time.sleep(11)  # the stall window below starts after the warm-up
        lists, gets, contents, stalls = [], [], [], []
        window_start = time.monotonic()
        for i in range(args.requests):
            lists.append(conn.call("GET", f"{base}/jobs")[1])
            job, dt = conn.call("GET", f"{base}/jobs/{names[i % len(names)]}")
            gets.append(dt)
            contents.append(conn.call("GET", "/api/contents?content=1")[1])
            if time.monotonic() - window_start > 8:
                stalls.append(conn.call("GET", f"{base}/health")[0]["engine"]["loopLagMs"]["last10s"])
                window_start = time.monotonic()
        stalls.append(conn.call("GET", f"{base}/health")[0]["engine"]["loopLagMs"]["last10s"])
        listed, _ = conn.call("GET", f"{base}/jobs?limit=500")
        active = {}
        for j in listed["items"]:
            active[j["status"].get("phase")] = active.get(j["status"].get("phase"), 0) + 1
        health, _ = conn.call("GET", f"{base}/health")
        print(f"# {os.cpu_count()} cores; {len(listed['items'])} jobs stored, phases at the end: {active}")
        print(f"GET /jobs (50 items)      p50 {pct(lists, 50):6.2f} ms  p99 {pct(lists, 99):6.2f} ms  "
              f"({len(lists)} requests)")
        print(f"GET /jobs/{{name}}         p50 {pct(gets, 50):6.2f} ms  p99 {pct(gets, 99):6.2f} ms")
        print(f"GET /api/contents (Jupyter's own, baseline) p50 {pct(contents, 50):6.2f} ms  "
              f"p99 {pct(contents, 99):6.2f} ms")
        print(f"ratio p99 GET /jobs / GET /api/contents = {pct(lists, 99) / pct(contents, 99):.2f}; "
              f"GET /jobs/{{name}} / GET /api/contents = {pct(gets, 99) / pct(contents, 99):.2f}")
        running_now = {k: v for k, v in active.items() if k in ("Building", "ValidationRunning")}
        print(f"largest event-loop stall while the requests above were served ({running_now} at the end): "
              f"{max(stalls)} ms; since start-up, including start-up and warm-up: "
              f"{health['engine']['loopLagMs']['sinceStart']} ms")
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()


if __name__ == "__main__":
    main()
