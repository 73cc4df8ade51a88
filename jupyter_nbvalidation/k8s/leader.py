"""One active reconciler per namespace: a ``coordination.k8s.io/v1`` Lease.

client-go's leader election, in asyncio, over our plain-dict client
(``kubernetes.aio.leaderelection`` writes local time with a ``Z`` suffix
and needs its typed client, so it is not used):

- every ``retry_period`` a follower GETs the Lease; it takes it (PUT with the
  read ``resourceVersion`` as precondition, or POST when there is none) when
  it is free, or when its record has not changed for ``lease_duration`` as
  measured on *this* process's monotonic clock (no clock-skew assumptions);
- the leader renews every ``retry_period``; when it could not renew for
  ``renew_deadline`` it steps down (``on_stopped_leading``) before the lease
  can expire for the others, so two leaders never overlap by design (and the
  engine's conditional writes make an overlap harmless anyway);
- a 409 on the write means somebody else won the race: stay a follower;
- on cancellation the leader releases the Lease (empty holder), so a
  graceful restart fails over in one ``retry_period``.

Times are RFC 3339 UTC with microseconds (MicroTime).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import socket
import time
import uuid
from typing import Any, Callable

from .client import Kube, KubeApiError, Resource

LEASES = Resource("coordination.k8s.io/v1", "leases")


def microtime(now: dt.datetime | None = None) -> str:
    now = now or dt.datetime.now(dt.timezone.utc)
    return now.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def new_identity() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class LeaseElector:
    def __init__(self, kube: Kube, namespace: str, name: str, *, identity: str | None = None,
                 lease_duration: float = 15.0, renew_deadline: float = 10.0, retry_period: float = 2.0,
                 log: Any = None):
        if not lease_duration > renew_deadline > retry_period > 0:
            raise ValueError("need lease_duration > renew_deadline > retry_period > 0")
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity or new_identity()
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.log = log
        self.is_leader = False
        self.holder: str | None = None  # the last holder we saw
        self.transitions = 0
        self.last_error: str | None = None
        self._observed: tuple[str, float] | None = None  # (record fingerprint, monotonic time first seen)
        self._last_renew = 0.0

    # -- one attempt ------------------------------------------------------------
    def _spec(self, current: dict | None, acquire: bool) -> dict:
        now = microtime()
        spec = dict((current or {}).get("spec") or {})
        transitions = int(spec.get("leaseTransitions") or 0)
        if acquire:
            if spec.get("holderIdentity") and spec.get("holderIdentity") != self.identity:
                transitions += 1
            spec["acquireTime"] = now
        spec.update(holderIdentity=self.identity, leaseDurationSeconds=max(1, int(round(self.lease_duration))),
                    renewTime=now, leaseTransitions=transitions)
        return spec

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
        now = time.monotonic()
        if self._observed is None or self._observed[0] != fingerprint:
            self._observed = (fingerprint, now)
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        mine = holder == self.identity
        if holder and not mine and now < self._observed[1] + duration:
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

    async def _attempt(self) -> bool:
        try:
            ok = await self.try_acquire_or_renew()
            self.last_error = None
            return ok
        except asyncio.CancelledError:
            raise
        except Exception as e:  # unreachable, 5xx, 403: not leading this round
            self.last_error = str(e)
            if self.log:
                self.log.debug("nbvalidation: lease %s/%s: %s", self.namespace, self.name, e)
            return False

    # -- the loop ---------------------------------------------------------------
    async def run(self, on_started_leading: Callable[[], None], on_stopped_leading: Callable[[], None]) -> None:
        """Campaign until cancelled."""
        try:
            while True:
                if not self.is_leader:
                    if await self._attempt():
                        self.is_leader = True
                        self.transitions += 1
                        self._last_renew = time.monotonic()
                        if self.log:
                            self.log.info("nbvalidation: %s leads namespace %s (lease %s)",
                                          self.identity, self.namespace, self.name)
                        on_started_leading()
                        continue
                else:
                    if await self._attempt():
                        self._last_renew = time.monotonic()
                    elif self.holder not in (None, self.identity) or \
                            time.monotonic() - self._last_renew >= self.renew_deadline:
                        self.is_leader = False
                        if self.log:
                            self.log.warning("nbvalidation: %s stopped leading namespace %s (%s)", self.identity,
                                             self.namespace, self.last_error or f"lease held by {self.holder}")
                        on_stopped_leading()
                await asyncio.sleep(self.retry_period)
        finally:
            if self.is_leader:
                self.is_leader = False
                on_stopped_leading()
                await asyncio.shield(self._release())

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

    def state(self) -> dict:
        return {"lease": f"{self.namespace}/{self.name}", "identity": self.identity, "isLeader": self.is_leader,
                "holder": self.holder, "leaseDurationSeconds": self.lease_duration,
                "renewDeadlineSeconds": self.renew_deadline, "retryPeriodSeconds": self.retry_period,
                "lastError": self.last_error}
