"""Local-backend benchmarks (issue 2). Prints figures; not a test.

    .venv/bin/python benchmarks/local_engine.py [--jobs 50] [--verdict-runs 7] [--cold-runs 3]

(a) reaction latency: build completion (the build process finished and the
    environment was published) -> validation start (the runner process is
    spawned), p50/p99 over N real builds (distinct requirement strings, so
    each job really builds; uv with a warm package cache).
(b) time-to-verdict of a small notebook with a warm environment cache
    (submit -> Succeeded through the engine) against
    `jupyter nbconvert --to notebook --execute` of the same notebook with a
    kernel in the same environment, measured alternately in one run.
(c) a cold environment build: uv against venv + pip (empty caches), as a ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from helpers import write_notebook  # noqa: E402

from jupyter_nbvalidation.backends.local import LocalBackend  # noqa: E402
from jupyter_nbvalidation.core.model import parse_time  # noqa: E402
from jupyter_nbvalidation.engine.engine import Engine  # noqa: E402
from jupyter_nbvalidation.service.jobs import JobService  # noqa: E402

SMALL = ["import math", "x = [math.sqrt(i) for i in range(1000)]", "print(sum(x))"]


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    k = (len(values) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def make(work: Path, **backend_kw) -> tuple[Engine, LocalBackend, JobService, Path]:
    root = work / "root"
    root.mkdir(parents=True, exist_ok=True)
    backend = LocalBackend(data_dir=str(work / "data"), **backend_kw)
    engine = Engine(backend, log=logging.getLogger("bench"))
    return engine, backend, JobService(engine, backend, str(root)), root


async def reaction(work: Path, n: int) -> list[float]:
    engine, backend, service, root = make(work, max_parallel_builds=2, max_parallel_validations=2)
    write_notebook(root / "nb.ipynb", ["print('ok')"])
    await engine.start()
    latencies: list[float] = []
    try:
        async def one(i: int) -> None:
            job = await service.submit({"notebook": {"path": "nb.ipynb"}, "podConfig": {
                "buildConfig": {"requirements": [f"six!=0.0.{i}"]}}})
            done = await engine.wait_for_terminal(job["metadata"]["name"], 600)
            st = done["status"]
            assert st["phase"] == "Succeeded", st
            built = parse_time(st["buildStatus"]["completionTime"])
            started = parse_time(st["validationStatus"]["startTime"])
            latencies.append((started - built).total_seconds() * 1000)

        sem = asyncio.Semaphore(2)  # at most two in flight: no queueing for a validation slot

        async def bounded(i: int) -> None:
            async with sem:
                await one(i)

        await asyncio.gather(*(bounded(i) for i in range(n)))
    finally:
        await engine.stop()
    return latencies


async def verdict_ours(service: JobService, engine: Engine) -> float:
    t0 = time.perf_counter()
    job = await service.submit({"notebook": {"path": "small.ipynb"}})
    done = await engine.wait_for_terminal(job["metadata"]["name"], 300)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    return time.perf_counter() - t0


def verdict_nbconvert(root: Path, env: Path, kernels: Path) -> float:
    out = root / "nbconvert-out.ipynb"
    t0 = time.perf_counter()
    subprocess.run([os.path.join(os.path.dirname(sys.executable), "jupyter"), "nbconvert", "--to", "notebook",
                    "--execute", str(root / "small.ipynb"), "--output", str(out),
                    "--ExecutePreprocessor.kernel_name=benchenv"],
                   check=True, capture_output=True, env={**os.environ, "JUPYTER_PATH": str(kernels)})
    return time.perf_counter() - t0


async def time_to_verdict(work: Path, runs: int) -> tuple[list[float], list[float]]:
    engine, backend, service, root = make(work)
    write_notebook(root / "small.ipynb", SMALL)
    await engine.start()
    try:
        await verdict_ours(service, engine)  # builds (and caches) the environment
        env = Path((await service.list("small.ipynb", 1, None))["items"][0]["status"]["buildStatus"]["imageReference"])
        kernels = work / "kernels"
        (kernels / "kernels" / "benchenv").mkdir(parents=True)
        (kernels / "kernels" / "benchenv" / "kernel.json").write_text(json.dumps({
            "argv": [str(env / "bin" / "python"), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "bench env", "language": "python"}))
        verdict_nbconvert(root, env, kernels)  # warm-up
        ours, theirs = [], []
        for _ in range(runs):  # alternate, so load drifts hit both alike
            ours.append(await verdict_ours(service, engine))
            theirs.append(await asyncio.to_thread(verdict_nbconvert, root, env, kernels))
    finally:
        await engine.stop()
    return ours, theirs


async def cold_build(work: Path, strategy: str) -> float:
    engine, backend, service, root = make(work, build_tool=strategy)
    write_notebook(root / "nb.ipynb", ["print(1)"])
    (root / "requirements.txt").write_text("tabulate==0.9.0\nsix==1.17.0\n")
    await engine.start()
    try:
        job = await service.submit({"notebook": {"path": "nb.ipynb"}})
        done = await engine.wait_for_terminal(job["metadata"]["name"], 900)
        st = done["status"]
        assert st["phase"] == "Succeeded" and st["buildStatus"]["strategy"] == strategy, st
        return (parse_time(st["buildStatus"]["completionTime"]) - parse_time(st["buildStatus"]["startTime"])).total_seconds()
    finally:
        await engine.stop()


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=50)
    ap.add_argument("--verdict-runs", type=int, default=7)
    ap.add_argument("--cold-runs", type=int, default=3)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="nbv-bench-"))
    print(f"# machine: {os.cpu_count()} cores, python {sys.version.split()[0]}, work dir {base}")

    lat = await reaction(base / "reaction", args.jobs)
    print(f"(a) reaction latency, build completion -> validation start, {len(lat)} jobs: "
          f"p50 {pct(lat, 50):.1f} ms, p99 {pct(lat, 99):.1f} ms, max {max(lat):.1f} ms")

    ours, theirs = await time_to_verdict(base / "verdict", args.verdict_runs)
    mo, mt = statistics.median(ours), statistics.median(theirs)
    print(f"(b) time-to-verdict, small notebook, warm environment, {len(ours)} alternating runs: "
          f"nbvalidation median {mo:.2f} s (min {min(ours):.2f}), nbconvert --execute median {mt:.2f} s "
          f"(min {min(theirs):.2f}); ratio {mo / mt:.2f}")

    uv_times, pip_times = [], []
    for i in range(args.cold_runs):
        for strategy, bucket in (("uv", uv_times), ("venv", pip_times)):
            work = base / f"cold-{strategy}-{i}"
            caches = {"UV_CACHE_DIR": str(work / "uv-cache"), "PIP_NO_CACHE_DIR": "1"}
            old = {k: os.environ.get(k) for k in caches}
            os.environ.update(caches)
            try:
                bucket.append(await cold_build(work, strategy))
            finally:
                for k, v in old.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
    mu, mp = statistics.median(uv_times), statistics.median(pip_times)
    print(f"(c) cold environment build (tabulate + six + ipykernel, empty caches), {args.cold_runs} runs each: "
          f"uv median {mu:.2f} s, venv+pip median {mp:.2f} s; venv+pip / uv = {mp / mu:.1f}x")
    shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(main())
