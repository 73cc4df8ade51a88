"""The lab's phases and reasons are generated from model.py: the generated
file must be current (run ``python tools/gen_ts_vocabulary.py``)."""

from __future__ import annotations

import importlib.util
import json
import re
import sqlite3
from pathlib import Path

import pytest

from jupyter_nbvalidation.core.model import (
    REASON_ACTIONS,
    REASON_PHASE,
    BuildPhase,
    CellStatus,
    ConditionType,
    Phase,
    Reason,
    ResultReason,
    RunState,
)

ROOT = Path(__file__).resolve().parents[2]


def _generator():
    spec = importlib.util.spec_from_file_location("gen_ts_vocabulary", ROOT / "tools" / "gen_ts_vocabulary.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_vocabulary_is_current() -> None:
    gen = _generator()
    assert gen.TARGET.read_text() == gen.render(), \
        "labextension/src/vocabulary.ts is stale: python tools/gen_ts_vocabulary.py"


def test_generated_vocabulary_names_every_reason_and_phase() -> None:
    text = (ROOT / "labextension" / "src" / "vocabulary.ts").read_text()
    quoted = set(re.findall(r"'([A-Za-z]+)'", text))
    assert set(Phase.ORDER) <= quoted
    assert {r.value for r in Reason} <= quoted
    for reason, phase in REASON_PHASE.items():
        assert f"  {reason}: '{phase}'" in text


def test_the_lab_knows_no_reason_the_server_does_not() -> None:
    """No hand-written reason -> phase table is left in the lab's sources."""
    src = ROOT / "labextension" / "src"
    reasons = {r.value for r in Reason}
    for path in src.rglob("*.ts*"):
        if path.name == "vocabulary.ts":
            continue
        phase = "|".join(Phase.ORDER)
        for name in re.findall(rf"^\s+(\w+): '(?:{phase})'", path.read_text(), flags=re.M):
            assert name in set(Phase.ORDER) or name in reasons, f"{path.name} maps {name!r}, which model.Reason lacks"


@pytest.mark.parametrize("member", [*Phase, *Reason, *ResultReason, *CellStatus, *BuildPhase, *ConditionType,
                                    *RunState], ids=str)
def test_a_member_is_its_string_wherever_text_is_made(member) -> None:
    """Documents, JSON, SQLite, messages and the lab see the same strings as
    before the enums: str(), f-strings (3.11 changed them for (str, Enum)),
    %-format, json.dumps, hashing and SQLite parameters all give the value."""
    value = member.value
    assert type(value) is str
    assert str(member) == f"{member}" == "%s" % member == "{}".format(member) == value
    assert f"{member:>40}" == f"{value:>40}"
    assert json.dumps({member: member}) == json.dumps({value: value})
    assert member == value and hash(member) == hash(value) and {value: 1}[member] == 1 and {member: 1}[value] == 1
    db = sqlite3.connect(":memory:")
    db.execute("create table t (x text)")
    db.execute("insert into t values (?)", (member,))
    assert db.execute("select x, typeof(x) from t where x = ?", (value,)).fetchall() == [(value, "text")]
    assert type(db.execute("select x from t").fetchone()[0]) is str


def test_the_phase_tables_hold_every_member() -> None:
    assert list(Phase.ORDER) == list(Phase) and Phase.TERMINAL == {"Succeeded", "Failed"}
    assert set(REASON_PHASE) == set(Reason) == set(REASON_ACTIONS)


def test_every_event_reason_is_in_the_openapi_event_schema_and_the_readme() -> None:
    """An event reason that is no transition (a retry, Queued, a notice) is documented where
    clients look: the OpenAPI document's Event schema and the docs (the README's reference, moved to docs/)."""
    from jupyter_nbvalidation.core.model import NOTICE_REASONS, EventReason
    from jupyter_nbvalidation.service.openapi import openapi_document

    described = openapi_document("/nbvalidation/api/v1")["components"]["schemas"]["Event"]["properties"]["reason"][
        "description"]
    # the README's reference content lives in the docs site's pages (docs/*.md)
    docs = "\n".join(page.read_text() for page in sorted((ROOT / "docs").glob("*.md")))
    for reason in EventReason:
        assert reason.value in described, reason
        assert f"`{reason.value}`" in docs, reason
    assert NOTICE_REASONS <= {r.value for r in EventReason}
