"""Plain-text views of jobs, timelines and events (CLI and magic)."""

from __future__ import annotations

from typing import Any

from jupyter_nbvalidation.core.model import CellStatus, Phase, Reason, format_duration, parse_time, utcnow
from jupyter_nbvalidation.runner.text import cell_label, strip_ansi
from jupyter_nbvalidation.verdict.environment_record import summary_lines
from jupyter_nbvalidation.why_red.culprit import culprit_line, culprit_of, notification_of

CANCELLED = Reason.CANCELLED  # shown as its own verdict
# before the engine first looks at a job it has no phase yet: shown as "Pending" (README, "REST API")
PENDING = "Pending"
INFRASTRUCTURE = Reason.INFRASTRUCTURE_FAILED  # a fault that is not the notebook's: shown as an error
MARK: dict[str, str] = {Phase.SUCCEEDED: "✔", Phase.FAILED: "✘", CANCELLED: "⊘", INFRASTRUCTURE: "⚠"}


def phase_label(job: dict[str, Any]) -> str:
    """The phase as people read it: a cancelled job says Cancelled (it is stored
    as Failed / reason Cancelled), a job not looked at yet says Pending."""
    st = job.get("status") or {}
    phase = st.get("phase") or PENDING
    if phase == Phase.FAILED and st.get("reason") == Reason.CANCELLED:
        return CANCELLED
    return phase


def progress_text(progress: dict[str, Any] | None, now: float | None = None) -> str:
    """``"cell 4 running, 3.2 s · 3 of 12 code cells done"`` (``status.progress``;
    cell numbers as JupyterLab shows them)."""
    if not progress:
        return ""
    done, total = progress.get("cellsDone", 0), progress.get("cellsTotal", 0)
    counts = f"{done} of {total} code cells done"
    current = progress.get("currentCellIndex")
    if current is None:
        return counts
    started = parse_time(progress.get("currentCellStartedAt"))
    elapsed = ""
    if started is not None:
        seconds = (now if now is not None else utcnow().timestamp()) - started.timestamp()
        elapsed = f", {max(0.0, seconds):.1f} s"
    return f"{cell_label(current)} running{elapsed} · {counts}"


def age(ts: str | None) -> str:
    t = parse_time(ts)
    return format_duration((utcnow() - t).total_seconds()) if t else "-"


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(header, widths, strict=True)).rstrip()]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in rows]
    return "\n".join(lines)


def job_rows(jobs: list[dict[str, Any]]) -> str:
    rows = [[j["metadata"]["name"], phase_label(j),
             j["spec"]["notebook"]["path"], (j.get("status") or {}).get("reason") or "",
             age(j["metadata"].get("creationTimestamp"))] for j in jobs]
    return table(rows, ["NAME", "PHASE", "NOTEBOOK", "REASON", "AGE"]) if rows else "No jobs."


def timeline_bars(timeline: dict[str, Any], width: int = 40) -> str:
    """A compact text timeline: one bar per phase on a shared axis."""
    phases = timeline.get("phases", [])
    if not phases:
        return "(no transitions yet)"
    total = sum(p["durationSeconds"] for p in phases) or 1.0
    out = []
    offset = 0.0
    for p in phases:
        start = int(round(offset / total * width))
        length = max(1, int(round(p["durationSeconds"] / total * width))) if p["phase"] not in Phase.TERMINAL else 1
        char = "!" if p.get("type") == "Warning" or p["phase"] == Phase.FAILED else "#"
        bar = (" " * start + char * length)[:width + 1]
        label = "…" if p.get("current") else format_duration(p["durationSeconds"])
        out.append(f"{p['phase']:<18} {bar:<{width + 1}} {label:>7}  {p.get('reason') or ''}")
        offset += p["durationSeconds"]
    return "\n".join(out)


