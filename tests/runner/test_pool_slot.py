"""The runner's pre-started mode (runner/pool.py, `--pool-slot`), driven as the local backend's
pool drives it: a real runner process and kernel (no sandbox here: the backend's tests cover it).
A slot that is discarded (stdin closed) or given arguments the runner refuses leaves nothing; one
that is taken runs the notebook in the folder it is bound to, as its first executions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from helpers import write_notebook

import jupyter_nbvalidation.runner.hygiene as hygiene
from jupyter_nbvalidation.runner.environment import RUN_ID_VAR
from jupyter_nbvalidation.runner.pool import PREFIX

PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])


def _slot(tmp_path: Path) -> tuple[subprocess.Popen, str, Path]:
    tree = tmp_path / "slot" / "tree"
    tree.mkdir(parents=True)
    (tmp_path / "slot.json").write_text(json.dumps({"python": sys.executable, "cwd": str(tree)}))
    run_id = uuid.uuid4().hex
    env = {**os.environ, RUN_ID_VAR: run_id, "PYTHONPATH": PACKAGE_PARENT}
    proc = subprocess.Popen([sys.executable, "-m", "jupyter_nbvalidation.runner", "--pool-slot",
                             str(tmp_path / "slot.json")], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env=env, cwd=tmp_path, start_new_session=True)
    assert proc.stdout.readline().decode().strip() == PREFIX + "ready"
    assert hygiene.find(run_id), "its kernel runs"
    return proc, run_id, tree


def _temp_dirs(run_id: str) -> list[str]:
    import tempfile

    return [p for p in os.listdir(tempfile.gettempdir()) if p.startswith("nbvalidation-")
            and run_id in (Path(tempfile.gettempdir(), p, "owner.json").read_text(errors="replace")
                           if Path(tempfile.gettempdir(), p, "owner.json").is_file() else "")]


def test_a_discarded_slot_leaves_nothing(tmp_path):
    proc, run_id, _tree = _slot(tmp_path)
    proc.stdin.close()
    assert proc.wait(60) == 0
    assert hygiene.find(run_id) == [] and _temp_dirs(run_id) == []


def test_refused_arguments_leave_nothing(tmp_path):
    proc, run_id, tree = _slot(tmp_path)
    go = {"argv": [str(tmp_path / "missing.ipynb"), "--result", str(tmp_path / "result.json"), "--executed",
                   str(tmp_path / "executed.ipynb"), "--cell-timeout", "soon"], "cwd": str(tree),
          "log": str(tmp_path / "runner.log")}
    proc.stdin.write((json.dumps(go) + "\n").encode())
    proc.stdin.flush()
    assert proc.stdout.readline().decode().strip() == PREFIX + "bound"
    assert proc.wait(60) == 2
    assert json.loads((tmp_path / "result.json").read_text())["reason"] == "RunnerError"
    assert hygiene.find(run_id) == [] and _temp_dirs(run_id) == []


@pytest.mark.parametrize("sub", ["", "nested/folder"])
def test_a_taken_slot_runs_the_notebook_in_the_folder_it_is_bound_to(tmp_path, sub):
    proc, run_id, tree = _slot(tmp_path)
    cwd = tree / sub if sub else tree
    cwd.mkdir(parents=True, exist_ok=True)
    (cwd / "data.txt").write_text("the run's copy\n")
    write_notebook(tmp_path / "nb.ipynb", ["import os\nprint(os.getcwd())\nprint(open('data.txt').read())",
                                           "print(_dh)"])
    go = {"argv": [str(tmp_path / "nb.ipynb"), "--result", str(tmp_path / "result.json"), "--executed",
                   str(tmp_path / "executed.ipynb"), "--cwd", str(cwd), "--python", sys.executable],
          "cwd": str(cwd), "log": str(tmp_path / "runner.log")}
    proc.stdin.write((json.dumps(go) + "\n").encode())
    proc.stdin.close()  # as the pool does once bound: the run does not depend on it
    assert proc.stdout.readline().decode().strip() == PREFIX + "bound"
    assert proc.wait(120) == 0, (tmp_path / "runner.log").read_text()[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["verdict"] == "Succeeded", result
    executed = json.loads((tmp_path / "executed.ipynb").read_text())
    assert [c["execution_count"] for c in executed["cells"]] == [1, 2]
    out = "".join("".join(o.get("text", "")) for c in executed["cells"] for o in c["outputs"])
    assert f"{cwd}\nthe run's copy\n" in out and f"PosixPath('{cwd}')" in out, out
    assert hygiene.find(run_id) == [] and _temp_dirs(run_id) == []
