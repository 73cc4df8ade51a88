"""Lab to CI (issue 42), the server's half: a golden notebook and a tolerance PUT through the REST
route the lab's Options dialog uses, on a real server; then `jupyter nbvalidation run DIR` and
`pytest --nbvalidation DIR` on the same folder compare the same pair with the same tolerance
(through that server and in their own process), and neither validates the golden notebook as a
notebook. Real kernels, a real server, real files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from helpers import cli, write_golden, write_notebook

PYPROJECT = '[project]\nname = "course"\n\n[tool.ruff]\nline-length = 100\n'


def pytest_run(cwd: Path, runtime: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(runtime)}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL, env=env)


def put(server, options: dict) -> dict:
    return server.client().request("PUT", "project-settings",
                                   {"notebook": "lessons/week1/analysis.ipynb", "options": options})


@pytest.fixture
def course(server_proc):
    server = server_proc().start()
    root = server.root
    (root / "pyproject.toml").write_text(PYPROJECT)
    week = root / "lessons" / "week1"
    nb = write_notebook(week / "analysis.ipynb", ["print(1.0004)"])
    write_golden(nb, "1.0\n", week / "golden.ipynb")  # its golden: another number, within 1e-3, beyond 1e-5
    write_notebook(week / "other.ipynb", ["print('other')"])
    return server


def jobs_of(server) -> list[dict]:
    return server.client().request("GET", "jobs", params={"limit": 500})["items"]


def check_run(server, args: list[str], want: int) -> list[dict]:
    runtime = {"JUPYTER_RUNTIME_DIR": str(server.runtime)}
    proc = cli("run", "lessons", "--no-build", "-o", "json", *args, cwd=server.root, env=runtime, timeout=600)
    assert proc.returncode == want, proc.stdout + proc.stderr
    rows = json.loads(proc.stdout)
    assert sorted(r["notebook"] for r in rows) == ["lessons/week1/analysis.ipynb", "lessons/week1/other.ipynb"]
    return rows


def check_pytest(server, args: list[str], want: int, tmp: Path) -> dict[str, str]:
    report = tmp / f"junit-{len(list(tmp.glob('junit-*')))}.xml"
    proc = pytest_run(server.root, server.runtime, "--nbvalidation", "--nbvalidation-no-build", "lessons",
                      f"--junitxml={report}", *args)
    assert proc.returncode == want, proc.stdout + proc.stderr
    cases = {c.get("name"): ("failure" if c.find("failure") is not None else "error" if c.find("error") is not None
                             else "passed") for c in ET.parse(report).iter("testcase")}
    assert set(cases) == {"analysis.ipynb", "other.ipynb"}, cases  # golden.ipynb never collected
    return cases


def test_lab_to_ci_same_pair_same_tolerance(course, tmp_path):
    server = course
    got = put(server, {"goldenNotebook": {"path": "golden.ipynb"}, "comparisonConfig": {"floatingPointTolerance": 1e-3}})
    assert got["file"] == "pyproject.toml" and got["entry"]["comparisonConfig"] == {"floatingPointTolerance": 1e-3}
    text = (server.root / "pyproject.toml").read_text()
    assert text.startswith(PYPROJECT)

    # within the tolerance: passes under run (through the server, and in its own process) and pytest
    rows = check_run(server, [], 0)
    assert {r["verdict"] for r in rows} == {"Succeeded"}
    [job] = [j for j in jobs_of(server) if j["spec"]["notebook"]["path"] == "lessons/week1/analysis.ipynb"]
    assert job["spec"]["goldenNotebook"] == {"path": "lessons/week1/golden.ipynb"}
    assert job["spec"]["comparisonConfig"]["floatingPointTolerance"] == 1e-3
    local = ["--local", "--data-dir", str(tmp_path / "cli-data")]
    check_run(server, local, 0)
    assert check_pytest(server, ["--nbvalidation-local", f"--nbvalidation-data-dir={tmp_path / 'pt-data'}"], 0,
                        tmp_path) == {"analysis.ipynb": "passed", "other.ipynb": "passed"}
    assert check_pytest(server, [], 0, tmp_path) == {"analysis.ipynb": "passed", "other.ipynb": "passed"}

    # the tolerance tightened in the dialog: the same pair now differs beyond it, under both
    put(server, {"goldenNotebook": {"path": "golden.ipynb"}, "comparisonConfig": {"floatingPointTolerance": 1e-5}})
    rows = check_run(server, [], 1)  # the verdict cache: other.ipynb's verdict stands, analysis.ipynb's key changed
    assert {r["notebook"]: r["verdict"] for r in rows} == {"lessons/week1/analysis.ipynb": "Failed",
                                                          "lessons/week1/other.ipynb": "Unchanged"}
    check_run(server, local, 1)
    failed = {"analysis.ipynb": "failure", "other.ipynb": "passed"}
    assert check_pytest(server, ["--nbvalidation-local", f"--nbvalidation-data-dir={tmp_path / 'pt-data'}"], 1,
                        tmp_path) == failed
    assert check_pytest(server, [], 1, tmp_path) == failed
    # a value given on the command line wins over the file
    rows = check_run(server, ["--abs-tol", "0.01"], 0)
    assert check_pytest(server, ["--nbvalidation-option=--abs-tol 0.01"], 0, tmp_path)["analysis.ipynb"] == "passed"


def test_golden_named_explicitly_is_validated_and_a_malformed_file_is_exit_2(course):
    server = course
    put(server, {"goldenNotebook": {"path": "golden.ipynb"}})
    runtime = {"JUPYTER_RUNTIME_DIR": str(server.runtime)}
    proc = cli("run", "lessons/week1/golden.ipynb", "--no-build", "-o", "json", cwd=server.root, env=runtime)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [r["notebook"] for r in json.loads(proc.stdout)] == ["lessons/week1/golden.ipynb"]
    (server.root / "pyproject.toml").write_text(PYPROJECT + "[tool.nbvalidation]\ncellTimeout = \"soon\"\n")
    proc = cli("run", "lessons", "--no-build", cwd=server.root, env=runtime)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "pyproject.toml:7: tool.nbvalidation.cellTimeout: must be a duration" in proc.stderr
    proc = pytest_run(server.root, server.runtime, "--nbvalidation", "--nbvalidation-no-build", "lessons")
    assert proc.returncode != 0 and "pyproject.toml:7: tool.nbvalidation.cellTimeout" in proc.stdout + proc.stderr


def test_without_a_server_the_file_above_the_current_folder_applies(tmp_path):
    """`run` started in a subfolder of the project, no server: its own root reaches up to the folder
    of the settings file, so the file's golden and tolerance apply as a server's root would have them."""
    proj = tmp_path / "proj"
    (proj / ".git").mkdir(parents=True)
    (proj / "pyproject.toml").write_text(
        PYPROJECT + '\n[[tool.nbvalidation.notebooks]]\nglob = "lessons/week1/analysis.ipynb"\n'
                    'goldenNotebook = { path = "golden.ipynb" }\ncomparisonConfig = { floatingPointTolerance = 1e-5 }\n')
    week = proj / "lessons" / "week1"
    write_golden(write_notebook(week / "analysis.ipynb", ["print(1.0004)"]), "1.0\n", week / "golden.ipynb")
    proc = cli("run", "week1", "--local", "--data-dir", str(tmp_path / "data"), "--no-build", "-o", "json",
               cwd=proj / "lessons", no_servers=True, timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [row] = json.loads(proc.stdout)  # golden.ipynb is not validated as a notebook
    assert row["notebook"] == "week1/analysis.ipynb" and row["verdict"] == "Failed", row
    listed = cli("list", "--local", "--data-dir", str(tmp_path / "data"), "-o", "json", cwd=proj / "lessons",
                 no_servers=True)
    [job] = json.loads(listed.stdout)["items"]
    assert job["spec"]["goldenNotebook"] == {"path": "lessons/week1/golden.ipynb"}  # the root is the project's
    assert job["spec"]["comparisonConfig"] == {"floatingPointTolerance": 1e-5}
    assert job["status"]["comparisonResult"]["tolerance"]["absolute"] == 1e-5, job["status"]
