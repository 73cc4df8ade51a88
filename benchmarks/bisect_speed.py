"""Issue 22: `jupyter nbvalidation bisect` against the linear scan a user does by hand. Prints figures; not a test.

    .venv/bin/python benchmarks/bisect_speed.py [--rounds 2] [--packages 8] [--culprit-index 5[,0,7]]

The scenario, in a fresh temporary folder per round: a project whose requirements.txt says
`--find-links ./wheels` and 8 unpinned packages nbvbench0 ... nbvbench7 (local wheels made by
tests/helpers.py's make_wheel, each `VALUE = <major>`), and a notebook that imports all 8 and asserts
`nbvbench<k>.VALUE == 1` (k: the culprit, --culprit-index). `jupyter nbvalidation run --local` with the
1.0 wheels is green; 2.0 wheels of all 8 are added; `run` again is red (both checked, not counted).

(ours)   `jupyter nbvalidation bisect --local --data-dir D proj/nb.ipynb -o json`, one whole process:
         its wall seconds, its validations (the JSON's `validations`: step 1, the old pins, included)
         and the culprit it names (checked: exactly nbvbench<k> 1.0 -> 2.0).
(theirs) what a user does by hand without the tool: for each changed package in turn (nbvbench0 first),
         `uv venv` + `uv pip install --find-links wheels` of the old pins (all 8 at 1.0) with that
         one package at 2.0, plus ipykernel and nbmake (pytest runs the notebook with the kernel of
         the interpreter it runs in, so nbmake goes into each venv, as a CI script installs it: nothing
         to install in this checkout's venv), then
         `pytest --nbmake nb.ipynb` (lean: only nbmake's plugin loaded). A linear scan stops at the first
         failing configuration: k + 1 validations. The benchmark runs all 8 configurations (checking
         that exactly the k-th fails) and reports both the scan to the first failure (the sum of its
         first k + 1 configurations) and the whole scan of 8 (its worst case: the culprit last).

Every figure is whole processes timed from outside (wall seconds, and the CPU seconds of the process
trees that were waited for: the CLI with its builds, runners and kernels; uv and pytest with its
kernel), as benchmarks/ci_speed.py times them; the two sides alternate (A B, then B A) round by
round. Not timed, printed beside: the median build and validation seconds of bisect's steps (from
their jobs' transitions) and of the scan's configurations (uv venv + install; pytest). The uv cache is warm for both: the user's own, filled before the first round by one untimed
install of ipykernel and nbmake (and, each round, of the round's wheels by the green and red runs).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
import ci_speed  # noqa: E402
from helpers import make_wheel, write_notebook  # noqa: E402

JUPYTER, UV = ci_speed.JUPYTER, ci_speed.UV


def run(argv: list[str], *, cwd: Path, env: dict) -> tuple[float, float, subprocess.CompletedProcess]:
    """One whole process: wall seconds, CPU seconds of its waited-for tree, and the process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          env={**os.environ, **ci_speed.PYTEST_NO_AUTOLOAD, **env})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, proc


def must(argv: list[str], expect: int, **kw) -> tuple[float, float, subprocess.CompletedProcess]:
    wall, cpu, proc = run(argv, **kw)
    if proc.returncode != expect:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}, not {expect}:\n"
                         f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return wall, cpu, proc


def names(n: int) -> list[str]:
    return [f"nbvbench{i}" for i in range(n)]


def wheel(folder: Path, name: str, major: int) -> None:
    (folder / f"{name}-{major}.0-py3-none-any.whl").write_bytes(make_wheel(name, f"{major}.0", f"VALUE = {major}\n"))


def scenario(base: Path, n: int, culprit: int) -> tuple[Path, dict, list[str], dict]:
    """The project, green with the 1.0 wheels, then red with the 2.0 ones; returns the proj folder,
    the env for the CLI, its `--local --data-dir` arguments and the untimed setup figures."""
    proj, data = base / "proj", base / "data"
    (proj / "wheels").mkdir(parents=True)
    for name in names(n):
        wheel(proj / "wheels", name, 1)
    (proj / "requirements.txt").write_text("--find-links ./wheels\n" + "".join(f"{x}\n" for x in names(n)))
    target = f"nbvbench{culprit}"
    write_notebook(proj / "nb.ipynb", ["import " + ", ".join(names(n)),
                                       f"assert {target}.VALUE == 1, {target}.VALUE"])
    env = {"JUPYTER_RUNTIME_DIR": str(base / "no-servers")}  # never a server that happens to run here
    local = ["--local", "--data-dir", str(data)]
    green, _, _ = must([JUPYTER, "nbvalidation", "run", *local, "proj/nb.ipynb"], 0, cwd=base, env=env)
    for name in names(n):
        wheel(proj / "wheels", name, 2)
    red, _, _ = must([JUPYTER, "nbvalidation", "run", *local, "proj/nb.ipynb"], 1, cwd=base, env=env)
    return proj, env, local, {"green": green, "red": red}


