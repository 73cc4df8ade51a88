"""The spec checks: a job's spec against the table of fields (spec_table.py).

:func:`validate_spec` takes a spec as a client sent it and returns it checked, or raises
:class:`SpecError` naming the first bad field: an unknown field (with the reason when the
upstream Go operator's CRD has it and this project does not take it), a field the backend
does not support, a value out of its kind or limits. Nothing in here does I/O.
"""

from __future__ import annotations

import decimal
import json
import keyword
import math
import re
import urllib.parse
from typing import Any, cast

from jupyter_nbvalidation.core.documents import JobSpec
from jupyter_nbvalidation.core.model import format_duration, parse_duration
from jupyter_nbvalidation.core.spec_table import (
    ENV_NAME_PATTERN,
    INT64,
    LABEL_KEY_PATTERN,
    LABEL_VALUE_PATTERN,
    MAX_DURATION_CHARS,
    MAX_ENV_ITEMS,
    MAX_ENV_NAME_CHARS,
    MAX_ENV_TOTAL_BYTES,
    MAX_ENV_VALUE_CHARS,
    MAX_LABEL_VALUE_CHARS,
    MAX_MAP_ITEMS,
    MAX_PARAMETER_DEPTH,
    MAX_PARAMETER_NAME_CHARS,
    MAX_PARAMETERS,
    MAX_PARAMETERS_BYTES,
    MAX_PATTERN_CHARS,
    MAX_PATTERNS,
    MAX_QUANTITY,
    MAX_QUANTITY_CHARS,
    MAX_SANITIZER_SECTION_CHARS,
    MAX_SANITIZERS,
    MAX_STRING_CHARS,
    MAX_TOLERATION_CHARS,
    PARAMETER_NAME_PATTERN,
    QUANTITY_PATTERN,
    SECRET_NAME_PATTERN,
    TAINT_EFFECTS,
    TOLERATION_OPERATORS,
    validator_schema,
)
from jupyter_nbvalidation.verdict.flatten import check_output_selector
from jupyter_nbvalidation.verdict.inherited import hijacks
from jupyter_nbvalidation.verdict.sanitize import check_backtracking, check_sanitizer


