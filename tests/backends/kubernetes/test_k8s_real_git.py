"""Notebooks from git and secrets by name on a REAL single-node cluster (tests/real_cluster.py,
``bash tools/cluster/up.sh``): a `NotebookValidationJob` made with ``kubectl apply`` in the
upstream operator's sample shape, fetched by the server (the reconciler) from a real git server
on loopback (``git http-backend``, basic auth from a Secret of the namespace), built by kaniko and
run by the kubelet; and a job's ``podConfig.credentials`` reaching its kernel from a Secret
(envFrom), masked in every artifact. docs/watching.md and docs/secrets.md, Kubernetes."""

from __future__ import annotations

import base64
import json
import time
from datetime import datetime

import pytest
import yaml
from git_support import GitHTTP, Repo
from helpers import job_of, wait, write_golden, write_notebook

from jupyter_nbvalidation.clients.http import ClientError
from jupyter_nbvalidation.core.model import Phase, Reason

pytestmark = pytest.mark.cluster

BUILD_WAIT = 420.0
PASSWORD = "pw-k8s-git-Qz81-never-shown"
SECRET_VALUE = "k8s-Secret-Value-7f3Kq9Lm"
SA = "notebook-validator-runner"

# the upstream operator's sample (config/samples/mlops_v1alpha1_notebookvalidationjob.yaml, with its
# commented golden notebook and credentialsSecret in use), only apiVersion, URLs and image changed
SAMPLE = """\
apiVersion: nbvalidation.dev/v1alpha1
kind: NotebookValidationJob
metadata:
  labels:
    app.kubernetes.io/name: jupyter-notebook-validator-operator
    app.kubernetes.io/managed-by: kustomize
  name: {name}
spec:
  notebook:
    git:
      url: {url}
      ref: {ref}
      credentialsSecret: git-credentials
    path: notebooks/tier1-simple/01-hello-world.ipynb

  podConfig:
    containerImage: {image}
    serviceAccountName: {sa}
    resources:
      requests:
        memory: "512Mi"
        cpu: "500m"
      limits:
        memory: "1Gi"
        cpu: "1000m"
    env:
      - name: JUPYTER_ENABLE_LAB
        value: "yes"

  timeout: "30m"

  goldenNotebook:
    git:
      url: {url}
      ref: {ref}
      credentialsSecret: git-credentials
    path: golden/tier1-simple/01-hello-world.ipynb
"""


def terminal(api, name: str, timeout: float = BUILD_WAIT) -> dict:
    return wait(lambda: (lambda j: j if (j.get("status") or {}).get("phase") in Phase.TERMINAL else None)(
        job_of(api, name)), timeout, lambda: f"job {name} to end: {job_of(api, name).get('status')}")


def seconds(st: dict) -> float:
    """From the job's acceptance to its end, as its status records them (printed: docs' numbers)."""
    start, end = (datetime.fromisoformat(t.replace("Z", "+00:00")) for t in (
        st["transitions"][0]["time"], st["completionTime"]))
    return (end - start).total_seconds()


def secret(cluster, ns: str, name: str, **data: str) -> None:
    cluster.kubectl("apply", "-f", "-", namespace=ns, input=json.dumps({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "type": "Opaque",
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}))


@pytest.fixture
def ns(real_cluster):
    return real_cluster.namespace()


@pytest.fixture
def server(real_cluster, ns, tmp_path):
    started = []

    def make(name: str = "server", **traits):
        s = real_cluster.server(tmp_path, ns, name, **traits)
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop()


