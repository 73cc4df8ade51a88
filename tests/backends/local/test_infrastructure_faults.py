"""Infrastructure is not the notebook (issue 20), on the local backend with real
kernels, runners, SQLite and a real small filesystem: a run that fails for a
reason that is not the notebook's ends InfrastructureFailed (or is retried),
never ValidationFailed. The engine's retry rules are in test_retry_policy.py.

The disk-full tests mount a 4 MiB tmpfs (the tests run as root in CI); when it
cannot be mounted they fail, never skip."""

from __future__ import annotations

import os
import shlex
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Local, make_local
from helpers import cli, phases, reasons, wait_async, write_notebook

from jupyter_nbvalidation.backends.base import Fault
from jupyter_nbvalidation.core.model import RETRY_REASONS, EventReason, Phase, Reason, ResultReason

NO_BUILD = {"buildConfig": {"enabled": False}}


def Env(tmp_path: Path, **backend_kw) -> Local:
    """conftest.make_local with this module's backend settings and a short retry backoff."""
    return make_local(tmp_path, backend_kw=backend_kw, run_timeout=180, retry_backoff=0.05)


def mount_tmpfs(where: Path, size: str = "4m") -> None:
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], check=True,
                   capture_output=True)  # no skip: a test that cannot mount fails


@pytest.fixture
def small_disk(tmp_path, request):
    """The data dir's jobs/ folder (snapshots, run folders: results, executed notebooks,
    runner logs) on a 4 MiB tmpfs; the SQLite store stays on the ordinary disk."""
    jobs = tmp_path / "data" / "jobs"
    mount_tmpfs(jobs)
    request.addfinalizer(lambda: subprocess.run(["umount", "-l", str(jobs)], check=False))
    return jobs


# the file fills the notebook's working directory: its attempt's copy of its folder, in the
# data dir's jobs/ (the small disk); the kernel reaches it also in the sandbox (runner/sandbox.py),
# where the rest of the data dir (and /tmp) is hidden: an absolute path into jobs/ would be
# written to the sandbox's own /tmp, not to the small disk
FILL = """import os
path = {path!r}
try:
    with open(path, 'wb') as f:
        while True:
            f.write(b'x' * 65536)
            f.flush()
finally:
    {after}
"""


@pytest.mark.asyncio
async def test_disk_full_in_a_cell_that_leaves_it_full_is_infrastructure(tmp_path, small_disk):
    env = Env(tmp_path)
    await env.engine.start()
    try:
        nb = "full.ipynb"
        write_notebook(env.root / nb, ["print('before')", FILL.format(path="filler", after="pass")])
        job = await env.run(notebook={"path": nb}, podConfig=NO_BUILD)
        st = job["status"]
        assert st["phase"] == Phase.FAILED
        assert st["reason"] == Reason.INFRASTRUCTURE_FAILED, st["message"]
        assert st["message"].startswith("No space left on device in "), st["message"]
        assert str(small_disk) in st["message"]
        assert st.get("failedCellIndex") is None
        assert st["validationStatus"]["reason"] == ResultReason.INFRASTRUCTURE_FAILED
        assert "validationRetries" not in st, "a full disk is not retried"
        events = await env.events(job)
        assert reasons(events) == [t["reason"] for t in st["transitions"]]
    finally:
        await env.engine.stop()


@pytest.mark.asyncio
async def test_disk_full_error_of_the_failing_cell_is_infrastructure(tmp_path, small_disk):
    """The cell hits ENOSPC and frees what it wrote: the runner writes its result, whose
    failing cell's error is OSError [Errno 28]; still not the notebook's failure."""
    env = Env(tmp_path)
    await env.engine.start()
    try:
        nb = "freed.ipynb"
        write_notebook(env.root / nb, [FILL.format(path="filler", after="os.remove(path)")])
        job = await env.run(notebook={"path": nb}, podConfig=NO_BUILD)
        st = job["status"]
        assert st["reason"] == Reason.INFRASTRUCTURE_FAILED, st["message"]
        assert st["message"].startswith("No space left on device in "), st["message"]
        assert "Errno 28" in st["message"]
        assert st.get("failedCellIndex") is None
        assert st["results"] and st["results"][0]["errorName"] == "OSError", "what ran is kept"
    finally:
        await env.engine.stop()


