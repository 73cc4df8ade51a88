"""The options that become spec fields, one table for every way in (spec_table.py, ``cli=``):
``submit`` and ``run``, ``%nbvalidate`` (magic.py) and ``--nbvalidation-option`` (pytest_plugin.py)
add them with :func:`add_spec_options` and read them with :func:`spec_from_options`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from jupyter_nbvalidation.cli.last_success import add_constraints, last_success_constraints
from jupyter_nbvalidation.clients.base import Client, ClientError
from jupyter_nbvalidation.core.spec_table import cli_options
from jupyter_nbvalidation.verdict.sanitize import SanitizerFileError, parse_sanitizer_file


def parameter_value(text: str) -> Any:
    """A ``-p NAME VALUE`` value: JSON when it parses (``1``, ``0.5``, ``true``,
    ``[1, 2]``, ``{"a": 1}``), papermill's ``True`` / ``False`` / ``None``, else
    the text itself as a string."""
    if text in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[text]
    try:
        return json.loads(text)
    except ValueError:
        return text


def read_sanitizer_file(path: str) -> list[dict[str, Any]]:
    """An nbval sanitizer file as ``comparisonConfig.sanitizers`` entries; a
    ClientError (exit 2) naming the file and the line when it cannot be read."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ClientError(f"--sanitize-with {path}: cannot be read: {e}") from None
    try:
        return parse_sanitizer_file(text)
    except SanitizerFileError as e:
        raise ClientError(f"--sanitize-with {path}:{e.line}: {e.reason}") from None


def add_spec_options(s: argparse.ArgumentParser) -> None:
    """The options that become spec fields (:func:`spec_from_options`), shared by ``submit``,
    ``run``, ``%nbvalidate`` and ``--nbvalidation-option``: the table's (spec_table.py, ``cli=``)."""
    for _path, field, opt in cli_options():
        kwargs: dict[str, Any] = {"help": opt.help}
        if opt.dest:
            kwargs["dest"] = opt.dest
        if opt.metavar:
            kwargs["metavar"] = opt.metavar
        if opt.action in ("set_true", "set_false"):
            kwargs["action"] = "store_true"
        elif opt.action in ("append", "sanitizer_file"):
            kwargs["action"] = "append"
        elif opt.action in ("parameter", "raw_parameter"):
            kwargs.update(nargs=2, action="append")
        elif opt.action == "float":
            kwargs["type"] = float
        elif opt.action == "choice":
            kwargs["choices"] = list(field.limit)
        s.add_argument(*opt.flags, **kwargs)


def _option_value(action: str, given: Any) -> Any:
    """What an option given on the command line puts into its spec field (spec_table.CLI_ACTIONS)."""
    if action == "set_true":
        return True
    if action == "set_false":
        return False
    if action == "duration":
        return duration_arg(given)
    if action == "parameter":
        return {name: parameter_value(value) for name, value in given}
    if action == "raw_parameter":
        return dict(given)
    if action == "sanitizer_file":
        return [entry for path in given for entry in read_sanitizer_file(path)]
    return given  # value, float, choice, append


def spec_from_options(args: argparse.Namespace) -> dict[str, Any]:
    """The spec fields the shared spec options (:func:`add_spec_options`) give, without
    the notebook and golden paths: one translation for ``submit``, ``run``, the magic
    and the pytest plugin, so an option added there applies to all of them. Raises
    ClientError (exit 2) for a sanitizer file that cannot be read."""
    spec: dict[str, Any] = {}
    for path, _field, opt in cli_options():
        given = getattr(args, opt.attr, None)
        if given is None or given is False or given == [] or given == "":
            continue
        value = _option_value(opt.action, given)
        *parents, leaf = path.split(".")
        cur = spec
        for part in parents:
            cur = cur.setdefault(part, {})
        if isinstance(cur.get(leaf), dict) and isinstance(value, dict):
            cur[leaf] = {**cur[leaf], **value}  # -p and -r both give parameters
        elif isinstance(cur.get(leaf), list) and isinstance(value, list):
            cur[leaf] = [*cur[leaf], *value]
        else:
            cur[leaf] = value
    return spec


def duration_arg(value: str) -> str:
    """A duration option: ``10m`` as it is, a plain number of seconds as ``60s``."""
    try:
        number = float(value)
    except ValueError:
        return value
    return f"{number:g}s" if number == number and number not in (float("inf"), float("-inf")) else value


def build_spec(args: argparse.Namespace, api: Client) -> dict[str, Any]:
    """``submit``'s spec: the notebook and its golden notebook (as the client's paths), the
    spec options, and the last success's pins when asked (``--constraints-from-last-success``)."""
    git = {"url": args.git, "ref": args.ref or "main"} if getattr(args, "git", None) else None
    if git is not None:  # paths in the repository, from its root (the server fetches it: docs/watching.md)
        spec: dict[str, Any] = {"notebook": {"git": git, "path": args.notebook}}
        if args.golden:
            spec["goldenNotebook"] = {"git": git, "path": args.golden}
    else:
        spec = {"notebook": {"path": api.api_path(args.notebook)}}
        if args.golden:
            spec["goldenNotebook"] = {"path": api.api_path(args.golden)}
    spec.update(spec_from_options(args))
    if getattr(args, "constraints_from_last_success", False):
        pins, said = last_success_constraints(api, spec["notebook"]["path"])
        add_constraints(spec, pins)
        if args.output != "json":
            print(f"{args.notebook}: {said}", flush=True)
    return spec
