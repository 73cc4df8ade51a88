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

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _sandbox_bench import arguments, figures, project

import jupyter_nbvalidation.runner.sandbox as sandbox
import jupyter_nbvalidation.runner.sandbox_probe as sandbox_probe
from jupyter_nbvalidation.runner.verdict import run_notebook


def main() -> None:
    args = arguments(__doc__)
    found = sandbox_probe.detect(sys.executable)
    print(f"sandbox: {json.dumps(found)}")
    if not found["available"]:
        raise SystemExit("the sandbox is not available here: nothing to compare")
    with tempfile.TemporaryDirectory(prefix="nbv-sandbox-bench-") as tmp:
        p = project(Path(tmp))
        config_file = p.base / "launcher.json"
        config_file.write_text(json.dumps({"mounts": sandbox.kernel_mounts(
            hide=p.hide, show=[str(p.root)], python=sys.executable, write=[str(p.proj)], temp_dir=str(p.base))}))
        bare = [sys.executable, "-c", "pass"]
        wrapped = sandbox.wrap(bare, str(config_file))
        run_config = p.sandbox()

        launch: dict[str, list[float]] = {"without": [], "with": []}
        run: dict[str, list[float]] = {"without": [], "with": []}
        run_notebook(p.notebook, cwd=str(p.proj), python=sys.executable, sandbox=run_config)  # warm-up, not counted
        for _ in range(args.rounds):
            for key, argv in (("without", bare), ("with", wrapped)):
                started = time.monotonic()
                subprocess.run(argv, check=True, cwd=str(p.proj))
                launch[key].append(time.monotonic() - started)
            for key, config in (("without", None), ("with", run_config)):
                started = time.monotonic()
                result = run_notebook(p.notebook, cwd=str(p.proj), python=sys.executable, sandbox=config)
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
