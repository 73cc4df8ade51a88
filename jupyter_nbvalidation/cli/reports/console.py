"""The terminal side of a batch: a live line per notebook and the final summary table."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from jupyter_nbvalidation.cli.batch import Item, Listener, Outcome
from jupyter_nbvalidation.cli.render import table
from jupyter_nbvalidation.cli.reports import failure_of

MARK = {"Succeeded": "✔", "Unchanged": "=", "Failed": "✘", "Error": "⚠", "Cancelled": "⊘", "Refused": "!"}


def first_failure(outcome: Outcome) -> str:
    if outcome.verdict == "Refused":
        return outcome.message
    if outcome.job is None or outcome.verdict in ("Succeeded", "Unchanged"):
        return ""
    f = failure_of(outcome.job)
    return f.headline if f else outcome.message


def not_reused(outcome: Outcome) -> str:
    """Why a Succeeded verdict will not be reused by the verdict cache (its kernel read
    what a later run cannot check, verdict/readset.py), or ""."""
    if outcome.job is None or outcome.verdict != "Succeeded":
        return ""
    read_set = (outcome.job.get("status") or {}).get("readSet")
    return str(read_set.get("uncacheable") or "") if isinstance(read_set, dict) else ""


def finished_line(outcome: Outcome, done: int, total: int) -> str:
    width = len(str(total))
    verdict = outcome.verdict
    where = f" {outcome.name}" if outcome.name else ""
    extra = first_failure(outcome)
    extra = f"  {extra.splitlines()[0][:160]}" if extra else ""
    return (f"[{done:>{width}}/{total}] {MARK.get(verdict, '?')} {verdict:<9} {outcome.seconds:6.1f}s  "
            f"{outcome.item.shown}{where}{extra}")


class Progress(Listener):
    """One line per notebook as it finishes; on a terminal, also the running ones
    below it, redrawn in place (their phase and time so far)."""

    def __init__(self, total: int, stream: TextIO | None = None, live: bool | None = None):
        self.stream = stream or sys.stdout
        self.live = self.stream.isatty() if live is None else live
        self.total = total
        self.done = 0
        self.running: dict[str, tuple[Item, str, float]] = {}
        self._drawn = 0

    def _clear(self) -> None:
        if self.live and self._drawn:
            self.stream.write(f"\x1b[{self._drawn}F\x1b[J")
            self._drawn = 0

    def _draw(self) -> None:
        if not self.live:
            return
        now = time.monotonic()
        lines = [f"  … {phase:<18} {now - t0:6.1f}s  {item.shown} {name}"
                 for name, (item, phase, t0) in self.running.items()]
        for line in lines:
            self.stream.write(line[:200] + "\n")
        self._drawn = len(lines)
        self.stream.flush()

    def started(self, item: Item, name: str) -> None:
        self._clear()
        self.running[name] = (item, "Pending", time.monotonic())
        self._draw()

    def phase(self, item: Item, name: str, phase: str) -> None:
        if name in self.running:
            self._clear()
            self.running[name] = (item, phase, self.running[name][2])
            self._draw()

    def finished(self, outcome: Outcome) -> None:
        self._clear()
        self.running.pop(outcome.name, None)
        self.done += 1
        self.stream.write(finished_line(outcome, self.done, self.total) + "\n")
        why = not_reused(outcome)
        if why:
            self.stream.write(f"    not reused by the verdict cache: {why}\n")
        self._draw()
        self.stream.flush()


def summary(outcomes: list[Outcome]) -> str:
    rows = [[o.item.shown, o.verdict, f"{o.seconds:.1f}", o.name, first_failure(o).splitlines()[0][:120]
             if first_failure(o) else ""] for o in outcomes]
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.verdict] = counts.get(o.verdict, 0) + 1
    order = ["Succeeded", "Unchanged", "Failed", "Error", "Cancelled", "Refused"]
    tally = ", ".join(f"{counts[v]} {v.lower()}" for v in order if v in counts)
    if "Error" in counts:  # said apart: these are not the notebooks' failures
        tally = tally.replace(f"{counts['Error']} error", f"{counts['Error']} error (infrastructure, not the notebook)")
    # under the table, each notebook that did not pass with the environment it ran in
    envs = [f"  {o.item.shown}: {o.environment}" for o in outcomes
            if o.verdict in ("Failed", "Error", "Cancelled") and o.environment]
    # and, for a notebook that passed before, what changed since (issue 22)
    since = [f"  {o.item.shown}: {o.since_last_success}" for o in outcomes if o.since_last_success]
    return (table(rows, ["NOTEBOOK", "VERDICT", "SECONDS", "JOB", "FIRST FAILURE"])
            + ("\nEnvironments of the notebooks that did not pass:\n" + "\n".join(envs) if envs else "")
            + ("\nWhat changed since their last success:\n" + "\n".join(since) if since else "")
            + f"\n{len(outcomes)} notebook(s): {tally}")
