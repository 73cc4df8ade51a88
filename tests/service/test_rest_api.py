"""REST API through a real Jupyter server (pytest-jupyter) with the real
local backend behind it."""

from __future__ import annotations

import asyncio
import json
import os

import pytest
from helpers import REST_API, rest_wait_terminal, wait_async, write_notebook
from helpers import rest_call as call
from tornado.httpclient import HTTPClientError

from jupyter_nbvalidation.core.model import Phase, Reason


async def error(jp_fetch, *parts, **kw):
    with pytest.raises(HTTPClientError) as e:
        await call(jp_fetch, *parts, **kw)
    body = json.loads(e.value.response.body)
    assert set(body) == {"error"} and {"code", "message", "field"} <= set(body["error"])
    return e.value.code, body["error"]


async def wait_terminal(jp_fetch, name, timeout=180):
    return await rest_wait_terminal(jp_fetch, name, timeout)


@pytest.fixture
def nbs(jp_root_dir):
    write_notebook(jp_root_dir / "ok.ipynb", ["print(2 + 2)"])
    write_notebook(jp_root_dir / "sub" / "bad.ipynb", ["x = 1", "x / 0"])
    (jp_root_dir / "notjson.ipynb").write_text("{ this is not json")
    write_notebook(jp_root_dir / "r.ipynb", ["print(1)"],
                   metadata={"kernelspec": {"name": "ir", "display_name": "R", "language": "R"}})
    write_notebook(jp_root_dir / "julia.ipynb", ["1 + 1"], metadata={"kernelspec": {}, "language_info": {"name": "julia"}})
    (jp_root_dir / "invalid.ipynb").write_text(json.dumps({"cells": "nope", "nbformat": 4, "nbformat_minor": 5}))
    return jp_root_dir


NOBUILD = {"podConfig": {"buildConfig": {"enabled": False}}}


async def test_submit_get_list_events_timeline_notebook(jp_fetch, nbs):
    r = await call(jp_fetch, "jobs", method="POST", body={"notebook": {"path": "ok.ipynb"}, **NOBUILD}, raw=True)
    assert r.code == 201
    job = json.loads(r.body)
    name = job["metadata"]["name"]
    assert r.headers["Location"].endswith(f"/jobs/{name}")
    assert job["apiVersion"] == "nbvalidation.dev/v1alpha1" and job["kind"] == "NotebookValidationJob"
    done = await wait_terminal(jp_fetch, name)
    assert done["status"]["phase"] == Phase.SUCCEEDED, done["status"]

    listed = await call(jp_fetch, "jobs")
    assert [j["metadata"]["name"] for j in listed["items"]] == [name]
    assert (await call(jp_fetch, "jobs", params={"notebook": "ok.ipynb"}))["items"][0]["metadata"]["name"] == name
    assert (await call(jp_fetch, "jobs", params={"notebook": "other.ipynb"}))["items"] == []

    seen: dict = {}

    async def three_events() -> list | None:  # events are posted just after the status write
        seen["events"] = events = (await call(jp_fetch, "jobs", name, "events"))["items"]
        return events if len(events) == 3 else None

    events = await wait_async(three_events, 2, lambda: f"three events: {seen['events']}")
    assert [e["reason"] for e in events] == [Reason.ACCEPTED, Reason.VALIDATION_STARTED, Reason.VALIDATION_SUCCEEDED]
    for e in events:
        assert {"reason", "type", "note", "action", "eventTime", "regarding", "reportingController",
                "reportingInstance"} <= set(e)
        assert e["regarding"]["name"] == name and e["regarding"]["uid"] == job["metadata"]["uid"]

    tl = await call(jp_fetch, "jobs", name, "timeline")
    assert tl["source"] == "events" and tl["terminal"]
    assert [p["phase"] for p in tl["phases"]] == [Phase.INITIALIZING, Phase.VALIDATION_RUNNING, Phase.SUCCEEDED]
    assert all(p["durationSeconds"] >= 0 for p in tl["phases"])

    nb = await call(jp_fetch, "jobs", name, "notebook")
    assert nb["cells"][0]["outputs"][0]["text"] == "4\n"


