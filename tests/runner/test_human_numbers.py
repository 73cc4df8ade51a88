"""People's cell numbers (JupyterLab's: index + 1) in messages and the CLI, the
whole error message, the user's own line and frames of a traceback — through the
real CLI (in-process engine, local backend, a real kernel)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from helpers import cli as run_cli
from helpers import write_notebook

from jupyter_nbvalidation.cli.render import failure_lines, progress_text
from jupyter_nbvalidation.runner.errors import traceback_details
from jupyter_nbvalidation.runner.text import cell_label

JUPYTER = shutil.which("jupyter", path=os.path.dirname(sys.executable)) or "jupyter"


def cli(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return run_cli(*args, "--data-dir", str(cwd / "data"), cwd=cwd, timeout=timeout, no_servers=True)


def test_cell_label():
    assert cell_label(0) == "cell 1" and cell_label(3) == "cell 4"


def test_failing_cell_is_numbered_as_jupyterlab_shows_it_with_the_users_line(tmp_path):
    # index 0 markdown, 1..3 code: JupyterLab's status bar says "Cell 4/4" on the failing cell
    # (the 2 s keep the run going long enough for `--wait` to see a progress line: a run
    # that ended between two of its looks printed none, and the test failed once)
    write_notebook(tmp_path / "nb.ipynb", ["# md\n# Load", "import json, time\ntime.sleep(2)", "text = '{bad'",
                                           "data = json.loads(text)\nprint('never')"])
    run = cli("submit", "nb.ipynb", "--wait", "--no-build", cwd=tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    out = run.stdout
    assert "Failed cell 4: JSONDecodeError: Expecting property name enclosed in double quotes" in out, out
    assert "at line 1 of the cell: data = json.loads(text)" in out, out  # the user's line, not json's own
    assert "library frame(s) not shown" in out
    assert "code cells done" in out  # the progress line while it ran
    assert "\x1b[" not in out

    name = json.loads(cli("list", "-o", "json", cwd=tmp_path).stdout)["items"][0]["metadata"]["name"]
    described = cli("describe", name, "-o", "json", cwd=tmp_path)
    st = json.loads(described.stdout)["job"]["status"]
    assert st["failedCellIndex"] == 3  # machine field: 0-based
    assert st["message"].startswith("Cell 4 raised JSONDecodeError: Expecting property name"), st["message"]
    r = st["results"][3]
    assert r["errorLine"] == "data = json.loads(text)" and r["errorLineNumber"] == 1
    frames = r["traceback"]
    assert r["cellFrames"] and all(frames[i].startswith("Cell In[") for i in r["cellFrames"])
    assert any("json" in f and "decoder.py" in f for f in frames)  # the library frames are kept, after
    assert not any("\x1b" in f for f in frames)
    assert st["results"][0].get("cellType") == "markdown"  # not a skipped code cell
    events = json.loads(cli("events", name, "-o", "json", cwd=tmp_path).stdout)["items"]
    assert any(e["note"].startswith("Cell 4 raised JSONDecodeError") for e in events)


def test_the_whole_multi_line_error_message_is_kept(tmp_path):
    write_notebook(tmp_path / "nb.ipynb", [
        "x = 1",
        "raise ValueError('\\n$\\\\tau$\\n^\\nParseException: Expected end of text, found \\'$\\'  (at char 0)')"])
    run = cli("submit", "nb.ipynb", "--wait", "--no-build", "-o", "json", cwd=tmp_path)
    assert run.returncode == 1, run.stderr
    st = json.loads(run.stdout)["status"]
    assert st["message"] == ("Cell 2 raised ValueError: $\\tau$\n^\n"
                             "ParseException: Expected end of text, found '$'  (at char 0)"), st["message"]
    text = "\n".join(failure_lines({"status": st}))
    assert "Failed cell 2: ValueError: $\\tau$" in text and "ParseException: Expected end of text" in text, text


def test_traceback_details_marks_the_cells_frames():
    frames = ["\x1b[0;31m---------\x1b[0m\n\x1b[0;31mKeyError\x1b[0m    Traceback (most recent call last)",
              "File /venv/lib/pandas/core/indexes/base.py:3805, in Index.get_loc(self, key)\n-> 3805 return x",
              "\nThe above exception was the direct cause of the following exception:\n",
              "Cell \x1b[0;32mIn[3], line 2\x1b[0m\n      1 df = load()\n\x1b[0;32m----> 2\x1b[0m margin "
              "\x1b[38;5;241m=\x1b[39m df[\"price\"] - df[\"cost\"]",
              "File /venv/lib/pandas/core/frame.py:4102, in DataFrame.__getitem__(self, key)",
              "\x1b[0;31mKeyError\x1b[0m: 'price'"]
    d = traceback_details(frames)
    assert d["cellFrames"] == [3]
    assert d["errorLine"] == 'margin = df["price"] - df["cost"]' and d["errorLineNumber"] == 2
    assert not any("\x1b" in f for f in d["traceback"])


def test_progress_text_numbers_cells_for_people():
    p = {"cellsTotal": 12, "cellsDone": 3, "currentCellIndex": 3,
         "currentCellStartedAt": "2026-01-01T00:00:00.000Z", "cells": []}
    now = 1767225603.2  # 3.2 s later
    assert progress_text(p, now) == "cell 4 running, 3.2 s · 3 of 12 code cells done"
