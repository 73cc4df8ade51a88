"""Browser test of the lab's Options dialog (issue 12), in real headless Chromium:
``labextension/ui-tests/options.test.js`` against a real ``jupyter lab`` with the real
server extension and the local backend (the ``ui_tests`` fixture, tests/conftest.py):
refused input named at its field (the dialog's checks and the server's 400), a tolerance
and a parameter set in the dialog found in the submitted job's spec and deciding its
verdict; then lab to CI (issue 42): what the dialog saved for the project is what `jupyter
nbvalidation run DIR` and `pytest --nbvalidation DIR` read on the same folder (the same pair, the
same tolerance, the golden copy never validated). Screenshots go to test-artifacts/; NBV_UPDATE_README_SHOT=1 also refreshes
docs/screenshots/validation-panel.png."""

from __future__ import annotations

import pytest


@pytest.mark.browser
def test_options_dialog_tolerance_and_parameter(ui_tests) -> None:
    ui_tests("options.test.js")
