"""The lab's phases and reasons are generated from model.py: the generated
file must be current (run ``python tools/gen_ts_vocabulary.py``)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from jupyter_nbvalidation.model import REASON_PHASE, Phase, Reason

ROOT = Path(__file__).resolve().parents[1]


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
    assert {v for k, v in vars(Reason).items() if k.isupper() and isinstance(v, str)} <= quoted
    for reason, phase in REASON_PHASE.items():
        assert f"  {reason}: '{phase}'" in text


def test_the_lab_knows_no_reason_the_server_does_not() -> None:
    """No hand-written reason -> phase table is left in the lab's sources."""
    src = ROOT / "labextension" / "src"
    reasons = {v for k, v in vars(Reason).items() if k.isupper() and isinstance(v, str)}
    for path in src.rglob("*.ts*"):
        if path.name == "vocabulary.ts":
            continue
        phase = "|".join(Phase.ORDER)
        for name in re.findall(rf"^\s+(\w+): '(?:{phase})'", path.read_text(), flags=re.M):
            assert name in set(Phase.ORDER) or name in reasons, f"{path.name} maps {name!r}, which model.Reason lacks"
