"""The runner's command line (``python -m jupyter_nbvalidation.runner``)::

    python -m jupyter_nbvalidation.runner NOTEBOOK --result RESULT.json --executed EXECUTED.ipynb
        [--python PYTHON] [--cwd DIR] [--golden GOLDEN.ipynb]
        [--comparison exact|normalized] [--abs-tol FLOAT] [--rel-tol FLOAT]
        [--keep-timestamps] [--timestamp-pattern REGEX]... [--ignore-output-type SELECTOR]...
        [--compare-execution-count] [--lax] [--sanitizers JSON] [--parameters JSON]
        [--cell-timeout SECONDS] [--timeout SECONDS] [--max-cell-output-bytes N] [--max-output-bytes N]
        [--kernel-env NAME=VALUE]... [--kernel-env-file FILE.json] [--sandbox FILE.json]
        [--termination-log PATH] [--progress] [--print-executed]

The last line on stdout is always ``NBVALIDATION-RESULT <result JSON>`` (see
:mod:`.protocol`). Exit status: 0 verdict Succeeded, 1 verdict Failed, 2 the
runner could not run (bad arguments, unreadable notebook, internal error).

Needs only the standard library, ``nbformat``, ``nbclient`` (and its
``jupyter_client``); the kernel's interpreter needs ``ipykernel``, nothing of the
runner.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from typing import Any, Sequence

import jupyter_nbvalidation.runner.hygiene as hygiene
import jupyter_nbvalidation.verdict.compare as _compare
import jupyter_nbvalidation.verdict.probe as probe
import jupyter_nbvalidation.verdict.sanitize as _sanitize
from jupyter_nbvalidation.core.vocabulary import ResultReason
from jupyter_nbvalidation.runner.environment import RUN_ID_VAR
from jupyter_nbvalidation.runner.execute import DEFAULT_CELL_TIMEOUT
from jupyter_nbvalidation.runner.protocol import (
    RESULT_PREFIX,
    environment_line,
    executed_line,
    exit_code,
    progress_line,
    result_line,
    write_termination_log,
)
from jupyter_nbvalidation.runner.sandbox import SCRATCH_PATHS
from jupyter_nbvalidation.runner.verdict import _atomic_write_text, error_result, run_notebook


class _ArgumentError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # raise instead of exiting, so RESULT.json still gets written
        raise _ArgumentError(message)


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


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m jupyter_nbvalidation.runner",
        description="Execute a notebook top to bottom in a fresh kernel and judge the run.",
    )
    p.add_argument("notebook", help="the notebook to validate (never modified)")
    p.add_argument("--result", required=True, help="where to write the result JSON")
    p.add_argument("--executed", required=True, help="where to write the executed notebook")
    p.add_argument("--python", default=None, help="interpreter for the kernel (default: this one)")
    p.add_argument("--cwd", default=None, help="kernel working directory (default: the notebook's folder)")
    p.add_argument("--golden", default=None, help="golden notebook to compare outputs with (may be NOTEBOOK itself)")
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
    p.add_argument("--kernel-env", action="append", type=_env_item, default=[], metavar="NAME=VALUE",
                   help="a variable for the kernel only, over its clean environment (repeatable)")
    p.add_argument("--kernel-env-file", default=None, metavar="FILE",
                   help="variables for the kernel only: a JSON object {NAME: VALUE} or [{name, value}]")
    p.add_argument("--sandbox", default=None, metavar="FILE",
                   help='run the kernel in a sandbox (Linux namespaces): a JSON object {"hide": [paths the kernel '
                        'must not see], "show": [paths it must see], "links": [folders whose links it follows], '
                        '"scratch": {"/tmp": folder, "/var/tmp": folder} bound there (else a tmpfs)}')
    p.add_argument("--read-set", nargs="+", default=None, metavar="PATH",
                   help="ROOT [COPY]: record what the kernel reads (an audit hook in its process) and put a Succeeded "
                        "result's read-set under ROOT in readSet, for the verdict cache; COPY: the kernel's working "
                        "copy of ROOT (its paths are ROOT's)")
    p.add_argument("--termination-log", default=None, help="also write a summary of at most 4096 bytes here")
    p.add_argument("--progress", action="store_true", help="print one NBVALIDATION-PROGRESS line per executed cell")
    p.add_argument("--print-environment", action="store_true",
                   help="first print what is installed in the kernel's interpreter (its probe document, gzip + "
                        "base64) on one NBVALIDATION-ENVIRONMENT line: a Kubernetes job's environment record")
    p.add_argument("--print-executed", action="store_true",
                   help="also print the executed notebook (gzip + base64) on one NBVALIDATION-EXECUTED line "
                        "before the result line, for where only the logs come back (a Kubernetes Pod)")
    return p


def _sniff_option(argv: Sequence[str], name: str) -> str | None:
    """Best effort: the value of ``--name`` in argv that failed to parse."""
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def _emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _env_item(value: str) -> tuple[str, str]:
    name, sep, val = value.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"must be NAME=VALUE, not {value!r}")
    return name, val


def _read_env_file(path: str) -> dict[str, str]:
    """A JSON object ``{NAME: VALUE}`` or a list ``[{"name": ..., "value": ...}]``."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise _ArgumentError(f"--kernel-env-file {path}: {e}") from None
    items = doc.items() if isinstance(doc, dict) else (
        [(d.get("name"), d.get("value", "")) for d in doc if isinstance(d, dict)] if isinstance(doc, list) else None)
    if items is None:
        raise _ArgumentError(f"--kernel-env-file {path}: must hold a JSON object or a list of {{name, value}}")
    out = {}
    for name, value in items:
        if not isinstance(name, str) or not name or "=" in name or not isinstance(value, str):
            raise _ArgumentError(f"--kernel-env-file {path}: {name!r} is not a NAME with a string value")
        out[name] = value
    return out