async def test_pagination_newest_first(jp_fetch, nbs):
    names = []
    for _ in range(5):
        job = await call(jp_fetch, "jobs", method="POST", body={"notebook": {"path": "ok.ipynb"}, **NOBUILD})
        names.append(job["metadata"]["name"])
        await asyncio.sleep(0.002)
    seen, token = [], None
    while True:
        params = {"limit": "2"} | ({"continue": token} if token else {})
        page = await call(jp_fetch, "jobs", params=params)
        seen += [j["metadata"]["name"] for j in page["items"]]
        token = page["metadata"]["continue"]
        if not token:
            break
    assert seen == list(reversed(names))
    code, err = await error(jp_fetch, "jobs", params={"continue": "garbage!"})
    assert code == 400 and err["field"] == "continue"
    code, err = await error(jp_fetch, "jobs", params={"limit": "0"})
    assert code == 400 and err["field"] == "limit"
    for name in names:
        await call(jp_fetch, "jobs", name, method="DELETE")


async def test_cancel(jp_fetch, nbs, jp_root_dir):
    write_notebook(jp_root_dir / "slow.ipynb", ["import time\ntime.sleep(60)"])
    job = await call(jp_fetch, "jobs", method="POST", body={"notebook": {"path": "slow.ipynb"}, **NOBUILD})
    name = job["metadata"]["name"]
    async def running() -> bool:
        return (await call(jp_fetch, "jobs", name))["status"].get("phase") == Phase.VALIDATION_RUNNING

    await wait_async(running, 60, f"{name} to run its slow cell", interval=0.1)
    r = await call(jp_fetch, "jobs", name, method="DELETE", raw=True)
    assert r.code == 202
    done = await wait_terminal(jp_fetch, name, 30)
    assert (done["status"]["phase"], done["status"]["reason"]) == (Phase.FAILED, Reason.CANCELLED)


