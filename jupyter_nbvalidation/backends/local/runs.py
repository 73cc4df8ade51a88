"""Validation runs of the local backend: one run folder per attempt (``run-<n>``) and
its state machine (new, foreign, result, failed, dead), the runner (forked by the fork
server or a new interpreter), progress from its log, cancel and cleanup."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import jupyter_nbvalidation.backends.local.seal as seal
import jupyter_nbvalidation.backends.workcopy as workcopy
import jupyter_nbvalidation.environment.requirements as reqmod
import jupyter_nbvalidation.runner.hygiene as hygiene
import jupyter_nbvalidation.verdict.cache as verdict_cache
from jupyter_nbvalidation.backends.base import FAILED, RUNNING, SUCCEEDED, Fault, Notice, Observation
from jupyter_nbvalidation.backends.local.disk import (
    ADOPT_POLL,
    ENV_MARKER,
    PROGRESS_NOTIFY,
    PROGRESS_POLL,
    RUNNER_COMMAND,
    _attempt_of,
    _observation_from_result,
    _progress_of,
    _read_json,
    _Run,
    _tail,
    _terminate,
    _write_json_atomic,
    folder_refusal,
    owner_alive,
    process_record,
    same_process_alive,
)
from jupyter_nbvalidation.backends.local.faults import fault_of_exit, fault_of_oserror, is_no_space
from jupyter_nbvalidation.backends.local.forkserver import ForkedRunner, RunnerForkServer
from jupyter_nbvalidation.backends.local.pool import Slot, SlotSpec
from jupyter_nbvalidation.backends.local.state import LocalState
from jupyter_nbvalidation.core.documents import Job
from jupyter_nbvalidation.core.model import (
    ROOT_ANNOTATION,
    WORKDIR_ANNOTATION,
    EventReason,
    isotime,
    validation_attempt,
)
from jupyter_nbvalidation.core.priority import deprioritize
from jupyter_nbvalidation.core.tasks import cancel_and_wait
from jupyter_nbvalidation.runner.environment import forkserver_environment, runner_environment
from jupyter_nbvalidation.runner.limits import fmt_bytes
from jupyter_nbvalidation.secrets.registry import SecretNotAvailable, SecretRegistry
from jupyter_nbvalidation.spec.checks import parse_quantity
from jupyter_nbvalidation.spec.plan import ValidationPlan


class _EnvChanged(Exception):
    """The environment was found changed right before the kernel would start in it (seal.py)."""

    def __init__(self, changed: list[str]) -> None:
        super().__init__(seal.describe(changed))
        self.changed = changed


class RunsRoom(LocalState):
    """A room of LocalBackend (backend.py): the state it uses is declared by LocalState (state.py)."""

    async def ensure_validation(self, job: Job, reference: str | None, plan: ValidationPlan) -> Observation:
        uid = job["metadata"]["uid"]
        attempt = validation_attempt(job)
        run = self._runs.get(uid)
        if run is not None and run.attempt < attempt:  # a retry: the failed attempt is discarded
            await self.cancel_validation(job)
            run = None
        if run is not None and run.task.done() and run.adopted and run.task.result().again:
            del self._runs[uid]  # the adopted run will never finish: this engine runs it again
            run = None
        if run is not None:
            if run.task.done():
                return run.task.result()
            return Observation(RUNNING, message="Validating.", started_at=run.started_at, reference=reference,
                               progress=_progress_of(run), notices=list(run.notices))

        try:
            run_dir, state = await asyncio.to_thread(self._locate, job, attempt)
        except OSError as e:
            if not is_no_space(e):
                raise
            return Observation(FAILED, reference=reference, finished_at=isotime(), message=str(e),
                               fault=fault_of_oserror(e, self.job_dir(job)))
        if state == "result":
            result = _read_json(run_dir / "result.json") or {}
            meta = _read_json(run_dir / "run.json") or {}
            return _observation_from_result(result, meta.get("startTime"), meta.get("completionTime"), reference,
                                            run_dir)
        if state == "foreign":
            # another engine's run (a follower that started it while it led, or a
            # killed holder's runner still at work): watch it, never start a second one
            # (task=None: its task is made next, from the record, which it fills)
            run = _Run(task=None, run_dir=run_dir, name=job["metadata"]["name"], adopted=True,  # type: ignore[arg-type]
                       attempt=attempt)
            run.task = asyncio.get_running_loop().create_task(self._adopt(job, run, reference))
            self._runs[uid] = run
            return Observation(RUNNING, message="Validating (a run another server or CLI started).",
                               reference=reference)

        if reference is not None:
            if not await asyncio.to_thread((Path(reference) / ENV_MARKER).is_file):
                return Observation(FAILED, reference=reference, finished_at=isotime(),
                                   message=f"The environment recorded at BuildComplete ({reference}) is missing "
                                           "or incomplete; refusing to validate elsewhere.")
            python = str(Path(reference) / "bin" / "python")
        else:
            python = self.unbuilt_python
        await asyncio.to_thread(self._touch_env, reference)
        await self._record_environment(job, python, reference)
        # task=None: its task is made next, from the record (which it fills)
        run = _Run(task=None, run_dir=run_dir, name=job["metadata"]["name"], attempt=attempt)  # type: ignore[arg-type]
        run.task = asyncio.get_running_loop().create_task(self._validate(job, run, python, reference, plan))
        self._runs[uid] = run
        return Observation(RUNNING, message="Validation queued.", reference=reference)

    def _run_state(self, run_dir: Path) -> str:
        """What an attempt on disk is: ``result`` (a verdict to read), ``foreign``
        (another engine's, still to be waited for), ``failed`` (its runner ended
        without a result and its owner recorded the exit), ``dead`` (no verdict
        will come: its runner and owner are gone, or it was interrupted)."""
        interrupted = (run_dir / "interrupted").exists()
        owner = _read_json(run_dir / "owner.json")
        runner = (owner or {}).get("runner")
        if same_process_alive(runner) and not self._mine(owner):
            return "foreign"  # wait for it even when interrupted: never two runners at once
        if not interrupted and (run_dir / "result.json").is_file():
            if _read_json(run_dir / "result.json") is not None:
                return "result"
            if same_process_alive(runner):
                return "foreign"  # being written
        if interrupted:
            return "dead"
        if self._mine(owner) or not owner_alive(owner):
            return "dead"  # ours but not in memory, or its engine is gone: it will not finish
        if (run_dir / "run.json").is_file():
            return "failed"  # its (live) owner saw the runner exit without a result
        return "foreign"  # its live owner is about to start it, or to record how it ended

    def _locate(self, job: Job, attempt: int = 0) -> tuple[Path, str]:
        """The newest run folder and its state (see ``_run_state``), or a new run
        folder (state ``new``) owned by this engine when there is none to wait for.
        A run of an earlier attempt (``model.validation_attempt``: the engine
        retried after a fault) is not waited for: retry n gets a fresh folder
        (one still running for another engine is, never two runners at once)."""
        runs = sorted(self.job_dir(job).glob("run-*"), key=lambda p: int(p.name.split("-")[1]))
        if runs:
            state = self._run_state(runs[-1])
            if state == "foreign" or (state != "dead" and _attempt_of(runs[-1]) >= attempt):
                return runs[-1], state
        n = int(runs[-1].name.split("-")[1]) + 1 if runs else 1
        run_dir = self.job_dir(job) / f"run-{n}"
        run_dir.mkdir(parents=True)  # exclusive: two engines never make the same attempt
        _write_json_atomic(run_dir / "owner.json", self.owner())
        if attempt:
            (run_dir / "attempt").write_text(str(attempt))
        return run_dir, "new"

    async def _adopt(self, job: Job, run: _Run, reference: str | None) -> Observation:
        """Wait for another engine's run to end, then read what it left."""
        name = job["metadata"]["name"]
        last_notify = 0.0
        try:
            while True:
                if await self._read_progress(run, run.run_dir / "runner.log") and \
                        time.monotonic() - last_notify >= PROGRESS_NOTIFY:
                    last_notify = time.monotonic()
                    self._notify(name)
                state = await asyncio.to_thread(self._run_state, run.run_dir)
                if state == "result":
                    result = await asyncio.to_thread(_read_json, run.run_dir / "result.json")
                    meta = await asyncio.to_thread(_read_json, run.run_dir / "run.json") or {}
                    await self._read_progress(run, run.run_dir / "runner.log")
                    obs = _observation_from_result(result or {}, meta.get("startTime"),
                                                   meta.get("completionTime"), reference, run.run_dir)
                    obs.progress = _progress_of(run)
                    return obs
                if state == "failed":
                    ended = await asyncio.to_thread(_read_json, run.run_dir / "run.json") or {}
                    tail = await asyncio.to_thread(_tail, str(run.run_dir / "runner.log"), 8)
                    fault = await asyncio.to_thread(fault_of_exit, ended.get("exitCode"), tail, run.run_dir)
                    return Observation(FAILED, started_at=ended.get("startTime"),
                                       finished_at=ended.get("completionTime"), reference=reference,
                                       message=fault.cause, fault=fault)
                if state == "dead":
                    return Observation(RUNNING, reference=reference, again=True)
                await asyncio.sleep(ADOPT_POLL)
        finally:
            self._notify(name)

    def _record_runner(self, run: _Run, pid: int) -> None:
        (run.run_dir / "pid").write_text(str(pid))
        _write_json_atomic(run.run_dir / "owner.json", {**self.owner(), "runner": process_record(pid)})

    def _working_folder(self, job: Job) -> tuple[str | None, str | None, str | None]:
        """(folder, root, snapshot) the attempt's working copy is made from: the notebook's
        folder (under a mirror of the root) or, with spec.inputFiles, the job's snapshot
        of the files it named (an older job without the folder recorded: its input folder)."""
        inp = self.job_dir(job) / "input"
        annotations = job["metadata"].get("annotations") or {}
        folder = None if job["spec"].get("inputFiles") else annotations.get(WORKDIR_ANNOTATION)
        if folder:
            return folder, annotations.get(ROOT_ANNOTATION), None
        return None, None, str(inp / "inputs" if job["spec"].get("inputFiles") else inp)

    def runner_argv(self, job: Job, run_dir: Path, python: str, plan: ValidationPlan,
                    work: Path | None = None) -> list[str]:
        """The runner's command: where things are here, then what the plan asks (``plan.runner_args``).
        ``work``: where the kernel's copy and scratch folders are (a pre-started kernel's slot), else run_dir."""
        inp = self.job_dir(job) / "input"
        work = work or run_dir
        # the kernel works in the attempt's own copy of its folder (workcopy.prepare makes it)
        folder, root, snapshot = self._working_folder(job)
        cwd = workcopy.working_path(work, folder=folder, root=root, snapshot=snapshot)
        argv = [*RUNNER_COMMAND, str(inp / "notebook.ipynb"),
                "--python", python, "--cwd", cwd,
                "--result", str(run_dir / "result.json"), "--executed", str(run_dir / "executed.ipynb"),
                "--progress"]
        if plan.golden:
            argv += ["--golden", str(inp / "golden.ipynb")]
        argv += plan.runner_args
        if plan.kernel_env:  # for the kernel only, never the runner's own environment
            argv += ["--kernel-env-file", str(run_dir / "kernel-env.json")]
        if plan.credentials:  # the secrets' values: read by the runner, then removed (runner/masking.py)
            argv += ["--secrets-file", str(run_dir / SECRETS_FILE)]
        if self._sandbox is not None and self._sandbox["enabled"]:
            argv += ["--sandbox", str(run_dir / "sandbox.json")]
        if self._bounds_config(job, work):
            argv += ["--bounds", str(run_dir / "bounds.json")]
        real_root = (job["metadata"].get("annotations") or {}).get(ROOT_ANNOTATION)
        if real_root:  # what the kernel reads under the root, for the verdict cache (verdict/readset.py)
            argv += ["--read-set", real_root, *([os.path.join(work, workcopy.TREE)] if folder else [])]
        return argv

    async def _take_slot(self, job: Job, run: _Run, python: str, plan: ValidationPlan,
                         sandboxed: bool) -> Slot | None:
        """A pre-started kernel started exactly as this run's would be (pool.py), or None;
        the run then carries its run id (by which all its processes are found)."""
        if self._pool is None or not self._pool.enabled or plan.credentials:  # (secrets: a kernel of its own)
            return None
        spec = SlotSpec.of(python, self._sandbox_config(job, run.run_dir) if sandboxed else None,
                           self._bounds_config(job, run.run_dir) or None, dict(plan.kernel_env))
        slot = await self._pool.take(spec)
        if slot is not None:
            run.run_id = slot.run_id
        return slot

    def _bounds_config(self, job: Job, run_dir: Path) -> dict[str, Any]:
        """The run's bounds (runner --bounds, runner/limits.py): the job's memory limit, this
        backend's disk budget over the attempt's working copy and scratch folders."""
        out: dict[str, Any] = {}
        memory = ((job["spec"].get("podConfig") or {}).get("resources") or {}).get("limits", {}).get("memory")
        if memory is not None:
            out["memory"] = {"bytes": int(parse_quantity(memory)), "text": str(memory),
                             "field": "podConfig.resources.limits.memory"}
        if self.run_disk_limit > 0:
            out["disk"] = {"bytes": self.run_disk_limit, "text": fmt_bytes(self.run_disk_limit),
                           "field": "LocalBackend.run_disk_limit",
                           "paths": [str(run_dir / workcopy.TREE), str(run_dir / workcopy.SCRATCH)]}
        return out

    async def _validate(self, job: Job, run: _Run, python: str, reference: str | None,
                        plan: ValidationPlan) -> Observation:
        name = job["metadata"]["name"]
        try:
            try:
                obs = await self._validate_in(job, run, python, reference, plan)
            except _EnvChanged as found:  # never run in: retired, rebuilt, validated in the fresh one
                obs = await self._rebuild_then_validate(job, run, python, reference, plan, found.changed)
            obs.notices = [*obs.notices, *run.notices]
            if self.keep_outputs_dir:
                await self._keep_outputs(job, run.run_dir)
            # the runner and its kernel have ended and the result is read: the attempt's
            # copy of the folder goes now (cancel, cleanup and the GC remove what is left otherwise)
            with contextlib.suppress(OSError):
                await asyncio.to_thread(workcopy.remove, run.run_dir)
            return obs
        except OSError as e:  # our own writes (the run folder, its log, its files): not the notebook's
            fault = fault_of_oserror(e, run.run_dir)
            return Observation(FAILED, started_at=run.started_at, finished_at=isotime(), reference=reference,
                               message=fault.cause, fault=fault)
        finally:
            self._notify(name)

    async def _validate_in(self, job: Job, run: _Run, python: str, reference: str | None,
                           plan: ValidationPlan) -> Observation:
        async with self._run_slots:
            run.started_at = isotime()
            # the last look before the kernel starts (a job may have waited for its slot meanwhile)
            changed = await asyncio.to_thread(self._env_changes, Path(reference).name) if reference else []
            if changed:
                raise _EnvChanged(changed)  # (the run slot freed: a rebuild may take minutes)
            sandboxed = (await self.sandbox_state())["enabled"]
            slot = await self._take_slot(job, run, python, plan, sandboxed)
            argv = self.runner_argv(job, run.run_dir, python, plan, slot.folder if slot else None)
            log_path = run.run_dir / "runner.log"

            def setup(slot: Slot | None) -> dict[str, str]:
                # a fresh copy of the folder the kernel works in (the user's is never
                # written); the copies of this job's earlier attempts go
                for earlier in self.job_dir(job).glob("run-*"):
                    if earlier != run.run_dir:
                        workcopy.remove(earlier)
                folder, root, snapshot = self._working_folder(job)

                def prepare(where: Path) -> str:
                    return workcopy.prepare(where, folder=folder, root=root, snapshot=snapshot,
                                            skip=self.private_paths(), max_files=self.max_folder_files,
                                            max_bytes=self.max_folder_bytes)

                work = run.run_dir
                if slot is not None:  # into the folder the pre-started kernel runs in (pool.py)
                    assert self._pool is not None
                    work = slot.folder
                    self._pool.place(slot, run.run_dir, prepare)
                else:
                    prepare(run.run_dir)
                # the runner's environment: an allow-list, nothing of this server's
                # (token, runtime/data dirs, IPython profile, PYTHONPATH); the job's
                # podConfig.env goes to the kernel only, through a file
                kernel_env = dict(plan.kernel_env)
                if kernel_env:
                    (run.run_dir / "kernel-env.json").write_text(json.dumps(kernel_env), encoding="utf-8")
                if plan.credentials:
                    write_secrets_file(run.run_dir / SECRETS_FILE, self.secrets, plan.credentials)
                (run.run_dir / "run-id").write_text(run.run_id)
                bounds = self._bounds_config(job, work)
                if bounds:
                    (run.run_dir / "bounds.json").write_text(json.dumps(bounds), encoding="utf-8")
                if sandboxed:  # its /tmp and /var/tmp: fresh folders of this attempt, on disk
                    if slot is None:
                        workcopy.make_scratch(run.run_dir)
                    (run.run_dir / "sandbox.json").write_text(json.dumps(self._sandbox_config(job, work)),
                                                              encoding="utf-8")
                return runner_environment(str(run.run_dir / "runner"), run.run_id)

            try:
                try:
                    env = await asyncio.to_thread(setup, slot)
                except BaseException:
                    if slot is not None and self._pool is not None:  # never used: its kernel stopped
                        self._pool.discard(slot)
                    raise
            except SecretNotAvailable as e:  # the server's secret cannot be read now: not the notebook's
                await asyncio.to_thread(workcopy.remove, run.run_dir)
                return Observation(FAILED, started_at=run.started_at, finished_at=isotime(), reference=reference,
                                   message=str(e), fault=Fault(f"The job's podConfig.credentials cannot be read on "
                                                               f"the server: {e}", transient=False))
            except verdict_cache.FolderTooLarge as e:  # it grew since submit checked it
                await asyncio.to_thread(workcopy.remove, run.run_dir)
                folder = self._working_folder(job)[0] or "?"
                return Observation(FAILED, started_at=run.started_at, finished_at=isotime(), reference=reference,
                                   message=folder_refusal(folder, e, self.max_folder_files, self.max_folder_bytes))
            with open(log_path, "w", encoding="utf-8") as log:
                proc: asyncio.subprocess.Process | ForkedRunner | None = None
                if slot is not None and self._pool is not None:
                    where, root, snapshot = self._working_folder(job)
                    cwd = workcopy.working_path(slot.folder, folder=where, root=root, snapshot=snapshot)
                    run.proc = slot.proc  # from now on a cancel stops it
                    if await self._pool.bind(slot, argv[len(RUNNER_COMMAND):], cwd, str(log_path)):
                        proc = slot.proc
                    else:  # the slot failed before any cell: this run starts its own kernel, in a fresh copy
                        run.proc = None
                        await asyncio.to_thread(workcopy.remove, run.run_dir)
                        run.run_id = uuid.uuid4().hex
                        argv = self.runner_argv(job, run.run_dir, python, plan)
                        env = await asyncio.to_thread(setup, None)
                if proc is None:
                    proc = await self._start_runner(argv, env, log.fileno())
                run.proc = proc
                deprioritize(proc.pid, self.niceness)
                await asyncio.to_thread(self._record_runner, run, proc.pid)
                watcher = asyncio.get_running_loop().create_task(self._watch_progress(run, log_path))
                try:
                    code = await proc.wait()
                except asyncio.CancelledError:
                    hygiene.kill_group(proc.pid, signal.SIGKILL)
                    await asyncio.shield(asyncio.to_thread(hygiene.kill_all, run.run_id))
                    raise
                finally:
                    await cancel_and_wait(watcher)
            with contextlib.suppress(OSError):  # the runner removes it once read; never left behind
                await asyncio.to_thread(os.unlink, run.run_dir / SECRETS_FILE)
            await self._read_progress(run, log_path)  # the last records: done/total as the run ended
            # the runner stops what its kernel started; if the runner itself was
            # killed, what it left (the kernel, daemons) is stopped here
            await asyncio.to_thread(hygiene.kill_all, run.run_id)
            finished = isotime()
            result = await asyncio.to_thread(_read_json, run.run_dir / "result.json")
            await asyncio.to_thread(
                (run.run_dir / "run.json").write_text,
                json.dumps({"startTime": run.started_at, "completionTime": finished, "exitCode": code,
                            "python": python, "argv": argv}))
            if result is None:
                tail = await asyncio.to_thread(_tail, str(log_path), 8)
                fault = await asyncio.to_thread(fault_of_exit, code, tail, run.run_dir)
                return Observation(FAILED, started_at=run.started_at, finished_at=finished, reference=reference,
                                   message=fault.cause, progress=_progress_of(run), fault=fault)
            obs = _observation_from_result(result, run.started_at, finished, reference, run.run_dir)
            obs.progress = _progress_of(run)
            return obs

    async def _rebuild_then_validate(self, job: Job, run: _Run, python: str, reference: str | None,
                                     plan: ValidationPlan, changed: list[str]) -> Observation:
        """The environment was found changed (seal.py) after this job's BuildComplete, right
        before its kernel started: never run in. Retired, built again from the job's requirements
        at the same reference (its key's: the one recorded at BuildComplete) and the job validated
        in the fresh one, which is checked the same way; the EnvironmentRetired notice says so.
        Bounded: a rebuild that fails, or a rebuilt one found changed too, is infrastructure, named.
        While other jobs' kernels use it, it is not pulled from under them: a transient fault
        (the engine retries; the last of them to find it changed retires and rebuilds it)."""
        key = Path(reference or "").name
        found = (f"The environment recorded at BuildComplete ({reference}) was found changed since it was built "
                 f"({seal.describe(changed)}: a run of another notebook wrote there) right before this job's "
                 "kernel started")

        def failed(cause: str, transient: bool = False) -> Observation:
            return Observation(FAILED, started_at=run.started_at, reference=reference, finished_at=isotime(),
                               fault=Fault(f"{found}{cause}", transient=transient))

        users = await self._env_users(key, job["metadata"]["uid"])  # its kernels, and the jobs queued for it
        if users:
            return failed(f", and {', '.join(users)} still use it; this job's verdict could rest on that, so it was "
                          "not validated in it. It is retired and rebuilt once they are done.", transient=True)
        await asyncio.to_thread(self._retire_env, key, "before a kernel started in it", changed)
        run.notices.append(Notice(EventReason.ENVIRONMENT_RETIRED, f"{found}; it was retired (never run in again) "
                                  "and rebuilt from the same requirements, and this job validated in the fresh one."))
        self._notify(job["metadata"]["name"])  # the notice, posted while it rebuilds
        built = await self._rebuild_env(job, plan, key)
        if built.state != SUCCEEDED or not reference or Path(built.reference or "") != Path(reference):
            return failed(f"; it was retired, and its rebuild failed: {built.message}")
        try:
            return await self._validate_in(job, run, python, reference, plan)
        except _EnvChanged as again:
            await asyncio.to_thread(self._retire_env, key, "again, right after its rebuild", again.changed)
            return failed(f"; it was retired and rebuilt, and the rebuilt one was found changed too before the kernel "
                          f"started ({seal.describe(again.changed)}): something changes the environments here. Not "
                          "validated in it; it was retired again.")

    async def _keep_outputs(self, job: Job, run_dir: Path) -> None:
        """--keep-outputs: what the attempt's notebook wrote in its copy, out of the run
        folder (never into the project; a failure to is logged, the verdict stands)."""
        folder, root, snapshot = self._working_folder(job)
        copy = workcopy.working_path(run_dir, folder=folder, root=root, snapshot=snapshot)
        dest = Path(self.keep_outputs_dir) / Path(job["spec"]["notebook"]["path"].strip()).with_suffix("")
        try:
            await asyncio.to_thread(workcopy.keep_changes, copy, folder or snapshot or "", dest)
        except OSError as e:
            self.log.warning("nbvalidation: keeping the outputs of %s in %s failed: %s",
                             job["metadata"]["name"], dest, e)

    async def _start_runner(self, argv: list[str], env: dict[str, str],
                            log_fd: int) -> asyncio.subprocess.Process | ForkedRunner:
        """A new runner process (its own session, ``env`` only, output on ``log_fd``):
        forked by the fork server when it serves, else a new interpreter."""
        if self.fork_runners:  # argv is RUNNER_COMMAND + the runner's arguments (runner_argv)
            if self._forkserver is None:
                self._forkserver = RunnerForkServer(
                    env=forkserver_environment(), cwd=str(self.root / "forkserver"), wrap=self._niced,
                    log_path=str(self.root / "forkserver.log"), log=self.log)
            try:
                cwd = os.getcwd()  # where a new interpreter would start: this process's folder
            except OSError:  # removed under us
                cwd = "/"
            forked = await self._forkserver.spawn(argv[len(RUNNER_COMMAND):], env, cwd, log_fd)
            if forked is not None:
                return forked
        return await asyncio.create_subprocess_exec(
            *self._niced(argv), stdout=log_fd, stderr=asyncio.subprocess.STDOUT, stdin=asyncio.subprocess.DEVNULL,
            start_new_session=True, env=env)

    async def _read_progress(self, run: _Run, log_path: Path) -> bool:
        """Feed what the runner's log gained since the last read (in a thread: no
        file I/O on the event loop); True when the progress changed."""
        def read() -> bytes:
            try:
                with open(log_path, "rb") as f:
                    f.seek(run.progress_offset)
                    return f.read()
            except OSError:
                return b""

        data = await asyncio.to_thread(read)
        run.progress_offset += len(data)
        return run.progress.feed(data) if data else False

    async def _watch_progress(self, run: _Run, log_path: Path) -> None:
        """While the runner runs: read its progress records as they come and wake
        the engine (at most once a second), which writes ``status.progress``."""
        last_notify = 0.0
        pending = False
        while True:
            await asyncio.sleep(PROGRESS_POLL)
            pending = await self._read_progress(run, log_path) or pending
            if pending and time.monotonic() - last_notify >= PROGRESS_NOTIFY:
                pending, last_notify = False, time.monotonic()
                self._notify(run.name)

    async def cancel_validation(self, job: Job) -> None:
        run = self._runs.pop(job["metadata"]["uid"], None)
        if run is None or run.adopted:
            # a run this engine did not start is stopped only when its owner is provably
            # dead; a live owner stops its own when it sees the job cancelled (``owns``)
            if run is not None and not run.task.done():
                await cancel_and_wait(run.task)
            await asyncio.to_thread(self._stop_orphan_run, job)
            return
        if run.proc is not None:
            await _terminate(run.proc, run.run_id)
        if not run.task.done():
            await cancel_and_wait(run.task)
        await asyncio.to_thread(workcopy.remove, run.run_dir)  # the attempt's copy of the folder

    def _stop_orphan_run(self, job: Job) -> None:
        last = self._latest_run(job)
        owner = _read_json(last / "owner.json") if last is not None else None
        if owner is None or self._mine(owner) or owner_alive(owner):
            return
        runner = owner.get("runner")
        if same_process_alive(runner):  # verified pid and start time: the dead engine's runner
            hygiene.kill_group(runner["pid"], signal.SIGTERM)

    async def cleanup(self, job: Job) -> None:
        uid = job["metadata"]["uid"]
        rec = self._job_build.pop(uid, None)
        if rec is not None:
            rec.waiters.discard(job["metadata"]["name"])
        run = self._runs.pop(uid, None)
        if run is not None and not run.task.done():
            if not run.adopted and run.proc is not None and run.proc.returncode is None:
                hygiene.kill_group(run.proc.pid, signal.SIGKILL)
            run.task.cancel()
            await asyncio.wait({run.task}, timeout=10)  # its kernel stopped before its folder goes
        self._keys.pop(uid, None)
        self._env_notes.pop(uid, None)
        reqmod.release(job["metadata"]["name"])
        await asyncio.to_thread(self._remove_copies, job)

    def _remove_copies(self, job: Job) -> None:
        """The working copies of a job's attempts, gone (the run data: result, executed
        notebook, logs, stay); one another engine's live runner works in is left to it
        (the GC's sweep removes it once the job has ended)."""
        for run_dir in self.job_dir(job).glob("run-*"):
            if ((run_dir / workcopy.TREE).exists() or (run_dir / workcopy.SCRATCH).exists()) \
                    and self._run_state(run_dir) != "foreign":
                workcopy.remove(run_dir)

    def _latest_run(self, job: Job) -> Path | None:
        runs = sorted(self.job_dir(job).glob("run-*"), key=lambda p: int(p.name.split("-")[1]))
        return runs[-1] if runs else None

    async def executed_notebook(self, job: Job) -> dict[str, Any] | None:
        def read() -> dict[str, Any] | None:
            run = self._latest_run(job)
            if run is None or not (run / "executed.ipynb").is_file():
                return None
            import nbformat  # deferred: start-up time (importing nbformat imports jsonschema)

            # nbformat.read rejoins multi-line strings: clients get plain strings; it returns a
            # NotebookNode (a dict) and is untyped
            nb: dict[str, Any] = nbformat.read(  # type: ignore[no-untyped-call]
                str(run / "executed.ipynb"), as_version=4)
            return nb

        return await asyncio.to_thread(read)


SECRETS_FILE = "secrets.json"  # an attempt's secrets for its runner (removed once read)


def write_secrets_file(path: Path, registry: SecretRegistry, names: tuple[str, ...]) -> None:
    """The values of ``names`` (read now) for the runner's ``--secrets-file``: readable by this user
    only, and removed by the runner as soon as it has read it. Blocking: off the loop."""
    env: dict[str, str] = {}
    for name in names:
        env.update(registry.values(name))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({"env": env}, f)
