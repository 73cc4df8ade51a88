"""Issue 43 x issue 40: a hostile notebook in a pre-started kernel, through a real `jupyter server`
(its defaults: the sandbox and the pool on), written as the attacker would write it.

alice's notebook runs twice: the first run starts its own kernel and leaves a slot of its key;
the second takes that slot. While it runs, bob's slot (started after bob's first run, waiting for
bob's next one) is in the data dir. alice tries to reach it (to plant a file in the folder bob's
kernel works in), the pool's folder, bob's earlier run folder and any other kernel; every try
must fail. Then bob's second run takes his slot and gets his own clean verdict: only his files
in his working folder, nothing of alice's in his kernel."""

from __future__ import annotations

import json
import os

from conftest import ServerProcess
from helpers import NOBUILD, detected_health, explain, report_of, submit, wait, wait_all, write_notebook

MARK = "NBV_POOL_PWNED"
ATTACK = r'''import glob, json, os
S = {facts!r}
R = {{}}
own = os.path.realpath(os.getcwd())
R["pool_seen"] = sorted(os.listdir(S["pool"])) if os.path.isdir(S["pool"]) else None
R["wrote"], R["seen"], R["own"] = [], [], None
for slot in S["slots"]:
    tree = os.path.join(slot, "tree")
    if (own + "/").startswith(os.path.realpath(tree) + "/"):
        R["own"] = slot
        continue  # its own working folder (in the slot it took)
    R["seen"] += [tree] if os.path.exists(tree) else []
    for target in (os.path.join(tree, "planted.txt"), os.path.join(slot, "slot.json")):
        try:
            with open(target, "w") as f:
                f.write("alice was here")
            R["wrote"].append(target)
        except OSError:
            pass
try:
    os.makedirs(os.path.join(S["pool"], "slot-alice", "tree"))
    R["made_slot"] = True
except OSError:
    R["made_slot"] = False
try:
    R["victim_run"] = os.listdir(S["victim_run"])
except OSError:
    R["victim_run"] = None
mine, up = set(), os.getpid()
while up > 0:  # this kernel and the sandbox's processes above it
    mine.add(str(up))
    up = int(open(f"/proc/{{up}}/stat").read().rpartition(")")[2].split()[1])
kernels = []
for pid in (p for p in os.listdir("/proc") if p.isdigit() and p not in mine):
    try:
        if b"ipykernel_launcher" in open(f"/proc/{{pid}}/cmdline", "rb").read():
            kernels.append(pid)
    except OSError:
        pass
R["other_kernels"] = kernels
os.environ[{mark!r}] = "1"
PWNED = True
print("REPORT " + json.dumps(R))
'''
VICTIM = (
    "import os\n"
    f"assert {MARK!r} not in os.environ\n"
    "assert 'PWNED' not in globals()\n"
    "assert sorted(os.listdir('.')) == ['victim.ipynb'], os.listdir('.')\n"
    "print('bob ok')")


def _pool(client) -> dict:
    return client.request("GET", "health")["kernelPool"]


def test_a_pooled_kernel_reaches_no_other_slot_and_no_other_run(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    server = ServerProcess(tmp_path).start()
    try:
        client = server.client()
        assert detected_health(client)["sandbox"]["enabled"] is True
        write_notebook(server.root / "bob" / "victim.ipynb", [VICTIM])
        bob1 = submit(client, "bob/victim.ipynb", podConfig=NOBUILD)
        assert wait_all(client, [bob1])[bob1]["status"]["phase"] == "Succeeded"
        pool_dir = server.data_dir / "jobs" / ".pool"
        facts = {"pool": str(pool_dir), "slots": [], "victim_run": ""}
        write_notebook(server.root / "alice" / "attack.ipynb", [ATTACK.format(facts=facts, mark=MARK)])
        alice1 = submit(client, "alice/attack.ipynb", podConfig=NOBUILD)
        assert wait_all(client, [alice1])[alice1]["status"]["phase"] == "Succeeded"
        # both keys have a slot waiting: bob's (his next run's kernel) and alice's
        wait(lambda: _pool(client)["ready"] == 2, 180, lambda: f"two ready slots: {_pool(client)}")
        before = _pool(client)
        bob_job = client.request("GET", f"jobs/{bob1}")
        facts = {"pool": str(pool_dir), "slots": sorted(str(p) for p in pool_dir.glob("slot-*")),
                 "victim_run": str(server.data_dir / "jobs" / bob_job["metadata"]["uid"] / "run-1")}
        assert len(facts["slots"]) == 2 and os.path.isdir(facts["victim_run"]), facts
        write_notebook(server.root / "alice" / "attack.ipynb", [ATTACK.format(facts=facts, mark=MARK)])
        alice2 = submit(client, "alice/attack.ipynb", podConfig=NOBUILD)
        done = wait_all(client, [alice2])[alice2]
        assert done["status"]["phase"] == "Succeeded", explain(done)
        assert _pool(client)["taken"] == before["taken"] + 1, "alice's second run used a pre-started kernel"
        report = report_of(client, alice2)
        # it works in one of the slots that were waiting (alice's), and of the hidden data dir it sees
        # only the way to that working folder (the sandbox's mount point), nothing of bob's slot
        assert report["own"] in facts["slots"], report
        assert report["pool_seen"] in (None, [], [os.path.basename(report["own"])]), report
        assert report["seen"] == [] and report["wrote"] == [] and report["made_slot"] is False, report
        assert report["victim_run"] is None, report
        assert report["other_kernels"] == [], report
        assert not list(pool_dir.glob("slot-*/tree/planted.txt")) and not (pool_dir / "slot-alice").exists()
        # bob's next run takes the slot alice tried to reach: his own clean verdict
        bob2 = submit(client, "bob/victim.ipynb", podConfig=NOBUILD)
        bob = wait_all(client, [bob2])[bob2]
        assert bob["status"]["phase"] == "Succeeded", explain(bob)
        assert _pool(client)["taken"] == before["taken"] + 2, "bob's second run used his pre-started kernel"
        executed = client.request("GET", f"jobs/{bob2}/notebook")
        assert "bob ok" in json.dumps(executed["cells"][0]["outputs"])
    finally:
        server.stop()
