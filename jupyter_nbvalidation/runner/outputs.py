"""The output budget of one run: per cell and for the whole notebook.

Right after a cell has run, its outputs beyond the budget are cut from the
notebook (a stream keeps its first bytes; other outputs are dropped whole;
error outputs are always kept: the verdict reads them) and one marker output
takes their place: ``[nbvalidation: 187.3 MB of output truncated; limit 1 MiB
per cell]``. With a golden notebook the cell's full outputs are kept aside
until the comparison (the verdict is decided on what the notebook produced),
then dropped; without one they are dropped as they arrive (``watch``), and a
display past the per-cell budget is not even sent whole by the kernel. A big
write the kernel sent in parts (:mod:`.outhook`) is merged back into one stream
output as its parts arrive. Sizes are UTF-8 bytes of the output's text and data
values.
"""

from __future__ import annotations

import json
from typing import Any

from jupyter_nbvalidation.runner.outhook import acknowledge, dropped_of, part_of

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


class _Live:
    """One running cell's outputs as they arrive: bytes kept, outputs in it, bytes dropped,
    and whether something was cut (every later output is then cut too)."""

    __slots__ = ("kept", "count", "dropped", "cut")

    def __init__(self) -> None:
        self.kept = self.count = self.dropped = 0
        self.cut = False


class _Chain:
    """A stream output the kernel sent in parts (runner/outhook.py), merged as they arrive."""

    __slots__ = ("out", "name", "pieces")

    def __init__(self, out: Any) -> None:
        self.out = out
        self.name = out.get("name")
        self.pieces: list[str] = []


