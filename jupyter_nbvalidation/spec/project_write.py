"""Writing one notebook's own entry of the project settings file (spec/project.py), by a
careful text edit: the entry's lines are replaced, removed or appended and every other
byte of the file stays as it was (comments, other tables of pyproject.toml, line endings).
The result is parsed again before it is written: an edit that would change anything but
that entry is refused (:class:`WriteRefused`), and nothing is written."""

from __future__ import annotations

import math
import os
import re
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from jupyter_nbvalidation.spec.project import ENTRIES, GLOB, PYPROJECT, STANDALONE, Locator

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
HEADER_COMMENT = "# jupyter-nbvalidation's project settings (docs: Project settings)\n"


class WriteRefused(ValueError):
    """The file cannot be edited safely (its layout is one this edit does not handle)."""


def toml_value(value: Any, where: str) -> str:
    """A JSON value (a checked option) as a TOML value on one line; ``where`` names it in an error."""
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where}: {value} cannot be written in TOML")
        text = repr(value)
        return text if any(c in text for c in ".en") else text + ".0"
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v, f"{where}[{i}]") for i, v in enumerate(value)) + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{toml_key(k)} = {toml_value(v, f'{where}.{k}')}" for k, v in value.items()) + " }"
    if value is None:
        raise ValueError(f"{where}: null cannot be written in TOML (leave the field out)")
    raise ValueError(f"{where}: a {type(value).__name__} cannot be written in TOML")


def toml_key(key: str) -> str:
    return key if _BARE_KEY.match(key) else _string(key)


def _string(text: str) -> str:
    out = []
    for c in text:
        if c in '"\\':
            out.append("\\" + c)
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def entry_text(prefix: str, rel: str, options: dict[str, Any], newline: str = "\n") -> str:
    """One ``[[…notebooks]]`` entry: its header, its glob, one line per option."""
    lines = [f"[[{prefix}{ENTRIES}]]", f"{GLOB} = {_string(rel)}"]
    lines += [f"{toml_key(k)} = {toml_value(v, k)}" for k, v in options.items()]
    return newline.join(lines) + newline


def _table_of(text: str, prefix: str) -> tuple[dict[str, Any], Any]:
    """(the document without the settings table, the settings table or None)."""
    doc = tomllib.loads(text)
    if not prefix:
        return {}, doc
    tool = doc.get("tool")
    table = tool.pop("nbvalidation", None) if isinstance(tool, dict) else None
    if isinstance(tool, dict) and not tool:
        doc.pop("tool")
    return doc, table


def edited(text: str, prefix: str, rel: str, options: dict[str, Any]) -> str:
    """``text`` with the entry whose glob is ``rel`` replaced by ``options`` (removed when
    they are empty, appended after the settings' last table when there was none)."""
    newline = "\r\n" if "\r\n" in text else "\n"
    lines = text.splitlines(keepends=True)
    try:
        rest_before, table = _table_of(text, prefix)
    except tomllib.TOMLDecodeError as e:
        raise WriteRefused(f"it is not valid TOML ({e})") from None
    table = table if isinstance(table, dict) else {}
    entries = table.get(ENTRIES, [])
    array = f"{prefix}{ENTRIES}"
    headers = []  # (line index, table name, is an array entry)
    for i, line in enumerate(lines):
        m = Locator._HEADER.match(line.rstrip("\r\n"))
        if m and not Locator._KEY.match(line):
            name = ".".join(p.strip().strip("\"'") for p in m.group(2).split("."))
            headers.append((i, name, m.group(1) == "[["))
    starts = [h for h in headers if h[2] and h[1] == array]
    if not isinstance(entries, list) or len(starts) != len(entries):
        raise WriteRefused(f"its {array} are not written as [[{array}]] tables")

    def block_end(start: int) -> int:
        later = [h[0] for h in headers if h[0] > start and not h[1].startswith(array + ".")]
        end = later[0] if later else len(lines)
        while end > start + 1 and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")):
            end -= 1
        return end

    own = [(s[0], block_end(s[0])) for s, e in zip(starts, entries, strict=True)
           if isinstance(e, dict) and e.get(GLOB) == rel]
    new = entry_text(prefix, rel, options, newline) if options else ""
    if own:
        out = list(lines)
        for n, (start, end) in enumerate(reversed(own)):
            first = n == len(own) - 1
            replacement = [new] if first and new else []
            if not replacement and end < len(out) and not out[end].strip():
                end += 1  # the blank line after a removed entry goes with it
            out[start:end] = replacement
        result = "".join(out)
    elif not new:
        return text
    else:
        ours = [h for h in headers if h[1] == prefix.rstrip(".") or h[1].startswith(prefix)] if prefix else headers
        if ours:
            at = block_end(ours[-1][0])
            before, after = "".join(lines[:at]), "".join(lines[at:])
        else:
            before, after = text, ""
        if before and not before.endswith(("\n", "\r")):
            before += newline
        gap = newline if before.strip() and not before.endswith(newline * 2) else ""
        tail = newline if after.strip() and not after.startswith(("\n", "\r\n")) else ""
        result = before + gap + new + tail + after
    _check(text, result, prefix, rel, options, rest_before, table)
    return result


def _check(old: str, new: str, prefix: str, rel: str, options: dict[str, Any], rest_before: dict[str, Any],
           table_before: dict[str, Any]) -> None:
    """The edit changed that entry and nothing else, or WriteRefused."""
    try:
        rest_after, table_after = _table_of(new, prefix)
    except tomllib.TOMLDecodeError as e:
        raise WriteRefused(f"the edit would not be valid TOML ({e})") from None
    table_after = table_after if isinstance(table_after, dict) else {}
    if rest_after != rest_before:
        raise WriteRefused("the edit would change more than its settings")
    others_before = [e for e in table_before.get(ENTRIES, []) if e.get(GLOB) != rel]
    others_after = [e for e in table_after.get(ENTRIES, []) if e.get(GLOB) != rel]
    mine = [e for e in table_after.get(ENTRIES, []) if e.get(GLOB) == rel]
    defaults_before = {k: v for k, v in table_before.items() if k != ENTRIES}
    defaults_after = {k: v for k, v in table_after.items() if k != ENTRIES}
    want = [{GLOB: rel, **options}] if options else []
    if others_before != others_after or defaults_before != defaults_after or mine != want:
        raise WriteRefused("the edit would change more than this notebook's entry")


def write_entry(path: Path, rel: str, options: dict[str, Any]) -> None:
    """Replace (or remove, with ``options`` empty) the entry of ``rel`` in the settings file
    ``path`` (made when absent and there is something to write), atomically."""
    prefix = "tool.nbvalidation." if path.name == PYPROJECT else ""
    assert path.name in (PYPROJECT, STANDALONE), path
    exists = path.is_file()
    raw = path.read_bytes() if exists else b""
    text = raw.decode("utf-8")
    if not exists and not options:
        return
    result = edited(text, prefix, rel, options)
    if not exists:
        result = HEADER_COMMENT + "\n" + result
    if result == text:
        return
    mode = path.stat().st_mode & 0o7777 if exists else 0o644
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(result.encode("utf-8"))
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
