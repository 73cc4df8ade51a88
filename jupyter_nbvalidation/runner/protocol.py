"""What a runner reports, written and read in one place.

A runner reports through three channels, all produced here and all read here:

* the **result document** (``--result FILE``, and the last stdout line
  ``NBVALIDATION-RESULT <JSON>``, see :func:`result_line` / :func:`parse_log`);
* ``NBVALIDATION-PROGRESS {...}`` lines (``--progress``): one ``plan`` record
  (how many code cells will run), then a ``start`` and an ``end`` record per
  executed cell; :class:`ProgressReader` folds them into the job's
  ``status.progress`` (the local backend reads them from the runner's log
  file, the Kubernetes backend from the validation Pod's log);
* ``NBVALIDATION-EXECUTED <base64 gzip>``, the executed notebook on one line
  (``--print-executed``: where only the logs come back, a Kubernetes Pod);
* ``NBVALIDATION-ENVIRONMENT <base64 gzip>``, the kernel interpreter's probe
  document (verdict/probe.py) on one line, printed before the notebook runs
  (``--print-environment``: the environment record of a Kubernetes job);
* the **termination summary** (``--termination-log``): compact JSON of at most
  4096 bytes, for a container's termination message (:func:`termination_summary`,
  :func:`parse_summary`).

Exit status: 0 verdict Succeeded, 1 verdict Failed, 2 the runner could not run.

Standard library only: the server side (the Kubernetes backend reading a Pod's
log) imports this module as the runner does.
"""

from __future__ import annotations

import base64
import copy
import datetime as _dt
import gzip
import json
import os
import sys
from typing import Any, Mapping

from jupyter_nbvalidation.core.vocabulary import VERDICTS, CellStatus, Phase, ResultReason
from jupyter_nbvalidation.runner.text import truncate, truncate_tail

RESULT_PREFIX = "NBVALIDATION-RESULT "
EXECUTED_PREFIX = "NBVALIDATION-EXECUTED "  # base64 of the gzipped executed notebook (--print-executed)
PROGRESS_PREFIX = "NBVALIDATION-PROGRESS "
ENVIRONMENT_PREFIX = "NBVALIDATION-ENVIRONMENT "  # base64 of the gzipped probe document (--print-environment)

# the result document's verdict and reasons, and a cell's status: the one vocabulary
SUCCEEDED = Phase.SUCCEEDED
FAILED = Phase.FAILED

# reasons for which the runner "could not run" (exit status 2)
RUNNER_FAILURE_REASONS = frozenset({ResultReason.INVALID_NOTEBOOK, ResultReason.RUNNER_ERROR})

STATUS_SUCCESS = CellStatus.SUCCESS
STATUS_FAILURE = CellStatus.FAILURE
STATUS_SKIPPED = CellStatus.SKIPPED

STDOUT_RESULT_LIMIT = 1024 * 1024  # the NBVALIDATION-RESULT line
TERMINATION_LOG_LIMIT = 4096  # Kubernetes termination message


def exit_code(result: Mapping[str, Any]) -> int:
    if result.get("verdict") == SUCCEEDED:
        return 0
    if result.get("reason") in RUNNER_FAILURE_REASONS:
        return 2
    return 1


# --- writing ----------------------------------------------------------------------


