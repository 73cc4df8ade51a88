"""Verdicts to trust from the runner itself, through its real command line on real
kernels: a saved validate cell, an unknown kernel name, nbval's legacy markers,
everything a run starts ends with it, and the termination log written in place."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from helpers import stdout, wait, write_golden, write_notebook

import jupyter_nbvalidation.runner.hygiene as hygiene
from jupyter_nbvalidation.runner.protocol import parse_log, termination_summary, write_termination_log

FIXTURES = Path(__file__).parents[1] / "notebooks" / "runner"
# the peer corpus lives beside the checkout (…/shared/corpus), also for a worktree deeper down
CORPUS = next((p / "shared" / "corpus" for p in Path(__file__).resolve().parents if (p / "shared" / "corpus").is_dir()),
              Path(__file__).resolve().parents[2].parent / "shared" / "corpus")


def run_runner(tmp_path: Path, notebook: Path, *args: str, env: dict | None = None, timeout: float = 180):
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "jupyter_nbvalidation.runner", str(notebook),
            "--result", str(out / "result.json"), "--executed", str(out / "executed.ipynb"), *args]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                          env=env)
    result, _ = parse_log(proc.stdout)
    assert result is not None, proc.stdout + proc.stderr
    executed = nbformat.read(out / "executed.ipynb", as_version=4) if (out / "executed.ipynb").exists() else None
    return proc, result, executed


def alive(pid: int) -> bool:
    """Running (a zombie is dead: it only waits for its parent to reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# --- a saved validate cell ---------------------------------------------------------


def test_saved_validate_cell_is_skipped_not_failed(tmp_path):
    nb = tmp_path / "validate_cell.ipynb"
    shutil.copyfile(FIXTURES / "validate_cell.ipynb", nb)
    proc, result, executed = run_runner(tmp_path, nb, "--golden", str(nb))
    assert proc.returncode == 0, result["message"]
    assert result["verdict"] == "Succeeded" and "1 validate cell skipped" in result["message"]
    by_index = {r["cellIndex"]: r for r in result["results"]}
    assert by_index[1]["status"] == "Skipped" and "validate cell" in by_index[1]["skipReason"]
    assert by_index[2]["status"] == "Success" and by_index[3]["status"] == "Success"
    # the mixed cell ran without its %nbvalidate line; its source is kept as written
    assert executed.cells[3].source == nbformat.read(nb, as_version=4).cells[3].source
    assert "".join(o.get("text", "") for o in executed.cells[3].outputs) == "after 45\n"
    # validate cells' golden outputs (the magic's own report) are not compared; the rest is
    cmp_ = result["comparisonResult"]
    assert cmp_["result"] == "matched" and cmp_["matchedCells"] == 1 and cmp_["skippedCells"] == 2


# --- an unknown kernel ---------------------------------------------------------------


@pytest.mark.parametrize("kernelspec, noted", [
    ({"name": "mystery-kernel", "display_name": "Mystery"}, True),
    ({"name": "mystery-kernel", "display_name": "Mystery", "language": "python"}, False),
    ({"name": "python3", "display_name": "Python 3"}, False),
])
def test_unknown_kernel_without_language_is_validated_with_python_and_says_so(tmp_path, kernelspec, noted):
    nb = write_notebook(tmp_path / "nb.ipynb", ["import sys\nprint(sys.version_info[0])"],
                        metadata={"kernelspec": kernelspec})
    proc, result, _ = run_runner(tmp_path, nb)
    assert proc.returncode == 0 and result["verdict"] == "Succeeded"
    said = "'mystery-kernel', which is not known here, and declares no language: validated with Python"
    assert (said in result["message"]) is noted, result["message"]
    # a kernel of its own, language python: substituted, and said (issue 21)
    substituted = "kernel 'mystery-kernel' is not installed here; ran with python3, the notebook's language"
    assert (substituted in result["message"]) is (kernelspec.get("language") == "python"), result["message"]


@pytest.mark.parametrize("kernelspec, said", [
    ({"name": "conda-env-sympy-py", "display_name": "Python [conda env:sympy]", "language": "python"},
     "kernel 'conda-env-sympy-py' is not installed here; ran with python3, the notebook's language"),
    ({"name": "mystery-kernel"}, "'mystery-kernel', which is not known here, and declares no language"),
    ({"name": "python3", "language": "python"}, None),
    ({"name": "ipython3"}, None),
    ({"name": "Python3.11", "language": "python"}, None),
])
def test_a_substituted_kernel_is_stated(kernelspec, said):
    """No kernel is started: the note the verdict message carries (success or failure, runner/verdict.py)."""
    from jupyter_nbvalidation.runner.verdict import kernel_note

    note = kernel_note({"metadata": {"kernelspec": kernelspec}})
    assert (note is None) if said is None else (note is not None and said in note), note


# --- nbval's legacy markers ----------------------------------------------------------


def test_legacy_pytest_validate_markers_act_like_their_nbval_twins(tmp_path):
    path = write_notebook(tmp_path / "legacy.ipynb", ["# PYTEST_VALIDATE_IGNORE_OUTPUT\nimport uuid\nprint(uuid.uuid4().hex)",
                                                      "# PYTEST_VALIDATE_SKIP\nraise SystemExit('must not run')", "print(2)"])
    write_golden(path, {0: stdout("not the same\n"), 2: stdout("2\n")}, path, counts=True)
    proc, result, _ = run_runner(tmp_path, path, "--golden", str(path))
    assert proc.returncode == 0, result["message"]
    assert [r["status"] for r in result["results"]] == ["Success", "Skipped", "Success"]
    assert result["comparisonResult"]["matchedCells"] == 1


def test_nbval_sample_notebook_in_place(tmp_path):
    """nbval's own sample notebook (legacy PYTEST_VALIDATE_IGNORE_OUTPUT on a
    datetime.now() cell), with the options its CI uses, in the corpus folder."""
    folder = CORPUS / "notebooks" / "nbval-deps"
    nb = folder / "sample_notebook.ipynb"
    assert nb.is_file(), f"the peer corpus is missing: {nb}"
    env_dir = tmp_path / "venv"
    uv = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(env_dir)], check=True, capture_output=True)
    subprocess.run([uv, "pip", "install", "-q", "--python", str(env_dir / "bin" / "python"), "ipykernel",
                    "matplotlib"], check=True, capture_output=True, timeout=600)
    proc, result, _ = run_runner(
        tmp_path, nb, "--golden", str(nb), "--python", str(env_dir / "bin" / "python"), "--cwd", str(tmp_path),
        "--ignore-output-type=image/png", r"--timestamp-pattern=Figure size \d+x\d+")
    assert proc.returncode == 0, result["message"]
    assert result["results"][5]["status"] == "Success"  # the legacy-marked cell ran, its output not compared


