"""Runners forked by the fork server (real engine, SQLite, fork server, runners and
kernels): each run gets a new runner process of its own session with exactly its
own environment, the kernel stays a new interpreter, a dead fork server costs no
verdict, and nothing is left once the backend stops."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest
from conftest import make_local
from helpers import leftover_processes, started_run, wait, wait_async, write_notebook

import jupyter_nbvalidation.runner.hygiene as hygiene
from jupyter_nbvalidation.backends.local.forkserver import RunnerForkServer
from jupyter_nbvalidation.core.vocabulary import Phase
from jupyter_nbvalidation.runner.environment import forkserver_environment, runner_environment

# these are about the runner a cold run forks: the pool off (a pre-started kernel's runner is a new
# interpreter, started ahead: tests/backends/local/test_kernel_pool.py)
COLD = {"kernel_pool_size": 0}

NO_BUILD = {"buildConfig": {"enabled": False}}

# what the kernel sees of its runner (its parent) and of itself, printed as JSON
PROBE = r'''
import json, os

runner = os.getppid()
with open(f"/proc/{runner}/stat") as f:
    runner_parent = int(f.read().rsplit(")", 1)[1].split()[1])
status = dict(line.split(":\t", 1) for line in open(f"/proc/{runner}/status").read().splitlines() if ":\t" in line)
print(json.dumps({"runner": runner, "runner_signals": [status["SigIgn"].strip(), status["SigBlk"].strip()], "runner_sid": os.getsid(runner), "runner_parent": runner_parent,
                  "runner_cmdline": open(f"/proc/{runner}/cmdline", "rb").read().decode(errors="replace"),
                  "run_id": os.environ.get("NBVALIDATION_RUN_ID"), "home": os.environ.get("HOME"),
                  "tz": os.environ.get("TZ"), "lc": os.environ.get("LC_NBV_PROBE")}))
'''


# a kernel that waits for its flag file (in the root: a sandboxed kernel sees it) while
# the test looks at it and its runner from outside (runner_facts)
WAIT = """import os, time
t = time.monotonic()
while not os.path.exists({flag!r}) and time.monotonic() - t < 180:
    time.sleep(0.1)
"""


def runner_facts(base: Path, timeout: float = 120) -> dict:
    """PROBE's answer read from outside, for the kernel whose working directory is under
    ``base`` (a kernel in the sandbox, runner/sandbox.py, sees neither its runner nor its
    pid: the runner is the first process above it that is not the sandbox's launcher)."""
    base_s = str(base.resolve())

    def find() -> dict | None:
        for pid in (p for p in os.listdir("/proc") if p.isdigit()):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                environ = dict(v.split(b"=", 1) for v in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                               if b"=" in v)
                cwd = os.readlink(f"/proc/{pid}/cwd")
            except OSError:
                continue
            if b"ipykernel_launcher" not in cmdline or b"sandbox.py" in cmdline or not cwd.startswith(base_s):
                continue

            def parent_of(p: int) -> int:
                return int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1])

            runner = parent_of(int(pid))
            while b"runner/sandbox.py" in Path(f"/proc/{runner}/cmdline").read_bytes():
                runner = parent_of(runner)
            status = settled_status(runner)
            env = {k.decode(): v.decode() for k, v in environ.items()}
            return {"runner": runner, "runner_signals": [status["SigIgn"].strip(), status["SigBlk"].strip()],
                    "runner_sid": os.getsid(runner), "runner_parent": parent_of(runner),
                    "runner_cmdline": Path(f"/proc/{runner}/cmdline").read_bytes().decode(errors="replace"),
                    "run_id": env.get("NBVALIDATION_RUN_ID"), "home": env.get("HOME"), "tz": env.get("TZ"),
                    "lc": env.get("LC_NBV_PROBE")}
        return None

    return wait(find, timeout, f"a kernel working under {base}", interval=0.1)