class SpecError(ValueError):
    """An unknown, unsupported or malformed spec field. ``field`` is its dotted path."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.reason = message


# --- the spec schema --------------------------------------------------------
# Declared once in spec_table.py (kinds, limits, descriptions, CLI options); SPEC_SCHEMA is
# its validator's view: field -> nested dict | (kind, extra). kind is "object" (nested dict),
# "str", "bool", "duration", "number", "strlist", "globlist" (file patterns relative to the
# notebook's folder), "regexlist" (regular expressions), "bytes" (a whole number of bytes, 1 to
# extra), "outputlist" (output selectors, see flatten.check_output_selector), "envlist"
# (``[{name, value}]``), "quantities" (``{resource: quantity}``, Kubernetes quantities),
# "labels" (``{label key: value}``), "tolerations" (Kubernetes tolerations), "sanitizers",
# "parameters", or "enum" (extra = allowed values).
# Which fields a backend supports is declared by the backend (``supports``).

_PARAMETER_NAME = re.compile(PARAMETER_NAME_PATTERN)

SPEC_SCHEMA: dict[str, Any] = validator_schema()

REQUIRED = ("notebook.path",)

# Fields of the upstream Go operator's CRD that this project deliberately does not
# take, with the reason given when a spec carries one (any other unknown field is
# just "unknown field").
NOT_TAKEN_FROM_UPSTREAM: dict[str, str] = {
    "podConfig.envFrom": "not supported: a notebook must not read Secrets or ConfigMaps through its job; "
                         "use podConfig.env with literal values",
    "podConfig.volumes": "not supported: the notebook's inputs are the snapshot taken at submit",
    "podConfig.volumeMounts": "not supported: the notebook's inputs are the snapshot taken at submit",
    "podConfig.affinity": "not supported: use podConfig.nodeSelector and podConfig.tolerations",
    "podConfig.buildConfig.dockerfile": "not supported: the Dockerfile is generated from baseImage and the "
                                        "requirements",
    "podConfig.buildConfig.autoGenerateRequirements": "not supported: requirements come from requirements or "
                                                      "requirementsFile, else from the repository's environment "
                                                      "files (requirements.txt, environment.yml, pylock.toml, "
                                                      "uv.lock, Pipfile, pyproject.toml, binder/), from the "
                                                      "notebook's folder up",
    "podConfig.buildConfig.requirementsSources": "not supported: use requirementsFile or requirements",
    "podConfig.buildConfig.preferDockerfile": "not supported: the Dockerfile is always generated",
    "podConfig.buildConfig.fallbackStrategy": "not supported: a failed build fails the job (BuildFailed)",
    "podConfig.buildConfig.strategyConfig": "not supported: builders are configured on the server "
                                            "(c.KubernetesBackend traits)",
    "modelValidation": "not supported: model-serving checks are not part of notebook validation here",
    "validationConfig": "not supported",
}


def _check(value: Any, schema: Any, path: str, supported: set[str] | None) -> Any:
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            raise SpecError(path, "must be an object")
        out = {}
        for key, sub in value.items():
            sub_path = f"{path}.{key}" if path else key
            if key not in schema:
                raise SpecError(sub_path, NOT_TAKEN_FROM_UPSTREAM.get(sub_path, "unknown field"))
            if supported is not None and not isinstance(schema[key], dict) and sub_path not in supported:
                raise SpecError(sub_path, "not supported by this backend")
            if sub is None:
                continue
            out[key] = _check(sub, schema[key], sub_path, supported)
        return out
    kind, extra = schema
    if kind == "str":
        if not isinstance(value, str) or not value.strip():
            raise SpecError(path, "must be a non-empty string")
        if len(value) > MAX_STRING_CHARS:
            raise SpecError(path, f"is {len(value)} characters; the limit is {MAX_STRING_CHARS}")
        if "\x00" in value:
            raise SpecError(path, "contains a NUL character")
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise SpecError(path, "must be true or false")
        return value
    if kind == "duration":
        if isinstance(value, str) and len(value) > MAX_DURATION_CHARS:
            raise SpecError(path, f"must be a duration such as '30m' (at most {MAX_DURATION_CHARS} characters)")
        try:
            seconds = parse_duration(value)
        except (ValueError, OverflowError) as e:
            raise SpecError(path, str(e)) from None
        if not math.isfinite(seconds) or seconds > extra:
            raise SpecError(path, f"must be at most {format_duration(extra)} ({extra:g} seconds)")
        return value
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SpecError(path, "must be a non-negative number")
        try:
            num = float(value)
        except OverflowError:
            num = math.inf
        if not math.isfinite(num):
            raise SpecError(path, "must be a finite number")
        if num < 0:
            raise SpecError(path, "must be a non-negative number")
        if num > extra:
            raise SpecError(path, f"must be at most {extra:g}")
        return value
    if kind == "bytes":
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(path, "must be a whole number of bytes")
        if value < 1 or value > extra:
            raise SpecError(path, f"must be between 1 and {extra} bytes")
        return value
    if kind in ("strlist", "globlist"):
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            raise SpecError(path, "must be a list of non-empty strings")
        max_items, max_chars = extra or (MAX_PATTERNS, MAX_STRING_CHARS)
        if len(value) > max_items:
            raise SpecError(path, f"has {len(value)} items; the limit is {max_items}")
        for i, item in enumerate(value):
            if len(item) > max_chars:
                raise SpecError(f"{path}[{i}]", f"is {len(item)} characters; the limit is {max_chars}")
            if "\x00" in item:
                raise SpecError(f"{path}[{i}]", "contains a NUL character")
            if kind == "globlist":
                _check_glob(item, f"{path}[{i}]")
        return list(value)
    if kind in ("regexlist", "outputlist"):
        value = _check(value, ("strlist", extra), path, supported)
        for i, item in enumerate(value):
            try:
                if kind == "regexlist":
                    re.compile(item)
                    check_backtracking(item)
                else:
                    check_output_selector(item)
            except re.error as e:
                raise SpecError(f"{path}[{i}]", f"not a valid regular expression: {e}") from None
            except ValueError as e:
                raise SpecError(f"{path}[{i}]", str(e)) from None
        return value
    if kind == "envlist":
        return _check_env(value, path)
    if kind == "parameters":
        return check_parameters(value, path)
    if kind == "sanitizers":
        return check_sanitizers(value, path)
    if kind == "quantities":
        return _check_quantities(value, path)
    if kind == "labels":
        return _check_labels(value, path)
    if kind == "tolerations":
        return _check_tolerations(value, path)
    if kind == "enum":
        if value not in extra:
            raise SpecError(path, f"must be one of {', '.join(extra)}")
        return value
    raise AssertionError(kind)


# Environment variables the runner sets itself (the kernel's interpreter, its
# home and runtime folders): a job may not replace them.
RESERVED_ENV = frozenset({"PATH", "VIRTUAL_ENV", "PYTHONHOME", "HOME", "PYTHONUNBUFFERED",
                          "JUPYTER_RUNTIME_DIR", "IPYTHONDIR", "NBVALIDATION_RUN_ID"})
_ENV_NAME = re.compile(ENV_NAME_PATTERN)


def _check_parameter_value(value: Any, path: str, depth: int) -> None:
    if depth > MAX_PARAMETER_DEPTH:
        raise SpecError(path, f"nests lists and objects deeper than {MAX_PARAMETER_DEPTH} levels")
    if value is None or isinstance(value, (bool, int)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SpecError(path, "must be a finite number")
        return
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise SpecError(path, "is not valid Unicode (a lone surrogate)") from None
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            _check_parameter_value(item, f"{path}[{i}]", depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise SpecError(path, "object keys must be strings")
            _check_parameter_value(key, f"{path}.{key}", depth + 1)
            _check_parameter_value(item, f"{path}.{key}", depth + 1)
        return
    raise SpecError(path, "must be a JSON value (string, number, true/false, null, list or object)")


def check_parameters(value: Any, path: str = "parameters") -> dict[str, Any]:
    """``spec.parameters``: ``{NAME: JSON value}``, NAME an ASCII Python identifier
    that is not a keyword (the names become assignments in the injected cell)."""
    if not isinstance(value, dict):
        raise SpecError(path, "must be an object of NAME: value")
    if len(value) > MAX_PARAMETERS:
        raise SpecError(path, f"has {len(value)} entries; the limit is {MAX_PARAMETERS}")
    for name, item in value.items():
        where = f"{path}.{name}"
        if not isinstance(name, str) or not _PARAMETER_NAME.match(name):
            raise SpecError(where, "must be a Python identifier (letters, digits and '_', not starting with a digit)")
        if keyword.iskeyword(name):
            raise SpecError(where, f"{name} is a Python keyword")
        if len(name) > MAX_PARAMETER_NAME_CHARS:
            raise SpecError(where, f"is {len(name)} characters; the limit is {MAX_PARAMETER_NAME_CHARS}")
        _check_parameter_value(item, where, 1)
    try:
        size = len(json.dumps(value, ensure_ascii=False).encode("utf-8"))
    except (ValueError, TypeError) as e:  # e.g. an integer too long to print
        raise SpecError(path, f"cannot be written as JSON: {e}") from None
    if size > MAX_PARAMETERS_BYTES:
        raise SpecError(path, f"is {size} bytes as JSON; the limit is {MAX_PARAMETERS_BYTES}")
    return dict(value)


def check_sanitizers(value: Any, path: str = "comparisonConfig.sanitizers") -> list[dict[str, Any]]:
    """``comparisonConfig.sanitizers``: nbval's sanitizer entries ``[{regex, replace, section?}]``."""
    if not isinstance(value, list):
        raise SpecError(path, "must be a list of {regex, replace} objects")
    if len(value) > MAX_SANITIZERS:
        raise SpecError(path, f"has {len(value)} items; the limit is {MAX_SANITIZERS}")
    out = []
    for i, item in enumerate(value):
        where = f"{path}[{i}]"
        if not isinstance(item, dict):
            raise SpecError(where, "must be an object with regex and replace")
        for key in item:
            if key not in ("regex", "replace", "section"):
                raise SpecError(f"{where}.{key}", "unknown field")
        for key in ("regex", "replace"):
            if key not in item:
                raise SpecError(f"{where}.{key}", "is required")
        for key, limit in (("regex", MAX_PATTERN_CHARS), ("replace", MAX_PATTERN_CHARS), ("section", MAX_SANITIZER_SECTION_CHARS)):
            if key not in item:
                continue
            val = item[key]
            if not isinstance(val, str) or (key == "regex" and not val):
                raise SpecError(f"{where}.{key}", "must be a non-empty string" if key == "regex" else "must be a string")
            if len(val) > limit:
                raise SpecError(f"{where}.{key}", f"is {len(val)} characters; the limit is {limit}")
            if "\x00" in val:
                raise SpecError(f"{where}.{key}", "contains a NUL character")
        try:
            check_sanitizer(item["regex"], item["replace"])
        except ValueError as e:
            raise SpecError(where, str(e)) from None
        out.append(dict(item))
    return out


