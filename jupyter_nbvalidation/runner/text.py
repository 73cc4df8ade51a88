"""Small text helpers of the runner (standard library only)."""

from __future__ import annotations

import re

from jupyter_nbvalidation.verdict.compare import truncate  # one truncation rule for runner and comparison

__all__ = ["cell_label", "fmt_limit", "format_seconds", "plural", "strip_ansi", "truncate", "truncate_tail"]

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


def cell_label(index: int) -> str:
    """A cell as people number it: ``"cell 4"`` for the 0-based notebook index 3
    (all cells, markdown included), as JupyterLab's status bar shows it. Machine
    fields (``failedCellIndex``, ``cellIndex``) keep the 0-based index."""
    return f"cell {index + 1}"


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def truncate_tail(text: str, limit: int) -> str:
    """Keep the end of ``text`` (the informative end of a traceback)."""
    if len(text) <= limit:
        return text
    if limit <= 0:
        return f"[{len(text)} characters truncated]"
    marker = f"[... {len(text) - limit} characters truncated ...]\n"
    keep = max(0, limit - len(marker))
    return marker + (text[-keep:] if keep else "")


def format_seconds(seconds: float) -> str:
    return f"{max(0.0, seconds):.3f}s"


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def fmt_limit(seconds: float) -> str:
    return f"{seconds:g} s"
