"""An in-memory backend for testing the engine's decisions in milliseconds.

``MemoryStore`` implements the store port (jobs with optimistic concurrency,
events recorded once per name, watches) with dicts; ``FakeBackend``
implements the backend port with scripted outcomes: a test says what a
build or a validation run reports, and when, and reads back every call the
engine made. Nothing here decides anything the engine decides, so a test
that uses them checks the engine, not the fake (the real-parts tests in
test_local_backend.py, test_event_rules.py and the Kubernetes suites check
the real backends against the same ports).
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import uuid
from typing import Any, Callable

from jupyter_nbvalidation.backends.base import FAILED, RUNNING, SUCCEEDED, Backend, Fault, Observation
from jupyter_nbvalidation.core.errors import InputRejected
from jupyter_nbvalidation.core.model import build_attempt, is_terminal, isotime, validation_attempt
from jupyter_nbvalidation.spec.plan import Snapshot, ValidationPlan, snapshot_from_files
from jupyter_nbvalidation.store.base import OWNER_LABEL, AlreadyExists, Conflict, JobStore, NotFound, StoreError


class MemoryStore(JobStore):
    """The store port in memory. ``writes`` records every write in order
    (``("status", phase, reason)`` and ``("event", reason, name)``);
    ``fail_status_writes`` makes the next N status writes fail."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.jobs: dict[str, dict] = {}
        self.events: list[dict] = []
        self.writes: list[tuple[str, str, str]] = []
        self.fail_status_writes = 0
        self._versions = itertools.count(1)
        self._watchers: list[Callable[[str], None]] = []

    def _changed(self, name: str) -> None:
        for callback in list(self._watchers):
            asyncio.get_running_loop().call_soon(callback, name)

    async def create(self, job: dict) -> dict:
        name = job["metadata"]["name"]
        if name in self.jobs:
            raise AlreadyExists(name)
        job = copy.deepcopy(job)
        meta = job["metadata"]
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", isotime())
        meta["resourceVersion"] = str(next(self._versions))
        self.jobs[name] = job
        self._changed(name)
        return copy.deepcopy(job)

    async def get(self, name: str) -> dict:
        if name not in self.jobs:
            raise NotFound(name)
        return copy.deepcopy(self.jobs[name])

    async def list_jobs(self, *, notebook: str | None = None, limit: int | None = None,
                   continue_token: str | None = None, owner: str | None = None) -> tuple[list[dict], str | None]:
        items = [j for j in self.jobs.values()
                 if (notebook is None or j["spec"]["notebook"]["path"] == notebook)
                 and (owner is None or (j["metadata"].get("labels") or {}).get(OWNER_LABEL) == owner)]
        items.sort(key=lambda j: j["metadata"]["creationTimestamp"], reverse=True)
        start = int(continue_token or 0)
        end = len(items) if limit is None else start + limit
        token = str(end) if end < len(items) else None
        return copy.deepcopy(items[start:end]), token

    async def list_active(self) -> list[dict]:
        return [copy.deepcopy(j) for j in self.jobs.values()
                if not is_terminal((j.get("status") or {}).get("phase"))]

    async def update_status(self, name: str, status: dict, resource_version: str) -> dict:
        if name not in self.jobs:
            raise NotFound(name)
        job = self.jobs[name]
        if job["metadata"]["resourceVersion"] != resource_version:
            raise Conflict(name)
        if self.fail_status_writes:
            self.fail_status_writes -= 1
            raise StoreError("injected: the store is unavailable")
        job["status"] = copy.deepcopy(status)
        job["metadata"]["resourceVersion"] = str(next(self._versions))
        self.writes.append(("status", status.get("phase", ""), status.get("reason", "")))
        self._changed(name)
        return copy.deepcopy(job)

    async def set_annotation(self, name: str, key: str, value: str) -> dict:
        if name not in self.jobs:
            raise NotFound(name)
        job = self.jobs[name]
        job["metadata"].setdefault("annotations", {})[key] = value
        job["metadata"]["resourceVersion"] = str(next(self._versions))
        self._changed(name)
        return copy.deepcopy(job)

    async def delete(self, name: str) -> None:
        if self.jobs.pop(name, None) is None:
            raise NotFound(name)
        self._changed(name)

    async def add_event(self, event: dict) -> dict:
        self.writes.append(("event", event["reason"], event["metadata"]["name"]))
        if any(e["metadata"]["name"] == event["metadata"]["name"] for e in self.events):
            return copy.deepcopy(event)  # recorded once, like the SQLite store and the API server
        self.events.append(copy.deepcopy(event))
        return copy.deepcopy(event)

    async def list_events(self, job: dict) -> list[dict]:
        uid = job["metadata"]["uid"]
        mine = [e for e in self.events if e["regarding"]["uid"] == uid]
        return copy.deepcopy(sorted(mine, key=lambda e: e["eventTime"]))

    def watch(self, callback: Callable[[str], None]) -> Callable[[], None]:
        self._watchers.append(callback)
        return lambda: self._watchers.remove(callback) if callback in self._watchers else None


