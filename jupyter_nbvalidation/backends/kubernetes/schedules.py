"""Schedules on Kubernetes: NotebookValidationSchedule custom resources in the store's namespace
(manifests/schedule-crd.yaml), the schedule methods of the JobStore port (store/base.py) for
KubernetesJobStore. docs/watching.md, "Where schedules are kept".

Owner-scoped as jobs are: a schedule's owner is its ``nbvalidation.dev/owner`` label (none: the
server's own user), and a user's names are their own (as in the local store): the object of
user U's schedule N is named ``N-<8 hex of U's hash>``, its name N kept in an annotation, so two
users' schedules of one name never meet (nor does a create answer that another's exists). A
schedule applied with kubectl keeps its object's name (its owner, if any, is its label).

Spec and status are two writes (the status subresource): the status a conditional PUT of
``/status`` on the resourceVersion the caller read, then a change of the spec (a pause) a
conditional PUT of the object on the version that wrote; a stale one is :class:`Conflict`. In
that order, a resume whose second write loses a race leaves the schedule paused with its last
tick moved on (what a resume writes), never resumed with the ticks missed while paused due. Deleting a schedule keeps its
jobs (they carry its name in ``SCHEDULE_LABEL`` and no ownerReference)."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any, cast

from jupyter_nbvalidation.backends.kubernetes.client import Kube, KubeApiError, Resource
from jupyter_nbvalidation.core.documents import Job
from jupyter_nbvalidation.core.model import API_VERSION, GROUP
from jupyter_nbvalidation.store.base import OWNER_LABEL, SCHEDULE_LABEL, AlreadyExists, Conflict, NotFound, StoreError

SCHEDULE_KIND = "NotebookValidationSchedule"
SCHEDULE_PLURAL = "notebookvalidationschedules"
NVS = Resource(API_VERSION, SCHEDULE_PLURAL)
#: the schedule's name when its object's is not (a user's schedule: the name + the owner's hash)
NAME_ANNOTATION = f"{GROUP}/schedule-name"
#: who made it through the service (the loop submits as them): JSON {user, groups}
CALLER_ANNOTATION = f"{GROUP}/caller"
CALLER_KEY = "x-caller"  # the stored document's key for it (service/schedules.py; never answered)


def object_name(name: str, owner: str | None) -> str:
    """The object of ``owner``'s schedule ``name`` (a single user's server: the name itself)."""
    if not owner:
        return name
    return f"{name}-{hashlib.sha256(owner.encode()).hexdigest()[:8]}"


def _owner_of(obj: dict[str, Any]) -> str:
    return str(((obj.get("metadata") or {}).get("labels") or {}).get(OWNER_LABEL) or "")


def _name_of(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return str((meta.get("annotations") or {}).get(NAME_ANNOTATION) or meta.get("name"))


def as_document(obj: dict[str, Any]) -> dict[str, Any]:
    """A schedule object as the service's document (its name, the caller, the status)."""
    meta = obj.get("metadata") or {}
    doc: dict[str, Any] = {
        "apiVersion": obj.get("apiVersion") or API_VERSION, "kind": obj.get("kind") or SCHEDULE_KIND,
        "metadata": {"name": _name_of(obj), "uid": meta.get("uid"), "creationTimestamp": meta.get("creationTimestamp"),
                     "resourceVersion": meta.get("resourceVersion")},
        "spec": copy.deepcopy(obj.get("spec") or {}), "status": copy.deepcopy(obj.get("status") or {})}
    spec = doc["spec"]  # the CRD's defaults (a server whose CRD is older fills them here)
    spec.setdefault("suspend", False)
    spec.setdefault("concurrencyPolicy", "Forbid")
    spec.setdefault("successfulJobsHistoryLimit", 10)
    spec.setdefault("failedJobsHistoryLimit", 10)
    caller = (meta.get("annotations") or {}).get(CALLER_ANNOTATION)
    if caller:
        try:
            doc[CALLER_KEY] = json.loads(caller)
        except ValueError:
            pass
    return doc


