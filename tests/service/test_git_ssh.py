"""Notebooks from git over ssh (issue 45): a real sshd on loopback (tests/git_ssh.py), the key
from a named secret's ``ssh-privatekey``. The right key validates (a branch and a SHA); a key
the server does not know and no key are infrastructure verdicts naming the credentials, in
seconds; the private key is nowhere in the data dir, the jobs, their events or the logs."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from git_ssh import GitSSH, keypair
from git_support import Repo

from jupyter_nbvalidation.core.model import Phase

pytestmark = pytest.mark.asyncio

NO_BUILD = {"buildConfig": {"enabled": False}}


def _spec(url: str, ref: str, secret: str | None) -> dict:
    git = {"url": url, "ref": ref, **({"credentialsSecret": secret} if secret else {})}
    return {"notebook": {"git": git, "path": "check.ipynb"}, "podConfig": NO_BUILD}


async def _run(local, spec: dict) -> dict:
    job = await local.service.submit(spec)
    return await local.engine.wait_for_terminal(job["metadata"]["name"], 300)


async def test_over_ssh_with_a_key_from_a_named_secret(local, tmp_path: Path, caplog):
    from jupyter_nbvalidation.secrets.registry import SecretRegistry

    caplog.set_level(logging.DEBUG)
    repo = Repo(tmp_path / "git")
    repo.notebook("check.ipynb", ["print('over ssh')"])
    first = repo.commit("first")
    key, public = keypair(tmp_path / "id_ed25519")
    other_key, _ = keypair(tmp_path / "id_other")
    (tmp_path / "good.json").write_text(json.dumps({"ssh-privatekey": key}))
    (tmp_path / "other.json").write_text(json.dumps({"ssh-privatekey": other_key}))
    local.backend.secrets = SecretRegistry({"deploy-key": {"fromFile": str(tmp_path / "good.json")},
                                           "other-key": {"fromFile": str(tmp_path / "other.json")}})
    jobs = []
    with GitSSH(tmp_path / "sshd", [public]) as sshd:
        url = sshd.url(repo.bare)
        for ref in ("main", first):
            done = await _run(local, _spec(url, ref, "deploy-key"))
            assert done["status"]["phase"] == Phase.SUCCEEDED, (done["status"], (sshd.base / "sshd.log").read_text())
            assert done["status"]["source"] == {"url": url, "ref": ref, "commit": first}
            jobs.append(done)
        for secret in ("other-key", None):  # a key it does not know; none at all (BatchMode: no prompt)
            bad = await _run(local, _spec(url, "main", secret))
            st = bad["status"]
            assert (st["phase"], st["reason"]) == (Phase.FAILED, "InfrastructureFailed"), st
            assert "wrong or missing credentials" in st["message"], st
            jobs.append(bad)
    await local.engine.recorder.flush()
    body = "".join(line for line in key.splitlines() if "PRIVATE KEY" not in line)
    seen = json.dumps([await local.service.get(j["metadata"]["name"]) for j in jobs])
    seen += json.dumps([await local.service.events(j["metadata"]["name"]) for j in jobs])
    assert body[:40] not in seen and body[:40] not in caplog.text
    leaks = [str(p) for p in Path(local.backend.data_dir).rglob("*") if p.is_file() and body[:40].encode() in p.read_bytes()]
    assert leaks == []
