"""Issue 44: the team's validation service behind a real JupyterHub (local backend).

One Hub for the module (harness.py: jupyterhub + configurable-http-proxy on loopback,
DummyAuthenticator, SimpleLocalProcessSpawner), registered with the lines `hub-config`
prints; users alice, bob and carol, each server started by the Hub. Every request here goes
through the proxy to a user's server (which forwards to the service with its own Hub token) or
to the service itself, with a Hub token of the user's."""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from git_support import GitHTTP, Repo
from harness import ADMIN_TOKEN, Hub, hub_with_servers
from helpers import wait, write_notebook
from prometheus_client.parser import text_string_to_metric_families

API = "nbvalidation/api/v1"
NOBUILD = {"buildConfig": {"enabled": False}}
MAX_ACTIVE = 20  # max_active_per_user of this hub: alice's 20-notebook run fits, a 21st does not
SLOTS = 2  # validations at once on the service


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    base = tmp_path_factory.mktemp("hub")
    with hub_with_servers(base, quotas=[f"--NBValidationService.max_active_per_user={MAX_ACTIVE}",
                                         "--NBValidationService.quota_retry_after=7",
                                         f"--NBValidation.max_concurrent_validations={SLOTS}"]) as hub:
        yield hub


def home(hub: Hub, user: str) -> Path:
    return hub.base / "home" / user


def at_server(hub: Hub, user: str, method: str, path: str, body=None, as_user: str | None = None):
    """``user``'s server's REST route, called with ``as_user``'s token (default: the user's own)."""
    return hub.request(method, f"/user/{user}/{API}/{path}", hub.tokens[as_user or user], body)


def at_service(hub: Hub, method: str, path: str, token: str | None, body=None):
    return hub.request(method, f"/services/nbvalidation/{API}/{path}", token, body)


def submit(hub: Hub, user: str, notebook: str, build: bool = False) -> dict:
    body = {"notebook": {"path": notebook}, **({} if build else {"podConfig": NOBUILD})}
    status, job, _ = at_server(hub, user, "POST", "jobs", body)
    assert status == 201, (status, job, hub.tail())
    return job


def phase(hub: Hub, user: str, name: str) -> str:
    status, job, _ = at_server(hub, user, "GET", f"jobs/{name}")
    assert status == 200, (status, job)
    return (job.get("status") or {}).get("phase", "")


def wait_terminal(hub: Hub, user: str, name: str, timeout: float = 180) -> dict:
    def done():
        status, job, _ = at_server(hub, user, "GET", f"jobs/{name}")
        return job if status == 200 and (job.get("status") or {}).get("phase") in ("Succeeded", "Failed") else None
    return wait(done, timeout, f"{user}'s job {name} to end")


