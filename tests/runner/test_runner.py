"""The notebook runner, through its real command line, on real kernels.

Every test starts ``python -m jupyter_nbvalidation.runner`` as a subprocess, as
the local backend and the Kubernetes Pod do. Nothing is mocked.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
from helpers import leftover_processes, wait

import jupyter_nbvalidation.runner as runner

FIXTURES = Path(__file__).parents[1] / "notebooks" / "runner"
RESULT_PREFIX = "NBVALIDATION-RESULT "
PROGRESS_PREFIX = "NBVALIDATION-PROGRESS "
EXECUTION_TIME = re.compile(r"^\d+\.\d{3}s$")


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    result: dict | None
    line_result: dict | None
    progress: list[dict]
    executed: nbformat.NotebookNode | None
    notebook: Path
    elapsed: float


def sandbox_args(tmp_path: Path, sandbox: bool) -> list[str]:
    """``--sandbox FILE`` (runner/sandbox.py, as the local backend passes it) when ``sandbox``."""
    if not sandbox:
        return []
    (tmp_path / "private").mkdir(exist_ok=True)
    config = tmp_path / "sandbox.json"
    config.write_text(json.dumps({"hide": [str(tmp_path / "private")], "show": [], "write": []}))
    return ["--sandbox", str(config)]


def run_cli(tmp_path: Path, fixture: str | Path, *args: str, extra_files=(), timeout: float = 120,
            sandbox: bool = False) -> Run:
    """Copy ``fixture`` (and ``extra_files``) to a fresh folder and run the runner on it
    (``sandbox``: its kernel in the sandbox)."""
    folder = tmp_path / "nb"
    folder.mkdir(exist_ok=True)
    source = fixture if isinstance(fixture, Path) else FIXTURES / fixture
    notebook = folder / source.name
    shutil.copyfile(source, notebook)
    for name in extra_files:
        shutil.copyfile(FIXTURES / name, folder / name)
    out = tmp_path / "out"
    result_path, executed_path = out / "result.json", out / "executed.ipynb"
    argv = [sys.executable, "-m", "jupyter_nbvalidation.runner", str(notebook),
            "--result", str(result_path), "--executed", str(executed_path), *args, *sandbox_args(tmp_path, sandbox)]
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    elapsed = time.monotonic() - started
    lines = proc.stdout.splitlines()
    assert lines, f"no stdout; stderr:\n{proc.stderr}"
    assert lines[-1].startswith(RESULT_PREFIX), f"last stdout line is not the result: {lines[-1]!r}\n{proc.stderr}"
    records = [json.loads(line[len(PROGRESS_PREFIX):]) for line in lines if line.startswith(PROGRESS_PREFIX)]
    progress = [r for r in records if r.get("event") == "end"]  # the cells' end records (plan/start besides)
    return Run(
        returncode=proc.returncode,
        stdout=proc.stdout,
        stderr=proc.stderr,
        result=json.loads(result_path.read_text()) if result_path.exists() else None,
        line_result=json.loads(lines[-1][len(RESULT_PREFIX):]),
        progress=progress,
        executed=nbformat.read(executed_path, as_version=4) if executed_path.exists() else None,
        notebook=notebook,
        elapsed=elapsed,
    )


def statuses(run: Run) -> list[str]:
    return [r["status"] for r in run.result["results"]]


def stdout_of(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")


def process_gone(pid: int, timeout: float = 5.0) -> bool:
    """True when ``pid`` no longer runs (a zombie waiting for a reaper counts as gone) within
    ``timeout`` s (polled through helpers.wait)."""
    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
        except (OSError, IndexError):
            return True

    try:
        return bool(wait(gone, timeout, f"process {pid} to end", interval=0.1))
    except AssertionError:
        return False


def find_uv() -> str:
    uv = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    if not os.access(uv, os.X_OK):
        pytest.fail("uv is needed to build test virtual environments (pip install uv)")
    return uv


@pytest.fixture(scope="module")
def uv_envs(tmp_path_factory):
    """Two uv venvs: one with ipykernel, one bare (no ipykernel)."""
    uv = find_uv()
    base = tmp_path_factory.mktemp("venvs")
    with_kernel, bare = base / "with-ipykernel", base / "bare"
    for env in (with_kernel, bare):
        subprocess.run([uv, "venv", "-q", str(env)], check=True, capture_output=True, text=True)
    proc = subprocess.run([uv, "pip", "install", "-q", "--python", str(with_kernel / "bin" / "python"), "ipykernel"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"cannot install ipykernel into a uv venv:\n{proc.stderr}")
    return {"ipykernel": with_kernel / "bin" / "python", "bare": bare / "bin" / "python"}


# --- success -------------------------------------------------------------------------


def test_success_writes_result_executed_notebook_and_progress(tmp_path):
    # the input carries stale outputs: they are cleared in the executed copy, never in the input
    nb = nbformat.read(FIXTURES / "ok.ipynb", as_version=4)
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="stale\n")]
    nb.cells[1].execution_count = 99
    nb.cells[2].outputs = [nbformat.v4.new_output("stream", name="stderr", text="stale too\n")]
    stale = tmp_path / "ok.ipynb"
    nbformat.write(nb, stale)
    before = stale.read_bytes()
    term = tmp_path / "termination-log"
    run = run_cli(tmp_path, stale, "--progress", "--termination-log", str(term))
    assert run.returncode == 0, run.stderr
    res = run.result
    assert res["verdict"] == "Succeeded"
    assert res["reason"] == "ValidationSucceeded"
    assert res["failedCellIndex"] is None
    assert res["comparisonResult"] is None
    assert "2 code cells ran without errors" in res["message"]
    assert statuses(run) == ["Skipped", "Success", "Success"]
    assert [r["cellIndex"] for r in res["results"]] == [0, 1, 2]
    assert "executionTime" not in res["results"][0]
    assert all(EXECUTION_TIME.match(r["executionTime"]) for r in res["results"][1:])
    assert res["executedNotebook"] == str(tmp_path / "out" / "executed.ipynb")
    assert res["durationSeconds"] > 0
    assert res["runner"]["python"] == sys.executable
    assert res["runner"]["kernelPython"] == sys.executable
    assert res["runner"]["nbclient"]
    # the stdout line carries the same document
    assert run.line_result == res
    # one progress line per executed cell, in order
    assert [(p["cellIndex"], p["status"]) for p in run.progress] == [(1, "Success"), (2, "Success")]
    assert all(EXECUTION_TIME.match(p["executionTime"]) for p in run.progress)
    # the executed copy has fresh outputs and counts; the input is untouched
    cells = run.executed.cells
    assert stdout_of(cells[1]) == "42\n"
    assert [o["output_type"] for o in cells[2].outputs] == ["execute_result"]
    assert cells[2].outputs[0]["data"]["text/plain"] == "21.0"
    assert [cells[1].execution_count, cells[2].execution_count] == [1, 2]
    assert run.executed.metadata["language_info"]["name"] == "python"
    assert run.notebook.read_bytes() == before
    summary = json.loads(term.read_text())
    assert len(term.read_bytes()) <= 4096
    assert (summary["verdict"], summary["reason"]) == ("Succeeded", "ValidationSucceeded")


# --- failures ---------------------------------------------------------------------------


def test_exception_fails_at_the_right_cell_and_skips_the_rest(tmp_path):
    run = run_cli(tmp_path, "zerodivision.ipynb", "--progress")
    assert run.returncode == 1, run.stderr
    res = run.result
    assert (res["verdict"], res["reason"]) == ("Failed", "CellExecutionFailed")
    assert res["failedCellIndex"] == 2
    assert res["message"] == "Cell 3 raised ZeroDivisionError: division by zero"
    assert statuses(run) == ["Success", "Skipped", "Failure", "Skipped"]
    failed = res["results"][2]
    assert failed["errorName"] == "ZeroDivisionError"
    assert failed["errorMessage"] == "division by zero"
    assert "ZeroDivisionError" in failed["output"] and "1 / 0" in failed["output"]
    assert "\x1b" not in failed["output"]  # ANSI colours stripped
    assert EXECUTION_TIME.match(failed["executionTime"])
    assert [(p["cellIndex"], p["status"]) for p in run.progress] == [(0, "Success"), (2, "Failure")]
    # executed notebook written up to the failing cell
    cells = run.executed.cells
    assert stdout_of(cells[2]) == "before\n"
    assert any(o["output_type"] == "error" for o in cells[2].outputs)
    assert cells[3].outputs == [] and cells[3].execution_count is None


@pytest.fixture(scope="module")
def reply_statuses_from_raw_nbclient():
    """Run the first cell of both error-after-execution fixtures with plain nbclient.

    The reply is ``ok`` and nbclient (without allow_errors) does not raise, yet the
    cell has an error output: this is the trap of nbmake#77.
    """
    from nbclient import NotebookClient

    names = ("display_error.ipynb", "post_execute_error.ipynb")
    cells = [nbformat.read(FIXTURES / name, as_version=4).cells[0] for name in names]
    for i, cell in enumerate(cells):
        cell["id"] = f"probe-{i}"
    nb = nbformat.v4.new_notebook(cells=cells)
    seen = {}

    async def on_executed(cell, cell_index, execute_reply):
        seen[cell_index] = execute_reply["content"]["status"]

    client = NotebookClient(nb, timeout=60, on_cell_executed=on_executed)  # allow_errors=False
    client.execute(cwd=str(FIXTURES))  # does not raise
    return {
        name: (seen[i], any(o["output_type"] == "error" for o in nb.cells[i].outputs))
        for i, name in enumerate(names)
    }


@pytest.mark.parametrize(
    "fixture, ename, evalue",
    [
        ("display_error.ipynb", "ValueError", "boom"),  # a _repr_html_ that raises, via display()
        ("post_execute_error.ipynb", "RuntimeError", "failed after the cell ran"),  # like matplotlib's flush
    ],
)
def test_error_output_with_ok_reply_is_a_failure(tmp_path, reply_statuses_from_raw_nbclient, fixture, ename, evalue):
    assert reply_statuses_from_raw_nbclient[fixture] == ("ok", True)
    run = run_cli(tmp_path, fixture)
    assert run.returncode == 1, run.stderr
    res = run.result
    assert (res["reason"], res["failedCellIndex"]) == ("CellExecutionFailed", 0)
    assert (res["results"][0]["errorName"], res["results"][0]["errorMessage"]) == (ename, evalue)
    assert statuses(run) == ["Failure", "Skipped"]


def test_allow_errors_notebook_metadata_continues(tmp_path):
    run = run_cli(tmp_path, "allow_errors.ipynb")
    assert run.returncode == 0, run.stderr
    assert run.result["reason"] == "ValidationSucceeded"
    assert statuses(run) == ["Failure", "Success"]
    assert run.result["results"][0]["errorName"] == "ZeroDivisionError"
    assert "allowed" in run.result["message"]
    assert stdout_of(run.executed.cells[1]) == "still running\n"


def test_markers_skip_and_raises_exception(tmp_path):
    run = run_cli(tmp_path, "markers.ipynb")
    assert run.returncode == 0, run.stderr
    assert statuses(run) == ["Skipped", "Skipped", "Success", "Success", "Success", "Success"]
    names = [run.result["results"][i].get("errorName") for i in range(6)]
    assert names == [None, None, "ValueError", "KeyError", "TypeError", None]
    cells = run.executed.cells
    assert cells[0].outputs == [] and cells[1].outputs == []
    assert stdout_of(cells[5]) == "done\n"


# --- timeouts, dead kernels, leftovers --------------------------------------------------------


def _kernel_and_child_pids(run: Run) -> tuple[int, int]:
    kernel_pid, child_pid = map(int, stdout_of(run.executed.cells[0]).split())
    return kernel_pid, child_pid


def assert_all_gone(executed, tmp_path: Path, sandbox: bool) -> None:
    """The kernel and the child it started (which ignores SIGINT and SIGTERM) are gone.
    In the sandbox the pids it printed are its PID namespace's (the kernel is 2 there):
    nothing may be left whose working directory is under the test's folder instead."""
    kernel_pid, child_pid = map(int, stdout_of(executed.cells[0]).split())
    if not sandbox:
        assert process_gone(kernel_pid), "the kernel is still running"
        assert process_gone(child_pid), "a process started by the notebook is still running"
        return
    assert kernel_pid == 2, f"the kernel is not the second process of its namespace ({kernel_pid})"
    wait(lambda: not leftover_processes(tmp_path, ""), 5,
         lambda: f"the run's processes to end: {leftover_processes(tmp_path, '')}", interval=0.1)
    assert not (left := leftover_processes(tmp_path, "")), left


