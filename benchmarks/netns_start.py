"""What one network per run (runner/netns.py) adds to the sandbox's start. Prints figures; not a test.

    .venv/bin/python benchmarks/netns_start.py [--rounds 10]

Three settings of the sandbox, alternating in one process on the same interpreter: the
host's network (LocalBackend.network host: the sandbox as before), a network namespace with
its loopback only (none), and the namespace with slirp4netns (auto where installed):

(launcher) `python -c pass` wrapped by the sandbox's launcher (a typical kernel's mounts),
           started and waited for, wall seconds (slirp4netns started, up, ended included);
(run)      after one warm-up run each, a one-cell notebook (`print(1)`) run by the runner's
           own function (runner/verdict.run_notebook), wall seconds.
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jupyter_nbvalidation.runner.netns as netns  # noqa: E402
import jupyter_nbvalidation.runner.sandbox as sandbox  # noqa: E402
from jupyter_nbvalidation.runner.verdict import run_notebook  # noqa: E402


def figures(values: list[float]) -> str:
    return (f"median {statistics.median(values):.3f} s, min {min(values):.3f} s, "
            f"max {max(values):.3f} s (n={len(values)})")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    tool = netns.find_tool()
    if tool is None:
        raise SystemExit("no slirp4netns here: nothing to compare")
    settings: dict[str, dict[str, Any] | None] = {"host": None, "none": {"mode": "none"},
                                                  tool["tool"]: {"mode": "user", **tool}}
    with tempfile.TemporaryDirectory(prefix="nbv-netns-bench-") as tmp:
        base = Path(tmp)
        root, data, home = base / "root", base / "data", base / "home"
        for d in (root / "proj", data / "jobs", home):
            d.mkdir(parents=True)
        nb = root / "proj" / "nb.ipynb"
        nb.write_text(json.dumps({"cells": [{"cell_type": "code", "id": "c0", "source": "print(1)", "metadata": {},
                                             "outputs": [], "execution_count": None}],
                                  "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
        hide = [str(data), str(home), os.path.expanduser("~")]
        mounts = sandbox.kernel_mounts(hide=hide, show=[str(root)], python=sys.executable,
                                       links=[str(root / "proj")], temp_dir=str(base))
        wrapped = {}
        for key, network in settings.items():
            config_file = base / f"launcher-{key}.json"
            config_file.write_text(json.dumps({"mounts": mounts, **({"network": network} if network else {})}))
            wrapped[key] = sandbox.wrap([sys.executable, "-c", "pass"], str(config_file))
        configs = {key: {"hide": hide, "show": [str(root)], "links": [str(root / "proj")],
                         **({"network": network} if network else {})} for key, network in settings.items()}
        for config in configs.values():  # warm-up, not counted
            run_notebook(nb, cwd=str(root / "proj"), python=sys.executable, sandbox=config)
        launch: dict[str, list[float]] = {key: [] for key in settings}
        run: dict[str, list[float]] = {key: [] for key in settings}
        for _ in range(args.rounds):
            for key, argv in wrapped.items():
                started = time.monotonic()
                subprocess.run(argv, check=True, cwd=str(root / "proj"))
                launch[key].append(time.monotonic() - started)
            for key, config in configs.items():
                started = time.monotonic()
                result = run_notebook(nb, cwd=str(root / "proj"), python=sys.executable, sandbox=config)
                run[key].append(time.monotonic() - started)
                assert result["verdict"] == "Succeeded", result
    for what, table in (("launcher (python -c pass)", launch), ("run (one-cell notebook)", run)):
        print(what)
        for key in settings:
            extra = statistics.median(table[key]) - statistics.median(table["host"])
            print(f"  network {key:12}: {figures(table[key])}; {extra:+.3f} s against host (medians)")


if __name__ == "__main__":
    main()
