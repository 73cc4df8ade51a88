"""Issue 44, the parts without a Hub: what a user's server sends with a submit (hub/upload.py),
what the service accepts of it, and the hub-config lines as a Hub's config file runs them."""

from __future__ import annotations

import base64
import os

import pytest
from helpers import write_notebook
from traitlets.config import Config
from traitlets.config.loader import LazyConfigValue

from jupyter_nbvalidation.cli.main import main
from jupyter_nbvalidation.hub.config import hub_config
from jupyter_nbvalidation.hub.upload import pack, unpack
from jupyter_nbvalidation.service.errors import ApiError


def test_a_submit_carries_the_notebooks_folder_the_golden_and_the_files_above_it(tmp_path):
    root = tmp_path / "root"
    write_notebook(root / "proj" / "nbs" / "a.ipynb", ["print(1)"])
    (root / "proj" / "nbs" / "data" / "x.csv").parent.mkdir(parents=True)
    (root / "proj" / "nbs" / "data" / "x.csv").write_text("1\n")
    (root / "proj" / "nbs" / ".git").mkdir()
    (root / "proj" / "nbs" / ".git" / "config").write_text("secret")
    (root / "proj" / "requirements.txt").write_text("six\n")
    (root / "proj" / "other").mkdir()
    (root / "proj" / "other" / "private.txt").write_text("not sent")
    (root / "top.txt").write_text("top")
    write_notebook(root / "golden" / "a.golden.ipynb", ["print(1)"])
    spec = {"notebook": {"path": "proj/nbs/a.ipynb"}, "goldenNotebook": {"path": "golden/a.golden.ipynb"}}
    upload = pack(spec, str(root))
    assert sorted(upload["files"]) == ["golden/a.golden.ipynb", "proj/nbs/a.ipynb", "proj/nbs/data/x.csv",
                                       "proj/requirements.txt", "top.txt"]
    assert upload["spec"] == spec
    # the service lays them out as they were
    spec_back = unpack(upload, str(tmp_path / "into"))
    assert spec_back == spec
    assert (tmp_path / "into" / "proj" / "nbs" / "data" / "x.csv").read_text() == "1\n"
    assert oct(os.stat(tmp_path / "into").st_mode & 0o777) == "0o700"


def test_a_notebook_outside_the_root_is_refused_at_the_users_server(tmp_path):
    with pytest.raises(ApiError) as e:
        pack({"notebook": {"path": "../x.ipynb"}}, str(tmp_path))
    assert e.value.status == 403 and e.value.field == "notebook.path"


@pytest.mark.parametrize("path", ["../escape.txt", "/etc/passwd", "a/../../b", "a\\b", ""])
def test_an_upload_path_outside_its_folder_is_refused_and_nothing_is_written_outside(tmp_path, path):
    body = {"kind": "NotebookValidationUpload", "spec": {}, "files": {path: base64.b64encode(b"x").decode()}}
    with pytest.raises(ApiError) as e:
        unpack(body, str(tmp_path / "into"))
    assert e.value.status == 400 and e.value.field == "files"
    assert not (tmp_path / "escape.txt").exists()


def test_an_upload_with_an_unknown_field_or_bad_base64_is_refused(tmp_path):
    with pytest.raises(ApiError) as e:
        unpack({"kind": "NotebookValidationUpload", "spec": {}, "files": {}, "extra": 1}, str(tmp_path / "a"))
    assert e.value.status == 400 and e.value.field == "extra"
    with pytest.raises(ApiError) as e:
        unpack({"kind": "NotebookValidationUpload", "spec": {}, "files": {"a": "not base64!"}}, str(tmp_path / "b"))
    assert e.value.status == 400 and "base64" in e.value.message


def run_config(text: str, c: Config | None = None) -> Config:
    """``text`` run as a Hub's config file runs it, then each value as the Hub reads it (a list or
    dict added to where the file set none is a LazyConfigValue, resolved against the trait's default)."""
    c = Config() if c is None else c
    exec(text, {"c": c, "get_config": lambda: c})
    for section in c.values():
        for key, value in list(section.items()):
            if isinstance(value, LazyConfigValue):
                section[key] = value.get_value({} if key in ("custom_scopes", "environment") else [])
    return c


def test_hub_config_lines_run_in_a_hub_config_file_and_add_to_what_it_has():
    c = Config()
    c.JupyterHub.services = [{"name": "other", "api_token": "x"}]
    c.Spawner.environment = {"KEEP": "1"}
    run_config(hub_config("local", "http://127.0.0.1:9999", "nbv", "/srv/nbv"), c)
    names = [s["name"] for s in c.JupyterHub.services]
    assert names == ["other", "nbv"]
    service = c.JupyterHub.services[1]
    assert service["url"] == "http://127.0.0.1:9999" and service["command"][-4:] == ["--name", "nbv", "--data-dir",
                                                                                  "/srv/nbv"]
    assert c.Spawner.environment == {"KEEP": "1", "NBVALIDATION_SERVICE_URL": "http://127.0.0.1:9999/services/nbv/"}
    roles = {r["name"]: r for r in c.JupyterHub.load_roles}
    assert "access:services!service=nbv" in roles["user"]["scopes"] and "self" in roles["user"]["scopes"]
    assert "access:services!service=nbv" in roles["server"]["scopes"]
    assert "custom:nbvalidation:admin" in roles["nbv-admin"]["scopes"]
    assert set(c.JupyterHub.custom_scopes) == {"custom:nbvalidation:admin", "custom:nbvalidation:metrics"}


def test_hub_config_for_kubernetes_is_an_external_service_with_a_token(monkeypatch):
    monkeypatch.setenv("NBVALIDATION_SERVICE_TOKEN", "t0ken")
    c = run_config(hub_config("kubernetes"))
    service = c.JupyterHub.services[0]
    assert "command" not in service and service["api_token"] == "t0ken"
    assert service["url"] == "http://nbvalidation:8000"


def test_the_hub_config_command_prints_the_lines(capsys):
    assert main(["hub-config", "--url", "http://127.0.0.1:1234"]) == 0
    out = capsys.readouterr().out
    assert "c.JupyterHub.services.append(" in out and "http://127.0.0.1:1234/services/nbvalidation/" in out