SANDBOX = pytest.mark.parametrize("sandbox", [False, True], ids=["plain", "sandbox"])


@SANDBOX
def test_cell_timeout_stops_and_leaves_no_process(tmp_path, sandbox):
    run = run_cli(tmp_path, "slow.ipynb", "--cell-timeout", "2", "--progress", sandbox=sandbox)
    assert run.returncode == 1, run.stderr
    res = run.result
    assert (res["reason"], res["failedCellIndex"]) == ("CellTimedOut", 1)
    assert res["message"] == "Cell 2 did not finish within 2 s (cell timeout)"
    assert statuses(run) == ["Success", "Failure", "Skipped"]
    timed_out = res["results"][1]
    assert timed_out["errorName"] == "CellTimedOut"
    assert "sleeping" in timed_out["output"]
    assert "time.sleep(30)" in timed_out["output"]  # the interrupt's traceback shows where it hung
    assert run.progress[-1]["cellIndex"] == 1 and run.progress[-1]["status"] == "Failure"
    assert run.elapsed < 25
    assert_all_gone(run.executed, tmp_path, sandbox)


def test_notebook_metadata_timeout_overrides_cell_timeout(tmp_path):
    run = run_cli(tmp_path, "metadata_timeout.ipynb", "--cell-timeout", "600")
    assert run.returncode == 1, run.stderr
    assert (run.result["reason"], run.result["failedCellIndex"]) == ("CellTimedOut", 0)
    assert "within 1 s" in run.result["message"]
    assert run.elapsed < 20


