"""Secrets by name on the team's service behind a real JupyterHub (docs/secrets.md): a Hub user
may name a secret only when its ``users`` names them or its ``groups`` (the Hub's groups, from
the Hub's model of the user) holds one of theirs; any other name, or one that does not exist, is
the same 400 with nothing created. The secret's value reaches the kernel of an allowed user's
job and is masked in what it shows."""

from __future__ import annotations

import hashlib
import json

import pytest
from harness import hub_with_servers
from helpers import wait, write_notebook

API = "nbvalidation/api/v1"
NOBUILD = {"buildConfig": {"enabled": False}}
ALICES = "al1ce-Only+Token/9f2e"
ANALYSTS = "an4lysts-Shared?Key=77"
SERVERS = "s3rvers-Own-Secret&x"


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    base = tmp_path_factory.mktemp("hubsecrets")
    config = base / "service_secrets.py"
    config.write_text("c.NBValidation.secrets = {\n"
                      "  'alices': {'fromEnv': {'TOKEN': 'NBV_HUB_ALICES'}, 'users': ['alice']},\n"
                      "  'analysts': {'fromEnv': {'TOKEN': 'NBV_HUB_ANALYSTS'}, 'groups': ['analysts']},\n"
                      "  'servers-own': {'fromEnv': {'TOKEN': 'NBV_HUB_SERVERS'}},\n"
                      "}\n")
    more = (f"c.JupyterHub.load_groups = {{'analysts': {{'users': ['carol']}}}}\n"
            f"c.JupyterHub.services[-1]['environment'].update({{'NBV_HUB_ALICES': {ALICES!r}, "
            f"'NBV_HUB_ANALYSTS': {ANALYSTS!r}, 'NBV_HUB_SERVERS': {SERVERS!r}}})\n")
    with hub_with_servers(base, quotas=[f"--config={config}"], more=more) as hub:
        yield hub


def _cells(value: str) -> list[str]:
    digest = hashlib.sha256(value.encode()).hexdigest()
    return ["import os, hashlib\n"
            f"assert hashlib.sha256(os.environ['TOKEN'].encode()).hexdigest() == {digest!r}, 'not the secret'",
            "print('token', os.environ['TOKEN'])"]


def _submit(hub, user: str, path: str, names: list[str]):
    body = {"notebook": {"path": path}, "podConfig": {**NOBUILD, "credentials": names}}
    return hub.request("POST", f"/user/{user}/{API}/jobs", hub.tokens[user], body)


def _jobs(hub, user: str) -> list:
    status, answer, _ = hub.request("GET", f"/user/{user}/{API}/jobs", hub.tokens[user])
    assert status == 200, answer
    return answer["items"]


def test_a_hub_user_names_only_their_own_secrets(hub):
    for user in ("alice", "bob", "carol"):
        write_notebook(hub.base / "home" / user / "s.ipynb", ["print(1)"])
    refusals = []
    for user, name in (("bob", "alices"), ("bob", "analysts"), ("bob", "servers-own"), ("bob", "nosuch"),
                       ("carol", "alices"), ("alice", "analysts"), ("alice", "servers-own")):
        status, answer, _ = _submit(hub, user, "s.ipynb", [name])
        assert status == 400, (user, name, status, answer, hub.tail())
        error = answer["error"]
        assert error["field"] == "spec.podConfig.credentials[0]", answer
        refusals.append(error["message"].replace(repr(name), "NAME"))
    assert len(set(refusals)) == 1, refusals  # the same answer whether the name exists or not
    assert all(not _jobs(hub, user) for user in ("alice", "bob", "carol")), "nothing created"


@pytest.mark.parametrize(("user", "name", "value"), [("alice", "alices", ALICES), ("carol", "analysts", ANALYSTS)])
def test_an_allowed_users_kernel_gets_the_value_masked(hub, user, name, value):
    write_notebook(hub.base / "home" / user / "use.ipynb", _cells(value))
    status, job, _ = _submit(hub, user, "use.ipynb", [name])
    assert status == 201, (status, job, hub.tail())
    job_name = job["metadata"]["name"]

    def ended():
        s, j, _ = hub.request("GET", f"/user/{user}/{API}/jobs/{job_name}", hub.tokens[user])
        return j if s == 200 and (j.get("status") or {}).get("phase") in ("Succeeded", "Failed") else None

    done = wait(ended, 180, f"{user}'s job {job_name} to end")
    assert done["status"]["phase"] == "Succeeded", (done["status"], hub.tail())
    _s, executed, _ = hub.request("GET", f"/user/{user}/{API}/jobs/{job_name}/notebook", hub.tokens[user])
    text = json.dumps(executed)
    assert "token ***" in text and value not in text
