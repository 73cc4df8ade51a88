"""Browser tests of the panel's layout and words (issue 42), in real headless Chromium, light and
dark themes: ``labextension/ui-tests/layout.test.js`` against a real ``jupyter lab`` with the real
server extension and the local backend (the ``ui_tests`` fixture, tests/conftest.py). It measures
that the failing cell and the golden diff are in the panel's first screen at 1440×900, that no
control is clipped at a panel width of 280 px, that a finished job's build log is collapsed, and
scans the rendered text for reason codes, spec paths and data-dir paths; two differing cells,
Accept all as golden, Validate again → green. Screenshots go to test-artifacts/;
NBV_UPDATE_DOCS_SHOTS=1 also refreshes docs/screenshots/lab/."""

from __future__ import annotations

import pytest


@pytest.mark.browser
def test_lab_layout_and_words(ui_tests) -> None:
    ui_tests("layout.test.js", minutes=30)
