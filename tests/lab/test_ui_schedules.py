"""Browser tests of the lab panel's Schedules tab (issue 45): ``labextension/ui-tests/schedules.test.js``
against a real ``jupyter lab`` with the real server extension and the local backend, its cron
expressions taking the test-only seconds field (the ``ui_tests`` fixture, tests/conftest.py). A
schedule created over REST passes, then fails; the tab's strip shows those runs oldest first with
the REST API's phases; Pause makes ``spec.suspend`` true over REST; a click on a mark opens that
run's verdict in the job view; Run now while a run goes is a short note (409); keyboard and both
themes. Screenshots go to test-artifacts/; NBV_UPDATE_DOCS_SHOTS=1 also refreshes
docs/screenshots/lab/lab-schedules-*.png."""

from __future__ import annotations

import pytest


@pytest.mark.browser
def test_lab_schedules_tab(ui_tests) -> None:
    ui_tests("schedules.test.js")
