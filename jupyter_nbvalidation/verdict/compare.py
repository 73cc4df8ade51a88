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

Its parts: :mod:`jupyter_nbvalidation.verdict.flatten` (streams, flattening, output
selectors), :mod:`jupyter_nbvalidation.verdict.sanitize` (sanitizers, user patterns and
their time budget, normalisation); here the tolerances, one cell and the whole notebook.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from jupyter_nbvalidation.verdict.flatten import IMAGE_PREFIX, check_output_selector, flatten_outputs
from jupyter_nbvalidation.verdict.markers import cell_markers, cell_source, cell_tags
from jupyter_nbvalidation.verdict.sanitize import (
    DEFAULT_SANITIZERS,
    Sanitizers,
    make_sanitizers,
    sanitize,
    substitute,
    user_sanitizers,
)

EXACT = "exact"
NORMALIZED = "normalized"
STRATEGIES = (EXACT, NORMALIZED)

DEFAULT_ABS_TOL = 1e-4
DEFAULT_REL_TOL = 0.0

TEXT_LIMIT = 2000  # expected / actual in a diff entry
DIFF_LIMIT = 8000  # unified diff text in a diff entry
# what of one output value the rendered texts (and so the unified diff) show: a diff entry keeps
# only DIFF_LIMIT characters, and a 200 MB output rendered and diffed whole cost several copies of
# it (the comparison itself always reads whole values)
RENDER_CLIP = 64 * 1024

# papermill's tag of the cell it injects (and the runner's, see runner/parameters.py)
INJECTED_PARAMETERS_TAG = "injected-parameters"

# diffType values
OUTPUT_MISMATCH = "output_mismatch"
MISSING_CELL = "missing_cell"
EXTRA_CELL = "extra_cell"
EXECUTION_ERROR = "execution_error"


def cell_label(index: int) -> str:
    """A cell as people number it (JupyterLab's "Cell N"): the 0-based index + 1
    (the same rule as ``runner.text.cell_label``; this module imports nothing of the runner)."""
    return f"cell {index + 1}"


# --- tokens and tolerances ------------------------------------------------------

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
            expected, actual = substitute(expected, sanitizers), substitute(actual, sanitizers)
        return expected == actual
    if sanitizers is None:
        sanitizers = DEFAULT_SANITIZERS
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


def clip(value: str, limit: int | None) -> str:
    """``value``, or its first ``limit`` characters and a line saying what is left out, with a
    digest of the whole value: two values that differ only past the cut still differ here."""
    if limit is None or len(value) <= limit:
        return value
    import hashlib  # deferred: only for a value past the cut

    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{value[:limit]}\n[... {len(value) - limit} more characters not shown; sha256 of the whole: {digest}]"


def render_flat(flat: Mapping[str, Sequence[str]], *, strategy: str = NORMALIZED,
                sanitizers: Sanitizers | None = None, limit: int | None = None) -> str:
    """A readable text form of flattened outputs (what the unified diff is made of); each value
    cut at ``limit`` characters (``clip``)."""
    parts = []
    for key, values in flat.items():
        for value in values:
            if key.startswith(IMAGE_PREFIX):
                pass
            elif strategy == NORMALIZED:
                value = sanitize(value, DEFAULT_SANITIZERS if sanitizers is None else sanitizers)
            elif sanitizers:
                value = substitute(value, sanitizers)
            parts.append(f"[{key}]")
            parts.append(clip(value, limit))
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
    exp_text = render_flat(exp_flat, strategy=strategy, sanitizers=sanitizers, limit=RENDER_CLIP)
    act_text = render_flat(act_flat, strategy=strategy, sanitizers=sanitizers, limit=RENDER_CLIP)
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
                              strategy=strategy, sanitizers=active, limit=RENDER_CLIP)
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
                              strategy=strategy, sanitizers=active, limit=RENDER_CLIP)
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
