"""Admission: at most ``caps[phase]`` jobs in Building / ValidationRunning at once.

A job that may not enter its next phase yet is recorded as Queued (reason only: no
phase flip, one Normal event when it starts waiting) and looks again when a slot
frees or after ``queue_poll``; jobs go in submit order, round-robin by owner (a team's
JupyterHub service: ``fair_order``). The slots in use are counted
from the store, so a restarted engine, or the one that took the lead, counts the jobs
an earlier one let in.
"""

from __future__ import annotations

import copy

from jupyter_nbvalidation.core.documents import Job, JobStatus
from jupyter_nbvalidation.core.model import CANCEL_ANNOTATION, ConditionType, EventReason, Phase, build_enabled
from jupyter_nbvalidation.engine.state import EngineState
from jupyter_nbvalidation.store.base import owner_of


def fair_order(waiting: list[Job], holding: list[Job]) -> list[Job]:
    """The waiting jobs in the order they get slots: round-robin by owner (the label
    ``nbvalidation.dev/owner``; jobs without one are one owner), each owner's in submit order.
    An owner's n-th waiting job comes in round n + (the slots that owner holds now), so one
    user's 20-notebook run never holds another's single click behind all of it; with one owner
    this is submit order."""
    held: dict[str | None, int] = {}
    for j in holding:
        held[owner_of(j)] = held.get(owner_of(j), 0) + 1
    by_submit = sorted(waiting, key=lambda j: (j["metadata"].get("creationTimestamp") or "", j["metadata"]["name"]))
    seen: dict[str | None, int] = {}
    keyed = []
    for j in by_submit:
        o = owner_of(j)
        turn = held.get(o, 0) + seen.get(o, 0)
        seen[o] = seen.get(o, 0) + 1
        keyed.append((turn, j["metadata"].get("creationTimestamp") or "", j["metadata"]["name"], j))
    return [k[-1] for k in sorted(keyed, key=lambda k: k[:3])]


class Admission(EngineState):
    """Holds, frees and counts the build and validation slots."""

    def _release(self, name: str, phase: str | None = None) -> None:
        """``name`` no longer holds a slot (of ``phase``, or any): the queued jobs look again."""
        freed = False
        for p, admitted in self._admitted.items():
            if phase in (None, p) and name in admitted:
                admitted.discard(name)
                freed = True
        self._waiting.discard(name)
        if freed or phase is not None:
            for waiting in sorted(self._waiting):
                self.enqueue(waiting)

    @staticmethod
    def _wants(job: Job, phase: str) -> bool:
        """Whether ``job`` waits for a slot of ``phase`` (the phase it enters next)."""
        st = job.get("status") or {}
        if CANCEL_ANNOTATION in (job["metadata"].get("annotations") or {}):
            return False
        now = st.get("phase", "")
        if phase == Phase.BUILDING:
            return now == Phase.INITIALIZING and build_enabled(job["spec"])
        return now == Phase.BUILD_COMPLETE or (now == Phase.INITIALIZING and not build_enabled(job["spec"]))

    async def _admit(self, job: Job, phase: str) -> float | None:
        """None when ``job`` may enter ``phase`` now (its slot is held from here), else
        the delay before it looks again, after recording it as Queued.

        The slots in use are counted from the store (every job in ``phase``: right after
        a restart and on the server that took the lead) together with the jobs this engine
        let in whose move the store may not show yet. Jobs wait in turn (``fair_order``: submit
        order, round-robin by owner): a job goes only when fewer jobs ahead of it wait for the
        same slot than slots are free."""
        cap = self.caps.get(phase)
        name = job["metadata"]["name"]
        if not cap:
            return None
        async with self._admission:
            active = await self.store.list_active()
            names = {j["metadata"]["name"]: j for j in active}
            admitted = self._admitted[phase]
            for n in list(admitted):  # the store shows it past that phase (or ended): its slot is free
                j = names.get(n)
                if j is None or ((j.get("status") or {}).get("phase", "") not in (phase, "")
                                 and not self._wants(j, phase)):
                    admitted.discard(n)
            in_use = {n for n, j in names.items() if (j.get("status") or {}).get("phase") == phase} | admitted
            in_use.discard(name)
            free = cap - len(in_use)
            waiting = fair_order([j for j in active if self._wants(j, phase) and j["metadata"]["name"] not in in_use],
                                 [names[n] for n in in_use if n in names])
            ahead = next((i for i, j in enumerate(waiting) if j["metadata"]["name"] == name), 0)
            if ahead < free:
                admitted.add(name)
                self._waiting.discard(name)
                return None
            self._waiting.add(name)
        what = "build" if phase == Phase.BUILDING else "validation"
        message = f"Waiting for a {what} slot ({len(in_use)} of {cap} in use"
        message += f"; {ahead} queued before it)." if ahead else ")."
        await self._queued(job, message)
        return self.queue_poll

    async def _queued(self, job: Job, message: str) -> None:
        """status.reason Queued with ``message`` (no phase or condition flip: no transition
        event); one Normal ``Queued`` event when the job starts waiting."""
        st = job.get("status") or {}
        if st.get("reason") == EventReason.QUEUED:
            return  # told already: the message is not rewritten while it waits
        wrote = [False]

        def decide(cur: Job) -> JobStatus | None:
            cs = cur.get("status") or {}
            wrote[0] = False
            if cs.get("phase") != st.get("phase") or cs.get("reason") == EventReason.QUEUED:
                return None
            status = copy.deepcopy(cs)
            status["reason"], status["message"] = EventReason.QUEUED.value, message
            for c in status.get("conditions") or []:
                if c.get("type") == ConditionType.READY:
                    c["reason"], c["message"] = EventReason.QUEUED.value, message
            wrote[0] = True
            return status

        written = await self._write(job, decide)
        if wrote[0]:
            self.recorder.emit(written, reason=EventReason.QUEUED, note=message, type_="Normal", action="Queue")
