"""Golden comparison: do the outputs of an executed notebook match a golden copy?

Pure functions, no I/O. The rules follow nbval's output comparison:

* cells are aligned by index and only code cells are compared;
* golden code cells that were never executed (no execution count, no outputs),
  cells skipped by markers and ``nbval-ignore-output`` cells are not compared;
* within a cell, stream outputs of the same name are merged and ``\\r`` / ``\\b``
  are resolved as a terminal would; every output is flattened into keys
  (``stream:<name>``, one key per MIME type under ``data``, ``error`` for
  ``ename: evalue``), ignoring ``metadata``, ``execution_count``, ``traceback``,
  ``transient``, the widget-view MIME type and (by default) images;
* the key sets, the number of values per key, and the values must agree;
* ``ignore_output_types`` leaves out whole outputs by nbformat type
  (``stream``, ``execute_result``, ``display_data``, ``error``), streams by name
  (``stream:stderr``) and data by MIME type (``text/html``, ``image/*``);
* execution counts are compared only with ``compare_execution_count=True``.

Two strategies:

``exact``
    values compared verbatim after the structural steps above.
``normalized``
    volatile text is sanitised first (memory addresses in ``<... at 0x...>``,
    ISO timestamps, dates, times unless ``ignore_timestamps=False``, what the
    caller's ``timestamp_patterns`` match (replaced by ``MASKED``), trailing
    whitespace, runs of blank lines), then the
    texts are split into alternating non-number / number tokens; non-number tokens
    must be equal and numbers ``a`` (actual) and ``b`` (golden) are equal when
    ``|a - b| <= abs_tol + rel_tol * |b|``. A different number of tokens is a
    mismatch.

In both strategies the caller's ``sanitizers`` (nbval's sanitizer entries:
a regular expression and its replacement, ``re.sub`` semantics) are applied
first, in order, to golden and actual text alike. With ``lax=True`` (nbval's
``--nbval-lax``) only cells marked ``# NBVAL_CHECK_OUTPUT`` / tagged
``nbval-check-output`` are compared. Cells tagged ``injected-parameters``
(papermill's injected cell, on either side) are never compared and do not
shift the alignment: cell indexes in the result are those of ``actual``
without them.
"""

from __future__ import annotations

import difflib
import json
import re
import signal
import threading
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from jupyter_nbvalidation.verdict.markers import cell_markers, cell_source, cell_tags

EXACT = "exact"
NORMALIZED = "normalized"
STRATEGIES = (EXACT, NORMALIZED)

DEFAULT_ABS_TOL = 1e-4
DEFAULT_REL_TOL = 0.0

TEXT_LIMIT = 2000  # expected / actual in a diff entry
DIFF_LIMIT = 8000  # unified diff text in a diff entry

WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json"
IMAGE_PREFIX = "image/"  # image/png, image/jpeg, image/svg+xml, ...

# papermill's tag of the cell it injects (and the runner's, see runner/parameters.py)
INJECTED_PARAMETERS_TAG = "injected-parameters"
# what a ``customTimestampPatterns`` match is replaced by (it need not be a timestamp)
MASK = "MASKED"

# diffType values
OUTPUT_MISMATCH = "output_mismatch"
MISSING_CELL = "missing_cell"
EXTRA_CELL = "extra_cell"
EXECUTION_ERROR = "execution_error"


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


# --- normalisation ---------------------------------------------------------------

