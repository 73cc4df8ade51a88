"""``runtime.txt`` beside the environment's file: repo2docker's ``python-3.X[.Y]``, the
Python version the repository asks for (before what the file itself asks)."""

from __future__ import annotations

import os
import re

from jupyter_nbvalidation.environment.reading import FIELD, RequirementsError, bounded, read_text, rel


class RuntimeTxt:
    """repo2docker's runtime.txt: the Python version, nothing to install."""

    name = "runtime.txt"

    def detect(self, folder: str) -> str | None:
        """Its path in ``folder`` (None: none there)."""
        path = os.path.join(folder, self.name)
        return path if os.path.lexists(path) else None

    def python(self, path: str, root: str) -> tuple[str, str]:
        """(PEP 440 specifier, where). Raises :class:`RequirementsError` for a runtime.txt
        that names no Python version (repo2docker's R runtimes included: not available here)."""
        shown = rel(path, os.path.realpath(root))
        text = read_text(path, root, f"runtime.txt ({shown})").strip()
        m = re.fullmatch(r"python-(\d+)\.(\d+)(?:\.(\d+))?", text)
        if m is None:
            raise RequirementsError(FIELD, bounded(f"runtime.txt ({shown}): {text[:80]!r} names no Python version "
                                                   "this tool can use (expected python-3.X or python-3.X.Y)"))
        spec = f"=={m.group(1)}.{m.group(2)}" + (f".{m.group(3)}" if m.group(3) else ".*")
        return spec, f"runtime.txt ({shown})"