@pytest.mark.parametrize("body,status,field", [
    ("{not json", 400, None),
    ("[1, 2]", 400, "spec"),
    ({"notebook": {"path": "ok.ipynb"}, "surprise": 1}, 400, "spec.surprise"),
    ({"notebook": {"path": "ok.ipynb", "git": {"url": "x"}}}, 400, "spec.notebook.git.ref"),  # (git sources: issue 45)
    ({"notebook": {"path": "ok.ipynb", "git": {"url": "x", "ref": "main"}}}, 400, "spec.notebook.git.url"),
    ({"notebook": {"path": "ok.ipynb"}, "podConfig": {"containerImage": "python:3.12"}}, 400,
     "spec.podConfig.containerImage"),
    ({"notebook": {"path": "ok.ipynb"}, "timeout": "soon"}, 400, "spec.timeout"),
    ({"notebook": {"path": "ok.ipynb"}, "comparisonConfig": {"strategy": "fuzzy"}}, 400,
     "spec.comparisonConfig.strategy"),
    ({"notebook": {"path": "ok.ipynb"}, "comparisonConfig": {"customTimestampPatterns": ["("]}}, 400,
     "spec.comparisonConfig.customTimestampPatterns[0]"),
    ({"notebook": {"path": "ok.ipynb"}, "comparisonConfig": {"ignoreOutputTypes": ["stream", "pictures"]}}, 400,
     "spec.comparisonConfig.ignoreOutputTypes[1]"),
    ({"notebook": {"path": "ok.ipynb"}, "podConfig": {"env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {}}}]}},
     400, "spec.podConfig.env[0].valueFrom"),
    ({"notebook": {"path": "ok.ipynb"}, "podConfig": {"env": [{"name": "PATH", "value": "/tmp"}]}}, 400,
     "spec.podConfig.env[0].name"),
    ({"notebook": {"path": "ok.ipynb"}, "podConfig": {"resources": {"limits": {"cpu": "1"}}}}, 400,
     "spec.podConfig.resources.limits.cpu"),
    ({"notebook": {"path": "ok.ipynb"}, "podConfig": {"resources": {"requests": {"memory": "1Gi"}}}}, 400,
     "spec.podConfig.resources.requests"),
    ({"notebook": {"path": "ok.ipynb"}, "podConfig": {"nodeSelector": {"gpu": "true"}}}, 400,
     "spec.podConfig.nodeSelector"),
    *[({"notebook": {"path": "ok.ipynb"}, "podConfig": {"env": [{"name": "A", "value": "1"}, {"name": name, "value": "x"}]}},
       400, "spec.podConfig.env[1].name")
      for name in ("LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "PYTHONSTARTUP", "PYTHONHOME", "PYTHONINSPECT",
                   "NBVALIDATION_SANDBOX", "JPY_PARENT_PID")],
    ({"notebook": {}}, 400, "spec.notebook.path"),
    ({"notebook": {"path": "ok.txt"}}, 400, "spec.notebook.path"),
    ({"notebook": {"path": "../outside.ipynb"}}, 403, "spec.notebook.path"),
    ({"notebook": {"path": "/etc/passwd.ipynb"}}, 403, "spec.notebook.path"),
    ({"notebook": {"path": "missing.ipynb"}}, 404, "spec.notebook.path"),
    ({"notebook": {"path": "notjson.ipynb"}}, 400, "spec.notebook.path"),
    ({"notebook": {"path": "invalid.ipynb"}}, 400, "spec.notebook.path"),
    ({"notebook": {"path": "r.ipynb"}}, 400, "spec.notebook.path"),
    ({"notebook": {"path": "julia.ipynb"}}, 400, "spec.notebook.path"),
    ({"notebook": {"path": "ok.ipynb"}, "goldenNotebook": {"path": "missing.ipynb"}}, 404,
     "spec.goldenNotebook.path"),
    ({"notebook": {"path": "ok.ipynb"}, "podConfig": {"buildConfig": {"requirementsFile": "nope.txt"}}}, 404,
     "spec.podConfig.buildConfig.requirementsFile"),
])
async def test_bad_input_is_refused_and_creates_nothing(jp_fetch, nbs, jp_serverapp, body, status, field):
    code, err = await error(jp_fetch, "jobs", method="POST", body=body)
    assert code == status, err
    if field:
        assert err["field"] == field, err
        assert field.split(".")[-1] in err["message"]
    assert (await call(jp_fetch, "jobs"))["items"] == []
    backend = jp_serverapp.web_app.settings["nbvalidation_service"].backend
    assert not (backend.root / "jobs").exists() or not any((backend.root / "jobs").iterdir())


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded",
                                          "text/plain;charset=UTF-8", "application/json; charset=latin-1",
                                          "application/jsonx"])
async def test_a_body_not_declared_as_json_is_415_and_creates_nothing(jp_fetch, nbs, jp_serverapp, content_type):
    """A text/plain (or form) POST is a cross-site "simple request" a browser sends from any page
    without asking first: only a body declared as application/json is read."""
    body = json.dumps({"notebook": {"path": "ok.ipynb"}, **NOBUILD})
    for path in (("jobs",), ("unchanged",)):
        with pytest.raises(HTTPClientError) as e:
            await jp_fetch(*REST_API, *path, method="POST", body=body, raise_error=True,
                           headers={"Content-Type": content_type or ""})
        err = json.loads(e.value.response.body)["error"]
        assert e.value.code == 415 and err["code"] == "UnsupportedMediaType", err
        assert "Content-Type: application/json" in err["message"] and err["field"] == "Content-Type"
        assert (content_type or "no Content-Type header") in err["message"]
    assert (await call(jp_fetch, "jobs"))["items"] == []
    backend = jp_serverapp.web_app.settings["nbvalidation_service"].backend
    assert not (backend.root / "jobs").exists() or not any((backend.root / "jobs").iterdir())


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8",
                                          "Application/JSON;charset=UTF-8"])
