"""NBV_FAIL_ON_SKIP=1 (tools/setup-and-test.sh) fails a run in which a test skipped that
tests/conftest.py ALLOWED_SKIPS does not name; checked with a real nested pytest run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = "tests/house/test_skip_guard.py::test_the_probe_skips_only_when_asked"


def test_the_probe_skips_only_when_asked() -> None:
    """The nested runs' subject: it skips when NBV_SKIP_PROBE=1, and passes otherwise."""
    if os.environ.get("NBV_SKIP_PROBE") == "1":
        pytest.skip("the probe of test_a_skip_fails_the_run_only_with_nbv_fail_on_skip")


def _run(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", PROBE],
                          cwd=ROOT, env={**os.environ, "NBV_SKIP_PROBE": "1", "NBV_FAIL_ON_SKIP": "0", **env},
                          capture_output=True, text=True, timeout=300)


def test_a_skip_fails_the_run_only_with_nbv_fail_on_skip() -> None:
    quiet = _run()
    assert quiet.returncode == 0 and "1 skipped" in quiet.stdout, quiet.stdout + quiet.stderr
    strict = _run(NBV_FAIL_ON_SKIP="1")
    assert strict.returncode == 1, strict.stdout + strict.stderr
    assert "unexpected skips" in strict.stdout and PROBE in strict.stdout, strict.stdout
