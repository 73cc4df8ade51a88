"""Server side: what a job spec asks of the runner, as its command-line arguments
(both backends; the runner itself never reads a spec)."""

from __future__ import annotations

import json
from typing import Any, Mapping


def spec_args(spec: Mapping[str, Any]) -> list[str]:
    """All runner arguments a job spec gives beside the paths and the timeouts
    (which each backend resolves with its own defaults): the comparison and the
    parameters. Both backends call this."""
    return comparison_args(spec) + parameter_args(spec) + output_args(spec)


def output_args(spec: Mapping[str, Any]) -> list[str]:
    """``spec.outputLimits`` as the runner's output budget (runner/outputs.py)."""
    limits = spec.get("outputLimits") or {}
    args: list[str] = []
    if limits.get("perCell"):
        args += ["--max-cell-output-bytes", str(int(limits["perCell"]))]
    if limits.get("total"):
        args += ["--max-output-bytes", str(int(limits["total"]))]
    return args


def parameter_args(spec: Mapping[str, Any]) -> list[str]:
    """``spec.parameters`` as one ``--parameters=JSON`` token (a value may start with "-")."""
    params = spec.get("parameters")
    if not params:
        return []
    return ["--parameters=" + json.dumps(params, ensure_ascii=False, separators=(",", ":"))]


def comparison_args(spec: Mapping[str, Any]) -> list[str]:
    """The runner arguments for a job spec's ``comparisonConfig`` (both backends)."""
    cc = spec.get("comparisonConfig") or {}
    args: list[str] = []
    if cc.get("strategy"):
        args += ["--comparison", cc["strategy"]]
    if cc.get("floatingPointTolerance") is not None:
        args += ["--abs-tol", str(float(cc["floatingPointTolerance"]))]
    if cc.get("relativeTolerance") is not None:
        args += ["--rel-tol", str(float(cc["relativeTolerance"]))]
    if cc.get("ignoreTimestamps") is False:
        args.append("--keep-timestamps")
    for pattern in cc.get("customTimestampPatterns") or []:
        args.append(f"--timestamp-pattern={pattern}")  # one token: a pattern may start with "-"
    for selector in cc.get("ignoreOutputTypes") or []:
        args.append(f"--ignore-output-type={selector}")
    if cc.get("ignoreExecutionCount") is False:
        args.append("--compare-execution-count")
    if cc.get("lax"):
        args.append("--lax")
    if cc.get("sanitizers"):
        args.append("--sanitizers=" + json.dumps(
            [{"regex": e["regex"], "replace": e["replace"]} for e in cc["sanitizers"]],
            ensure_ascii=False, separators=(",", ":")))
    return args


def plan_args(spec: Mapping[str, Any], *, cell_timeout: float, timeout: float) -> list[str]:
    """Every runner argument a job spec decides (both backends; locations such
    as the notebook, the golden notebook or the result file are the backend's):
    the comparison options, the cell timeout and the validation timeout, in
    seconds (the spec's values or the server's defaults, see plan.timeouts)."""
    return [*spec_args(spec), "--cell-timeout", seconds(cell_timeout), "--timeout", seconds(timeout)]


def seconds(value: float) -> str:
    """A number of seconds as a short exact argument ("600", "1.5")."""
    short = f"{value:g}"
    return short if float(short) == float(value) else repr(float(value))
