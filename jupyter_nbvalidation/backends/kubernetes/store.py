"""KubernetesJobStore: jobs as NotebookValidationJob custom resources in one
namespace, their events as ``events.k8s.io/v1`` Events.

Plain dict bodies everywhere. Status is written only through the status
subresource, with the job's ``metadata.resourceVersion`` as precondition
(``PUT .../status``): a stale write is a 409, raised as :class:`Conflict`, and
the engine re-reads and decides again.

Three informers (see :mod:`.informer`) keep caches of the jobs and of the
backend's children (batch Jobs and Pods labelled ``nbvalidation.dev/job``);
every change of a job or of one of its children calls the subscribers with
the job's name, which is what makes the engine event-driven. Reads are served
from the job cache while it is synced and connected (REST stays fast and
reconciles cost no requests); this process's own writes go into the cache at
once, so a reconcile always reads what it just wrote.

Schedules (NotebookValidationSchedule objects) are schedules.py's, a mixin of this store.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime as dt
import json
import random
import time
from typing import Any, Awaitable, Callable, cast

from traitlets import Float, Unicode

from jupyter_nbvalidation.backends.kubernetes.client import EVENTS, JOBS, PODS, Kube, KubeApiError, Resource, connect
from jupyter_nbvalidation.backends.kubernetes.informer import Informer
from jupyter_nbvalidation.backends.kubernetes.schedules import KubernetesSchedules
from jupyter_nbvalidation.core.documents import Event, Job, JobStatus
from jupyter_nbvalidation.core.model import API_VERSION, GROUP, KIND, PLURAL, Phase
from jupyter_nbvalidation.core.tasks import cancel_all, wait_within
from jupyter_nbvalidation.store.base import OWNER_LABEL, AlreadyExists, Conflict, JobStore, NotFound, StoreError

NVJ = Resource(API_VERSION, PLURAL)
JOB_LABEL = f"{GROUP}/job"  # on every child: the job's name (truncated + hashed when > 63 chars)
CREATED_ANNOTATION = f"{GROUP}/created-at"  # microsecond submit time: orders jobs created in the same second


def owner_job_name(obj: dict[str, Any], build_jobs: Informer | None = None) -> str | None:
    """The NotebookValidationJob a child belongs to: its controller owner
    reference, through the batch Job for a builder pod, else its label."""
    meta = obj.get("metadata") or {}
    refs = meta.get("ownerReferences") or []
    for ref in refs:
        if ref.get("kind") == KIND and str(ref.get("apiVersion", "")).startswith(GROUP + "/"):
            return cast("str | None", ref.get("name"))
    if build_jobs is not None:
        for ref in refs:
            if ref.get("kind") == "Job" and ref.get("apiVersion") == "batch/v1":
                parent = build_jobs.get(ref.get("name", ""))
                if parent is not None:
                    return owner_job_name(parent)
    return (meta.get("labels") or {}).get(JOB_LABEL)


def _epoch(text: Any) -> float | None:
    try:
        return dt.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _sort_key(job: dict[str, Any]) -> tuple[str, str, str]:
    meta = job["metadata"]
    return (meta.get("creationTimestamp") or "", (meta.get("annotations") or {}).get(CREATED_ANNOTATION, ""),
            meta["name"])


def _encode_token(key: tuple[str, str, str]) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(key)).encode()).decode()


def _decode_token(token: str) -> tuple[str, str, str]:
    try:
        a, b, c = json.loads(base64.urlsafe_b64decode(token.encode()))
        return str(a), str(b), str(c)
    except Exception:
        raise ValueError("continue token is malformed") from None


class KubernetesJobStore(KubernetesSchedules, JobStore):
    namespace = Unicode("default", help="The one namespace jobs live in.").tag(config=True)
    kubeconfig = Unicode("", help="Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, "
                                  "or the in-cluster service account).").tag(config=True)
    context = Unicode("", help="Kubeconfig context (default: the current context).").tag(config=True)
    sync_timeout = Float(10.0, help="How long start() waits for the first LIST before serving "
                                    "reads from the API server directly.").tag(config=True)
    watch_timeout = Float(290.0, help="Seconds one WATCH request lasts before it is renewed "
                                      "from the last resourceVersion.").tag(config=True)
    max_backoff = Float(5.0, help="Longest pause (seconds) between two attempts of a watch to reconnect "
                                  "while the API server is unreachable.").tag(config=True)
    event_ttl = Float(3600.0, help="The API server's --event-ttl in seconds (its default: 1 h). After a "
                                   "restart, a transition whose event is missing is posted again only while "
                                   "younger than this (an older one would have expired).").tag(config=True)

    _job_sort_key = staticmethod(_sort_key)  # schedules.py's list of a schedule's runs

    def __init__(self, connector: Callable[[], Awaitable[Kube]] | None = None, **kw: Any):
        super().__init__(**kw)
        self._connector = connector
        self._kube: Kube | None = None
        self._owns_kube = True
        self._watchers: list[Callable[[str], None]] = []
        self._tasks: list[asyncio.Task[Any]] = []
        self._stale: set[str] = set()  # a write of ours hit a conflict: read these live once
        self.jobs: Informer | None = None
        self.build_jobs: Informer | None = None
        self.pods: Informer | None = None
        self.extra: dict[str, Informer] = {}  # build objects of the offered strategies (tekton, openshift)
        self._outages: list[tuple[float, float]] = []  # (from, to) wall-clock: the API server was unreachable
        self.event_retry_seconds = 180.0  # how long a transition event is retried while unreachable

    # -- lifecycle -------------------------------------------------------------
    @property
    def kube(self) -> Kube:
        if self._kube is None:
            raise StoreError("the Kubernetes store is not started")
        return self._kube

    def use_client(self, kube: Kube) -> None:
        """Share an already connected client (it is then not closed by stop())."""
        self._kube = kube
        self._owns_kube = False

    async def connect(self) -> Kube:
        if self._kube is None:
            try:
                if self._connector is not None:
                    self._kube = await self._connector()
                else:
                    self._kube = await connect(self.kubeconfig or None, self.context or None)
            except KubeApiError as e:
                raise StoreError(e.message) from None
        return self._kube

    async def start(self) -> None:
        if self._tasks:
            return
        kube = await self.connect()
        ns = self.namespace
        sel = JOB_LABEL
        self.jobs = Informer(kube, NVJ.path(ns), on_change=self._job_changed, log=self.log,
                             api_version=API_VERSION, kind=KIND, watch_timeout=int(self.watch_timeout),
                             name=f"informer {PLURAL}/{ns}", max_backoff=self.max_backoff,
                             on_recovered=self._recovered)
        self.build_jobs = Informer(kube, JOBS.path(ns), label_selector=sel, on_change=self._child_changed,
                                   log=self.log, api_version="batch/v1", kind="Job",
                                   watch_timeout=int(self.watch_timeout), name=f"informer jobs/{ns}",
                                   max_backoff=self.max_backoff)
        self.pods = Informer(kube, PODS.path(ns), label_selector=sel, on_change=self._child_changed,
                             log=self.log, api_version="v1", kind="Pod", watch_timeout=int(self.watch_timeout),
                             name=f"informer pods/{ns}", max_backoff=self.max_backoff)
        loop = asyncio.get_running_loop()
        for inf in (self.jobs, self.build_jobs, self.pods):
            self._tasks.append(loop.create_task(inf.run(), name=f"nbvalidation-{inf.name}"))
        try:
            await wait_within(asyncio.gather(*(i.synced.wait() for i in (self.jobs, self.build_jobs, self.pods))),
                              self.sync_timeout)
        except asyncio.TimeoutError:
            self.log.warning("nbvalidation: the caches of namespace %s are not synced after %.0fs; "
                             "reading from the API server meanwhile", ns, self.sync_timeout)

    async def add_informer(self, key: str, resource: Resource, api_version: str, kind: str) -> Informer:
        """Watch one more child kind (a builder's build objects), labelled
        ``nbvalidation.dev/job`` like every child; waits for its first LIST."""
        if key in self.extra:
            return self.extra[key]
        inf = Informer(self.kube, resource.path(self.namespace), label_selector=JOB_LABEL,
                       on_change=self._child_changed, log=self.log, api_version=api_version, kind=kind,
                       watch_timeout=int(self.watch_timeout), name=f"informer {resource.plural}/{self.namespace}",
                       max_backoff=self.max_backoff)
        self.extra[key] = inf
        self._tasks.append(asyncio.get_running_loop().create_task(inf.run(), name=f"nbvalidation-{inf.name}"))
        try:
            await wait_within(inf.synced.wait(), self.sync_timeout)
        except asyncio.TimeoutError:
            self.log.warning("nbvalidation: %s not synced after %.0fs", inf.name, self.sync_timeout)
        return inf

    def _informers(self) -> list[Informer]:
        return [i for i in (self.jobs, self.build_jobs, self.pods, *self.extra.values()) if i is not None]

    def _recovered(self, since: float) -> None:
        """The API server answers again: look at every job (their reconciles
        may be waiting in a back-off)."""
        self._outages.append((since, time.time()))
        del self._outages[:-20]
        self.log.info("nbvalidation: the API server answers again; resynchronising the jobs")
        if self.jobs is not None:
            for name in list(self.jobs.cache):
                self._notify(name)

    def outage(self) -> dict[str, Any]:
        """Whether the API server is reachable, as the watches see it."""
        down = [i for i in self._informers() if i.unhealthy_since is not None]
        if not down:
            return {"apiReachable": True, "lastError": None, "since": None}
        since = min(i.unhealthy_since for i in down if i.unhealthy_since is not None)
        return {"apiReachable": False, "lastError": next((i.last_error for i in down if i.last_error), None),
                "since": dt.datetime.fromtimestamp(since, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")}

    async def stop(self) -> None:
        await cancel_all(self._tasks)
        if self._kube is not None and self._owns_kube:
            await self._kube.close()
            self._kube = None

    @property
    def synced(self) -> bool:
        return all(i is not None and i.usable for i in (self.jobs, self.build_jobs, self.pods)) and \
            all(i.usable for i in self.extra.values())

    # -- subscribers -------------------------------------------------------------
    def _notify(self, name: str) -> None:
        for cb in list(self._watchers):
            try:
                cb(name)
            except Exception:
                self.log.exception("nbvalidation: store watcher failed")

    def _job_changed(self, obj: dict[str, Any], deleted: bool) -> None:
        self._notify(obj["metadata"]["name"])

    def _child_changed(self, obj: dict[str, Any], deleted: bool) -> None:
        name = owner_job_name(obj, self.build_jobs)
        if name:
            self._notify(name)

    def watch(self, callback: Callable[[str], None]) -> Callable[[], None]:
        self._watchers.append(callback)
        return lambda: self._watchers.remove(callback) if callback in self._watchers else None

    # -- errors ------------------------------------------------------------------
    @staticmethod
    def _error(e: KubeApiError, what: str, *, conflict: type[StoreError] = Conflict) -> StoreError:
        if e.status == 404:
            return NotFound(f"{what} not found")
        if e.status == 409:
            return conflict(f"{what}: {e.message}")
        return StoreError(f"{what}: {e.reason}: {e.message}")

    # -- jobs ----------------------------------------------------------------------
    def _cached(self, name: str) -> dict[str, Any] | None:
        if self.jobs is not None and self.jobs.usable and name not in self._stale:
            return self.jobs.get(name)
        return None

    def _remember(self, obj: dict[str, Any]) -> dict[str, Any]:
        obj.setdefault("apiVersion", API_VERSION)
        obj.setdefault("kind", KIND)
        obj.setdefault("status", {})
        if self.jobs is not None:
            self.jobs.put(obj)
        return copy.deepcopy(obj)

    async def create(self, job: Job) -> Job:
        body: dict[str, Any] = copy.deepcopy(dict(job))
        body.pop("status", None)
        meta = body["metadata"]
        for k in ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields"):
            meta.pop(k, None)
        meta["namespace"] = self.namespace
        try:
            obj = await self.kube.request("POST", NVJ.path(self.namespace), body=body)
        except KubeApiError as e:
            raise self._error(e, f"job {meta.get('name')!r}", conflict=AlreadyExists) from None
        return cast(Job, self._remember(obj))

    def _stale_copy(self, name: str) -> dict[str, Any] | None:
        """During an outage: the last known state (the cache was synced once)."""
        if self.jobs is not None and self.jobs.synced.is_set():
            return self.jobs.get(name)
        return None

    async def _live_get(self, name: str) -> dict[str, Any]:
        try:
            obj = await self.kube.request("GET", NVJ.path(self.namespace, name))
        except KubeApiError as e:
            if e.status == 0:
                stale = self._stale_copy(name)
                if stale is not None:
                    return copy.deepcopy(stale)
            raise self._error(e, f"job {name!r}") from None
        self._stale.discard(name)
        return self._remember(obj)

    async def get(self, name: str) -> Job:
        cached = self._cached(name)
        if cached is not None:
            return cast(Job, copy.deepcopy(cached))
        return cast(Job, await self._live_get(name))  # not cached (yet): ask, rather than a false 404

    async def _all(self) -> list[dict[str, Any]]:
        if self.jobs is not None and self.jobs.usable:
            return list(self.jobs.cache.values())
        items: list[dict[str, Any]] = []
        cont = None
        while True:
            try:
                page = await self.kube.request("GET", NVJ.path(self.namespace), query={"limit": 500, "continue": cont})
            except KubeApiError as e:
                if e.status == 0 and self.jobs is not None and self.jobs.synced.is_set():
                    return list(self.jobs.cache.values())  # unreachable: serve what we know
                raise self._error(e, f"listing jobs in {self.namespace}") from None
            for obj in page.get("items") or []:
                obj.setdefault("apiVersion", API_VERSION)
                obj.setdefault("kind", KIND)
                obj.setdefault("status", {})
                items.append(obj)
            cont = (page.get("metadata") or {}).get("continue")
            if not cont:
                return items

    async def list_jobs(self, *, notebook: str | None = None, limit: int | None = None,
                   continue_token: str | None = None, owner: str | None = None) -> tuple[list[Job], str | None]:
        after = _decode_token(continue_token) if continue_token else None
        items = await self._all()
        if owner is not None:
            items = [j for j in items if ((j.get("metadata") or {}).get("labels") or {}).get(OWNER_LABEL) == owner]
        if notebook is not None:
            items = [j for j in items if ((j.get("spec") or {}).get("notebook") or {}).get("path") == notebook]
        items.sort(key=_sort_key, reverse=True)
        if after is not None:
            items = [j for j in items if _sort_key(j) < after]
        token = None
        if limit and len(items) > limit:
            items = items[:limit]
            token = _encode_token(_sort_key(items[-1]))
        return [cast(Job, copy.deepcopy(j)) for j in items], token

    async def list_active(self) -> list[Job]:
        items = await self._all()
        active = [j for j in items if (j.get("status") or {}).get("phase") not in Phase.TERMINAL]
        active.sort(key=_sort_key)
        return [cast(Job, copy.deepcopy(j)) for j in active]

    async def update_status(self, name: str, status: JobStatus, resource_version: str) -> Job:
        body: dict[str, Any] = {"apiVersion": API_VERSION, "kind": KIND,
                "metadata": {"name": name, "namespace": self.namespace, "resourceVersion": resource_version},
                "status": status}
        try:
            obj = await self.kube.request("PUT", NVJ.path(self.namespace, name, "status"), body=body)
        except KubeApiError as e:
            if e.status == 409:
                self._stale.add(name)
            raise self._error(e, f"status of job {name!r}") from None
        self._stale.discard(name)
        return cast(Job, self._remember(obj))

    async def set_annotation(self, name: str, key: str, value: str) -> Job:
        return await self.set_annotations(name, {key: value})

    async def set_annotations(self, name: str, annotations: dict[str, str]) -> Job:
        patch = {"metadata": {"annotations": annotations}}
        try:
            obj = await self.kube.request("PATCH", NVJ.path(self.namespace, name), body=patch,
                                          content_type="application/merge-patch+json")
        except KubeApiError as e:
            raise self._error(e, f"job {name!r}") from None
        return cast(Job, self._remember(obj))

    async def delete(self, name: str) -> None:
        try:
            await self.kube.request("DELETE", NVJ.path(self.namespace, name),
                                    body={"apiVersion": "v1", "kind": "DeleteOptions",
                                          "propagationPolicy": "Background"})
        except KubeApiError as e:
            raise self._error(e, f"job {name!r}") from None
        if self.jobs is not None:
            self.jobs.forget(name)

    # -- events ----------------------------------------------------------------------
    def _during_outage(self, event: Event) -> bool:
        if ": Unreachable: " in str(event.get("note", "")):  # the failed write could not reach the API server
            return True
        t = _epoch(event.get("eventTime"))
        if t is None:
            return False
        if not self.outage()["apiReachable"]:
            return True
        return any(a - 1.0 <= t <= b + 1.0 for a, b in self._outages)

    async def add_event(self, event: Event) -> Event:
        """Post one event. A transition event is retried while the API server
        is unreachable or overloaded (its name is fixed, so a retry of a POST
        that did arrive is a 409: posted once). A ``...StatusUpdateFailed``
        fallback raised by an outage is not posted: /health reports the
        outage, and the write it stands for is retried, its own event follows."""
        ns = event["metadata"].get("namespace") or self.namespace
        fallback = str(event.get("reason", "")).endswith("StatusUpdateFailed")
        deadline = time.monotonic() + self.event_retry_seconds
        pause = 0.5
        while True:
            if fallback and self._during_outage(event):
                self.log.info("nbvalidation: not posting %s for %s: the API server was unreachable",
                              event["reason"], event["regarding"]["name"])
                return event
            try:
                return cast(Event, await self.kube.request("POST", EVENTS.path(ns), body=event))
            except KubeApiError as e:
                if e.status == 409 and not fallback:
                    return event  # an earlier attempt did arrive
                transient = e.status == 0 or e.status == 429 or e.status >= 500
                if fallback or not transient or time.monotonic() + pause > deadline:
                    raise self._error(e, f"event {event['reason']} for {event['regarding']['name']!r}") from None
            await asyncio.sleep(pause * (0.8 + 0.4 * random.random()))
            pause = min(10.0, pause * 2)

    async def _list_events(self, ns: str, selector: str | None, what: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        cont = None
        while True:
            try:
                page = await self.kube.request("GET", EVENTS.path(ns), query={
                    "fieldSelector": selector, "limit": 500, "continue": cont})
            except KubeApiError as e:
                if e.status == 400 and selector is not None:  # field selector not supported: filter here
                    selector, items, cont = None, [], None
                    continue
                raise self._error(e, what) from None
            items += page.get("items") or []
            cont = (page.get("metadata") or {}).get("continue")
            if not cont:
                break
        for item in items:  # list items come without them
            item.setdefault("apiVersion", "events.k8s.io/v1")
            item.setdefault("kind", "Event")
        items.sort(key=lambda e: (e.get("eventTime") or (e.get("metadata") or {}).get("creationTimestamp") or "",
                                  e["metadata"]["name"]))
        return items

    async def list_events(self, job: Job) -> list[Event]:
        uid = job["metadata"]["uid"]
        ns = job["metadata"].get("namespace") or self.namespace
        items = await self._list_events(ns, f"regarding.uid={uid}", f"events of job {job['metadata']['name']!r}")
        return [cast(Event, e) for e in items if (e.get("regarding") or {}).get("uid") == uid]

    async def list_events_of(self, jobs: list[Job]) -> dict[str, list[Event]]:
        """One LIST of the namespace's events (they live an hour), grouped by job."""
        out: dict[str, list[Event]] = {job["metadata"]["uid"]: [] for job in jobs}
        if jobs:
            for e in await self._list_events(self.namespace, None, "events"):
                uid = (e.get("regarding") or {}).get("uid")
                if uid in out:
                    out[uid].append(cast(Event, e))
        return out
