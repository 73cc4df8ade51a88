"""Normalising an output text before it is compared (verdict/compare.py): the caller's
sanitizers (nbval's regex/replace entries, also read from nbval's sanitizer file), the
``customTimestampPatterns`` (replaced by ``MASKED``), memory addresses, and the built-in
dates and times; trailing whitespace and runs of blank lines. A user's pattern is checked
at submit (:func:`check_sanitizer`, :func:`check_backtracking`) and runs with a time
budget (:class:`UserPattern`).

Pure functions, standard library only (the runner imports them in its image).
"""

from __future__ import annotations

import re
import signal
import threading
from typing import Any, Iterable, Mapping, Sequence

# what a ``customTimestampPatterns`` match is replaced by (it need not be a timestamp)
MASK = "MASKED"


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
# whitespace at the end of a line (what str.rstrip strips: the same Unicode whitespace), by one
# regular expression: a text of millions of lines is not split into a list of millions of strings
_TRAILING_SPACE = re.compile(r"[^\S\n]+(?=\n)")

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
        # optional (both imports): the regex parser's module name depends on the Python version
        import re._parser as parser  # type: ignore[import-not-found,unused-ignore]  # optional: Python >= 3.11
    except ImportError:  # pragma: no cover - Python 3.10
        import sre_parse as parser  # optional: Python 3.10
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


# --- the built-in sanitizers and normalized mode's ---------------------------------

_ADDRESSES: tuple[tuple[re.Pattern[str], str], ...] = ((_MEMORY_ADDRESS, r"\g<1>0xADDRESS"),)
_TIMESTAMPS: tuple[tuple[re.Pattern[str], str], ...] = (
    (_ISO_DATETIME, "DATETIME"),
    (_ISO_DATE, "DATE"),
    (_SLASH_DATE, "DATE"),
    (_TIME, "TIME"),
)
DEFAULT_SANITIZERS = _ADDRESSES + _TIMESTAMPS


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


def substitute(text: str, sanitizers: Sanitizers) -> str:
    """``sanitizers`` applied in order (``re.sub`` semantics), nothing else."""
    for pattern, replacement in sanitizers:
        text = pattern.sub(replacement, text)
    return text


def sanitize(text: str, sanitizers: Sanitizers = DEFAULT_SANITIZERS) -> str:
    """Remove volatile parts of an output text (normalized mode)."""
    text = substitute(text, sanitizers)
    text = _TRAILING_SPACE.sub("", text.replace("\r\n", "\n"))  # each line's end (the last: rstrip below)
    text = _BLANK_RUNS.sub("\n\n", text)
    return text.rstrip()
