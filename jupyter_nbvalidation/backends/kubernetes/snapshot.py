"""The notebook snapshot of a job, taken at submit: the ConfigMap
``nvj-<name>-input`` (``notebook.ipynb``, ``golden.ipynb``,
``requirements.txt`` as text; the input files as binaryData), created right
after the job and owned by it; read back by ``prepare`` and mounted into the
validation pod."""

from __future__ import annotations

import asyncio
import base64
import copy
import logging
from typing import TYPE_CHECKING, Any

import jupyter_nbvalidation.backends.kubernetes.objects as obj
import jupyter_nbvalidation.environment.local_sources as local_sources
from jupyter_nbvalidation.backends.kubernetes.children import Children
from jupyter_nbvalidation.backends.kubernetes.client import CONFIGMAPS, KubeApiError
from jupyter_nbvalidation.backends.kubernetes.store import CREATED_ANNOTATION
from jupyter_nbvalidation.core.documents import Job
from jupyter_nbvalidation.core.errors import InputRejected, TemporaryFailure
from jupyter_nbvalidation.core.model import isotime, parse_time, utcnow
from jupyter_nbvalidation.core.tasks import wait_within
from jupyter_nbvalidation.store.base import StoreError

if TYPE_CHECKING:  # pragma: no cover
    from jupyter_nbvalidation.backends.kubernetes.store import KubernetesJobStore

SNAPSHOT_GRACE_SECONDS = 60  # a job younger than this may still be getting its snapshot


