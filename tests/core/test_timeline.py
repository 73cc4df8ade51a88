"""The one timeline rule (jupyter_nbvalidation/core/timeline.py): the shared
vectors in tests/vectors/timeline, which the lab's jest suite runs against
labextension/src/timeline.ts too (labextension/test/vectors.spec.ts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_nbvalidation.core.timeline import compute_timeline

VECTORS = sorted((Path(__file__).parents[1] / "vectors" / "timeline").glob("*.json"))


def test_there_are_vectors() -> None:
    assert len(VECTORS) >= 10


@pytest.mark.parametrize("path", VECTORS, ids=[p.stem for p in VECTORS])
def test_timeline_vector(path: Path) -> None:
    vector = json.loads(path.read_text())
    assert compute_timeline(vector["job"], vector["events"], vector["now"]) == vector["expected"], vector["description"]
