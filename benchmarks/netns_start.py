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

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _sandbox_bench import arguments, figures, project

import jupyter_nbvalidation.runner.netns as netns
import jupyter_nbvalidation.runner.sandbox as sandbox
from jupyter_nbvalidation.runner.verdict import run_notebook


def main() -> None:
    args = arguments(__doc__)
    tool = netns.find_tool()
    if tool is None:
        raise SystemExit("no slirp4netns here: nothing to compare")
    settings: dict[str, dict[str, Any] | None] = {"host": None, "none": {"mode": "none"},
                                                  tool["tool"]: {"mode": "user", **tool}}
    with tempfile.TemporaryDirectory(prefix="nbv-netns-bench-") as tmp:
        p = project(Path(tmp))
        mounts = sandbox.kernel_mounts(hide=p.hide, show=[str(p.root)], python=sys.executable,
                                       write=[str(p.proj)], temp_dir=str(p.base))
        wrapped = {}
        for key, network in settings.items():
            config_file = p.base / f"launcher-{key}.json"
            config_file.write_text(json.dumps({"mounts": mounts, **({"network": network} if network else {})}))
            wrapped[key] = sandbox.wrap([sys.executable, "-c", "pass"], str(config_file))
        configs = {key: p.sandbox(**({"network": network} if network else {})) for key, network in settings.items()}
        for config in configs.values():  # warm-up, not counted
            run_notebook(p.notebook, cwd=str(p.proj), python=sys.executable, sandbox=config)
        launch: dict[str, list[float]] = {key: [] for key in settings}
        run: dict[str, list[float]] = {key: [] for key in settings}
        for _ in range(args.rounds):
            for key, argv in wrapped.items():
                started = time.monotonic()
                subprocess.run(argv, check=True, cwd=str(p.proj))
                launch[key].append(time.monotonic() - started)
            for key, config in configs.items():
                started = time.monotonic()
                result = run_notebook(p.notebook, cwd=str(p.proj), python=sys.executable, sandbox=config)
                run[key].append(time.monotonic() - started)
                assert result["verdict"] == "Succeeded", result
    for what, table in (("launcher (python -c pass)", launch), ("run (one-cell notebook)", run)):
        print(what)
        for key in settings:
            extra = statistics.median(table[key]) - statistics.median(table["host"])
            print(f"  network {key:12}: {figures(table[key])}; {extra:+.3f} s against host (medians)")


if __name__ == "__main__":
    main()