def test_the_upstream_sample_applied_with_kubectl_validates_from_git(real_cluster, ns, server, tmp_path):
    """The upstream sample (notebook and golden notebook from git, credentialsSecret, a
    serviceAccountName the admin allows, a timeout) through ``kubectl apply``: the server fetches
    the repository with the Secret's credentials, makes the snapshot ConfigMap from the commit's
    tree, builds and runs it: Succeeded, the golden comparison passed, status.source names the
    commit; the same with ``ref`` a commit SHA. The password is in no status, event, ConfigMap or
    server log. A ref that does not exist: Failed/InfrastructureFailed naming it, in seconds."""
    repo = Repo(tmp_path / "git")
    nb = "notebooks/tier1-simple/01-hello-world.ipynb"
    repo.notebook(nb, ["print('hello from git')"])
    (repo.work / "golden/tier1-simple").mkdir(parents=True)
    write_golden(repo.work / nb, "hello from git\n", repo.work / "golden/tier1-simple/01-hello-world.ipynb")
    commit = repo.commit("the sample notebooks")
    secret(real_cluster, ns, "git-credentials", username="alice", password=PASSWORD)
    real_cluster.kubectl("create", "serviceaccount", SA, namespace=ns)
    with GitHTTP(repo.bare.parent, auth=("alice", PASSWORD)) as http:
        s = server(NBValidation={"secrets": {"git-credentials": {"fromSecret": "git-credentials"}}},
                   KubernetesBackend={"allowed_service_accounts": [SA]}).start()
        api = s.client()
        image = real_cluster.env["NBV_BASE_IMAGE"]
        for name, ref in (("sample-branch", "main"), ("sample-sha", commit)):
            real_cluster.kubectl("apply", "-f", "-", namespace=ns, input=SAMPLE.format(
                name=name, url=http.url(), ref=ref, image=image, sa=SA))
        for name, ref in (("sample-branch", "main"), ("sample-sha", commit)):
            st = terminal(api, name)["status"]
            assert st["phase"] == Phase.SUCCEEDED, st
            assert st["source"] == {"url": http.url(), "ref": ref, "commit": commit,
                                    "golden": {"url": http.url(), "ref": ref, "commit": commit}}, st
            assert st["comparisonResult"]["result"] == "matched", st
            print(f"{name}: accepted to Succeeded in {seconds(st):.1f} s ({st['buildStatus'].get('duration')} build)")
            pods = real_cluster.get(ns, "pods", "-l", f"nbvalidation.dev/job={name},"
                                                      "nbvalidation.dev/component=validation")["items"]
            assert pods and {p["spec"]["serviceAccountName"] for p in pods} == {SA}
        assert any(auth for _, _, auth in http.requests)  # the fetch used the Secret's credentials

        # the same spec through REST: fetched at submit, the same verdict and source
        spec = yaml.safe_load(SAMPLE.format(name="rest", url=http.url(), ref="main", image=image, sa=SA))["spec"]
        rest = api.request("POST", "jobs", spec)["metadata"]["name"]
        st = terminal(api, rest)["status"]
        assert st["phase"] == Phase.SUCCEEDED and st["source"]["commit"] == commit, st
        assert st["comparisonResult"]["result"] == "matched", st

        started = time.monotonic()
        real_cluster.kubectl("apply", "-f", "-", namespace=ns, input=SAMPLE.format(
            name="sample-no-ref", url=http.url(), ref="no-such-branch", image=image, sa=SA))
        st = terminal(api, "sample-no-ref", 60)["status"]
        took = time.monotonic() - started
        print(f"sample-no-ref: applied to Failed in {took:.1f} s")
        assert st["phase"] == Phase.FAILED and st["reason"] == Reason.INFRASTRUCTURE_FAILED, st
        assert "no such ref" in st["message"] and "spec.notebook.git" in st["message"], st
        assert took < 30, took

    seen = [real_cluster.kubectl("get", "nvj,configmaps,events", "-o", "json", namespace=ns).stdout,
            s.log_path.read_text()]
    for name in ("sample-branch", "sample-sha", "sample-no-ref", rest):
        seen += [json.dumps(api.request("GET", f"jobs/{name}")), json.dumps(api.request("GET", f"jobs/{name}/events"))]
    assert not [t for t in seen if PASSWORD in t]
    assert "hello from git" in seen[0]  # the snapshot ConfigMaps were searched


