"""Issue 40, attack 8 ("No bound"): a notebook wrote 300 MB to /tmp, 200 MB to /dev/shm and
took 300 MB of memory, and its verdict was still Succeeded.

Each test is the attacker's notebook (alice/), run by a real server (the sandbox on, as
detected here; LocalBackend.run_disk_limit 100 MiB), then a victim's notebook in another
project (bob/), in the same environment (the server's own interpreter, builds disabled):

- the attack is bounded: the job is Failed, its reason and message name the limit
  (``DiskLimitExceeded``: "the run wrote more than its disk budget of 100 MiB
  (LocalBackend.run_disk_limit)"; ``OOMKilled``: "the kernel used more than the memory
  limit of 200Mi (podConfig.resources.limits.memory)"), never InfrastructureFailed, in
  seconds, and nothing of what it wrote is left;
- the victim gets its own clean verdict: Succeeded, its own message, its /tmp and
  /dev/shm empty of the attacker's files, its memory its own.

A normal notebook well under both limits (it writes a little to each place and takes
some memory) still succeeds. The server's /health says how the memory limit is held.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import ServerProcess
from helpers import NOBUILD, detected_health, explain, submit, wait_all, write_notebook

MiB = 2**20
BUDGET = 100 * MiB
LIMITS = {**NOBUILD, "resources": {"limits": {"memory": "200Mi"}}}
DISK_TEXT = "the run wrote more than its disk budget of 100 mib (localbackend.run_disk_limit)"
MEMORY_TEXT = "the kernel used more than the memory limit of 200mi (podconfig.resources.limits.memory)"

# the attacker: big writes in 1 MiB blocks, each its own data
WRITE = '''import os
block = bytearray(os.urandom(2**20))
with open({path!r}, 'wb') as f:
    for i in range({mib}):
        block[:8] = i.to_bytes(8, 'little')
        f.write(block)
print('wrote', {mib}, 'MiB to', {path!r})
'''
MEMORY = '''hog = []
for i in range(300):
    hog.append(bytearray(2**20))  # touched: resident, not only reserved
    hog[-1][::4096] = b'x' * len(hog[-1][::4096])
print('held 300 MiB')
'''
# the victim: its own small files, nothing of the attacker's in sight
VICTIM = [
    "import os, glob\n"
    "seen = [p for d in ('/tmp', '/var/tmp', '/dev/shm') for p in glob.glob(os.path.join(d, 'nbv-attack-*'))]\n"
    "assert seen == [], seen\n"
    "for d in ('/tmp', '/dev/shm'):\n"
    "    with open(os.path.join(d, 'victim.txt'), 'w') as f:\n"
    "        f.write('mine')\n"
    "    assert open(os.path.join(d, 'victim.txt')).read() == 'mine'\n"
    "data = bytearray(20 * 2**20)\n"
    "print('victim ok')",
    "assert len(data) == 20 * 2**20",
]
WELL_UNDER = [
    "import os\n"
    "for d in ('/tmp', '/var/tmp', '/dev/shm', os.path.expanduser('~'), '.'):\n"
    "    with open(os.path.join(d, 'scratch.bin'), 'wb') as f:\n"
    "        f.write(os.urandom(10 * 2**20))\n"
    "    assert os.path.getsize(os.path.join(d, 'scratch.bin')) == 10 * 2**20\n"
    "held = [bytearray(2**20) for _ in range(60)]\n"
    "print('within bounds')",
    "assert sum(map(len, held)) == 60 * 2**20",
]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bounds")
    s = ServerProcess(tmp, extra_args=[f"--LocalBackend.run_disk_limit={BUDGET}"])
    try:
        s.start()
        client = s.client()
        health = detected_health(client)
        assert health["sandbox"]["enabled"] is True, health["sandbox"]
        # said: how the memory limit is held here (CI's machine: cgroup v1, as root), and the budget
        assert health["bounds"]["runDiskLimit"] == BUDGET, health["bounds"]
        assert health["bounds"]["memory"] in ("cgroup v1", "cgroup v2"), health["bounds"]
        write_notebook(s.root / "bob" / "victim.ipynb", VICTIM)
        yield s
    finally:
        s.stop()


def run(server: ServerProcess, path: str, sources: list[str], pod: dict, timeout: float = 300) -> dict:
    write_notebook(server.root / path, sources)
    client = server.client()
    name = submit(client, path, podConfig=pod, cellTimeout="2m")
    return wait_all(client, [name], timeout=timeout)[name]


def assert_bounded(server: ServerProcess, job: dict, reason: str, text: str, within: float = 60) -> None:
    """Failed, its reason naming the limit, the attacking cell stopped within ``within`` s (its
    own execution time: the machine's load does not count), nothing of it left."""
    st = job["status"]
    assert st["phase"] == "Failed", explain(job)
    assert st["reason"] != "InfrastructureFailed" and st["validationStatus"]["reason"] == reason, explain(job)
    assert text in st["message"].lower(), explain(job)
    cell = st["results"][0] if st.get("results") else (st["validationStatus"].get("results") or [{}])[0]
    assert cell.get("status") == "Failure", json.dumps(cell)[:500]
    assert float(cell["executionTime"].rstrip("s")) < within, json.dumps(cell)[:500]
    # nothing of the attack is left: no scratch folder, no working copy, no big file in the data dir
    big = [os.path.join(d, f) for d, _, files in os.walk(server.data_dir) for f in files
           if os.path.getsize(os.path.join(d, f)) > 32 * MiB]
    assert big == [], big


def assert_victim_clean(server: ServerProcess) -> None:
    job = run(server, "bob/victim.ipynb", VICTIM, LIMITS)
    st = job["status"]
    assert st["phase"] == "Succeeded", explain(job)
    assert st["message"].startswith("2 code cells ran without errors"), explain(job)


MANY_FILES = (  # no single file reaches the budget (RLIMIT_FSIZE cannot stop it): the watcher does
    "import os\nblock = os.urandom(2**20)\n"
    "for i in range(300):\n"
    "    d = '/var/tmp' if i % 2 else os.path.expanduser('~')\n"
    "    with open(os.path.join(d, f'nbv-attack-{i}.bin'), 'wb') as f:\n"
    "        f.write(block)\n"
    "import time; time.sleep(30)\n")

# each attack: (its notebook, its cell, the job's podConfig, the reason and text of its verdict, within
# how many seconds of its cell it is stopped, a file of it that must not be left on the machine)
ATTACKS = {
    "300 MB to /tmp": ("tmp", WRITE.format(path="/tmp/nbv-attack-tmp.bin", mib=300), NOBUILD,
                       "DiskLimitExceeded", DISK_TEXT, 60, "/tmp/nbv-attack-tmp.bin"),
    # stopped by the watcher while it slept, not at the end of the run
    "many files to /var/tmp and HOME": ("many", MANY_FILES, NOBUILD, "DiskLimitExceeded", DISK_TEXT, 25, None),
    "200 MB to /dev/shm": ("shm", WRITE.format(path="/dev/shm/nbv-attack-shm.bin", mib=200), NOBUILD,
                           "DiskLimitExceeded", DISK_TEXT, 60, "/dev/shm/nbv-attack-shm.bin"),
    "300 MB of memory": ("memory", MEMORY, LIMITS, "OOMKilled", MEMORY_TEXT, 60, None),
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_an_attack_past_a_bound_is_stopped_there_and_the_victim_gets_its_own_verdict(server, attack):
    name, cell, pod, reason, text, within, left = ATTACKS[attack]
    job = run(server, f"alice/{name}.ipynb", [cell], pod)
    assert_bounded(server, job, reason, text, within=within)
    assert left is None or not Path(left).exists()
    assert_victim_clean(server)


def test_a_notebook_well_under_the_limits_succeeds(server):
    job = run(server, "alice/normal.ipynb", WELL_UNDER, LIMITS)
    assert job["status"]["phase"] == "Succeeded", explain(job)


def test_a_limit_the_local_backend_cannot_hold_is_refused(server):
    client = server.client()
    write_notebook(server.root / "alice" / "cpu.ipynb", ["x = 1"])
    for resources, field in (({"limits": {"cpu": "1"}}, "spec.podConfig.resources.limits.cpu"),
                             ({"requests": {"memory": "1Gi"}}, "spec.podConfig.resources.requests")):
        with pytest.raises(Exception) as info:
            submit(client, "alice/cpu.ipynb", podConfig={**NOBUILD, "resources": resources})
        assert field in str(info.value), str(info.value)
