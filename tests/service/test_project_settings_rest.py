"""The project settings routes (GET/PUT project-settings, the contract shared with the lab's
Options dialog) through a real Jupyter server, and a submitted spec filled from the file."""

from __future__ import annotations

import json
import os

import pytest
from helpers import REST_API, rest_wait_terminal, write_notebook
from helpers import rest_call as call
from tornado.httpclient import HTTPClientError

from jupyter_nbvalidation.core.model import Phase

NOBUILD = {"podConfig": {"buildConfig": {"enabled": False}}}

PYPROJECT = """\
# the project's own file: every byte of it outside its entry is kept
[project]
name = "course"   # a comment
version = "1.0"

[tool.nbvalidation]
cellTimeout = "60s"

[[tool.nbvalidation.notebooks]]
glob = "lessons/*/*.ipynb"
comparisonConfig = { floatingPointTolerance = 0.5 }

[tool.ruff]
line-length = 100
"""


@pytest.fixture
def course(jp_root_dir):
    (jp_root_dir / "pyproject.toml").write_text(PYPROJECT)
    write_notebook(jp_root_dir / "lessons" / "week1" / "analysis.ipynb", ["print(0.1)"])
    write_notebook(jp_root_dir / "lessons" / "week1" / "golden.ipynb", ["print(0.1)"])
    write_notebook(jp_root_dir / "other" / "free.ipynb", ["print(1)"])
    return jp_root_dir


async def error(jp_fetch, *parts, **kw):
    with pytest.raises(HTTPClientError) as e:
        await call(jp_fetch, *parts, **kw)
    return e.value.code, json.loads(e.value.response.body)


async def test_get_merges_defaults_and_matching_entries(jp_fetch, course):
    got = await call(jp_fetch, "project-settings", params={"notebook": "lessons/week1/analysis.ipynb"})
    assert got == {"file": "pyproject.toml", "exists": True, "entry": {},
                   "options": {"cellTimeout": "60s", "comparisonConfig": {"floatingPointTolerance": 0.5}}}
    got = await call(jp_fetch, "project-settings", params={"notebook": "other/free.ipynb"})
    assert got["options"] == {"cellTimeout": "60s"} and got["entry"] == {}


async def test_put_writes_the_entry_and_keeps_every_other_byte(jp_fetch, course):
    options = {"goldenNotebook": {"path": "golden.ipynb"}, "comparisonConfig": {"floatingPointTolerance": 0.01}}
    got = await call(jp_fetch, "project-settings", method="PUT",
                     body={"notebook": "lessons/week1/analysis.ipynb", "options": options})
    assert got["file"] == "pyproject.toml" and got["entry"] == options
    assert got["options"] == {"cellTimeout": "60s", **options}  # the own entry comes last: it wins
    text = (course / "pyproject.toml").read_text()
    assert text.startswith(PYPROJECT.split("[tool.ruff]")[0])
    assert text.endswith("[tool.ruff]\nline-length = 100\n")
    assert 'glob = "lessons/week1/analysis.ipynb"' in text
    assert await call(jp_fetch, "project-settings", params={"notebook": "lessons/week1/analysis.ipynb"}) == got

    again = await call(jp_fetch, "project-settings", method="PUT",
                       body={"notebook": "lessons/week1/analysis.ipynb", "options": {"timeout": "5m"}})
    assert again["entry"] == {"timeout": "5m"}  # replaced, not merged
    removed = await call(jp_fetch, "project-settings", method="PUT",
                         body={"notebook": "lessons/week1/analysis.ipynb", "options": {}})
    assert removed["entry"] == {}
    assert (course / "pyproject.toml").read_text() == PYPROJECT  # byte for byte


async def test_without_a_project_file_nbvalidation_toml_is_written_at_the_root(jp_fetch, jp_root_dir):
    write_notebook(jp_root_dir / "a" / "nb.ipynb", ["1"])
    # a repository below the root (no project file anywhere): its own folder (.git), not the root
    write_notebook(jp_root_dir / "repo" / "nb" / "x.ipynb", ["1"])
    (jp_root_dir / "repo" / ".git").mkdir()
    got = await call(jp_fetch, "project-settings", params={"notebook": "repo/nb/x.ipynb"})
    assert got["file"] == "repo/nbvalidation.toml" and not got["exists"]
    got = await call(jp_fetch, "project-settings", params={"notebook": "a/nb.ipynb"})
    assert got == {"file": "nbvalidation.toml", "exists": False, "options": {}, "entry": {}}
    got = await call(jp_fetch, "project-settings", method="PUT",
                     body={"notebook": "a/nb.ipynb", "options": {"cellTimeout": "90s"}})
    assert got == {"file": "nbvalidation.toml", "exists": True, "options": {"cellTimeout": "90s"},
                   "entry": {"cellTimeout": "90s"}}
    assert '[[notebooks]]\nglob = "a/nb.ipynb"\ncellTimeout = "90s"\n' in (jp_root_dir / "nbvalidation.toml").read_text()


