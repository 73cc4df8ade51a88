"""Browser end-to-end tests of the JupyterLab frontend.

Runs ``labextension/ui-tests/`` (node's test runner + playwright-core driving
Debian's Chromium) against a real ``jupyter lab`` with the real server
extension and the local backend. It never skips: a missing browser, missing
``node_modules`` or an uninstalled labextension is a failure, so CI has to
provide them (``apt-get install -y chromium``; ``jlpm install`` and a build in
``labextension/``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LABEXT = ROOT / "labextension"
CHROMIUM = os.environ.get("NBV_CHROMIUM", "/usr/bin/chromium")
TIMEOUT = int(os.environ.get("NBV_E2E_TIMEOUT", "900"))


def _installed_labextension() -> Path | None:
    """The labextension JupyterLab will load from this interpreter's prefix."""
    from jupyter_core.paths import jupyter_path

    for base in jupyter_path("labextensions"):
        pkg = Path(base) / "jupyter-nbvalidation" / "package.json"
        if pkg.is_file():
            return pkg
    return None


@pytest.mark.browser
def test_lab_frontend_end_to_end() -> None:
    node = shutil.which("node")
    assert node, "node is not on PATH: install Node.js 20 to run the browser tests"
    assert Path(CHROMIUM).exists(), (
        f"{CHROMIUM} is missing: `apt-get install -y chromium` (or set NBV_CHROMIUM)"
    )
    assert (LABEXT / "node_modules" / "playwright-core").is_dir(), (
        "labextension/node_modules is missing: run `jlpm install` in labextension/"
    )
    pkg = _installed_labextension()
    assert pkg is not None, (
        "the jupyter-nbvalidation labextension is not installed: `pip install -e .` "
        "(builds it) or `jupyter labextension develop --overwrite .`"
    )
    assert "_build" in json.loads(pkg.read_text()).get("jupyterlab", {}), f"{pkg} is not a built labextension"
    jupyter = Path(sys.executable).with_name("jupyter")
    assert jupyter.exists(), f"no jupyter beside {sys.executable}"

    env = {**os.environ, "NBV_JUPYTER": str(jupyter), "NBV_CHROMIUM": CHROMIUM,
           "NBV_ARTIFACTS": str(ROOT / "test-artifacts")}
    env["PATH"] = f"{jupyter.parent}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run(
        [node, "--test", "--test-reporter=spec", "ui-tests/"],
        cwd=LABEXT, env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False,
    )
    print(proc.stdout[-30000:])
    if proc.stderr.strip():
        print(proc.stderr[-10000:], file=sys.stderr)
    assert proc.returncode == 0, (
        f"browser tests failed (exit {proc.returncode}); screenshots and lab.log in test-artifacts/\n"
        + proc.stdout[-6000:]
    )
