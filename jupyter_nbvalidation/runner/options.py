"""What a job asks of one run, parsed once: :class:`RunnerOptions`.

These are the runner's options a job's spec gives: the server writes them from
the spec table's runner rows (``core/spec_table.py``, ``Runner``: one flag each;
``spec/runner_args.py``), and this module declares the same flags
(tests/core/test_runner_options.py holds the two together). The command line
(:mod:`.cli`) parses them into one :class:`RunnerOptions` with
:func:`add_arguments` and :meth:`RunnerOptions.from_arguments`;
:func:`.verdict.run_notebook` takes that object (or its fields by name), and
the code that needs an option reads it there (the pass over the cells: the
per-cell limit). Nothing else threads an option by name
(docs/architecture.md, "One field from the request to the kernel").
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, fields, replace
from typing import Any, Mapping, Sequence

import jupyter_nbvalidation.verdict.compare as _compare
import jupyter_nbvalidation.verdict.sanitize as _sanitize

DEFAULT_CELL_TIMEOUT = 600.0


@dataclass(frozen=True)
class RunnerOptions:
    """The options of one run, one field per option (its argparse name).

    ``cell_timeout`` / ``timeout`` of ``None`` or ``<= 0`` mean no limit
    (:meth:`for_notebook` makes them None); ``parameters`` (``{name: JSON value}``)
    are injected as papermill does; ``max_cell_output_bytes`` / ``max_output_bytes``
    bound the outputs kept in the executed notebook (None: runner/outputs.py's
    defaults)."""

    comparison: str = _compare.NORMALIZED
    abs_tol: float = _compare.DEFAULT_ABS_TOL
    rel_tol: float = _compare.DEFAULT_REL_TOL
    keep_timestamps: bool = False
    timestamp_pattern: Sequence[str] = ()
    ignore_output_type: Sequence[str] = ()
    compare_execution_count: bool = False
    lax: bool = False
    sanitizers: Sequence[Mapping[str, str]] = ()
    parameters: Mapping[str, Any] | None = None
    cell_timeout: float | None = DEFAULT_CELL_TIMEOUT
    timeout: float | None = None
    max_cell_output_bytes: int | None = None
    max_output_bytes: int | None = None

    @classmethod
    def from_arguments(cls, args: argparse.Namespace) -> RunnerOptions:
        """The options :func:`add_arguments` parsed (a repeated option's list as a tuple)."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            value = getattr(args, f.name)
            values[f.name] = tuple(value) if isinstance(value, list) else value
        return cls(**values)

    @property
    def compare_options(self) -> dict[str, Any]:
        """The keyword arguments of ``compare.compare_notebooks`` beside the strategy and the tolerances."""
        return {"ignore_timestamps": not self.keep_timestamps, "timestamp_patterns": list(self.timestamp_pattern),
                "ignore_output_types": list(self.ignore_output_type),
                "compare_execution_count": self.compare_execution_count, "lax": self.lax,
                "sanitizers": list(self.sanitizers)}

    def problems(self) -> list[str]:
        """What makes these options unusable (the run then ends RunnerError)."""
        found = []
        if self.comparison not in _compare.STRATEGIES:
            found.append(f"comparison must be one of {', '.join(_compare.STRATEGIES)}")
        if self.abs_tol is None or self.abs_tol < 0 or self.rel_tol is None or self.rel_tol < 0:
            found.append("tolerances must be non-negative numbers")
        return found

    def for_notebook(self, settings: Mapping[str, Any]) -> RunnerOptions:
        """The options for a notebook whose ``metadata.execution`` gives ``settings``
        (``markers.notebook_execution_settings``): its ``timeout`` overrides the
        per-cell limit; a limit of None or <= 0 becomes None (none)."""
        cell = settings["timeout"] if settings.get("timeout") is not None else self.cell_timeout
        return replace(self, cell_timeout=_limit(cell), timeout=_limit(self.timeout))


def _limit(value: float | None) -> float | None:
    return float(value) if value and value > 0 else None


def _non_negative(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if number != number or number in (float("inf"), float("-inf")) or number < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, not {value!r}")
    return number


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value!r}")
    return number


def _json_arg(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not JSON: {e}") from None


def _parameters(value: str) -> dict[str, Any]:
    doc = _json_arg(value)
    if not isinstance(doc, dict) or not all(isinstance(k, str) and k.isidentifier() for k in doc):
        raise argparse.ArgumentTypeError("must be a JSON object whose keys are Python identifiers")
    return doc


def _sanitizers(value: str) -> list[dict[str, str]]:
    doc = _json_arg(value)
    if not isinstance(doc, list) or not all(
            isinstance(d, dict) and isinstance(d.get("regex"), str) and isinstance(d.get("replace"), str)
            for d in doc):
        raise argparse.ArgumentTypeError('must be a JSON list of {"regex": ..., "replace": ...}')
    for d in doc:
        try:
            _sanitize.check_sanitizer(d["regex"], d["replace"])
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return doc


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The runner's flags of :class:`RunnerOptions`, one per field."""
    p.add_argument("--comparison", choices=_compare.STRATEGIES, default=_compare.NORMALIZED)
    p.add_argument("--abs-tol", type=_non_negative, default=_compare.DEFAULT_ABS_TOL)
    p.add_argument("--rel-tol", type=_non_negative, default=_compare.DEFAULT_REL_TOL)
    p.add_argument("--keep-timestamps", action="store_true",
                   help="normalized mode: compare dates and times too (comparisonConfig.ignoreTimestamps: false)")
    p.add_argument("--timestamp-pattern", action="append", default=[], metavar="REGEX",
                   help="normalized mode: also replace what REGEX matches (repeatable)")
    p.add_argument("--ignore-output-type", action="append", default=[], metavar="SELECTOR",
                   help="leave out outputs of this type, stream (stream:stderr) or MIME type (repeatable)")
    p.add_argument("--compare-execution-count", action="store_true",
                   help="compare execution counts too (comparisonConfig.ignoreExecutionCount: false)")
    p.add_argument("--lax", action="store_true",
                   help="compare only cells marked # NBVAL_CHECK_OUTPUT / nbval-check-output (comparisonConfig.lax)")
    p.add_argument("--sanitizers", type=_sanitizers, default=[], metavar="JSON",
                   help='nbval sanitizers applied before comparing: [{"regex": ..., "replace": ...}] '
                        "(comparisonConfig.sanitizers)")
    p.add_argument("--parameters", type=_parameters, default=None, metavar="JSON",
                   help="a JSON object {name: value} injected as papermill does, after the cell tagged "
                        "parameters (spec.parameters)")
    p.add_argument("--cell-timeout", type=_non_negative, default=DEFAULT_CELL_TIMEOUT,
                   help="per-cell timeout in seconds (0: none); metadata.execution.timeout overrides it")
    p.add_argument("--timeout", type=_non_negative, default=None, help="deadline for the whole run, in seconds")
    p.add_argument("--max-cell-output-bytes", type=_positive_int, default=None, metavar="BYTES",
                   help="outputs kept per cell in the executed notebook (spec outputLimits.perCell; default 2 MiB)")
    p.add_argument("--max-output-bytes", type=_positive_int, default=None, metavar="BYTES",
                   help="outputs kept in the whole executed notebook (spec outputLimits.total; default 32 MiB)")