class KubernetesSchedules:
    """The schedule operations of KubernetesJobStore (a mixin: store.py)."""

    namespace: str
    schedules_supported = True

    @property
    def kube(self) -> Kube:
        raise NotImplementedError  # KubernetesJobStore's

    async def _all(self) -> list[dict[str, Any]]:
        raise NotImplementedError  # KubernetesJobStore's: every job

    @staticmethod
    def _job_sort_key(job: dict[str, Any]) -> tuple[str, str, str]:
        raise NotImplementedError  # KubernetesJobStore's: the order of the jobs' list

    @staticmethod
    def _schedule_error(e: KubeApiError, name: str) -> StoreError:
        if e.status == 404:
            return NotFound(f"schedule {name!r} not found")
        if e.status == 409:
            return Conflict(f"schedule {name!r}: {e.message}")
        return StoreError(f"schedule {name!r}: {e.reason}: {e.message}")

    async def _schedule_object(self, name: str, owner: str | None) -> dict[str, Any]:
        """The object of ``owner``'s schedule ``name``: its own name's, or one applied with kubectl
        under the plain name with ``owner``'s label; another owner's is NotFound."""
        for candidate in dict.fromkeys((object_name(name, owner), name)):
            try:
                obj = await self.kube.request("GET", NVS.path(self.namespace, candidate))
            except KubeApiError as e:
                if e.status == 404:
                    continue
                raise self._schedule_error(e, name) from None
            if _owner_of(obj) == (owner or "") and _name_of(obj) == name:
                return obj
        raise NotFound(f"schedule {name!r} not found")

    async def create_schedule(self, doc: dict[str, Any], owner: str | None) -> dict[str, Any]:
        name = doc["metadata"]["name"]
        meta: dict[str, Any] = {"name": object_name(name, owner), "namespace": self.namespace,
                                "annotations": {NAME_ANNOTATION: name}}
        if owner:
            meta["labels"] = {OWNER_LABEL: owner}
        if doc.get(CALLER_KEY):
            meta["annotations"][CALLER_ANNOTATION] = json.dumps(doc[CALLER_KEY], sort_keys=True)
        body = {"apiVersion": API_VERSION, "kind": SCHEDULE_KIND, "metadata": meta, "spec": doc["spec"]}
        try:
            obj = await self.kube.request("POST", NVS.path(self.namespace), body=body,
                                          query={"fieldValidation": "Strict"})
        except KubeApiError as e:
            if e.status == 409:
                raise AlreadyExists(f"schedule {name!r} already exists") from None
            raise self._schedule_error(e, name) from None
        status = {k: v for k, v in (doc.get("status") or {}).items() if v not in (None, 0)}
        if status:
            obj = await self._put_status(obj, status, name)
        return as_document(obj)

    async def _put_status(self, obj: dict[str, Any], status: dict[str, Any], name: str) -> dict[str, Any]:
        meta = obj["metadata"]
        body = {"apiVersion": API_VERSION, "kind": SCHEDULE_KIND,
                "metadata": {"name": meta["name"], "namespace": self.namespace,
                             "resourceVersion": meta["resourceVersion"]},
                "status": status}
        try:
            return await self.kube.request("PUT", NVS.path(self.namespace, meta["name"], "status"), body=body)
        except KubeApiError as e:
            raise self._schedule_error(e, name) from None

    async def get_schedule(self, name: str, owner: str | None) -> dict[str, Any]:
        return as_document(await self._schedule_object(name, owner))

    async def _schedule_objects(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        cont = None
        while True:
            try:
                page = await self.kube.request("GET", NVS.path(self.namespace), query={"limit": 500, "continue": cont})
            except KubeApiError as e:
                raise StoreError(f"listing schedules in {self.namespace}: {e.reason}: {e.message}") from None
            items += page.get("items") or []
            cont = (page.get("metadata") or {}).get("continue")
            if not cont:
                return items

    async def list_schedules(self, owner: str | None, every_owner: bool = False) -> list[tuple[str, dict[str, Any]]]:
        """(owner, schedule) pairs by owner and name: ``owner``'s (its label), or with
        ``every_owner`` all of them (the scheduler's loop; those applied with kubectl too)."""
        out = [(_owner_of(obj), as_document(obj)) for obj in await self._schedule_objects()
               if every_owner or _owner_of(obj) == (owner or "")]
        out.sort(key=lambda pair: (pair[0], pair[1]["metadata"]["name"]))
        return out

    async def replace_schedule(self, doc: dict[str, Any], owner: str | None) -> dict[str, Any]:
        """Write ``doc`` if the object is still at its ``metadata.resourceVersion`` (else Conflict):
        its status (when changed), then its spec (when changed), each on the version before it."""
        name = doc["metadata"]["name"]
        version = str(doc["metadata"].get("resourceVersion"))
        obj = await self._schedule_object(name, owner)
        if obj["metadata"]["resourceVersion"] != version:
            raise Conflict(f"schedule {name!r} was modified (write based on version {version})")
        status = doc.get("status") or {}
        if (obj.get("status") or {}) != status:
            obj = await self._put_status(obj, status, name)
        if (obj.get("spec") or {}) != doc["spec"]:  # after the status: a resume whose spec write loses a race
            body = copy.deepcopy(obj)               # has moved its last tick on, never its pause off alone
            body["spec"] = doc["spec"]
            body.pop("status", None)
            try:
                obj = await self.kube.request("PUT", NVS.path(self.namespace, obj["metadata"]["name"]), body=body,
                                              query={"fieldValidation": "Strict"})
            except KubeApiError as e:
                raise self._schedule_error(e, name) from None
        return as_document(obj)

    async def delete_schedule(self, name: str, owner: str | None) -> None:
        obj = await self._schedule_object(name, owner)
        meta = obj["metadata"]
        try:  # on its uid: a schedule made again meanwhile under the name is not this one
            await self.kube.request("DELETE", NVS.path(self.namespace, meta["name"]),
                                    body={"apiVersion": "v1", "kind": "DeleteOptions",
                                          "preconditions": {"uid": meta["uid"]}})
        except KubeApiError as e:
            raise self._schedule_error(e, name) from None

    async def schedule_jobs(self, name: str, owner: str | None, limit: int | None = None) -> list[Job]:
        """The jobs schedule ``name`` of ``owner`` made (their labels), newest first."""
        def mine(job: dict[str, Any]) -> bool:
            labels = (job.get("metadata") or {}).get("labels") or {}
            return labels.get(SCHEDULE_LABEL) == name and (labels.get(OWNER_LABEL) or "") == (owner or "")

        jobs = sorted((j for j in await self._all() if mine(j)), key=self._job_sort_key, reverse=True)
        if limit:
            jobs = jobs[:limit]
        return [cast(Job, copy.deepcopy(j)) for j in jobs]
