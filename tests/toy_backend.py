"""A third backend, written against the port only (backends/base.py): no build (the
kernel gets a fixed interpreter, this one), the runner in a subprocess per attempt, the
store any JobStore. It is the proof that a backend is an afternoon's work: it passes the
port contract (tests/test_port_contract.py) as the local backend does. Never blocks the
event loop: the runner is an asyncio subprocess, files are small and written in a thread.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import uuid
from pathlib import Path
from typing import Any, Callable

from jupyter_nbvalidation.backends.base import FAILED, RUNNING, SUCCEEDED, Backend, Fault, Observation
from jupyter_nbvalidation.core.documents import Job
from jupyter_nbvalidation.core.model import isotime, validation_attempt
from jupyter_nbvalidation.spec.plan import GOLDEN, NOTEBOOK, Snapshot, ValidationPlan, snapshot_from_files
from jupyter_nbvalidation.store.base import JobStore

RUNNER = [sys.executable, "-m", "jupyter_nbvalidation.runner"]


class _Run:
    def __init__(self, proc: asyncio.subprocess.Process, folder: Path, notify: Callable[[], None]):
        self.proc, self.folder, self.started_at = proc, folder, isotime()
        self.finished_at: str | None = None

        async def wait() -> None:
            await proc.wait()
            self.finished_at = isotime()
            notify()

        self.task = asyncio.create_task(wait())


class SubprocessBackend(Backend):
    name = "toy"

    def __init__(self, store: JobStore, folder: Path, python: str = sys.executable, **kw: Any) -> None:
        super().__init__(**kw)
        self.store, self.folder, self.python = store, folder, python
        self._runs: dict[tuple[str, int], _Run] = {}
        self._notify: Callable[[str], None] = lambda name: None

    async def start(self, notify: Callable[[str], None]) -> None:
        self._notify = notify
        await self.store.start()

    async def stop(self) -> None:
        for run in list(self._runs.values()):
            await self._kill(run)
        await self.store.stop()

    def supported_fields(self) -> set[str]:
        return {"notebook.path", "goldenNotebook.path", "timeout", "cellTimeout", "podConfig.buildConfig.enabled"}

    def _dir(self, job: Job) -> Path:
        return self.folder / job["metadata"]["uid"]

    async def submit(self, job: Job, files: dict[str, bytes]) -> Job:
        # the snapshot first, then the job: an engine that sees the job at once (the store
        # notifies on create) must find its inputs, as the real backends do
        job["metadata"]["uid"] = str(uuid.uuid4())

        def write() -> None:
            d = self._dir(job)
            d.mkdir(parents=True)
            for name, data in files.items():
                (d / name).parent.mkdir(parents=True, exist_ok=True)
                (d / name).write_bytes(data)

        await asyncio.to_thread(write)
        try:
            return await self.store.create(job)
        except Exception:
            await asyncio.to_thread(shutil.rmtree, self._dir(job), True)
            raise

    async def read_snapshot(self, job: Job) -> Snapshot:
        d = self._dir(job)

        def read() -> Snapshot:
            names = frozenset(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file())
            return snapshot_from_files(names, lambda n: (d / n).read_text(encoding="utf-8"))

        return await asyncio.to_thread(read)

    def build_strategy(self, job: Job) -> str:
        return "none"

    async def ensure_build(self, job: Job, plan: ValidationPlan) -> Observation:
        return Observation(SUCCEEDED, reference=self.python, strategy="none", finished_at=isotime(),
                           message=f"No build: the kernel runs in {self.python}.")

    async def cancel_build(self, job: Job) -> None:
        return None

    async def ensure_validation(self, job: Job, reference: str | None, plan: ValidationPlan) -> Observation:
        key = (job["metadata"]["name"], validation_attempt(job))
        run = self._runs.get(key)
        if run is None:
            run = self._runs[key] = await self._start(job, reference or self.python, plan, key[1])
        if not run.task.done():
            return Observation(RUNNING, started_at=run.started_at, reference=reference)
        text = await asyncio.to_thread(lambda: (run.folder / "result.json").read_text(encoding="utf-8")
                                       if (run.folder / "result.json").exists() else "")
        if not text:  # the runner died before it wrote its verdict: not the notebook's doing
            cause = f"The runner exited with {run.proc.returncode} before it wrote a result."
            return Observation(FAILED, message=cause, started_at=run.started_at, finished_at=run.finished_at,
                               fault=Fault(cause, transient=True))
        result = json.loads(text)
        return Observation(SUCCEEDED if result["verdict"] == "Succeeded" else FAILED, result=result,
                           reference=reference, started_at=run.started_at, finished_at=run.finished_at)

    async def _start(self, job: Job, python: str, plan: ValidationPlan, attempt: int) -> _Run:
        d = self._dir(job)
        folder = d / f"run-{attempt}"
        await asyncio.to_thread(folder.mkdir, parents=True, exist_ok=True)
        argv = [*RUNNER, str(d / NOTEBOOK), "--python", python, "--cwd", str(folder),
                "--result", str(folder / "result.json"), "--executed", str(folder / "executed.ipynb")]
        if plan.golden:
            argv += ["--golden", str(d / GOLDEN)]
        argv += plan.runner_args
        proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.DEVNULL,
                                                    stderr=asyncio.subprocess.DEVNULL, start_new_session=True)
        name = job["metadata"]["name"]
        return _Run(proc, folder, lambda: self._notify(name))

    async def _kill(self, run: _Run) -> None:
        """SIGTERM the runner's process group (it shuts its kernel down), SIGKILL after 5 s."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if run.proc.returncode is not None:
                break
            try:
                os.killpg(run.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                await asyncio.wait_for(asyncio.shield(run.task), 5.0)
            except asyncio.TimeoutError:
                continue
        await run.task

    async def cancel_validation(self, job: Job) -> None:
        run = self._runs.get((job["metadata"]["name"], validation_attempt(job)))
        if run is not None:
            await self._kill(run)

    async def cleanup(self, job: Job) -> None:
        for key in [k for k in self._runs if k[0] == job["metadata"]["name"]]:
            await self._kill(self._runs.pop(key))

    async def delete_job(self, job: Job) -> None:
        await self.store.delete(job["metadata"]["name"])
        await asyncio.to_thread(shutil.rmtree, self._dir(job), True)

    async def executed_notebook(self, job: Job) -> dict[str, Any] | None:
        runs = sorted(self._dir(job).glob("run-*/executed.ipynb"))
        return json.loads(await asyncio.to_thread(runs[-1].read_text, encoding="utf-8")) if runs else None

    async def build_log(self, job: Job) -> str | None:
        return None

    async def health(self) -> dict[str, Any]:
        return {"backend": self.name, "usable": True, "python": self.python}