def _traceback_lines(r: dict[str, Any], keep: int = 12) -> list[str]:
    """The user's line first, then the notebook's own frames, then the end of the traceback."""
    lines = []
    if r.get("errorLine"):
        where = f"line {r['errorLineNumber']} of " if r.get("errorLineNumber") else ""
        lines.append(f"  at {where}the cell: {r['errorLine']}")
    tb = r.get("traceback") or []
    cells = [i for i in r.get("cellFrames") or [] if 0 <= i < len(tb)]
    if cells:
        for i in cells:
            lines += ["  " + ln for ln in strip_ansi(tb[i]).rstrip().splitlines()[:keep]]
        library = len(tb) - len(cells) - 2  # besides the header and the error's own line
        if library > 0:
            lines.append(f"  [{library} library frame(s) not shown]")
        if tb and len(tb) - 1 not in cells:
            lines += ["  " + ln for ln in strip_ansi(tb[-1]).rstrip().splitlines()[-keep:]]
    elif r.get("output"):
        lines += ["  " + ln for ln in strip_ansi(r["output"]).rstrip().splitlines()[-keep:]]
    return lines


def environment_lines(job: dict[str, Any]) -> list[str]:
    """``["Environment:  2 requirements from requirements.txt beside the notebook"]`` for a job whose
    environment was planned (``status.environment``), else none."""
    env = (job.get("status") or {}).get("environment")
    return [f"Environment:  {env}"] if env else []


def failure_lines(job: dict[str, Any]) -> list[str]:
    st = job.get("status") or {}
    lines = []
    idx = st.get("failedCellIndex")
    if idx is not None:
        for r in st.get("results", []):
            if r.get("cellIndex") == idx and r.get("status") == CellStatus.FAILURE:
                message = strip_ansi(r.get("errorMessage", "")).strip().splitlines() or [""]
                lines.append(f"Failed {cell_label(idx)}: {r.get('errorName', '')}: {message[0]}".rstrip(": "))
                lines += ["  " + ln for ln in message[1:12] if ln.strip()]  # the whole message, not its first line
                lines += _traceback_lines(r)
                break
        else:
            lines.append(f"First differing cell: {idx + 1}")
    cr = st.get("comparisonResult") or {}
    if cr.get("result") == "failed":
        lines.append(f"Golden comparison: {cr.get('mismatchedCells')} of "
                     f"{cr.get('totalCells')} cells differ")
        for d in cr.get("diffs", [])[:5]:
            index = d.get("cellIndex")
            lines.append(f"  {cell_label(index) if isinstance(index, int) else 'cell ?'}: {d.get('diffType')}")
            for ln in (d.get("diff") or "").splitlines()[:12]:
                lines.append("    " + ln)
    return lines


def describe(job: dict[str, Any], timeline: dict[str, Any], events: list[dict[str, Any]]) -> str:
    st = job.get("status") or {}
    meta = job["metadata"]
    bs = st.get("buildStatus") or {}
    lines = [
        f"Name:         {meta['name']}",
        f"UID:          {meta.get('uid', '')}",
        f"Notebook:     {job['spec']['notebook']['path']}",
        f"Created:      {meta.get('creationTimestamp', '')} ({age(meta.get('creationTimestamp'))} ago)",
        f"Phase:        {phase_label(job)}",
        f"Reason:       {st.get('reason', '')}",
        f"Message:      {st.get('message', '')}",
        *environment_lines(job),
    ]
    if bs:
        lines.append(f"Build:        {bs.get('phase', '')} {bs.get('strategy', '')} "
                     f"{bs.get('duration', '')} {bs.get('imageReference', '')}".rstrip())
        if bs.get("strategyReason"):
            lines.append(f"Strategy:     {bs['strategy']} ({bs['strategyReason']})")
        if bs.get("logPath"):
            lines.append(f"Build log:    {bs['logPath']}")
    if st.get("progress"):
        lines.append(f"Progress:     {progress_text(st['progress'])}")
    if st.get("buildRetries") or st.get("validationRetries"):
        lines.append(f"Retries:      {retries_text(st)}")
    if st.get("conditions"):
        lines.append("Conditions:   " + ", ".join(f"{c['type']}={c['status']}" for c in st["conditions"]))
    lines += failure_lines(job)
    lines += ["Timeline:", *("  " + ln for ln in timeline_bars(timeline).splitlines())]
    lines.append("Events:" + ("  (incomplete: some could not be recorded; the timeline above comes from "
                              "status.transitions)" if st.get("eventsIncomplete") else ""))
    if events:
        rows = [[e.get("type", ""), e.get("reason", ""), age(e.get("eventTime")),
                 e.get("reportingController", "").split("/")[-1], e.get("note", "")] for e in events]
        lines += ["  " + ln for ln in table(rows, ["TYPE", "REASON", "AGE", "FROM", "MESSAGE"]).splitlines()]
    else:
        lines.append("  <none>")
    return "\n".join(lines)