class Snapshots:
    def __init__(self, children: Children, store: "KubernetesJobStore", namespace: str, log: logging.Logger):
        self.children = children
        self.store = store
        self.namespace = namespace
        self.log = log
        self._submitting: dict[str, asyncio.Event] = {}

    def check(self, files: dict[str, bytes], limit: int, folder: str | None = None) -> None:
        """InputRejected (naming the field) when ``files`` cannot be one ConfigMap of at most
        ``limit`` bytes. ``folder``: the input files are the notebook's folder (no spec.inputFiles)."""
        try:
            data, binary, index = obj.split_snapshot(files)
        except ValueError as e:
            field = "spec.inputFiles" if str(e).startswith(obj.INPUTS_PREFIX) else "spec.notebook.path"
            raise InputRejected(str(e), field) from None
        size = obj.configmap_size(data, binary)
        if size > limit and folder is not None and index:
            named = [k for k in sorted(files) if not k.startswith(obj.INPUTS_PREFIX)]
            raise InputRejected(f"spec.notebook.path: the notebook's folder {folder} travels with the job "
                                f"(no spec.inputFiles): {len(index)} files, {size} bytes in its input ConfigMap "
                                f"with {' + '.join(named)}, limited here to {limit} bytes "
                                "(c.KubernetesBackend.max_notebook_bytes_configmap; Kubernetes caps ConfigMaps at "
                                "1 MiB): name the files the notebook reads in spec.inputFiles (only they travel "
                                "then)", "spec.notebook.path", status=413, code="TooLarge")
        if size > limit:
            named = [k for k in sorted(files) if not k.startswith(obj.INPUTS_PREFIX)]
            what = " + ".join(named) + (f" + {len(index)} input file(s)" if index else "")
            field = "spec.inputFiles" if index else "spec.notebook.path"
            raise InputRejected(f"{field}: the notebook snapshot ({what}) is {size} bytes; the kubernetes backend "
                                f"stores it in one ConfigMap, limited here to {limit} bytes "
                                "(c.KubernetesBackend.max_notebook_bytes_configmap; Kubernetes caps ConfigMaps at "
                                "1 MiB)", field, status=413, code="TooLarge")

    async def submit(self, job: Job, files: dict[str, bytes], limit: int, folder: str | None = None) -> Job:
        """Create the job and its snapshot, or neither."""
        self.check(files, limit, folder)
        job = copy.deepcopy(job)
        meta = job["metadata"]
        name = meta["name"]
        meta["namespace"] = self.namespace
        annotations = meta.setdefault("annotations", {})
        annotations[obj.INPUT_ANNOTATION] = obj.input_configmap_name(name)
        annotations[CREATED_ANNOTATION] = isotime()
        done = self._submitting[name] = asyncio.Event()
        try:
            created = await self.store.create(job)
            try:
                await self.children.kube.request("POST", CONFIGMAPS.path(self.namespace),
                                                 body=obj.input_configmap(created, files))
            except KubeApiError as e:
                try:  # nothing half-created
                    await self.store.delete(name)
                except StoreError as de:
                    self.log.warning("nbvalidation: could not roll back job %s: %s", name, de)
                raise StoreError(f"storing the notebook snapshot of {name} failed: {e.reason}: {e.message}") from None
            return created
        finally:
            done.set()
            self._submitting.pop(name, None)

    async def adopt(self, job: Job, files: dict[str, bytes] | None, annotations: dict[str, str], limit: int,
                    folder: str | None = None) -> None:
        """A job made past the service (kubectl) whose notebook the reconciler fetched: its snapshot
        ConfigMap made from ``files`` (None: nothing to store, its fetch failed), then
        ``annotations`` written on the job, which say it is done (an adoption cut short is made
        again: a ConfigMap left by it is replaced)."""
        name = job["metadata"]["name"]
        annotations = dict(annotations)
        if files is not None:
            self.check(files, limit, folder)
            body = obj.input_configmap(job, files)
            path = CONFIGMAPS.path(self.namespace)
            try:
                await self.children.kube.request("POST", path, body=body)
            except KubeApiError as e:
                if e.status != 409:
                    raise StoreError(f"storing the notebook snapshot of {name} failed: {e.reason}: {e.message}") \
                        from None
                try:
                    await self.children.kube.request("PUT", CONFIGMAPS.path(self.namespace, body["metadata"]["name"]),
                                                     body=body)
                except KubeApiError as e2:
                    raise StoreError(f"storing the notebook snapshot of {name} failed: {e2.reason}: "
                                     f"{e2.message}") from None
            annotations[obj.INPUT_ANNOTATION] = obj.input_configmap_name(name)
        await self.store.set_annotations(name, annotations)

    async def read(self, job: Job) -> tuple[dict[str, Any], dict[str, bytes]]:
        """The snapshot's ``data``, and of its ``binaryData`` the packed local paths of the
        requirements (Backend.read_snapshot makes the plan's Snapshot of them; the input
        files stay in the ConfigMap, which the validation Pod mounts)."""
        name = job["metadata"]["name"]
        pending = self._submitting.get(name)
        if pending is not None:  # this process is still storing the snapshot
            await wait_within(pending.wait(), 30)
        cm_name = (job["metadata"].get("annotations") or {}).get(obj.INPUT_ANNOTATION) or obj.input_configmap_name(name)
        cm = await self.children.read(CONFIGMAPS, None, self.children.ns(job), cm_name)
        if cm is None:
            created = parse_time(job["metadata"].get("creationTimestamp")) or utcnow()
            if (utcnow() - created).total_seconds() < SNAPSHOT_GRACE_SECONDS:
                # another server may be between creating the job and its snapshot
                raise TemporaryFailure(f"the notebook snapshot of {name} is not stored yet")
            raise InputRejected(f"The notebook snapshot of this job (ConfigMap {cm_name}) is missing.",
                                "spec.notebook.path")
        binary = {}
        packed = (cm.get("binaryData") or {}).get(local_sources.ARCHIVE)
        if packed is not None:
            binary[local_sources.ARCHIVE] = base64.b64decode(packed)
        return cm.get("data") or {}, binary

    async def files(self, job: Job) -> dict[str, bytes]:
        """The files stored with the job at submit, by the names the service gave them
        (``notebook.ipynb``, ``requirements.txt``, ``inputs/<path>`` ...); empty when the
        snapshot is gone (the change summary reads them)."""
        cm_name = (job["metadata"].get("annotations") or {}).get(obj.INPUT_ANNOTATION) or \
            obj.input_configmap_name(job["metadata"]["name"])
        cm = await self.children.read(CONFIGMAPS, None, self.children.ns(job), cm_name)
        if cm is None:
            return {}
        data, binary = cm.get("data") or {}, cm.get("binaryData") or {}
        out = {k: v.encode() for k, v in data.items() if k != obj.INPUTS_INDEX}
        for key, path in obj.inputs_index(data):
            if key in binary:
                out[f"{obj.INPUTS_PREFIX}{path}"] = base64.b64decode(binary[key])
            elif key in data:  # an input file with the bytes of a text file stored once
                out[f"{obj.INPUTS_PREFIX}{path}"] = data[key].encode()
        if local_sources.ARCHIVE in binary:
            out[local_sources.ARCHIVE] = base64.b64decode(binary[local_sources.ARCHIVE])
        return out

    def forget(self, uid: str) -> None:
        """Nothing is kept per job (the engine's plan holds what was read)."""

    def clear(self) -> None:
        pass
