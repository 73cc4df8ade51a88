"""Browser tests of the lab's UX (issue 12), in real headless Chromium:
``labextension/ui-tests/ux.test.js`` against a real ``jupyter lab`` with the
real server extension and the local backend (the ``ui_tests`` fixture,
tests/conftest.py). Screenshots go to test-artifacts/."""

from __future__ import annotations

import pytest


@pytest.mark.browser
def test_lab_ux(ui_tests) -> None:
    ui_tests("ux.test.js")