def _check_glob(pattern: str, path: str) -> None:
    """An inputFiles pattern: relative, inside the notebook's folder."""
    p = pattern.strip()
    if p.startswith(("/", "~")) or re.match(r"^[A-Za-z]:[\\/]", p):
        raise SpecError(path, "must be relative to the notebook's folder")
    if ".." in re.split(r"[\\/]", p):
        raise SpecError(path, "must stay inside the notebook's folder (no '..')")


def _check_env(value: Any, path: str) -> list[dict[str, Any]]:
    """``[{name, value}]`` with literal values only: ``valueFrom`` (Secrets,
    ConfigMaps) is not supported, it would hand any namespace Secret to a notebook."""
    if not isinstance(value, list):
        raise SpecError(path, "must be a list of {name, value} objects")
    if len(value) > MAX_ENV_ITEMS:
        raise SpecError(path, f"has {len(value)} items; the limit is {MAX_ENV_ITEMS}")
    total = 0
    out, seen = [], set()
    for i, item in enumerate(value):
        where = f"{path}[{i}]"
        if not isinstance(item, dict):
            raise SpecError(where, "must be an object with name and value")
        for key in item:
            if key not in ("name", "value"):
                why = ("not supported: only literal values (a notebook must not read Secrets through its job)"
                       if key == "valueFrom" else "unknown field")
                raise SpecError(f"{where}.{key}", why)
        name, val = item.get("name"), item.get("value", "")
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise SpecError(f"{where}.name", "must be an environment variable name (letters, digits, '_', '-', '.')")
        if name in RESERVED_ENV:
            raise SpecError(f"{where}.name", f"{name} is set by the runner and cannot be replaced")
        if hijacks(name):
            raise SpecError(f"{where}.name", f"{name} is refused: it would change how the kernel's interpreter or "
                                             "its libraries load, or it is the runner's own")
        if name in seen:
            raise SpecError(f"{where}.name", f"{name} is given twice")
        if not isinstance(val, str):
            raise SpecError(f"{where}.value", "must be a string")
        if len(name) > MAX_ENV_NAME_CHARS:
            raise SpecError(f"{where}.name", f"is {len(name)} characters; the limit is {MAX_ENV_NAME_CHARS}")
        if len(val) > MAX_ENV_VALUE_CHARS:
            raise SpecError(f"{where}.value", f"is {len(val)} characters; the limit is {MAX_ENV_VALUE_CHARS}")
        if "\x00" in val:
            raise SpecError(f"{where}.value", "contains a NUL character")
        total += len(name.encode()) + len(val.encode("utf-8", "surrogatepass"))
        if total > MAX_ENV_TOTAL_BYTES:
            raise SpecError(path, f"holds over {MAX_ENV_TOTAL_BYTES} bytes of names and values (the limit)")
        seen.add(name)
        out.append({"name": name, "value": val})
    return out


