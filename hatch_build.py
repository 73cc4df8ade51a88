"""A build hook run before the JupyterLab extension's build (hatch-jupyter-builder):
a source checkout without the prebuilt extension needs Node.js to build it; without
Node.js, say so in one line instead of the builder's long traceback."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

PREBUILT = "jupyter_nbvalidation/labextension/static/style.js"
MESSAGE = ("jupyter-nbvalidation: building the JupyterLab extension from source needs Node.js (>= 18) on PATH, "
           "and none was found. Install Node.js (https://nodejs.org), or install a release wheel, which carries "
           "the prebuilt extension.\n")


def missing_node(root: str | Path) -> bool:
    """Whether a build from ``root`` would need Node.js and it is not on PATH."""
    return not (Path(root) / PREBUILT).exists() and shutil.which("node") is None


class NodeCheckHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        if missing_node(self.root):
            sys.stderr.write(MESSAGE)
            sys.stderr.flush()
            raise SystemExit(1)