def ours(base: Path, env: dict, local: list[str], culprit: int) -> dict:
    wall, cpu, proc = must([JUPYTER, "nbvalidation", "bisect", *local, "proj/nb.ipynb", "-o", "json"], 0,
                           cwd=base, env=env)
    result = json.loads(proc.stdout)
    want = [{"name": f"nbvbench{culprit}", "from": "1.0", "to": "2.0"}]
    if result["result"] != "found" or result["culprits"] != want:
        raise SystemExit(f"bisect found {result['result']} {result['culprits']}, not {want}:\n{proc.stdout[-3000:]}")
    build, validate = step_phases(base, env, local, [s["job"] for s in result["steps"]])
    return {"wall": wall, "cpu": cpu, "validations": result["validations"], "build": build, "validate": validate,
            "culprit": ", ".join(f"{c['name']} {c['from']} -> {c['to']}" for c in result["culprits"])}


def step_phases(base: Path, env: dict, local: list[str], jobs: list[str]) -> tuple[float, float]:
    """Untimed, after the bisect: the median seconds of its steps' builds (Building -> BuildComplete)
    and validations (ValidationRunning -> the verdict), from the jobs' transitions."""
    from datetime import datetime

    builds, validations = [], []
    for name in jobs:
        _, _, proc = must([JUPYTER, "nbvalidation", "describe", *local, name, "-o", "json"], 0, cwd=base, env=env)
        at = {t["phase"]: datetime.fromisoformat(t["time"].replace("Z", "+00:00"))
              for t in json.loads(proc.stdout)["job"]["status"]["transitions"]}
        end = at.get("Succeeded") or at.get("Failed")
        if "Building" in at and "BuildComplete" in at:
            builds.append((at["BuildComplete"] - at["Building"]).total_seconds())
        if "ValidationRunning" in at and end is not None:
            validations.append((end - at["ValidationRunning"]).total_seconds())
    return (statistics.median(builds) if builds else float("nan"),
            statistics.median(validations) if validations else float("nan"))


def theirs(base: Path, proj: Path, n: int, culprit: int) -> dict:
    """The linear scan, all n configurations, each timed; the scan to the first failure is its prefix."""
    steps = []
    for i, moved in enumerate(names(n)):
        venv = base / f"scan-venv-{i}"
        pins = [f"{x}==2.0" if x == moved else f"{x}==1.0" for x in names(n)]
        python = str(venv / "bin" / "python")
        parts = [must([UV, "venv", "-q", "--python", sys.executable, str(venv)], 0, cwd=proj, env={}),
                 must([UV, "pip", "install", "-q", "--python", python, "--find-links", str(proj / "wheels"),
                       *pins, "ipykernel", "nbmake"], 0, cwd=proj, env={})]
        wall, cpu, proc = run([python, "-m", "pytest", "-p", "nbmake", "--nbmake", "-q", "-p", "no:cacheprovider",
                               "nb.ipynb"], cwd=proj, env={})
        if proc.returncode not in (0, 1) or (proc.returncode == 1) != (i == culprit):
            raise SystemExit(f"scan step {i} ({moved} 2.0): pytest exited {proc.returncode}, expected "
                             f"{1 if i == culprit else 0}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        steps.append((sum(p[0] for p in parts) + wall, sum(p[1] for p in parts) + cpu, proc.returncode == 1,
                      sum(p[0] for p in parts), wall))
        shutil.rmtree(venv, ignore_errors=True)  # not timed
    first = next(i for i, s in enumerate(steps) if s[2])
    return {"wall": sum(s[0] for s in steps[:first + 1]), "cpu": sum(s[1] for s in steps[:first + 1]),
            "validations": first + 1, "full_wall": sum(s[0] for s in steps), "full_cpu": sum(s[1] for s in steps),
            "full_validations": len(steps), "per_step": statistics.median(s[0] for s in steps),
            "build": statistics.median(s[3] for s in steps), "validate": statistics.median(s[4] for s in steps)}


