"""One active reconciler per namespace: a ``coordination.k8s.io/v1`` Lease.

client-go's leader election (the loop and its rules are in election.py,
shared with the local backend's SQLite lease) over our plain-dict client
(``kubernetes.aio.leaderelection`` writes local time with a ``Z`` suffix and
needs its typed client, so it is not used): a GET of the Lease, then a PUT
with the read ``resourceVersion`` as precondition (POST when there is none);
a 409 means somebody else won the race. Times are MicroTime.
"""

from __future__ import annotations

from typing import Any

from jupyter_nbvalidation.backends.kubernetes.client import Kube, KubeApiError, Resource
from jupyter_nbvalidation.core.election import Elector, microtime, new_identity

__all__ = ["LEASES", "LeaseElector", "microtime", "new_identity"]

LEASES = Resource("coordination.k8s.io/v1", "leases")


class LeaseElector(Elector):
    def __init__(self, kube: Kube, namespace: str, name: str, *, identity: str | None = None,
                 lease_duration: float = 15.0, renew_deadline: float = 10.0, retry_period: float = 2.0,
                 log: Any = None):
        super().__init__(name, identity=identity, lease_duration=lease_duration, renew_deadline=renew_deadline,
                         retry_period=retry_period, log=log)
        self.kube = kube
        self.namespace = namespace

    def describe(self) -> str:
        return f"namespace {self.namespace}, lease {self.name}"

    def _spec(self, current: dict[str, Any] | None, acquire: bool) -> dict[str, Any]:
        return self.lease_spec((current or {}).get("spec"), acquire)

    async def try_acquire_or_renew(self) -> bool:
        path = LEASES.path(self.namespace, self.name)
        try:
            lease = await self.kube.request("GET", path, timeout=self.retry_period * 2)
        except KubeApiError as e:
            if e.status != 404:
                raise
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(None, True)}
            try:
                await self.kube.request("POST", LEASES.path(self.namespace), body=body,
                                        timeout=self.retry_period * 2)
            except KubeApiError as e2:
                if e2.status == 409:
                    return False
                raise
            self.holder = self.identity
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        self.holder = holder or None
        fingerprint = f"{holder}|{spec.get('renewTime')}|{lease['metadata'].get('resourceVersion')}"
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        expired = self.unchanged_for_duration(fingerprint, duration)
        mine = holder == self.identity
        if holder and not mine and not expired:
            return False  # held by someone alive
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {**{k: v for k, v in lease["metadata"].items() if k != "managedFields"}},
                "spec": self._spec(lease, not mine)}
        try:
            await self.kube.request("PUT", path, body=body, timeout=self.retry_period * 2)
        except KubeApiError as e:
            if e.status == 409:
                return False
            raise
        self.holder = self.identity
        return True

    async def _release(self) -> None:
        """Give the lease up (graceful shutdown): the others take over at once."""
        path = LEASES.path(self.namespace, self.name)
        try:
            lease = await self.kube.request("GET", path, timeout=2)
            spec = dict(lease.get("spec") or {})
            if spec.get("holderIdentity") != self.identity:
                return
            spec.update(holderIdentity="", leaseDurationSeconds=1, renewTime=microtime())
            lease["spec"] = spec
            lease["metadata"].pop("managedFields", None)
            await self.kube.request("PUT", path, body=lease, timeout=2)
        except Exception as e:
            if self.log:
                self.log.debug("nbvalidation: releasing lease %s failed: %s", self.name, e)

    def state(self) -> dict[str, Any]:
        return {**super().state(), "lease": f"{self.namespace}/{self.name}"}
