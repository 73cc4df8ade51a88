"""The pytest plugin: `pytest --nbvalidation` collects one item per notebook and validates
each through the batch module (real kernels, a real pytest subprocess); without the flag it
does nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from helpers import write_golden, write_notebook

ROOT = Path(__file__).resolve().parents[2]


def pytest_run(cwd: Path, *args: str, timeout: float = 1200) -> subprocess.CompletedProcess:
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(cwd / "no-servers")}
    try:
        return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=cwd,
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, env=env)
    except subprocess.TimeoutExpired as e:  # say where it stood: each job's phase, and what pytest printed
        data = args[args.index("--nbvalidation-data-dir") + 1] if "--nbvalidation-data-dir" in args else None
        jobs = "(no data dir)"
        if data:
            listed = subprocess.run([sys.executable, "-m", "jupyter_nbvalidation.cli.main", "list", "--local",
                                     "--data-dir", data], cwd=cwd, capture_output=True, text=True, timeout=120,
                                    stdin=subprocess.DEVNULL, env=env)
            jobs = listed.stdout + listed.stderr
        out = e.stdout.decode("utf-8", "replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        raise AssertionError(f"pytest did not end within {timeout:.0f} s; its jobs:\n{jobs}\nits output:\n{out}") from None


def make_tree(tmp_path: Path) -> None:
    nbs = tmp_path / "nbs"
    write_notebook(nbs / "ok.ipynb", ["print('fine')"])
    write_notebook(nbs / "sub" / "fail.ipynb", ["# md\n# Prices", "x = {}", "x['price']"])
    write_golden(write_notebook(nbs / "gold.ipynb", ["print('actual')"]), "expected\n")
    write_notebook(nbs / "skipme.ipynb", ["1/0"])
    write_notebook(nbs / ".ipynb_checkpoints" / "ok-checkpoint.ipynb", ["1/0"])


def test_notebooks_are_items_validated_in_parallel_workers_with_junit_and_k(tmp_path):
    make_tree(tmp_path)
    data = tmp_path / "data"
    proc = pytest_run(tmp_path, "--nbvalidation", "--nbvalidation-no-build", "--nbvalidation-golden-suffix", ".golden",
                      "--nbvalidation-data-dir", str(data), "--nbvalidation-option=--cell-timeout 2m",
                      "-n", "2", "-k", "not skipme", "--junitxml", "junit.xml", "nbs")
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert "2 failed, 1 passed" in out
    assert "cell 3: KeyError: 'price'" in out and "Traceback" in out  # the failure repr
    assert "-expected" in out and "+actual" in out  # the golden diff
    suite = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "2", "0")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert set(cases) == {"ok.ipynb", "fail.ipynb", "gold.ipynb"}  # no golden copy, no checkpoint
    assert cases["ok.ipynb"].find("failure") is None
    # each case says its environment, as record_property writes a property (issue 21)
    for case in cases.values():
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        assert props == {"nbvalidation.environment": "build disabled: the server's interpreter"}, props
    # the failure leads with the failing cell, numbered as JupyterLab shows it (index 2 -> cell 3)
    assert cases["fail.ipynb"].find("failure").get("message").startswith("cell 3: KeyError: 'price'")
    assert cases["gold.ipynb"].find("failure").get("message").startswith("cell 1: outputs differ from the golden")
    # both workers on one data dir: each notebook validated once, three jobs in all
    assert len([d for d in (data / "jobs").iterdir() if not d.name.startswith(".")]) == 3  # .pool: kernels
    assert "2 workers" in out  # pytest-xdist ran it in two workers

    # the same again: the two that failed run again, the one that succeeded is unchanged (nothing runs)
    again = pytest_run(tmp_path, "--nbvalidation", "--nbvalidation-no-build", "--nbvalidation-golden-suffix",
                       ".golden", "--nbvalidation-data-dir", str(data), "--nbvalidation-option=--cell-timeout 2m",
                       "-k", "not skipme", "-rA", "--junitxml", "again.xml", "nbs")
    assert again.returncode == 1 and "2 failed, 1 passed" in again.stdout, again.stdout
    assert len([d for d in (data / "jobs").iterdir() if not d.name.startswith(".")]) == 5
    # the unchanged one is shown as cached, naming the earlier job: the -rA line and a JUnit property
    first = {c.get("name"): {p.get("name"): p.get("value") for p in c.iter("property")}
             for c in ET.parse(tmp_path / "again.xml").getroot().iter("testcase")}["ok.ipynb"]
    assert first["nbvalidation.cached"].startswith("unchanged since job ok-"), first
    assert f"PASSED (cached: {first['nbvalidation.cached']}) nbs/ok.ipynb::ok.ipynb" in again.stdout, again.stdout


def test_without_the_flag_the_plugin_does_nothing(tmp_path):
    make_tree(tmp_path)
    proc = pytest_run(tmp_path, "nbs")
    assert proc.returncode == 5 and "no tests ran" in proc.stdout, proc.stdout  # no notebook collected
    # the project's own suite collects the same with the plugin as without it
    with_plugin = pytest_run(ROOT, "--collect-only", "-q", "tests/house/test_docs.py")
    without = pytest_run(ROOT, "--collect-only", "-q", "-p", "no:nbvalidation", "tests/house/test_docs.py")
    assert with_plugin.returncode == 0, with_plugin.stdout + with_plugin.stderr
    listed = [line for line in with_plugin.stdout.splitlines() if "::" in line]
    assert listed and listed == [line for line in without.stdout.splitlines() if "::" in line]


def test_a_bad_option_is_a_usage_error(tmp_path):
    make_tree(tmp_path)
    proc = pytest_run(tmp_path, "--nbvalidation", "--nbvalidation-option=--timeout soon", "nbs")
    assert proc.returncode == 4 and "spec.timeout" in proc.stderr, proc.stdout + proc.stderr
