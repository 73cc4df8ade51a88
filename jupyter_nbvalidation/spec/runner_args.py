"""Server side: what a job spec asks of the runner, as its command-line arguments
(both backends; the runner itself never reads a spec).

Every runner option is a row of the spec table (``core/spec_table.py``, a
field's :class:`~jupyter_nbvalidation.core.spec_table.Runner`: its flag and
how its value is written); this module writes them all, in the table's
``RUNNER_ORDER``, with no code of its own for any one field
(docs/architecture.md, "One field from the request to the kernel")."""

from __future__ import annotations

import json
from typing import Any, Mapping

from jupyter_nbvalidation.core.spec_table import Runner, runner_options


def spec_args(spec: Mapping[str, Any]) -> list[str]:
    """The runner arguments a job spec gives beside the paths and the durations
    (which the plan resolves with the server's defaults): the comparison, the
    parameters and the output limits."""
    return [arg for path, option in runner_options() if option.form != "seconds"
            for arg in _written(option, _value(spec, path))]


def runner_args(spec: Mapping[str, Any], durations: Mapping[str, float]) -> list[str]:
    """Every runner argument a job spec decides (both backends; locations such
    as the notebook, the golden notebook or the result file are the backend's):
    each runner option of the table, a duration (``seconds``) as ``durations``
    gives it by spec path (the spec's value or the server's default, see
    plan.timeouts)."""
    args: list[str] = []
    for path, option in runner_options():
        if option.form == "seconds":
            args += [option.flag, seconds(durations[path])]
        else:
            args += _written(option, _value(spec, path))
    return args


def _value(spec: Mapping[str, Any], path: str) -> Any:
    *parents, key = path.split(".")
    for name in parents:
        spec = spec.get(name) or {}
    return spec.get(key)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _written(option: Runner, value: Any) -> list[str]:  # noqa: C901 - one branch per form
    """``value`` as the runner's arguments, in the option's form (spec_table.RUNNER_FORMS)."""
    flag, form = option.flag, option.form
    if form == "value":
        return [flag, str(value)] if value else []
    if form == "float":
        return [flag, str(float(value))] if value is not None else []
    if form == "int":
        return [flag, str(int(value))] if value else []
    if form == "true":
        return [flag] if value else []
    if form == "false":
        return [flag] if value is False else []
    if form == "each":
        return [f"{flag}={item}" for item in value or []]  # one token: an item may start with "-"
    if form == "json":
        if not value:
            return []
        if option.keys:
            value = [{k: item[k] for k in option.keys} for item in value]
        return [f"{flag}={_json(value)}"]
    raise ValueError(f"{flag}: a {form} option is written by runner_args")


def seconds(value: float) -> str:
    """A number of seconds as a short exact argument ("600", "1.5")."""
    short = f"{value:g}"
    return short if float(short) == float(value) else repr(float(value))
