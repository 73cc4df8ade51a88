"""Transition events: built in the events.k8s.io/v1 shape, posted best effort.

Posting goes through bounded queues drained by background tasks (one queue
per shard of jobs), so a slow or failing event sink never blocks or fails a
reconcile (docs/architecture.md, "Events" rule 5). Failures are logged and counted. The event of a
transition has a fixed name, so posting it twice records it once. Secrets
never get here: notes are built from reasons and messages the engine writes,
and are scrubbed again anyway.
"""

from __future__ import annotations

import asyncio
import re
import socket
import time
import zlib
from typing import Any, Awaitable, Callable

from jupyter_nbvalidation.core.documents import Event, Job
from jupyter_nbvalidation.core.model import REASON_ACTIONS, isotime
from jupyter_nbvalidation.core.redaction import scrub
from jupyter_nbvalidation.core.tasks import cancel_all

REPORTING_CONTROLLER = "nbvalidation.dev/notebook-validation-controller"
NOTE_LIMIT = 1024

def truncate_bytes(text: str, limit: int = NOTE_LIMIT) -> str:
    raw = text.encode("utf-8")
    if len(raw) <= limit:
        return text
    return raw[: limit - 3].decode("utf-8", "ignore") + "..."


def reporting_instance(prefix: str = "jupyter-nbvalidation") -> str:
    return f"{prefix}-{socket.gethostname()}"[:128]


def transition_event_name(job: Job, index: int) -> str:
    """The name of the event of ``status.transitions[index]``: fixed, so that
    posting it twice (a retry, a recovery after a crash, two leaders during a
    failover) records it once. The uid part tells a job from an earlier one of
    the same name."""
    return f"{_fixed_prefix(job)}.t{index}"


def _fixed_prefix(job: Job) -> str:
    meta = job["metadata"]
    uid = re.sub(r"[^a-z0-9]", "", str(meta.get("uid", "")).lower())[:12] or "0"
    return f"{meta['name'][:200]}.{uid}"


def notice_event_name(job: Job, reason: str) -> str:
    """The name of a job's notice of ``reason`` (vocabulary.NOTICE_REASONS): fixed,
    so that it is recorded once per job, whoever posts it how often."""
    return f"{_fixed_prefix(job)}.n-" + re.sub(r"[^a-z0-9-]", "", reason.lower())[:40]


def make_event(job: Job, *, reason: str, note: str, type_: str = "Normal",
               action: str | None = None, instance: str | None = None,
               transition: int | None = None, event_time: str | None = None, notice: bool = False) -> Event:
    """``transition``: the index in ``status.transitions`` this event records
    (its name is then fixed); ``notice``: the job's one notice of ``reason``
    (its name is fixed too); ``event_time``: when it happened (default now)."""
    meta = job["metadata"]
    if notice:
        name = notice_event_name(job, reason)
    elif transition is not None:
        name = transition_event_name(job, transition)
    else:
        name = f"{meta['name'][:200]}.{time.time_ns():x}"
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {
            "name": name,
            "namespace": meta.get("namespace", "default"),
        },
        "eventTime": event_time or isotime(),
        "reason": reason[:128],
        "action": (action or REASON_ACTIONS.get(reason.removesuffix("StatusUpdateFailed"), "Reconcile"))[:128],
        "type": type_,
        "note": truncate_bytes(scrub(note)),
        "regarding": {
            "apiVersion": job.get("apiVersion"),
            "kind": job.get("kind"),
            "name": meta["name"],
            "namespace": meta.get("namespace", "default"),
            "uid": meta["uid"],
        },
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": instance or reporting_instance(),
    }


class EventRecorder:
    """Queues + poster tasks. ``sink`` stores an event (store.add_event);
    ``listeners`` are told about each event after the post was attempted
    (the live stream to the lab).

    Events are spread over ``posters`` queues by the job's uid: the events of
    one job are posted one after the other, in order, while different jobs'
    events are posted concurrently (a burst of transitions across hundreds
    of jobs must not overflow a single serial poster). A full queue drops the
    event, counted and logged: posting never blocks a reconcile."""

    def __init__(self, sink: Callable[[Event], Awaitable[Any]], *, log: Any,
                 instance: str | None = None, maxsize: int = 1000, posters: int = 8):
        self._sink = sink
        self.log = log
        self.instance = instance or reporting_instance()
        self._queues: list[asyncio.Queue[tuple[Event, Job]]] = [
            asyncio.Queue(maxsize=maxsize) for _ in range(max(1, posters))]
        self._tasks: list[asyncio.Task[None]] = []
        self.listeners: list[Callable[[Event, Job], None]] = []
        # told of each event that could not be recorded (after its retries) or was dropped: the
        # engine then marks its job's status (status.eventsIncomplete), so no loss is silent
        self.lost_listeners: list[Callable[[Event, Job], None]] = []
        self.post_retries = 3  # tries of one event (a busy store), 0.2 s, 0.4 s apart: bounded
        self.posted = 0
        self.failed = 0
        self.dropped = 0

    def start(self) -> None:
        if not self._tasks:
            loop = asyncio.get_running_loop()
            self._tasks = [loop.create_task(self._poster(q), name=f"nbvalidation-events-{i}")
                           for i, q in enumerate(self._queues)]

    async def stop(self) -> None:
        if self._tasks:
            await self.flush()
            await cancel_all(self._tasks)

    def emit(self, job: Job, *, reason: str, note: str, type_: str = "Normal",
             action: str | None = None, transition: int | None = None, event_time: str | None = None,
             notice: bool = False) -> Event:
        """Queue one event; never raises, never waits."""
        event = make_event(job, reason=reason, note=note, type_=type_, action=action, instance=self.instance,
                           transition=transition, event_time=event_time, notice=notice)
        queue = self._queues[zlib.crc32(job["metadata"]["uid"].encode()) % len(self._queues)]
        try:
            queue.put_nowait((event, job))
        except asyncio.QueueFull:
            self.dropped += 1
            self.log.warning("nbvalidation: event queue full, dropped %s for %s", reason, job["metadata"]["name"])
            self._lost(event, job)
        return event

    def _lost(self, event: Event, job: Job) -> None:
        for listener in list(self.lost_listeners):
            try:
                listener(event, job)
            except Exception:
                self.log.exception("nbvalidation: event loss listener failed")

    async def _post(self, event: Event) -> Exception | None:
        """Post one event, trying again a bounded number of times; the last error, or None."""
        error: Exception | None = None
        for attempt in range(max(1, self.post_retries)):
            if attempt:
                await asyncio.sleep(0.2 * attempt)
            try:
                await self._sink(event)
                return None
            except Exception as e:
                error = e
                if getattr(e, "permanent", False):  # a damaged store: trying again cannot help
                    break
        return error

    async def flush(self) -> None:
        """Wait until every queued event was posted (or failed)."""
        await asyncio.gather(*(q.join() for q in self._queues))

    async def _poster(self, queue: asyncio.Queue[tuple[Event, Job]]) -> None:
        while True:
            event, job = await queue.get()
            try:
                error = await self._post(event)
                if error is None:
                    self.posted += 1
                else:  # log, count, and say so on the job (lost_listeners): never silent
                    self.failed += 1
                    self.log.warning("nbvalidation: could not record event %s for %s: %s",
                                     event["reason"], event["regarding"]["name"], error)
                    self._lost(event, job)
                for listener in list(self.listeners):
                    try:
                        listener(event, job)
                    except Exception:
                        self.log.exception("nbvalidation: event listener failed")
            finally:
                queue.task_done()
