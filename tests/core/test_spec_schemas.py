"""The spec is declared once, in jupyter_nbvalidation/core/spec_table.py: the validator
(model.SPEC_SCHEMA), the REST API's OpenAPI document, the CRD's structural schema,
the TypedDicts, the lab's spec type and the CLI's spec options come from it. The
files generated from it must be current (run ``python tools/gen_spec.py``), and the
schemas must name the same fields, so a field accepted by one is never rejected (or
pruned) by another."""

from __future__ import annotations

import argparse
import importlib.util
import typing
from pathlib import Path

import pytest
import yaml

import jupyter_nbvalidation.core.documents as documents
import jupyter_nbvalidation.core.spec_schema as spec_schema
import jupyter_nbvalidation.core.spec_table as spec_table
import jupyter_nbvalidation.service.openapi as openapi
import jupyter_nbvalidation.verdict.flatten as flatten
from jupyter_nbvalidation.spec.checks import spec_fields

CRD = "jupyter_nbvalidation/backends/kubernetes/manifests/crd.yaml"


def leaves(schema: dict, prefix: str = "") -> set[str]:
    out: set[str] = set()
    for key, sub in (schema.get("properties") or {}).items():
        path = f"{prefix}.{key}" if prefix else key
        out |= leaves(sub, path) if sub.get("type") == "object" and "properties" in sub else {path}
    return out


