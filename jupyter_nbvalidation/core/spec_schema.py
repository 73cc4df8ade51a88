"""The spec's JSON schemas, from the one table (core/spec_table.py): ``openapi`` (the REST API's
``Spec``, service/openapi.py) and ``crd`` (the CRD's structural schema of ``spec``, written into
the CRD by ``tools/gen_spec.py``). Standard library only, and nothing of the package but the table."""

from __future__ import annotations

from typing import Any

from jupyter_nbvalidation.core.spec_table import (
    DURATION_PATTERN,
    ENV_NAME_PATTERN,
    INT64,
    LABEL_VALUE_PATTERN,
    MAX_DURATION_CHARS,
    MAX_ENV_ITEMS,
    MAX_ENV_NAME_CHARS,
    MAX_ENV_VALUE_CHARS,
    MAX_LABEL_VALUE_CHARS,
    MAX_MAP_ITEMS,
    MAX_PARAMETERS,
    MAX_PATTERN_CHARS,
    MAX_QUANTITY,
    MAX_QUANTITY_CHARS,
    MAX_SANITIZER_SECTION_CHARS,
    MAX_SANITIZERS,
    MAX_STRING_CHARS,
    MAX_TOLERATION_CHARS,
    QUANTITY_PATTERN,
    SPEC,
    TAINT_EFFECTS,
    TOLERATION_OPERATORS,
    Field,
    Obj,
)


def _strings(max_items: int, item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "maxItems": max_items, "items": {"type": "string", **item}}


def _object(props: dict[str, Any], required: list[str], crd: bool) -> dict[str, Any]:
    # a CRD's structural schema has no additionalProperties beside properties: the API server
    # prunes unknown fields instead
    out: dict[str, Any] = {"type": "object", "properties": props}
    if not crd:
        out["additionalProperties"] = False
    if required:
        out["required"] = required
    return out


def _field_schema(f: Field, crd: bool) -> dict[str, Any]:  # noqa: C901 - one branch per kind
    kind, limit = f.kind, f.limit
    out: dict[str, Any]
    if kind == "str":
        out = {"type": "string"}
        if f.min_length:
            out["minLength"] = f.min_length
        out["maxLength"] = MAX_STRING_CHARS
    elif kind == "bool":
        out = {"type": "boolean"}
    elif kind == "duration":
        out = {"type": "string", "pattern": DURATION_PATTERN, "maxLength": MAX_DURATION_CHARS}
    elif kind == "number":
        out = {"type": "number", "minimum": 0, "maximum": limit}
    elif kind == "bytes":
        out = {"type": "integer", "minimum": 1, "maximum": limit}
    elif kind in ("strlist", "globlist", "regexlist", "outputlist"):
        max_items, max_chars = limit
        item: dict[str, Any] = {"minLength": 1, "maxLength": max_chars}
        out = _strings(max_items, item)
    elif kind == "enum":
        out = {"type": "string", "enum": list(limit)}
    elif kind == "envlist":
        out = {"type": "array", "maxItems": MAX_ENV_ITEMS, "items": _object({
            "name": {"type": "string", "pattern": ENV_NAME_PATTERN, "maxLength": MAX_ENV_NAME_CHARS},
            "value": {"type": "string", "maxLength": MAX_ENV_VALUE_CHARS}}, ["name"], crd)}
    elif kind == "quantities":
        quantity: dict[str, Any] = (
            {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}],
             "pattern": QUANTITY_PATTERN} if crd else
            {"anyOf": [{"type": "integer", "minimum": 0, "maximum": int(MAX_QUANTITY)},
                       {"type": "string", "pattern": QUANTITY_PATTERN, "maxLength": MAX_QUANTITY_CHARS}]})
        out = {"type": "object", "maxProperties": MAX_MAP_ITEMS, "additionalProperties": quantity}
    elif kind == "labels":
        out = {"type": "object", "maxProperties": MAX_MAP_ITEMS, "additionalProperties": {
            "type": "string", "maxLength": MAX_LABEL_VALUE_CHARS, "pattern": LABEL_VALUE_PATTERN}}
    elif kind == "tolerations":
        text = {"type": "string", "maxLength": MAX_TOLERATION_CHARS}
        out = {"type": "array", "maxItems": MAX_MAP_ITEMS, "items": _object({
            "key": text,
            "operator": {"type": "string", "enum": list(TOLERATION_OPERATORS)},
            "value": text,
            "effect": {"type": "string", "enum": list(TAINT_EFFECTS)},
            "tolerationSeconds": {"type": "integer", "minimum": -INT64 - 1, "maximum": INT64}}, [], crd)}
    elif kind == "sanitizers":
        out = {"type": "array", "maxItems": MAX_SANITIZERS, "items": _object({
            "regex": {"type": "string", "minLength": 1, "maxLength": MAX_PATTERN_CHARS},
            "replace": {"type": "string", "maxLength": MAX_PATTERN_CHARS},
            "section": {"type": "string", "maxLength": MAX_SANITIZER_SECTION_CHARS}}, ["regex", "replace"], crd)}
    elif kind == "parameters":
        out = {"type": "object", "maxProperties": MAX_PARAMETERS}
        if crd:
            out["x-kubernetes-preserve-unknown-fields"] = True
        else:
            out["additionalProperties"] = {}
    else:
        raise AssertionError(kind)
    if f.pattern:
        (out["items"] if out["type"] == "array" else out)["pattern"] = f.pattern
    out["description"] = f.description
    if crd:
        out.update(f.crd)
    return out


def json_schema(dialect: str = "openapi", obj: Obj = SPEC) -> dict[str, Any]:
    """The spec's JSON schema: ``openapi`` (the REST API's ``Spec``) or ``crd`` (the CRD's
    structural schema of ``spec``)."""
    crd = dialect == "crd"
    assert dialect in ("openapi", "crd"), dialect
    props = {key: json_schema(dialect, sub) if isinstance(sub, Obj) else _field_schema(sub, crd)
             for key, sub in obj.fields.items()}
    out = {**_object(props, list(obj.required), crd), "description": obj.description}
    if crd:
        out.update(obj.crd)
    return out
