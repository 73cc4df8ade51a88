"""Issue 40, root's reach: a root server's kernel runs as nobody, reading what it must through
idmapped mounts. Where the filesystem refuses them (NFS, overlayfs: ``mount_setattr`` with
``MOUNT_ATTR_IDMAP`` fails with EINVAL or EPERM), the kernel would keep root's reach. Checked:
that is found at start (``/health``: the protection said missing, and why), and a run is then
refused as infrastructure, named, in seconds: never a kernel-start failure retried, never a
kernel running as root. The refusal is injected (``NBVALIDATION_FAULT_IDMAP``, read by the
probe and passed to each run's launcher): the stand-in is the fault only, the rest is real.
Then, without the fault, a victim run gets its own clean verdict (Succeeded, as nobody)."""

from __future__ import annotations

import time

import pytest
from conftest import make_local
from helpers import write_notebook

import jupyter_nbvalidation.runner.confine as confine
import jupyter_nbvalidation.runner.sandbox_probe as sandbox_probe
from jupyter_nbvalidation.core.model import Phase, Reason

pytestmark = pytest.mark.skipif(not confine.real_root(), reason="the machine's root only (its kernel runs as nobody)")
NOBUILD = {"buildConfig": {"enabled": False}}
# as the attacker would write it: what a kernel with root's reach could read
ATTACK = ["import os\nprint('uid', os.getuid())\nopen('/etc/shadow').read(1)\nprint('READ /etc/shadow')"]


def test_detect_says_idmapped_mounts_are_refused_and_what_that_does(monkeypatch, tmp_path):
    found = sandbox_probe.detect()
    assert found["available"] and found["idmapRefused"] is None, found
    assert "unprivileged uid (nobody, idmapped mounts)" in found["uses"], found

    monkeypatch.setenv(sandbox_probe.IDMAP_FAULT_VAR, "EINVAL")
    found = sandbox_probe.detect(paths=[str(tmp_path)])
    assert found["available"], found  # the rest of the sandbox still works, and is said
    assert found["idmapRefused"] and "Invalid argument" in found["idmapRefused"], found
    assert not any("unprivileged uid" in u for u in found["uses"]), found
    said = [m for m in found["missing"] if m.startswith("unprivileged uid")]
    assert len(said) == 1 and "idmapped mounts are refused" in said[0] and "refused" in said[0], found


@pytest.mark.asyncio
async def test_a_root_run_where_idmapped_mounts_are_refused_is_refused_as_infrastructure(monkeypatch, tmp_path):
    monkeypatch.setenv(sandbox_probe.IDMAP_FAULT_VAR, "EPERM")
    (tmp_path / "faulty").mkdir()
    local = make_local(tmp_path / "faulty", backend_kw={"sandbox": "auto"}, run_timeout=300)
    write_notebook(local.root / "attack.ipynb", ATTACK)
    await local.engine.start()
    try:
        health = await local.backend.sandbox_state()
        assert health["enabled"] and health["idmapRefused"], health
        assert any("idmapped mounts are refused" in m for m in health["missing"]), health
        started = time.monotonic()
        done = await local.run(notebook={"path": "attack.ipynb"}, podConfig=NOBUILD)
        took = time.monotonic() - started
        events = await local.events(done)
        nb = await local.backend.executed_notebook(done)
    finally:
        await local.engine.stop()
    st = done["status"]
    assert st["phase"] == Phase.FAILED and st["reason"] == Reason.INFRASTRUCTURE_FAILED, st
    assert "The sandbox refused to start the kernel" in st["message"], st
    assert "idmapped mounts are refused" in st["message"] and "Operation not permitted" in st["message"], st
    assert took < 60, took  # named at once: not a kernel-start failure retried with backoff
    assert not [e for e in events if e["reason"] in ("ValidationRetried", "Retrying")], events
    outputs = "" if nb is None else str([c.get("outputs") for c in nb["cells"]])
    assert "READ /etc/shadow" not in outputs and "uid 0" not in outputs, outputs

    # the victim, where idmapped mounts work: its own verdict, its kernel as nobody
    monkeypatch.delenv(sandbox_probe.IDMAP_FAULT_VAR)
    (tmp_path / "clean").mkdir()
    victim = make_local(tmp_path / "clean", backend_kw={"sandbox": "auto"}, run_timeout=300)
    write_notebook(victim.root / "victim.ipynb", ["import os\nassert os.getuid() == 65534, os.getuid()"])
    await victim.engine.start()
    try:
        done = await victim.run(notebook={"path": "victim.ipynb"}, podConfig=NOBUILD)
    finally:
        await victim.engine.stop()
    assert done["status"]["phase"] == Phase.SUCCEEDED, done["status"]