class OutputBudget:
    """Bounds the outputs of the cells of one run (``bound`` after each cell)."""

    def __init__(self, cell_bytes: int | None = None, total_bytes: int | None = None, *, keep_full: bool = False):
        self.cell_bytes = DEFAULT_CELL_BYTES if cell_bytes is None else int(cell_bytes)
        self.total_bytes = DEFAULT_TOTAL_BYTES if total_bytes is None else int(total_bytes)
        self.keep_full = keep_full
        self.used = 0  # bytes kept in the notebook so far
        self.full: dict[int, list[Any]] = {}  # cell index -> its outputs before truncation (keep_full)
        self.truncated: dict[int, int] = {}  # cell index -> bytes cut
        self._live: dict[int, _Live] = {}  # cell index -> what was kept and dropped while it runs
        self._chains: dict[int, _Chain] = {}  # cell index -> the stream its parts are merged into

    def watch(self, client: Any) -> None:
        """Apply the budget as outputs arrive (nbclient's ``output``). A big write the kernel
        sent in parts (runner/outhook.py) is merged back into one stream output, each part
        acknowledged once taken. Without a golden notebook nothing needs the full outputs:
        they are cut as they arrive, so a runaway cell is never held whole (a merged stream
        is cut at the budget; a stream that crosses it in one message is kept and cut by
        ``bound``). With one, a truncated cell's outputs are kept whole until ``bound``."""
        original = client.output

        def output(outs: list[Any], msg: Any, display_id: Any, cell_index: int) -> Any:
            seq = part_of(msg)
            try:
                return self._output(client, original, outs, msg, display_id, cell_index, seq)
            finally:
                if seq is not None and getattr(client, "kc", None) is not None:
                    acknowledge(client.kc, seq)

        original_clear = client.clear_output

        def clear_output(outs: list[Any], msg: Any, cell_index: int) -> Any:
            self._close(cell_index)
            done = original_clear(outs, msg, cell_index)
            if not outs:  # cleared at once (a wait=True clear is seen at the next output)
                self._live[cell_index] = _Live()
            return done

        client.output = output
        client.clear_output = clear_output

    def _output(self, client: Any, original: Any, outs: list[Any], msg: Any, display_id: Any, cell_index: int,
                seq: int | None) -> Any:
        live = self._live.setdefault(cell_index, _Live())
        clearing = bool(getattr(client, "clear_before_next_output", False))
        chain = self._chains.get(cell_index)
        if chain is not None:
            content = msg.get("content") or {}
            if (msg.get("msg_type") == "stream" and content.get("name") == chain.name and outs
                    and outs[-1] is chain.out and not clearing):
                self._extend(live, chain, content.get("text") or "")
                if seq is None:  # what the write left in ipykernel's buffer (print's newline): the end
                    self._close(cell_index, outs)
                return chain.out
            self._close(cell_index, outs)
        out = original(outs, msg, display_id, cell_index)
        appended = out is not None and bool(outs) and outs[-1] is out
        if len(outs) < live.count or (clearing and not getattr(client, "clear_before_next_output", False)):
            # cleared (clear_output): what it held, kept or dropped, is no longer the cell's
            live.kept, live.dropped, live.cut = sum(output_size(o) for o in outs if o is not out), 0, False
        stubbed = dropped_of(msg) if appended else None
        if stubbed is not None:  # sent without its data by the kernel (runner/outhook.py): dropped whole
            outs.pop()
            live.dropped += stubbed
            live.cut = True
        elif appended:
            if seq is not None and out.get("output_type") == "stream":
                text = out.get("text") or ""
                out["text"] = ""
                chain = self._chains[cell_index] = _Chain(out)
                self._extend(live, chain, "".join(text) if isinstance(text, list) else text)
            elif not self.keep_full:
                size = output_size(out)
                room = min(self.cell_bytes, self.total_bytes - self.used)
                if (live.cut or live.kept >= room) and out.get("output_type") != "error":
                    outs.pop()  # after a cut, every later output is cut too (as ``bound`` does)
                    live.dropped += size
                    live.cut = True
                else:
                    live.kept += size
        live.count = len(outs)
        return out

    def _extend(self, live: _Live, chain: _Chain, text: str) -> None:
        """One part more of a merged stream, up to the budget (all of it with a golden notebook)."""
        if self.keep_full:
            chain.pieces.append(text)
            return
        size = _str_size(text)
        fit = 0 if live.cut else min(self.cell_bytes, self.total_bytes - self.used) - live.kept
        if size > fit:
            kept = _cut_utf8(text, fit) if fit > 0 else ""
            live.dropped += size - _str_size(kept)
            live.cut = True
            text, size = kept, _str_size(kept)
        if text:
            chain.pieces.append(text)
            live.kept += size

    def _close(self, index: int, outs: list[Any] | None = None) -> None:
        """The merged stream is complete: its text joined once (an output nothing was kept of, removed)."""
        chain = self._chains.pop(index, None)
        if chain is None:
            return
        if not chain.pieces and outs is not None and outs and outs[-1] is chain.out:
            outs.pop()
            live = self._live.get(index)
            if live is not None:
                live.count = len(outs)
        chain.out["text"] = "".join(chain.pieces)
        chain.pieces.clear()

    def limit_text(self, by_total: bool) -> str:
        if by_total:
            return f"{human_limit(self.total_bytes)} per notebook"
        return f"{human_limit(self.cell_bytes)} per cell"

    def start(self, index: int) -> None:
        """A cell of the notebook starts: its live count starts from nothing."""
        self._live.pop(index, None)
        self._chains.pop(index, None)

    def bound(self, index: int, cell: Any) -> dict[str, Any] | None:
        """Cut ``cell``'s outputs to the budget (in place). Returns what the
        cell's result records (``outputTruncated``), or None when nothing was cut."""
        self._close(index, cell.get("outputs"))
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
        live = self._live.pop(index, None)
        dropped = live.dropped if live is not None else 0
        if dropped:
            cut += dropped
            if marker_at is None:  # before the error that ended the cell, where the cut was
                marker_at = len(kept)
                while marker_at and kept[marker_at - 1].get("output_type") == "error":
                    marker_at -= 1
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
