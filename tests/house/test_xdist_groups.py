"""`pytest -n 2 --dist loadgroup` keeps a group's tests on one worker (tests/xdist_group_ids.py):
the suite's groups (tests/conftest.py XDIST_GROUPS, MODULE_GROUPED) hold with the pytest and
pytest-xdist installed here, checked with a real nested run on two workers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

MODULE = """
import os, time, pytest

@pytest.mark.xdist_group("{group}")
@pytest.mark.parametrize("n", range(6))
def test_grouped(n, tmp_path_factory):
    time.sleep(0.1)
    with open({out!r}, "a") as f:
        f.write(f"{group} {{os.environ['PYTEST_XDIST_WORKER']}}\\n")

@pytest.mark.parametrize("n", range(6))
def test_free(n):
    time.sleep(0.1)
"""


def test_a_groups_tests_run_on_one_worker(tmp_path):
    out = tmp_path / "workers.txt"
    for module, group in (("test_a.py", "one"), ("test_b.py", "one"), ("test_c.py", "two")):
        (tmp_path / module).write_text(MODULE.format(group=group, out=str(out)))
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["xdist_group_ids"]\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
                           "--dist", "loadgroup", str(tmp_path)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen: dict[str, set[str]] = {}
    for line in out.read_text().splitlines():
        group, worker = line.split()
        seen.setdefault(group, set()).add(worker)
    assert sum(1 for _ in out.read_text().splitlines()) == 18
    assert all(len(workers) == 1 for workers in seen.values()), seen