async def test_a_body_declared_as_json_is_read(jp_fetch, nbs, content_type):
    r = await jp_fetch(*REST_API, "jobs", method="POST", headers={"Content-Type": content_type},
                       body=json.dumps({"notebook": {"path": "ok.ipynb"}, **NOBUILD}))
    assert r.code == 201
    done = await wait_terminal(jp_fetch, json.loads(r.body)["metadata"]["name"])
    assert done["status"]["phase"] == Phase.SUCCEEDED, done["status"]


async def test_a_notebook_outside_the_root_real_or_through_a_link_is_refused(jp_fetch, nbs, jp_serverapp,
                                                                             jp_root_dir, tmp_path_factory):
    """A real notebook outside the server root, named by a relative path, by an absolute one, or
    reached through a link in the root (to it, or to its folder): 403 or 404, nothing created."""
    outside = tmp_path_factory.mktemp("outside")
    write_notebook(outside / "secret.ipynb", ["print('read from outside the root')"])
    (jp_root_dir / "link.ipynb").symlink_to(outside / "secret.ipynb")
    (jp_root_dir / "linkdir").symlink_to(outside, target_is_directory=True)
    relative = os.path.relpath(outside / "secret.ipynb", jp_root_dir)
    for path in (relative, str(outside / "secret.ipynb"), "link.ipynb", "linkdir/secret.ipynb"):
        code, err = await error(jp_fetch, "jobs", method="POST", body={"notebook": {"path": path}, **NOBUILD})
        assert code in (403, 404) and err["field"] == "spec.notebook.path", (path, code, err)
    assert (await call(jp_fetch, "jobs"))["items"] == []
    backend = jp_serverapp.web_app.settings["nbvalidation_service"].backend
    assert not (backend.root / "jobs").exists() or not any((backend.root / "jobs").iterdir())


async def test_size_limit_413(jp_fetch, nbs, jp_serverapp, jp_root_dir):
    write_notebook(jp_root_dir / "big.ipynb", ["x = '" + "a" * 5000 + "'"])
    jp_serverapp.web_app.settings["nbvalidation_service"].max_notebook_bytes = 2000
    code, err = await error(jp_fetch, "jobs", method="POST", body={"notebook": {"path": "big.ipynb"}})
    assert code == 413 and "2000" in err["message"] and err["field"] == "spec.notebook.path"
    assert (await call(jp_fetch, "jobs"))["items"] == []


async def test_unknown_job_404_and_no_notebook_yet(jp_fetch, nbs):
    for sub in [(), ("events",), ("timeline",), ("notebook",), ("buildlog",)]:
        code, err = await error(jp_fetch, "jobs", "nope-123", *sub)
        assert code == 404
    code, _ = await error(jp_fetch, "jobs", "nope-123", method="DELETE")
    assert code == 404


async def test_failed_job_details_and_build_log(jp_fetch, nbs):
    job = await call(jp_fetch, "jobs", method="POST", body={"notebook": {"path": "sub/bad.ipynb"}})
    done = await wait_terminal(jp_fetch, job["metadata"]["name"])
    st = done["status"]
    assert st["phase"] == Phase.FAILED and st["failedCellIndex"] == 1
    assert st["results"][1]["errorName"] == "ZeroDivisionError"
    log = await call(jp_fetch, "jobs", job["metadata"]["name"], "buildlog", raw=True)
    assert log.headers["Content-Type"].startswith("text/plain") and b"environment" in log.body


async def test_health_and_openapi(jp_fetch):
    h = await call(jp_fetch, "health")
    assert h["backend"] == "local" and h["usable"] is True and h["engine"]["running"] is True
    doc = await call(jp_fetch, "openapi.json")
    assert doc["openapi"].startswith("3.") and "/jobs/{name}/timeline" in doc["paths"]