# glibc blocks every signal, its own internal ones (33 and 34) too, in a thread for the few
# microseconds of a fork or posix_spawn; no settled thread has them blocked
_GLIBC_INTERNAL = (1 << 32) | (1 << 33)


def settled_status(pid: int, timeout: float = 10) -> dict:
    """/proc/<pid>/status, read again while the process is inside a fork or spawn (every
    signal blocked for that instant): a mask read then says nothing of the runner's own.
    A runner whose mask stays like that is returned as it is, so the comparison fails."""
    seen: dict = {}

    def settled() -> bool:
        seen["status"] = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                              if ":\t" in line)
        return not int(seen["status"]["SigBlk"], 16) & _GLIBC_INTERNAL

    try:
        wait(settled, timeout, f"{pid}'s signal mask outside a fork", interval=0.01)
    except AssertionError:  # still blocked: returned as it is
        pass
    return seen["status"]


async def run_probed(env, rel: str, base: Path) -> tuple[dict, dict]:
    """Run the notebook ``rel`` (written by this: it waits for its flag) and read what
    PROBE would print about its runner from outside, while it runs."""
    flag = env.root / f"{rel}.go"
    flag.unlink(missing_ok=True)
    write_notebook(env.root / rel, [WAIT.format(flag=str(flag))])
    job = await env.submit(notebook={"path": rel}, podConfig=NO_BUILD)
    try:
        probe = await asyncio.to_thread(runner_facts, base)
    finally:
        flag.write_text("")
    done = await env.engine.wait_for_terminal(job["metadata"]["name"], env.run_timeout)
    await env.engine.recorder.flush()
    return done, probe


def _probe_output(executed: dict) -> dict:
    for out in executed["cells"][0]["outputs"]:
        if out.get("name") == "stdout":
            text = out["text"]
            return json.loads("".join(text) if isinstance(text, list) else text)
    raise AssertionError(executed["cells"][0]["outputs"])


def _alive(pid: int) -> bool:
    return hygiene.live_start_time(pid) is not None


@pytest.mark.asyncio
async def test_each_run_is_a_new_forked_runner_and_nothing_is_left(tmp_path, notebook):
    env = make_local(tmp_path, backend_kw=COLD)
    await env.engine.start()
    seen = []
    try:
        for _ in range(2):
            done, probe = await run_probed(env, "p/nb.ipynb", tmp_path)
            assert done["status"]["phase"] == Phase.SUCCEEDED, done["status"].get("message")
            seen.append(probe)
        server = env.backend._forkserver
        assert server is not None and server.proc is not None and server.broken is None
        zygote = server.proc.pid
        assert _alive(zygote)
        env.backend.fork_runners = False  # the same run by a new interpreter, to compare with
        done, execd = await run_probed(env, "p/nb.ipynb", tmp_path)
        assert done["status"]["phase"] == Phase.SUCCEEDED, done["status"].get("message")
    finally:
        await env.engine.stop()
    first, second = seen
    # forked by the fork server, each its own session leader, one per run
    assert first["runner_parent"] == second["runner_parent"] == zygote
    assert "jupyter_nbvalidation.runner.forkserver" in first["runner_cmdline"]
    assert first["runner"] != second["runner"] and zygote not in (first["runner"], second["runner"])
    assert first["runner_sid"] == first["runner"] and second["runner_sid"] == second["runner"]
    # each run its own identity and private folders
    assert first["run_id"] and second["run_id"] and first["run_id"] != second["run_id"]
    assert first["home"] != second["home"]
    # signals ignored and blocked as in a runner that is a new interpreter (none of the fork server's)
    assert first["runner_signals"] == second["runner_signals"] == execd["runner_signals"]
    assert "forkserver" not in execd["runner_cmdline"]
    # they end soon after stop(); on a loaded machine later than 0.2 s
    await wait_async(lambda: not any(_alive(p) for p in (zygote, first["runner"], second["runner"])), 10,
                     "the fork server and its runners to end", interval=0.1)
    assert not any(_alive(p) for p in (zygote, first["runner"], second["runner"]))
    assert env.backend._forkserver is None


