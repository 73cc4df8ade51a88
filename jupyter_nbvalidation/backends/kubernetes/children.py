"""A job's child objects on the API server: read, create, adopt, delete.

Every child (input and build-context ConfigMaps, the build object, the
validation Pod) has a deterministic name and an owner reference to its job
(``objects.py`` writes them). What the backend, its builders and its
validation executor do with children goes through one :class:`Children`
object:

- **read** from the informer cache when it is usable (absent there: None, and
  a create that finds it is a 409 that adopts it), else from the API;
- **create**: "already exists" is fine when the object is ours (its owner
  reference names the job's uid): it is adopted. A same-named object that
  belongs to something else is never adopted: :class:`NotOurs`;
- **delete** in the background (the garbage collector removes what it owns);
- **ownership**: :meth:`owned` / :meth:`pods_of` (the pods an object owns).

An API failure becomes a domain error (``errors.py``, and the "Errors
contract" the engine follows): :func:`api_failure` says whether it is worth
retrying (``TemporaryFailure``: 409, 429, 5xx, timeouts, an unreachable
server) or not (``PermanentFailure``: 400, 403, 404 of a kind, 422).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Awaitable, Callable

import jupyter_nbvalidation.backends.kubernetes.objects as obj
from jupyter_nbvalidation.backends.kubernetes.client import CONFIGMAPS, MERGE_PATCH, PODS, Kube, KubeApiError, Resource
from jupyter_nbvalidation.core.documents import Job
from jupyter_nbvalidation.core.errors import PermanentFailure, TemporaryFailure
from jupyter_nbvalidation.core.model import GROUP
from jupyter_nbvalidation.store.base import StoreError

if TYPE_CHECKING:  # pragma: no cover
    from jupyter_nbvalidation.backends.kubernetes.informer import Informer
    from jupyter_nbvalidation.backends.kubernetes.store import KubernetesJobStore

IMAGE_ANNOTATION = f"{GROUP}/image"  # on a build object: the repository:tag it pushes
# statuses the same request meets again: not worth a retry
PERMANENT_STATUSES = frozenset({400, 403, 405, 413, 415, 422})


class NotOurs(Exception):
    """A child of the job's deterministic name exists and belongs to something
    else (no owner reference to this job's uid): it is never adopted."""


def not_ours(resource: Resource, ns: str, name: str) -> NotOurs:
    return NotOurs(f"{resource.plural}/{name} already exists in namespace {ns} and does not belong to this job")


def api_failure(e: KubeApiError, doing: str) -> StoreError:
    """``e`` met while ``doing`` (e.g. "creating pods/x"), as a domain error:
    temporary (requeue with backoff) or permanent (the job fails with the
    message). Both are StoreErrors too, so what maps a store error (the
    service's 503) keeps doing so."""
    message = f"{doing}: {e.reason}: {e.message}"
    if e.status in PERMANENT_STATUSES:
        return ChildPermanentFailure(message)
    delay = None
    if e.status == 429:
        try:
            delay = float((e.details or {}).get("retryAfterSeconds") or 1)
        except (TypeError, ValueError):
            delay = 1.0
    return ChildTemporaryFailure(message, delay)


class ChildTemporaryFailure(TemporaryFailure, StoreError):
    """A child operation failed for a reason that may go away."""


class ChildPermanentFailure(PermanentFailure, StoreError):
    """A child operation the API server refuses for good (forbidden, invalid)."""


class Children:
    """The child-object helpers over the backend's store (its client and its
    informers, looked up at each call: they exist once the store started)."""

    def __init__(self, store: "KubernetesJobStore", namespace: str, log: logging.Logger | None = None):
        self.store = store
        self.namespace = namespace
        self.log = log or logging.getLogger("nbvalidation")

    @property
    def kube(self) -> Kube:
        return self.store.kube

    def ns(self, job: Job) -> str:
        return job["metadata"].get("namespace") or self.namespace

    # -- informers -------------------------------------------------------------------
    def pods(self) -> "Informer | None":
        return self.store.pods

    def build_jobs(self) -> "Informer | None":
        return self.store.build_jobs

    def informer(self, key: str) -> "Informer | None":
        """The informer of an offered build kind (``tekton``, ``openshift``), if watched."""
        return self.store.extra.get(key)

    async def watch(self, key: str, resource: Resource, api_version: str, kind: str) -> None:
        await self.store.add_informer(key, resource, api_version, kind)

    # -- read / create / adopt / delete -------------------------------------------------
    async def read(self, resource: Resource, informer: "Informer | None", ns: str, name: str) -> dict[str, Any] | None:
        """The child, from the informer cache when it is usable, else from the API."""
        if informer is not None and informer.usable:
            return informer.get(name)
        try:
            found = await self.kube.request("GET", resource.path(ns, name))
        except KubeApiError as e:
            if e.status == 404:
                return None
            raise api_failure(e, f"reading {resource.plural}/{name}") from None
        if informer is not None:
            informer.put(found)
        return found

    async def create(self, resource: Resource, body: dict[str, Any], job: Job, informer: "Informer | None" = None) -> dict[str, Any]:
        """Create a child; "already exists" adopts it when it is ours, else :class:`NotOurs`."""
        ns = body["metadata"]["namespace"]
        name = body["metadata"]["name"]
        created: dict[str, Any] | None
        try:
            created = await self.kube.request("POST", resource.path(ns), body=body)
        except KubeApiError as e:
            if e.status != 409:
                raise api_failure(e, f"creating {resource.plural}/{name}") from None
            created = await self.read(resource, None, ns, name)
            if created is None:  # deleted in between: the next reconcile creates it again
                raise ChildTemporaryFailure(f"{resource.plural}/{name} exists and vanished; retrying") from None
            if not obj.owned_by(created, job):
                raise not_ours(resource, ns, name) from None
        if informer is not None:
            informer.put(created)
        return created

    async def ensure(self, resource: Resource, informer: "Informer | None", job: Job, name: str,
                     body: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        """The child ``name`` of ``job``: read; created from ``await body()``
        when absent; :class:`NotOurs` when it exists and is not ``job``'s."""
        ns = self.ns(job)
        found = await self.read(resource, informer, ns, name)
        if found is None:
            return await self.create(resource, await body(), job, informer)
        if not obj.owned_by(found, job):
            raise not_ours(resource, ns, name)
        return found

    async def mine(self, resource: Resource, informer: "Informer | None", job: Job, name: str) -> dict[str, Any] | None:
        """The child ``name`` when it exists and is ``job``'s, else None (a read for artefacts)."""
        found = await self.read(resource, informer, self.ns(job), name)
        return found if found is not None and obj.owned_by(found, job) else None

    async def delete(self, resource: Resource, ns: str, name: str, informer: "Informer | None" = None) -> None:
        try:
            await self.kube.request("DELETE", resource.path(ns, name),
                                    body={"apiVersion": "v1", "kind": "DeleteOptions",
                                          "propagationPolicy": "Background"})
        except KubeApiError as e:
            if e.status != 404:
                raise api_failure(e, f"deleting {resource.plural}/{name}") from None
        if informer is not None:
            informer.forget(name)

    async def patch(self, resource: Resource, ns: str, name: str, body: dict[str, Any],
                    informer: "Informer | None" = None, doing: str = "") -> dict[str, Any] | None:
        """A merge patch of a child (None when it is gone); the cache gets the answer."""
        try:
            updated = await self.kube.request("PATCH", resource.path(ns, name), body=body, content_type=MERGE_PATCH)
        except KubeApiError as e:
            if e.status == 404:
                return None
            raise api_failure(e, doing or f"patching {resource.plural}/{name}") from None
        if informer is not None:
            informer.put(updated)
        return updated

    async def create_context(self, job: Job, context: dict[str, bytes]) -> dict[str, Any]:
        """The build-context ConfigMap (``objects.build_context``'s files) of ``job``."""
        return await self.create(CONFIGMAPS, obj.build_context_configmap(job, context), job)

    # -- pods ------------------------------------------------------------------------
    async def pods_of(self, owner: dict[str, Any]) -> list[dict[str, Any]]:
        """The pods ``owner`` (a batch/v1 Job) owns: from the pod cache, else listed."""
        uid = owner["metadata"].get("uid")

        def owned(p: dict[str, Any]) -> bool:
            return any(r.get("uid") == uid for r in (p["metadata"].get("ownerReferences") or []))

        pods = self.store.pods
        if pods is not None and pods.usable:
            found = [p for p in pods.cache.values() if owned(p)]
            if found:
                return found
        try:
            page = await self.kube.request("GET", PODS.path(owner["metadata"]["namespace"]), query={
                "labelSelector": f"batch.kubernetes.io/job-name={owner['metadata']['name']}"})
        except KubeApiError as e:
            self.log.warning("nbvalidation: listing the pods of %s failed: %s", owner["metadata"]["name"], e)
            return []
        return [p for p in page.get("items") or [] if owned(p)]

    async def container_log(self, pod: dict[str, Any], container: str, **query: Any) -> str | None:
        """A container's log (None when it cannot be read)."""
        try:
            return await self.kube.text(PODS.path(pod["metadata"]["namespace"], pod["metadata"]["name"], "log"),
                                        query={"container": container, **query}, timeout=15)
        except KubeApiError as e:
            self.log.debug("nbvalidation: no log for pod %s: %s", pod["metadata"]["name"], e)
            return None
