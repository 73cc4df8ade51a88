"""The spec is described three times: the validator (model.SPEC_SCHEMA), the
REST API's OpenAPI document and the CRD's structural schema. They must name
the same fields, so a field accepted by one is never rejected (or pruned) by
another."""

from __future__ import annotations

import yaml

from jupyter_nbvalidation import compare, openapi
from jupyter_nbvalidation.model import spec_fields

CRD = "jupyter_nbvalidation/k8s/manifests/crd.yaml"


def leaves(schema: dict, prefix: str = "") -> set[str]:
    out: set[str] = set()
    for key, sub in (schema.get("properties") or {}).items():
        path = f"{prefix}.{key}" if prefix else key
        out |= leaves(sub, path) if sub.get("type") == "object" and "properties" in sub else {path}
    return out


def crd_spec_schema() -> dict:
    from pathlib import Path

    crd = yaml.safe_load((Path(__file__).resolve().parents[1] / CRD).read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def test_the_three_spec_schemas_name_the_same_fields():
    fields = spec_fields()
    assert "comparisonConfig.ignoreOutputTypes" in fields
    assert leaves(openapi.SPEC_SCHEMA) == fields
    assert leaves(crd_spec_schema()) == fields


def test_output_selector_pattern_is_the_same_everywhere():
    crd = crd_spec_schema()["properties"]["comparisonConfig"]["properties"]["ignoreOutputTypes"]["items"]
    api = openapi.SPEC_SCHEMA["properties"]["comparisonConfig"]["properties"]["ignoreOutputTypes"]["items"]
    assert crd["pattern"] == api["pattern"] == compare.OUTPUT_SELECTOR_PATTERN


def test_quantity_pattern_is_the_same_everywhere():
    from jupyter_nbvalidation.model import QUANTITY_PATTERN

    for kind in ("requests", "limits"):
        crd = crd_spec_schema()["properties"]["podConfig"]["properties"]["resources"]["properties"][kind]
        api = openapi.SPEC_SCHEMA["properties"]["podConfig"]["properties"]["resources"]["properties"][kind]
        assert crd["additionalProperties"]["pattern"] == QUANTITY_PATTERN
        assert api["additionalProperties"]["anyOf"][1]["pattern"] == QUANTITY_PATTERN


def test_upstream_fields_not_taken_are_refused_with_their_reason():
    import pytest

    from jupyter_nbvalidation.model import NOT_TAKEN_FROM_UPSTREAM, SpecError, validate_spec

    for path, reason in NOT_TAKEN_FROM_UPSTREAM.items():
        assert path not in spec_fields()
        spec: dict = {"notebook": {"path": "nb.ipynb"}}
        cur = spec
        *parents, leaf = path.split(".")
        for part in parents:
            cur = cur.setdefault(part, {})
        cur[leaf] = {}
        with pytest.raises(SpecError) as err:
            validate_spec(spec)
        assert err.value.field == path and err.value.reason == reason


def test_pod_config_patterns_and_enums_are_the_same_everywhere():
    from jupyter_nbvalidation.model import ENV_NAME_PATTERN, LABEL_VALUE_PATTERN, TAINT_EFFECTS, TOLERATION_OPERATORS

    for pc in (crd_spec_schema()["properties"]["podConfig"]["properties"],
               openapi.SPEC_SCHEMA["properties"]["podConfig"]["properties"]):
        assert pc["env"]["items"]["properties"]["name"]["pattern"] == ENV_NAME_PATTERN
        assert pc["nodeSelector"]["additionalProperties"]["pattern"] == LABEL_VALUE_PATTERN
        toleration = pc["tolerations"]["items"]["properties"]
        assert toleration["operator"]["enum"] == list(TOLERATION_OPERATORS)
        assert toleration["effect"]["enum"] == list(TAINT_EFFECTS)