@pytest.mark.asyncio
async def test_a_notebook_that_raises_an_ordinary_oserror_still_fails_on_its_own(tmp_path):
    env = Env(tmp_path)
    await env.engine.start()
    try:
        nb = "own.ipynb"
        write_notebook(env.root / nb, ["open('/nonexistent/dir/x', 'w')"])
        job = await env.run(notebook={"path": nb}, podConfig=NO_BUILD)
        assert job["status"]["reason"] == Reason.VALIDATION_FAILED
        assert job["status"]["failedCellIndex"] == 0
    finally:
        await env.engine.stop()


def _flaky_python(tmp_path: Path) -> tuple[Path, Path]:
    """An interpreter whose first kernel start fails (a marker file), then works."""
    marker = tmp_path / "kernel-failed-once"
    wrapper = tmp_path / "flaky-python"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "-m" ] && [ "$2" = "ipykernel_launcher" ] && [ ! -e {shlex.quote(str(marker))} ]; then\n'
        f"  touch {shlex.quote(str(marker))}\n"
        "  echo 'simulated: the kernel could not start under load' >&2\n"
        "  exit 1\n"
        "fi\n"
        f'exec {shlex.quote(sys.executable)} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return wrapper, marker


@pytest.mark.asyncio
async def test_a_kernel_that_fails_to_start_once_is_retried_then_succeeds(tmp_path):
    wrapper, marker = _flaky_python(tmp_path)
    # the stand-in keeps its state outside the run (the marker), which a sandboxed kernel cannot
    # write (it writes only its run's folders): the retry is what is tested, without the sandbox
    env = Env(tmp_path, unbuilt_python=str(wrapper), sandbox="off",
              kernel_pool_size=0)  # the run's own kernel start is what fails once (not a pre-started one)
    await env.engine.start()
    try:
        nb = "ok.ipynb"
        write_notebook(env.root / nb, ["x = 1", "assert x == 1"])
        job = await env.run(notebook={"path": nb}, podConfig=NO_BUILD)
        st = job["status"]
        assert marker.exists(), "the first kernel start failed"
        assert st["phase"] == Phase.SUCCEEDED, st["message"]
        assert st["validationRetries"] == 1 and st["lastRetryTime"]
        assert phases(job) == [Phase.INITIALIZING, Phase.VALIDATION_RUNNING, Phase.SUCCEEDED]
        events = await env.events(job)
        assert [e["reason"] for e in events if e["reason"] not in RETRY_REASONS] == \
            [t["reason"] for t in st["transitions"]]
        retried = [e for e in events if e["reason"] == EventReason.VALIDATION_RETRIED]
        assert len(retried) == 1 and retried[0]["type"] == "Warning"
        assert "kernel" in retried[0]["note"].lower()
        # the retry ran in a fresh run folder; the failed attempt's is kept as it was
        runs = sorted(p.name for p in env.backend.job_dir(job).glob("run-*"))
        assert runs == ["run-1", "run-2"], runs
        assert (env.backend.job_dir(job) / "run-2" / "attempt").read_text() == "1"
    finally:
        await env.engine.stop()


@pytest.mark.asyncio
async def test_a_kernel_that_never_starts_ends_infrastructure_failed_after_the_retries(tmp_path):
    broken = tmp_path / "broken-python"
    broken.write_text('#!/bin/sh\nif [ "$2" = "ipykernel_launcher" ]; then exit 1; fi\n'
                      f'exec {shlex.quote(sys.executable)} "$@"\n')
    broken.chmod(0o755)
    env = Env(tmp_path, unbuilt_python=str(broken), max_retries=1)
    await env.engine.start()
    try:
        nb = "nb.ipynb"
        write_notebook(env.root / nb, ["print(1)"])
        job = await env.run(notebook={"path": nb}, podConfig=NO_BUILD)
        st = job["status"]
        assert st["reason"] == Reason.INFRASTRUCTURE_FAILED, st["message"]
        assert st["message"].endswith("(after 1 retry)"), st["message"]
        assert st["validationRetries"] == 1
    finally:
        await env.engine.stop()


