"""The local backend end to end: real virtual environments (uv and venv+pip),
real kernels, real SQLite. Nothing here is mocked."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from conftest import make_local
from helpers import leftover_processes, phases, pids_alive, reasons, slow_to_stop, started_run, wait_async

from jupyter_nbvalidation.core.model import Phase, Reason, parse_time

PKG = "tabulate==0.9.0"  # not in the server's environment: only requirements.txt can provide it
USES_PKG = ["import sys, tabulate\nprint(sys.executable)", "print(tabulate.tabulate([[1, 2]]))"]


def _text(output: dict) -> str:
    text = output.get("text", "")
    return "".join(text) if isinstance(text, list) else text


def _write_reqs(root: Path, rel_dir: str, lines: list[str]) -> None:
    (root / rel_dir).mkdir(parents=True, exist_ok=True)
    (root / rel_dir / "requirements.txt").write_text("\n".join(lines) + "\n")


@pytest.mark.asyncio
async def test_adr037_build_then_validate(local, notebook):
    """The notebook's only source of its package is requirements.txt; the
    recorded times prove validation started after BuildComplete was persisted."""
    with pytest.raises(ModuleNotFoundError):
        import tabulate  # noqa: F401  (the server itself does not have it)
    nb = notebook("proj/analysis.ipynb", USES_PKG)
    _write_reqs(local.root, "proj", [PKG])

    persisted_at: dict[str, float] = {}
    orig = local.store.update_status

    async def recording(name, status, rv):
        job = await orig(name, status, rv)
        persisted_at.setdefault(status["phase"], time.time())
        return job

    local.store.update_status = recording
    job = await local.run(notebook={"path": nb})
    st = job["status"]
    assert st["phase"] == Phase.SUCCEEDED, st
    assert phases(job) == [Phase.INITIALIZING, Phase.BUILDING, Phase.BUILD_COMPLETE,
                           Phase.VALIDATION_RUNNING, Phase.SUCCEEDED]
    # validation (the runner process) started after BuildComplete was durably written
    started = parse_time(st["validationStatus"]["startTime"]).timestamp()
    assert started >= persisted_at[Phase.BUILD_COMPLETE]
    run_meta = json.loads(next((local.backend.job_dir(job)).glob("run-*/run.json")).read_text())
    env_ref = st["buildStatus"]["imageReference"]
    assert run_meta["python"] == str(Path(env_ref) / "bin" / "python")
    # the kernel ran in exactly the recorded environment
    executed = await local.backend.executed_notebook(job)
    printed = _text(executed["cells"][0]["outputs"][0]).strip()
    assert Path(printed).parent.parent == Path(env_ref)
    assert "1  2" in _text(executed["cells"][1]["outputs"][0])
    bs = st["buildStatus"]
    assert bs["phase"] == "Complete" and bs["strategy"] in ("uv", "venv") and bs["duration"]
    assert Path(bs["logPath"]).is_file() and PKG.split("==")[0] in Path(bs["logPath"]).read_text()
    # per-cell results
    assert [r["status"] for r in st["results"]] == ["Success", "Success"]
    assert all(r["executionTime"].endswith("s") for r in st["results"])
    assert {c["type"]: c["status"] for c in st["conditions"]} == {
        "Ready": "True", "BuildReady": "True", "ValidationComplete": "True"}
    evs = await local.events(job)
    assert reasons(evs) == [Reason.ACCEPTED, Reason.BUILD_STARTED, Reason.BUILD_SUCCEEDED,
                            Reason.VALIDATION_STARTED, Reason.VALIDATION_SUCCEEDED]
    assert all(e["regarding"]["uid"] == job["metadata"]["uid"] for e in evs)


@pytest.mark.asyncio
async def test_failed_build_never_starts_validation(local, notebook):
    nb = notebook("broken/nb.ipynb", ["print('never runs')"])
    _write_reqs(local.root, "broken", ["nbvalidation-no-such-package-xyz==0.0.1"])
    job = await local.run(notebook={"path": nb})
    st = job["status"]
    assert st["phase"] == Phase.FAILED and st["reason"] == Reason.BUILD_FAILED, st
    assert phases(job) == [Phase.INITIALIZING, Phase.BUILDING, Phase.FAILED]
    assert "nbvalidation-no-such-package-xyz" in st["message"]
    # the installer's own error first, in whole words (issue 21), the command after it; the log keeps it all
    cause = st["message"].removeprefix("The environment build failed: ")
    assert cause.startswith(("error: No solution found", "× No solution found")), st["message"]
    assert "Because nbvalidation-no-such-package-xyz" in cause.split("(`uv pip install` exited with 1")[0], cause
    assert st["buildStatus"]["message"] == cause
    assert st["environment"].startswith("1 requirement"), st["environment"]
    assert st["buildStatus"]["phase"] == "Failed" and Path(st["buildStatus"]["logPath"]).is_file()
    assert not list(local.backend.job_dir(job).glob("run-*")), "a validation was started"
    assert "imageReference" not in st["buildStatus"]
    assert not list((local.backend.root / "envs").glob(".tmp-*")), "half-built environment left behind"
    evs = await local.events(job)
    assert [(e["reason"], e["type"]) for e in evs][-1] == (Reason.BUILD_FAILED, "Warning")


UV_LOG = """# environment abc (uv) from /usr/bin/python3
# requirements (requirements.txt beside the notebook): pandsa-not-a-real-pkg-xyz==0.0.1
$ /x/uv venv --quiet --python /usr/bin/python3 /data/envs/.tmp-abc
$ /x/uv pip install --python /data/envs/.tmp-abc/bin/python -r /data/envs/.tmp-abc.requirements.txt
Using Python 3.11.7 environment at: /data/envs/.tmp-abc
error: No solution found when resolving dependencies
  cause: Because pandsa-not-a-real-pkg-xyz was not found in the package registry and you require \