@SANDBOX
def test_whole_run_deadline(tmp_path, sandbox):
    run = run_cli(tmp_path, "slow.ipynb", "--timeout", "10", "--cell-timeout", "600", sandbox=sandbox)
    assert run.returncode == 1, run.stderr
    res = run.result
    assert res["reason"] == "ValidationTimedOut"
    assert res["failedCellIndex"] == 1
    assert "did not finish within 10 s" in res["message"]
    assert res["results"][1]["status"] == "Failure"
    assert res["results"][2]["status"] == "Skipped"
    assert res["durationSeconds"] < 20
    assert_all_gone(run.executed, tmp_path, sandbox)


@SANDBOX
def test_kernel_death(tmp_path, sandbox):
    run = run_cli(tmp_path, "kernel_dies.ipynb", sandbox=sandbox)
    assert run.returncode == 1, run.stderr
    res = run.result
    assert (res["reason"], res["failedCellIndex"]) == ("KernelDied", 0)
    assert res["message"] == "The kernel died while executing cell 1"
    assert "about to die" in res["results"][0]["output"]
    assert statuses(run) == ["Failure", "Skipped"]


@SANDBOX
def test_sigterm_stops_the_run_and_the_kernel(tmp_path, sandbox):
    folder = tmp_path / "nb"
    folder.mkdir()
    notebook = folder / "slow.ipynb"
    shutil.copyfile(FIXTURES / "slow.ipynb", notebook)
    result_path, executed_path = tmp_path / "result.json", tmp_path / "executed.ipynb"
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter_nbvalidation.runner", str(notebook), "--result", str(result_path),
         "--executed", str(executed_path), "--progress", *sandbox_args(tmp_path, sandbox)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )
    try:
        first = proc.stdout.readline()  # progress of cell 0: cell 1 (sleep 30) is now running
        assert first.startswith(PROGRESS_PREFIX), first + proc.stderr.read()
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        stdout, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 2
    assert stdout.splitlines()[-1].startswith(RESULT_PREFIX)
    res = json.loads(result_path.read_text())
    assert (res["verdict"], res["reason"], res["failedCellIndex"]) == ("Failed", "RunnerError", 1)
    assert "SIGTERM" in res["message"]
    assert [r["status"] for r in res["results"]] == ["Success", "Failure", "Skipped"]
    assert_all_gone(nbformat.read(executed_path, as_version=4), tmp_path, sandbox)