@pytest.mark.asyncio
async def test_a_runner_killed_by_sigkill_is_infrastructure(tmp_path):
    """As the out-of-memory killer does: SIGKILL of the runner, which we did not send."""
    env = Env(tmp_path)
    await env.engine.start()
    try:
        nb = "slow.ipynb"
        write_notebook(env.root / nb, ["import time\ntime.sleep(60)"])
        job = await env.service.submit({"notebook": {"path": nb}, "podConfig": NO_BUILD})
        name = job["metadata"]["name"]
        async def running() -> list | None:  # its runner's pid file, once the run reports progress
            pid_files = list(env.backend.job_dir(job).glob("run-*/pid"))
            return pid_files if pid_files and (await env.backend.store.get(name))["status"].get("progress") else None

        pid_files = await wait_async(running, 30, f"{name}'s run to report progress")
        os.kill(int(pid_files[0].read_text()), signal.SIGKILL)
        done = await env.engine.wait_for_terminal(name, 60)
        st = done["status"]
        assert st["reason"] == Reason.INFRASTRUCTURE_FAILED, st["message"]
        assert st["message"].startswith("The runner was killed by signal 9 (SIGKILL; the out-of-memory killer?)")
        assert st.get("failedCellIndex") is None
    finally:
        await env.engine.stop()


@pytest.mark.asyncio
async def test_an_infrastructure_failed_newest_job_is_never_unchanged(tmp_path, small_disk):
    """The verdict cache: the newest finished job with the key decides, and a job that
    ended InfrastructureFailed is no success: `run` validates again. The notebook fills
    the disk only while a file outside its folder (not in the key) says so: in the root, which
    the kernel sees also in the sandbox (runner/sandbox.py hides /tmp outside it)."""
    env = Env(tmp_path)
    fill_now = env.root / "fill-now"
    await env.engine.start()
    try:
        source = f"import os\nif os.path.exists({str(fill_now)!r}):\n" + "\n".join(
            "    " + ln for ln in FILL.format(path="filler", after="os.remove(path)").splitlines())
        nb = "nbs/cached.ipynb"
        write_notebook(env.root / nb, [source])
        spec = {"notebook": {"path": nb}, "podConfig": NO_BUILD}
        first = await env.run(**spec)
        assert first["status"]["phase"] == Phase.SUCCEEDED, first["status"]["message"]
        hit = await env.service.unchanged(spec)
        assert hit is not None and hit["metadata"]["name"] == first["metadata"]["name"]
        fill_now.touch()
        second = await env.run(**spec)
        assert second["status"]["reason"] == Reason.INFRASTRUCTURE_FAILED, second["status"]["message"]
        assert await env.service.unchanged(spec) is None, "an infrastructure failure voids the older success"
        fill_now.unlink()
        third = await env.run(**spec)
        assert third["status"]["phase"] == Phase.SUCCEEDED
        assert (await env.service.unchanged(spec))["metadata"]["name"] == third["metadata"]["name"]
    finally:
        await env.engine.stop()


def _cli_env(folder: Path) -> dict:
    return {**os.environ, "JUPYTER_RUNTIME_DIR": str(folder / "no-servers")}


