"""Submitting, listing and cancelling jobs: the operations every entry point
(REST, CLI, magic) shares, in :class:`JobService`. Bad input raises :class:`ApiError`
before anything is written, so a refused request creates nothing."""

from __future__ import annotations

import asyncio
import copy
import os
from typing import Any, Callable, Iterable

import jupyter_nbvalidation.environment.requirements as reqmod
import jupyter_nbvalidation.verdict.cache as verdict_cache
from jupyter_nbvalidation.backends.base import Backend
from jupyter_nbvalidation.core.documents import Job
from jupyter_nbvalidation.core.errors import InputRejected
from jupyter_nbvalidation.core.model import (
    is_terminal,
    isotime,
    new_job,
)
from jupyter_nbvalidation.core.tasks import cancel_and_wait
from jupyter_nbvalidation.engine.engine import Engine
from jupyter_nbvalidation.secrets.registry import Caller

# ApiError's home is errors.py; re-exported here for the callers that import it with JobService
from jupyter_nbvalidation.service.bisections import Bisections
from jupyter_nbvalidation.service.errors import ApiError as ApiError
from jupyter_nbvalidation.service.git_fetch import GitCache
from jupyter_nbvalidation.service.git_source import GitSourceRoom, has_git
from jupyter_nbvalidation.service.history import PROBE_ANNOTATION, HistoryRoom
from jupyter_nbvalidation.service.notify import Notifier
from jupyter_nbvalidation.service.project_settings import ProjectSettingsRoom
from jupyter_nbvalidation.service.queries import QueriesRoom
from jupyter_nbvalidation.service.snapshot import SnapshotRoom
from jupyter_nbvalidation.service.tenancy import QuotaLocks, Quotas, check_quotas, owner_counts, owner_label
from jupyter_nbvalidation.store.base import OWNER_LABEL, NotFound, StoreError
from jupyter_nbvalidation.why_red.culprit import SEEN_ANNOTATION, notification_of


def default_git_dir(backend: Backend) -> str:
    """The backend's folder for notebooks from git (``Backend.git_dir``: the local backend's
    ``<data_dir>/git``, hidden from kernels as the rest of it), else ``<Jupyter's data
    dir>/nbvalidation/git``."""
    if backend.git_dir():
        return str(backend.git_dir())
    from jupyter_core.paths import jupyter_data_dir  # deferred: start-up time (only a backend without a folder)

    return os.path.join(jupyter_data_dir(), "nbvalidation", "git")


