"""The store contract: jobs with optimistic concurrency, and their events.

Both backends implement it (SQLite locally, custom resources + events.k8s.io
on Kubernetes). ``resourceVersion`` is an opaque string; a write carrying a
stale one raises :class:`Conflict`, exactly like the Kubernetes API.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from traitlets.config import LoggingConfigurable

from jupyter_nbvalidation.core.documents import Event, Job, JobStatus
from jupyter_nbvalidation.core.errors import AlreadyExists, Conflict, NoSpace, NotFound, StoreBroken, StoreError

__all__ = ["AlreadyExists", "Conflict", "JobStore", "NoSpace", "NotFound", "StoreBroken", "StoreError"]


#: who submitted a job (a JupyterHub user), as a label: the store filters on it
OWNER_LABEL = "nbvalidation.dev/owner"
#: the schedule that made a job (a NotebookValidationSchedule's name): a schedule's runs are
#: a series, and "turned red" is a run that failed after the series' last success
SCHEDULE_LABEL = "nbvalidation.dev/schedule"


def owner_of(job: Job) -> str | None:
    return ((job.get("metadata") or {}).get("labels") or {}).get(OWNER_LABEL)


class JobStore(LoggingConfigurable):
    """Abstract job + event store. Every method is a coroutine that never
    blocks the event loop."""

    #: seconds an event is kept before the store drops it (None: as long as its job)
    event_ttl: float | None = None
    #: why the store cannot be used now (its last StoreBroken), None while it can: /health shows it
    problem: str | None = None
    #: the last write refused for want of space, and when (time.monotonic()): see full_now
    no_space: Exception | None = None
    no_space_at: float = 0.0

    def full_now(self, within: float = 15.0) -> Exception | None:
        """The NoSpace of a write refused in the last ``within`` seconds (the disk is full now), else None."""
        return self.no_space if self.no_space is not None and time.monotonic() - self.no_space_at < within else None

    async def start(self) -> None:
        """Open connections, start watches."""

    async def stop(self) -> None:
        """Close connections, stop watches."""

    async def create(self, job: Job) -> Job:
        """Store a new job; assigns metadata.uid, creationTimestamp and
        resourceVersion. Raises AlreadyExists."""
        raise NotImplementedError

    async def get(self, name: str) -> Job:
        """The job as stored. Raises NotFound."""
        raise NotImplementedError

    async def list_jobs(self, *, notebook: str | None = None, limit: int | None = None,
                   continue_token: str | None = None, owner: str | None = None) -> tuple[list[Job], str | None]:
        """Jobs newest first, optionally only those of one notebook, and only those of one
        owner (label ``OWNER_LABEL``); returns (items, continue token or None)."""
        raise NotImplementedError

    async def list_active(self) -> list[Job]:
        """Every job that is not terminal (the resync set)."""
        raise NotImplementedError

    async def update_status(self, name: str, status: JobStatus, resource_version: str) -> Job:
        """Replace ``status`` if the job is still at ``resource_version``;
        returns the stored job. Raises Conflict, NotFound, StoreError."""
        raise NotImplementedError

    async def set_annotation(self, name: str, key: str, value: str) -> Job:
        """Set one metadata annotation (used to request cancellation)."""
        raise NotImplementedError

    async def delete(self, name: str) -> None:
        raise NotImplementedError

    async def add_event(self, event: Event) -> Event:
        """Record one event (events.k8s.io/v1 shape). An event whose
        ``metadata.name`` is already recorded is not recorded again."""
        raise NotImplementedError

    async def list_events(self, job: Job) -> list[Event]:
        """The events regarding a job (matched by uid), oldest first."""
        raise NotImplementedError

    async def list_events_of(self, jobs: list[Job]) -> dict[str, list[Event]]:
        """The events of several jobs, by job uid (one read per job unless a
        store can do better)."""
        return {job["metadata"]["uid"]: await self.list_events(job) for job in jobs}

    def watch(self, callback: Callable[[str], None]) -> Callable[[], None]:
        """Call ``callback(name)`` whenever a job changes; returns an
        unsubscribe function. Callbacks run on the event loop."""
        raise NotImplementedError

    # -- schedules (NotebookValidationSchedule): a store that holds them says so -------------
    #: False: this store cannot hold schedules (the service answers their routes 501)
    schedules_supported: bool = False

    async def create_schedule(self, doc: dict[str, Any], owner: str | None) -> dict[str, Any]:
        """Store a new schedule of ``owner`` (None: a single user's server). Raises AlreadyExists."""
        raise NotImplementedError

    async def get_schedule(self, name: str, owner: str | None) -> dict[str, Any]:
        """``owner``'s schedule ``name`` (another owner's is NotFound)."""
        raise NotImplementedError

    async def list_schedules(self, owner: str | None, every_owner: bool = False) -> list[tuple[str, dict[str, Any]]]:
        """(owner, schedule) pairs: ``owner``'s, or with ``every_owner`` all of them."""
        raise NotImplementedError

    async def replace_schedule(self, doc: dict[str, Any], owner: str | None) -> dict[str, Any]:
        """Write ``doc`` if still at its resourceVersion. Raises Conflict, NotFound."""
        raise NotImplementedError

    async def delete_schedule(self, name: str, owner: str | None) -> None:
        raise NotImplementedError

    async def schedule_jobs(self, name: str, owner: str | None, limit: int | None = None) -> list[Job]:
        """The jobs labelled ``SCHEDULE_LABEL`` = ``name`` of ``owner``, newest first."""
        raise NotImplementedError
