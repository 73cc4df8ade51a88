"""The values of a job's secrets, masked in everything a run writes (docs/secrets.md, "Masking").

The runner gets the values of the secrets a job uses (``--secrets-file``), hands them to the kernel
as environment variables and, before anything of the run is written (the executed notebook, the
result, its log), replaces each of them with ``***`` wherever it appears:

- as it is, reversed, and in the encodings a notebook commonly prints a credential in: base64
  (standard and URL-safe, at each of the three alignments inside a longer base64 text, so the
  ``user:password`` of an HTTP Basic header is caught), URL-encoded (``quote``, ``quote_plus``),
  hexadecimal, and escaped as in ``repr``, JSON and HTML;
- split: with whitespace, ANSI colour codes, quotes, commas and brackets between its characters
  (one character per line, two prints, ``print(list(value))``, a traceback's colouring), across
  the outputs and cells of the notebook;
- each line of a value of several lines (a private key) on its own.

It is a guard against a credential shown by accident, not against a notebook that means to
leak one: any other transformation (a hash, a cipher, ``ord`` codes, a separator other than
those above) is not recognised. A value shorter than :data:`MIN_SPLIT` characters is masked only
where it stands whole (split, it would match too much ordinary text).
"""

from __future__ import annotations

import base64
import bisect
import html
import json
import re
from typing import Any, Iterable, Iterator
from urllib.parse import quote, quote_plus

MASK = "***"
MIN_SPLIT = 4  # shortest value (without separators) also masked split
MIN_FRAGMENT = 6  # shortest base64 fragment of a misaligned encoding masked
MIN_LINE = 12  # shortest line of a value of several lines masked on its own
# what may come between the characters of a split value: whitespace, an ANSI escape, quotes,
# commas, brackets
_GAP = r"(?:\s|\x1b\[[0-9;?]*[A-Za-z]|['\",\[\]()])*"
_GAP_CHARS = re.compile(r"\s|['\",\[\]()]")


def _base64_forms(raw: bytes) -> Iterator[str]:
    """The parts of base64 texts that hold only ``raw``'s bits: at offset 0, 1 and 2 of a longer
    encoded text (standard and URL-safe alphabets, padding stripped)."""
    n = len(raw)
    for k in range(3):
        enc = base64.b64encode(b"\0" * k + raw + b"\0\0").decode()
        # character i holds bits [6i, 6i+6): keep those wholly within raw's bits [8k, 8(k+n))
        first = -(-8 * k // 6)
        last = (8 * (k + n)) // 6  # exclusive
        frag = enc[first:last]
        if len(frag) >= (MIN_SPLIT if k == 0 else MIN_FRAGMENT):
            yield frag
            yield frag.replace("+", "-").replace("/", "_")


def forms(value: str) -> set[str]:
    """Every form of ``value`` that is masked (see the module's docstring)."""
    out = {value}
    if len(value) >= MIN_SPLIT:
        raw = value.encode("utf-8", "surrogatepass")
        out |= {value[::-1], quote(value), quote(value, safe=""), quote_plus(value), raw.hex(), raw.hex().upper(),
                json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1], repr(value)[1:-1],
                html.escape(value)}
        out |= set(_base64_forms(raw))
        if "\n" in value:
            out |= {line.strip() for line in value.splitlines() if len(line.strip()) >= MIN_LINE}
    return {f for f in out if f}


def _pattern(form: str) -> str:
    """``form`` as a regular expression: split by gaps when long enough, else as it stands."""
    chars = _GAP_CHARS.sub("", form)
    if len(chars) < MIN_SPLIT:
        return re.escape(form)
    return _GAP.join(re.escape(c) for c in chars)


class Masker:
    """Masks the given secret values (none: masks nothing)."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        every: set[str] = set()
        for v in values:
            if isinstance(v, str) and v and v != MASK:
                every |= forms(v)
        self.values = sorted(every, key=len, reverse=True)
        self._re = re.compile("|".join(_pattern(f) for f in self.values)) if self.values else None

    def __bool__(self) -> bool:
        return self._re is not None

    def text(self, text: str) -> str:
        """``text`` with every form of every value masked."""
        if self._re is None or not text:
            return text
        return self._re.sub(MASK, text)

    def obj(self, value: Any) -> Any:
        """A JSON-like value with every string in it masked (a new value; dict keys too)."""
        if self._re is None:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            masked = {self.text(k) if isinstance(k, str) else k: self.obj(v) for k, v in value.items()}
            if type(value) is not dict:  # nbformat's NotebookNode: the same kind of mapping
                out = type(value)()
                out.update(masked)
                return out
            return masked
        if isinstance(value, (list, tuple)):
            return type(value)(self.obj(v) for v in value)
        return value

    def outputs(self, outputs: Iterable[Any]) -> int:
        """Mask, in place, the string values of ``outputs`` (cells' output dicts, in order): each
        on its own, then as one text, so a value split across outputs and cells is found too.
        Returns how many masks were put in."""
        if self._re is None:
            return 0
        slots: list[tuple[Any, Any]] = []  # (container, key) of every string, in order
        for out in outputs:
            for key in _CONTENT:  # what an output shows (never its type, stream name or metadata)
                if isinstance(out, dict) and key in out:
                    _collect(out, slots, key)
        count = 0
        for holder, key in slots:  # each on its own
            text = _get(holder, key)
            new, n = self._re.subn(MASK, text)
            if n:
                holder[key] = new
                count += n
        # then across them: one text, its strings joined by a newline
        texts = [_get(h, k) for h, k in slots]
        starts, pos = [], 0
        for t in texts:
            starts.append(pos)
            pos += len(t) + 1
        whole = "\n".join(texts)
        edits: dict[int, list[tuple[int, int, str]]] = {}
        for m in self._re.finditer(whole):
            first = True
            i = bisect.bisect_right(starts, m.start()) - 1
            while i < len(texts) and starts[i] < m.end():
                lo, hi = max(m.start(), starts[i]) - starts[i], min(m.end(), starts[i] + len(texts[i])) - starts[i]
                if hi > lo or first:
                    edits.setdefault(i, []).append((lo, max(hi, lo), MASK if first else ""))
                first = False
                i += 1
            count += 1
        for i, spans in edits.items():
            text = texts[i]
            for lo, hi, new in sorted(spans, reverse=True):
                text = text[:lo] + new + text[hi:]
            holder, key = slots[i]
            holder[key] = text
        return count


def _get(holder: Any, key: Any) -> str:
    value = holder[key]
    assert isinstance(value, str)
    return value


_CONTENT = ("text", "data", "ename", "evalue", "traceback")


def _collect(holder: Any, slots: list[tuple[Any, Any]], key: Any) -> None:
    value = holder[key]
    if isinstance(value, str):
        slots.append((holder, key))
        return
    if isinstance(value, dict):
        items: Iterable[tuple[Any, Any]] = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return
    for sub_key, _ in list(items):
        _collect(value, slots, sub_key)
