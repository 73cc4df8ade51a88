"""What a failed cell says: its error's name and whole message, its traceback with the
notebook's own frames marked (and bounded), the text it printed so far (timeouts,
kernel deaths), and the one-line summary a job's message gives."""

from __future__ import annotations

import re
from typing import Any, Mapping

from jupyter_nbvalidation.runner.text import strip_ansi, truncate, truncate_tail
from jupyter_nbvalidation.verdict.markers import cell_source

OUTPUT_LIMIT = 4000  # traceback text per cell result
MESSAGE_LIMIT = 1000  # the error message in the job's message (the result entry keeps up to OUTPUT_LIMIT)
FRAME_LIMIT = 2000  # one traceback frame in a result's "traceback" list
TRACEBACK_LIMIT = 12000  # all of a result's "traceback" frames together

# the frame of a notebook cell in IPython's traceback ("Cell In[3], line 2"; older IPythons:
# "Input In [3], in <cell line: 2>()", "<ipython-input-3-...>")
_CELL_FRAME = re.compile(r"^(?:Cell In\s*\[\d*\]|Input In \[\d*\]|<ipython-input-\d+-)")
_ARROW_LINE = re.compile(r"^-*>\s*(\d+)\s?(.*)$")


def traceback_details(frames: list[str]) -> dict[str, Any]:
    """A traceback (IPython's list of frame texts) with the notebook's own frames
    identified, so a reader can show them first and fold the library frames:

    * ``traceback``: the frames, ANSI stripped (each, and all together, bounded);
    * ``cellFrames``: indexes in ``traceback`` of the frames of the notebook's cells;
    * ``errorLine`` / ``errorLineNumber``: the line of the user's code that was
      running (the ``---->`` line of the last cell frame) and its line number in its cell.
    """
    tb = [strip_ansi(str(f)).rstrip() for f in frames]
    cell = [i for i, f in enumerate(tb) if _CELL_FRAME.match(f.lstrip())]
    bounded = [truncate(f, FRAME_LIMIT) if i in cell else truncate_tail(f, FRAME_LIMIT // 2) for i, f in enumerate(tb)]
    # over the total: library frames in the middle give way first (never the cell frames, the first and the last)
    total = sum(len(f) for f in bounded)
    for i in range(1, len(bounded) - 1):
        if total <= TRACEBACK_LIMIT:
            break
        if i not in cell:
            total -= len(bounded[i]) - 40
            bounded[i] = truncate(bounded[i], 40)
    details: dict[str, Any] = {"traceback": bounded, "cellFrames": cell}
    if cell:
        for line in tb[cell[-1]].splitlines():
            m = _ARROW_LINE.match(line.strip())
            if m:
                details["errorLine"] = truncate(m.group(2).strip(), 500)
                details["errorLineNumber"] = int(m.group(1))
    return details


def error_details(cell: Mapping[str, Any], reply: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """ename / evalue / traceback of a failed cell: its first error output, else the reply.
    The whole message (all its lines) is kept, and the traceback with the cell's own frames marked."""
    source: Mapping[str, Any] | None = None
    for out in cell.get("outputs") or []:
        if out.get("output_type") == "error":
            source = out
            name = str(out.get("ename", ""))
            break
    else:
        content = (reply or {}).get("content") or {}
        if content.get("status") not in ("error", "aborted"):
            return None
        source = content
        name = str(content.get("ename", "") or ("ExecutionAborted" if content.get("status") == "aborted" else ""))
    frames = [str(f) for f in source.get("traceback") or []]
    return {
        "errorName": name,
        "errorMessage": truncate(strip_ansi(str(source.get("evalue", ""))), OUTPUT_LIMIT),
        "output": truncate_tail(strip_ansi("\n".join(frames)), OUTPUT_LIMIT),
        **traceback_details(frames),
    }


def error_summary(name: str, message: str) -> str:
    """``Name: the whole message`` (every non-empty line, in order; bounded) for a job's message."""
    lines = [ln.rstrip() for ln in message.strip().splitlines() if ln.strip()]
    text = "\n".join(lines)
    return f"{name or 'an error'}: {truncate(text, MESSAGE_LIMIT)}" if text else (name or "an error")


def partial_output(cell: Mapping[str, Any]) -> str:
    """The text a cell printed so far (for timeouts and kernel deaths)."""
    pieces = []
    for out in cell.get("outputs") or []:
        kind = out.get("output_type")
        if kind == "stream":
            pieces.append(cell_source({"source": out.get("text", "")}))
        elif kind == "error":
            pieces.append("\n".join(out.get("traceback") or []))
        elif kind in ("execute_result", "display_data"):
            text = (out.get("data") or {}).get("text/plain")
            if text:
                pieces.append(cell_source({"source": text}))
    return truncate_tail(strip_ansi("".join(p if p.endswith("\n") else p + "\n" for p in pieces)), OUTPUT_LIMIT)

