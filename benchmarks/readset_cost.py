"""Issue 41: the cost of the read-set's audit hook in the kernel. Prints figures; not a test.

    .venv/bin/python benchmarks/readset_cost.py [--files 10000] [--rounds 5]

A folder of ``--files`` small files (32 bytes each) and a notebook whose one timed cell opens and
reads every one of them (``open(name).read()``, 10,000 ``open`` audit events), then lists the folder.
The runner (``python -m jupyter_nbvalidation.runner``, no sandbox) runs it ``--rounds`` times with
``--read-set`` (the hook installed in the kernel, the read-set hashed by the runner after the run) and
as often without, alternating (A B, then B A). Reported, as medians: the cell's own time (measured in
the kernel with ``time.perf_counter``: the hook's cost in the hot path) and the runner's whole wall
time (kernel start, the cells, collecting and hashing the read-set)."""

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

import nbformat

CELL = """import os, time
names = sorted(n for n in os.listdir('files'))
t = time.perf_counter()
for n in names:
    with open(os.path.join('files', n)) as f:
        f.read()
print('CELL', time.perf_counter() - t)
"""


def once(folder: Path, hook: bool) -> tuple[float, float, int]:
    """(the cell's seconds, the runner's wall seconds, files in the read-set)."""
    args = [sys.executable, "-m", "jupyter_nbvalidation.runner", str(folder / "nb.ipynb"),
            "--result", str(folder / "result.json"), "--executed", str(folder / "out.ipynb")]
    if hook:
        args += ["--read-set", str(folder)]
    started = time.monotonic()
    subprocess.run(args, check=True, capture_output=True, timeout=600)
    wall = time.monotonic() - started
    result = json.loads((folder / "result.json").read_text())
    assert result["verdict"] == "Succeeded", result["message"]
    executed = nbformat.read(folder / "out.ipynb", as_version=4)
    text = "".join(o.get("text", "") for o in executed.cells[0].outputs)
    cell = float(text.split("CELL")[1].split()[0])
    return cell, wall, len((result.get("readSet") or {}).get("files") or {})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=5)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nbv-readset-") as tmp:
        folder = Path(tmp)
        (folder / "files").mkdir()
        for i in range(opts.files):
            (folder / "files" / f"f{i:05d}.txt").write_text(f"{i:031d}\n")
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(CELL)]
        nbformat.write(nb, str(folder / "nb.ipynb"))
        figures: dict[bool, list[tuple[float, float, int]]] = {True: [], False: []}
        for r in range(opts.rounds):
            for hook in ((True, False) if r % 2 == 0 else (False, True)):
                figures[hook].append(once(folder, hook))
        for hook in (False, True):
            cells = [c for c, _, _ in figures[hook]]
            walls = [w for _, w, _ in figures[hook]]
            print(f"{'with the hook   ' if hook else 'without the hook'}: cell median {statistics.median(cells):.4f} s "
                  f"(min {min(cells):.4f}, max {max(cells):.4f}); runner wall median {statistics.median(walls):.2f} s; "
                  f"read-set files {figures[hook][0][2]}")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, {opts.files} files, {opts.rounds} rounds")


if __name__ == "__main__":
    main()
