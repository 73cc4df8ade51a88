"""What a job is and has, as the REST API answers it: the job, the list of jobs, its events
and timeline, its executed notebook, environment record, lock and build log, and the
server's health."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Mapping

import jupyter_nbvalidation.why_red.lock as environment_lock
from jupyter_nbvalidation.core.documents import Event, Job
from jupyter_nbvalidation.core.model import SOURCE_ANNOTATION, Phase, build_enabled
from jupyter_nbvalidation.core.redaction import scrub
from jupyter_nbvalidation.core.timeline import compute_timeline
from jupyter_nbvalidation.service.errors import ApiError
from jupyter_nbvalidation.service.history import is_probe
from jupyter_nbvalidation.service.state import ServiceState


class QueriesRoom(ServiceState):
    """Reading jobs and what they have (``GET`` routes)."""

    async def health(self) -> dict[str, Any]:
        """GET /health: the backend's state and the engine's figures."""
        engine = self.engine
        health = await self.backend.health()
        if self.start_problem and not engine.running:
            health.update(usable=False, problem=self.start_problem)
        health["engine"] = {"running": engine.running, "leading": engine.leading.is_set(),
                            "reconciles": engine.reconciles, "errors": engine.errors,
                            "eventsPosted": engine.recorder.posted, "eventsFailed": engine.recorder.failed,
                            "eventsDropped": engine.recorder.dropped, "eventsRecovered": engine.events_recovered,
                            **engine.activity(),
                            "loopLagMs": {"sinceStart": round(engine.max_loop_lag * 1000, 1),
                                          "lastMinute": round(engine.loop_lag_within(60) * 1000, 1),
                                          "last10s": round(engine.loop_lag_within(10) * 1000, 1)}}
        return health

    async def list_jobs(self, notebook: str | None, limit: int, continue_token: str | None,
                        probes: bool = False) -> dict[str, Any]:
        """A page of jobs, newest first; probe jobs (``bisect``'s steps) only with ``probes``."""
        try:
            items, token = await self.store.list_jobs(notebook=notebook, limit=limit, continue_token=continue_token,
                                                      owner=self.scope_owner)
        except ValueError as e:
            raise ApiError(400, "InvalidField", str(e), "continue") from None
        # a job of another root (another server's, an in-process run's elsewhere) is not one of
        # this root's notebooks, whatever its path says; jobs from before roots were recorded stay;
        # a notebook from git (each commit a root of its own) is listed, but never as one of this
        # root's notebooks (its path is the repository's); a hub's view (an owner's) lists by
        # owner: each submit has a root of its own there
        def listed_here(job: Job) -> bool:
            if self.owner is not None or self._root_of(job) in (None, self.real_root):
                return True
            return notebook is None and bool((job["metadata"].get("annotations") or {}).get(SOURCE_ANNOTATION))

        listed = [list_item(j) for j in items if listed_here(j) and (probes or not is_probe(j))]
        return {"apiVersion": "v1", "kind": "NotebookValidationJobList", "items": listed,
                "metadata": {"continue": token}}

    async def events(self, name: str) -> list[Event]:
        job = await self.get(name)
        return await self.store.list_events(job)

    async def timeline(self, name: str) -> dict[str, Any]:
        job = await self.get(name)
        return compute_timeline(job, await self.store.list_events(job))

    async def executed_notebook(self, name: str) -> dict[str, Any]:
        job = await self.get(name)
        nb = await self.backend.executed_notebook(job)
        if nb is None:
            raise ApiError(404, "NotFound", f"job {name!r} has no executed notebook yet")
        return nb

    async def environment_record(self, name: str) -> dict[str, Any]:
        """The job's environment record (environment_record.py), or 404 saying why there is none."""
        job = await self.get(name)
        if not self.backend.capabilities.environment_records:
            raise ApiError(404, "NotFound", f"the {self.backend.name} backend does not record environments yet")
        record = await self.backend.environment_record(job)
        if record is None:
            phase = (job.get("status") or {}).get("phase", "")
            why = ("its validation has not started" if phase not in (Phase.SUCCEEDED, Phase.FAILED)
                   else "it ended before its validation started (or was validated before environments were recorded)")
            raise ApiError(404, "NotFound", f"job {name!r} has no environment record: {why}")
        return record

    async def lock(self, name: str) -> str:
        """The exact pins of the job's environment as a requirements file
        (environment_lock.lock_text), or 404 saying why there are none."""
        job = await self.get(name)
        record = await self.environment_record(name)
        try:
            return environment_lock.lock_text(job, record)
        except environment_lock.NoLock as e:
            raise ApiError(404, "NotFound", f"job {name!r} has no lock: {e}") from None

    async def build_log(self, name: str, offset: int = 0) -> BuildLogChunk:
        """The build log from byte ``offset``: while the build runs (phase
        Initializing or Building) the log so far, up to its last complete
        line, with ``complete`` false; afterwards the rest of the whole log.
        404 only for an unknown job or one without a build log (build
        disabled, or a reused environment whose log is gone)."""
        if offset < 0:
            raise ApiError(400, "InvalidField", "offset must be a byte offset >= 0", "offset")
        job = await self.get(name)
        building = (job.get("status") or {}).get("phase", "") in ("", Phase.INITIALIZING, Phase.BUILDING)
        log = await self.backend.build_log(job)
        if log is None:
            if not (building and build_enabled(job["spec"])):
                raise ApiError(404, "NotFound", f"job {name!r} has no build log")
            log = ""  # the build is about to start: its log is empty so far
        # masked here for every backend, line by line: a whole line masks the same on every read,
        # so the offsets of the lines already served hold (the local one masks as it writes too);
        # a long log is masked off the event loop
        data = (await asyncio.to_thread(_masked_log, log) if len(log) > 65536 else _masked_log(log))
        offset = min(offset, len(data))
        chunk = data[offset:]
        if building:  # a line still being written (and a character cut in two) waits for the next read
            chunk = chunk[: chunk.rfind(b"\n") + 1]
        return BuildLogChunk(chunk, not building, offset + len(chunk))


def _masked_log(log: str) -> bytes:
    return "".join(scrub(line) for line in log.splitlines(keepends=True)).encode("utf-8")


@dataclass
class BuildLogChunk:
    """Part of a build log (``GET /jobs/{name}/buildlog?offset=N``)."""

    data: bytes
    complete: bool  # the build has ended: nothing more will be written
    next_offset: int  # the offset to ask for next


def list_item(job: Mapping[str, Any]) -> Mapping[str, Any]:
    """A job as ``GET /jobs`` lists it: whole but for what grows with the
    notebook (README, "REST API"): ``status.results`` becomes
    ``status.resultsSummary`` (cells by status, the failed cell's result, cells
    whose output was truncated), ``comparisonResult`` keeps its counts without
    ``diffs``, ``progress`` its counts without ``cells``. ``GET /jobs/{name}``
    gives the whole job."""
    st = job.get("status")
    if not st:
        return job
    st = dict(st)
    results = st.pop("results", None)
    if results is not None:
        by_status: dict[str, int] = {}
        truncated = 0
        failed = st.get("failedCellIndex")
        failed_entry = None
        for entry in results:
            key = str(entry.get("status"))
            by_status[key] = by_status.get(key, 0) + 1
            if entry.get("outputTruncated"):
                truncated += 1
            if failed is not None and entry.get("cellIndex") == failed:
                failed_entry = entry
        st["resultsSummary"] = {"cells": len(results), "byStatus": by_status, "outputTruncatedCells": truncated,
                                "failedCell": failed_entry}
    cmp_ = st.get("comparisonResult")
    if isinstance(cmp_, dict) and "diffs" in cmp_:
        st["comparisonResult"] = {k: v for k, v in cmp_.items() if k != "diffs"}
    prog = st.get("progress")
    if isinstance(prog, dict) and "cells" in prog:
        st["progress"] = {k: v for k, v in prog.items() if k != "cells"}
    return {**job, "status": st}
