"""A job made past the service (``kubectl apply``) whose notebook is in git, against the API server
harness (no kubelet: the Pod is only created): the reconciler's service fetches the repository
from a real git server on loopback (``git http-backend``, basic auth), with the credentials of a
Secret of the namespace (a ``fromSecret`` entry), makes the snapshot ConfigMap from the commit's
tree and records status.source; a fetch that fails ends the job InfrastructureFailed naming the
cause, in seconds; a spec a submit would refuse ends it InvalidInput naming the field.
docs/watching.md, "On Kubernetes"."""

from __future__ import annotations

import base64
import json
import time

import pytest
import pytest_asyncio
from git_support import GitHTTP, Repo
from helpers import write_notebook
from k8s_support import RUNNER_IMAGE, get_or_none, make_env, wait_for

import jupyter_nbvalidation.backends.kubernetes.objects as obj
from jupyter_nbvalidation.backends.kubernetes.client import CONFIGMAPS, EVENTS, PODS
from jupyter_nbvalidation.backends.kubernetes.store import NVJ
from jupyter_nbvalidation.core.model import Phase, Reason
from jupyter_nbvalidation.secrets.registry import SecretRegistry

pytestmark = pytest.mark.k8s

PASSWORD = "pw-harness-git-Lr4x-never-shown"


@pytest_asyncio.fixture
async def env(kube_apiserver, k8s_namespace, tmp_path):
    """The server as the shipped Role lets it act (role.yaml bound to it): its `get` on Secrets is
    what reads a fromSecret entry for the fetch."""
    kube_apiserver.limited_in_namespace(k8s_namespace)
    e = make_env(kube_apiserver, k8s_namespace, tmp_path / "root", kubeconfig=kube_apiserver.limited_kubeconfig)
    e.backend.secrets = SecretRegistry({
        "git-credentials": {"fromSecret": "git-credentials"},
        "wrong-credentials": {"fromSecret": "wrong-credentials"},
        "gone": {"fromSecret": "not-in-the-namespace"},
        "warehouse": {"fromSecret": "warehouse-k8s"}})
    await e.engine.start()
    yield e
    await e.engine.stop()


@pytest.fixture
def repo(tmp_path) -> Repo:
    r = Repo(tmp_path / "git")
    r.notebook("nbs/check.ipynb", ["print('hello from git')"])
    r.write("nbs/data.csv", "a,b\n1,2\n")
    return r


async def put_secret(admin, ns: str, name: str, **data: str) -> None:
    await admin.request("POST", f"/api/v1/namespaces/{ns}/secrets", body={
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}})


def nvj(name: str, git: dict, **spec) -> dict:
    return {"apiVersion": "nbvalidation.dev/v1alpha1", "kind": "NotebookValidationJob", "metadata": {"name": name},
            "spec": {"notebook": {"git": git, "path": "nbs/check.ipynb"},
                     "podConfig": {"containerImage": RUNNER_IMAGE, "buildConfig": {"enabled": False}}, **spec}}