def test_alice_validates_from_her_server_and_bob_can_neither_see_nor_touch_it(hub):
    write_notebook(home(hub, "alice") / "work" / "analysis.ipynb",
                   ["open('data.csv').read().strip()", "print(open('data.csv').read().strip())"])
    (home(hub, "alice") / "work" / "data.csv").write_text("alice,42\n")
    # its environment is built from the requirements beside it (they travel with the notebook)
    (home(hub, "alice") / "work" / "requirements.txt").write_text("six\n")
    write_notebook(home(hub, "alice") / "work" / "analysis.ipynb",
                   ["import six; open('data.csv').read().strip()", "print(open('data.csv').read().strip())"])
    job = submit(hub, "alice", "work/analysis.ipynb", build=True)
    name = job["metadata"]["name"]
    assert job["metadata"]["labels"]["nbvalidation.dev/owner"] == "alice"
    done = wait_terminal(hub, "alice", name, 600)  # a build (minutes on a loaded 2-core machine)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    # what comes back through her server's routes: the executed notebook, the environment record, the lock
    status, nb, _ = at_server(hub, "alice", "GET", f"jobs/{name}/notebook")
    assert status == 200 and "alice,42" in json.dumps(nb["cells"][1]["outputs"])
    status, record, _ = at_server(hub, "alice", "GET", f"jobs/{name}/environment")
    assert status == 200, record
    status, lock, _ = at_server(hub, "alice", "GET", f"jobs/{name}/lock")
    assert status == 200 and "six==" in lock, lock
    status, log, _ = at_server(hub, "alice", "GET", f"jobs/{name}/buildlog")
    assert status == 200 and log, log
    status, events, _ = at_server(hub, "alice", "GET", f"jobs/{name}/events")
    assert status == 200 and events["items"], events
    # alice's list has it; bob's does not, at his server and at the service
    assert name in [j["metadata"]["name"] for j in at_server(hub, "alice", "GET", "jobs")[1]["items"]]
    assert name not in [j["metadata"]["name"] for j in at_server(hub, "bob", "GET", "jobs")[1]["items"]]
    assert name not in [j["metadata"]["name"] for j in at_service(hub, "GET", "jobs", hub.tokens["bob"])[1]["items"]]
    # bob touching it: 404 everywhere, with the same answer as a name that does not exist
    for method, path in (("GET", f"jobs/{name}"), ("GET", f"jobs/{name}/events"), ("GET", f"jobs/{name}/notebook"),
                         ("GET", f"jobs/{name}/lock"), ("GET", f"jobs/{name}/bisect"),
                         ("POST", f"jobs/{name}/bisect"), ("DELETE", f"jobs/{name}?cancelOnly=true"),
                         ("DELETE", f"jobs/{name}")):
        for status, answer, _ in (at_server(hub, "bob", method, path), at_service(hub, method, path,
                                                                                  hub.tokens["bob"])):
            assert status == 404, (method, path, status, answer)
            assert answer["error"]["code"] == "NotFound", answer
    assert phase(hub, "alice", name) == "Succeeded"  # bob's delete did nothing
    # alice's server cannot be used with bob's token (the Hub's own check: not hers), nor the service
    # without a token
    assert at_server(hub, "alice", "GET", "jobs", as_user="bob")[0] in (401, 403)
    assert at_service(hub, "GET", "jobs", None)[0] == 401
    assert at_service(hub, "GET", "jobs", "not-a-token")[0] in (401, 403)
    # an admin (dave holds the role nbvalidation-admin that hub-config declares) sees and reads every job
    admin = hub.token("dave", ["access:services!service=nbvalidation", "custom:nbvalidation:admin"])
    assert name in [j["metadata"]["name"] for j in at_service(hub, "GET", "jobs?limit=500", admin)[1]["items"]]
    assert at_service(hub, "GET", f"jobs/{name}", admin)[0] == 200
    # a token of alice's without access to the service: 403 (known to the Hub, not allowed here)
    narrow = hub.token("alice", ["read:users:name!user=alice"])
    assert at_service(hub, "GET", "jobs", narrow)[0] == 403


def test_a_submit_past_the_quota_is_429_with_retry_after_and_the_numbers(hub):
    write_notebook(home(hub, "carol") / "slow.ipynb", ["import time; time.sleep(600)"])
    names = []
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for job in pool.map(lambda _: submit(hub, "carol", "slow.ipynb"), range(MAX_ACTIVE)):
            names.append(job["metadata"]["name"])
    try:
        status, answer, headers = at_server(hub, "carol", "POST", "jobs",
                                            {"notebook": {"path": "slow.ipynb"}, "podConfig": NOBUILD})
        assert status == 429, (status, answer)
        assert headers["Retry-After"] == "7"
        details = answer["error"]["details"]
        assert details["active"] == MAX_ACTIVE and details["maxActivePerUser"] == MAX_ACTIVE, details
        assert "max_active_per_user" in answer["error"]["message"]
        # nothing was created, and another user is not held by carol's quota
        carols = at_server(hub, "carol", "GET", "jobs?limit=100")[1]["items"]
        assert len(carols) == MAX_ACTIVE
    finally:
        for name in names:
            at_server(hub, "carol", "DELETE", f"jobs/{name}?cancelOnly=true")
        for name in names:
            wait_terminal(hub, "carol", name, 60)