def test_disk_full_through_run_and_pytest_is_an_error_exit_3_and_junit_error(tmp_path, request):
    """`run`: an infrastructure fault prints as an error with its cause, exit 3 (no notebook
    failed on its own), JUnit <error type="InfrastructureFailed">; with a notebook that
    fails on its own as well, exit 1. `pytest --nbvalidation`: a pytest error, not a failure."""
    import json
    import xml.etree.ElementTree as ET

    data = tmp_path / "data"
    jobs = data / "jobs"
    mount_tmpfs(jobs)
    request.addfinalizer(lambda: subprocess.run(["umount", "-l", str(jobs)], check=False))
    nbs = tmp_path / "nbs"
    write_notebook(nbs / "full.ipynb", [FILL.format(path="filler", after="os.remove(path)")])

    def run(*args: str) -> subprocess.CompletedProcess:
        return cli("run", *args, "--local", "--no-build", "--data-dir", str(data), cwd=tmp_path, timeout=600,
                   env=_cli_env(tmp_path))

    proc = run("nbs", "--junitxml", "junit.xml")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "Error" in proc.stdout and "No space left on device in " in proc.stdout, proc.stdout
    assert "1 error (infrastructure, not the notebook)" in proc.stdout, proc.stdout
    suite = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite")
    assert (suite.get("failures"), suite.get("errors")) == ("0", "1")
    case = suite.find("testcase")
    assert case.find("failure") is None
    error = case.find("error")
    assert error.get("type") == "InfrastructureFailed"
    assert error.get("message").startswith("No space left on device in ")

    # never Unchanged, and a notebook that fails on its own decides the exit code (1)
    write_notebook(nbs / "broken.ipynb", ["1/0"])
    proc = run("nbs", "-o", "json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = {r["notebook"]: r for r in json.loads(proc.stdout)}
    assert rows["nbs/full.ipynb"]["verdict"] == "Error"
    assert rows["nbs/broken.ipynb"]["verdict"] == "Failed"
    (nbs / "broken.ipynb").unlink()

    # the pytest plugin: an error (in setup), not a failure
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--nbvalidation",
                           "--nbvalidation-no-build", "--nbvalidation-local", "--nbvalidation-data-dir", str(data),
                           "--junitxml", "pytest.xml", "nbs"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600, stdin=subprocess.DEVNULL, env=_cli_env(tmp_path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 error" in proc.stdout and "failed" not in proc.stdout.splitlines()[-1], proc.stdout
    assert "No space left on device in " in proc.stdout
    suite = ET.parse(tmp_path / "pytest.xml").getroot().find("testsuite")
    assert (suite.get("failures"), suite.get("errors")) == ("0", "1")


@pytest.mark.asyncio
async def test_a_package_index_that_cannot_be_reached_is_retried_then_infrastructure(tmp_path):
    """uv cannot connect to the index (nothing listens on the port): a transient fault of
    the build, retried with its own counter, then InfrastructureFailed naming the cause."""
    env = Env(tmp_path, max_retries=1, build_tool="uv")
    await env.engine.start()
    try:
        nb = "needs/nb.ipynb"
        write_notebook(env.root / nb, ["import six"])
        (env.root / "needs" / "requirements.txt").write_text("--index-url http://127.0.0.1:9/simple\nsix\n")
        job = await env.run(timeout=300, notebook={"path": nb})
        st = job["status"]
        assert st["reason"] == Reason.INFRASTRUCTURE_FAILED, st["message"]
        assert st["message"].startswith("The package index could not be reached"), st["message"]
        assert st["message"].endswith("(after 1 retry)")
        assert st["buildRetries"] == 1 and "validationRetries" not in st
        assert st["buildStatus"]["phase"] == "Failed"
        events = await env.events(job)
        assert [e["reason"] for e in events] == [Reason.ACCEPTED, Reason.BUILD_STARTED, EventReason.BUILD_RETRIED,
                                                 Reason.INFRASTRUCTURE_FAILED]
    finally:
        await env.engine.stop()


@pytest.mark.asyncio
async def test_a_requirement_that_cannot_be_resolved_stays_a_build_failure(tmp_path):
    env = Env(tmp_path, build_tool="uv")
    await env.engine.start()
    try:
        nb = "bad/nb.ipynb"
        write_notebook(env.root / nb, ["print(1)"])
        (env.root / "bad" / "wheels").mkdir()
        (env.root / "bad" / "requirements.txt").write_text("--no-index\n--find-links wheels\nsix\n")
        job = await env.run(timeout=300, notebook={"path": nb})
        st = job["status"]
        assert st["reason"] == Reason.BUILD_FAILED, st["message"]
        assert "buildRetries" not in st
    finally:
        await env.engine.stop()


# -- the classification itself, on the documents a run leaves (backends/local_faults.py) ------------

def test_the_local_classification_of_result_documents(tmp_path):
    from jupyter_nbvalidation.backends.local.faults import fault_of_build, fault_of_exit, fault_of_result

    runner_error = {"verdict": "Failed", "reason": "RunnerError", "message": "The runner failed: KeyError: 'x'"}
    assert fault_of_result(runner_error, tmp_path) == Fault("The runner failed: KeyError: 'x'", transient=False)
    start = fault_of_result({"verdict": "Failed", "reason": "KernelStartFailed", "message": "timeout"}, tmp_path)
    assert start is not None and start.transient
    full_start = fault_of_result({"verdict": "Failed", "reason": "KernelStartFailed",
                                  "message": "OSError: [Errno 28] No space left on device"}, tmp_path)
    assert full_start is not None and not full_start.transient and full_start.cause.startswith("No space left")
    cell = {"verdict": "Failed", "reason": "CellExecutionFailed", "failedCellIndex": 0,
            "results": [{"cellIndex": 0, "status": "Failure", "errorName": "OSError",
                         "errorMessage": "[Errno 122] Disk quota exceeded"}]}
    assert fault_of_result(cell, tmp_path).cause.startswith(f"No space left on device in {tmp_path}")
    # the notebook's own errors stay its verdicts
    own = {**cell, "results": [{**cell["results"][0], "errorMessage": "[Errno 2] No such file or directory: 'x'"}]}
    assert fault_of_result(own, tmp_path) is None
    assert fault_of_result({"verdict": "Failed", "reason": "CellTimedOut"}, tmp_path) is None
    assert fault_of_result({"verdict": "Failed", "reason": "GoldenMismatch"}, tmp_path) is None
    assert fault_of_result({"verdict": "Succeeded"}, tmp_path) is None
    # a runner that ended without a result
    assert fault_of_exit(-9, "", tmp_path).cause.startswith(
        "The runner was killed by signal 9 (SIGKILL; the out-of-memory killer?)")
    assert "signal 15 (SIGTERM)" in fault_of_exit(-15, "", tmp_path).cause
    assert fault_of_exit(1, "boom", tmp_path).cause == "The runner exited with 1 without a result: boom"
    assert not fault_of_exit(1, "boom", tmp_path).transient
    # builds: the index unreachable (uv's words) is transient; an unresolvable requirement is no fault
    uv = ("error: Request failed after 3 retries in 11.9s | cause: Failed to fetch: http://127.0.0.1:9/simple/six/"
          " | cause: error sending request for url | cause: tcp connect error | cause: Connection refused")
    assert fault_of_build(uv, tmp_path).transient
    assert fault_of_build("error: No solution found when resolving dependencies | cause: Because six was not "
                          "found in the package registry", tmp_path) is None


def test_the_html_report_shows_an_infrastructure_error_apart(tmp_path):
    import jupyter_nbvalidation.cli.reports.html as html
    from jupyter_nbvalidation.cli.batch import Item, Outcome

    job = {"metadata": {"name": "nb-1"}, "spec": {"notebook": {"path": "nb.ipynb"}},
           "status": {"phase": "Failed", "reason": "InfrastructureFailed",
                      "message": "No space left on device in /data/jobs/x/run-1.", "transitions": []}}
    page = html.page([Outcome(Item(path=tmp_path / "nb.ipynb", shown="nb.ipynb"), "Error", 1.0, job=job)])
    assert 'class="v Error"' in page and "Infrastructure error (not the notebook" in page
    assert "No space left on device in /data/jobs/x/run-1." in page