@pytest.mark.asyncio
async def test_a_kubectl_job_from_git_is_fetched_and_runs_as_a_submitted_one(env, admin, repo):
    commit = repo.commit("first")
    await put_secret(admin, env.ns, "git-credentials", username="alice", password=PASSWORD)
    await put_secret(admin, env.ns, "warehouse-k8s", DB_PASSWORD="never-read-by-the-server")
    with GitHTTP(repo.bare.parent, auth=("alice", PASSWORD)) as http:
        body = nvj("from-git", {"url": http.url(), "ref": "main", "credentialsSecret": "git-credentials"})
        body["spec"]["podConfig"]["credentials"] = ["warehouse"]
        await admin.request("POST", NVJ.path(env.ns), body=body)

        async def running():
            job = await env.store.get("from-git")
            return job if (job.get("status") or {}).get("phase") == Phase.VALIDATION_RUNNING else None

        job = await wait_for(running, what="from-git ValidationRunning")
    assert job["status"]["source"] == {"url": http.url(), "ref": "main", "commit": commit}, job["status"]
    cm = await get_or_none(admin, CONFIGMAPS.path(env.ns, obj.input_configmap_name("from-git")))
    assert cm is not None and "hello from git" in cm["data"]["notebook.ipynb"]
    assert cm["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    assert any(p == "data.csv" for _, p in obj.inputs_index(cm["data"]))  # the notebook's folder travels
    pod = await wait_for(lambda: get_or_none(admin, PODS.path(env.ns, obj.validation_pod_name("from-git"))))
    (runner,) = [c for c in pod["spec"]["containers"] if c["name"] == obj.RUNNER_CONTAINER]
    assert runner["envFrom"] == [{"secretRef": {"name": "warehouse-k8s"}, "prefix": obj.SECRET_ENV_PREFIX}]
    assert f"--secrets-from-env={obj.SECRET_ENV_PREFIX}" in runner["command"]
    assert pod["spec"]["automountServiceAccountToken"] is False
    events = await admin.request("GET", EVENTS.path(env.ns))
    seen = json.dumps([job, cm, pod, events, await admin.request("GET", NVJ.path(env.ns, "from-git"))])
    assert PASSWORD not in seen and "never-read-by-the-server" not in seen


@pytest.mark.asyncio
async def test_a_kubectl_job_whose_repository_cannot_be_had_fails_naming_why_in_seconds(env, admin, repo):
    repo.commit("first")
    await put_secret(admin, env.ns, "wrong-credentials", username="alice", password="not-" + PASSWORD)
    await put_secret(admin, env.ns, "git-credentials", username="alice", password=PASSWORD)
    with GitHTTP(repo.bare.parent, auth=("alice", PASSWORD)) as http:
        cases = [("no-ref", {"url": http.url(), "ref": "no-such-branch", "credentialsSecret": "git-credentials"},
                  "no such ref"),
                 ("wrong-creds", {"url": http.url(), "ref": "main", "credentialsSecret": "wrong-credentials"},
                  "wrong or missing credentials"),
                 ("no-secret", {"url": http.url(), "ref": "main", "credentialsSecret": "gone"},
                  "the Secret 'not-in-the-namespace' is not in namespace"),
                 ("no-host", {"url": "https://no-such-host.invalid/r.git", "ref": "main"}, "no such host")]
        started = time.monotonic()
        for name, spec_git, _ in cases:
            await admin.request("POST", NVJ.path(env.ns), body=nvj(name, spec_git))
        for name, git, cause in cases:
            st = (await env.terminal(name, 60))["status"]
            assert (st["phase"], st["reason"]) == (Phase.FAILED, Reason.INFRASTRUCTURE_FAILED), st
            assert cause in st["message"] and "spec.notebook.git" in st["message"], st
            assert st["source"] == {"url": git["url"], "ref": git["ref"]}, st
            assert "not-" + PASSWORD not in json.dumps(st)
            assert await get_or_none(admin, CONFIGMAPS.path(env.ns, obj.input_configmap_name(name))) is None
        took = time.monotonic() - started
    assert took < 30, took
    assert (await admin.request("GET", PODS.path(env.ns)))["items"] == []


@pytest.mark.asyncio
async def test_a_kubectl_job_from_git_that_a_submit_would_refuse_fails_naming_the_field(env, admin, repo, tmp_path):
    """A file:// URL (the server's own files), a notebook that is not in the commit: InvalidInput
    naming the field, nothing fetched into a snapshot, no Pod."""
    repo.commit("first")
    write_notebook(tmp_path / "server-side" / "nb.ipynb", ["1"])
    with GitHTTP(repo.bare.parent) as http:
        await admin.request("POST", NVJ.path(env.ns), body=nvj("file-url", {"url": repo.url, "ref": "main"}))
        missing = nvj("no-notebook", {"url": http.url(), "ref": "main"})
        missing["spec"]["notebook"]["path"] = "nbs/none.ipynb"
        await admin.request("POST", NVJ.path(env.ns), body=missing)
        for name, field in (("file-url", "spec.notebook.git.url"), ("no-notebook", "spec.notebook.path")):
            st = (await env.terminal(name, 60))["status"]
            assert (st["phase"], st["reason"]) == (Phase.FAILED, Reason.INVALID_INPUT), st
            assert st["message"].startswith(field) or field in st["message"], st
    assert (await admin.request("GET", PODS.path(env.ns)))["items"] == []