def test_podconfig_credentials_reach_the_kernel_from_a_secret_masked_everywhere(real_cluster, ns, server):
    """``podConfig.credentials`` on Kubernetes: the named secret's Secret reaches the runner's
    container through envFrom (the server never reads it), the kernel gets its keys as variables,
    and the value the notebook prints in several forms is in no artifact: the executed notebook,
    the job's status and events, the Pod's log, the Pod object. A name another user may not use
    on a job made with kubectl: Failed/InvalidInput naming spec.podConfig.credentials[0]; a secret
    that is not a Secret of the namespace, or a service account not allowed: a 400 naming the field."""
    secret(real_cluster, ns, "warehouse-k8s", DB_PASSWORD=SECRET_VALUE, DB_USER="reporter")
    s = server(NBValidation={"secrets": {"warehouse": {"fromSecret": "warehouse-k8s", "users": ["alice"]},
                                         "local-only": {"fromEnv": {"X": "HOME"}}}}).start()
    api = s.client()
    write_notebook(s.root / "sec" / "nb.ipynb", [
        "import os, base64\nv = os.environ['DB_PASSWORD']\nassert os.environ['DB_USER'] == 'reporter'\nprint(v)",
        "print(base64.b64encode(v.encode()).decode())\nprint(v[::-1])\nprint(list(v))",
        "v",
        "assert 'NBV_SECRET_DB_PASSWORD' not in os.environ\nraise_it = False\nif raise_it: raise ValueError(v)",
    ])
    job = api.request("POST", "jobs", {"notebook": {"path": "sec/nb.ipynb"},
                                       "podConfig": {"credentials": ["warehouse"],
                                                     "buildConfig": {"enabled": False}}})
    name = job["metadata"]["name"]
    st = terminal(api, name, 300)["status"]
    assert st["phase"] == Phase.SUCCEEDED, st
    executed = api.request("GET", f"jobs/{name}/notebook")
    text = json.dumps(executed)
    assert "***" in text
    pods = real_cluster.get(ns, "pods", "-l", f"nbvalidation.dev/job={name}")["items"]
    (pod,) = pods
    assert pod["spec"]["containers"][0]["envFrom"] == [{"secretRef": {"name": "warehouse-k8s"},
                                                        "prefix": "NBV_SECRET_"}]
    log = real_cluster.kubectl("logs", pod["metadata"]["name"], "-c", pod["spec"]["containers"][0]["name"],
                               namespace=ns).stdout
    assert log.strip()
    artifacts = [text, log, json.dumps(pod), json.dumps(api.request("GET", f"jobs/{name}")),
                 json.dumps(api.request("GET", f"jobs/{name}/events")), s.log_path.read_text(),
                 real_cluster.kubectl("get", "nvj,events", "-o", "json", namespace=ns).stdout]
    forms = [SECRET_VALUE, base64.b64encode(SECRET_VALUE.encode()).decode(), SECRET_VALUE[::-1]]
    assert not [(i, f) for i, t in enumerate(artifacts) for f in forms if f in t]

    # past the service: a job labelled with another owner may not use alice's secret
    real_cluster.kubectl("apply", "-f", "-", namespace=ns, input=json.dumps({
        "apiVersion": "nbvalidation.dev/v1alpha1", "kind": "NotebookValidationJob",
        "metadata": {"name": "not-bobs", "labels": {"nbvalidation.dev/owner": "bob"}},
        "spec": {"notebook": {"path": "sec/nb.ipynb"},
                 "podConfig": {"credentials": ["warehouse"], "buildConfig": {"enabled": False}}}}))
    st = terminal(api, "not-bobs", 60)["status"]
    assert st["phase"] == Phase.FAILED and st["reason"] == Reason.INVALID_INPUT, st
    assert "spec.podConfig.credentials[0]" in st["message"], st
    assert not real_cluster.get(ns, "pods", "-l", "nbvalidation.dev/job=not-bobs")["items"]

    for spec, field in (({"credentials": ["local-only"]}, "spec.podConfig.credentials[0]"),
                        ({"serviceAccountName": "default"}, "spec.podConfig.serviceAccountName")):
        with pytest.raises(ClientError) as err:
            api.request("POST", "jobs", {"notebook": {"path": "sec/nb.ipynb"},
                                         "podConfig": {**spec, "buildConfig": {"enabled": False}}})
        assert err.value.status == 400 and field in str(err.value), err.value
