"""An output list as the golden comparison sees it (verdict/compare.py): streams of one
name merged and their ``\\r`` / ``\\b`` resolved as a terminal would, every output
flattened into keys (``stream:<name>``, one key per MIME type under ``data``, ``error``
for ``ename: evalue``), and the output selectors of ``ignore_output_types``.

Pure functions, standard library only (the runner imports them in its image).
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping, Sequence

WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json"
IMAGE_PREFIX = "image/"  # image/png, image/jpeg, image/svg+xml, ...


# --- streams ------------------------------------------------------------------


def resolve_terminal_controls(text: str) -> str:
    """Apply carriage returns and backspaces the way a terminal displays them.

    ``\\r`` moves the cursor to the start of the line and later characters overwrite
    what is there; ``\\b`` moves the cursor one column left (never past the start of
    the line). ``"50%\\r100%"`` becomes ``"100%"``, ``"hello\\rab"`` becomes
    ``"abllo"``, ``"ab\\bc"`` becomes ``"ac"``.
    """
    if "\r" not in text and "\b" not in text:
        return text
    out_lines = []
    for line in text.split("\n"):
        if "\r" not in line and "\b" not in line:
            out_lines.append(line)
            continue
        buf: list[str] = []
        col = 0
        for ch in line:
            if ch == "\r":
                col = 0
            elif ch == "\b":
                col = max(0, col - 1)
            else:
                if col < len(buf):
                    buf[col] = ch
                else:
                    buf.append(ch)
                col += 1
        out_lines.append("".join(buf))
    return "\n".join(out_lines)


def _text(value: Any) -> str:
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return "".join(value)
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False, default=str)


# --- flattening -----------------------------------------------------------------


OUTPUT_TYPES = ("stream", "execute_result", "display_data", "error")
# an output type, a stream by name, or a MIME type (``major/*`` for all of a major type);
# the OpenAPI document and the CRD carry the same pattern
OUTPUT_SELECTOR_PATTERN = (r"^(stream|execute_result|display_data|error|stream:[A-Za-z0-9_-]+"
                           r"|[a-z0-9][a-z0-9.+-]*/(\*|[A-Za-z0-9][A-Za-z0-9.+_-]*))$")
_OUTPUT_SELECTOR = re.compile(OUTPUT_SELECTOR_PATTERN)


def check_output_selector(selector: str) -> None:
    """Raise ValueError unless ``selector`` names an output type, a stream or a MIME type."""
    if not isinstance(selector, str) or not _OUTPUT_SELECTOR.match(selector):
        raise ValueError(f"{selector!r} is not an output type ({', '.join(OUTPUT_TYPES)}), "
                         "a stream (stream:stderr) or a MIME type (text/html, image/*)")


def _mime_ignored(mime: str, ignore: Sequence[str]) -> bool:
    major = mime.split("/", 1)[0]
    return mime in ignore or f"{major}/*" in ignore


def _skip_mime(mime: str, compare_images: bool, ignore: Sequence[str] = ()) -> bool:
    if mime == WIDGET_VIEW_MIME or _mime_ignored(mime, ignore):
        return True
    return mime.startswith(IMAGE_PREFIX) and not compare_images


def flatten_outputs(outputs: Sequence[Mapping[str, Any]], *, compare_images: bool = False,
                    ignore: Sequence[str] = ()) -> dict[str, list[str]]:
    """Flatten a cell's outputs into ``{key: [values]}`` (keys in first-seen order).

    All text of one stream name becomes one value, so the interleaving of stdout
    and stderr (which is not deterministic) does not matter. ``ignore`` lists
    output selectors (see :func:`check_output_selector`) to leave out.
    """
    flat: dict[str, list[str]] = {}
    raw_streams: dict[str, list[str]] = {}
    for out in outputs:
        kind = out.get("output_type")
        if kind in ignore:
            continue
        if kind == "stream":
            key = f"stream:{out.get('name', 'stdout')}"
            if key in ignore:
                continue
            if key not in raw_streams:
                raw_streams[key] = []
                flat[key] = [""]  # filled below; reserves the key's position
            raw_streams[key].append(_text(out.get("text", "")))
        elif kind in ("execute_result", "display_data", "update_display_data"):
            for mime, value in (out.get("data") or {}).items():
                if _skip_mime(mime, compare_images, ignore):
                    continue
                flat.setdefault(mime, []).append(_text(value))
        elif kind in ("error", "pyerr") and "error" not in ignore:
            flat.setdefault("error", []).append(f"{out.get('ename', '')}: {out.get('evalue', '')}")
        # anything else (unknown output types) carries nothing we compare
    for key, pieces in raw_streams.items():
        flat[key] = [resolve_terminal_controls("".join(pieces))]
    return flat