def _runner_argv(nb: Path, out: Path) -> list[str]:
    return [str(nb), "--result", str(out / "result.json"), "--executed", str(out / "executed.ipynb")]


@pytest.mark.asyncio
async def test_a_run_sees_only_its_own_environment(tmp_path):
    """os.environ is replaced whole in the forked runner, not merged: a variable the
    fork server was started with (and one run had) is not there for a run without it."""
    nb = write_notebook(tmp_path / "nb.ipynb", [PROBE])
    base = {k: v for k, v in os.environ.items() if k not in ("TZ", "LC_NBV_PROBE")}
    planted = {"TZ": "Etc/GMT+3", "LC_NBV_PROBE": "one"}
    server = RunnerForkServer(env=forkserver_environment(source=base | planted), cwd=str(tmp_path / "fs"),
                              wrap=lambda a: a, log_path=str(tmp_path / "fs.log"))
    seen = []
    try:
        for i, extra in enumerate((planted, {})):
            out = tmp_path / f"run{i}"
            out.mkdir()
            run_id = f"probe{i}{os.getpid()}"
            env = runner_environment(str(out / "runner"), run_id, source=base | extra)
            with open(out / "runner.log", "w") as log:
                runner = await server.spawn(_runner_argv(nb, out), env, str(tmp_path), log.fileno())
            assert runner is not None, server.broken
            assert await runner.wait() == 0, (out / "runner.log").read_text()[-2000:]
            probe = _probe_output(json.loads((out / "executed.ipynb").read_text()))
            assert probe["run_id"] == run_id
            seen.append(probe)
    finally:
        await server.stop()
    assert (seen[0]["tz"], seen[0]["lc"]) == ("Etc/GMT+3", "one")
    assert (seen[1]["tz"], seen[1]["lc"]) == (None, None)


@pytest.mark.asyncio
async def test_a_spawn_whose_caller_is_cancelled_leaves_no_runner(tmp_path):
    """Cancelled after the request went out: the runner forked for it anyway is
    killed when its pid arrives, never left running with nobody waiting for it."""
    nb = write_notebook(tmp_path / "nb.ipynb", ["import time\ntime.sleep(60)"])
    server = RunnerForkServer(env=forkserver_environment(), cwd=str(tmp_path / "fs"), wrap=lambda a: a,
                              log_path=str(tmp_path / "fs.log"))
    try:
        assert (await server.spawn(["--help"], dict(os.environ), str(tmp_path), os.open(os.devnull, os.O_WRONLY))
                ) is not None  # up and serving
        out = tmp_path / "run"
        out.mkdir()
        env = runner_environment(str(out / "runner"), f"cancelled{os.getpid()}")
        with open(out / "runner.log", "w") as log:
            caller = asyncio.ensure_future(server.spawn(_runner_argv(nb, out), env, str(tmp_path), log.fileno()))
            await wait_async(lambda: server._pending, 10, "the request on its way", interval=0)
            assert server._pending
            caller.cancel()
            with pytest.raises(asyncio.CancelledError):
                await caller
        # the forked runner is killed and its end reported
        await wait_async(lambda: not server._runners and not server._pending, 10,
                         "the forked runner's end to be reported", interval=0.1)
        assert not server._runners and not server._pending, (
            {p: (_alive(p), open(f"/proc/{p}/cmdline", "rb").read() if _alive(p) else None) for p in server._runners},
            (out / "runner.log").read_text()[-500:])
        assert not (out / "result.json").exists()
    finally:
        await server.stop()


