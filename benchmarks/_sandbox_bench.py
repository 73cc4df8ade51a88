"""What the sandbox benchmarks share (sandbox_start.py, netns_start.py, protections_cost.py): the
figures they print, their arguments, and a one-cell notebook in a project laid out as a real job's
(the project under /tmp, so it is hidden and bound again; a data dir and a HOME hidden)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def figures(values: list[float]) -> str:
    return (f"median {statistics.median(values):.3f} s, min {min(values):.3f} s, "
            f"max {max(values):.3f} s (n={len(values)})")


def arguments(doc: str | None, rounds: int = 10) -> argparse.Namespace:
    """``--rounds`` (the module's docstring as the help)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=rounds)
    return parser.parse_args()


def load() -> str:
    try:
        return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "load average unknown"


@dataclass
class Project:
    """A project root (``root``), its folder (``proj``) with ``nb.ipynb`` (``print(1)``), a data
    dir and a HOME (``hide``: what a real job's kernel must not see)."""

    base: Path
    root: Path
    proj: Path
    notebook: Path
    hide: list[str]

    def sandbox(self, **extra: object) -> dict[str, object]:
        """The runner's --sandbox config of a kernel working in ``proj`` (``extra``: network, scratch)."""
        return {"hide": self.hide, "show": [str(self.root)], "write": [str(self.proj)], **extra}


def project(base: Path) -> Project:
    root, data, home = base / "root", base / "data", base / "home"
    for d in (root / "proj", data / "jobs", home):
        d.mkdir(parents=True)
    nb = root / "proj" / "nb.ipynb"
    nb.write_text(json.dumps({"cells": [{"cell_type": "code", "id": "c0", "source": "print(1)", "metadata": {},
                                         "outputs": [], "execution_count": None}],
                              "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return Project(base, root, root / "proj", nb, [str(data), str(home), os.path.expanduser("~")])
