"""The runner's command line (``python -m jupyter_nbvalidation.runner``)::

    python -m jupyter_nbvalidation.runner NOTEBOOK --result RESULT.json --executed EXECUTED.ipynb
        [--python PYTHON] [--cwd DIR] [--golden GOLDEN.ipynb] [OPTIONS OF THE RUN]
        [--kernel-env NAME=VALUE]... [--kernel-env-file FILE.json] [--secrets-file FILE.json] [--sandbox FILE.json]
        [--bounds FILE.json]
        [--termination-log PATH] [--progress] [--print-executed]

The options of the run (the comparison, the tolerances, the parameters, the
timeouts, the output limits: what a job's spec asks) are :mod:`.options`'s,
parsed into one ``RunnerOptions``.

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
import jupyter_nbvalidation.runner.netns as netns
import jupyter_nbvalidation.verdict.probe as probe
from jupyter_nbvalidation.core.vocabulary import ResultReason
from jupyter_nbvalidation.runner.environment import RUN_ID_VAR
from jupyter_nbvalidation.runner.limits import read_bounds_file, read_json_argument
from jupyter_nbvalidation.runner.masking import Masker
from jupyter_nbvalidation.runner.options import RunnerOptions, add_arguments
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
    add_arguments(p)
    p.add_argument("--kernel-env", action="append", type=_env_item, default=[], metavar="NAME=VALUE",
                   help="a variable for the kernel only, over its clean environment (repeatable)")
    p.add_argument("--kernel-env-file", default=None, metavar="FILE",
                   help="variables for the kernel only: a JSON object {NAME: VALUE} or [{name, value}]")
    p.add_argument("--secrets-file", default=None, metavar="FILE",
                   help='the values of the job\'s secrets, read then removed: a JSON object {"env": {NAME: VALUE}} '
                        '(variables for the kernel only, over --kernel-env) with "mask": [more values]; every value is '
                        'masked in everything the run writes (runner/masking.py)')
    p.add_argument("--secrets-from-env", default=None, metavar="PREFIX",
                   help="the job's secrets are in this process's environment, each variable PREFIX+NAME (a "
                        "Kubernetes Pod's envFrom with that prefix): NAME=value goes to the kernel only, over "
                        "--kernel-env, each value is masked as from --secrets-file, and the variables are removed "
                        "from this process's environment once read")
    p.add_argument("--sandbox", default=None, metavar="FILE",
                   help='run the kernel in a sandbox (Linux namespaces): a JSON object {"hide": [paths the kernel '
                        'must not see], "show": [paths it must see, read-only], "write": [paths it may write, '
                        'besides --cwd], "scratch": {"/tmp": folder, "/var/tmp": folder} bound there (else a tmpfs), '
                        '"network": {"mode": "none"} or {"mode": "user", "tool": "slirp4netns", "path": ...}: a '
                        'network namespace of its own (else the host\'s network)}')
    p.add_argument("--bounds", default=None, metavar="FILE",
                   help='the kernel\'s memory limit and the run\'s disk budget: a JSON object {"memory": {"bytes": N, '
                        '"text", "field", "method": auto|cgroup|rlimit}, "disk": {"bytes": N, "text", "field", '
                        '"paths": [folders the run writes]}} (runner/limits.py)')
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
        doc = read_json_argument("--kernel-env-file", path)
    except ValueError as e:
        raise _ArgumentError(str(e)) from None
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


def _read_secrets_file(path: str) -> tuple[dict[str, str], list[str]]:
    """``{"env": {NAME: VALUE}, "mask": [VALUE]}``: the file is removed once read (it is the only
    copy of the values on disk; the kernel gets them in its environment). An error never shows a
    value."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise _ArgumentError(f"--secrets-file {path}: cannot be read ({type(e).__name__})") from None
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
    env = doc.get("env", {}) if isinstance(doc, dict) else None
    mask = doc.get("mask", []) if isinstance(doc, dict) else None
    if (not isinstance(env, dict) or not isinstance(mask, list) or set(doc) - {"env", "mask"}
            or not all(isinstance(k, str) and k and "=" not in k and isinstance(v, str) for k, v in env.items())
            or not all(isinstance(v, str) for v in mask)):
        raise _ArgumentError(f'--secrets-file {path}: must hold {{"env": {{NAME: string}}, "mask": [string]}}')
    return env, [*env.values(), *mask]


