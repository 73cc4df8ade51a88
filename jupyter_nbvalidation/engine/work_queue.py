"""The engine's work queue and its workers: one in-flight reconcile per job.

A job is queued by name (a store watch, a backend's notification, a timer, the
resync); a worker takes it, reconciles it (phases.py) and queues it again after the
delay the step asked for, or after a capped, jittered backoff when the reconcile
raised (retries.py). Only the leader's workers reconcile (leadership.py); a follower
still stops what it runs itself once the holder finishes or cancels the job.
"""

from __future__ import annotations

import asyncio

from jupyter_nbvalidation.core.errors import TemporaryFailure
from jupyter_nbvalidation.core.model import CANCEL_ANNOTATION, is_terminal
from jupyter_nbvalidation.core.tasks import wait_within
from jupyter_nbvalidation.engine.state import EngineState
from jupyter_nbvalidation.store.base import NotFound


class WorkQueue(EngineState):
    """Queues jobs by name and runs the workers that reconcile them."""

    def enqueue(self, name: str) -> None:
        if not self.running:
            return
        if not self.leading.is_set() and self.backend.owns(name):  # its processes outlive a lead (local)
            # a follower still runs something it started while it led: stop its own
            # process when the holder finishes or cancels the job
            task = asyncio.get_running_loop().create_task(self._follower_check(name))
            self._follower_checks.add(task)
            task.add_done_callback(self._follower_checks.discard)
        if name in self._dirty:
            return
        self._dirty.add(name)
        self._idle.clear()
        if name not in self._processing:
            self._queue.put_nowait(name)

    async def _follower_check(self, name: str) -> None:
        try:
            job = await self.store.get(name)
        except NotFound:
            job = None
        except Exception as e:
            self.log.debug("nbvalidation: follower check of %s failed: %s", name, e)
            return
        if self.leading.is_set():
            return  # leads again: the reconcile takes care of it
        if job is None:
            return
        phase = (job.get("status") or {}).get("phase")
        if is_terminal(phase):
            await self._forget(job)
        elif CANCEL_ANNOTATION in (job["metadata"].get("annotations") or {}):
            await self._cancel(job, phase)

    def enqueue_after(self, name: str, delay: float) -> None:
        loop = asyncio.get_running_loop()
        when = loop.time() + delay
        existing = self._timers.get(name)
        if existing is not None:
            if existing.when() <= when:
                return
            existing.cancel()

        def fire() -> None:
            self._timers.pop(name, None)
            self.enqueue(name)

        self._timers[name] = loop.call_at(when, fire)

    async def _worker(self) -> None:
        # not `while True`: should anything below swallow the stop's
        # cancellation (asyncio code that does exists), the worker still ends
        while self.running:
            await self.leading.wait()
            name = await self._queue.get()
            if not self.leading.is_set():  # lost leadership while waiting: leave it queued
                self._queue.put_nowait(name)
                continue
            self._dirty.discard(name)
            self._processing.add(name)
            try:
                delay = await self.reconcile(name)
                self._failures.pop(name, None)
                if delay is not None:
                    self.enqueue_after(name, delay)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                # a TemporaryFailure (and anything unforeseen) leaves the phase as it is and
                # comes back with capped, jittered exponential backoff, at least its own delay
                self.errors += 1
                n = self._failures.get(name, 0) + 1
                self._failures[name] = n
                backoff = self.backoff(n, e.delay if isinstance(e, TemporaryFailure) else None)
                self.log.warning("nbvalidation: reconcile of %s failed (%s); retrying in %.1fs",
                                 name, e, backoff)
                self.enqueue_after(name, backoff)
            finally:
                self._processing.discard(name)
                if name in self._dirty:
                    self._queue.put_nowait(name)
                if not self._dirty and not self._processing:
                    self._idle.set()

    async def _resync_once(self) -> None:
        try:
            for job in await self.store.list_active():
                self.enqueue(job["metadata"]["name"])
        except Exception as e:
            self.log.warning("nbvalidation: resync failed: %s", e)

    async def _resync_loop(self) -> None:
        """Safety net: enqueue every non-terminal job now and then."""
        while True:
            await asyncio.sleep(self.resync_period)
            if self.leading.is_set():
                await self._resync_once()

    def activity(self) -> dict[str, int]:
        """Jobs queued, being reconciled, and waiting for a timer in this process."""
        return {"queued": len(self._dirty), "processing": len(self._processing), "timers": len(self._timers)}

    def busy(self) -> bool:
        return any(self.activity().values())

    async def wait_idle(self, timeout: float | None = None) -> None:
        if not self.leading.is_set() and not self._processing:
            return  # a follower reconciles nothing: its queue waits for leadership
        await wait_within(self._idle.wait(), timeout)