# --- everything a run starts ends with it ------------------------------------------------

DAEMONS = r'''
import os, subprocess, sys, time
PIDS = {pids!r}
d = subprocess.Popen(["sleep", "600"], start_new_session=True)
with open(PIDS, "a") as f:
    f.write(f"{{d.pid}}\n")
code = ("import os, sys, time\nif os.fork(): os._exit(0)\nos.setsid()\nif os.fork(): os._exit(0)\n"
        "open(sys.argv[1], 'a').write(f'{{os.getpid()}}\\n')\ntime.sleep(600)")
subprocess.run([sys.executable, "-c", code, PIDS], check=True)
while len(open(PIDS).read().split()) < 2:
    time.sleep(0.05)
print("daemons started")
'''


@pytest.fixture
def pid_file(tmp_path):
    path = tmp_path / "pids.txt"
    path.write_text("")
    yield path
    for pid in map(int, path.read_text().split()):  # never leak, whatever the test found
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_setsid_and_double_forked_daemons_end_with_the_run(tmp_path, pid_file):
    nb = write_notebook(tmp_path / "nb.ipynb", [DAEMONS.format(pids=str(pid_file)), "print('done')"])
    tmp = tmp_path / "t"
    tmp.mkdir()
    proc, result, _ = run_runner(tmp_path, nb, env={**os.environ, "TMPDIR": str(tmp)})
    assert proc.returncode == 0, result["message"]
    pids = list(map(int, pid_file.read_text().split()))
    assert len(pids) == 2
    assert [p for p in pids if alive(p)] == []
    assert result["runner"]["processesStopped"] >= 2
    assert list(tmp.iterdir()) == []  # the runner's temp folder (the kernel's key) went with it


