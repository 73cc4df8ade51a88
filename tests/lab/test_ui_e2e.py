"""Browser end-to-end tests of the JupyterLab frontend.

Runs ``labextension/ui-tests/e2e.test.js`` (node's test runner +
playwright-core driving Debian's Chromium) against a real ``jupyter lab``
with the real server extension and the local backend. It never skips: a
missing browser, missing ``node_modules`` or an uninstalled labextension is a
failure, so CI has to provide them (``apt-get install -y chromium``;
``jlpm install`` and a build in ``labextension/``). The runner is the
``ui_tests`` fixture (tests/conftest.py).
"""

from __future__ import annotations

import pytest


@pytest.mark.browser
def test_lab_frontend_end_to_end(ui_tests) -> None:
    ui_tests("e2e.test.js", minutes=30)