@pytest.mark.parametrize("body,status,field", [
    ({"notebook": "lessons/week1/analysis.ipynb", "options": {"cellTimeout": "soon"}}, 400, "options.cellTimeout"),
    ({"notebook": "lessons/week1/analysis.ipynb", "options": {"bogus": 1}}, 400, "options.bogus"),
    ({"notebook": "lessons/week1/analysis.ipynb", "options": {"notebook": {"path": "x.ipynb"}}}, 400,
     "options.notebook"),
    ({"notebook": "lessons/week1/analysis.ipynb", "options": {"goldenNotebook": {"path": "../../../x.ipynb"}}}, 400,
     "options.goldenNotebook.path"),
    ({"notebook": "lessons/week1/analysis.ipynb", "options": {"parameters": {"x": None}}}, 400, "options.parameters"),
    ({"notebook": "lessons/week1/analysis.ipynb", "options": [1]}, 400, "options"),
    ({"notebook": "lessons/week1/analysis.ipynb"}, 400, "options"),
    ({"notebook": "lessons/week1/analysis.ipynb", "options": {}, "extra": 1}, 400, "extra"),
    ({"notebook": "nope.ipynb", "options": {}}, 404, "notebook"),
    ({"notebook": "../outside.ipynb", "options": {}}, 403, "notebook"),
])
async def test_a_bad_put_names_the_field_and_writes_nothing(jp_fetch, course, body, status, field):
    code, err = await error(jp_fetch, "project-settings", method="PUT", body=body)
    assert code == status and err["error"]["field"] == field, err
    assert (course / "pyproject.toml").read_text() == PYPROJECT
    assert not (course / "nbvalidation.toml").exists()


async def test_get_errors(jp_fetch, course):
    code, err = await error(jp_fetch, "project-settings", params={"notebook": "nope.ipynb"})
    assert code == 404
    code, err = await error(jp_fetch, "project-settings")
    assert code == 400 and err["error"]["field"] == "notebook"
    (course / "pyproject.toml").write_text(PYPROJECT.replace("floatingPointTolerance", "floatTolerance"))
    code, err = await error(jp_fetch, "project-settings", params={"notebook": "other/free.ipynb"})
    assert code == 400
    assert err["message"] == ("pyproject.toml:11: tool.nbvalidation.notebooks[0].comparisonConfig.floatTolerance: "
                              "unknown key: not a field of the job spec")
    assert err["error"]["message"] == err["message"]
    before = (course / "pyproject.toml").read_text()
    code, err = await error(jp_fetch, "project-settings", method="PUT",
                            body={"notebook": "other/free.ipynb", "options": {"timeout": "1m"}})
    assert code == 400 and (course / "pyproject.toml").read_text() == before  # nothing written
    (course / "pyproject.toml").write_text(PYPROJECT.replace('cellTimeout = "60s"', "cellTimeout = 60s"))
    code, err = await error(jp_fetch, "project-settings", params={"notebook": "other/free.ipynb"})
    assert code == 400 and err["message"].startswith("pyproject.toml:7: cellTimeout: not valid TOML"), err


