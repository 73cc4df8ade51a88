"""Leadership: only the leader reconciles.

An engine that takes the lead (``became_leader``, from the backend's election or at
once when the backend elects none) first posts the transition events a crash left
missing (``recover_events``), then looks at every active job again; an engine that
loses it (``lost_leadership``) stops picking up work and forgets the slots it held.
"""

from __future__ import annotations

import asyncio
import time

from jupyter_nbvalidation.core.documents import Job, Transition
from jupyter_nbvalidation.core.events import transition_event_name
from jupyter_nbvalidation.core.model import parse_time, transition_event_type
from jupyter_nbvalidation.core.tasks import cancel_and_wait, wait_within
from jupyter_nbvalidation.engine.state import EngineState


class Leadership(EngineState):
    """Taking the lead, losing it and giving it back."""

    def became_leader(self) -> None:
        """Start reconciling: missing transition events are posted first,
        then every active job is looked at again."""
        self._term += 1
        self._tasks = [t for t in self._tasks if not t.done()]  # earlier take-overs (a flapping lease)
        self._tasks.append(asyncio.get_running_loop().create_task(self._take_over(self._term)))

    async def _take_over(self, term: int) -> None:
        try:
            await wait_within(self.recover_events(), self.recovery_timeout)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # best effort (docs/architecture.md, Events): never keeps the engine from reconciling
            self.log.warning("nbvalidation: recovering missing events failed: %s", e)
        if term != self._term:  # lost leadership meanwhile
            return
        self.leading.set()
        self.log.info("nbvalidation: this server reconciles jobs")
        await self._resync_once()

    def lost_leadership(self) -> None:
        """Stop picking up work; an in-flight reconcile finishes (its writes
        are conditional on resourceVersion, so an overlap cannot duplicate)."""
        self._term += 1
        for admitted in self._admitted.values():
            admitted.clear()
        self._waiting.clear()
        if self.leading.is_set():
            if self._handing_back or not self.running:  # step_down or a clean stop: given back, not taken
                self.log.info("nbvalidation: handed the lead back")
            else:
                self.log.warning("nbvalidation: lost leadership; another server reconciles now")
        self.leading.clear()

    async def recover_events(self) -> int:
        """Post the event of every recorded transition that has none.

        A transition's event is posted after its status write; a process that
        dies in between (or with events still queued) leaves the transition in
        ``status.transitions`` without its event. Each missing one is posted
        now, with the transition's own time, under the transition's fixed event
        name, so that a copy still on its way from another process is recorded
        once. Runs before this engine reconciles, so a job's events stay in
        order. Transitions older than the store keeps events (or than
        ``event_recovery_window``) are left alone: their events would have
        expired anyway. Returns how many were posted."""
        now = time.time()
        window = self.event_recovery_window
        if self.store.event_ttl is not None:
            window = min(window, self.store.event_ttl - 300)
        cutoff = now - window
        jobs: list[Job] = []
        token = None
        while True:
            page, token = await self.store.list_jobs(limit=500, continue_token=token)
            jobs += page
            if not token:
                break
        recent: dict[str, tuple[Job, list[tuple[int, Transition]]]] = {}
        for job in jobs:
            transitions = (job.get("status") or {}).get("transitions") or []
            mine = [(i, t) for i, t in enumerate(transitions)
                    if (when := parse_time(t.get("time"))) is not None and when.timestamp() >= cutoff]
            if mine:
                recent[job["metadata"]["uid"]] = (job, mine)
        events = await self.store.list_events_of([job for job, _ in recent.values()])
        posted = 0
        for uid, (job, mine) in recent.items():
            names = {e["metadata"]["name"] for e in events.get(uid, [])}
            reasons = {e.get("reason") for e in events.get(uid, [])}  # a phase, so its reason, comes once per job
            for i, t in mine:
                if transition_event_name(job, i) in names or t.get("reason") in reasons:
                    continue
                self.recorder.emit(job, reason=t.get("reason", ""), note=t.get("message", ""),
                                   type_=transition_event_type(t.get("phase", "")), transition=i,
                                   event_time=t.get("time"))
                posted += 1
        if posted:
            self.log.warning("nbvalidation: posted %d transition event(s) missing after a restart", posted)
        self.events_recovered += posted
        return posted

    async def step_down(self) -> None:
        """Stop campaigning and release the lead (a follower takes over at once);
        the store stays readable. Used by a CLI engine once its job is done."""
        self._handing_back = True
        try:
            if self._election is not None:
                await cancel_and_wait(self._election)
            self.lost_leadership()
        finally:
            self._handing_back = False