def environment_block(job: dict[str, Any], record: dict[str, Any] | None) -> str:
    """``describe``'s "Environment:" part (GET /jobs/{name}/environment): the interpreter,
    how many distributions, and each declared one with its exact version."""
    if record is None:
        return ""
    lines = ["Environment:"]
    if record.get("error"):
        lines.append(f"  not recorded: {record['error']}")
    else:
        env = record.get("environment") or {}
        declared = env.get("requirements") or []
        lines += ["  " + ln for ln in summary_lines(record, declared)]
        if env.get("kind") == "interpreter":
            lines.append(f"  (build disabled: the interpreter {env.get('python', '')})")
    return "\n" + "\n".join(lines)


def changes_block(changes: dict[str, Any] | None) -> str:
    """``describe``'s "Since the last success" line (GET /jobs/{name}/changes)."""
    if not changes or not changes.get("since"):
        return ""
    since = changes["since"]
    when = since.get("completionTime")
    return (f"\nSince the last success ({since['name']}, {age(when)} ago): {changes['sentence']}" if when
            else f"\nSince the last success ({since['name']}): {changes['sentence']}")


def culprit_block(job: dict[str, Any], changes: dict[str, Any] | None) -> str:
    """``describe``'s notification (a schedule's series that changed colour) and the red's cause,
    when they are known (why_red/culprit.py)."""
    lines = ""
    note = notification_of(job)
    if note is not None:
        seen = ", seen" if note.get("seen") else ""
        lines += (f"\nNotification: {note.get('event')} (schedule {note.get('schedule')}, "
                  f"{note.get('state')}{seen})")
    cause = culprit_line(culprit_of(job, changes))
    if cause:
        lines += "\n" + cause[:1].upper() + cause[1:]
    return lines


def retries_text(status: dict[str, Any]) -> str:
    """``"validation 2 (last 2026-12-02T14:01:02Z)"``: the retries after transient faults."""
    parts = [f"{what} {status[key]}" for what, key in (("build", "buildRetries"), ("validation", "validationRetries"))
             if status.get(key)]
    last = f" (last {status['lastRetryTime']})" if status.get("lastRetryTime") else ""
    return ", ".join(parts) + last


def events_table(events: list[dict[str, Any]]) -> str:
    rows = [[e.get("eventTime", ""), e.get("type", ""), e.get("reason", ""), e.get("note", "")] for e in events]
    return table(rows, ["TIME", "TYPE", "REASON", "MESSAGE"]) if rows else "No events."


def verdict_line(job: dict[str, Any]) -> str:
    st = job.get("status") or {}
    phase = phase_label(job)
    message = st.get("message", "")
    if phase == CANCELLED:
        return f"{MARK[CANCELLED]} {job['metadata']['name']}: Cancelled {message}".rstrip()
    if phase == Phase.FAILED and st.get("reason") == INFRASTRUCTURE:
        # not the notebook's failure: an error, the cause first
        return f"{MARK[INFRASTRUCTURE]} {job['metadata']['name']}: Error ({INFRASTRUCTURE}) {message}".rstrip()
    return f"{MARK.get(phase, '…')} {job['metadata']['name']}: {phase} ({st.get('reason', '')}) {message}"
