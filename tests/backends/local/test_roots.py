"""One data dir, several roots (issue 20 point 3): a job's notebook path is relative to the root it
was submitted under, so `report.ipynb` of one root is not `report.ipynb` of another. A real server
(root A) and an in-process `run` in folder B on the same data dir (as the default data dir is shared);
and `run` of a path outside the running server's root says it validates in this process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from helpers import cli as run_cli
from helpers import wait, write_notebook

JUPYTER = shutil.which("jupyter", path=os.path.dirname(sys.executable)) or "jupyter"


def test_jobs_of_another_root_in_the_same_data_dir_are_not_this_roots(server_proc, tmp_path):
    server = server_proc().start()
    write_notebook(server.root / "report.ipynb", ["raise ValueError('A is broken')"])
    b = tmp_path / "B"
    write_notebook(b / "report.ipynb", ["print('B is fine')"])
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(server.runtime)}

    def cli(cwd, *args: str) -> subprocess.CompletedProcess:
        return run_cli(*args, cwd=cwd, env=env, timeout=600)

    a_run = cli(server.root, "run", "report.ipynb", "--no-build", "-o", "json")  # through the server
    assert a_run.returncode == 1, a_run.stdout + a_run.stderr
    # the same relative path in another root, in this process, on the server's data dir
    b_run = cli(b, "run", "report.ipynb", "--no-build", "--local", "--data-dir", str(server.data_dir), "-o", "json")
    assert b_run.returncode == 0, b_run.stdout + b_run.stderr
    assert [r["verdict"] for r in json.loads(b_run.stdout)] == ["Succeeded"]
    text = cli(b, "run", "report.ipynb", "--no-build", "--local", "--data-dir", str(tmp_path / "solo"))
    assert text.returncode == 0 and "1 succeeded" in text.stdout, text.stdout + text.stderr
    # the in-process engine gives its lease back at the end: no "another server" took it
    assert "lost leadership" not in text.stdout + text.stderr, text.stdout + text.stderr

    listed = server.client().request("GET", "jobs", params={"notebook": "report.ipynb"})["items"]
    assert [j["status"]["phase"] for j in listed] == ["Failed"], listed  # B's Succeeded showed first, as A's
    assert {j["metadata"]["annotations"]["nbvalidation.dev/root"] for j in listed} == {os.path.realpath(server.root)}
    # and B's success never stands in for A's notebook in the verdict cache
    again = cli(server.root, "run", "report.ipynb", "--no-build", "-o", "json")
    assert [r["verdict"] for r in json.loads(again.stdout)] == ["Failed"], again.stdout + again.stderr

    # a path outside the running server's root: validated here, and said so
    outside = cli(server.root, "run", str(b), "--no-build", "--data-dir", str(tmp_path / "other-data"), "-o", "json")
    assert outside.returncode == 0, outside.stdout + outside.stderr
    assert "outside the root of the server at " + server.url in outside.stderr, outside.stderr
    assert "validating it in this process" in outside.stderr


def test_a_corrupt_store_is_one_sentence_and_exit_3_not_a_traceback(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "nbvalidation.db").write_bytes(b"this is not an SQLite database, it is garbage " * 100)
    proc = subprocess.run([JUPYTER, "nbvalidation", "list", "--local", "--data-dir", str(data)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert f"the job store in {data} is not usable" in proc.stderr and "DatabaseError" in proc.stderr


def test_a_server_on_a_corrupt_store_says_so_and_recovers_once_it_is_repaired(server_proc):
    """Issue 20 point 5: a server whose store is not a database answered 500 on every route while
    /health said usable (after a restart: "starting" forever), and POST /unchanged a 200
    {"job": null}. Now /health is unusable with the cause, every route a 503 naming the file, nothing
    is created; once the file is moved aside the engine starts by itself (no restart)."""

    from jupyter_nbvalidation.clients.http import ClientError

    server = server_proc()
    server.data_dir.mkdir(parents=True)
    db = server.data_dir / "nbvalidation.db"
    db.write_bytes(b"this is not an SQLite database, it is garbage " * 100)
    write_notebook(server.root / "nb.ipynb", ["print('fine')"])
    server.start()
    client = server.client()
    health = client.request("GET", "health")
    assert health["usable"] is False and str(db) in health["problem"], health
    assert "not a database" in health["problem"], health
    spec = {"notebook": {"path": "nb.ipynb"}, "podConfig": {"buildConfig": {"enabled": False}}}
    for method, path, body in (("GET", "jobs", None), ("POST", "jobs", spec), ("POST", "unchanged", spec),
                               ("GET", "jobs/nb-1", None)):
        try:
            answer = client.request(method, path, body)
        except ClientError as e:
            assert e.status == 503 and str(db) in str(e), (method, path, e.status, str(e))
        else:
            raise AssertionError(f"{method} {path} answered {answer!r} on a corrupt store")
    assert db.read_bytes().startswith(b"this is not an SQLite database")  # left as it was, for its owner

    db.rename(db.with_suffix(".corrupt"))  # what the message says to do
    wait(lambda: client.request("GET", "health")["usable"], 60,
         lambda: f"the repaired store to be usable: {client.request('GET', 'health')}", interval=0.5)
    job = client.request("POST", "jobs", spec)
    assert job["metadata"]["name"]
    assert [j["metadata"]["name"] for j in client.request("GET", "jobs")["items"]] == [job["metadata"]["name"]]
