"""The loop that creates schedules' jobs on time (docs/watching.md, Schedules). It runs in the
server's process beside the engine, and only while that engine leads (the store's lease): a
follower on the same data dir never runs a tick. It sleeps on an asyncio timer until the
soonest next tick (or a change made through this server: ``JobService.schedule_changed``; at
most ``max_sleep`` seconds, so a schedule written through another server is seen), runs
what is due through the same submit path a REST POST takes (schedules.fire), and computes
every next tick from the stored state: after a restart a tick missed while the server was
down runs once, never once per missed tick. All store work is the store's (off the loop)."""

from __future__ import annotations

import asyncio
import datetime as _dt
from typing import Any

from jupyter_nbvalidation.core import cron
from jupyter_nbvalidation.core.model import parse_time
from jupyter_nbvalidation.core.tasks import cancel_and_wait, wait_within
from jupyter_nbvalidation.service.jobs import JobService
from jupyter_nbvalidation.service.schedules import fire, prune


class Scheduler:
    """One per server (app.py starts and stops it)."""

    def __init__(self, service: JobService, log: Any, max_sleep: float = 60.0):
        self.service = service
        self.log = log
        self.max_sleep = max_sleep
        self.ticks = 0  # ticks run (a job submitted or a skip counted)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.service.store.schedules_supported and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop(), name="nbvalidation-scheduler")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None

    async def _loop(self) -> None:
        engine, wake = self.service.engine, self.service.schedule_wake
        while True:
            await engine.leading.wait()
            wake.clear()  # a change made from here on wakes the sleep below
            try:
                delay = await self.run_due()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the store away for a moment: look again soon, never a dead loop
                self.log.warning("nbvalidation: the schedules could not be looked at: %s", e)
                delay = 5.0
            try:
                await wait_within(wake.wait(), min(delay, self.max_sleep))
            except asyncio.TimeoutError:
                pass

    async def run_due(self, now: _dt.datetime | None = None) -> float:
        """Run every tick that is due (one per schedule: the last one missed); the seconds until
        the soonest next one."""
        now = now or _dt.datetime.now(_dt.timezone.utc)
        seconds = self.service.schedule_seconds_field
        soonest = self.max_sleep
        due: list[tuple[str | None, dict[str, Any], _dt.datetime]] = []
        for owner, doc in await self.service.store.list_schedules(None, every_owner=True):
            if doc["spec"].get("suspend") or not self.service.engine.leading.is_set():
                continue
            try:
                expr = cron.parse(doc["spec"]["schedule"], seconds=seconds)
            except cron.CronError:  # (checked at create; a server without the tests' seconds field)
                continue
            after = parse_time((doc.get("status") or {}).get("lastTickTime")) or \
                parse_time(doc["metadata"]["creationTimestamp"])
            assert after is not None
            nxt = expr.next_after(after)
            if nxt <= now:
                tick = expr.latest_until(after, now) or nxt
                due.append((owner or None, doc, tick))
                nxt = expr.next_after(tick)
            soonest = min(soonest, (nxt - now).total_seconds())
        if due:  # at once: one schedule's slow fetch never delays another's tick
            await asyncio.gather(*(self._fire(owner, doc, tick) for owner, doc, tick in due))
            soonest -= (_dt.datetime.now(_dt.timezone.utc) - now).total_seconds()  # the time the runs took
        return max(soonest, 0.01)

    async def _fire(self, owner: str | None, doc: dict[str, Any], tick: _dt.datetime) -> None:
        name = doc["metadata"]["name"]
        try:
            job = await fire(self.service, owner, doc, tick)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a conflict (another server ran it), the store away: the next look decides
            self.log.warning("nbvalidation: schedule %s: the tick at %s did not run: %s", name, tick, e)
            return
        self.ticks += 1
        if job is None:
            self.log.info("nbvalidation: schedule %s: the tick at %s was skipped (its last run still goes)",
                          name, tick)
            return
        self.log.info("nbvalidation: schedule %s: job %s submitted for the tick at %s", name,
                      job["metadata"]["name"], tick)
        try:
            await prune(self.service, owner, doc)
        except Exception as e:  # best effort: the next run prunes again
            self.log.warning("nbvalidation: schedule %s: old runs could not be removed: %s", name, e)