def test_alices_20_notebook_run_does_not_hold_bobs_single_click(hub, record_property):
    for i in range(20):
        write_notebook(home(hub, "alice") / "run" / f"nb{i:02d}.ipynb", ["import time; time.sleep(2); print('a')"])
    write_notebook(home(hub, "bob") / "click.ipynb", ["print('bob')"])
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        alices = [j["metadata"]["name"] for j in pool.map(lambda i: submit(hub, "alice", f"run/nb{i:02d}.ipynb"),
                                                          range(20))]
    submitted = time.monotonic()
    bob = submit(hub, "bob", "click.ipynb")["metadata"]["name"]
    bob_done = wait_terminal(hub, "bob", bob, 240)
    bob_wait = time.monotonic() - submitted
    assert bob_done["status"]["phase"] == "Succeeded", bob_done["status"]
    still = [n for n in alices if phase(hub, "alice", n) not in ("Succeeded", "Failed")]
    ends = [wait_terminal(hub, "alice", n, 300) for n in alices]
    alice_total = time.monotonic() - t0
    assert all(j["status"]["phase"] == "Succeeded" for j in ends), [j["status"] for j in ends]
    # bob's click went in the next free slot: most of alice's run was still waiting when his ended
    assert len(still) >= 10, (still, bob_wait, alice_total)
    record_property("bob_wait_s", round(bob_wait, 1))
    record_property("alice_run_s", round(alice_total, 1))
    print(f"MEASURED bob's single click: {bob_wait:.1f} s to its verdict; alice's 20 notebooks: {alice_total:.1f} s "
          f"({len(still)} of hers not ended when bob's was)")


