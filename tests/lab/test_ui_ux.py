"""Browser tests of the lab's UX (issue 12), in real headless Chromium:
``labextension/ui-tests/ux.test.js`` against a real ``jupyter lab`` with the
real server extension and the local backend (the ``ui_tests`` fixture,
tests/conftest.py). Screenshots go to test-artifacts/."""

from __future__ import annotations

import pytest


@pytest.mark.browser
def test_lab_ux(ui_tests) -> None:
    # eight tests, a dozen validations and a build: more than the default limit on a loaded machine
    ui_tests("ux.test.js", minutes=40)
