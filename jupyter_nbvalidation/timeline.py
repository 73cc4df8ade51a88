"""The phase timeline of a job: one entry per phase with start, end, duration
and reason. Built from the job's transition events; when those have expired
(the API server keeps Events about an hour) from ``status.transitions``."""

from __future__ import annotations

from .model import REASON_PHASE, Phase, isotime, parse_time, transition_event_type, utcnow


def _from_events(events: list[dict]) -> list[dict]:
    """Transition records from events: the events whose reason carries a phase.
    Fallback warnings (…StatusUpdateFailed) are not transitions."""
    out = []
    for ev in events:
        phase = REASON_PHASE.get(ev.get("reason", ""))
        if phase is None:
            continue
        out.append({"phase": phase, "reason": ev.get("reason"), "message": ev.get("note", ""),
                    "time": ev.get("eventTime"), "type": ev.get("type", "Normal")})
    return out


def compute_timeline(job: dict, events: list[dict], now: str | None = None) -> dict:
    status = job.get("status") or {}
    transitions = _from_events(events)
    source = "events"
    history = status.get("transitions") or []
    if len(transitions) < len(history):
        # some events expired or were never recorded: the status history is complete
        transitions = [{**t, "type": transition_event_type(t.get("phase", ""))} for t in history]
        source = "transitions"
    transitions.sort(key=lambda t: parse_time(t["time"]) or utcnow())
    now_t = parse_time(now) if now else utcnow()
    phases = []
    for i, t in enumerate(transitions):
        start = parse_time(t["time"])
        terminal = t["phase"] in Phase.TERMINAL
        end = parse_time(transitions[i + 1]["time"]) if i + 1 < len(transitions) else (start if terminal else None)
        dur = ((end or now_t) - start).total_seconds() if start else 0.0
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
