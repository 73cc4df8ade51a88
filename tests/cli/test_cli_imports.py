"""The CLI's own costs: `jupyter nbvalidation submit --wait` must not pay for
imports it does not use (jupyter_server's server application, jupyter_events, the
``rfc3987_syntax`` grammar jsonschema builds at import time: seconds of CPU), while
bad notebooks are still rejected at submit with exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import write_notebook

# rfc3987_syntax's grammar is built by its syntax_helpers (the package itself may be the stand-in
# of jupyter_nbvalidation.core.deferred_imports, which builds nothing until a check needs it)
SLOW = ["rfc3987_syntax.syntax_helpers", "lark", "jupyter_server.serverapp", "jupyter_events"]

# the console script's path: main() with no argv, as `jupyter-nbvalidation ...` calls it
PROGRAM = (
    "import json, sys\n"
    "watch = json.loads(sys.argv[2])\n"
    "sys.argv = ['jupyter-nbvalidation'] + json.loads(sys.argv[1])\n"
    "from jupyter_nbvalidation.cli.main import main\n"
    "code = main()\n"
    "loaded = [m for m in watch if sys.modules.get(m) is not None]\n"
    "print('LOADED ' + json.dumps(loaded))\n"
    "sys.exit(code)\n"
)


def run_cli(args: list[str], *, cwd: Path, watch: list[str], tmp_path: Path) -> tuple[subprocess.CompletedProcess, list]:
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    proc = subprocess.run([sys.executable, "-c", PROGRAM, json.dumps(args), json.dumps(watch)], cwd=cwd,
                          capture_output=True, text=True, timeout=300, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("LOADED ")]
    assert lines, proc.stdout + proc.stderr
    return proc, json.loads(lines[-1][len("LOADED "):])


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "root"
    write_notebook(root / "ok.ipynb", ["import sys", "print(sys.version_info[0])"])
    # valid JSON, invalid notebook: a code cell without "source" (the nbformat schema rejects it)
    nb = json.loads((root / "ok.ipynb").read_text())
    del nb["cells"][0]["source"]
    (root / "invalid.ipynb").write_text(json.dumps(nb))
    # a runtime dir with a stale server file: discovery reads it and skips it, as jupyter_server does
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    (runtime / "jpserver-999999999.json").write_text(json.dumps({"pid": 999999999, "url": "http://127.0.0.1:1/",
                                                                   "root_dir": str(root)}))
    return root


def test_submit_wait_skips_slow_imports_and_still_validates(folder, tmp_path):
    data = ["--data-dir", str(tmp_path / "data")]
    ok, loaded = run_cli(["submit", "ok.ipynb", "--wait", "--no-build", *data], cwd=folder, watch=SLOW,
                         tmp_path=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "Succeeded" in ok.stdout
    assert loaded == [], f"the CLI imported {loaded}"

    many, loaded = run_cli(["run", "ok.ipynb", "-j", "2", "--no-build", *data], cwd=folder, watch=SLOW,
                           tmp_path=tmp_path)
    assert many.returncode == 0, many.stdout + many.stderr
    assert loaded == [], f"`run` imported {loaded}"

    bad, loaded = run_cli(["submit", "invalid.ipynb", "--wait", "--no-build", *data], cwd=folder,
                          watch=SLOW, tmp_path=tmp_path)
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert "not a valid notebook" in bad.stderr and "source" in bad.stderr, bad.stderr
    assert loaded == [], f"the CLI imported {loaded}"


def test_list_does_not_import_nbformat(folder, tmp_path):
    listed, loaded = run_cli(["list", "--data-dir", str(tmp_path / "data")], cwd=folder,
                             watch=SLOW + ["nbformat", "jsonschema"], tmp_path=tmp_path)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert loaded == [], f"`list` imported {loaded}"


def test_cli_runs_kernels_at_its_own_priority(tmp_path):
    """Without a server there is nothing to keep responsive: the CLI's kernel runs at the
    CLI's own nice level (a server's backend lowers it by LocalBackend.niceness)."""
    root = tmp_path / "root"
    write_notebook(root / "nice.ipynb", [f"import os\nassert os.nice(0) == {os.nice(0)}, os.nice(0)"])
    proc, _ = run_cli(["submit", "nice.ipynb", "--wait", "--no-build", "--data-dir", str(tmp_path / "data")],
                      cwd=root, watch=[], tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