def warm_up(base: Path) -> None:
    venv = base / "warm-venv"
    must([UV, "venv", "-q", "--python", sys.executable, str(venv)], 0, cwd=base, env={})
    must([UV, "pip", "install", "-q", "--python", str(venv / "bin" / "python"), "ipykernel", "nbmake"], 0,
         cwd=base, env={})
    shutil.rmtree(venv, ignore_errors=True)


def med(rows: list[dict], key: str) -> str:
    xs = [r[key] for r in rows]
    return f"{statistics.median(xs):.1f} s" + (f" (min {min(xs):.1f}, max {max(xs):.1f})" if len(xs) > 1 else "")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--packages", type=int, default=8)
    ap.add_argument("--culprit-index", default="5", help="which package is the culprit (0-based); a comma list "
                                                          "runs each in turn")
    args = ap.parse_args()
    culprits = [int(c) for c in args.culprit_index.split(",")]
    if any(not 0 <= c < args.packages for c in culprits):
        raise SystemExit(f"--culprit-index must be within 0..{args.packages - 1}")
    load = os.getloadavg()
    print(f"# machine: {os.cpu_count()} cores, python {sys.version.split()[0]}, load average "
          f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; {args.packages} changed packages, culprit index "
          f"{args.culprit_index}, {args.rounds} round(s) each", flush=True)
    with tempfile.TemporaryDirectory(prefix="nbv-bisect-bench-") as tmp:
        warm_up(Path(tmp))
        for culprit in culprits:
            a_rows, b_rows = [], []
            for r in range(args.rounds):
                base = Path(tmp) / f"c{culprit}-r{r}"
                base.mkdir()
                proj, env, local, setup = scenario(base, args.packages, culprit)
                order = ("ours", "theirs") if r % 2 == 0 else ("theirs", "ours")
                for side in order:
                    if side == "ours":
                        a_rows.append(ours(base, env, local, culprit))
                    else:
                        b_rows.append(theirs(base, proj, args.packages, culprit))
                a, b = a_rows[-1], b_rows[-1]
                print(f"  culprit {culprit}, round {r + 1} ({' then '.join(order)}; untimed green run "
                      f"{setup['green']:.1f} s, red run {setup['red']:.1f} s): bisect {a['wall']:.1f} s wall, "
                      f"{a['cpu']:.1f} s CPU, {a['validations']} validations (a step's median build "
                      f"{a['build']:.1f} s, validation {a['validate']:.1f} s), found {a['culprit']}; linear scan "
                      f"{b['wall']:.1f} s wall, {b['cpu']:.1f} s CPU, {b['validations']} validations "
                      f"(all {b['full_validations']}: {b['full_wall']:.1f} s wall, {b['full_cpu']:.1f} s CPU; "
                      f"a configuration's median {b['per_step']:.1f} s: uv venv + install {b['build']:.1f} s, "
                      f"pytest --nbmake {b['validate']:.1f} s); ratio bisect / linear {a['wall'] / b['wall']:.2f}"
                      f" wall, {a['cpu'] / b['cpu']:.2f} CPU", flush=True)
                shutil.rmtree(base, ignore_errors=True)
            ma, mb = (statistics.median(r["wall"] for r in rows) for rows in (a_rows, b_rows))
            ca, cb = (statistics.median(r["cpu"] for r in rows) for rows in (a_rows, b_rows))
            mf = statistics.median(r["full_wall"] for r in b_rows)
            print(f"(culprit {culprit} of {args.packages}) bisect: {med(a_rows, 'wall')} wall, {med(a_rows, 'cpu')} "
                  f"CPU, validations {sorted({r['validations'] for r in a_rows})}, found {a_rows[0]['culprit']}; "
                  f"linear scan to the first failure: {med(b_rows, 'wall')} wall, {med(b_rows, 'cpu')} CPU, "
                  f"{b_rows[0]['validations']} validations; whole scan of {args.packages}: {mf:.1f} s wall; "
                  f"ratio of medians bisect / linear {ma / mb:.2f} wall, {ca / cb:.2f} CPU; "
                  f"bisect / whole scan {ma / mf:.2f} wall", flush=True)
    load = os.getloadavg()
    print(f"# load average at the end {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}", flush=True)


if __name__ == "__main__":
    main()