_QUANTITY = re.compile(QUANTITY_PATTERN)
_SUFFIX = {"": 1, "n": 10**-9, "u": 10**-6, "m": 10**-3, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
           "P": 10**15, "E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_RESOURCE_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?$")


def parse_quantity(q: Any) -> float:
    """A Kubernetes quantity (``"500m"``, ``"2Gi"``, ``1.5``) as a number; ValueError when it is not one."""
    if isinstance(q, bool) or not isinstance(q, (str, int, float)):
        raise ValueError("must be a quantity such as 500m, 2Gi or 1")
    if not isinstance(q, str):
        try:
            num = float(q)
        except OverflowError:
            num = math.inf
        if not math.isfinite(num) or num < 0:
            raise ValueError("must be a finite non-negative quantity")
        if num > MAX_QUANTITY:
            raise ValueError(f"must be at most {MAX_QUANTITY:g}")
        return num
    if len(q) > MAX_QUANTITY_CHARS:
        raise ValueError(f"is over {MAX_QUANTITY_CHARS} characters")
    m = _QUANTITY.match(q.strip())
    if not m:
        raise ValueError(f"{q!r} is not a quantity (e.g. 500m, 2Gi, 1)")
    number, suffix = decimal.Decimal(m.group(1)), m.group(2) or ""
    if suffix in _SUFFIX:
        value = number * decimal.Decimal(_SUFFIX[suffix])
    else:  # a decimal exponent, e.g. 1e3
        value = number * decimal.Decimal(10) ** int(suffix[1:])
    if value < 0:
        raise ValueError("must be a non-negative quantity")
    if value > decimal.Decimal(MAX_QUANTITY):
        raise ValueError(f"must be at most {MAX_QUANTITY:g}")
    return float(value)