# a child of the kernel that takes 1.2 s to end once terminated (and ignores being asked again)
_SLOW_CHILD = """import signal, sys, time
def bye(*_):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(1.2)
    open(sys.argv[1], "w").write("ended")
    sys.exit(0)
signal.signal(signal.SIGTERM, bye)
print("ready", flush=True)
time.sleep(300)
"""


def test_a_kernel_that_lingers_after_its_shutdown_reply_is_stopped_after_its_own_shutdown(tmp_path):
    """ipykernel 7 sometimes hangs after it has replied to shutdown_request (its control thread
    waits out a 10 s flush), and jupyter_client terminates a kernel only half of
    ``shutdown_wait_time`` after the request. ``stop_kernel`` waits for the kernel to say it has
    ended what it started (its child below gets the 1.2 s it takes), then KERNEL_EXIT_GRACE, then
    terminates, then kills: never ``shutdown_wait_time`` (60 s here, 5 s by default). The kernel
    below would live on for 300 s: Python waits for its thread at exit, and it ignores SIGTERM."""
    import asyncio

    from jupyter_client.manager import AsyncKernelManager

    import jupyter_nbvalidation.runner.kernel as kernel

    ended = tmp_path / "child-ended"
    cell = (f"import signal, subprocess, sys, threading, time\n"
            f"child = subprocess.Popen([sys.executable, '-c', {_SLOW_CHILD!r}, {str(ended)!r}], stdout=subprocess.PIPE, text=True)\n"
            f"assert child.stdout.readline() == 'ready\\n'\n"
            f"signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            f"threading.Thread(target=time.sleep, args=(300,)).start()\n")

    async def main() -> tuple[float, bool, list[str]]:
        km = AsyncKernelManager(kernel_name="python3", shutdown_wait_time=60)
        await km.start_kernel(cwd=str(tmp_path))
        kc = km.client()
        kc.start_channels()
        try:
            await kc.wait_for_ready(timeout=60)
            errors: list[str] = []
            reply = await kc.execute_interactive(cell, timeout=60, output_hook=lambda m: errors.append(
                m["content"].get("evalue", "")) if m["header"]["msg_type"] == "error" else None)
            assert reply["content"]["status"] == "ok", errors
            started = time.monotonic()
            await kernel.stop_kernel(km, kc)
            return time.monotonic() - started, await km.is_alive(), errors
        finally:
            kc.stop_channels()
            if await km.is_alive():
                await km.shutdown_kernel(now=True)
            await km.cleanup_resources()

    elapsed, alive, errors = asyncio.run(main())
    assert not alive
    assert ended.is_file() and ended.read_text() == "ended", "the kernel's child was killed before the kernel had ended it"
    assert elapsed < kernel.SHUTDOWN_ACTIONS_LIMIT + 4 * kernel.KERNEL_EXIT_GRACE + 5, elapsed


# --- the kernel's interpreter and working directory --------------------------------------------


def test_kernel_runs_in_the_given_interpreter(tmp_path, uv_envs):
    python = str(uv_envs["ipykernel"])
    run = run_cli(tmp_path, "which_python.ipynb", "--python", python)
    assert run.returncode == 0, run.stderr
    assert stdout_of(run.executed.cells[1]).strip() == python
    assert run.result["runner"]["kernelPython"] == python
    assert run.result["runner"]["python"] == sys.executable
    # after a passing run, neither the kernel nor what the notebook started is left running
    kernel_pid, child_pid = _kernel_and_child_pids(run)
    assert process_gone(kernel_pid), "the kernel is still running"
    assert process_gone(child_pid), "a process started by the notebook is still running"


def test_interpreter_without_ipykernel_is_kernel_start_failed(tmp_path, uv_envs):
    python = str(uv_envs["bare"])
    run = run_cli(tmp_path, "ok.ipynb", "--python", python)
    assert run.returncode == 1, run.stderr
    res = run.result
    assert (res["verdict"], res["reason"]) == ("Failed", "KernelStartFailed")
    assert python in res["message"] and "ipykernel" in res["message"]
    assert res["failedCellIndex"] is None
    assert statuses(run) == ["Skipped", "Skipped", "Skipped"]
    assert run.executed is not None and run.executed.cells[1].outputs == []


def test_missing_interpreter_is_kernel_start_failed(tmp_path):
    run = run_cli(tmp_path, "ok.ipynb", "--python", str(tmp_path / "no-such-python"))
    assert run.returncode == 1
    assert run.result["reason"] == "KernelStartFailed"
    assert "does not exist" in run.result["message"]


def test_working_directory_defaults_to_the_notebook_folder(tmp_path):
    run = run_cli(tmp_path, "read_data.ipynb", extra_files=["data.txt"])
    assert run.returncode == 0, run.result["message"]
    assert stdout_of(run.executed.cells[0]).strip() == str(tmp_path / "nb")
    assert stdout_of(run.executed.cells[1]).strip() == "hello from data.txt"
    assert os.getcwd() != str(tmp_path / "nb")


def test_explicit_working_directory(tmp_path):
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "data.txt").write_text("other data\n")
    run = run_cli(tmp_path, "read_data.ipynb", "--cwd", str(other))
    assert run.returncode == 0, run.result["message"]
    assert stdout_of(run.executed.cells[0]).strip() == str(other)
    assert stdout_of(run.executed.cells[1]).strip() == "other data"


