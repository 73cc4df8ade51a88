"""Per-cell markers understood by the runner and the golden comparison.

Two vocabularies are accepted so that notebooks written for existing tools work
unchanged:

* nbmake / nbclient tags: ``skip-execution`` and ``raises-exception``;
* nbval tags (``nbval-skip``, ``nbval-raises-exception``, ``nbval-ignore-output``,
  ``nbval-check-output``) and the equivalent comment lines in the code
  (``# NBVAL_SKIP``, ``# NBVAL_RAISES_EXCEPTION``, ``# NBVAL_IGNORE_OUTPUT``,
  ``# NBVAL_CHECK_OUTPUT``). A comment marker may be on any line of the cell, as
  long as the line consists of the comment alone. nbval's legacy comments
  ``# PYTEST_VALIDATE_IGNORE_OUTPUT`` and ``# PYTEST_VALIDATE_SKIP`` mean what
  their ``NBVAL_`` twins mean.

Everything here is a pure function of the cell (a dict / ``NotebookNode``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

SKIP_TAGS = frozenset({"skip-execution", "nbval-skip"})
RAISES_TAGS = frozenset({"raises-exception", "nbval-raises-exception"})
IGNORE_OUTPUT_TAGS = frozenset({"nbval-ignore-output"})
CHECK_OUTPUT_TAGS = frozenset({"nbval-check-output"})

SKIP_COMMENT = "NBVAL_SKIP"
RAISES_COMMENT = "NBVAL_RAISES_EXCEPTION"
IGNORE_OUTPUT_COMMENT = "NBVAL_IGNORE_OUTPUT"
CHECK_OUTPUT_COMMENT = "NBVAL_CHECK_OUTPUT"
# nbval's older spellings, still honoured by nbval
LEGACY_COMMENTS = {"PYTEST_VALIDATE_IGNORE_OUTPUT": IGNORE_OUTPUT_COMMENT, "PYTEST_VALIDATE_SKIP": SKIP_COMMENT}
COMMENT_MARKERS = frozenset({SKIP_COMMENT, RAISES_COMMENT, IGNORE_OUTPUT_COMMENT, CHECK_OUTPUT_COMMENT})


@dataclass(frozen=True)
class CellMarkers:
    """What the markers of one cell ask for."""

    skip: bool = False
    """Do not execute the cell (and do not compare it)."""
    raises_exception: bool = False
    """The cell may raise; an error in it does not fail the notebook."""
    ignore_output: bool = False
    """Execute the cell but do not compare its outputs with the golden copy."""
    check_output: bool = False
    """Explicitly compare the outputs (the default anyway; accepted for nbval compatibility)."""

    @property
    def compare(self) -> bool:
        """Whether the golden comparison should look at this cell."""
        return not (self.skip or self.ignore_output)


def cell_source(cell: Mapping[str, Any]) -> str:
    """The cell source as one string (raw JSON stores it as a list of lines)."""
    source = cell.get("source", "")
    if isinstance(source, (list, tuple)):
        return "".join(source)
    return source or ""


def cell_tags(cell: Mapping[str, Any]) -> frozenset[str]:
    metadata = cell.get("metadata") or {}
    tags = metadata.get("tags") or []
    if isinstance(tags, str):  # tolerate a single tag written as a string
        tags = [tags]
    return frozenset(str(t).strip() for t in tags)


def comment_markers(source: str) -> frozenset[str]:
    """nbval comment markers found in ``source``: lines that are only ``# MARKER``
    (legacy spellings reported as their ``NBVAL_`` twin)."""
    found = set()
    for line in source.splitlines():
        stripped = line.strip()
        if not stripped.startswith("#"):
            continue
        word = stripped.lstrip("#").strip()
        word = LEGACY_COMMENTS.get(word, word)
        if word in COMMENT_MARKERS:
            found.add(word)
    return frozenset(found)


def _any(tags: frozenset[str], wanted: Iterable[str]) -> bool:
    return not tags.isdisjoint(wanted)


def cell_markers(cell: Mapping[str, Any]) -> CellMarkers:
    """Markers of one cell. Non-code cells never carry markers."""
    if cell.get("cell_type") != "code":
        return CellMarkers()
    tags = cell_tags(cell)
    comments = comment_markers(cell_source(cell))
    return CellMarkers(
        skip=_any(tags, SKIP_TAGS) or SKIP_COMMENT in comments,
        raises_exception=_any(tags, RAISES_TAGS) or RAISES_COMMENT in comments,
        ignore_output=_any(tags, IGNORE_OUTPUT_TAGS) or IGNORE_OUTPUT_COMMENT in comments,
        check_output=_any(tags, CHECK_OUTPUT_TAGS) or CHECK_OUTPUT_COMMENT in comments,
    )


def notebook_execution_settings(nb: Mapping[str, Any]) -> dict[str, Any]:
    """Notebook-level overrides under ``metadata.execution`` (as nbmake honours them).

    Returns a dict with ``timeout`` (seconds, ``None`` when absent, ``0`` meaning no
    limit) and ``allow_errors`` (bool). Values of the wrong type are ignored.
    """
    metadata = nb.get("metadata") or {}
    execution = metadata.get("execution") or {}
    if not isinstance(execution, Mapping):
        execution = {}
    timeout = execution.get("timeout")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        timeout = None
    elif timeout < 0:
        timeout = 0  # nbclient treats a negative timeout as "no limit"
    allow_errors = execution.get("allow_errors")
    return {"timeout": timeout, "allow_errors": allow_errors is True}


#: the keys a notebook may set under ``metadata.nbvalidation``
NOTEBOOK_SETTINGS = {"cache": bool}


def notebook_settings_problem(nb: Mapping[str, Any]) -> str | None:
    """What is wrong with the notebook's ``metadata.nbvalidation`` (a key it does not know,
    a value of the wrong type), or None."""
    settings = (nb.get("metadata") or {}).get("nbvalidation")
    if settings is None:
        return None
    if not isinstance(settings, Mapping):
        return "metadata.nbvalidation: must be an object"
    for key, value in settings.items():
        kind = NOTEBOOK_SETTINGS.get(key)
        if kind is None:
            return f"metadata.nbvalidation.{key}: not a setting (known: {', '.join(sorted(NOTEBOOK_SETTINGS))})"
        if not isinstance(value, kind):
            return f"metadata.nbvalidation.{key}: must be {kind.__name__} (true or false)"
    return None


def notebook_opts_out_of_cache(nb: Mapping[str, Any]) -> bool:
    """``metadata.nbvalidation.cache`` is false: the notebook always runs (no verdict key)."""
    settings = (nb.get("metadata") or {}).get("nbvalidation")
    return isinstance(settings, Mapping) and settings.get("cache") is False
