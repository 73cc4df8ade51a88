"""One reconciler per data dir: a Lease row in the SQLite store.

The semantics (and the loop) of client-go's leader election over a
``coordination.k8s.io/v1`` Lease, as k8s/leader.py follows them for the
Kubernetes backend, so the engine sees one mechanism (``became_leader`` /
``lost_leadership``) whatever the backend:

- every ``retry_period`` a candidate reads the Lease; it takes it (a write
  conditional on the version it read) when it is free (``holderIdentity``
  empty: released on a clean stop), or when its record has not changed for
  ``leaseDurationSeconds`` as measured on this process's monotonic clock, or
  when its ``renewTime`` is older than the duration on the wall clock (all
  holders run on this machine: the data dir is local, which SQLite's WAL
  mode needs anyway), so a process starting long after a crash does not wait;
- the holder renews every ``retry_period``; when it could not renew for
  ``renew_deadline`` it stops leading before the others may take over;
- a lost race (the conditional write matched no row) leaves it a follower;
- on cancellation the holder releases the Lease (empty holder): a clean
  stop fails over within one ``retry_period`` of the followers.

The record's SQL runs on the store's lease thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import socket
import time
import uuid
from typing import Any, Callable

from ..model import parse_time


def microtime(now: dt.datetime | None = None) -> str:
    now = now or dt.datetime.now(dt.timezone.utc)
    return now.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def new_identity() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class StoreLeaseElector:
    def __init__(self, store: Any, name: str = "reconciler", *, identity: str | None = None,
                 lease_duration: float = 10.0, renew_deadline: float = 7.0, retry_period: float = 1.0,
                 log: Any = None):
        if not lease_duration > renew_deadline > retry_period > 0:
            raise ValueError("need lease_duration > renew_deadline > retry_period > 0")
        self.store = store
        self.name = name
        self.identity = identity or new_identity()
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.log = log
        self.is_leader = False
        self.holder: str | None = None  # the last holder seen
        self.record: dict | None = None  # the last record seen
        self.transitions = 0  # leadership gains of this process
        self.last_error: str | None = None
        self._observed: tuple[str, float] | None = None  # (record fingerprint, monotonic time first seen)
        self._last_renew = 0.0

    def _spec(self, current: dict | None, acquire: bool) -> dict:
        now = microtime()
        spec = dict(current or {})
        spec.pop("resourceVersion", None)
        transitions = int(spec.get("leaseTransitions") or 0)
        if acquire:
            if spec.get("holderIdentity") and spec.get("holderIdentity") != self.identity:
                transitions += 1
            spec["acquireTime"] = now
        spec.update(holderIdentity=self.identity, leaseDurationSeconds=max(1, int(round(self.lease_duration))),
                    renewTime=now, leaseTransitions=transitions)
        return spec

    def _expired(self, lease: dict) -> bool:
        fingerprint = f"{lease.get('holderIdentity')}|{lease.get('renewTime')}|{lease.get('resourceVersion')}"
        now = time.monotonic()
        if self._observed is None or self._observed[0] != fingerprint:
            self._observed = (fingerprint, now)
        duration = float(lease.get("leaseDurationSeconds") or self.lease_duration)
        if now >= self._observed[1] + duration:
            return True
        renewed = parse_time(lease.get("renewTime"))
        return renewed is not None and time.time() >= renewed.timestamp() + duration

    async def try_acquire_or_renew(self) -> bool:
        lease = await self.store.get_lease(self.name)
        self.record = lease
        if lease is None:
            spec = self._spec(None, True)
            if not await self.store.put_lease(self.name, spec, None):
                return False
            self.record, self.holder = spec, self.identity
            return True
        holder = lease.get("holderIdentity") or ""
        self.holder = holder or None
        mine = holder == self.identity
        if holder and not mine and not self._expired(lease):
            return False  # held by someone alive
        spec = self._spec(lease, not mine)
        if not await self.store.put_lease(self.name, spec, lease["resourceVersion"]):
            return False
        self.record, self.holder = spec, self.identity
        return True

    async def _attempt(self) -> bool:
        try:
            ok = await self.try_acquire_or_renew()
            self.last_error = None
            return ok
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a locked or unreadable file: not leading this round
            self.last_error = str(e)
            if self.log:
                self.log.debug("nbvalidation: lease %s: %s", self.name, e)
            return False

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
                            self.log.info("nbvalidation: %s holds the lease of %s", self.identity, self.name)
                        on_started_leading()
                        continue
                else:
                    if await self._attempt():
                        self._last_renew = time.monotonic()
                    elif self.holder not in (None, self.identity) or \
                            time.monotonic() - self._last_renew >= self.renew_deadline:
                        self.is_leader = False
                        if self.log:
                            self.log.warning("nbvalidation: %s stopped holding the lease (%s)", self.identity,
                                             self.last_error or f"held by {self.holder}")
                        on_stopped_leading()
                await asyncio.sleep(self.retry_period)
        finally:
            if self.is_leader:
                self.is_leader = False
                on_stopped_leading()
                await asyncio.shield(self._release())

    async def _release(self) -> None:
        """Give the lease up (clean stop): a follower takes over at its next look."""
        try:
            lease = await self.store.get_lease(self.name)
            if lease is None or lease.get("holderIdentity") != self.identity:
                return
            spec = dict(lease)
            version = spec.pop("resourceVersion")
            spec.update(holderIdentity="", leaseDurationSeconds=1, renewTime=microtime())
            if await self.store.put_lease(self.name, spec, version):
                self.record, self.holder = spec, None
        except Exception as e:
            if self.log:
                self.log.debug("nbvalidation: releasing lease %s failed: %s", self.name, e)

    def state(self) -> dict:
        return {"lease": self.name, "identity": self.identity, "isLeader": self.is_leader,
                "holder": self.holder, "leaseDurationSeconds": self.lease_duration,
                "renewDeadlineSeconds": self.renew_deadline, "retryPeriodSeconds": self.retry_period,
                "lastError": self.last_error}