class JobService(GitSourceRoom, SnapshotRoom, QueriesRoom, HistoryRoom, ProjectSettingsRoom):
    """The operations every entry point (REST, CLI, magic) shares. Its rooms: git_source.py
    (a notebook fetched from git), snapshot.py (checking a spec, reading its inputs), queries.py (reading jobs), history.py (the verdict
    cache, what changed since the last success), project_settings.py (the project settings
    file); here: running the service, submitting, cancelling and deleting, and the server's
    searches for the cause of a red."""

    def __init__(self, engine: Engine, backend: Backend, root_dir: str, *, max_notebook_bytes: int = 10 * 2**20,
                 max_input_files: int = 1000, max_input_bytes: int = 50 * 2**20, git_dir: str | None = None,
                 git_timeout: float = 120.0, git_cache_ttl: float = 30 * 86400.0,
                 schedule_seconds_field: bool = False):
        self.engine = engine
        self.backend = backend
        self.root_dir = root_dir
        self.real_root = os.path.realpath(root_dir)  # as jobs record it (ROOT_ANNOTATION), read once
        self.max_notebook_bytes = max_notebook_bytes
        self.max_input_files = max_input_files
        self.max_input_bytes = max_input_bytes
        self.start_problem: str | None = None  # why the engine has not started (start_serving)
        self._start_retry: asyncio.Task[None] | None = None
        self._bisections: "Bisections | None" = None  # the lab's Find the cause (bisect_runs)
        self._origin = self  # the service the views (as_user) are of
        self.quotas = Quotas()  # per user, in a JupyterHub service's views (as_user)
        self._quota_locks = QuotaLocks()
        # notebooks from git: the per-URL cache and the exported trees (docs/watching.md)
        self.git = GitCache(git_dir or default_git_dir(backend), timeout=git_timeout)
        engine.adopt_source = self._adopt_git  # a job made past the service with its notebook in git
        # a schedule's series that changes colour tells its owner (notify.py; configured by assemble)
        self.notifier = Notifier(self, webhooks=[], log=engine.log)
        engine.recorder.listeners.append(self.notifier.on_event)
        self._resuming: asyncio.Task[None] | None = None
        self.git_cache_ttl = git_cache_ttl
        backend.add_collect_hook(self._collect_git)
        # schedules (service/schedules.py): a seconds field in their cron (tests only), a lock per
        # schedule (a tick and a trigger one at a time), and the loop's wake-up (service/scheduler.py)
        self.schedule_seconds_field = schedule_seconds_field
        self._schedule_locks: dict[tuple[str, str], asyncio.Lock] = {}
        self.schedule_wake = asyncio.Event()

    async def _collect_git(self) -> dict[str, Any]:
        """The commits' trees no job roots in any more, and the repositories not fetched for
        ``git_cache_ttl`` (a collection's hook: Backend.collect)."""
        roots: set[str] = set()
        token = None
        while True:  # every job, every owner's: a job's root is kept as long as the job
            items, token = await self.store.list_jobs(limit=500, continue_token=token)
            roots.update(r for r in (self._root_of(j) for j in items) if r)
            if not token:
                break
        keep = await asyncio.to_thread(lambda: {os.path.realpath(r) for r in roots})  # file system: off the loop
        return await self.git.collect(keep, self.git_cache_ttl)

    def as_user(self, owner: str, admin: bool = False, root_dir: str | None = None,
                groups: Iterable[str] = ()) -> "JobService":
        """This service as user ``owner`` sees it (a JupyterHub service's request): only their
        jobs (``admin``: every job), their submits labelled with them and held to the quotas;
        ``root_dir``: where this request's inputs are (a hub submit's own snapshot folder).
        The view shares everything else (engine, backend, store, searches) with this service."""
        view = copy.copy(self)
        view.owner, view.admin = owner_label(owner), admin
        view.caller = Caller(owner, frozenset(groups))  # whose secrets a submit may name (never None: the server's)
        if root_dir is not None:
            view.root_dir, view.real_root = root_dir, os.path.realpath(root_dir)
        return view

    # -- schedules (service/schedules.py: Schedules(view); the loop: service/scheduler.py) --------
    def schedule_lock(self, owner: str | None, name: str) -> asyncio.Lock:
        return self._origin._schedule_locks.setdefault((owner or "", name), asyncio.Lock())

    def schedule_changed(self) -> None:
        """A schedule was created, paused, resumed or deleted here: the loop looks again now."""
        self._origin.schedule_wake.set()

    # -- running the service in this process (the CLI; the server runs it through app.py) ----------
    async def open(self) -> None:
        """Open the store: reads, submits and deletes work, nothing is reconciled yet."""
        await self.store.start()

    async def close(self) -> None:
        await self.store.stop()

    async def start(self) -> None:
        """Start the engine: this process reconciles once it holds the store's lease."""
        await self.engine.start()

    async def start_serving(self, log: Any, retry_max: float = 30.0) -> None:
        """The server's start: the engine starts now, or, when its store cannot be
        opened (locked, unreadable, not a database), the server serves all the same —
        /health is unusable with the cause, every route a 503 naming it — and the
        start is tried again in the background (every ``retry_max`` s at most), so a
        store that comes back (or is repaired) needs no restart."""
        try:
            await self.engine.start()
            self._resume_notifications(log)
            return
        except StoreError as e:
            self.start_problem = f"the engine cannot start: {e}"
        log.error("nbvalidation: %s; the REST API answers 503 until it can", self.start_problem)

        async def again() -> None:
            wait = 1.0
            while True:
                await asyncio.sleep(wait)
                wait = min(retry_max, wait * 2)
                try:
                    await self.engine.start()
                except StoreError as e:
                    self.start_problem = f"the engine cannot start: {e}"
                    continue
                self.start_problem = None
                log.info("nbvalidation: the engine started after all")
                self._resume_notifications(log)
                return

        self._start_retry = asyncio.get_running_loop().create_task(again(), name="nbvalidation-start-retry")

    def _resume_notifications(self, log: Any) -> None:
        """Once this server leads: the notifications a stopped one left undecided (notify.py)."""
        async def resume() -> None:
            await self.engine.leading.wait()
            try:
                taken = await self.notifier.resume()
            except StoreError as e:
                log.warning("nbvalidation: notifications left by a stopped server not looked at: %s", e)
                return
            if taken:
                log.info("nbvalidation: %d notification(s) left by a stopped server sent", taken)

        self._resuming = asyncio.get_running_loop().create_task(resume(), name="nbvalidation-notify-resume")

    async def stop(self) -> None:
        if self._resuming is not None:
            await cancel_and_wait(self._resuming)
            self._resuming = None
        await self.notifier.close()
        if self._bisections is not None:  # each search's running step cancelled while the engine still runs
            await self._bisections.close()
        if self._start_retry is not None:
            await cancel_and_wait(self._start_retry)
            self._start_retry = None
        await self.engine.stop()

    async def wait_for_terminal(self, name: str, timeout: float | None = None,
                                on_update: Callable[[Job], None] | None = None) -> Job:
        """The job once it is Succeeded or Failed (``on_update`` sees each change)."""
        return await self.engine.wait_for_terminal(name, timeout, on_update)

    async def hand_over(self, drain: bool = True) -> None:
        """Done here: the events are posted, the lease released at once, and what this
        process started for other jobs finishes (never killed, never run twice: the next
        holder adopts its outcome); ``drain=False`` does not wait for that (an interrupted
        batch, which cancelled its own)."""
        await self.engine.recorder.flush()
        await self.engine.step_down()
        if drain:
            await self.backend.drain()

    async def submit(self, spec: Any, probe_of: str | None = None, labels: dict[str, str] | None = None) -> Job:
        """A new job. ``probe_of``: the name of a job of the same notebook this one is a
        probe for (``bisect``'s steps): it never stands as the notebook's verdict (left out
        of the job list unless asked for, of the verdict cache and of the last success).
        ``labels``: extra labels the job carries (internal: a schedule's jobs carry
        ``store.base.SCHEDULE_LABEL``); never the owner's, which the view decides."""
        labels = {k: v for k, v in (labels or {}).items() if k != OWNER_LABEL}
        if probe_of is not None:
            target = await self.get(probe_of)
            path = (spec.get("notebook") or {}).get("path") if isinstance(spec, dict) else None
            if path != target["spec"]["notebook"]["path"]:
                raise ApiError(400, "InvalidField", f"probeOf: job {probe_of!r} is not of notebook {path!r}",
                               "probeOf")
        if not self.at_commit and has_git(spec):  # fetched first; this again, rooted at the commit's tree
            return await self._submit_git(spec, probe_of, labels)
        spec, files, nb_path, reqs, _env, key = await self._prepare(spec)
        annotations = self._submit_annotations(spec, nb_path, reqs)
        if key and probe_of is None:  # a probe's verdict never answers for the notebook
            annotations[verdict_cache.ANNOTATION] = key
        if probe_of is not None:
            annotations[PROBE_ANNOTATION] = probe_of
        labels.update(self.extra_labels)  # a schedule's run: the schedule's name
        if self.owner is not None:
            labels[OWNER_LABEL] = self.owner
        job = new_job(spec, annotations=annotations, labels=labels)
        reqmod.hold(job["metadata"]["name"], reqs.secrets)
        try:
            if self.owner is None:
                job = await self.backend.submit(job, files)
            else:  # a user's count and create as one step: two submits at once cannot both pass a quota
                async with self._quota_locks.of(self.owner):
                    check_quotas(self.quotas, self.owner, *await owner_counts(self.store, self.owner))
                    job = await self.backend.submit(job, files)
        except InputRejected as e:  # the one mapping of the ports' input errors to HTTP
            reqmod.release(job["metadata"]["name"])
            raise ApiError(e.status, e.code, e.message, e.field) from None
        except BaseException:
            reqmod.release(job["metadata"]["name"])
            raise
        self.engine.enqueue(job["metadata"]["name"])
        return job

    async def cancel(self, name: str) -> Job:
        job = await self.get(name)
        if is_terminal((job.get("status") or {}).get("phase")):
            return job
        return await self.engine.request_cancel(name)

    async def delete(self, name: str, cancel_only: bool = False) -> tuple[int, Job | dict[str, Any]]:
        """DELETE: a finished job is removed with its events and files (200 and a
        Status); a job still running is cancelled instead (202 and the job).
        ``cancel_only`` never removes (a Cancel button racing the job's end leaves it
        as it ended): the job, 200 when it has ended, else 202."""
        if cancel_only:
            cancelled = await self.cancel(name)
            return (200 if is_terminal((cancelled.get("status") or {}).get("phase")) else 202), cancelled
        job = await self.get(name)
        if not is_terminal((job.get("status") or {}).get("phase")):
            return 202, await self.engine.request_cancel(name)
        try:
            await self.backend.delete_job(job)
        except NotFound:
            raise ApiError(404, "NotFound", f"no job named {name!r}") from None
        return 200, {"apiVersion": "v1", "kind": "Status", "status": "Success",
                     "details": {"name": name, "uid": job["metadata"]["uid"], "kind": "NotebookValidationJob"}}

    async def gc(self, job_ttl: float | None = None, env_cache_max_bytes: int | None = None) -> dict[str, Any]:
        """Retention and the environment cache cap, now (local backend)."""
        if not self.backend.capabilities.garbage_collection:
            raise ApiError(400, "Unsupported", f"the {self.backend.name} backend has no garbage collection here")
        return await self.backend.collect(job_ttl=job_ttl, env_cache_max_bytes=env_cache_max_bytes)

    # -- notifications: a schedule's series that changed colour (notify.py) ---------------------
    async def notifications(self, limit: int = 50) -> dict[str, Any]:
        """GET /notifications: the ones of the jobs this view sees, newest first."""
        items = await self.notifier.listed(self, limit)
        return {"kind": "NotificationList", "items": items, "unseen": sum(1 for i in items if not i["seen"])}

    async def notification_seen(self, name: str) -> dict[str, Any]:
        """POST /notifications/{name}/seen: marked seen (the job's own; another's is a 404)."""
        job = await self.get(name)
        if notification_of(job) is None:
            raise ApiError(404, "NotFound", f"job {name!r} has no notification")
        if not ((job["metadata"].get("annotations") or {}).get(SEEN_ANNOTATION)):
            job = await self.store.set_annotation(name, SEEN_ANNOTATION, isotime())
        doc = notification_of(job)
        assert doc is not None
        return doc

    # -- the cause of a red: bisect here (the lab's Find the cause; the CLI runs its own) ---------
    def _bisect_runs(self) -> "Bisections":
        if not self.backend.capabilities.environment_records:
            raise ApiError(404, "NotFound", f"the {self.backend.name} backend does not record environments yet, "
                                            "so it cannot bisect")
        origin = self._origin  # one set of searches per service, whichever view asks
        if origin._bisections is None:
            origin._bisections = Bisections(origin)
        return origin._bisections

    async def bisect_start(self, name: str, max_steps: int) -> tuple[bool, dict[str, Any]]:
        """Start searching which package changes turned failed job ``name`` red (bisect_runs):
        (started now, its document); one already running is answered as it is."""
        if self.owner is None:
            return await self._bisect_runs().start(name, max_steps)
        job = await self.get(name)  # a view's own job only (another user's is a 404)
        via = copy.copy(self)  # its steps read the job's own snapshot folder (a hub submit's root)
        root = self._root_of(job)
        if root:
            via.root_dir, via.real_root = root, os.path.realpath(root)
        return await self._bisect_runs().start(name, max_steps, via=via)

    async def bisect_wait(self, name: str) -> dict[str, Any] | None:
        """The job's search here once it ended (the notifier's, which started it)."""
        await self.get(name)
        return await self._bisect_runs().wait(name)

    async def bisect_status(self, name: str) -> dict[str, Any]:
        await self.get(name)
        doc = self._bisect_runs().get(name)
        if doc is None:
            raise ApiError(404, "NotFound", f"no search for the cause of job {name!r} was started here")
        return doc

    async def bisect_stop(self, name: str) -> dict[str, Any]:
        await self.get(name)
        doc = await self._bisect_runs().stop(name)
        if doc is None:
            raise ApiError(404, "NotFound", f"no search for the cause of job {name!r} was started here")
        return doc
