"""Issue 20: the warm re-run of an unchanged folder against `pytest --nbmake -n 2` (same run).

    .venv/bin/python benchmarks/warm_rerun.py [--rounds 5] [--notebooks 12]

The folder and the timing are benchmarks/ci_speed.py's (imported from beside this file): 12 small
notebooks, `--no-build`, whole processes timed from outside (wall, and CPU of the process tree),
the two tools alternating A B A B. Ours: `jupyter nbvalidation run DIR -j 2 --no-build --local`
after one run that filled the verdict cache (every notebook must come back Unchanged, checked
each round); theirs: `pytest --nbmake -n 2 DIR` (lean: only nbmake's and xdist's plugins).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ci_speed  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--notebooks", type=int, default=12)
    args = ap.parse_args()
    print(f"# machine: {os.cpu_count()} cores, python {sys.version.split()[0]}, "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    with tempfile.TemporaryDirectory(prefix="nbv-warm-rerun-") as tmp:
        base = Path(tmp)
        folder = ci_speed.make_folder(base / "folder", args.notebooks)
        data = base / "data"
        ours_argv = [ci_speed.JUPYTER, "nbvalidation", "run", str(folder), "-j", "2", "--no-build", "--local",
                     "--data-dir", str(data), "-o", "json"]
        env = {"JUPYTER_RUNTIME_DIR": str(base / "no-servers")}
        first = subprocess.run(ours_argv, cwd=folder, capture_output=True, text=True,
                               env={**os.environ, **env})  # fills the verdict cache
        assert first.returncode == 0, first.stdout + first.stderr
        assert {r["verdict"] for r in json.loads(first.stdout)} == {"Succeeded"}, first.stdout
        theirs_argv = ci_speed.nbmake_argv(str(folder), workers=2)
        ci_speed.timed(theirs_argv, cwd=folder)  # warm-up, not counted
        ours, theirs = [], []
        for _ in range(args.rounds):
            before = len(ci_speed.CPU)
            ours.append(ci_speed.timed_cpu(ours_argv, cwd=folder, env=env))
            assert len(ci_speed.CPU) == before + 1
            theirs.append(ci_speed.timed_cpu(theirs_argv, cwd=folder))
            # the round's verdicts, read again (not timed): every notebook Unchanged, nothing ran
            check = subprocess.run(ours_argv, cwd=folder, capture_output=True, text=True, env={**os.environ, **env})
            verdicts = {r["verdict"] for r in json.loads(check.stdout)}
            assert check.returncode == 0 and verdicts == {"Unchanged"}, check.stdout + check.stderr
        jobs = len([d for d in (data / "jobs").iterdir() if not d.name.startswith(".")])  # .pool: kernels
        assert jobs == args.notebooks, f"{jobs} jobs: a warm re-run ran something"
        ci_speed.report(f"(warm re-run) {args.notebooks} unchanged notebooks, no build", ours, theirs,
                        "nbvalidation run -j 2 (all Unchanged)", "pytest --nbmake -n 2")
        print(f"# jobs in the data dir at the end: {jobs} (the first run's; no re-run created one)")
    print(f"# load average at the end {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)


if __name__ == "__main__":
    main()