# --- golden comparison -------------------------------------------------------------------------


def test_golden_mismatch_normalized(tmp_path):
    golden = FIXTURES / "golden.ipynb"
    run = run_cli(tmp_path, "golden.ipynb", "--golden", str(golden))
    assert run.returncode == 1, run.stderr
    res = run.result
    assert (res["verdict"], res["reason"], res["failedCellIndex"]) == ("Failed", "GoldenMismatch", 2)
    assert res["message"] == "1 of 5 compared cells differ from the golden notebook (first: cell 3)"
    cmp = res["comparisonResult"]
    assert cmp["strategy"] == "normalized" and cmp["result"] == "failed"
    # compared: 0 hello, 1 float noise, 2 pi (differs), 3 memory address, 6 expected error;
    # not compared: 4 ignore-output, 5 NBVAL_SKIP, 7 never executed in the golden copy
    assert (cmp["totalCells"], cmp["matchedCells"], cmp["mismatchedCells"], cmp["skippedCells"]) == (8, 4, 1, 3)
    (diff,) = cmp["diffs"]
    assert (diff["cellIndex"], diff["diffType"], diff["cellType"]) == (2, "output_mismatch", "code")
    assert "-3.15" in diff["diff"].splitlines() and "+3.14" in diff["diff"].splitlines()
    assert "3.15" in diff["expected"] and "3.14" in diff["actual"]
    # the raises-exception cell raised as expected: not a failure
    assert res["results"][6]["status"] == "Success"
    assert res["results"][5]["status"] == "Skipped"


