"""Issue 41: the peak memory of a run whose cell outputs 200 MB. Prints figures; not a test.

    .venv/bin/python benchmarks/big_output.py [--mb 200] [--nbmake-python PYTHON] [--only stream,display]

One-cell notebooks: **stream** ``print("x" * N)``, **display** ``display({"text/plain": "x" * N},
raw=True)`` (N = ``--mb`` million bytes), **pieces** the same bytes printed 100 kB at a time, and
**stream+golden** ``print("x" * N)`` compared with a golden notebook whose cell printed ``x`` (the
runner keeps the cell's whole output for the comparison; nbmake compares nothing). Each runs under the runner (``python -m
jupyter_nbvalidation.runner NB --result … --executed …``, no sandbox, the default output budget)
and under ``pytest -p nbmake --nbmake NB`` (``--nbmake-python``: an interpreter with nbmake; it runs
its own kernel from that interpreter), one after the other in the same run. A thread reads
``VmHWM`` (the peak resident set) from ``/proc/PID/status`` of the process and of every process
below it every 10 ms; the kernel is the one whose command line holds ``ipykernel_launcher``, the
runner (resp. pytest) the top process. VmHWM only grows, so the last reading before a process ends
is its peak. Printed: each process's peak in MiB, and ours ÷ nbmake's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

CELLS = {
    "stream": 'print("x" * {n})',
    "display": 'from IPython.display import display\ndisplay({{"text/plain": "x" * {n}}}, raw=True)',
    "pieces": 'for i in range({n} // 100_000):\n    print("x" * 99_999, flush=True)',
    "stream+golden": 'print("x" * {n})',
}


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(name))
    return tree


def _hwm_kib(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def peaks(argv: list[str], cwd: Path) -> tuple[int, int, int]:
    """(exit status, the top process's peak MiB, the kernel's peak MiB)."""
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen: dict[int, int] = {}
    kernels: set[int] = set()
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            tree = _children()
            todo = [proc.pid]
            while todo:
                pid = todo.pop()
                hwm = _hwm_kib(pid)
                if hwm is not None:
                    seen[pid] = max(seen.get(pid, 0), hwm)
                    if pid not in kernels and "ipykernel_launcher" in _cmdline(pid):
                        kernels.add(pid)
                todo += tree.get(pid, [])
            done.wait(0.01)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    _, err = proc.communicate(timeout=900)
    done.set()
    thread.join()
    if proc.returncode not in (0, 1):
        sys.stderr.write(err.decode(errors="replace")[-2000:])
    kernel = max((seen.get(pid, 0) for pid in kernels), default=0)
    return proc.returncode, seen.get(proc.pid, 0) // 1024, kernel // 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--nbmake-python", default=sys.executable, help="an interpreter with nbmake installed")
    parser.add_argument("--only", default="stream,display,pieces,stream+golden")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nbv-bigout-") as tmp:
        folder = Path(tmp)
        rows = []
        for kind in opts.only.split(","):
            nb = folder / f"{kind}.ipynb"
            source = CELLS[kind].format(n=opts.mb * 1_000_000)
            nb.write_text(json.dumps({"cells": [{"cell_type": "code", "execution_count": None, "id": "c0",
                                                  "metadata": {}, "outputs": [], "source": source}],
                                      "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                                  "language": "python"}},
                                      "nbformat": 4, "nbformat_minor": 5}))
            ours_argv = [sys.executable, "-m", "jupyter_nbvalidation.runner", str(nb),
                         "--result", str(folder / "result.json"), "--executed", str(folder / "out.ipynb")]
            if kind.endswith("+golden"):
                golden = json.loads(nb.read_text())
                golden["cells"][0].update(execution_count=1, outputs=[{"output_type": "stream", "name": "stdout",
                                                                       "text": "x\n"}])
                (folder / "golden.ipynb").write_text(json.dumps(golden))
                ours_argv += ["--golden", str(folder / "golden.ipynb")]
            started = time.monotonic()
            status, runner, kernel = peaks(ours_argv, folder)
            ours_wall = time.monotonic() - started
            result = json.loads((folder / "result.json").read_text())
            theirs_argv = [opts.nbmake_python, "-m", "pytest", "-p", "nbmake", "--nbmake", "-q",
                           "-p", "no:cacheprovider", str(nb)]
            env_before = os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
            os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
            try:
                started = time.monotonic()
                their_status, pytest_peak, their_kernel = peaks(theirs_argv, folder)
                their_wall = time.monotonic() - started
            finally:
                if env_before is None:
                    os.environ.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)
                else:
                    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = env_before
            executed_mib = (folder / "out.ipynb").stat().st_size / 2**20
            rows.append((kind, result["verdict"], status, runner, kernel, ours_wall, executed_mib,
                         their_status, pytest_peak, their_kernel, their_wall))
    print(f"{opts.mb} MB of output in one cell; peak RSS (VmHWM) in MiB")
    print("| output | runner | its kernel | nbmake's pytest | its kernel | runner ÷ pytest | kernel ÷ kernel "
          "| wall (ours / nbmake) | verdict, executed notebook |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (kind, verdict, status, runner, kernel, wall, executed_mib, their_status, pytest_peak, their_kernel,
         their_wall) in rows:
        print(f"| {kind} | {runner} | {kernel} | {pytest_peak} | {their_kernel} | "
              f"{runner / max(pytest_peak, 1):.2f} | {kernel / max(their_kernel, 1):.2f} | "
              f"{wall:.1f} s / {their_wall:.1f} s | {verdict} (exit {status}), {executed_mib:.1f} MiB; "
              f"nbmake exit {their_status} |")


if __name__ == "__main__":
    main()
