"""The build log is served while the environment builds (GET /jobs/{name}/buildlog
with ?offset and the X-Build-Log-* headers), through a real Jupyter server, the
real local backend and a real (uv) build of a local package whose setup.py waits
until the test has seen the log partial."""

from __future__ import annotations

import json

import pytest
from helpers import held_setup_py, rest_wait_terminal, wait_async, write_notebook
from helpers import rest_call as call
from tornado.httpclient import HTTPClientError

from jupyter_nbvalidation.core.model import Phase


@pytest.fixture
def slow_build(jp_root_dir):
    """The build lasts until ``jp_root_dir / "release-build"`` exists (the test makes it)."""
    pkg = jp_root_dir / "slowpkg"
    pkg.mkdir()
    (pkg / "setup.py").write_text(held_setup_py(jp_root_dir / "release-build", "nbv-slowpkg", "nbv_slowpkg"))
    (pkg / "nbv_slowpkg.py").write_text("VALUE = 42\n")
    write_notebook(jp_root_dir / "uses_slow.ipynb", ["import nbv_slowpkg", "print(nbv_slowpkg.VALUE)"])
    (jp_root_dir / "requirements.txt").write_text("./slowpkg\n")
    return jp_root_dir


async def _log(jp_fetch, name, offset=0):
    r = await call(jp_fetch, "jobs", name, "buildlog", params={"offset": str(offset)}, raw=True)
    assert r.headers["Content-Type"].startswith("text/plain")
    return r.body, r.headers["X-Build-Log-Complete"], int(r.headers["X-Build-Log-Next-Offset"])


async def test_build_log_grows_while_building_then_completes(jp_fetch, slow_build):
    job = await call(jp_fetch, "jobs", method="POST", body={"notebook": {"path": "uses_slow.ipynb"}})
    name = job["metadata"]["name"]
    try:
        async def partial_log() -> tuple[bytes, int] | None:
            cur = await call(jp_fetch, "jobs", name)
            phase = cur["status"].get("phase")
            assert phase not in Phase.TERMINAL, f"the build ended before its log was seen partial: {cur['status']}"
            body, complete, nxt = await _log(jp_fetch, name)
            return (body, nxt) if phase == Phase.BUILDING and complete == "false" and b"pip install" in body else None

        partial = await wait_async(partial_log, 240, "a partial build log during Building", interval=0.2)
        assert partial is not None, "no partial build log during Building"
        body, nxt = partial
        assert nxt == len(body) and body.endswith(b"\n")  # whole lines only while the build runs
        assert b"kernel ready" not in body  # the build has not got there yet
    finally:  # whatever happened above, the build is not left waiting
        (slow_build / "release-build").touch()
    done = await rest_wait_terminal(jp_fetch, name, 300)
    assert done["status"]["phase"] == Phase.SUCCEEDED, done["status"]
    whole, complete, end = await _log(jp_fetch, name)
    assert complete == "true" and end == len(whole)
    assert whole.startswith(body) and len(whole) > len(body)  # it grew, and what was served stays true
    rest, complete, end2 = await _log(jp_fetch, name, nxt)  # the offset asks for the rest only
    assert complete == "true" and body + rest == whole and end2 == end
    assert b"kernel ready" in rest
    tail, _, end3 = await _log(jp_fetch, name, end + 1000)  # past the end: nothing, the end offset
    assert tail == b"" and end3 == end


async def test_build_log_offset_is_checked_and_no_build_is_404(jp_fetch, jp_root_dir):
    write_notebook(jp_root_dir / "ok.ipynb", ["print(1)"])
    job = await call(jp_fetch, "jobs", method="POST",
                     body={"notebook": {"path": "ok.ipynb"}, "podConfig": {"buildConfig": {"enabled": False}}})
    name = job["metadata"]["name"]
    with pytest.raises(HTTPClientError) as e:
        await call(jp_fetch, "jobs", name, "buildlog", params={"offset": "-1"})
    assert e.value.code == 400 and json.loads(e.value.response.body)["error"]["field"] == "offset"
    with pytest.raises(HTTPClientError) as e:
        await call(jp_fetch, "jobs", name, "buildlog", params={"offset": "abc"})
    assert e.value.code == 400
    await rest_wait_terminal(jp_fetch, name, 180)
    with pytest.raises(HTTPClientError) as e:
        await call(jp_fetch, "jobs", name, "buildlog")
    assert e.value.code == 404  # build disabled: no log, the panel hides its link
