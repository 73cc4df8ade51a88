"""Issue 44: a user's server on a hub whose validation service cannot be reached (a real Jupyter
server, pytest-jupyter, with NBVALIDATION_SERVICE_URL on a closed port): every route answers at
once with a 503 naming the service (infrastructure, not the notebook's), never a hang; a
notebook that is not there is the user's 404, found before anything is sent."""

from __future__ import annotations

import json
import socket
import time

import pytest
from helpers import rest_call as call
from helpers import write_notebook
from tornado.httpclient import HTTPClientError


@pytest.fixture(autouse=True)
def unreachable_service(monkeypatch):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/services/nbvalidation/"
    monkeypatch.setenv("NBVALIDATION_SERVICE_URL", url)
    return url


async def refused(jp_fetch, *parts, **kw):
    with pytest.raises(HTTPClientError) as e:
        await call(jp_fetch, *parts, **kw)
    return e.value.code, json.loads(e.value.response.body)["error"]


async def test_an_unreachable_service_is_a_503_naming_it_at_once(jp_fetch, jp_root_dir, unreachable_service):
    write_notebook(jp_root_dir / "nb.ipynb", ["print(1)"])
    t0 = time.monotonic()
    for parts, kw in ((("jobs",), {}), (("jobs",), {"method": "POST", "body": {"notebook": {"path": "nb.ipynb"}}}),
                      (("jobs", "x"), {}), (("health",), {})):
        code, err = await refused(jp_fetch, *parts, **kw)
        assert code == 503 and err["code"] == "ServiceUnavailable", err
        assert unreachable_service in err["message"]
    assert time.monotonic() - t0 < 30


async def test_a_missing_notebook_is_the_users_404_before_anything_is_sent(jp_fetch, jp_root_dir):
    code, err = await refused(jp_fetch, "jobs", method="POST", body={"notebook": {"path": "missing.ipynb"}})
    assert code == 404 and err["field"] == "notebook.path", err
    code, err = await refused(jp_fetch, "jobs", method="POST", body={"notebook": {"path": "../out.ipynb"}})
    assert code == 403 and err["field"] == "notebook.path", err