# "<... at 0x...>", where the "..." may hold one level of nested "<...>":
# "<generator object <genexpr> at 0x...>", "<function f.<locals>.g at 0x...>".
_MEMORY_ADDRESS = re.compile(r"(<(?:[^<>\n]|<[^<>\n]*>)*?\bat\s+)0x[0-9a-fA-F]+")
_ISO_DATETIME = re.compile(
    r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}(?::?\d{2})?)?(?![\w:])"
)
_ISO_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
_SLASH_DATE = re.compile(r"\b\d{1,2}/\d{1,2}/\d{2,4}\b")
_TIME = re.compile(r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b")
_BLANK_RUNS = re.compile(r"\n{3,}")

Sanitizers = Sequence[tuple[Any, str]]  # (a compiled pattern or a UserPattern, its replacement)

# --- user patterns: a time budget ---------------------------------------------------
# A user's regular expression (customTimestampPatterns, sanitizers) can backtrack
# for hours on a modest output ("(a+)+$" on 40 "a"s and a "b"). Two defences:
# at submit, check_backtracking refuses the classic form (an unbounded repeat of an
# unbounded repeat); at run time every application of a user pattern has
# PATTERN_BUDGET_SECONDS (Python's re checks for signals while it matches, so a
# SIGALRM interrupts it; only in the main thread, where the runner compares).

PATTERN_BUDGET_SECONDS = 10.0


class PatternTimeout(ValueError):
    """A user pattern ran over its budget; ``pattern`` names it."""

    def __init__(self, pattern: str, budget: float):
        self.pattern, self.budget = pattern, budget
        super().__init__(f"the pattern {pattern!r} did not finish within {budget:g} s on one output "
                         f"(catastrophic backtracking?); simplify it")


class _Expired(BaseException):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Expired


class UserPattern:
    """A compiled user pattern whose ``sub`` has a time budget (see above)."""

    def __init__(self, pattern: str, budget: float | None = None):
        self.compiled = re.compile(pattern)
        self.pattern = pattern
        self.budget = budget

    def sub(self, replacement: str, text: str) -> str:
        budget = PATTERN_BUDGET_SECONDS if self.budget is None else self.budget
        if (budget <= 0 or threading.current_thread() is not threading.main_thread()
                or not hasattr(signal, "setitimer")):
            return self.compiled.sub(replacement, text)
        previous = signal.signal(signal.SIGALRM, _alarm)
        try:
            signal.setitimer(signal.ITIMER_REAL, budget)
            try:
                return self.compiled.sub(replacement, text)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except _Expired:
            raise PatternTimeout(self.pattern, budget) from None
        finally:
            signal.signal(signal.SIGALRM, previous)


def _unbounded(item: Any) -> Any:
    """The body of an unbounded repeat (``x*``, ``x+``, ``x{2,}``), else None."""
    op, av = item
    if str(op) in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT") and av[1] >= _sre_parser().MAXREPEAT:
        return av[2]
    return None


def _sre_parser() -> Any:
    try:
        import re._parser as parser  # type: ignore[import-not-found,unused-ignore]  # Python >= 3.11
    except ImportError:  # pragma: no cover - Python 3.10
        import sre_parse as parser
    return parser


def _only_item(body: Any) -> Any:
    """The one item of a sequence, looking through groups, else None."""
    items = list(body)
    while len(items) == 1:
        op, av = items[0]
        if str(op) == "SUBPATTERN":
            items = list(av[-1])
            continue
        return items[0]
    return None


def check_backtracking(pattern: str) -> None:
    """Raise ValueError for a pattern of the form ``(x+)+`` / ``(x*)*`` (an
    unbounded repeat whose body is itself one unbounded repeat): it can take
    exponential time on a line that almost matches, and means the same as
    ``x+``. Other slow patterns are caught at run time (UserPattern)."""
    try:
        parsed = _sre_parser().parse(pattern)
    except re.error:
        return  # reported by re.compile

    def walk(seq: Any) -> None:
        for op, av in seq:
            body = _unbounded((op, av))
            if body is not None:
                inner = _only_item(body)
                if inner is not None and _unbounded(inner) is not None:
                    raise ValueError(f"{pattern!r} repeats a repetition (such as \"(a+)+\"): it can take "
                                     f"exponential time on a line that almost matches; write the inner "
                                     f"repetition once (\"a+\")")
            for value in (av if isinstance(av, (tuple, list)) else ()):
                if isinstance(value, _sre_parser().SubPattern):
                    walk(value)
                elif isinstance(value, (tuple, list)):
                    for sub in value:
                        if isinstance(sub, _sre_parser().SubPattern):
                            walk(sub)
    walk(parsed)


def cell_label(index: int) -> str:
    """A cell as people number it (JupyterLab's "Cell N"): the 0-based index + 1
    (the same rule as ``runner.text.cell_label``; this module imports nothing of the runner)."""
    return f"cell {index + 1}"


def check_sanitizer(regex: str, replace: str) -> None:
    """Raise ValueError unless ``regex`` compiles and ``replace`` is a valid
    ``re.sub`` replacement for it (group references, escapes)."""
    try:
        pattern = re.compile(regex)
    except re.error as e:
        raise ValueError(f"regex {regex!r} is not a valid regular expression: {e}") from None
    check_backtracking(regex)
    compile_template = getattr(re, "_compile_template", None)  # Python >= 3.12: (pattern, repl)
    try:
        if compile_template is not None:
            compile_template(pattern, replace)
        elif hasattr(re, "_compile_repl"):  # Python 3.10, 3.11: (repl, pattern)
            re._compile_repl(replace, pattern)
    except (re.error, IndexError) as e:
        raise ValueError(f"replace {replace!r} is not a valid replacement for {regex!r}: {e}") from None


class SanitizerFileError(ValueError):
    """A line of an nbval sanitizer file that cannot be read (``line`` is 1-based)."""

    def __init__(self, line: int, message: str):
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.reason = message


_SECTION = re.compile(r"^\[([^\]]*)\]\s*$")


def _field(line: str, key: str) -> str | None:
    """The value of ``key: value`` as nbval reads it (everything after ``key: ``)."""
    if not line.startswith(key + ":"):
        return None
    value = line[len(key) + 1:]
    return value[1:] if value.startswith(" ") else value


def parse_sanitizer_file(text: str) -> list[dict[str, str]]:
    """nbval's sanitizer file (``--sanitize-with``) as ``[{"section", "regex", "replace"}]``.

    The format: ``[section]`` headers, each followed by pairs of lines
    ``regex: REGEX`` and, on the next line, ``replace: REPLACEMENT``; blank
    lines and lines starting with ``#`` or ``;`` are comments. Stricter than
    nbval, which skips what it does not understand: any other line, a
    ``regex:`` without its ``replace:`` line, or a regular expression that
    does not compile raises :class:`SanitizerFileError` naming the line.
    """
    out: list[dict[str, str]] = []
    section = ""
    pending: tuple[int, str] | None = None
    lines = text.splitlines()
    for number, raw in enumerate(lines, 1):
        line = raw.rstrip("\r")
        replace = _field(line, "replace")
        if pending is not None:
            regex_line, pending_regex = pending
            if replace is None:
                raise SanitizerFileError(regex_line, "a 'regex:' line must be followed by its 'replace:' line")
            try:
                check_sanitizer(pending_regex, replace)
            except ValueError as e:
                raise SanitizerFileError(regex_line, str(e)) from None
            entry = {"regex": pending_regex, "replace": replace}
            if section:
                entry["section"] = section
            out.append(entry)
            pending = None
            continue
        if not line.strip() or line.lstrip().startswith(("#", ";")):
            continue
        m = _SECTION.match(line.strip())
        if m:
            section = m.group(1).strip()
            continue
        regex = _field(line, "regex")
        if regex is not None:
            if not regex:
                raise SanitizerFileError(number, "the regular expression is empty")
            pending = (number, regex)
            continue
        if replace is not None:
            raise SanitizerFileError(number, "a 'replace:' line without a 'regex:' line before it")
        raise SanitizerFileError(number, f"not a '[section]', 'regex: ...' or 'replace: ...' line: {line.strip()[:80]!r}")
    if pending is not None:
        raise SanitizerFileError(pending[0], "a 'regex:' line must be followed by its 'replace:' line")
    if not out:
        raise SanitizerFileError(max(1, len(lines)), "the file holds no regex/replace pair")
    return out
_ADDRESSES: tuple[tuple[re.Pattern[str], str], ...] = ((_MEMORY_ADDRESS, r"\g<1>0xADDRESS"),)
_TIMESTAMPS: tuple[tuple[re.Pattern[str], str], ...] = (
    (_ISO_DATETIME, "DATETIME"),
    (_ISO_DATE, "DATE"),
    (_SLASH_DATE, "DATE"),
    (_TIME, "TIME"),
)
_SANITIZERS = _ADDRESSES + _TIMESTAMPS


def user_sanitizers(entries: Iterable[Mapping[str, str]] = ()) -> Sanitizers:
    """nbval sanitizer entries (``{"regex", "replace"}``) compiled, in order."""
    return tuple((UserPattern(e["regex"]), e["replace"]) for e in entries)


def make_sanitizers(*, ignore_timestamps: bool = True, timestamp_patterns: Iterable[str] = (),
                    sanitizers: Iterable[Mapping[str, str]] = ()) -> Sanitizers:
    """The sanitizers of normalized mode: the caller's nbval ``sanitizers``
    first, then its ``timestamp_patterns`` (regular expressions, replaced by
    ``MASKED``), then memory addresses, then the built-in dates and times
    unless ``ignore_timestamps`` is false. Raises ``re.error`` for a pattern
    that does not compile."""
    custom = tuple((UserPattern(p), MASK) for p in timestamp_patterns)
    return tuple(user_sanitizers(sanitizers)) + custom + _ADDRESSES + (_TIMESTAMPS if ignore_timestamps else ())


def _substitute(text: str, sanitizers: Sanitizers) -> str:
    for pattern, replacement in sanitizers:
        text = pattern.sub(replacement, text)
    return text


def sanitize(text: str, sanitizers: Sanitizers = _SANITIZERS) -> str:
    """Remove volatile parts of an output text (normalized mode)."""
    text = _substitute(text, sanitizers)
    text = "\n".join(line.rstrip() for line in text.replace("\r\n", "\n").split("\n"))
    text = _BLANK_RUNS.sub("\n\n", text)
    return text.rstrip()


# A number: optional sign (only when not glued to a word, e.g. not the minus in
# "x-1"), digits with optional fraction, optional exponent. Digits glued to a
# word ("float64", "x2") belong to that word and are compared as text.
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
_INT_LITERAL = re.compile(r"[-+]?\d+")


def tokenize(text: str) -> list[tuple[bool, str]]:
    """Split ``text`` into alternating ``(is_number, token)`` pieces.

    The result always starts and ends with a text token (possibly empty), so two
    texts with the same shape have tokens in the same positions.
    """
    tokens: list[tuple[bool, str]] = []
    pos = 0
    for m in _NUMBER.finditer(text):
        tokens.append((False, text[pos : m.start()]))
        tokens.append((True, m.group()))
        pos = m.end()
    tokens.append((False, text[pos:]))
    return tokens


def numbers_close(actual: str, expected: str, abs_tol: float, rel_tol: float) -> bool:
    """``|a - b| <= abs_tol + rel_tol * |b|`` with ``b`` the golden value."""
    if actual == expected:
        return True
    try:
        if _INT_LITERAL.fullmatch(actual) and _INT_LITERAL.fullmatch(expected):
            a_int, b_int = int(actual), int(expected)  # exact, however large
            return abs(a_int - b_int) <= abs_tol + rel_tol * abs(b_int)
        a, b = float(actual), float(expected)
    except (ValueError, OverflowError):
        return False
    if a == b:
        return True
    diff = abs(a - b)
    if diff != diff:  # nan (inf - inf)
        return False
    return diff <= abs_tol + rel_tol * abs(b)


def texts_equal(
    expected: str,
    actual: str,
    *,
    strategy: str = NORMALIZED,
    abs_tol: float = DEFAULT_ABS_TOL,
    rel_tol: float = DEFAULT_REL_TOL,
    sanitizers: Sanitizers | None = None,
) -> bool:
    """Compare one golden value with one actual value under ``strategy``.

    ``sanitizers``: normalized mode's (default: the built-in ones); in exact
    mode only the caller's (nbval's), as plain substitutions (default: none)."""
    if strategy == EXACT:
        if sanitizers:
            expected, actual = _substitute(expected, sanitizers), _substitute(actual, sanitizers)
        return expected == actual
    if sanitizers is None:
        sanitizers = _SANITIZERS
    expected, actual = sanitize(expected, sanitizers), sanitize(actual, sanitizers)
    if expected == actual:
        return True
    exp_tokens, act_tokens = tokenize(expected), tokenize(actual)
    if len(exp_tokens) != len(act_tokens):
        return False
    for (is_num, exp), (_, act) in zip(exp_tokens, act_tokens, strict=True):
        if is_num:
            if not numbers_close(act, exp, abs_tol, rel_tol):
                return False
        elif exp != act:
            return False
    return True


# --- one cell ------------------------------------------------------------------


@dataclass
class CellComparison:
    equal: bool
    diff_type: str | None
    expected_text: str
    actual_text: str
    diff: str


def render_flat(flat: Mapping[str, Sequence[str]], *, strategy: str = NORMALIZED,
                sanitizers: Sanitizers | None = None) -> str:
    """A readable text form of flattened outputs (what the unified diff is made of)."""
    parts = []
    for key, values in flat.items():
        for value in values:
            if key.startswith(IMAGE_PREFIX):
                pass
            elif strategy == NORMALIZED:
                value = sanitize(value, _SANITIZERS if sanitizers is None else sanitizers)
            elif sanitizers:
                value = _substitute(value, sanitizers)
            parts.append(f"[{key}]")
            parts.append(value)
    return "\n".join(parts)


def unified_diff(expected: str, actual: str, *, label: str = "") -> str:
    suffix = f" {label}" if label else ""
    lines = difflib.unified_diff(
        expected.splitlines(),
        actual.splitlines(),
        fromfile=f"golden{suffix}",
        tofile=f"executed{suffix}",
        lineterm="",
    )
    return "\n".join(lines)


def flat_equal(
    expected: Mapping[str, Sequence[str]],
    actual: Mapping[str, Sequence[str]],
    *,
    strategy: str = NORMALIZED,
    abs_tol: float = DEFAULT_ABS_TOL,
    rel_tol: float = DEFAULT_REL_TOL,
    sanitizers: Sanitizers | None = None,
) -> bool:
    if set(expected) != set(actual):
        return False
    for key, exp_values in expected.items():
        act_values = actual[key]
        if len(exp_values) != len(act_values):
            return False
        for exp, act in zip(exp_values, act_values, strict=True):
            if key.startswith(IMAGE_PREFIX):  # only when images are compared: verbatim
                if exp != act:
                    return False
            elif not texts_equal(exp, act, strategy=strategy, abs_tol=abs_tol, rel_tol=rel_tol,
                                 sanitizers=sanitizers):
                return False
    return True


def compare_cell_outputs(
    expected_outputs: Sequence[Mapping[str, Any]],
    actual_outputs: Sequence[Mapping[str, Any]],
    *,
    strategy: str = NORMALIZED,
    abs_tol: float = DEFAULT_ABS_TOL,
    rel_tol: float = DEFAULT_REL_TOL,
    compare_images: bool = False,
    label: str = "",
    sanitizers: Sanitizers | None = None,
    ignore: Sequence[str] = (),
) -> CellComparison:
    """Compare the outputs of one golden cell with those of the executed cell."""
    _check_strategy(strategy)
    exp_flat = flatten_outputs(expected_outputs, compare_images=compare_images, ignore=ignore)
    act_flat = flatten_outputs(actual_outputs, compare_images=compare_images, ignore=ignore)
    exp_text = render_flat(exp_flat, strategy=strategy, sanitizers=sanitizers)
    act_text = render_flat(act_flat, strategy=strategy, sanitizers=sanitizers)
    if flat_equal(exp_flat, act_flat, strategy=strategy, abs_tol=abs_tol, rel_tol=rel_tol, sanitizers=sanitizers):
        return CellComparison(True, None, exp_text, act_text, "")
    diff_type = EXECUTION_ERROR if ("error" in act_flat and "error" not in exp_flat) else OUTPUT_MISMATCH
    return CellComparison(False, diff_type, exp_text, act_text, unified_diff(exp_text, act_text, label=label))


# --- whole notebook -----------------------------------------------------------------


def truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    marker = f"\n[... {len(text) - limit} more characters truncated]"
    return text[: max(0, limit - len(marker))] + marker


def is_unexecuted(cell: Mapping[str, Any]) -> bool:
    """A golden code cell that was never run: no execution count and no outputs."""
    return cell.get("execution_count") is None and not cell.get("outputs")


def _cells(nb: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list(nb.get("cells") or [])


def _check_strategy(strategy: str) -> None:
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown comparison strategy {strategy!r}; use one of {', '.join(STRATEGIES)}")


def _diff_entry(index: int, cell_type: str, diff_type: str, expected: str, actual: str, diff: str) -> dict[str, Any]:
    return {
        "cellIndex": index,
        "cellType": cell_type,
        "diffType": diff_type,
        "expected": truncate(expected, TEXT_LIMIT),
        "actual": truncate(actual, TEXT_LIMIT),
        "diff": truncate(diff, DIFF_LIMIT),
        "severity": "major",
    }


def is_injected_parameters(cell: Mapping[str, Any]) -> bool:
    """papermill's injected parameters cell (tag ``injected-parameters``)."""
    return INJECTED_PARAMETERS_TAG in cell_tags(cell)


def compare_notebooks(
    golden: Mapping[str, Any],
    actual: Mapping[str, Any],
    *,
    strategy: str = NORMALIZED,
    abs_tol: float = DEFAULT_ABS_TOL,
    rel_tol: float = DEFAULT_REL_TOL,
    skip_cells: Iterable[int] = (),
    compare_images: bool = False,
    ignore_timestamps: bool = True,
    timestamp_patterns: Iterable[str] = (),
    ignore_output_types: Iterable[str] = (),
    compare_execution_count: bool = False,
    lax: bool = False,
    sanitizers: Iterable[Mapping[str, str]] = (),
) -> dict[str, Any]:
    """Compare an executed notebook with its golden copy.

    ``skip_cells`` are indices (into ``actual``'s ``cells``) that must not be
    compared, e.g. the cells the runner did not execute. ``ignore_timestamps``,
    ``timestamp_patterns`` (normalized mode), ``ignore_output_types``,
    ``compare_execution_count``, ``lax`` and ``sanitizers`` are the spec's
    ``comparisonConfig`` fields (``ignoreExecutionCount`` inverted,
    ``customTimestampPatterns`` for ``timestamp_patterns``). Returns the
    ``comparisonResult`` document::

        {"strategy", "result": "matched"|"failed", "totalCells", "matchedCells",
         "mismatchedCells", "skippedCells", "tolerance": {"absolute", "relative"},
         "lax", "diffs": [...]}

    ``totalCells`` counts the compared-or-skipped code-cell positions and equals
    matched + mismatched + skipped. ``diffs[].cellIndex`` is an index into
    ``actual``'s cells (0-based); the messages number cells as people do
    (:func:`cell_label`).
    """
    _check_strategy(strategy)
    if abs_tol < 0 or rel_tol < 0:
        raise ValueError("tolerances must not be negative")
    sanitizers = list(sanitizers)
    if strategy == NORMALIZED:
        active = make_sanitizers(ignore_timestamps=ignore_timestamps, timestamp_patterns=timestamp_patterns,
                                 sanitizers=sanitizers)
    else:
        active = user_sanitizers(sanitizers)
    ignore = tuple(ignore_output_types)
    for selector in ignore:
        check_output_selector(selector)
    skip = set(skip_cells)
    all_actual = _cells(actual)
    # papermill's injected cells are not the notebook's own: left out on both sides
    golden_cells = [c for c in _cells(golden) if not is_injected_parameters(c)]
    actual_index = [i for i, c in enumerate(all_actual) if not is_injected_parameters(c)]
    actual_cells = [all_actual[i] for i in actual_index]
    matched = mismatched = skipped = 0
    diffs: list[dict[str, Any]] = []

    def where(pos: int) -> int:  # an aligned position as an index into actual's cells
        if pos < len(actual_index):
            return actual_index[pos]
        return len(all_actual) + pos - len(actual_index)

    for pos in range(max(len(golden_cells), len(actual_cells))):
        index = where(pos)
        label = cell_label(index)
        g = golden_cells[pos] if pos < len(golden_cells) else None
        a = actual_cells[pos] if pos < len(actual_cells) else None
        g_code = g is not None and g.get("cell_type") == "code"
        a_code = a is not None and a.get("cell_type") == "code"
        if not g_code and not a_code:
            continue
        if g is not None and g_code and not a_code:
            mismatched += 1
            exp = render_flat(flatten_outputs(g.get("outputs") or [], compare_images=compare_images, ignore=ignore),
                              strategy=strategy, sanitizers=active)
            actual_desc = "" if a is None else f"<{a.get('cell_type')} cell>"
            expected_desc = f"<code cell>\n{cell_source(g)}" if not exp else exp
            diffs.append(
                _diff_entry(index, "code", MISSING_CELL, expected_desc, actual_desc,
                            unified_diff(expected_desc, actual_desc, label=label))
            )
            continue
        if a is not None and a_code and not g_code:
            mismatched += 1
            act = render_flat(flatten_outputs(a.get("outputs") or [], compare_images=compare_images, ignore=ignore),
                              strategy=strategy, sanitizers=active)
            expected_desc = "" if g is None else f"<{g.get('cell_type')} cell>"
            actual_desc = f"<code cell>\n{cell_source(a)}" if not act else act
            diffs.append(
                _diff_entry(index, "code", EXTRA_CELL, expected_desc, actual_desc,
                            unified_diff(expected_desc, actual_desc, label=label))
            )
            continue
        # both code cells
        assert g is not None and a is not None
        g_markers, a_markers = cell_markers(g), cell_markers(a)
        if index in skip or not g_markers.compare or not a_markers.compare or is_unexecuted(g):
            skipped += 1
            continue
        if lax and not (g_markers.check_output or a_markers.check_output):
            skipped += 1  # nbval's lax mode: only marked cells are compared
            continue
        result = compare_cell_outputs(
            g.get("outputs") or [],
            a.get("outputs") or [],
            strategy=strategy,
            abs_tol=abs_tol,
            rel_tol=rel_tol,
            compare_images=compare_images,
            label=label,
            sanitizers=active,
            ignore=ignore,
        )
        if result.equal and compare_execution_count and g.get("execution_count") != a.get("execution_count"):
            exp_text = f"execution_count: {g.get('execution_count')}\n{result.expected_text}"
            act_text = f"execution_count: {a.get('execution_count')}\n{result.actual_text}"
            result = CellComparison(False, OUTPUT_MISMATCH, exp_text, act_text,
                                    unified_diff(exp_text, act_text, label=label))
        if result.equal:
            matched += 1
        else:
            mismatched += 1
            assert result.diff_type is not None
            diffs.append(_diff_entry(index, "code", result.diff_type, result.expected_text, result.actual_text, result.diff))

    return {
        "strategy": strategy,
        "result": "matched" if mismatched == 0 else "failed",
        "totalCells": matched + mismatched + skipped,
        "matchedCells": matched,
        "mismatchedCells": mismatched,
        "skippedCells": skipped,
        "tolerance": {"absolute": float(abs_tol), "relative": float(rel_tol)},
        "lax": bool(lax),
        "diffs": diffs,
    }