def termination_summary(result: Mapping[str, Any], limit: int = TERMINATION_LOG_LIMIT) -> str:
    """A compact JSON summary of ``result`` that fits in ``limit`` bytes (UTF-8)."""
    counts = {STATUS_SUCCESS: 0, STATUS_FAILURE: 0, STATUS_SKIPPED: 0}
    code_cells = [e for e in result.get("results") or [] if e.get("cellType", "code") == "code"]
    for entry in code_cells:  # markdown and raw cells are not "skipped": they are not code
        counts[entry.get("status", STATUS_SKIPPED)] = counts.get(entry.get("status", STATUS_SKIPPED), 0) + 1
    summary: dict[str, Any] = {
        "verdict": result.get("verdict"),
        "reason": result.get("reason"),
        "message": result.get("message"),
        "failedCellIndex": result.get("failedCellIndex"),
        "durationSeconds": result.get("durationSeconds"),
        "cells": {
            "total": len(code_cells),
            "succeeded": counts[STATUS_SUCCESS],
            "failed": counts[STATUS_FAILURE],
            "skipped": counts[STATUS_SKIPPED],
        },
    }
    failed = result.get("failedCellIndex")
    if failed is not None:
        for entry in result.get("results") or []:
            if entry.get("cellIndex") == failed and entry.get("errorName"):
                summary["error"] = {"name": entry.get("errorName"), "message": entry.get("errorMessage", "")}
    comparison = result.get("comparisonResult")
    if comparison:
        summary["comparison"] = {
            k: comparison.get(k) for k in ("strategy", "result", "totalCells", "matchedCells", "mismatchedCells", "skippedCells")
        }
    summary["executedNotebook"] = result.get("executedNotebook")

    def encode(s: Mapping[str, Any]) -> bytes:
        return json.dumps(s, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    data = encode(summary)
    for text_limit in (1000, 300, 100, 0):
        if len(data) <= limit:
            break
        if isinstance(summary.get("message"), str):
            summary["message"] = truncate(result.get("message") or "", text_limit) if text_limit else ""
        if "error" in summary:
            summary["error"]["message"] = truncate(summary["error"]["message"], text_limit) if text_limit else ""
        if text_limit == 0:
            summary.pop("executedNotebook", None)
        data = encode(summary)
    if len(data) > limit:  # cannot happen with the fields above, but never exceed
        data = encode({k: summary.get(k) for k in ("verdict", "reason", "failedCellIndex")})
    return data.decode("utf-8")


def write_in_place(path: str | os.PathLike[str], text: str) -> None:
    """Open ``path`` for writing (truncating it) and write ``text``.

    Not a temporary file renamed over it: in a Pod ``/dev/termination-log`` is a
    file bind-mounted by the kubelet, and a rename onto it fails (``Device or
    resource busy`` as root, ``Permission denied`` as any other user, since
    ``/dev`` is not writable). Writing through the existing file works."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def write_termination_log(path: str | os.PathLike[str], result: Mapping[str, Any]) -> None:
    try:
        write_in_place(path, termination_summary(result))
    except OSError as e:  # e.g. /dev/termination-log missing outside Kubernetes
        sys.stderr.write(f"nbvalidation: cannot write the termination log {path}: {e}\n")


def result_line(result: Mapping[str, Any], limit: int = STDOUT_RESULT_LIMIT) -> str:
    """The result as one JSON line (ASCII) of at most ~``limit`` characters.

    When too long, the tracebacks and diff texts are cut, never the structure.
    """
    def encode(r: Mapping[str, Any]) -> str:
        return json.dumps(r, separators=(",", ":"), ensure_ascii=True)

    text = encode(result)
    for text_limit in (1000, 200, 0):
        if len(text) <= limit:
            return text
        shrunk = copy.deepcopy(dict(result))
        for entry in shrunk.get("results") or []:
            if "output" in entry:
                entry["output"] = truncate_tail(entry["output"], text_limit)
            if "errorMessage" in entry:
                entry["errorMessage"] = truncate(entry["errorMessage"], max(text_limit, 200))
            if "traceback" in entry:  # the cell's own frames are the last to go
                cells = set(entry.get("cellFrames") or [])
                entry["traceback"] = [truncate(f, text_limit if i not in cells else max(text_limit, 500))
                                      for i, f in enumerate(entry["traceback"])]
        comparison = shrunk.get("comparisonResult")
        if comparison:
            for diff in comparison.get("diffs") or []:
                for key in ("expected", "actual", "diff"):
                    if key in diff:
                        diff[key] = truncate(diff[key], text_limit) if text_limit else ""
        if isinstance(shrunk.get("message"), str):
            shrunk["message"] = truncate(shrunk["message"], max(text_limit, 500))
        text = encode(shrunk)
    return text


PROGRESS_PLAN = "plan"  # {"event": "plan", "cellsTotal": N}
PROGRESS_START = "start"  # {"event": "start", "cellIndex": i, "time": ISO-8601}
PROGRESS_END = "end"  # {"event": "end", "cellIndex": i, "status": "Success"|..., "executionTime": "1.234s"}
# a cell's status in status.progress (the result documents keep Success / Failure / Skipped)
PROGRESS_STATUS: dict[str, str] = {STATUS_SUCCESS: "ok", STATUS_FAILURE: "error", STATUS_SKIPPED: "skipped"}


def progress_line(event: Mapping[str, Any]) -> str:
    return PROGRESS_PREFIX + json.dumps(event, separators=(",", ":"))


def progress_time() -> str:
    """Now, as the progress records say it (RFC 3339, UTC, milliseconds)."""

    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def executed_line(notebook_bytes: bytes) -> str:
    return EXECUTED_PREFIX + base64.b64encode(gzip.compress(notebook_bytes)).decode("ascii")


def environment_line(probe: dict[str, Any]) -> str:
    return ENVIRONMENT_PREFIX + base64.b64encode(gzip.compress(json.dumps(probe).encode())).decode("ascii")


# --- reading ----------------------------------------------------------------------


def environment_from_log(text: str) -> dict[str, Any] | None:
    """The probe document of the first ``NBVALIDATION-ENVIRONMENT`` line, or None."""
    for line in text.splitlines():
        if line.startswith(ENVIRONMENT_PREFIX):
            try:
                doc = json.loads(gzip.decompress(base64.b64decode(line[len(ENVIRONMENT_PREFIX):].strip())))
            except (ValueError, OSError, EOFError):
                return {"error": "the runner's environment line cannot be read"}
            return doc if isinstance(doc, dict) else None
    return None


def parse_log(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """(the full result of the last ``NBVALIDATION-RESULT`` line, the payload
    of the last ``NBVALIDATION-EXECUTED`` line)."""
    result: dict[str, Any] | None = None
    executed: str | None = None
    for line in text.splitlines():
        if line.startswith(RESULT_PREFIX):
            try:
                doc = json.loads(line[len(RESULT_PREFIX):])
                if isinstance(doc, dict) and doc.get("verdict") in VERDICTS:
                    result = doc
            except ValueError:
                pass
        elif line.startswith(EXECUTED_PREFIX):
            executed = line[len(EXECUTED_PREFIX):].strip()
    return result, executed


def parse_progress(text: str) -> list[dict[str, Any]]:
    """Every ``NBVALIDATION-PROGRESS`` record in ``text``, in order (``plan``,
    ``start`` and ``end`` records; see :class:`ProgressReader` for their sum)."""
    events: list[dict[str, Any]] = []
    for line in text.splitlines():
        if line.startswith(PROGRESS_PREFIX):
            try:
                event = json.loads(line[len(PROGRESS_PREFIX):])
            except ValueError:
                continue
            if isinstance(event, dict):
                events.append(event)
    return events


def _seconds(value: Any) -> float | None:
    """An execution time as a float: the runner writes ``"1.234s"``."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value[:-1] if value.endswith("s") else value)
        except ValueError:
            return None
    return None


class ProgressReader:
    """Folds ``NBVALIDATION-PROGRESS`` records, fed as they arrive (bytes of a
    log that is still being written, in any chunks), into the
    ``status.progress`` shape (without ``updatedAt``, which the writer adds)::

        {"cellsTotal": int, "cellsDone": int, "currentCellIndex": int | None,
         "currentCellStartedAt": ISO-8601 | None,
         "cells": [{"cellIndex": int, "status": "ok"|"error"|"skipped", "executionTime": float}]}

    Only complete lines are read: a partial last line waits for the next feed."""

    def __init__(self) -> None:
        self.total: int | None = None
        self.current: int | None = None
        self.current_started: str | None = None
        self.cells: list[dict[str, Any]] = []
        self._pending = b""
        self.seen = False  # any progress record at all

    def feed(self, data: bytes) -> bool:
        """Read ``data`` (the log's next bytes); True when the progress changed."""
        data = self._pending + data
        lines = data.split(b"\n")
        self._pending = lines.pop()
        changed = False
        for raw in lines:
            changed = self.feed_line(raw.decode("utf-8", "replace")) or changed
        return changed

    def feed_text(self, text: str) -> bool:
        """A whole log at once (a Pod's log as fetched)."""
        changed = False
        for line in text.splitlines():
            changed = self.feed_line(line) or changed
        return changed

    def feed_line(self, line: str) -> bool:
        if not line.startswith(PROGRESS_PREFIX):
            return False
        try:
            event = json.loads(line[len(PROGRESS_PREFIX):])
        except ValueError:
            return False
        if not isinstance(event, dict):
            return False
        kind = event.get("event", PROGRESS_END)  # runners before the plan/start records wrote end records only
        index = event.get("cellIndex")
        if kind == PROGRESS_PLAN:
            if isinstance(event.get("cellsTotal"), int):
                self.total = event["cellsTotal"]
        elif kind == PROGRESS_START and isinstance(index, int):
            self.current, self.current_started = index, event.get("time") if isinstance(event.get("time"), str) else None
        elif kind == PROGRESS_END and isinstance(index, int):
            cell: dict[str, Any] = {"cellIndex": index,
                                    "status": PROGRESS_STATUS.get(str(event.get("status")), "error")}
            seconds = _seconds(event.get("executionTime"))
            if seconds is not None:
                cell["executionTime"] = seconds
            self.cells.append(cell)
            if self.current == index:
                self.current = self.current_started = None
        else:
            return False
        self.seen = True
        return True

    def snapshot(self) -> dict[str, Any] | None:
        """The progress so far, or None before any record."""
        if not self.seen:
            return None
        done = sum(1 for c in self.cells if c["status"] != "skipped")
        return {"cellsTotal": self.total if self.total is not None else max(done, len(self.cells)),
                "cellsDone": done, "currentCellIndex": self.current,
                "currentCellStartedAt": self.current_started, "cells": [dict(c) for c in self.cells]}


def decode_executed(payload: str) -> dict[str, Any] | None:
    """The executed notebook (a JSON dict) from an ``NBVALIDATION-EXECUTED`` payload."""
    try:
        nb = json.loads(gzip.decompress(base64.b64decode(payload, validate=False)))
    except (ValueError, OSError, EOFError):
        return None
    return nb if isinstance(nb, dict) and "cells" in nb else None


def parse_summary(message: str | None) -> dict[str, Any] | None:
    """The runner's compact termination-message JSON, or None."""
    if not message:
        return None
    try:
        summary = json.loads(message)
    except ValueError:
        return None
    if not isinstance(summary, dict) or summary.get("verdict") not in VERDICTS:
        return None
    return summary
