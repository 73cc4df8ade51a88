"""One reconciler per data dir: a Lease row in the SQLite store.

The semantics of client-go's leader election over a ``coordination.k8s.io/v1``
Lease; the loop is election.py's, shared with k8s/leader.py, so the engine
sees one mechanism (``became_leader`` / ``lost_leadership``) whatever the
backend. What this record adds:

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

import time
from typing import Any

from jupyter_nbvalidation.core.election import Elector, microtime, new_identity
from jupyter_nbvalidation.core.model import parse_time

__all__ = ["StoreLeaseElector", "microtime", "new_identity"]


class StoreLeaseElector(Elector):
    def __init__(self, store: Any, name: str = "reconciler", *, identity: str | None = None,
                 lease_duration: float = 10.0, renew_deadline: float = 7.0, retry_period: float = 1.0,
                 log: Any = None):
        super().__init__(name, identity=identity, lease_duration=lease_duration, renew_deadline=renew_deadline,
                         retry_period=retry_period, log=log)
        self.store = store
        self.record: dict[str, Any] | None = None  # the last record seen

    def _spec(self, current: dict[str, Any] | None, acquire: bool) -> dict[str, Any]:
        spec = dict(current or {})
        spec.pop("resourceVersion", None)
        return self.lease_spec(spec, acquire)

    def _expired(self, lease: dict[str, Any]) -> bool:
        fingerprint = f"{lease.get('holderIdentity')}|{lease.get('renewTime')}|{lease.get('resourceVersion')}"
        duration = float(lease.get("leaseDurationSeconds") or self.lease_duration)
        if self.unchanged_for_duration(fingerprint, duration):
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