def _read_sandbox_file(path: str) -> dict[str, Any]:
    """``{"hide": [...], "show": [...], "links": [...], "scratch": {...}}``: lists of
    absolute paths, and the folders to bind over /tmp and /var/tmp (``{path: folder}``)."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise _ArgumentError(f"--sandbox {path}: {e}") from None
    if not isinstance(doc, dict) or set(doc) - {"hide", "show", "links", "scratch"}:
        raise _ArgumentError(f'--sandbox {path}: must hold a JSON object with only "hide", "show", "links", '
                             '"scratch"')
    out: dict[str, Any] = {}
    for key in ("hide", "show", "links"):
        value = doc.get(key, [])
        if not isinstance(value, list) or not all(isinstance(p, str) and os.path.isabs(p) for p in value):
            raise _ArgumentError(f"--sandbox {path}: {key} must be a list of absolute paths")
        out[key] = value
    scratch = doc.get("scratch", {})
    if not isinstance(scratch, dict) or not all(
            k in SCRATCH_PATHS and isinstance(v, str) and os.path.isabs(v) for k, v in scratch.items()):
        raise _ArgumentError(f"--sandbox {path}: scratch must map {' or '.join(SCRATCH_PATHS)} to absolute paths")
    out["scratch"] = scratch
    return out


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        kernel_env = _read_env_file(args.kernel_env_file) if args.kernel_env_file else {}
        kernel_env.update(dict(args.kernel_env))
        sandbox = _read_sandbox_file(args.sandbox) if args.sandbox else None
    except _ArgumentError as e:
        parser.print_usage(sys.stderr)
        sys.stderr.write(f"{parser.prog}: error: {e}\n")
        result = error_result(ResultReason.RUNNER_ERROR, f"Invalid arguments: {e}")
        result_path = _sniff_option(argv, "--result")
        if result_path:
            try:
                _atomic_write_text(result_path, json.dumps(result, indent=1) + "\n")
            except OSError:
                pass
        termination = _sniff_option(argv, "--termination-log")
        if termination:
            write_termination_log(termination, result)
        _emit(RESULT_PREFIX + result_line(result))
        return 2

    def progress(event: dict[str, Any]) -> None:
        _emit(progress_line(event))

    if args.print_environment:  # before any cell runs: what the kernel will import from
        _emit(environment_line(probe.take(args.python or sys.executable)))
    # this process is the runner: orphans of whatever the kernel starts come back to it
    reaper = hygiene.set_child_subreaper()
    run_id = os.environ.get(RUN_ID_VAR) or uuid.uuid4().hex

    try:
        result = run_notebook(
            args.notebook,
            executed=args.executed,
            result_path=args.result,
            python=args.python,
            cwd=args.cwd,
            golden=args.golden,
            comparison=args.comparison,
            abs_tol=args.abs_tol,
            rel_tol=args.rel_tol,
            compare_options={"ignore_timestamps": not args.keep_timestamps,
                             "timestamp_patterns": args.timestamp_pattern,
                             "ignore_output_types": args.ignore_output_type,
                             "compare_execution_count": args.compare_execution_count,
                             "lax": args.lax,
                             "sanitizers": args.sanitizers},
            parameters=args.parameters,
            max_cell_output_bytes=args.max_cell_output_bytes,
            max_output_bytes=args.max_output_bytes,
            cell_timeout=args.cell_timeout,
            timeout=args.timeout,
            termination_log=args.termination_log,
            progress=progress if args.progress else None,
            kernel_env=kernel_env,
            run_id=run_id,
            reap_descendants=reaper,
            sandbox=sandbox,
            read_set=(args.read_set[0], args.read_set[1] if len(args.read_set) > 1 else None) if args.read_set else None,
        )
    except OSError as e:  # the result or the termination log cannot be written
        sys.stderr.write(f"nbvalidation: {e}\n")
        result = error_result(ResultReason.RUNNER_ERROR, f"Cannot write the result: {e}")
        _emit(RESULT_PREFIX + result_line(result))
        return 2
    if args.print_executed:
        _emit_executed(args.executed)
    _emit(RESULT_PREFIX + result_line(result))
    return exit_code(result)


def _emit_executed(path: str) -> None:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return  # nothing was executed (e.g. the kernel never started)
    _emit(executed_line(data))
