"""The output budget of one run: per cell and for the whole notebook.

Right after a cell has run, its outputs beyond the budget are cut from the
notebook (a stream keeps its first bytes; other outputs are dropped whole;
error outputs are always kept: the verdict reads them) and one marker output
takes their place: ``[nbvalidation: 187.3 MB of output truncated; limit 1 MiB
per cell]``. With a golden notebook the cell's full outputs are kept aside
until the comparison (the verdict is decided on what the notebook produced),
then dropped; without one they are dropped at once. Sizes are UTF-8 bytes of
the output's text and data values.
"""

from __future__ import annotations

import json
from typing import Any

DEFAULT_CELL_BYTES = 2 * 2**20  # spec outputLimits.perCell
DEFAULT_TOTAL_BYTES = 32 * 2**20  # spec outputLimits.total
MARKER_PREFIX = "[nbvalidation: "


def human_size(n: int) -> str:
    """Decimal units for an amount ("187.3 MB"), as people read a size."""
    if n < 1000:
        return f"{n} bytes"
    for unit, factor in (("kB", 1e3), ("MB", 1e6), ("GB", 1e9)):
        if n < factor * 1000 or unit == "GB":
            return f"{n / factor:.1f} {unit}"
    raise AssertionError  # pragma: no cover


def human_limit(n: int) -> str:
    """Binary units for a limit ("1 MiB", "512 KiB"), as the limits are set."""
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= factor:
            value = n / factor
            return f"{value:g} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n} bytes"


def _str_size(s: str) -> int:
    return len(s) if s.isascii() else len(s.encode("utf-8", "surrogatepass"))