def test_a_killed_runners_leftovers_are_swept_at_backend_start(tmp_path, pid_file, monkeypatch):
    import asyncio
    import tempfile

    from jupyter_nbvalidation.backends.local import LocalBackend

    tmp = tmp_path / "t"
    tmp.mkdir()
    run_id = "sweep-test-" + os.urandom(4).hex()
    nb = write_notebook(tmp_path / "nb.ipynb", [DAEMONS.format(pids=str(pid_file)), "import time\ntime.sleep(600)"])
    env = {**os.environ, "TMPDIR": str(tmp), hygiene.RUN_ID_VAR: run_id}
    out = tmp_path / "out"
    runner = subprocess.Popen([sys.executable, "-m", "jupyter_nbvalidation.runner", str(nb), "--result",
                               str(out / "r.json"), "--executed", str(out / "x.ipynb")], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        def daemons_started() -> bool:
            assert runner.poll() is None, "the notebook did not start its daemons"
            return len(pid_file.read_text().split()) >= 2

        wait(daemons_started, 120, "the notebook to start its daemons", interval=0.1)
        folders = list(tmp.glob("nbvalidation-*"))
        assert len(folders) == 1 and json.loads((folders[0] / "owner.json").read_text())["runId"] == run_id
        assert (folders[0] / "connection.json").exists()  # the kernel's key
        # a live owner's folder and a dead-owner folder whose pid was reused are told apart
        live = tmp / "nbvalidation-live"
        live.mkdir()
        (live / "owner.json").write_text(json.dumps({"pid": os.getpid(), "startTime": hygiene.start_time(os.getpid()),
                                                     "runId": "live"}))
        reused = tmp / "nbvalidation-reused"
        reused.mkdir()
        (reused / "owner.json").write_text(json.dumps({"pid": os.getpid(), "startTime": 1, "runId": "gone"}))

        os.killpg(runner.pid, signal.SIGKILL)  # a crash: no clean-up runs
        runner.wait(30)
        left = hygiene.find(run_id)
        assert left and all(alive(p) for p in map(int, pid_file.read_text().split()))  # the kernel and daemons

        monkeypatch.setattr(tempfile, "tempdir", str(tmp))
        backend = LocalBackend(data_dir=str(tmp_path / "data"))

        async def start_stop():
            await backend.start(lambda name: None)
            await backend.stop()

        asyncio.run(start_stop())
        assert not folders[0].exists() and not reused.exists()
        assert live.exists()
        assert hygiene.find(run_id) == []
        assert [p for p in map(int, pid_file.read_text().split()) if alive(p)] == []
    finally:  # never leak, whatever the test found
        if runner.poll() is None:
            runner.kill()
        hygiene.kill_all(run_id)


# --- the termination log -------------------------------------------------------------------


def test_termination_log_is_written_in_place(tmp_path):
    """As the kubelet's /dev/termination-log: an existing file written through
    (same inode, truncated), never replaced by a rename; also through a symlink."""
    target = tmp_path / "termination-log"
    target.write_text("x" * 10000)
    link = tmp_path / "link"
    link.symlink_to(target)
    inode = target.stat().st_ino
    result = {"verdict": "Failed", "reason": "CellExecutionFailed", "message": "Cell 1 raised ZeroDivisionError",
              "failedCellIndex": 1, "results": [{"cellIndex": 1, "status": "Failure", "errorName": "ZeroDivisionError"}]}
    write_termination_log(link, result)
    assert link.is_symlink() and target.stat().st_ino == inode
    assert target.read_text() == termination_summary(result)
    write_termination_log(target, {**result, "message": "short"})
    assert target.stat().st_ino == inode and json.loads(target.read_text())["message"] == "short"


def test_termination_log_in_a_read_only_folder(tmp_path):
    """The folder of the log is not writable (``/dev`` in a Pod): a rename could
    not work, writing in place does. Checked as a user other than root."""
    import tempfile

    base = Path(tempfile.mkdtemp())  # pytest's own tmp folders are private to root
    os.chmod(base, 0o755)
    folder = base / "dev"
    folder.mkdir()
    log = folder / "termination-log"
    log.write_text("")
    os.chmod(log, 0o666)
    os.chmod(folder, 0o555)
    code = ("import sys; from jupyter_nbvalidation.runner.protocol import write_termination_log;"
            "write_termination_log(sys.argv[1], {'verdict': 'Succeeded', 'reason': 'ValidationSucceeded'})")
    # the package as a copy nobody can read: the checkout may lie in a folder only its owner
    # passes (a clone under HOME)
    package = Path(__file__).resolve().parents[2] / "jupyter_nbvalidation"
    shutil.copytree(package, base / "site" / "jupyter_nbvalidation",
                    ignore=shutil.ignore_patterns("__pycache__", "labextension"))
    argv = [sys.executable, "-c", code, str(log)]
    if os.geteuid() == 0:  # root ignores the folder's mode: run as nobody
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PYTHONPATH": str(base / "site")})
        assert proc.returncode == 0 and "cannot write" not in proc.stderr, proc.stderr
        assert json.loads(log.read_text())["verdict"] == "Succeeded"
    finally:
        os.chmod(folder, 0o755)
        shutil.rmtree(base)