def test_golden_mismatch_exact(tmp_path):
    golden = FIXTURES / "golden.ipynb"
    run = run_cli(tmp_path, "golden.ipynb", "--golden", str(golden), "--comparison", "exact")
    assert run.returncode == 1
    cmp = run.result["comparisonResult"]
    assert cmp["strategy"] == "exact"
    assert [d["cellIndex"] for d in cmp["diffs"]] == [1, 2, 3]  # float noise and the address count now


def test_command_line_options_are_parsed():
    args = runner.build_parser().parse_args(
        ["nb.ipynb", "--result", "r.json", "--executed", "e.ipynb", "--abs-tol", "0.02", "--rel-tol", "1e-3",
         "--comparison", "exact", "--cell-timeout", "5", "--timeout", "60", "--python", "/py", "--cwd", "/d",
         "--golden", "g.ipynb", "--termination-log", "/dev/termination-log", "--progress"]
    )
    assert (args.abs_tol, args.rel_tol, args.comparison) == (0.02, 1e-3, "exact")
    assert (args.cell_timeout, args.timeout, args.python, args.cwd) == (5.0, 60.0, "/py", "/d")
    assert (args.golden, args.termination_log, args.progress) == ("g.ipynb", "/dev/termination-log", True)
    defaults = runner.build_parser().parse_args(["nb.ipynb", "--result", "r.json", "--executed", "e.ipynb"])
    assert (defaults.abs_tol, defaults.rel_tol, defaults.comparison) == (1e-4, 0.0, "normalized")
    assert (defaults.cell_timeout, defaults.timeout, defaults.python, defaults.progress) == (600.0, None, None, False)


# --- limits, exit codes ---------------------------------------------------------------------


def test_huge_error_is_truncated_and_termination_log_fits(tmp_path):
    term = tmp_path / "termination-log"
    run = run_cli(tmp_path, "big_error.ipynb", "--termination-log", str(term))
    assert run.returncode == 1
    entry = run.result["results"][0]
    assert entry["errorName"] == "ValueError"
    assert len(entry["output"]) <= 4000
    assert len(entry["errorMessage"]) <= 4000
    # the job's message keeps the whole error message (every line, as issue 12 asks) but stays bounded:
    # MESSAGE_LIMIT characters of it after "Cell N raised ValueError: " (an event's note is cut at 1 KiB anyway)
    from jupyter_nbvalidation.runner.errors import MESSAGE_LIMIT
    assert run.result["message"].startswith("Cell 1 raised ValueError: xxx")
    assert len(run.result["message"]) <= MESSAGE_LIMIT + 100
    data = term.read_bytes()
    assert len(data) <= 4096
    summary = json.loads(data)
    assert (summary["verdict"], summary["reason"], summary["failedCellIndex"]) == ("Failed", "CellExecutionFailed", 0)
    assert len(run.stdout.splitlines()[-1]) <= 1024 * 1024