async def test_every_route_requires_credentials(jp_fetch, jp_serverapp, nbs, http_server_client, jp_base_url):
    """Enumerate the extension's routes; none answers without a token."""
    from jupyter_nbvalidation.service.handlers import routes

    paths = []
    for pattern, handler in routes():
        path = pattern.replace("(?P<name>[A-Za-z0-9][A-Za-z0-9._-]{0,252})", "some-job").rstrip("/?")
        methods = [m for m in ("GET", "POST", "PUT", "DELETE") if m.lower() in handler.__dict__]
        paths += [(m, path) for m in methods]
    assert len(paths) >= 10
    for method, path in paths:
        url = jp_base_url.rstrip("/") + path
        body = "{}" if method in ("POST", "PUT") else None
        with pytest.raises(HTTPClientError) as e:
            await http_server_client.fetch(url, method=method, body=body, raise_error=True)
        assert e.value.code in (401, 403), (method, path, e.value.code)
    assert any(m == "PUT" and p.endswith("project-settings") for m, p in paths)
    assert (await call(jp_fetch, "jobs"))["items"] == []


async def test_post_without_xsrf_from_a_cookie_session_is_refused(jp_fetch, http_server_client, jp_base_url,
                                                                  jp_serverapp, nbs):
    """A browser session (cookie, no token) must send the XSRF token to POST."""
    token = jp_serverapp.identity_provider.token
    login = await http_server_client.fetch(f"{jp_base_url}login?token={token}", follow_redirects=False,
                                           raise_error=False)
    cookies = "; ".join(c.split(";")[0] for c in login.headers.get_list("Set-Cookie"))
    with pytest.raises(HTTPClientError) as e:
        await http_server_client.fetch(f"{jp_base_url}nbvalidation/api/v1/jobs", method="POST",
                                       body=json.dumps({"notebook": {"path": "ok.ipynb"}}),
                                       headers={"Cookie": cookies}, raise_error=True)
    assert e.value.code == 403
    assert (await call(jp_fetch, "jobs"))["items"] == []


async def test_live_updates_on_the_jupyter_event_bus(jp_fetch, jp_ws_fetch, nbs):
    ws = await jp_ws_fetch("api", "events", "subscribe")
    job = await call(jp_fetch, "jobs", method="POST", body={"notebook": {"path": "ok.ipynb"}, **NOBUILD})
    got = []
    while not got or got[-1]["phase"] not in Phase.TERMINAL:
        msg = json.loads(await asyncio.wait_for(ws.read_message(), 120))
        if msg.get("schema_id") == "https://nbvalidation.dev/events/job/v1":
            assert msg["name"] == job["metadata"]["name"]
            got.append(msg)
    ws.close()
    assert [m["reason"] for m in got] == [Reason.ACCEPTED, Reason.VALIDATION_STARTED, Reason.VALIDATION_SUCCEEDED]
    assert [m["phase"] for m in got] == [Phase.INITIALIZING, Phase.VALIDATION_RUNNING, Phase.SUCCEEDED]


async def test_a_store_not_reachable_yet_answers_503_not_500(jp_fetch, jp_serverapp, monkeypatch):
    """A server just started (its Kubernetes store not synced) or a store that cannot be reached:
    a 503 with Retry-After and the stable error body, never 'Internal error'."""
    from jupyter_nbvalidation.store.base import StoreError

    service = jp_serverapp.web_app.settings["nbvalidation_service"]

    async def not_started(name):
        raise StoreError("the Kubernetes store is not started")

    monkeypatch.setattr(service.store, "get", not_started)
    with pytest.raises(HTTPClientError) as e:
        await call(jp_fetch, "jobs", "some-job")
    assert e.value.code == 503 and e.value.response.headers["Retry-After"] == "1"
    body = json.loads(e.value.response.body)["error"]
    assert body["code"] == "StoreUnavailable" and "not started" in body["message"], body