async def test_symlinks_out_of_the_root_are_refused_and_nothing_is_written(jp_fetch, jp_root_dir, tmp_path):
    outside = tmp_path / "outside"
    write_notebook(outside / "nb.ipynb", ["1"])
    (outside / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    os.symlink(outside / "nb.ipynb", jp_root_dir / "link.ipynb")
    code, _ = await error(jp_fetch, "project-settings", params={"notebook": "link.ipynb"})
    assert code == 403
    code, _ = await error(jp_fetch, "project-settings", method="PUT",
                          body={"notebook": "link.ipynb", "options": {"timeout": "1m"}})
    assert code == 403
    write_notebook(jp_root_dir / "in" / "nb.ipynb", ["1"])
    os.symlink(outside / "pyproject.toml", jp_root_dir / "in" / "pyproject.toml")
    code, _ = await error(jp_fetch, "project-settings", method="PUT",
                          body={"notebook": "in/nb.ipynb", "options": {"timeout": "1m"}})
    assert code == 403
    assert (outside / "pyproject.toml").read_text() == "[project]\nname = 'x'\n"
    assert not (jp_root_dir / "nbvalidation.toml").exists()


async def test_put_needs_a_json_body_and_xsrf_for_a_cookie_session(jp_fetch, course, http_server_client,
                                                                   jp_base_url, jp_serverapp):
    body = json.dumps({"notebook": "other/free.ipynb", "options": {"timeout": "1m"}})
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch(*REST_API, "project-settings", method="PUT", body=body, headers={"Content-Type": "text/plain"})
    assert e.value.code == 415
    token = jp_serverapp.identity_provider.token
    login = await http_server_client.fetch(f"{jp_base_url}login?token={token}", follow_redirects=False,
                                           raise_error=False)
    cookies = "; ".join(c.split(";")[0] for c in login.headers.get_list("Set-Cookie"))
    with pytest.raises(HTTPClientError) as e:
        await http_server_client.fetch(f"{jp_base_url}nbvalidation/api/v1/project-settings", method="PUT",
                                       body=body, headers={"Cookie": cookies, "Content-Type": "application/json"},
                                       raise_error=True)
    assert e.value.code == 403
    assert (course / "pyproject.toml").read_text() == PYPROJECT


async def test_a_spec_that_leaves_fields_out_gets_them_from_the_file(jp_fetch, course):
    await call(jp_fetch, "project-settings", method="PUT",
               body={"notebook": "lessons/week1/analysis.ipynb",
                     "options": {"goldenNotebook": {"path": "golden.ipynb"}, "timeout": "2m"}})
    job = await call(jp_fetch, "jobs", method="POST",
                     body={"notebook": {"path": "lessons/week1/analysis.ipynb"}, "timeout": "3m", **NOBUILD})
    spec = job["spec"]  # stored resolved: describe tells the truth
    assert spec["goldenNotebook"] == {"path": "lessons/week1/golden.ipynb"}  # relative to the root in a spec
    assert spec["timeout"] == "3m"  # the request wins
    assert spec["cellTimeout"] == "60s" and spec["comparisonConfig"] == {"floatingPointTolerance": 0.5}
    done = await rest_wait_terminal(jp_fetch, job["metadata"]["name"], 120)
    assert done["status"]["phase"] == Phase.SUCCEEDED, done["status"]
    # a malformed file: the submit is refused naming the file, the line and the key, nothing created
    (course / "pyproject.toml").write_text(PYPROJECT.replace('cellTimeout = "60s"', 'cellTimeout = "soon"'))
    code, err = await error(jp_fetch, "jobs", method="POST",
                            body={"notebook": {"path": "other/free.ipynb"}, **NOBUILD})
    assert code == 400 and err["error"]["message"].startswith("pyproject.toml:7: tool.nbvalidation.cellTimeout:")
    assert len((await call(jp_fetch, "jobs"))["items"]) == 1


async def test_a_setting_the_backend_does_not_support_names_the_file(jp_fetch, course):
    (course / "pyproject.toml").write_text(PYPROJECT + '\n[tool.nbvalidation.podConfig]\nnodeSelector = { gpu = "yes" }\n')
    code, err = await error(jp_fetch, "jobs", method="POST",
                            body={"notebook": {"path": "other/free.ipynb"}, **NOBUILD})
    assert code == 400, err
    assert err["error"]["message"].startswith("pyproject.toml:17: tool.nbvalidation.podConfig.nodeSelector"), err


async def test_the_notebooks_own_metadata_wins_over_the_file(jp_fetch, jp_root_dir):
    """nbmake's metadata.execution (timeout, allow_errors) stays the notebook's word over the file's."""
    (jp_root_dir / "nbvalidation.toml").write_text('cellTimeout = "1s"\n')
    write_notebook(jp_root_dir / "plain.ipynb", ["import time\ntime.sleep(3)"])
    write_notebook(jp_root_dir / "own.ipynb", ["import time\ntime.sleep(3)", "1 / 0", "print('after')"],
                   metadata={"execution": {"timeout": 60, "allow_errors": True}})
    done = {}
    for nb in ("plain.ipynb", "own.ipynb"):
        job = await call(jp_fetch, "jobs", method="POST", body={"notebook": {"path": nb}, **NOBUILD})
        assert job["spec"]["cellTimeout"] == "1s"
        done[nb] = await rest_wait_terminal(jp_fetch, job["metadata"]["name"], 120)
    assert done["plain.ipynb"]["status"]["phase"] == Phase.FAILED  # the file's limit applies
    assert done["own.ipynb"]["status"]["phase"] == Phase.SUCCEEDED, done["own.ipynb"]["status"]