class FakeBackend(Backend):
    """The backend port with scripted outcomes.

    ``build[name]`` / ``validation[name]`` hold what ``ensure_build`` /
    ``ensure_validation`` report for a job (default: still running); a test
    changes them with :meth:`finish_build` / :meth:`finish_validation`, which
    notify the engine like a real backend does when its work ends.
    ``prepare_error`` makes ``prepare`` reject the inputs; ``raise_next``
    makes the next N calls of a method raise (``{"ensure_build": 2}``), by
    default a RuntimeError, or the exception ``raise_with[method]`` gives.
    ``build_attempts[name]`` / ``validation_attempts[name]`` script one
    outcome per attempt (``model.build_attempt`` / ``validation_attempt``, as a
    real backend names an attempt's children): index n is what retry n
    reports; past the list's end the plain ``build`` / ``validation`` applies.
    ``calls`` lists every call as ``(method, job name, argument)``; the
    ``plans`` each call got are kept too. Submitted files are kept in
    memory (``files``): they are the snapshot ``read_snapshot`` reports.
    """

    name = "fake"

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.store = MemoryStore()
        self.build: dict[str, Observation] = {}
        self.validation: dict[str, Observation] = {}
        self.build_attempts: dict[str, list[Observation]] = {}
        self.validation_attempts: dict[str, list[Observation]] = {}
        self.prepare_error: dict[str, InputRejected] = {}
        self.raise_next: dict[str, int] = {}
        self.raise_with: dict[str, BaseException] = {}
        self.calls: list[tuple[str, str, Any]] = []
        self.plans: list[ValidationPlan] = []
        self.files: dict[str, dict[str, bytes]] = {}
        self._notify: Callable[[str], None] | None = None

    # -- scripting ------------------------------------------------------------
    def finish_build(self, name: str, ok: bool = True, reference: str = "env-1", message: str = "") -> None:
        self.build[name] = Observation(state=SUCCEEDED if ok else FAILED, reference=reference if ok else None,
                                       message=message or ("built" if ok else "pip failed"),
                                       finished_at=isotime(), strategy="fake")
        self._wake(name)

    def finish_validation(self, name: str, verdict: str = "Succeeded", message: str = "") -> None:
        ok = verdict == "Succeeded"
        result = {"verdict": verdict, "message": message or f"validation {verdict.lower()}",
                  "results": [{"cellIndex": 0, "status": "Success" if ok else "Failure"}],
                  "failedCellIndex": None if ok else 0, "durationSeconds": 0.01}
        self.validation[name] = Observation(state=SUCCEEDED if ok else FAILED, result=result,
                                            started_at=isotime(), finished_at=isotime())
        self._wake(name)

    @staticmethod
    def fault(cause: str, transient: bool = True) -> Observation:
        """What an attempt that failed because of the infrastructure reports."""
        return Observation(state=FAILED, message=cause, finished_at=isotime(), fault=Fault(cause, transient))

    def _wake(self, name: str) -> None:
        if self._notify is not None:
            self._notify(name)

    def called(self, method: str, name: str | None = None) -> list[Any]:
        return [arg for m, n, arg in self.calls if m == method and (name is None or n == name)]

    def _record(self, method: str, job: dict, arg: Any = None) -> None:
        self.calls.append((method, job["metadata"]["name"], arg))
        if self.raise_next.get(method):
            self.raise_next[method] -= 1
            raise self.raise_with.get(method) or RuntimeError(f"injected: {method} failed")

    # -- the port -------------------------------------------------------------
    async def start(self, notify: Callable[[str], None]) -> None:
        self._notify = notify

    async def stop(self) -> None:
        self._notify = None

    def supported_fields(self) -> set[str]:
        return {"notebook", "goldenNotebook", "timeout", "podConfig"}

    async def submit(self, job: dict, files: dict[str, bytes]) -> dict:
        self.files[job["metadata"]["name"]] = {"notebook.ipynb": b"{}", **files}
        return await self.store.create(job)

    async def read_snapshot(self, job: dict) -> Snapshot:
        self._record("read_snapshot", job)
        files = self.files.get(job["metadata"]["name"], {})
        return snapshot_from_files(frozenset(files), lambda n: files[n].decode())

    async def prepare(self, job: dict, plan: ValidationPlan) -> str:
        self.plans.append(plan)
        self._record("prepare", job)
        error = self.prepare_error.get(job["metadata"]["name"])
        if error is not None:
            raise error
        return "no requirements"

    def build_strategy(self, job: dict) -> str:
        return "fake"

    async def ensure_build(self, job: dict, plan: ValidationPlan) -> Observation:
        self.plans.append(plan)
        self._record("ensure_build", job, build_attempt(job))
        scripted = self.build_attempts.get(job["metadata"]["name"], [])
        if build_attempt(job) < len(scripted):
            return scripted[build_attempt(job)]
        return self.build.get(job["metadata"]["name"], Observation(state=RUNNING))

    async def cancel_build(self, job: dict) -> None:
        self._record("cancel_build", job)

    async def ensure_validation(self, job: dict, reference: str | None, plan: ValidationPlan) -> Observation:
        self.plans.append(plan)
        self._record("ensure_validation", job, reference)
        scripted = self.validation_attempts.get(job["metadata"]["name"], [])
        if validation_attempt(job) < len(scripted):
            return scripted[validation_attempt(job)]
        return self.validation.get(job["metadata"]["name"], Observation(state=RUNNING))

    async def cancel_validation(self, job: dict) -> None:
        self._record("cancel_validation", job)

    async def cleanup(self, job: dict) -> None:
        self._record("cleanup", job)

    async def executed_notebook(self, job: dict) -> dict | None:
        return None

    async def build_log(self, job: dict) -> str | None:
        return None

    async def health(self) -> dict[str, Any]:
        return {"backend": self.name, "usable": True}
