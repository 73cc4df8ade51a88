"""The phase timeline of a job: one entry per phase with start, end, duration
and reason, read from the job's transition events or, when those have
expired (the API server keeps Events about an hour), from
``status.transitions``.

This is the one timeline rule; the lab's ``labextension/src/timeline.ts``
implements the same, and both run the vectors in ``tests/vectors/timeline``
(docs/architecture.md, "The timeline rule"):

1. From the events, every event whose reason is a transition reason
   (``model.REASON_PHASE``) with a readable time gives an entry; any other
   event (``…StatusUpdateFailed`` warnings, unknown reasons) is no transition.
2. One entry per phase: the earliest.
3. When the events give fewer entries than ``status.transitions`` holds (some
   expired or were never recorded), the status history is used instead.
4. Entries in time order; a phase ends when the next begins, a terminal phase
   at its own start; the last non-terminal phase is current and lasts until
   ``now`` (never negative).
"""

from __future__ import annotations

import datetime as _dt
from typing import Any, Mapping, Sequence

from jupyter_nbvalidation.core.model import REASON_PHASE, Phase, isotime, parse_time, transition_event_type, utcnow


def _time(value: Any) -> _dt.datetime | None:
    try:
        t = parse_time(value) if isinstance(value, str) else None
    except ValueError:
        return None
    return t.replace(tzinfo=_dt.timezone.utc) if t is not None and t.tzinfo is None else t


def _first_per_phase(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rule 2 and the order of rule 4 (a stable sort: equal times keep their order)."""
    seen: set[str] = set()
    out = []
    for entry in sorted(entries, key=lambda e: e["at"]):
        if entry["phase"] not in seen:
            seen.add(entry["phase"])
            out.append(entry)
    return out


def _from_events(events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rule 1: the transition entries the events record."""
    out = []
    for ev in events:
        phase = REASON_PHASE.get(ev.get("reason", ""))
        at = _time(ev.get("eventTime"))
        if phase is None or at is None:
            continue
        out.append({"phase": phase, "reason": ev.get("reason"), "message": ev.get("note", ""),
                    "time": ev.get("eventTime"), "at": at, "type": ev.get("type", "Normal")})
    return _first_per_phase(out)


def _from_transitions(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for t in history:
        at = _time(t.get("time"))
        if not t.get("phase") or at is None:
            continue
        out.append({"phase": t["phase"], "reason": t.get("reason"), "message": t.get("message", ""),
                    "time": t["time"], "at": at, "type": transition_event_type(t["phase"])})
    return _first_per_phase(out)


def compute_timeline(job: Mapping[str, Any], events: Sequence[Mapping[str, Any]], now: str | None = None) -> dict[str, Any]:
    status = job.get("status") or {}
    entries = _from_events(events)
    source = "events"
    history = _from_transitions(status.get("transitions") or [])
    if len(entries) < len(history):
        # rule 3: some events expired or were never recorded; the status history is complete
        entries, source = history, "transitions"
    now_t = _time(now) or utcnow()
    phases = []
    for i, t in enumerate(entries):
        start = t["at"]
        terminal = t["phase"] in Phase.TERMINAL
        end = entries[i + 1]["at"] if i + 1 < len(entries) else (start if terminal else None)
        dur = ((end or now_t) - start).total_seconds()
        phases.append({
            "phase": t["phase"], "reason": t.get("reason"), "message": t.get("message", ""),
            "type": t.get("type", "Normal"), "start": t["time"],
            "end": isotime(end) if end else None, "durationSeconds": round(max(dur, 0.0), 6),
            "current": end is None,
        })
    return {
        "name": job["metadata"]["name"],
        "source": source,
        "phase": status.get("phase", ""),
        "terminal": status.get("phase") in Phase.TERMINAL,
        "phases": phases,
    }