@pytest.mark.asyncio
async def test_a_killed_fork_server_costs_no_verdict(tmp_path, notebook):
    """SIGKILL the fork server while its runner works: the run still ends with its
    verdict (watched by pid), and the next run gets a new fork server."""
    env = make_local(tmp_path, backend_kw=COLD)
    await env.engine.start()
    try:
        nb = notebook("k/nb.ipynb", ["import time\ntime.sleep(3)", "print('done')"])
        job = await env.submit(notebook={"path": nb}, podConfig=NO_BUILD)
        name = job["metadata"]["name"]
        await started_run(env.backend, job)
        first = env.backend._forkserver.proc.pid
        os.kill(first, signal.SIGKILL)
        done = await env.engine.wait_for_terminal(name, 120)
        assert done["status"]["phase"] == Phase.SUCCEEDED, done["status"].get("message")
        again = await env.run(notebook={"path": nb}, podConfig=NO_BUILD)
        assert again["status"]["phase"] == Phase.SUCCEEDED, again["status"].get("message")
        assert env.backend._forkserver.proc.pid != first
    finally:
        await env.engine.stop()


@pytest.mark.asyncio
async def test_cancel_stops_a_forked_runner_and_its_kernel(tmp_path, notebook):
    env = make_local(tmp_path, backend_kw=COLD)
    await env.engine.start()
    try:
        nb = notebook("c/nb.ipynb", ["import time\ntime.sleep(120)"])
        job = await env.submit(notebook={"path": nb}, podConfig=NO_BUILD)
        name = job["metadata"]["name"]
        await started_run(env.backend, job)
        run_dir = next(env.backend.job_dir(job).glob("run-*"))
        pid = int((run_dir / "pid").read_text())
        run_id = (run_dir / "run-id").read_text()
        # the kernel is up: a process carries the run's id
        await wait_async(lambda: hygiene.find(run_id), 10, "the run's kernel to start")
        assert hygiene.find(run_id)
        await env.service.cancel(name)
        done = await env.engine.wait_for_terminal(name, 30)
        assert done["status"]["phase"] == Phase.FAILED
        await wait_async(lambda: not _alive(pid) and hygiene.find(run_id) == [], 30, "the runner and its kernel to end")
        assert not _alive(pid) and hygiene.find(run_id) == []
    finally:
        await env.engine.stop()


@pytest.mark.asyncio
async def test_fork_runners_off_starts_a_new_interpreter(tmp_path, notebook):
    env = make_local(tmp_path, backend_kw=COLD)
    env.backend.fork_runners = False
    await env.engine.start()
    try:
        done, probe = await run_probed(env, "x/nb.ipynb", tmp_path)
        assert done["status"]["phase"] == Phase.SUCCEEDED, done["status"].get("message")
    finally:
        await env.engine.stop()
    assert env.backend._forkserver is None
    assert "jupyter_nbvalidation.runner" in probe["runner_cmdline"]
    assert "forkserver" not in probe["runner_cmdline"] and "notebook.ipynb" in probe["runner_cmdline"]


@pytest.mark.asyncio
async def test_a_fork_server_that_cannot_start_falls_back(tmp_path, notebook, monkeypatch):
    """A fork server that dies before it is ready: the run starts a new interpreter."""
    env = make_local(tmp_path, backend_kw=COLD)
    await env.engine.start()
    try:
        real = RunnerForkServer.__init__

        def broken(self, **kw):
            real(self, **kw)
            self.wrap = lambda argv: [sys.executable, "-c", "raise SystemExit(3)"]

        monkeypatch.setattr(RunnerForkServer, "__init__", broken)
        done, probe = await run_probed(env, "f/nb.ipynb", tmp_path)
        assert done["status"]["phase"] == Phase.SUCCEEDED, done["status"].get("message")
        assert env.backend._forkserver.broken
        assert "jupyter_nbvalidation.runner" in probe["runner_cmdline"]
        assert "forkserver" not in probe["runner_cmdline"]
    finally:
        await env.engine.stop()


def test_no_fork_server_is_left(tmp_path_factory):
    """Guard: the fork servers of this module's tests are gone (this pytest
    process's only: other checkouts' runs and xdist workers have their own)."""
    assert leftover_processes(tmp_path_factory.getbasetemp(), "jupyter_nbvalidation.runner.forkserver") == []