def _check_quantities(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SpecError(path, "must be an object of resource: quantity (e.g. {cpu: 500m, memory: 2Gi})")
    if len(value) > MAX_MAP_ITEMS:
        raise SpecError(path, f"has {len(value)} entries; the limit is {MAX_MAP_ITEMS}")
    for name, q in value.items():
        if not _RESOURCE_NAME.match(str(name)):
            raise SpecError(f"{path}.{name}", "is not a resource name")
        try:
            parse_quantity(q)
        except ValueError as e:
            raise SpecError(f"{path}.{name}", str(e)) from None
    return dict(value)


_LABEL_KEY, _LABEL_VALUE = re.compile(LABEL_KEY_PATTERN), re.compile(LABEL_VALUE_PATTERN)


def _check_labels(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SpecError(path, "must be an object of label: value")
    if len(value) > MAX_MAP_ITEMS:
        raise SpecError(path, f"has {len(value)} entries; the limit is {MAX_MAP_ITEMS}")
    for key, val in value.items():
        if not _LABEL_KEY.match(str(key)) or len(str(key).rsplit("/", 1)[-1]) > 63:
            raise SpecError(f"{path}.{key}", "is not a label key")
        if not isinstance(val, str) or not _LABEL_VALUE.match(val) or len(val) > MAX_LABEL_VALUE_CHARS:
            raise SpecError(f"{path}.{key}", "must be a label value (at most 63 letters, digits, '-', '_', '.')")
    return dict(value)


def _check_tolerations(value: Any, path: str) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise SpecError(path, "must be a list of tolerations")
    if len(value) > MAX_MAP_ITEMS:
        raise SpecError(path, f"has {len(value)} items; the limit is {MAX_MAP_ITEMS}")
    fields = {"key": str, "operator": str, "value": str, "effect": str, "tolerationSeconds": int}
    out = []
    for i, item in enumerate(value):
        where = f"{path}[{i}]"
        if not isinstance(item, dict):
            raise SpecError(where, "must be an object")
        for key, val in item.items():
            if key not in fields:
                raise SpecError(f"{where}.{key}", "unknown field")
            if not isinstance(val, fields[key]) or isinstance(val, bool):
                raise SpecError(f"{where}.{key}", f"must be a{'n integer' if fields[key] is int else ' string'}")
            if isinstance(val, int) and not -INT64 - 1 <= val <= INT64:
                raise SpecError(f"{where}.{key}", "must be a 64-bit integer")
            if isinstance(val, str) and len(val) > MAX_TOLERATION_CHARS:
                raise SpecError(f"{where}.{key}", f"is over {MAX_TOLERATION_CHARS} characters")
        op = item.get("operator", "Equal")
        if op not in TOLERATION_OPERATORS:
            raise SpecError(f"{where}.operator", f"must be one of {', '.join(TOLERATION_OPERATORS)}")
        if "effect" in item and item["effect"] not in TAINT_EFFECTS:
            raise SpecError(f"{where}.effect", f"must be one of {', '.join(TAINT_EFFECTS)}")
        if op == "Exists" and item.get("value"):
            raise SpecError(f"{where}.value", "must be empty when operator is Exists")
        if op == "Equal" and not item.get("key"):
            raise SpecError(f"{where}.key", "is required when operator is Equal")
        if "tolerationSeconds" in item and item.get("effect") != "NoExecute":
            raise SpecError(f"{where}.tolerationSeconds", "needs effect NoExecute")
        out.append(dict(item))
    return out


def validate_spec(spec: Any, supported: set[str] | None = None) -> JobSpec:
    """Check a spec against the schema. Unknown fields and fields the backend
    does not support raise :class:`SpecError` naming the field."""
    if not isinstance(spec, dict):
        raise SpecError("spec", "must be a JSON object")
    out = _check(spec, SPEC_SCHEMA, "", supported)
    for req in REQUIRED:
        cur: Any = out
        for part in req.split("."):
            cur = cur.get(part) if isinstance(cur, dict) else None
        if cur is None:
            raise SpecError(req, "is required")
    if not out["notebook"]["path"].endswith(".ipynb"):
        raise SpecError("notebook.path", "must name a .ipynb file")
    golden = out.get("goldenNotebook")
    if golden is not None and "path" not in golden:
        raise SpecError("goldenNotebook.path", "is required when goldenNotebook is given")
    for which in ("notebook", "goldenNotebook"):
        if (out.get(which) or {}).get("git") is not None:
            check_git_source(out[which]["git"], f"{which}.git")
    res = out.get("podConfig", {}).get("resources", {})
    for name, limit in (res.get("limits") or {}).items():
        request = (res.get("requests") or {}).get(name)
        if request is not None and parse_quantity(request) > parse_quantity(limit):
            raise SpecError(f"podConfig.resources.requests.{name}", f"must not exceed the limit ({limit})")
    bc = out.get("podConfig", {}).get("buildConfig", {})
    if bc.get("requirementsFile") and bc.get("requirements"):
        raise SpecError("podConfig.buildConfig.requirements", "give requirementsFile or requirements, not both")
    if bc.get("extras") and (bc.get("requirementsFile") or bc.get("requirements")):
        raise SpecError("podConfig.buildConfig.extras", "extras apply to the repository's own project, found when "
                                                         "neither requirementsFile nor requirements is given")
    if bc.get("extras") and bc.get("enabled") is False:
        raise SpecError("podConfig.buildConfig.extras", "extras apply to a build, and "
                                                         "podConfig.buildConfig.enabled is false")
    if bc.get("constraints") and bc.get("enabled") is False:
        raise SpecError("podConfig.buildConfig.constraints", "constraints apply to a build, and "
                                                              "podConfig.buildConfig.enabled is false")
    return cast(JobSpec, out)  # checked against SPEC_SCHEMA; JobSpec is generated from the same table


_SCP_URL = re.compile(r"^[A-Za-z0-9._-]+@([A-Za-z0-9.-]+):(.+)$")
_SECRET_NAME = re.compile(SECRET_NAME_PATTERN)
_BAD_REF_CHARS = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")


def check_git_url(url: str, path: str) -> None:
    """A repository's URL: https://, http://, ssh://, file:// or ``user@host:path``, with a
    host (a path for file://), no password or token in it, nothing git would read as an option."""
    if url != url.strip() or any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise SpecError(path, "must not contain spaces or control characters")
    if url.startswith("-"):
        raise SpecError(path, "must not start with '-'")
    m = _SCP_URL.match(url)
    if m:
        if m.group(1).startswith("-") or m.group(2).startswith("-"):
            raise SpecError(path, "must not start a host or a path with '-'")
        return
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("https", "http", "ssh", "file"):
        raise SpecError(path, "must be an https://, http://, ssh://, git@host:path or file:// URL")
    try:
        parts.port  # noqa: B018 - a bad port raises
    except ValueError:
        raise SpecError(path, "has a port that is not a number") from None
    if parts.password is not None or (parts.username is not None and parts.scheme != "ssh"):
        raise SpecError(path, "must not carry credentials (a user name, a password or a token): "
                              "name a secret in credentialsSecret")
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise SpecError(path, "must be file:///absolute/path")
        return
    if not parts.hostname or parts.hostname.startswith("-"):
        raise SpecError(path, "must name a host")
    if parts.query or parts.fragment:
        raise SpecError(path, "must not have a query or a fragment")


def check_git_ref(ref: str, path: str) -> None:
    """A branch, a tag or a full commit SHA, as git takes a ref name (never an option, a range
    or a refspec)."""
    if len(ref) > 255:
        raise SpecError(path, "is over 255 characters")
    if ref.startswith(("-", "/", ".")) or ref.endswith(("/", ".", ".lock")) or ".." in ref or "@{" in ref \
            or "//" in ref or _BAD_REF_CHARS.search(ref) or ref == "@":
        raise SpecError(path, "must be a branch, a tag or a full commit SHA (a git ref name: no spaces, '..', "
                              "'~', '^', ':', '?', '*', '[' or '\\', not starting with '-')")


def check_git_source(git: dict[str, Any], path: str) -> None:
    """``notebook.git`` / ``goldenNotebook.git``: ``url`` and ``ref`` given and well formed,
    ``credentialsSecret`` a secret's name."""
    for key in ("url", "ref"):
        if key not in git:
            raise SpecError(f"{path}.{key}", f"is required when {path} is given")
    check_git_url(git["url"], f"{path}.url")
    check_git_ref(git["ref"], f"{path}.ref")
    name = git.get("credentialsSecret")
    if name is not None and (len(name) > 253 or not _SECRET_NAME.match(name)):
        raise SpecError(f"{path}.credentialsSecret", "must be a secret's name (letters, digits, '-', '.', "
                                                     "'_')")


def spec_fields(schema: Any = SPEC_SCHEMA, prefix: str = "") -> set[str]:
    """All leaf field paths of the schema."""
    out: set[str] = set()
    for key, sub in schema.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(sub, dict):
            out |= spec_fields(sub, path)
        else:
            out.add(path)
    return out
