"""Request and answer bodies: standard JSON only. A request body is read by :func:`loads_strict`
(no NaN or Infinity, no overlong numbers, bounded depth; a number it would not take is kept as a
:class:`BadNumber` so that the refusal can name its field, :func:`find_bad_number`); an answer is
written by :func:`dumps`, a non-finite number as null."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from jupyter_nbvalidation.service.errors import ApiError


class BadNumber:
    """A JSON number the request parser would not take as a finite value
    (``NaN``, ``Infinity``, ``1e400``, over MAX_NUMBER_CHARS digits); kept
    as a marker so the refusal can name its field."""

    def __init__(self, text: str, reason: str):
        self.text = text
        self.reason = reason


MAX_NUMBER_CHARS = 40  # a JSON number token (an int64 has at most 20 characters)
MAX_JSON_DEPTH = 64  # nesting of a request body
MAX_BODY_BYTES = 2 * 2**20  # a request body (a spec is a few KiB)


def _parse_float(text: str) -> Any:
    if len(text) > MAX_NUMBER_CHARS:
        return BadNumber(text, f"a number of over {MAX_NUMBER_CHARS} characters is not accepted")
    value = float(text)
    if not math.isfinite(value):
        return BadNumber(text, f"{text[:20]} is out of range (numbers must be finite)")
    return value


def _parse_int(text: str) -> Any:
    if len(text) > MAX_NUMBER_CHARS:
        return BadNumber(text, f"a number of over {MAX_NUMBER_CHARS} characters is not accepted")
    return int(text)


def _parse_constant(text: str) -> Any:
    return BadNumber(text, f"{text} is not a number JSON allows (numbers must be finite)")


def loads_strict(body: bytes | str) -> Any:
    """A request body: standard JSON only. Non-finite and overlong numbers
    become :class:`BadNumber` (refused by the caller, naming the field);
    too deep a nesting is a ValueError (never a RecursionError)."""
    if isinstance(body, bytes):
        body = body.decode("utf-8")
    depth = _max_depth(body)
    if depth > MAX_JSON_DEPTH:
        raise ValueError(f"nested over {MAX_JSON_DEPTH} levels deep")
    try:
        return json.loads(body, parse_float=_parse_float, parse_int=_parse_int, parse_constant=_parse_constant)
    except RecursionError:
        raise ValueError(f"nested over {MAX_JSON_DEPTH} levels deep") from None


def _max_depth(text: str) -> int:
    """The deepest [ / { nesting of a JSON text (strings skipped); cheap, no recursion."""
    depth = deepest = 0
    for m in re.finditer(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', text):
        c = m.group(0)
        if c in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_JSON_DEPTH:
                    return deepest
        elif c in "]}":
            depth -= 1
    return deepest


def find_bad_number(obj: Any, path: str) -> tuple[str, str] | None:
    """(field, reason) of the first non-finite or overlong number in ``obj``."""
    stack = [(obj, path)]
    while stack:
        cur, where = stack.pop()
        if isinstance(cur, BadNumber):
            return where, cur.reason
        if isinstance(cur, float) and not math.isfinite(cur):
            return where, "numbers must be finite"
        if isinstance(cur, str):
            try:
                cur.encode("utf-8")
            except UnicodeEncodeError:
                return where, "contains an unpaired surrogate (not UTF-8 text)"
        if isinstance(cur, dict):
            for k in cur:
                if isinstance(k, str):
                    try:
                        k.encode("utf-8")
                    except UnicodeEncodeError:
                        return where, "a key contains an unpaired surrogate (not UTF-8 text)"
            stack.extend((v, f"{where}.{k}") for k, v in reversed(list(cur.items())))
        elif isinstance(cur, list):
            stack.extend((v, f"{where}[{i}]") for i, v in reversed(list(enumerate(cur))))
    return None


def _finite(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def dumps(obj: Any) -> str:
    """Standard JSON only: a non-finite number (e.g. in a job stored before
    they were refused) is written as null, never as NaN/Infinity."""
    try:
        return json.dumps(obj, separators=(",", ":"), allow_nan=False)
    except ValueError:
        return json.dumps(_finite(obj), separators=(",", ":"), allow_nan=False)


def check_json_content_type(header: str | None) -> None:
    """A request body is JSON only when it says so: ``Content-Type: application/json`` (a
    ``charset=utf-8`` parameter allowed). Anything else, a missing header included, is a 415
    naming the header: a ``text/plain`` POST is a cross-site "simple request" a browser sends
    from any page without asking, so it must never create a job."""
    media, _, params = (header or "").partition(";")
    media = media.strip().lower()
    charset = ""
    for param in params.split(";"):
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset":
            charset = value.strip().strip('"').lower()
        elif key.strip():
            media = ""  # an unknown parameter: not the declared type
    if media == "application/json" and charset in ("", "utf-8"):
        return
    given = f"Content-Type: {header}" if header else "no Content-Type header"
    raise ApiError(415, "UnsupportedMediaType",
                   f"the request body must be sent with the header Content-Type: application/json ({given})",
                   "Content-Type")
