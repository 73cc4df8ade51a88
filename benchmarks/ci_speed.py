"""CI speed against nbmake (issue 11). Prints figures; not a test.

    .venv/bin/python benchmarks/ci_speed.py [--rounds 3] [--notebooks 12] [--only folder,one,reqs]

Every figure is a whole process timed from outside (start to exit; wall seconds, and
the CPU seconds of its process tree, which a loaded machine disturbs less), the two
tools alternating A B A B in one run, on the same notebooks and the same interpreter:

(folder) 12 small notebooks, two at a time: `jupyter nbvalidation run DIR -j 2 --no-build`
         (and `--no-cache` once `run` has a verdict cache) when this checkout has `run`, else one process driving the same 12
         jobs through the in-process engine with two validation slots (what `run` does
         locally) -- against `pytest --nbmake -n 2 DIR`.
(one)    one notebook: `jupyter nbvalidation submit NB --wait --no-build` (no server) against
         `pytest --nbmake NB`.
(reqs)   the same folder with one requirements.txt shared by all notebooks, environment
         built: cold (empty uv cache, empty environment cache) and warm (both filled)
         against what a CI script does today: `uv venv` + `uv pip install -r
         requirements.txt ipykernel nbmake pytest-xdist` + `pytest --nbmake -n 2` (cold:
         empty uv cache; warm: warm uv cache, a new venv as every CI run makes).

Needs nbmake and pytest-xdist in this interpreter (`uv pip install nbmake pytest-xdist`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
JUPYTER = str(BIN / "jupyter")
UV = shutil.which("uv", path=str(BIN)) or shutil.which("uv") or "uv"


def cell_sources(i: int, uses_reqs: bool) -> list[str]:
    head = "import tabulate\nprint(tabulate.tabulate([[1, 2]]))" if uses_reqs else "import json\nprint(json.dumps({'a': 1}))"
    return [head, "import math\nx = [math.sqrt(k) for k in range(1000)]", f"print(sum(x) + {i})"]


def make_folder(path: Path, n: int, requirements: str | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        cells = [{"cell_type": "markdown", "metadata": {}, "source": f"# notebook {i}"}]
        cells += [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": src}
                  for src in cell_sources(i, requirements is not None)]
        nb = {"nbformat": 4, "nbformat_minor": 5, "cells": cells,
              "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}}
        (path / f"nb{i:02d}.ipynb").write_text(json.dumps(nb, indent=1))
    if requirements is not None:
        (path / "requirements.txt").write_text(requirements)
    return path


CPU: list[float] = []  # CPU seconds (user + sys) of each timed process tree, in call order


def timed(argv: list[str], *, cwd: Path, env: dict | None = None, expect: int = 0) -> float:
    """Wall seconds of one whole process; its CPU seconds (itself and every descendant
    that was waited for: runner, kernels, pytest workers) are appended to CPU."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **PYTEST_NO_AUTOLOAD, **(env or {})})
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    if proc.returncode != expect:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return elapsed


def timed_cpu(argv: list[str], **kw) -> tuple[float, float]:
    wall = timed(argv, **kw)
    return wall, CPU[-1]


