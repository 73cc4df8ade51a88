"""Every job records the environment its kernel ran in (issue 22): Python, platform, every
distribution with its exact version and source, the tool's identity; served at
GET /jobs/{name}/environment and shown by ``describe``. Real Jupyter server, real local
backend, real uv builds and kernels; the record is read with the kernel's own interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import make_local_package as _local_package
from helpers import rest_call as call
from helpers import rest_wait_terminal, write_notebook
from tornado.httpclient import HTTPClientError

import jupyter_nbvalidation.verdict.environment_record as envrec
from jupyter_nbvalidation.cli.render import environment_block
from jupyter_nbvalidation.core.model import Phase


def _python_of(env_dir: str) -> dict:
    out = subprocess.run([str(Path(env_dir) / "bin" / "python"), "-c",
                          "import json, platform; print(json.dumps([platform.python_version(), "
                          "platform.python_implementation()]))"], capture_output=True, text=True, check=True)
    version, impl = json.loads(out.stdout)
    return {"version": version, "implementation": impl}


async def test_a_built_environment_is_recorded_exactly_and_read_once(jp_fetch, jp_serverapp, jp_root_dir):
    write_notebook(jp_root_dir / "p" / "nb.ipynb", ["import six, mylocalpkg\nprint(six.__version__)"])
    _local_package(jp_root_dir / "p" / "src" / "mylocalpkg", 1)
    (jp_root_dir / "p" / "requirements.txt").write_text("six==1.16.0\n./src/mylocalpkg\n")
    names = []
    for _ in range(2):  # the second job reuses the environment: its distributions are not read again
        job = await call(jp_fetch, "jobs", method="POST", body={"notebook": {"path": "p/nb.ipynb"}})
        names.append(job["metadata"]["name"])
        done = await rest_wait_terminal(jp_fetch, names[-1], 400)
        assert done["status"]["phase"] == Phase.SUCCEEDED, done["status"]
    env_dir = done["status"]["buildStatus"]["imageReference"]
    first, second = [await call(jp_fetch, "jobs", n, "environment") for n in names]

    assert (first["apiVersion"], first["kind"]) == (envrec.API_VERSION, envrec.KIND)
    assert "error" not in first, first.get("error")
    assert {k: first["python"][k] for k in ("version", "implementation")} == _python_of(env_dir)
    by_name = {envrec.normalize(d["name"]): d for d in first["distributions"]}
    assert by_name["six"]["version"] == "1.16.0" and by_name["six"]["source"] == {"kind": "index"}
    assert "ipykernel" in by_name  # the kernel's own packages are part of the environment
    local = by_name["mylocalpkg"]
    assert (local["version"], local["source"]["kind"]) == ("1.0", "local")
    marker = json.loads((Path(env_dir) / ".nbvalidation-env.json").read_text())
    assert local["source"]["contentHash"] == marker["local"][local["source"]["path"]]  # the key's own hash
    assert "jupyter-nbvalidation" not in by_name and "jupyter-server" not in by_name  # not the server's
    assert first["environment"]["kind"] == "built"
    assert first["environment"]["key"] == marker["key"] and "six==1.16.0" in first["environment"]["requirements"]
    assert first["tool"]["name"] == "jupyter-nbvalidation" and first["tool"]["sources"]
    # read once per environment: the second job's record is the same reading
    assert second["takenAt"] == first["takenAt"] and second["distributions"] == first["distributions"]

    shown = environment_block(done, first)
    assert "Environment:" in shown and f"Python {first['python']['version']}" in shown
    assert "six 1.16.0" in shown and "mylocalpkg 1.0 (local: " in shown


async def test_build_disabled_records_the_interpreter_the_kernel_ran(jp_fetch, jp_serverapp, jp_root_dir):
    write_notebook(jp_root_dir / "nb.ipynb", ["print('hi')"])
    job = await call(jp_fetch, "jobs", method="POST",
                     body={"notebook": {"path": "nb.ipynb"}, "podConfig": {"buildConfig": {"enabled": False}}})
    name = job["metadata"]["name"]
    done = await rest_wait_terminal(jp_fetch, name, 200)
    assert done["status"]["phase"] == Phase.SUCCEEDED, done["status"]
    record = await call(jp_fetch, "jobs", name, "environment")
    backend = jp_serverapp.web_app.settings["nbvalidation_service"].backend
    assert record["environment"] == {"kind": "interpreter", "python": backend.unbuilt_python}
    names = {envrec.normalize(d["name"]) for d in record["distributions"]}
    assert {"ipykernel", "nbformat"} <= names
    assert "(build disabled: the interpreter" in environment_block(done, record)
    # read again only when the interpreter's distributions changed (they did not)
    again = await call(jp_fetch, "jobs", method="POST",
                       body={"notebook": {"path": "nb.ipynb"}, "podConfig": {"buildConfig": {"enabled": False}}})
    await rest_wait_terminal(jp_fetch, again["metadata"]["name"], 200)
    second = await call(jp_fetch, "jobs", again["metadata"]["name"], "environment")
    assert (second["takenAt"], second["distributions"]) == (record["takenAt"], record["distributions"])


async def test_a_failed_build_has_no_record_and_says_why(jp_fetch, jp_serverapp, jp_root_dir):
    write_notebook(jp_root_dir / "nb.ipynb", ["print('hi')"])
    job = await call(jp_fetch, "jobs", method="POST", body={
        "notebook": {"path": "nb.ipynb"},
        "podConfig": {"buildConfig": {"requirements": ["nbv-no-such-distribution-4f1e==0.0.1"]}}})
    done = await rest_wait_terminal(jp_fetch, job["metadata"]["name"], 200)
    assert done["status"]["phase"] == Phase.FAILED
    with pytest.raises(HTTPClientError) as e:
        await call(jp_fetch, "jobs", job["metadata"]["name"], "environment")
    assert e.value.code == 404
    assert "before its validation started" in json.loads(e.value.response.body)["error"]["message"]
    with pytest.raises(HTTPClientError) as e:
        await call(jp_fetch, "jobs", "no-such-job", "environment")
    assert e.value.code == 404


def test_sources_credentials_and_bounds():
    hashes = {"/r/pkg": "abc"}
    assert envrec.source_of(None, hashes) == {"kind": "index"}
    assert envrec.source_of({"url": "file:///r/pkg", "dir_info": {"editable": True}}, hashes) == {
        "kind": "local", "path": "/r/pkg", "editable": True, "contentHash": "abc"}
    src = envrec.source_of({"url": "https://alice:s3cret@example.org/p-1.0.tar.gz",
                            "archive_info": {"hashes": {"sha256": "00ff"}}}, hashes)
    assert src == {"kind": "url", "url": "https://alice:***@example.org/p-1.0.tar.gz", "hashes": {"sha256": "00ff"}}
    assert "s3cret" not in json.dumps(src)
    vcs = envrec.source_of({"url": "https://TOKEN@github.com/o/r", "vcs_info": {"vcs": "git", "commit_id": "1a2b"}},
                           hashes)
    assert vcs == {"kind": "vcs", "url": "https://***@github.com/o/r", "vcs": "git", "commit": "1a2b"}
    many = {"python": {"version": "3.11.7", "secret": "x"},
            "distributions": [{"name": f"p{i:05d}", "version": "1"} for i in range(envrec.MAX_DISTRIBUTIONS + 3)]}
    rec = envrec.shape(many, environment={"kind": "interpreter", "python": "/x"}, tool={}, taken_at="t")
    assert len(rec["distributions"]) == envrec.MAX_DISTRIBUTIONS
    assert rec["truncated"] == {"distributions": envrec.MAX_DISTRIBUTIONS + 3, "kept": envrec.MAX_DISTRIBUTIONS}
    assert rec["python"] == {"version": "3.11.7"}  # only the known keys


async def test_the_probe_reads_an_interpreter_and_says_why_it_cannot():
    doc = await envrec.probe(sys.executable)
    assert doc["python"]["version"] == ".".join(map(str, sys.version_info[:3]))
    assert any(envrec.normalize(d["name"]) == "nbformat" for d in doc["distributions"])
    with pytest.raises(envrec.RecordError, match="could not list its distributions"):
        await envrec.probe("/bin/false")
    with pytest.raises(envrec.RecordError, match="could not be run"):
        await envrec.probe("/nonexistent/python")


def test_the_runner_prints_its_kernels_probe_before_the_notebook_runs(tmp_path):
    """--print-environment (a Kubernetes job's record, read from the Pod's log): the probe of the
    kernel's interpreter, on one line before the result; the same document the server's probe
    takes, and an error document, not a crash, when it cannot be taken."""
    import jupyter_nbvalidation.verdict.probe as runner_probe
    from jupyter_nbvalidation.runner.protocol import ENVIRONMENT_PREFIX, environment_from_log, environment_line

    write_notebook(tmp_path / "nb.ipynb", ["print(1)"])
    out = subprocess.run([sys.executable, "-m", "jupyter_nbvalidation.runner", str(tmp_path / "nb.ipynb"),
                          "--result", str(tmp_path / "r.json"), "--executed", str(tmp_path / "e.ipynb"),
                          "--print-environment"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    first = next(i for i, ln in enumerate(lines) if ln.startswith(ENVIRONMENT_PREFIX))
    assert first < next(i for i, ln in enumerate(lines) if ln.startswith("NBVALIDATION-RESULT "))
    doc = environment_from_log(out.stdout)
    assert doc is not None and doc["python"]["version"] == ".".join(map(str, sys.version_info[:3]))
    assert any(envrec.normalize(d["name"]) == "ipykernel" for d in doc["distributions"])
    assert environment_from_log(environment_line({"error": "x"})) == {"error": "x"}
    assert environment_from_log("no such line\n") is None
    assert "could not list" in runner_probe.take("/bin/false")["error"]
    assert "could not list" in runner_probe.take("/nonexistent/python")["error"]