def test_the_service_refuses_to_run_as_root_and_says_why(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root")  # CI runs as root
    proc = subprocess.run([sys.executable, "-m", "jupyter_nbvalidation.cli.main", "service", "--url",
                           "http://127.0.0.1:9", "--data-dir", str(tmp_path)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    assert "refusing to run the validation service as root" in proc.stderr and "--allow-root" in proc.stderr


ATTACK = """import glob, json, os
D = {data!r}
R = {{}}
for p in (D + "/hub-uploads/bob", D + "/hub-uploads", D + "/jobs", D):
    try:
        R[p] = sorted(os.listdir(p))
    except OSError as e:
        R[p] = type(e).__name__
R["bob_files"] = glob.glob(D + "/hub-uploads/bob/*/*") + glob.glob(D + "/**/secret-of-bob.txt", recursive=True)
R["read"] = []
for f in R["bob_files"]:
    try:
        R["read"].append(open(f).read()[:40])
    except OSError as e:
        pass
print("REPORT " + json.dumps(R))
"""


def test_alices_notebook_cannot_read_bobs_snapshot_or_outputs_and_bobs_next_run_is_clean(hub):
    data = str(hub.base / "service-data")
    write_notebook(home(hub, "bob") / "secret" / "bob.ipynb", ["print(open('secret-of-bob.txt').read())"])
    (home(hub, "bob") / "secret" / "secret-of-bob.txt").write_text("bob's secret\n")
    bob = submit(hub, "bob", "secret/bob.ipynb")["metadata"]["name"]
    assert wait_terminal(hub, "bob", bob)["status"]["phase"] == "Succeeded"
    assert any(hub.base.glob("service-data/hub-uploads/bob/*/secret/secret-of-bob.txt"))  # it is there
    write_notebook(home(hub, "alice") / "attack" / "attack.ipynb", [ATTACK.format(data=data)])
    alice = submit(hub, "alice", "attack/attack.ipynb")["metadata"]["name"]
    assert wait_terminal(hub, "alice", alice)["status"]["phase"] == "Succeeded"
    status, nb, _ = at_server(hub, "alice", "GET", f"jobs/{alice}/notebook")
    text = "".join(o.get("text", "") for o in nb["cells"][0]["outputs"] if o.get("name") == "stdout")
    report = json.loads(next(ln for ln in text.splitlines() if ln.startswith("REPORT "))[len("REPORT "):])
    assert report["bob_files"] == [] and report["read"] == [], report
    for path in (data + "/hub-uploads/bob", data + "/hub-uploads", data + "/jobs", data):
        assert not isinstance(report[path], list) or not any("bob" in e for e in report[path]), report
    # bob's next run gets its own clean verdict
    again = submit(hub, "bob", "secret/bob.ipynb")["metadata"]["name"]
    done = wait_terminal(hub, "bob", again)
    assert done["status"]["phase"] == "Succeeded"
    status, nb, _ = at_server(hub, "bob", "GET", f"jobs/{again}/notebook")
    assert "bob's secret" in json.dumps(nb["cells"][0]["outputs"])


def test_metrics_are_scraped_and_parsed_by_prometheus_clients_parser(hub):
    status, text, headers = hub.request("GET", "/services/nbvalidation/nbvalidation/metrics", ADMIN_TOKEN)
    assert status == 403, (status, text)  # the tester service has no metrics scope
    token = hub.token("dave", ["access:services!service=nbvalidation", "custom:nbvalidation:metrics"])
    status, text, headers = hub.request("GET", "/services/nbvalidation/nbvalidation/metrics", token)
    assert status == 200 and headers["Content-Type"].startswith("text/plain"), (status, text)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    jobs = {tuple(sorted(s.labels.items())): s.value for s in families["nbvalidation_jobs"].samples}
    assert sum(jobs.values()) >= 1
    assert any(dict(k)["phase"] == "Succeeded" for k in jobs)
    hist = families["nbvalidation_validation_duration_seconds"]
    counts = [s for s in hist.samples if s.name.endswith("_count") and s.labels.get("verdict") == "Succeeded"]
    assert counts and counts[0].value >= 1, hist.samples
    assert "nbvalidation_queue_depth" in families and "nbvalidation_retries" in families
    # a user without the scope: 403
    assert hub.request("GET", "/services/nbvalidation/nbvalidation/metrics", hub.tokens["bob"])[0] == 403


def test_a_notebook_from_git_submitted_at_her_server_is_fetched_by_the_service_not_uploaded(hub, tmp_path):
    """Her server reads and sends no file of its disk for a notebook from git (the path is the
    repository's, not hers: she has no such file); the service fetches it, and a file:// URL
    (the service's own files) is a 400 at her server, nothing created."""
    repo = Repo(tmp_path / "git")
    repo.notebook("nbs/from-git.ipynb", ["print('from the repository')"])
    commit = repo.commit("first")
    assert not (home(hub, "alice") / "nbs" / "from-git.ipynb").exists()
    before = {j["metadata"]["name"] for j in at_server(hub, "alice", "GET", "jobs?limit=500")[1]["items"]}
    with GitHTTP(repo.bare.parent) as server:
        spec = {"notebook": {"git": {"url": server.url(), "ref": "main"}, "path": "nbs/from-git.ipynb"},
                "podConfig": NOBUILD}
        status, job, _ = at_server(hub, "alice", "POST", "jobs", spec)
        assert status == 201, (status, job, hub.tail())
        done = wait_terminal(hub, "alice", job["metadata"]["name"])
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert done["status"]["source"] == {"url": server.url(), "ref": "main", "commit": commit}
    status, nb, _ = at_server(hub, "alice", "GET", f"jobs/{job['metadata']['name']}/notebook")
    assert status == 200 and "from the repository" in json.dumps(nb["cells"][0]["outputs"])

    spec["notebook"]["git"]["url"] = repo.url  # file://
    status, answer, _ = at_server(hub, "alice", "POST", "jobs", spec)
    assert status == 400 and answer["error"]["field"] == "spec.notebook.git.url", answer
    after = {j["metadata"]["name"] for j in at_server(hub, "alice", "GET", "jobs?limit=500")[1]["items"]}
    assert after - before == {job["metadata"]["name"]}
