"""`jupyter nbvalidation run PATH...`: many notebooks, each its own job, through the
real entry point on real kernels (in this process and through a running server)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import xml.etree.ElementTree as ET
from functools import partial
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest
from helpers import cli as _cli
from helpers import write_golden, write_notebook

JUPYTER = shutil.which("jupyter", path=os.path.dirname(sys.executable)) or "jupyter"
cli = partial(_cli, timeout=600)


def job_count(data: Path) -> int:
    """Job folders (not .pool, the pre-started kernels' folder beside them)."""
    jobs = data / "jobs"
    return len([p for p in jobs.iterdir() if not p.name.startswith(".")]) if jobs.is_dir() else 0


@pytest.fixture
def tree(tmp_path):
    """nbs/: one that succeeds, one failing in its third cell (markdown first), one whose golden copy
    differs, one that is not a notebook at all; hidden folders and checkpoints that would fail."""
    nbs = tmp_path / "nbs"
    write_notebook(nbs / "ok.ipynb", ["print('fine')"])
    write_notebook(nbs / "sub" / "fail.ipynb", ["# md\n# Prices", "x = {}", "x['price']"])
    write_golden(write_notebook(nbs / "gold.ipynb", ["print('<b>actual</b> & more')"]), "expected\n")
    write_notebook(nbs / ".hidden" / "h.ipynb", ["1/0"])
    write_notebook(nbs / ".ipynb_checkpoints" / "ok-checkpoint.ipynb", ["1/0"])
    write_notebook(nbs / "sub" / ".ipynb_checkpoints" / "fail-checkpoint.ipynb", ["1/0"])
    (nbs / "broken.ipynb").write_text("{ not json")
    (nbs / "notes.txt").write_text("not a notebook")
    return tmp_path


def env_of(tmp_path: Path) -> dict:
    return {"JUPYTER_RUNTIME_DIR": str(tmp_path / "no-servers")}


def test_run_a_folder_in_process_summary_and_exit_codes(tree):
    data = tree / "data"
    # --no-cache: each call below runs its notebooks again (the verdict cache has its own tests)
    base = ["--local", "--data-dir", str(data), "--no-build", "-j", "2", "--no-cache"]
    env = env_of(tree)

    run = cli("run", "nbs", "--golden-suffix", ".golden", "--exclude", "broken.ipynb", *base,
              "--junitxml", "reports/junit.xml", "--html", "reports/report.html", "--output-dir", "executed",
              cwd=tree, env=env)
    out = run.stdout
    assert run.returncode == 1, out + run.stderr
    assert "Validating 3 notebook(s), up to 2 at a time, in this process." in out
    rows = {line.split()[0]: line for line in out.split("NOTEBOOK", 1)[1].splitlines()[1:] if line.startswith("nbs/")}
    assert set(rows) == {"nbs/ok.ipynb", "nbs/sub/fail.ipynb", "nbs/gold.ipynb"}  # no hidden, no golden copy
    assert rows["nbs/ok.ipynb"].split()[1] == "Succeeded"
    # numbered as JupyterLab shows it: the markdown cell is cell 1, the failing code cell is cell 3
    assert rows["nbs/sub/fail.ipynb"].split()[1] == "Failed" and "cell 3: KeyError: 'price'" in rows["nbs/sub/fail.ipynb"]
    assert rows["nbs/gold.ipynb"].split()[1] == "Failed" and "cell 1: outputs differ from the golden copy" in out
    for line in rows.values():  # job name and seconds in every row
        assert float(line.split()[2]) > 0 and line.split()[3].rsplit("-", 1)[0] in line.split()[0]
    assert "3 notebook(s): 1 succeeded, 2 failed" in out
    # under the table, the environment of each notebook that failed (issue 21)
    assert "  nbs/sub/fail.ipynb: build disabled: the server's interpreter" in out.split(
        "Environments of the notebooks that did not pass:", 1)[1]
    assert sum(line.startswith("[") and "/3]" in line for line in out.splitlines()) == 3  # one live line each
    assert job_count(data) == 3
    check_junit(tree / "reports" / "junit.xml")
    check_html(tree / "reports" / "report.html")
    # --output-dir: each executed notebook at its relative path, with the outputs of this run
    executed = sorted(p.relative_to(tree / "executed").as_posix() for p in (tree / "executed").rglob("*.ipynb"))
    assert executed == ["nbs/gold.ipynb", "nbs/ok.ipynb", "nbs/sub/fail.ipynb"]
    ok = nbformat.read(tree / "executed" / "nbs" / "ok.ipynb", as_version=4)
    assert ok.cells[0].outputs[0]["text"] == "fine\n"
    failed = nbformat.read(tree / "executed" / "nbs" / "sub" / "fail.ipynb", as_version=4)
    assert failed.cells[2].outputs[0]["ename"] == "KeyError"

    # a notebook the service refuses is bad input: its row says why, the others still run, exit 2
    only = cli("run", "nbs/ok.ipynb", "nbs/broken.ipynb", *base, cwd=tree, env=env)
    assert only.returncode == 2, only.stdout + only.stderr
    assert "Refused" in only.stdout and "not a valid notebook" in only.stdout
    assert job_count(data) == 4

    # all of them succeed: exit 0 (folders and globs in --exclude, globs as paths)
    good = cli("run", "nbs/*.ipynb", "nbs/sub", "--exclude", "sub", "--exclude", "gold*", "--exclude", "b*.ipynb",
               *base, cwd=tree, env=env)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "1 notebook(s): 1 succeeded" in good.stdout and "fail.ipynb" not in good.stdout

    glob = cli("run", "nbs/**/fail.ipynb", "-o", "json", *base, cwd=tree, env=env)
    assert glob.returncode == 1, glob.stdout + glob.stderr
    [row] = json.loads(glob.stdout)
    assert row["notebook"] == "nbs/sub/fail.ipynb" and row["verdict"] == "Failed"
    assert row["firstFailure"] == "cell 3: KeyError: 'price'" and row["job"].startswith("fail-")


def check_junit(path: Path) -> None:
    """As pytest writes it: testsuites > testsuite (counts) > testcase (classname = folder dotted,
    name = the notebook's file name, time) with failure message = the failing cell."""
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    [suite] = root.findall("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("3", "2", "0", "0")
    cases = {(c.get("classname"), c.get("name")): c for c in suite.findall("testcase")}
    assert set(cases) == {("nbs", "ok.ipynb"), ("nbs.sub", "fail.ipynb"), ("nbs", "gold.ipynb")}
    for case in cases.values():
        assert float(case.get("time")) > 0
        assert set(case.attrib) == {"classname", "name", "time"}  # xunit2: nothing a strict schema refuses
        [prop] = case.findall("properties/property")  # the environment, as record_property writes one
        assert (prop.get("name"), prop.get("value")) == ("nbvalidation.environment",
                                                         "build disabled: the server's interpreter")
    assert cases[("nbs", "ok.ipynb")].find("failure") is None
    failure = cases[("nbs.sub", "fail.ipynb")].find("failure")
    assert failure.get("message") == "cell 3: KeyError: 'price'"
    assert "Traceback" in failure.text and "x['price']" in failure.text and "\x1b[" not in failure.text
    golden = cases[("nbs", "gold.ipynb")].find("failure")
    assert golden.get("message").startswith("cell 1: outputs differ from the golden copy")
    assert "-expected" in golden.text and "+<b>actual</b> & more" in golden.text  # the golden differences
    out = cases[("nbs.sub", "fail.ipynb")].find("system-out").text
    assert "job: fail-" in out


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.urls += [v or "" for k, v in attrs if k in ("src", "href")]

    def handle_data(self, data):
        self.text.append(data)


def check_html(path: Path) -> None:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    text = "".join(page.text)
    assert "script" not in page.tags and "link" not in page.tags  # self-contained: inline CSS, no scripts
    assert all(u.startswith("#") for u in page.urls), page.urls  # no network: in-page anchors only
    for shown in ("nbs/ok.ipynb", "nbs/sub/fail.ipynb", "nbs/gold.ipynb"):
        assert shown in text
    assert "cell 3: KeyError: 'price'" in text  # escaped in the source, itself again once parsed
    assert "expected" in text and "+<b>actual</b> & more" in text and "b" not in page.tags  # escaped diff
    assert "ValidationRunning" in text  # the timeline
    assert "environment: build disabled: the server's interpreter" in text


def test_a_relative_data_dir_is_the_folder_where_run_started(tmp_path, monkeypatch):
    """`--data-dir data` (relative): the jobs run and pass, their store and runs are in
    ./data of the folder `run` started in (before, the kernel's sandbox was handed the
    relative path and every notebook ended Error: "hide must be a list of absolute paths")."""
    from jupyter_nbvalidation.backends.local import LocalBackend

    write_notebook(tmp_path / "proj" / "ok.ipynb", ["print(1 + 1)"])
    run = cli("run", "proj", "--local", "--data-dir", "data", "--no-build", "--no-cache", cwd=tmp_path)
    assert run.returncode == 0, (run.stdout, run.stderr)
    assert job_count(tmp_path / "data") == 1
    monkeypatch.chdir(tmp_path)
    assert LocalBackend(data_dir="data").data_dir == str(tmp_path / "data")
    assert LocalBackend(data_dir="~/x").data_dir == os.path.join(os.path.expanduser("~"), "x")


@pytest.mark.parametrize("args, message", [
    (["nbs", "--exclude", "*"], "no notebooks found in nbs (after --exclude)"),
    (["nothing-here"], "nothing-here: no such file or folder"),
    (["nbs/*.none"], "nbs/*.none: the pattern matches no notebook"),
    (["nbs/notes.txt"], "nbs/notes.txt: not a notebook (.ipynb)"),
    (["nbs", "--timeout", "soon"], "spec.timeout: must be a duration"),
    (["nbs", "--strategy", "conda"], "spec.podConfig.buildConfig.strategy"),
    (["nbs", "-j", "0"], "-j/--jobs 0"),
    (["nbs", "--junitxml", "nbs/notes.txt/j.xml"], "--junitxml nbs/notes.txt/j.xml: File exists"),
    (["nbs", "--output-dir", "nbs/notes.txt"], "--output-dir nbs/notes.txt: File exists"),
    (["nbs", "--golden-suffix", ".ipynb"], "--golden-suffix '.ipynb'"),
])
def test_bad_input_is_exit_2_naming_it_and_submits_nothing(tree, args, message):
    data = tree / "data"
    run = cli("run", *args, "--local", "--data-dir", str(data), cwd=tree, env=env_of(tree))
    assert run.returncode == 2, run.stdout + run.stderr
    assert message in run.stderr
    assert job_count(data) == 0


def test_golden_options_are_exclusive(tree):
    run = cli("run", "nbs", "--golden-suffix", ".golden", "--golden-self", "--local", cwd=tree, env=env_of(tree))
    assert run.returncode == 2 and "not allowed with argument" in run.stderr


def test_run_through_a_running_server(server_proc):
    server = server_proc().start()
    write_notebook(server.root / "a" / "one.ipynb", ["print(1)"])
    write_notebook(server.root / "a" / "two.ipynb", ["raise ValueError('two')"])
    run = cli("run", "a", "--no-build", "-j", "2", cwd=server.root, env={"JUPYTER_RUNTIME_DIR": str(server.runtime)})
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"through the Jupyter server at {server.url}" in run.stdout
    assert "cell 1: ValueError: two" in run.stdout
    jobs = server.client().request("GET", "jobs")["items"]  # the server's store holds both jobs
    assert sorted(j["spec"]["notebook"]["path"] for j in jobs) == ["a/one.ipynb", "a/two.ipynb"]
    assert sorted(j["status"]["phase"] for j in jobs) == ["Failed", "Succeeded"]
