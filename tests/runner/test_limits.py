"""The run's bounds in the runner (runner/limits.py, runner/bounds.py), without the sandbox:
real kernels, the machine's real memory cgroup (cgroup v1 here, as root) or RLIMIT_AS, real
writes. Past a bound the verdict is Failed with the reason naming it; under them, nothing
changes; the run's cgroup is gone afterwards. The same through a server with the sandbox:
tests/security/test_bounds.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import write_notebook

import jupyter_nbvalidation.runner.limits as limits
from jupyter_nbvalidation.runner.cli import main as runner_main
from jupyter_nbvalidation.runner.verdict import run_notebook

MiB = 2**20
MEMORY = {"bytes": 200 * MiB, "text": "200Mi", "field": "podConfig.resources.limits.memory"}
HOG = ("hog = []\n"
       "for i in range(300):\n"
       "    hog.append(bytearray(2**20))\n"
       "    hog[-1][::4096] = b'x' * len(hog[-1][::4096])\n")
MODEST = "held = [bytearray(2**20) for _ in range(50)]\nprint(sum(map(len, held)))"


def _run(tmp_path: Path, sources: list[str], bounds: dict) -> dict:
    nb = tmp_path / "work" / "nb.ipynb"
    write_notebook(nb, sources)
    return run_notebook(nb, bounds=bounds, cell_timeout=120)


def _own_cgroups() -> list[str]:
    v2, v1 = limits._own_cgroups(limits.CGROUP_ROOT)
    found = []
    for folder in (v2, v1):
        if folder and os.path.isdir(folder):
            found += [n for n in os.listdir(folder) if n.startswith(limits.CGROUP_PREFIX)]
    return found


def test_the_memory_limit_holds_in_a_cgroup_of_the_kernels_own(tmp_path):
    before = _own_cgroups()
    result = _run(tmp_path, [HOG, "print('never')"], {"memory": MEMORY})
    assert result["verdict"] == "Failed" and result["reason"] == "OOMKilled", result["message"]
    assert result["message"].startswith("The kernel used more than the memory limit of 200Mi "
                                        "(podConfig.resources.limits.memory); stopped in cell 1"), result["message"]
    assert result["runner"]["bounds"]["memory"]["method"] in ("cgroup v1", "cgroup v2"), result["runner"]
    assert result["results"][0]["status"] == "Failure" and result["results"][1]["status"] == "Skipped"
    assert _own_cgroups() == before  # the run's cgroup is gone with it

    ok = _run(tmp_path, [MODEST], {"memory": MEMORY})
    assert ok["verdict"] == "Succeeded", ok["message"]


def test_where_no_cgroup_can_be_made_rlimit_as_holds_it(tmp_path):
    result = _run(tmp_path, [HOG], {"memory": {**MEMORY, "method": "rlimit"}})
    assert result["verdict"] == "Failed" and result["reason"] == "OOMKilled", result["message"]
    assert "memory limit of 200Mi (podConfig.resources.limits.memory) (RLIMIT_AS" in result["message"]
    assert result["results"][0]["errorName"] == "MemoryError"
    assert result["runner"]["bounds"]["memory"]["method"] == "RLIMIT_AS"

    ok = _run(tmp_path, [MODEST], {"memory": {**MEMORY, "method": "rlimit"}})
    assert ok["verdict"] == "Succeeded", ok["message"]


def test_the_disk_budget_counts_the_working_folder_home_and_tmpdir(tmp_path):
    # 3 x 40 MiB, no file past the budget: the watcher, not RLIMIT_FSIZE, stops it
    writes = ("import os, tempfile\n"
              "block = os.urandom(40 * 2**20)\n"
              "for d in ('.', os.path.expanduser('~'), tempfile.gettempdir()):\n"
              "    with open(os.path.join(d, 'big.bin'), 'wb') as f:\n"
              "        f.write(block)\n"
              "import time; time.sleep(30)\n")
    disk = {"bytes": 100 * MiB, "text": "100 MiB", "field": "LocalBackend.run_disk_limit",
            "paths": [str(tmp_path / "work")]}
    result = _run(tmp_path, [writes], {"disk": disk})
    assert result["verdict"] == "Failed" and result["reason"] == "DiskLimitExceeded", result["message"]
    assert result["message"].startswith("The run wrote more than its disk budget of 100 MiB "
                                        "(LocalBackend.run_disk_limit); stopped in cell 1")
    assert float(result["results"][0]["executionTime"].rstrip("s")) < 25, result["results"][0]
    assert result["runner"]["bounds"]["disk"]["written"] >= 100 * MiB


def test_one_file_is_stopped_at_the_budget_exactly(tmp_path):
    writes = ("import os\n"
              "with open('big.bin', 'wb') as f:\n"
              "    for i in range(300):\n"
              "        f.write(os.urandom(2**20))\n")
    disk = {"bytes": 50 * MiB, "paths": [str(tmp_path / "work")]}
    result = _run(tmp_path, [writes], {"disk": disk})
    assert result["reason"] == "DiskLimitExceeded", result["message"]
    assert "disk budget of 50 MiB (disk budget)" in result["message"]
    assert os.path.getsize(tmp_path / "work" / "big.bin") <= 50 * MiB + 1


def test_a_notebook_within_its_budget_is_not_touched(tmp_path):
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "data.bin").write_bytes(os.urandom(80 * MiB))  # there before: not the run's
    writes = "import os\nopen('out.bin', 'wb').write(os.urandom(10 * 2**20))\nprint(os.path.getsize('data.bin'))"
    result = _run(tmp_path, [writes], {"disk": {"bytes": 50 * MiB, "paths": [str(tmp_path / "work")]},
                                       "memory": MEMORY})
    assert result["verdict"] == "Succeeded", result["message"]
    assert 10 * MiB <= result["runner"]["bounds"]["disk"]["written"] < 50 * MiB


@pytest.mark.parametrize("doc, problem", [
    ({"memory": {"bytes": "lots"}}, "memory must be an object with a whole number of bytes"),
    ({"disk": {"bytes": 1, "paths": ["relative"]}}, "disk.paths must be a list of absolute paths"),
    ({"memory": {"bytes": 1, "method": "pray"}}, "memory.method must be auto, cgroup or rlimit"),
    ({"cpu": {}}, 'only "memory", "disk"'),
])
def test_a_bad_bounds_file_is_the_runners_error(tmp_path, doc, problem):
    nb = tmp_path / "nb.ipynb"
    write_notebook(nb, ["x = 1"])
    (tmp_path / "b.json").write_text(json.dumps(doc))
    code = runner_main([str(nb), "--result", str(tmp_path / "r.json"), "--executed", str(tmp_path / "e.ipynb"),
                        "--bounds", str(tmp_path / "b.json")])
    result = json.loads((tmp_path / "r.json").read_text())
    assert code == 2 and result["reason"] == "RunnerError" and problem in result["message"], result["message"]


def test_cgroup_v2_is_used_where_the_memory_controller_is_delegated(tmp_path, monkeypatch):
    # a stand-in cgroup2 folder (files only): the choice and the files written, not the kernel's part
    own = tmp_path / "cg"
    own.mkdir()
    (own / "cgroup.controllers").write_text("cpu memory pids\n")
    (own / "cgroup.subtree_control").write_text("memory\n")
    monkeypatch.setattr(limits, "_own_cgroups", lambda root: (str(own), None))
    folder, method = limits.make_cgroup("abc", 123 * MiB, root=str(tmp_path))
    assert method == "cgroup v2" and folder == str(own / "nbvalidation-abc")
    assert (own / "nbvalidation-abc" / "memory.max").read_text() == str(123 * MiB)
    (own / "nbvalidation-abc" / "memory.events").write_text("low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n")
    assert limits.oom_kills(folder) == 1

    (own / "cgroup.subtree_control").write_text("cpu\n")  # not delegated: no v2, and no v1 here
    with pytest.raises(OSError):
        limits.make_cgroup("def", MiB, root=str(tmp_path))


def test_sizes_are_said_as_people_write_them():
    assert [limits.fmt_bytes(n) for n in (4 * 2**30, 100 * MiB, 2048, 1536, 1000)] == \
        ["4 GiB", "100 MiB", "2 KiB", "1536 bytes", "1000 bytes"]


def test_a_write_the_budget_refused_is_named_even_when_no_measure_saw_it():
    bounds = limits.RunBounds({"disk": {"bytes": 100 * MiB, "paths": []}}, "x")
    assert bounds.outcome(True, "OSError", False, "[Errno 27] File too large")[0] == "DiskLimitExceeded"
    # a full disk elsewhere stays the machine's (backends/local/faults.py: infrastructure)
    assert bounds.outcome(True, "OSError", False, "[Errno 28] No space left on device: '/data/x'") is None
    assert bounds.outcome(True, "OSError", False, "[Errno 28] No space left on device: '/dev/shm/x'") is None
    bounds.shm = "/proc/1/root/dev/shm"  # in the sandbox, /dev/shm is a tmpfs of the budget
    assert bounds.outcome(True, "OSError", False, "[Errno 28] No space left on device: '/dev/shm/x'")[0] == \
        "DiskLimitExceeded"
    assert bounds.outcome(False, None, False, "") is None