def _take_prefixed_env(prefix: str) -> dict[str, str]:
    """``{NAME: value}`` of every variable ``prefix + NAME`` of this process's environment, each
    removed from it (the kernel gets them as NAME; nothing this process starts later inherits them)."""
    if not prefix:
        raise _ArgumentError("--secrets-from-env: the prefix must not be empty")
    out = {}
    for var in [v for v in os.environ if v.startswith(prefix)]:
        value = os.environ.pop(var)
        if var[len(prefix):]:
            out[var[len(prefix):]] = value
    return out


def _read_sandbox_file(path: str) -> dict[str, Any]:
    """``{"hide": [...], "show": [...], "write": [...], "scratch": {...}}``: lists of
    absolute paths, and the folders to bind over /tmp and /var/tmp (``{path: folder}``)."""
    try:
        doc = read_json_argument("--sandbox", path)
    except ValueError as e:
        raise _ArgumentError(str(e)) from None
    if not isinstance(doc, dict) or set(doc) - {"hide", "show", "write", "scratch", "network", "idmapFault"}:
        raise _ArgumentError(f'--sandbox {path}: must hold a JSON object with only "hide", "show", "write", '
                             '"scratch", "network", "idmapFault"')
    out: dict[str, Any] = {}
    for key in ("hide", "show", "write"):
        value = doc.get(key, [])
        if not isinstance(value, list) or not all(isinstance(p, str) and os.path.isabs(p) for p in value):
            raise _ArgumentError(f"--sandbox {path}: {key} must be a list of absolute paths")
        out[key] = value
    scratch = doc.get("scratch", {})
    if not isinstance(scratch, dict) or not all(
            k in SCRATCH_PATHS and isinstance(v, str) and os.path.isabs(v) for k, v in scratch.items()):
        raise _ArgumentError(f"--sandbox {path}: scratch must map {' or '.join(SCRATCH_PATHS)} to absolute paths")
    out["scratch"] = scratch
    if "network" in doc:  # runner/netns.py: {"mode": "none"} or {"mode": "user", "tool": ..., "path": ...}
        network = doc["network"]
        if not (isinstance(network, dict) and network.get("mode") in netns.MODES and set(network) <= {
                "mode", "tool", "path"} and network.get("tool", netns.TOOLS[0]) in netns.TOOLS
                and os.path.isabs(str(network.get("path", "/")))):
            raise _ArgumentError(f'--sandbox {path}: network must be {{"mode": "none"}} or {{"mode": "user", '
                                 f'"tool": {" or ".join(netns.TOOLS)}, "path": absolute path}}')
        out["network"] = network
    if "idmapFault" in doc:  # fault injection (tests): idmapped mounts refused (runner/confine.py)
        if not (isinstance(doc["idmapFault"], str) and doc["idmapFault"].isupper() and doc["idmapFault"].isalpha()):
            raise _ArgumentError(f"--sandbox {path}: idmapFault must be an errno name (EINVAL)")
        out["idmapFault"] = doc["idmapFault"]
    return out


def _read_bounds(path: str) -> dict[str, Any]:
    try:
        return read_bounds_file(path)
    except ValueError as e:
        raise _ArgumentError(str(e)) from None


def main(argv: Sequence[str] | None = None, *, pooled: Any = None) -> int:
    """The runner's command; ``pooled``: a pre-started kernel bound to ``--cwd`` (runner/pool.py)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        kernel_env = _read_env_file(args.kernel_env_file) if args.kernel_env_file else {}
        kernel_env.update(dict(args.kernel_env))
        secret_env, secret_values = _read_secrets_file(args.secrets_file) if args.secrets_file else ({}, [])
        kernel_env.update(secret_env)
        if args.secrets_from_env:
            env_secrets = _take_prefixed_env(args.secrets_from_env)
            kernel_env.update(env_secrets)
            secret_values = [*secret_values, *env_secrets.values()]
        sandbox = _read_sandbox_file(args.sandbox) if args.sandbox else None
        bounds = _read_bounds(args.bounds) if args.bounds else None
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
            options=RunnerOptions.from_arguments(args),
            termination_log=args.termination_log,
            progress=progress if args.progress else None,
            kernel_env=kernel_env,
            run_id=run_id,
            reap_descendants=reaper,
            sandbox=sandbox,
            bounds=bounds,
            read_set=(args.read_set[0], args.read_set[1] if len(args.read_set) > 1 else None) if args.read_set else None,
            pooled=pooled,
            masker=Masker(secret_values),
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
