"""Leader election with client-go's rules, written once for both lease stores.

The Kubernetes backend keeps its lease as a ``coordination.k8s.io/v1`` Lease
(k8s/leader.py); the local backend keeps the same record as a row in its SQLite
file (store/lease.py). Both subclass :class:`Elector`, which holds the loop and
the record's fields; a subclass only reads, writes and releases its record:

- every ``retry_period`` a candidate reads the lease and takes it (a write
  conditional on the version it read) when it is free (empty holder: released
  on a clean stop) or when its record has not changed for the lease duration,
  measured on *this* process's monotonic clock;
- the holder renews every ``retry_period``; when it could not renew for
  ``renew_deadline`` it stops leading before the lease can expire for the
  others, so two leaders never overlap by design;
- a lost race (the conditional write failed) leaves it a follower;
- on cancellation the holder releases the lease, so a clean stop fails over
  within one ``retry_period`` of the followers.

Times are RFC 3339 UTC with microseconds (a Lease's MicroTime). Nothing here
imports a store or a client: the engine sees one mechanism (``became_leader`` /
``lost_leadership``) whatever the backend.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import socket
import time
import uuid
from typing import Any, Callable


def microtime(now: dt.datetime | None = None) -> str:
    now = now or dt.datetime.now(dt.timezone.utc)
    return now.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def new_identity() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Elector:
    """The campaign loop; subclasses implement :meth:`try_acquire_or_renew`,
    :meth:`_release` and name their lease in :meth:`describe`."""

    def __init__(self, name: str, *, identity: str | None = None, lease_duration: float,
                 renew_deadline: float, retry_period: float, log: Any = None):
        if not lease_duration > renew_deadline > retry_period > 0:
            raise ValueError("need lease_duration > renew_deadline > retry_period > 0")
        self.name = name
        self.identity = identity or new_identity()
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.log = log
        self.is_leader = False
        self.holder: str | None = None  # the last holder seen
        self.transitions = 0  # leadership gains of this process
        self.last_error: str | None = None
        self._observed: tuple[str, float] | None = None  # (record fingerprint, monotonic time first seen)
        self._last_renew = 0.0

    # -- the record -------------------------------------------------------------
    def lease_spec(self, current: dict[str, Any] | None, acquire: bool) -> dict[str, Any]:
        """The record this process writes: ``current`` (a Lease's spec fields)
        renewed, or taken over when ``acquire``."""
        now = microtime()
        spec = dict(current or {})
        transitions = int(spec.get("leaseTransitions") or 0)
        if acquire:
            if spec.get("holderIdentity") and spec.get("holderIdentity") != self.identity:
                transitions += 1
            spec["acquireTime"] = now
        spec.update(holderIdentity=self.identity, leaseDurationSeconds=max(1, int(round(self.lease_duration))),
                    renewTime=now, leaseTransitions=transitions)
        return spec

    def unchanged_for_duration(self, fingerprint: str, duration: float) -> bool:
        """Whether the record with this fingerprint has been seen unchanged for
        ``duration`` seconds of this process's monotonic clock."""
        now = time.monotonic()
        if self._observed is None or self._observed[0] != fingerprint:
            self._observed = (fingerprint, now)
        return now >= self._observed[1] + duration

    async def try_acquire_or_renew(self) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    async def _release(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self) -> str:
        return f"lease {self.name}"

    # -- the loop ---------------------------------------------------------------
    async def _attempt(self) -> bool:
        try:
            ok = await self.try_acquire_or_renew()
            self.last_error = None
            return ok
        except asyncio.CancelledError:
            raise
        except Exception as e:  # unreachable, locked, 5xx, 403: not leading this round
            self.last_error = str(e)
            if self.log:
                self.log.debug("nbvalidation: %s: %s", self.describe(), e)
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
                            self.log.info("nbvalidation: %s leads (%s)", self.identity, self.describe())
                        on_started_leading()
                        continue
                else:
                    if await self._attempt():
                        self._last_renew = time.monotonic()
                    elif self.holder not in (None, self.identity) or \
                            time.monotonic() - self._last_renew >= self.renew_deadline:
                        self.is_leader = False
                        if self.log:
                            self.log.warning("nbvalidation: %s stopped leading (%s): %s", self.identity,
                                             self.describe(), self.last_error or f"held by {self.holder}")
                        on_stopped_leading()
                await asyncio.sleep(self.retry_period)
        finally:
            if self.is_leader:
                self.is_leader = False
                on_stopped_leading()
                await asyncio.shield(self._release())

    def state(self) -> dict[str, Any]:
        return {"lease": self.name, "identity": self.identity, "isLeader": self.is_leader,
                "holder": self.holder, "leaseDurationSeconds": self.lease_duration,
                "renewDeadlineSeconds": self.renew_deadline, "retryPeriodSeconds": self.retry_period,
                "lastError": self.last_error}
