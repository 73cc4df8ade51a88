"""Server side: what a job spec asks of the runner, as its command-line arguments
(both backends; the runner itself never reads a spec)."""

from __future__ import annotations

from typing import Any, Mapping


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
    return args