def _value_size(value: Any) -> int:
    if isinstance(value, str):
        return _str_size(value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return sum(_str_size(v) for v in value)
    return _str_size(json.dumps(value, ensure_ascii=False, default=str))


def output_size(output: Any) -> int:
    """The bytes an output carries (its text, data values, error fields)."""
    kind = output.get("output_type")
    if kind == "stream":
        return _value_size(output.get("text") or "")
    if kind == "error":
        return (_value_size(output.get("ename") or "") + _value_size(output.get("evalue") or "")
                + _value_size(list(output.get("traceback") or [])))
    data = output.get("data") or {}
    return sum(_value_size(v) for v in data.values()) if isinstance(data, dict) else _value_size(data)


def _node(d: dict[str, Any]) -> Any:
    from nbformat import from_dict  # type: ignore[import-untyped,unused-ignore]  # deferred: start-up time (importing nbformat imports jsonschema)

    return from_dict(d)  # type: ignore[no-untyped-call]


def _cut_utf8(text: str, budget: int) -> str:
    if text.isascii():
        return text[:budget]
    return text.encode("utf-8", "surrogatepass")[:budget].decode("utf-8", "ignore")


class OutputBudget:
    """Bounds the outputs of the cells of one run (``bound`` after each cell)."""

    def __init__(self, cell_bytes: int | None = None, total_bytes: int | None = None, *, keep_full: bool = False):
        self.cell_bytes = DEFAULT_CELL_BYTES if cell_bytes is None else int(cell_bytes)
        self.total_bytes = DEFAULT_TOTAL_BYTES if total_bytes is None else int(total_bytes)
        self.keep_full = keep_full
        self.used = 0  # bytes kept in the notebook so far
        self.full: dict[int, list[Any]] = {}  # cell index -> its outputs before truncation (keep_full)
        self.truncated: dict[int, int] = {}  # cell index -> bytes cut
        self._live: dict[int, list[int]] = {}  # cell index -> [bytes kept while it runs, outputs seen]
        self._dropped: dict[int, int] = {}  # cell index -> bytes dropped while it ran (live)

    def watch(self, client: Any) -> None:
        """Without a golden notebook nothing needs the full outputs: cut them as
        they arrive (nbclient's ``output``), so a runaway cell is never held
        whole. The stream that crosses the budget is kept and cut by ``bound``."""
        if self.keep_full:
            return
        original = client.output

        def output(outs: list[Any], msg: Any, display_id: Any, cell_index: int) -> Any:
            out = original(outs, msg, display_id, cell_index)
            state = self._live.setdefault(cell_index, [0, 0])
            if len(outs) < state[1]:  # cleared (clear_output): count again
                state[0] = sum(output_size(o) for o in outs)
            elif out is not None and outs and outs[-1] is out:
                size = output_size(out)
                room = min(self.cell_bytes, self.total_bytes - self.used)
                if state[0] >= room and out.get("output_type") != "error":
                    outs.pop()
                    self._dropped[cell_index] = self._dropped.get(cell_index, 0) + size
                else:
                    state[0] += size
            state[1] = len(outs)
            return out

        client.output = output

    def limit_text(self, by_total: bool) -> str:
        if by_total:
            return f"{human_limit(self.total_bytes)} per notebook"
        return f"{human_limit(self.cell_bytes)} per cell"

    def start(self, index: int) -> None:
        """A cell of the notebook starts: its live count starts from nothing."""
        self._live.pop(index, None)
        self._dropped.pop(index, None)

    def bound(self, index: int, cell: Any) -> dict[str, Any] | None:
        """Cut ``cell``'s outputs to the budget (in place). Returns what the
        cell's result records (``outputTruncated``), or None when nothing was cut."""
        outputs = list(cell.get("outputs") or [])
        kept: list[Any] = []
        cell_used = 0
        cut = 0
        by_total = False
        marker_at: int | None = None
        for output in outputs:
            size = output_size(output)
            if output.get("output_type") == "error":
                kept.append(output)  # the verdict reads it; never cut
                cell_used += size
                continue
            room_cell = self.cell_bytes - cell_used
            room_total = self.total_bytes - self.used - cell_used
            room = min(room_cell, room_total)
            if marker_at is None and size <= room:
                kept.append(output)
                cell_used += size
                continue
            if marker_at is None:
                marker_at = len(kept)
                by_total = room_total < room_cell
                if output.get("output_type") == "stream" and room > 0:
                    text = output.get("text") or ""
                    if isinstance(text, list):
                        text = "".join(text)
                    part = _cut_utf8(text, room)
                    kept_size = _str_size(part)
                    kept.append(_node({**output, "text": part}))
                    cell_used += kept_size
                    cut += size - kept_size
                    marker_at = len(kept)
                    continue
            cut += size
        self.used += cell_used
        self._live.pop(index, None)
        dropped = self._dropped.pop(index, 0)
        if dropped:
            cut += dropped
            if marker_at is None:
                marker_at = len(kept)
                by_total = self.total_bytes - self.used < self.cell_bytes
        if marker_at is None:
            return None
        if self.keep_full:
            self.full[index] = outputs
        self.truncated[index] = cut
        limit = self.limit_text(by_total)
        text = f"{MARKER_PREFIX}{human_size(cut)} of output truncated; limit {limit}]\n"
        from nbformat.v4 import new_output  # type: ignore[import-untyped,unused-ignore]  # deferred: start-up time (importing nbformat imports jsonschema)

        kept.insert(marker_at, new_output("stream", name="stderr", text=text))  # type: ignore[no-untyped-call]
        cell["outputs"] = kept
        return {"bytes": cut, "limit": limit}

    def with_full_outputs(self, nb: Any) -> Any:
        """A view of ``nb`` whose truncated cells carry their full outputs (for the comparison)."""
        if not self.full:
            return nb
        cells = [(_node({**c, "outputs": self.full[i]}) if i in self.full else c) for i, c in enumerate(nb.cells)]
        return {**nb, "cells": cells}

    def note(self) -> str | None:
        """For the verdict message: ``"output truncated in 1 cell (187.3 MB cut; ...)"``."""
        if not self.truncated:
            return None
        n = len(self.truncated)
        first = min(self.truncated)
        return (f"output truncated in {n} cell{'' if n == 1 else 's'} ({human_size(sum(self.truncated.values()))} "
                f"cut, first cell {first + 1}; limits {human_limit(self.cell_bytes)} per cell, "
                f"{human_limit(self.total_bytes)} per notebook)")
