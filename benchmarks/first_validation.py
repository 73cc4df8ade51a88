"""A newcomer's first validation: click -> verdict through the REST API of a
real Jupyter server, for a notebook whose requirements.txt names pandas, on a
fresh data dir. Prints figures; not a test.

    .venv/bin/python benchmarks/first_validation.py [--tools uv,venv] [--cache cold,warm] [--requirement pandas]

For each build tool (``uv``, the default of the local backend now that uv is a
dependency, and ``venv``, venv + pip, the alternative) and each cache state:

- ``cold``: an empty, temporary ``UV_CACHE_DIR`` and ``PIP_CACHE_DIR``: nothing
  downloaded or built before (what a newcomer who never used uv or pip has);
- ``warm``: the same temporary cache, a second fresh data dir (so a new
  environment is built, from what the cold run cached).

Each run starts its own ``jupyter server`` (fresh root, fresh data dir), POSTs
the job the panel's Validate button posts, and polls ``GET /jobs/{name}`` every
0.2 s: "click -> verdict" is from the POST to the first terminal answer.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import nbformat

NOTEBOOK = [
    "import pandas as pd",
    "df = pd.DataFrame({'price': [3.0, 5.0], 'cost': [1.0, 2.0]})",
    'margin = df["price"] - df["cost"]\nprint(margin.sum())',
]


def request(url: str, token: str, method: str = "GET", body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def one_run(tool: str, cache: Path, requirement: str, work: Path) -> dict:
    root, data = work / "root", work / "data"
    root.mkdir(parents=True)
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(src) for src in NOTEBOOK]
    nbformat.write(nb, str(root / "analysis.ipynb"))
    (root / "requirements.txt").write_text(requirement + "\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = secrets.token_hex(16)
    url = f"http://127.0.0.1:{port}/"
    env = {**os.environ, "UV_CACHE_DIR": str(cache / "uv"), "PIP_CACHE_DIR": str(cache / "pip"),
           "JUPYTER_RUNTIME_DIR": str(work / "runtime")}
    log = open(work / "server.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "jupyter_server", "--no-browser", "--allow-root", f"--port={port}",
                             "--ip=127.0.0.1", f"--ServerApp.token={token}", f"--ServerApp.root_dir={root}",
                             f"--LocalBackend.data_dir={data}", f"--LocalBackend.build_tool={tool}",
                             "--ServerApp.port_retries=0"], stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)
    try:
        api = url + "nbvalidation/api/v1/"
        deadline = time.monotonic() + 120
        while True:
            try:
                if request(api + "health", token)["usable"]:
                    break
            except Exception:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the server did not come up: " + (work / "server.log").read_text()[-2000:])
            time.sleep(0.2)
        clicked = time.monotonic()
        job = request(api + "jobs", token, "POST", {"notebook": {"path": "analysis.ipynb"}})
        name = job["metadata"]["name"]
        while True:
            job = request(api + f"jobs/{name}", token)
            if job["status"].get("phase") in ("Succeeded", "Failed"):
                break
            time.sleep(0.2)
        verdict = time.monotonic() - clicked
        st = job["status"]
        return {"tool": tool, "verdict": st["phase"], "seconds": verdict,
                "build": (st.get("buildStatus") or {}).get("duration"),
                "validation": (st.get("validationStatus") or {}).get("duration"), "message": st.get("message")}
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
        log.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tools", default="uv,venv")
    ap.add_argument("--cache", default="cold,warm")
    ap.add_argument("--requirement", default="pandas")
    args = ap.parse_args()
    rows = []
    for tool in args.tools.split(","):
        cache = Path(tempfile.mkdtemp(prefix=f"nbv-bench-cache-{tool}-"))
        try:
            for state in args.cache.split(","):
                work = Path(tempfile.mkdtemp(prefix=f"nbv-bench-{tool}-{state}-"))
                try:
                    row = one_run(tool, cache, args.requirement, work)
                finally:
                    shutil.rmtree(work, ignore_errors=True)
                row["cache"] = state
                rows.append(row)
                print(f"{tool:<5} {state:<5} {row['verdict']:<9} click->verdict {row['seconds']:7.1f} s  "
                      f"(build {row['build']}, validation {row['validation']})", flush=True)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    by = {(r["tool"], r["cache"]): r["seconds"] for r in rows}
    for state in args.cache.split(","):
        if ("uv", state) in by and ("venv", state) in by:
            print(f"{state}: venv+pip / uv = {by[('venv', state)] / by[('uv', state)]:.1f}x")
    print(f"load: {os.getloadavg()[0]:.1f} (1-min average, {os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