def test_unreadable_notebook_exits_2(tmp_path):
    bad = tmp_path / "broken.ipynb"
    bad.write_text("{ this is not json")
    term = tmp_path / "termination-log"
    run = run_cli(tmp_path, bad, "--termination-log", str(term))
    assert run.returncode == 2
    assert (run.result["verdict"], run.result["reason"]) == ("Failed", "InvalidNotebook")
    assert "broken.ipynb" in run.result["message"]
    assert run.result["executedNotebook"] is None and run.executed is None
    assert json.loads(term.read_text())["reason"] == "InvalidNotebook"


def test_missing_golden_exits_2(tmp_path):
    run = run_cli(tmp_path, "ok.ipynb", "--golden", str(tmp_path / "nope.ipynb"))
    assert run.returncode == 2
    assert run.result["reason"] == "InvalidNotebook"
    assert "golden" in run.result["message"]


def test_bad_arguments_exit_2_and_still_write_the_result(tmp_path):
    run = run_cli(tmp_path, "ok.ipynb", "--comparison", "fuzzy")
    assert run.returncode == 2
    assert run.result["verdict"] == "Failed"
    assert "fuzzy" in run.result["message"]
    assert run.line_result["reason"] == run.result["reason"]


def test_missing_required_argument_exits_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "jupyter_nbvalidation.runner", str(FIXTURES / "ok.ipynb")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    last = proc.stdout.splitlines()[-1]
    assert last.startswith(RESULT_PREFIX)
    assert json.loads(last[len(RESULT_PREFIX):])["verdict"] == "Failed"


def test_executed_path_must_not_be_the_input(tmp_path):
    notebook = tmp_path / "ok.ipynb"
    shutil.copyfile(FIXTURES / "ok.ipynb", notebook)
    before = notebook.read_bytes()
    proc = subprocess.run([sys.executable, "-m", "jupyter_nbvalidation.runner", str(notebook),
                           "--result", str(tmp_path / "r.json"), "--executed", str(notebook)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert notebook.read_bytes() == before


# --- pure helpers ------------------------------------------------------------------------


def test_result_line_truncates_tracebacks_not_structure():
    results = [{"cellIndex": i, "status": "Failure", "errorName": "E", "errorMessage": "m", "output": "x" * 4000}
               for i in range(400)]
    result = {"verdict": "Failed", "reason": "CellExecutionFailed", "message": "m", "failedCellIndex": 0,
              "results": results, "comparisonResult": None}
    line = runner.result_line(result, limit=1024 * 1024)
    assert len(line) <= 1024 * 1024
    parsed = json.loads(line)
    assert len(parsed["results"]) == 400
    assert parsed["results"][0]["errorName"] == "E"
    assert len(parsed["results"][0]["output"]) < 4000
    assert runner.result_line({"a": 1}) == '{"a":1}'


def test_termination_summary_fits_4096_bytes():
    result = {"verdict": "Failed", "reason": "CellExecutionFailed", "message": "é" * 10000, "failedCellIndex": 0,
              "results": [{"cellIndex": 0, "status": "Failure", "errorName": "E" * 5000, "errorMessage": "ü" * 10000}],
              "comparisonResult": None, "executedNotebook": "/x" * 3000, "durationSeconds": 1.0}
    data = runner.termination_summary(result).encode("utf-8")
    assert len(data) <= 4096
    assert json.loads(data)["reason"] == "CellExecutionFailed"


def test_print_executed_carries_the_executed_notebook_in_the_log(tmp_path):
    """Where only the logs come back (a Pod), the executed notebook travels on one line."""
    from jupyter_nbvalidation.backends.kubernetes.results import decode_executed, parse_log

    run = run_cli(tmp_path, "ok.ipynb", "--print-executed")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[-2].startswith("NBVALIDATION-EXECUTED ") and lines[-1].startswith(RESULT_PREFIX)
    result, payload = parse_log(run.stdout)
    assert result == run.result
    from_log = decode_executed(payload)
    on_disk = json.loads(nbformat.writes(run.executed))["cells"]
    assert [c.get("outputs") for c in from_log["cells"]] == [c.get("outputs") for c in on_disk]
