"""One self-contained HTML page for a batch: inline CSS, no script, nothing fetched
from the network; every text from a notebook or a job is escaped."""

from __future__ import annotations

from datetime import datetime, timezone
from html import escape

from jupyter_nbvalidation.cli.batch import Outcome
from jupyter_nbvalidation.cli.reports import cell_label, failure_of
from jupyter_nbvalidation.cli.reports.console import first_failure
from jupyter_nbvalidation.core.model import format_duration

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse}td,th{padding:.25em .6em;border-bottom:1px solid #ddd;text-align:left}
.v{font-weight:600}.Succeeded,.Unchanged{color:#1a7f37}.Failed,.Refused{color:#cf222e}.Cancelled{color:#9a6700}.Error{color:#bc4c00}
pre{background:#f6f8fa;padding:.6em;overflow:auto;white-space:pre-wrap}
.del{color:#cf222e}.add{color:#1a7f37}
.tl{display:flex;height:1.2em;width:40em;background:#eee;margin:.3em 0}
.tl span{display:block;height:100%;font-size:10px;overflow:hidden;color:#fff;white-space:nowrap}
.p-Initializing{background:#8c959f}.p-Building{background:#0969da}.p-BuildComplete{background:#54aeff}
.p-ValidationRunning{background:#8250df}.p-Succeeded{background:#1a7f37}.p-Failed{background:#cf222e}
section{margin:1.5em 0;border-top:2px solid #ccc;padding-top:.5em}
"""


def _diff_html(diff: str) -> str:
    out = []
    for line in diff.splitlines():
        cls = "del" if line.startswith("-") and not line.startswith("---") else \
            "add" if line.startswith("+") and not line.startswith("+++") else ""
        out.append(f'<span class="{cls}">{escape(line)}</span>' if cls else escape(line))
    return "\n".join(out)


def _timeline(outcome: Outcome) -> str:
    phases = (outcome.timeline or {}).get("phases") or []
    if not phases:
        return ""
    total = sum(p.get("durationSeconds") or 0 for p in phases) or 1.0
    bars, rows = [], []
    for p in phases:
        dur = p.get("durationSeconds") or 0.0
        width = max(1.0, 100.0 * dur / total)
        phase = escape(str(p.get("phase", "")))
        bars.append(f'<span class="p-{phase}" style="width:{width:.2f}%" title="{phase} {dur:.2f}s">{phase}</span>')
        rows.append(f"<tr><td>{phase}</td><td>{escape(str(p.get('start') or ''))}</td>"
                    f"<td>{escape(format_duration(dur))}</td><td>{escape(str(p.get('reason') or ''))}</td></tr>")
    return (f'<div class="tl">{"".join(bars)}</div><table><tr><th>phase</th><th>start</th><th>duration</th>'
            f"<th>reason</th></tr>{''.join(rows)}</table>")


def _section(i: int, o: Outcome) -> str:
    parts = [f'<section id="nb{i}"><h2>{escape(o.item.shown)} <span class="v {escape(o.verdict)}">{escape(o.verdict)}</span></h2>',
             f"<p>job <code>{escape(o.name)}</code> · {o.seconds:.1f} s"
             + (f" · {escape(o.message)}" if o.message else "") + "</p>"]
    if o.environment:
        parts.append(f'<p class="env">environment: {escape(o.environment)}</p>')
    if o.since_last_success:
        parts.append(f'<p class="since">{escape(o.since_last_success)}</p>')
    if o.culprit:
        parts.append(f'<p class="culprit">{escape(o.culprit)}</p>')
    parts.append(_timeline(o))
    if o.job is not None and o.verdict == "Error":  # not the notebook's: the cause, apart from failures
        parts.append("<h3>Infrastructure error (not the notebook's failure)</h3>"
                     f"<pre>{escape((o.job.get('status') or {}).get('message') or o.message)}</pre>")
    elif o.job is not None and o.verdict in ("Failed", "Cancelled"):
        f = failure_of(o.job)
        if f is not None:
            parts.append(f"<h3>{escape(f.headline)}</h3>")
            if f.error:
                parts.append(f"<pre>{escape(f.error)}</pre>")
            for d in f.diffs:
                idx = d.get("cellIndex")
                where = cell_label(idx) if isinstance(idx, int) else "notebook"
                parts.append(f"<h4>{escape(where)}: {escape(str(d.get('diffType', 'differs')))} "
                             "(expected: golden copy, actual: this run)</h4>")
                parts.append(f"<pre>{_diff_html(str(d.get('diff') or ''))}</pre>")
    if o.build_log:
        parts.append(f"<details><summary>build log (tail)</summary><pre>{escape(o.build_log)}</pre></details>")
    parts.append("</section>")
    return "\n".join(parts)


def page(outcomes: list[Outcome], title: str = "Notebook validation") -> str:
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.verdict] = counts.get(o.verdict, 0) + 1
    tally = ", ".join(f"{n} {escape(v.lower())}" for v, n in sorted(counts.items()))
    rows = "".join(
        f'<tr><td><a href="#nb{i}">{escape(o.item.shown)}</a></td><td class="v {escape(o.verdict)}">{escape(o.verdict)}</td>'
        f"<td>{o.seconds:.1f}</td><td><code>{escape(o.name)}</code></td>"
        f"<td>{escape(first_failure(o).splitlines()[0] if first_failure(o) else '')}</td></tr>"
        for i, o in enumerate(outcomes))
    when = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
            f"<style>{CSS}</style></head><body><h1>{escape(title)}</h1>"
            f"<p>{len(outcomes)} notebook(s): {tally} · {escape(when)}</p>"
            "<table><tr><th>notebook</th><th>verdict</th><th>seconds</th><th>job</th><th>first failure</th></tr>"
            f"{rows}</table>\n" + "\n".join(_section(i, o) for i, o in enumerate(outcomes)) + "</body></html>\n")


def write(outcomes: list[Outcome], path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(page(outcomes))
