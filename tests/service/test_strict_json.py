"""Standard JSON in and out, and bounded specs, through a real Jupyter
server: non-finite and overlong numbers, deep nesting and out-of-range
values are a 400 naming the field (never a 5xx, nothing created), and every
answer parses with a strict parser, even for a job stored with a
non-finite number before these checks existed."""

from __future__ import annotations

import json

import pytest
from helpers import write_notebook
from tornado.httpclient import HTTPClientError

from jupyter_nbvalidation.core.model import new_job
from jupyter_nbvalidation.core.spec_table import MAX_ENV_ITEMS

API = ("nbvalidation", "api", "v1")


def strict(text: str | bytes):
    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


async def post_raw(jp_fetch, body: str | bytes) -> tuple[int, dict]:
    try:
        r = await jp_fetch(*API, "jobs", method="POST", body=body, headers={"Content-Type": "application/json"})
        return r.code, strict(r.body)
    except HTTPClientError as e:
        return e.code, strict(e.response.body)


NB = '{"notebook": {"path": "nb.ipynb"}, "podConfig": {"buildConfig": {"enabled": false}}, '


@pytest.mark.parametrize("tail,field,words", [
    ('"cellTimeout": NaN}', "spec.cellTimeout", "NaN"),
    ('"cellTimeout": Infinity}', "spec.cellTimeout", "Infinity"),
    ('"timeout": -Infinity}', "spec.timeout", "-Infinity"),
    ('"cellTimeout": 1e400}', "spec.cellTimeout", "out of range"),
    ('"cellTimeout": ' + "9" * 400 + "}", "spec.cellTimeout", "over 40 characters"),
    ('"cellTimeout": 1' + "0" * 399 + ".5}", "spec.cellTimeout", "over 40 characters"),
    ('"cellTimeout": 1e308}', "spec.cellTimeout", "at most 24h"),
    ('"cellTimeout": "25h"}', "spec.cellTimeout", "at most 24h"),
    ('"timeout": "' + "9" * 400 + 's"}', "spec.timeout", "at most 64 characters"),
    ('"comparisonConfig": {"floatingPointTolerance": NaN}}', "spec.comparisonConfig.floatingPointTolerance", "NaN"),
    ('"comparisonConfig": {"relativeTolerance": 1e300}}', "spec.comparisonConfig.relativeTolerance", "at most"),
    ('"surprise": [1, {"x": Infinity}]}', "spec.surprise[1].x", "Infinity"),
    ('"podConfig": {"env": ' + json.dumps([{"name": f"V{i}", "value": "x"} for i in range(MAX_ENV_ITEMS + 1)])
     + "}}", "spec.podConfig.env", f"the limit is {MAX_ENV_ITEMS}"),
    ('"podConfig": {"env": [{"name": "BIG", "value": "' + "x" * 40000 + '"}]}}', "spec.podConfig.env[0].value",
     "the limit is 32768"),
    ('"comparisonConfig": {"customTimestampPatterns": ' + json.dumps(["a"] * 51) + "}}",
     "spec.comparisonConfig.customTimestampPatterns", "the limit is 50"),
    ('"podConfig": {"buildConfig": {"requirements": ' + json.dumps(["six"] * 501) + "}}}",
     "spec.podConfig.buildConfig.requirements", "the limit is 500"),
])
async def test_non_finite_and_out_of_range_numbers_name_the_field(jp_fetch, jp_root_dir, tail, field, words):
    write_notebook(jp_root_dir / "nb.ipynb", ["print(1)"])
    body = NB + tail
    if '"podConfig"' in tail:  # replace the default podConfig
        body = '{"notebook": {"path": "nb.ipynb"}, ' + tail
    code, answer = await post_raw(jp_fetch, body)
    assert code == 400, answer
    assert answer["error"]["field"] == field and words in answer["error"]["message"], answer
    r = await jp_fetch(*API, "jobs")
    assert strict(r.body)["items"] == []


@pytest.mark.parametrize("body", [
    "[" * 10000 + "]" * 10000,
    '{"notebook": ' + '{"a": ' * 10000 + "1" + "}" * 10000 + "}",
    "[" * 100000,
    '{"notebook": {"path": "nb.ipynb"}, "x": "\\ud800"}',
    "NaN",
    "1e999999",
    "9" * 5000,
    '{"notebook": {"path": "nb.ipynb"}} trailing',
    b"\xff\xfe{}",
])
async def test_parser_limits_answer_400_never_500(jp_fetch, jp_root_dir, body):
    write_notebook(jp_root_dir / "nb.ipynb", ["print(1)"])
    code, answer = await post_raw(jp_fetch, body)
    assert code == 400, answer
    assert set(answer) == {"error"}


async def test_a_body_over_the_size_limit_is_413(jp_fetch, jp_root_dir):
    write_notebook(jp_root_dir / "nb.ipynb", ["print(1)"])
    env = [{"name": f"V{i}", "value": "x" * 9000} for i in range(1000)]  # a 9 MB env list
    code, answer = await post_raw(jp_fetch, json.dumps({"notebook": {"path": "nb.ipynb"}, "podConfig": {"env": env}}))
    assert code == 413 and "limit" in answer["error"]["message"], answer


async def test_a_job_stored_with_infinity_is_served_as_standard_json(jp_fetch, jp_serverapp, jp_root_dir):
    """Jobs accepted before the checks may hold Infinity; no answer carries it."""
    store = jp_serverapp.web_app.settings["nbvalidation_service"].backend.store
    job = new_job({"notebook": {"path": "nb.ipynb"}, "cellTimeout": float("inf"),
                   "comparisonConfig": {"floatingPointTolerance": float("nan")}})
    job["metadata"]["uid"] = "u-inf"
    await store.create(job)
    name = job["metadata"]["name"]
    for parts in (("jobs",), ("jobs", name), ("jobs", name, "events"), ("jobs", name, "timeline"), ("health",),
                  ("openapi.json",)):
        r = await jp_fetch(*API, *parts)
        strict(r.body)
        assert b"Infinity" not in r.body and b"NaN" not in r.body
    got = strict((await jp_fetch(*API, "jobs", name)).body)
    assert got["spec"]["cellTimeout"] is None
