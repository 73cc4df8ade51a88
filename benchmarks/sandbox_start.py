"""What the kernel's sandbox (runner/sandbox.py) costs at start. Prints figures; not a test.

    .venv/bin/python benchmarks/sandbox_start.py [--rounds 10]

Two figures, each with and without the sandbox, alternating A B A B in one process on
the same interpreter:

(launcher) `python -c pass` started and waited for, bare and wrapped by the sandbox's
           launcher (unshare, a fresh /proc, the tmpfs and bind mounts of a typical
           kernel: HOME, the data dir, /tmp hidden, a project root and the environment
           shown again, every mount read-only but the run's own, Landlock on writes and,
           run as root, idmapped mounts and the switch to nobody), wall seconds;
(run)      after one warm-up run, a one-cell notebook (`print(1)`) run by the runner's own function
           (runner/verdict.run_notebook: a kernel started, the cell run, the kernel shut
           down), wall seconds; the project root under /tmp, so it is hidden and bound
           again as with a real job.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jupyter_nbvalidation.runner.sandbox as sandbox  # noqa: E402
import jupyter_nbvalidation.runner.sandbox_probe as sandbox_probe  # noqa: E402
from jupyter_nbvalidation.runner.verdict import run_notebook  # noqa: E402


def figures(values: list[float]) -> str:
    return (f"median {statistics.median(values):.3f} s, min {min(values):.3f} s, "
            f"max {max(values):.3f} s (n={len(values)})")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    found = sandbox_probe.detect(sys.executable)
    print(f"sandbox: {json.dumps(found)}")
    if not found["available"]:
        raise SystemExit("the sandbox is not available here: nothing to compare")
    with tempfile.TemporaryDirectory(prefix="nbv-sandbox-bench-") as tmp:
        base = Path(tmp)
        root, data, home = base / "root", base / "data", base / "home"
        for d in (root / "proj", data / "jobs", home):
            d.mkdir(parents=True)
        nb = root / "proj" / "nb.ipynb"
        nb.write_text(json.dumps({"cells": [{"cell_type": "code", "id": "c0", "source": "print(1)", "metadata": {},
                                             "outputs": [], "execution_count": None}],
                                  "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
        hide = [str(data), str(home), os.path.expanduser("~")]
        config_file = base / "launcher.json"
        config_file.write_text(json.dumps({"mounts": sandbox.kernel_mounts(
            hide=hide, show=[str(root)], python=sys.executable, write=[str(root / "proj")], temp_dir=str(base))}))
        bare = [sys.executable, "-c", "pass"]
        wrapped = sandbox.wrap(bare, str(config_file))
        run_config = {"hide": hide, "show": [str(root)], "write": [str(root / "proj")]}

        launch: dict[str, list[float]] = {"without": [], "with": []}
        run: dict[str, list[float]] = {"without": [], "with": []}
        run_notebook(nb, cwd=str(root / "proj"), python=sys.executable, sandbox=run_config)  # warm-up, not counted
        for _ in range(args.rounds):
            for key, argv in (("without", bare), ("with", wrapped)):
                started = time.monotonic()
                subprocess.run(argv, check=True, cwd=str(root / "proj"))
                launch[key].append(time.monotonic() - started)
            for key, config in (("without", None), ("with", run_config)):
                started = time.monotonic()
                result = run_notebook(nb, cwd=str(root / "proj"), python=sys.executable, sandbox=config)
                run[key].append(time.monotonic() - started)
                assert result["verdict"] == "Succeeded", result
    for what, table in (("launcher (python -c pass)", launch), ("run (one-cell notebook)", run)):
        print(what)
        for key in ("without", "with"):
            print(f"  {key:7} sandbox: {figures(table[key])}")
        extra = statistics.median(table["with"]) - statistics.median(table["without"])
        print(f"  the sandbox adds {extra:+.3f} s (medians)")


if __name__ == "__main__":
    main()