def crd_spec_schema() -> dict:
    from pathlib import Path

    crd = yaml.safe_load((Path(__file__).resolve().parents[2] / CRD).read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def test_the_three_spec_schemas_name_the_same_fields():
    fields = spec_fields()
    assert "comparisonConfig.ignoreOutputTypes" in fields
    assert leaves(openapi.SPEC_SCHEMA) == fields
    assert leaves(crd_spec_schema()) == fields


def test_output_selector_pattern_is_the_same_everywhere():
    crd = crd_spec_schema()["properties"]["comparisonConfig"]["properties"]["ignoreOutputTypes"]["items"]
    api = openapi.SPEC_SCHEMA["properties"]["comparisonConfig"]["properties"]["ignoreOutputTypes"]["items"]
    assert crd["pattern"] == api["pattern"] == flatten.OUTPUT_SELECTOR_PATTERN


def test_quantity_pattern_is_the_same_everywhere():
    from jupyter_nbvalidation.core.spec_table import QUANTITY_PATTERN

    for kind in ("requests", "limits"):
        crd = crd_spec_schema()["properties"]["podConfig"]["properties"]["resources"]["properties"][kind]
        api = openapi.SPEC_SCHEMA["properties"]["podConfig"]["properties"]["resources"]["properties"][kind]
        assert crd["additionalProperties"]["pattern"] == QUANTITY_PATTERN
        assert api["additionalProperties"]["anyOf"][1]["pattern"] == QUANTITY_PATTERN


def test_upstream_fields_not_taken_are_refused_with_their_reason():
    import pytest

    from jupyter_nbvalidation.spec.checks import NOT_TAKEN_FROM_UPSTREAM, SpecError, validate_spec

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
    from jupyter_nbvalidation.core.spec_table import (
        ENV_NAME_PATTERN,
        LABEL_VALUE_PATTERN,
        TAINT_EFFECTS,
        TOLERATION_OPERATORS,
    )

    for pc in (crd_spec_schema()["properties"]["podConfig"]["properties"],
               openapi.SPEC_SCHEMA["properties"]["podConfig"]["properties"]):
        assert pc["env"]["items"]["properties"]["name"]["pattern"] == ENV_NAME_PATTERN
        assert pc["nodeSelector"]["additionalProperties"]["pattern"] == LABEL_VALUE_PATTERN
        toleration = pc["tolerations"]["items"]["properties"]
        assert toleration["operator"]["enum"] == list(TOLERATION_OPERATORS)
        assert toleration["effect"]["enum"] == list(TAINT_EFFECTS)


ROOT = Path(__file__).resolve().parents[2]


def _generator():
    spec = importlib.util.spec_from_file_location("gen_spec", ROOT / "tools" / "gen_spec.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_files_generated_from_the_spec_table_are_current():
    """crd.yaml's spec schema, labextension/src/spec.generated.ts and the TypedDicts at the end of
    spec_table.py are regenerated in memory and compared with the committed files."""
    stale = _generator().stale()
    assert not stale, f"stale: {stale}: run python tools/gen_spec.py"


def test_the_generator_notices_a_stale_file(tmp_path, monkeypatch):
    gen = _generator()
    fresh = gen.outputs()
    for name in ("TABLE", "CRD", "TS", "SCHEDULE_CRD"):  # the generated files as they should be, in a folder of their own
        path = tmp_path / getattr(gen, name).name
        path.write_text(fresh[getattr(gen, name)])
        monkeypatch.setattr(gen, name, path)
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    assert gen.stale() == []
    gen.CRD.write_text(gen.CRD.read_text().replace("Overall timeout", "Whole timeout"))
    assert gen.stale() == ["crd.yaml"]
    gen.SCHEDULE_CRD.write_text(gen.SCHEDULE_CRD.read_text().replace("Overall timeout", "Whole timeout"))
    assert gen.stale() == ["crd.yaml", "schedule-crd.yaml"]
    assert gen.main(["--check"]) == 1
    assert gen.main([]) == 0 and gen.stale() == []


def test_the_validator_and_the_openapi_schema_are_the_table():
    from jupyter_nbvalidation.spec.checks import SPEC_SCHEMA

    assert SPEC_SCHEMA == spec_table.validator_schema()
    assert openapi.SPEC_SCHEMA == spec_schema.json_schema("openapi")
    assert crd_spec_schema() == spec_schema.json_schema("crd")
    assert spec_table.leaf_paths() == spec_fields()


def test_the_typeddicts_have_the_table_s_fields():
    """documents.JobSpec (generated into spec_table.py) has every field of the table, required as the table says."""
    def check(td, obj):
        hints = typing.get_type_hints(td)
        assert set(hints) == set(obj.fields), td.__name__
        assert td.__required_keys__ == frozenset(obj.required), td.__name__
        for key, sub in obj.fields.items():
            if isinstance(sub, spec_table.Obj):
                check(hints[key], sub)

    assert documents.JobSpec is spec_table.JobSpec
    check(documents.JobSpec, spec_table.SPEC)


def test_the_cli_spec_options_are_the_table_s():
    """Every option of cli.add_spec_options comes from the table and sets the field it names."""
    from jupyter_nbvalidation.cli.spec_options import add_spec_options, spec_from_options

    parser = argparse.ArgumentParser()
    add_spec_options(parser)
    flags = [a.option_strings for a in parser._actions if a.option_strings and a.dest != "help"]
    table = spec_table.cli_options()
    assert [list(opt.flags) for _, _, opt in table] == flags
    samples = {"value": ["x"], "duration": ["90"], "float": ["0.5"], "append": ["stream"], "set_true": [],
               "set_false": [], "parameter": ["a", "1"], "raw_parameter": ["a", "1"]}
    for path, field, opt in table:
        if opt.action == "sanitizer_file":
            continue  # reads a file: tests/test_cli.py
        given = list(field.limit[:1]) if opt.action == "choice" else samples[opt.action]
        spec = spec_from_options(parser.parse_args([opt.flags[0], *given]))
        cur = spec
        for part in path.split("."):
            assert part in cur, (opt.flags, path, spec)
            cur = cur[part]


def test_a_plain_number_of_seconds_is_a_valid_duration_for_every_duration_option():
    """--timeout 90, --cell-timeout 90 and --build-timeout 90 all mean 90 s and pass the
    validator (--build-timeout sent "90" as it was, which the server refused)."""
    from jupyter_nbvalidation.cli.spec_options import add_spec_options, spec_from_options
    from jupyter_nbvalidation.spec.checks import validate_spec

    parser = argparse.ArgumentParser()
    add_spec_options(parser)
    durations = [(path, opt) for path, field, opt in spec_table.cli_options() if field.kind == "duration"]
    assert {opt.flags[0] for _, opt in durations} >= {"--timeout", "--cell-timeout", "--build-timeout"}
    for path, opt in durations:
        spec = spec_from_options(parser.parse_args([opt.flags[0], "90"]))
        validated = validate_spec({"notebook": {"path": "nb.ipynb"}, **spec})
        cur = validated
        for part in path.split("."):
            cur = cur[part]
        assert cur == "90s", (opt.flags, spec)


@pytest.mark.parametrize("path", sorted(spec_table.leaf_paths()))
def test_every_field_is_described(path):
    entry = dict(spec_table.walk())[path]
    assert entry.description and entry.description.strip() == entry.description