pandsa-not-a-real-pkg-xyz==0.0.1, we can conclude that your requirements are unsatisfiable.
"""


@pytest.mark.parametrize("log, starts", [
    (UV_LOG, "error: No solution found when resolving dependencies cause: Because pandsa-not-a-real-pkg-xyz was "
             "not found in the package registry"),
    ("$ uv pip install\nResolved 3 packages\n  × No solution found when resolving dependencies:\n"
     "  ╰─▶ Because foo was not found in the package registry and you require foo, we can conclude that your "
     "requirements are unsatisfiable.\n", "× No solution found when resolving dependencies: ╰─▶ Because foo"),
    ("$ py -m pip install\nCollecting foo==1\nERROR: Could not find a version that satisfies the requirement "
     "foo==1 (from versions: none)\nERROR: No matching distribution found for foo==1\n",
     "ERROR: Could not find a version that satisfies the requirement foo==1 (from versions: none) ERROR: No "
     "matching distribution found for foo==1 (`uv pip install` exited with 1; last lines: Collecting foo==1)"),
])
def test_a_failed_build_step_leads_with_the_installer_s_error(log, starts):
    from jupyter_nbvalidation.backends.build_failure import summary

    message = summary(log, "uv pip install", 1)
    assert message.startswith(starts), message
    assert "(`uv pip install` exited with 1" in message and "$ " not in message  # not the commands before it


def test_a_failed_build_step_s_message_is_cut_at_words_and_never_shows_a_secret():
    from jupyter_nbvalidation.backends.build_failure import CAUSE_LIMIT, summary

    long = "$ uv pip install\nerror: " + " ".join(f"word{i}" for i in range(400)) + \
        "\n  cause: the index https://alice:s3cr3t-value@pypi.example/simple refused s3cr3t-value\n"
    message = summary(long, "uv pip install", 2, ["s3cr3t-value"])
    cause = message.split(" (`uv pip install` exited with 2")[0]
    assert len(cause) <= CAUSE_LIMIT + 2 and cause.endswith(" …") and cause.split()[-2].startswith("word"), cause
    assert all(w.startswith(("word", "error:")) for w in cause.split()[:-1])  # whole words only
    short = summary("$ uv pip install\nerror: fetching https://alice:s3cr3t-value@pypi.example/simple failed\n",
                    "uv pip install", 2, ["s3cr3t-value"])
    assert short.startswith("error: fetching https://alice:***@pypi.example") and "s3cr3t" not in short, short
    no_cause = summary("$ python -m venv x\n" + "x" * 50 + " https://bob:s3cr3t-value@h/x s3cr3t-value\n",
                       "python -m venv", 1, ["s3cr3t-value"])
    assert "s3cr3t-value" not in no_cause and no_cause.startswith("`python -m venv` exited with 1: xxx"), no_cause


@pytest.mark.asyncio
async def test_environment_cache_is_content_addressed(local, notebook):
    nb1 = notebook("a/one.ipynb", ["import tabulate"])
    nb2 = notebook("b/two.ipynb", ["import tabulate", "1 + 1"])
    _write_reqs(local.root, "a", [PKG])
    _write_reqs(local.root, "b", ["# same requirement, other comment", PKG])
    first = await local.run(notebook={"path": nb1})
    second = await local.run(notebook={"path": nb2})
    assert first["status"]["phase"] == second["status"]["phase"] == Phase.SUCCEEDED
    ref1, ref2 = first["status"]["buildStatus"]["imageReference"], second["status"]["buildStatus"]["imageReference"]
    assert ref1 == ref2
    assert "Reused the cached environment" in second["status"]["buildStatus"]["message"]
    # when it was built: the lab says "reused (built 3 days ago)" instead of replaying the old log
    built_at = second["status"]["buildStatus"]["builtAt"]
    assert built_at == first["status"]["buildStatus"]["completionTime"] or built_at <= second["status"]["startTime"]
    assert "builtAt" not in first["status"]["buildStatus"]
    assert len(list((local.backend.root / "logs").glob("build-*.log"))) == 1  # built once
    # different requirements -> a different environment
    nb3 = notebook("c/three.ipynb", ["1"])
    _write_reqs(local.root, "c", [])
    third = await local.run(notebook={"path": nb3}, podConfig={"buildConfig": {"requirements": ["six"]}})
    assert third["status"]["phase"] == Phase.SUCCEEDED
    assert third["status"]["buildStatus"]["imageReference"] != ref1


@pytest.mark.asyncio
async def test_jobs_of_one_environment_submitted_at_once_share_one_build(tmp_path, notebook, monkeypatch):
    """Four jobs with the same requirements at the same instant: one build, and every
    job hears when it ends. Two builds used to start (both jobs passed the "is one
    running?" check across an await), and the job on the overwritten record was
    never told: it waited for the engine's resync (300 s) with its environment ready."""
    import jupyter_nbvalidation.environment.requirements as reqmod

    real = reqmod.for_build

    def slow_for_build(*a, **kw):  # the await every job of the key passes through, widened
        time.sleep(0.3)
        return real(*a, **kw)

    monkeypatch.setattr(reqmod, "for_build", slow_for_build)
    env = make_local(tmp_path, resync_period=3600)  # only the build's own notification ends a job
    await env.engine.start()
    try:
        nbs = [notebook(f"s/nb{i}.ipynb", ["import tabulate", f"print({i})"]) for i in range(4)]
        _write_reqs(env.root, "s", [PKG])
        names = [(await env.submit(notebook={"path": nb}))["metadata"]["name"] for nb in nbs]
        done = await asyncio.gather(*(env.engine.wait_for_terminal(n, 180) for n in names))
    finally:
        await env.engine.stop()
    assert [d["status"]["phase"] for d in done] == [Phase.SUCCEEDED] * 4, [d["status"].get("message") for d in done]
    assert len({d["status"]["buildStatus"]["imageReference"] for d in done}) == 1
    assert len(list((env.backend.root / "logs").glob("build-*.log"))) == 1  # built once


@pytest.mark.asyncio
async def test_venv_pip_strategy_and_requirements_file(local, notebook):
    nb = notebook("v/nb.ipynb", ["import tabulate; print('ok')"])
    (local.root / "v" / "deps").mkdir(parents=True)
    (local.root / "v" / "deps" / "reqs.txt").write_text(PKG + "\n")
    job = await local.run(notebook={"path": nb}, podConfig={"buildConfig": {
        "strategy": "venv", "requirementsFile": "deps/reqs.txt"}})
    assert job["status"]["phase"] == Phase.SUCCEEDED, job["status"]
    assert job["status"]["buildStatus"]["strategy"] == "venv"
    assert "pip install" in Path(job["status"]["buildStatus"]["logPath"]).read_text()


@pytest.mark.asyncio
async def test_failing_cell_results_and_executed_notebook(local, notebook):
    nb = notebook("f/nb.ipynb", ["# md\n# Title", "a = 1", "a / 0", "print('after')"])
    job = await local.run(notebook={"path": nb}, podConfig={"buildConfig": {"enabled": False}})
    st = job["status"]
    assert st["phase"] == Phase.FAILED and st["reason"] == Reason.VALIDATION_FAILED
    assert st["failedCellIndex"] == 2
    by_index = {r["cellIndex"]: r for r in st["results"]}
    assert by_index[0]["status"] == "Skipped" and by_index[1]["status"] == "Success"
    assert by_index[2]["status"] == "Failure" and by_index[2]["errorName"] == "ZeroDivisionError"
    assert "ZeroDivisionError" in by_index[2]["output"]
    assert by_index[3]["status"] == "Skipped"
    assert "ZeroDivisionError" in st["message"]
    executed = await local.backend.executed_notebook(job)
    assert executed["cells"][2]["outputs"][0]["output_type"] == "error"
    assert phases(job) == [Phase.INITIALIZING, Phase.VALIDATION_RUNNING, Phase.FAILED]


@pytest.mark.parametrize("module", ["yaml", "nbformat"])
@pytest.mark.asyncio
async def test_an_undeclared_package_the_server_has_is_not_importable(local, notebook, module):
    """The server's interpreter has yaml and nbformat; a built environment holds ipykernel and the
    declared requirements only, so importing them fails (as on Kubernetes: test_k8s_real_reuse.py)."""
    __import__(module)  # the server itself has it
    nb = notebook(f"undeclared-{module}/nb.ipynb", ["x = 1", f"import {module}"])
    _write_reqs(local.root, f"undeclared-{module}", [])
    job = await local.run(notebook={"path": nb})
    st = job["status"]
    assert phases(job) == [Phase.INITIALIZING, Phase.BUILDING, Phase.BUILD_COMPLETE,
                           Phase.VALIDATION_RUNNING, Phase.FAILED], st
    assert st["failedCellIndex"] == 1
    failed = {r["cellIndex"]: r for r in st["results"]}[1]
    assert failed["errorName"] == "ModuleNotFoundError" and module in failed["output"], failed
    # the verdict says where the environment came from and where to declare the module (issue 21)
    # (an empty requirements.txt beside it: the file is named, and that it declares nothing)
    assert st["environment"].startswith("no requirements to install from requirements.txt beside the notebook"), \
        st["environment"]
    first, hint = st["message"].split(". ", 1)
    assert f"No module named '{module}'" in first, st["message"]
    assert hint == (f"No module named '{module}': the environment was built from requirements.txt beside the "
                    f"notebook, which declares nothing to install; declare {module} there."), hint


@pytest.mark.asyncio
async def test_working_directory_is_the_notebook_folder(local, notebook):
    nb = notebook("data/nb.ipynb", ["print(open('input.csv').read())"])
    (local.root / "data" / "input.csv").write_text("a,b\n1,2\n")
    job = await local.run(notebook={"path": nb}, podConfig={"buildConfig": {"enabled": False}})
    assert job["status"]["phase"] == Phase.SUCCEEDED, job["status"]


@pytest.mark.asyncio
async def test_validation_timeout_kills_the_run(local, notebook):
    nb = notebook("slow/nb.ipynb", ["import time\ntime.sleep(120)"])
    job = await local.submit(notebook={"path": nb}, timeout="3s", podConfig={"buildConfig": {"enabled": False}})
    name = job["metadata"]["name"]
    await started_run(local.backend, job)
    pid = int(next(local.backend.job_dir(job).glob("run-*/pid")).read_text())
    done = await local.engine.wait_for_terminal(name, 60)
    assert done["status"]["phase"] == Phase.FAILED
    assert done["status"]["reason"] in (Reason.VALIDATION_TIMED_OUT, Reason.VALIDATION_FAILED)
    assert "3s" in done["status"]["message"] or "timed out" in done["status"]["message"].lower()
    await wait_async(lambda: pids_alive([pid]) == [], 30, "the run's processes to end")
    assert pids_alive([pid]) == []


@pytest.mark.asyncio
async def test_engine_validation_deadline(tmp_path, notebook):
    """The engine enforces the phase deadline itself (here shorter than the runner's)."""
    env = make_local(tmp_path, validation_timeout=2.0)
    await env.engine.start()
    try:
        nb = notebook("slow/nb.ipynb", ["import time\ntime.sleep(120)"])
        job = await env.run(notebook={"path": nb}, podConfig={"buildConfig": {"enabled": False}})
        assert job["status"]["reason"] == Reason.VALIDATION_TIMED_OUT, job["status"]
        assert "2s" in job["status"]["message"]
    finally:
        await env.engine.stop()


@pytest.mark.asyncio
async def test_build_timeout(local, notebook):
    nb = notebook("bt/nb.ipynb", ["1"])
    _write_reqs(local.root, "bt", ["six"])
    job = await local.run(notebook={"path": nb}, podConfig={"buildConfig": {"strategy": "venv", "timeout": "1s"}})
    st = job["status"]
    assert st["reason"] == Reason.BUILD_TIMED_OUT, st
    assert phases(job) == [Phase.INITIALIZING, Phase.BUILDING, Phase.FAILED]
    assert not list(local.backend.job_dir(job).glob("run-*"))
    await wait_async(lambda: not list((local.backend.root / "envs").glob(".tmp-*")), 30,
                     "the timed-out build's half-built environment to go")
    assert not list((local.backend.root / "envs").glob(".tmp-*"))


@pytest.mark.asyncio
async def test_cancel_running_validation(local, notebook):
    nb = notebook("c/nb.ipynb", ["import time\ntime.sleep(120)"])
    job = await local.submit(notebook={"path": nb}, podConfig={"buildConfig": {"enabled": False}})
    name = job["metadata"]["name"]
    await started_run(local.backend, job)
    pid = int(next(local.backend.job_dir(job).glob("run-*/pid")).read_text())
    await local.service.cancel(name)
    done = await local.engine.wait_for_terminal(name, 30)
    assert (done["status"]["phase"], done["status"]["reason"]) == (Phase.FAILED, Reason.CANCELLED)
    await wait_async(lambda: pids_alive([pid]) == [], 30, "the run's processes to end")
    assert pids_alive([pid]) == []
    evs = await local.events(done)
    assert reasons(evs)[-1] == Reason.CANCELLED


@pytest.mark.asyncio
async def test_restart_resumes_from_persisted_status(tmp_path, notebook):
    """Stop the engine mid-validation; a new engine on the same data dir finishes."""
    env = make_local(tmp_path)
    await env.engine.start()
    nb = notebook("r/nb.ipynb", ["import time\ntime.sleep(3)", "print('done')"])
    job = await env.submit(notebook={"path": nb}, podConfig={"buildConfig": {"enabled": False}})
    await started_run(env.backend, job)
    await env.engine.stop()
    again = make_local(tmp_path)
    await again.engine.start()
    try:
        done = await again.engine.wait_for_terminal(job["metadata"]["name"], 120)
        assert done["status"]["phase"] == Phase.SUCCEEDED, done["status"]
        assert phases(done) == [Phase.INITIALIZING, Phase.VALIDATION_RUNNING, Phase.SUCCEEDED]
        evs = await again.events(done)
        assert reasons(evs) == [Reason.ACCEPTED, Reason.VALIDATION_STARTED, Reason.VALIDATION_SUCCEEDED]
        assert len(list(again.backend.job_dir(job).glob("run-*"))) == 2  # the interrupted attempt was replaced
    finally:
        await again.engine.stop()


@pytest.mark.asyncio
async def test_golden_comparison_reported(local, notebook):
    golden = notebook("g/golden.ipynb", ["print(1.00001)", "print('same')"])
    nb = notebook("g/nb.ipynb", ["print(1.00002)", "print('changed')"])
    # execute the golden notebook first so it has outputs
    gjob = await local.run(notebook={"path": golden}, podConfig={"buildConfig": {"enabled": False}})
    executed = await local.backend.executed_notebook(gjob)
    (local.root / golden).write_text(json.dumps(executed))
    job = await local.run(notebook={"path": nb}, goldenNotebook={"path": golden},
                          comparisonConfig={"strategy": "normalized", "floatingPointTolerance": 0.001},
                          podConfig={"buildConfig": {"enabled": False}})
    st = job["status"]
    assert st["phase"] == Phase.FAILED, st
    cr = st["comparisonResult"]
    assert cr["result"] == "failed" and cr["mismatchedCells"] == 1 and cr["matchedCells"] == 1
    assert [d["cellIndex"] for d in cr["diffs"]] == [1]
    assert "same" in cr["diffs"][0]["expected"] and "changed" in cr["diffs"][0]["actual"]


@pytest.mark.asyncio
async def test_pod_config_env_reaches_the_kernel(local, notebook):
    nb = notebook("e/nb.ipynb", ["import os\nassert os.environ['NBV_GREETING'] == 'hi there', os.environ.get('NBV_GREETING')"])
    plain = await local.run(notebook={"path": nb}, podConfig={"buildConfig": {"enabled": False}})
    assert plain["status"]["phase"] == Phase.FAILED and plain["status"]["results"][0]["errorName"] == "KeyError"
    job = await local.run(notebook={"path": nb}, podConfig={"buildConfig": {"enabled": False},
                                                            "env": [{"name": "NBV_GREETING", "value": "hi there"}]})
    assert job["status"]["phase"] == Phase.SUCCEEDED, job["status"]


@pytest.mark.asyncio
async def test_comparison_config_of_the_upstream_crd(local, notebook):
    """ignoreTimestamps, customTimestampPatterns, ignoreOutputTypes and
    ignoreExecutionCount (the upstream operator's comparisonConfig fields) each
    change the verdict of a real run against a real golden notebook."""
    golden = notebook("u/golden.ipynb", [
        "import sys, uuid, datetime\nprint('run', uuid.uuid4().hex[:8])",
        "print('slow', file=sys.stderr)\nprint('ok')",
        "from IPython.display import HTML\nHTML(f'<b>{uuid.uuid4().hex}</b>')",
        "print(datetime.datetime.now().isoformat())",
    ])
    gjob = await local.run(notebook={"path": golden}, podConfig={"buildConfig": {"enabled": False}})
    executed = await local.backend.executed_notebook(gjob)
    (local.root / golden).write_text(json.dumps(executed))
    base = {"notebook": {"path": golden}, "goldenNotebook": {"path": golden},
            "podConfig": {"buildConfig": {"enabled": False}}}
    tolerant = {"customTimestampPatterns": [r"run [0-9a-f]{8}"], "ignoreOutputTypes": ["text/html"]}

    async def diffs(**cc) -> list[int]:
        job = await local.run(**base, comparisonConfig=cc)
        cr = job["status"]["comparisonResult"]
        assert (job["status"]["phase"] == Phase.SUCCEEDED) == (cr["result"] == "matched"), job["status"]
        return [d["cellIndex"] for d in cr["diffs"]]

    # random ids and HTML differ; the timestamp is sanitised by default
    assert await diffs() == [0, 2]
    assert await diffs(**tolerant) == []
    assert await diffs(**tolerant, ignoreTimestamps=False) == [3]

    executed["cells"][1]["execution_count"] = 7
    for out in executed["cells"][1]["outputs"]:
        if out.get("name") == "stderr":
            out["text"] = "fast\n"
    (local.root / golden).write_text(json.dumps(executed))
    assert await diffs(**tolerant) == [1]
    assert await diffs(**{**tolerant, "ignoreOutputTypes": ["text/html", "stream:stderr"]}) == []
    assert await diffs(**{**tolerant, "ignoreOutputTypes": ["text/html", "stream:stderr"]},
                       ignoreExecutionCount=False) == [1]


def test_no_process_leaks(tmp_path_factory):
    """Guard: kernels from this module's tests are gone (this pytest process's
    only: an xdist worker beside it runs kernels of its own)."""
    assert leftover_processes(tmp_path_factory.getbasetemp(), "ipykernel_launcher") == []


@pytest.mark.asyncio
@pytest.mark.parametrize("what", ["validation", "build"])
async def test_cancelling_a_job_does_not_swallow_the_callers_own_cancellation(tmp_path, what):
    """CI hung for good in a server's shutdown: a worker was cancelled (engine
    stop) while it waited, inside cancel_validation, for the run's task to end;
    the wait suppressed CancelledError, so the worker went back to its queue
    and the stop waited on it forever. The caller must end cancelled."""
    from jupyter_nbvalidation.backends.local import LocalBackend, _Build, _Run

    backend = LocalBackend(data_dir=str(tmp_path / "data"))
    stopping = asyncio.Event()
    inner = asyncio.create_task(slow_to_stop(stopping, cleanup=0.5))
    job = {"metadata": {"uid": "uid-1", "name": "job-1"}}
    if what == "validation":
        backend._runs["uid-1"] = _Run(task=inner, run_dir=tmp_path)
        caller = asyncio.create_task(backend.cancel_validation(job))
    else:
        rec = _Build(key="k", task=inner, log_path=str(tmp_path / "log"), waiters={"job-1"})
        backend._builds["k"] = rec
        backend._job_build["uid-1"] = rec
        caller = asyncio.create_task(backend.cancel_build(job))
    await asyncio.wait_for(stopping.wait(), 5)  # the caller now waits for the inner task
    caller.cancel()
    done, _ = await asyncio.wait({caller}, timeout=5)
    assert caller in done and caller.cancelled(), "the caller's cancellation was swallowed"
    await asyncio.wait({inner}, timeout=5)
    assert inner.cancelled()


@pytest.mark.asyncio
async def test_engine_stop_ends_a_worker_whose_cancellation_was_swallowed(tmp_path, notebook):
    """Defence in depth for the CI hang: whatever a worker awaits may swallow
    the stop's cancellation (two such places were found, asyncio.wait_for in
    Python 3.11 is another); the stop must end anyway."""
    env = make_local(tmp_path)
    inside, swallowed = asyncio.Event(), asyncio.Event()
    real_cancel = env.backend.cancel_validation

    async def swallowing_cancel(job):
        inside.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            swallowed.set()  # as the faulty code did: carry on as if nothing happened
        await real_cancel(job)

    env.backend.cancel_validation = swallowing_cancel
    await env.engine.start()
    nb = notebook("sw/nb.ipynb", ["import time\ntime.sleep(120)"])
    job = await env.submit(notebook={"path": nb}, podConfig={"buildConfig": {"enabled": False}})
    await started_run(env.backend, job)
    pid = int(next(env.backend.job_dir(job).glob("run-*/pid")).read_text())
    await env.service.cancel(job["metadata"]["name"])
    await asyncio.wait_for(inside.wait(), 30)
    stop = asyncio.create_task(env.engine.stop())
    done, _ = await asyncio.wait({stop}, timeout=30)
    assert swallowed.is_set()
    assert stop in done, "Engine.stop() waits forever for a worker that swallowed its cancellation"
    stop.result()
    await wait_async(lambda: pids_alive([pid]) == [], 30, "the run's processes to end")
    assert pids_alive([pid]) == []