def _run_help() -> str | None:
    proc = subprocess.run([JUPYTER, "nbvalidation", "run", "--help"], capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else None


def has_run_command() -> bool:
    return _run_help() is not None


# -- ours, without `run`: the in-process engine, 12 jobs, two validation slots -------------
async def _engine_main(folder: Path, data: Path, build: bool, parallel: int) -> int:
    from jupyter_nbvalidation.backends.local import LocalBackend
    from jupyter_nbvalidation.engine.engine import Engine
    from jupyter_nbvalidation.service.jobs import JobService

    backend = LocalBackend(data_dir=str(data), max_parallel_validations=parallel, max_parallel_builds=parallel)
    engine = Engine(backend, log=logging.getLogger("bench"))
    service = JobService(engine, backend, str(folder))
    await engine.start()
    try:
        spec_extra = {} if build else {"podConfig": {"buildConfig": {"enabled": False}}}
        names = [(await service.submit({"notebook": {"path": nb.name}, **spec_extra}))["metadata"]["name"]
                 for nb in sorted(folder.glob("*.ipynb"))]
        done = await asyncio.gather(*(engine.wait_for_terminal(n, 900) for n in names))
        await engine.recorder.flush()
        bad = [d["metadata"]["name"] for d in done if d["status"]["phase"] != "Succeeded"]
        if bad:
            print("not succeeded:", bad, file=sys.stderr)
        return 1 if bad else 0
    finally:
        await engine.stop()


def ours_folder_argv(folder: Path, data: Path, build: bool) -> list[str]:
    if has_run_command():
        argv = [JUPYTER, "nbvalidation", "run", str(folder), "-j", "2", "--data-dir", str(data)]
        if "--no-cache" in (_run_help() or ""):  # never a cached verdict: every notebook runs
            argv.append("--no-cache")
        if "--local" in (_run_help() or ""):  # in its own process, never a server that happens to run here
            argv.append("--local")
        return argv if build else argv + ["--no-build"]
    return [sys.executable, __file__, "_engine", str(folder), str(data), "build" if build else "no-build"]


def nbmake_argv(*targets: str, workers: int | None, python: str = sys.executable) -> list[str]:
    # nbmake at its leanest: only its own plugin and xdist's are loaded (PYTEST_NO_AUTOLOAD
    # below), not every pytest plugin this interpreter has (pytest-jupyter, hypothesis, ...)
    argv = [python, "-m", "pytest", "-p", "nbmake", "-p", "xdist.plugin", "--nbmake", "-q",
            "-p", "no:cacheprovider", *targets]
    return argv + ["-n", str(workers)] if workers else argv


PYTEST_NO_AUTOLOAD = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def report(label: str, ours: list[tuple[float, float]], theirs: list[tuple[float, float]], ours_name: str,
           theirs_name: str) -> None:
    for what, k in (("wall", 0), ("CPU", 1)):
        a, b = [x[k] for x in ours], [x[k] for x in theirs]
        mo, mt = statistics.median(a), statistics.median(b)
        ratios = [x / y for x, y in zip(a, b, strict=True)]
        print(f"{label} [{what}]: {ours_name} median {mo:.2f} s (min {min(a):.2f}, max {max(a):.2f}); "
              f"{theirs_name} median {mt:.2f} s (min {min(b):.2f}, max {max(b):.2f}); "
              f"ratio of medians {mo / mt:.2f}, pairwise {', '.join(f'{r:.2f}' for r in ratios)}", flush=True)


def bench_folder(base: Path, n: int, rounds: int) -> None:
    folder = make_folder(base / "folder", n)
    data = base / "folder-data"
    argv = ours_folder_argv(folder, data, build=False)
    name = "nbvalidation run -j 2" if has_run_command() else "in-process engine, 2 slots"
    timed(argv, cwd=folder)  # warm-up: the data dir, the OS file cache
    timed(nbmake_argv(str(folder), workers=2), cwd=folder)
    ours, theirs = [], []
    for _ in range(rounds):
        ours.append(timed_cpu(argv, cwd=folder))
        theirs.append(timed_cpu(nbmake_argv(str(folder), workers=2), cwd=folder))
    report(f"(folder) {n} notebooks, 2 at a time, no build", ours, theirs, name, "pytest --nbmake -n 2")


def bench_one(base: Path, rounds: int) -> None:
    folder = make_folder(base / "one", 1)
    nb = "nb00.ipynb"
    argv = [JUPYTER, "nbvalidation", "submit", nb, "--wait", "--no-build", "--data-dir", str(base / "one-data")]
    env = {"JUPYTER_RUNTIME_DIR": str(base / "no-servers")}  # no server: in this process
    timed(argv, cwd=folder, env=env)
    timed(nbmake_argv(nb, workers=None), cwd=folder)
    ours, theirs = [], []
    for _ in range(rounds):
        ours.append(timed_cpu(argv, cwd=folder, env=env))
        theirs.append(timed_cpu(nbmake_argv(nb, workers=None), cwd=folder))
    report("(one) one notebook, no server, no build", ours, theirs, "submit --wait", "pytest --nbmake NB")


def bench_reqs(base: Path, n: int, rounds: int, layout: str = "beside") -> None:
    """``layout`` beside: requirements.txt beside the notebooks; root (issue 21): a git
    repository declaring it at its root, the notebooks in notebooks/ (found by discovery;
    the CI script names the root's file, as a user writes it)."""
    reqs = "tabulate==0.9.0\nsix==1.17.0\n"
    results: dict[str, tuple[list[tuple[float, float]], list[tuple[float, float]]]] = {"cold": ([], []),
                                                                                      "warm": ([], [])}
    warm_uv = base / "reqs-uv-cache-warm"
    warm_data = base / "reqs-data-warm"
    for r in range(rounds + 1):  # the first round fills the warm caches and is not counted
        if layout == "root":
            repo = base / f"reqs-{r}"
            make_folder(repo / "notebooks", n, reqs)  # the same cells as the beside layout's
            (repo / "notebooks" / "requirements.txt").rename(repo / "requirements.txt")
            (repo / ".git").mkdir(exist_ok=True)
            folder, nb_folder, req_file = repo, repo / "notebooks", "requirements.txt"
        else:
            folder = make_folder(base / f"reqs-{r}", n, reqs)
            nb_folder, req_file = folder, "requirements.txt"
        for mode in ("cold", "warm"):
            uv_cache = base / f"reqs-uv-cold-{r}" if mode == "cold" else warm_uv
            data = base / f"reqs-data-cold-{r}" if mode == "cold" else warm_data
            env = {"UV_CACHE_DIR": str(uv_cache)}
            ours = timed_cpu(ours_folder_argv(folder, data, build=True), cwd=folder, env=env)
            venv = base / f"reqs-venv-{mode}-{r}"

            def ci_script(venv: Path = venv, folder: Path = folder, env: dict = env, req_file: str = req_file,
                          nb_folder: Path = nb_folder) -> tuple[float, float]:
                steps = [timed_cpu([UV, "venv", "-q", "--python", sys.executable, str(venv)], cwd=folder, env=env),
                         timed_cpu([UV, "pip", "install", "-q", "--python", str(venv / "bin" / "python"),
                                    "-r", req_file, "ipykernel", "nbmake", "pytest-xdist"],
                                   cwd=folder, env=env),
                         timed_cpu(nbmake_argv(str(nb_folder), workers=2, python=str(venv / "bin" / "python")),
                                   cwd=folder, env=env)]
                return sum(w for w, _ in steps), sum(c for _, c in steps)

            theirs = ci_script()
            if r > 0:
                results[mode][0].append(ours)
                results[mode][1].append(theirs)
            shutil.rmtree(venv, ignore_errors=True)
    for mode, (ours_t, theirs_t) in results.items():
        where = "at the repository root, notebooks in notebooks/" if layout == "root" else "beside them"
        report(f"(reqs, {mode}) {n} notebooks, one requirements.txt {where}, environment built", ours_t, theirs_t,
               "nbvalidation" + (" run -j 2" if has_run_command() else " in-process engine, 2 slots"),
               "uv venv + uv pip install + pytest --nbmake -n 2")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_engine":
        logging.basicConfig(level=logging.WARNING)
        sys.exit(asyncio.run(_engine_main(Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4] == "build", 2)))
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--notebooks", type=int, default=12)
    ap.add_argument("--only", default="one,folder,reqs")
    ap.add_argument("--reqs-layout", choices=["beside", "root"], default="beside",
                    help="(reqs) requirements.txt beside the notebooks, or at a repository's root (issue 21)")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="nbv-ci-bench-"))
    load = os.getloadavg()
    print(f"# machine: {os.cpu_count()} cores, python {sys.version.split()[0]}, load average "
          f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}, work dir {base}; "
          f"ours = {'run' if has_run_command() else 'in-process engine'}", flush=True)
    try:
        only = args.only.split(",")
        if "one" in only:
            bench_one(base, args.rounds)
        if "folder" in only:
            bench_folder(base, args.notebooks, args.rounds)
        if "reqs" in only:
            bench_reqs(base, args.notebooks, args.rounds, args.reqs_layout)
    finally:
        load = os.getloadavg()
        print(f"# load average at the end {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
