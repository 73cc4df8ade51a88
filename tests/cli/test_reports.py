"""What the batch reports say about each verdict's environment (issue 21, "Every verdict says
its environment"): the console summary, JUnit XML, the HTML report and ``describe``, from
finished jobs as the store holds them. Nothing runs here; test_ci_run.py runs the real thing."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import jupyter_nbvalidation.cli.render as render
import jupyter_nbvalidation.cli.reports.console as console
import jupyter_nbvalidation.cli.reports.html as html
import jupyter_nbvalidation.cli.reports.junit as junit
from jupyter_nbvalidation.cli.batch import Item, Outcome

ENV = "2 requirements from requirements.txt beside the notebook"


def _job(name: str, phase: str, message: str, environment: str | None = ENV) -> dict:
    status = {"phase": phase, "reason": "ValidationFailed" if phase == "Failed" else "ValidationSucceeded",
              "message": message, "failedCellIndex": 1 if phase == "Failed" else None,
              "results": [{"cellIndex": 1, "status": "Failure", "errorName": "KeyError", "errorMessage": "'x'"}]
              if phase == "Failed" else []}
    if environment is not None:
        status["environment"] = environment
    return {"metadata": {"name": name, "uid": name, "creationTimestamp": "2026-12-03T22:00:00Z"},
            "spec": {"notebook": {"path": f"nbs/{name}.ipynb"}}, "status": status}


def _outcomes() -> list[Outcome]:
    return [Outcome(Item(Path("/r/nbs/ok.ipynb"), "nbs/ok.ipynb"), "Succeeded", 1.5,
                    _job("ok", "Succeeded", "1 code cell ran without errors", "build disabled: the server's interpreter")),
            Outcome(Item(Path("/r/nbs/fail.ipynb"), "nbs/fail.ipynb"), "Failed", 2.5,
                    _job("fail", "Failed", "cell 2: KeyError: 'x'")),
            Outcome(Item(Path("/r/nbs/bad.ipynb"), "nbs/bad.ipynb"), "Refused", 0.0, None, "not a valid notebook")]


def test_the_summary_says_the_environment_under_each_notebook_that_failed():
    text = console.summary(_outcomes())
    below = text.split("Environments of the notebooks that did not pass:\n", 1)[1].splitlines()
    assert below[0] == f"  nbs/fail.ipynb: {ENV}"
    assert below[1] == "3 notebook(s): 1 succeeded, 1 failed, 1 refused"
    assert "server's interpreter" not in text  # a notebook that passed: the table row is enough


def test_junit_has_the_environment_as_a_property_of_each_test_case(tmp_path):
    path = tmp_path / "junit.xml"
    junit.write(_outcomes(), str(path))
    cases = {c.get("name"): c for c in ET.parse(path).getroot().iter("testcase")}
    props = {name: {p.get("name"): p.get("value") for p in case.iter("property")} for name, case in cases.items()}
    assert props == {"ok.ipynb": {"nbvalidation.environment": "build disabled: the server's interpreter"},
                     "fail.ipynb": {"nbvalidation.environment": ENV}, "bad.ipynb": {}}
    assert f"environment: {ENV}" in cases["fail.ipynb"].find("system-out").text


def test_the_html_report_shows_each_environment():
    page = html.page(_outcomes())
    assert f'<p class="env">environment: {ENV}</p>' in page
    assert "environment: build disabled: the server&#x27;s interpreter" in page  # escaped


def test_describe_and_the_failed_verdict_say_the_environment():
    job = _job("fail", "Failed", "cell 2: KeyError: 'x'")
    text = render.describe(job, {"phases": []}, [])
    assert f"Environment:  {ENV}" in text.splitlines()
    assert render.environment_lines(_job("new", "Failed", "x", environment=None)) == []


def test_junit_suite_time_is_the_run_s_wall_time_and_a_cached_case_names_the_earlier_job(tmp_path):
    earlier = _job("ok-1", "Succeeded", "1 code cell ran without errors")
    outcomes = [*_outcomes(), Outcome(Item(Path("/r/nbs/same.ipynb"), "nbs/same.ipynb"), "Unchanged", 0.0, earlier,
                                      "unchanged since ok-1")]
    path = tmp_path / "junit.xml"
    junit.write(outcomes, str(path), wall=3.25)  # the notebooks ran in parallel: less than the sum (4.0)
    suite = ET.parse(path).getroot().find("testsuite")
    assert suite.get("time") == "3.250"
    cached = {c.get("name"): c for c in suite.iter("testcase")}["same.ipynb"]
    assert {p.get("name"): p.get("value") for p in cached.iter("property")} == {
        "nbvalidation.environment": ENV, "nbvalidation.cached": "unchanged since job ok-1"}
    assert junit.document(outcomes).find("testsuite").get("time") == "4.000"  # without it: the sum, as before
