"""The real-apiserver harness itself, and the CRD / Role manifests against it.

Needs the binaries from tools/testbin/build.sh; uses the fixtures of
tests/k8s_harness.py (loaded from conftest.py or with ``-p``).
"""

from __future__ import annotations

import copy
import json
import subprocess
import urllib.error
import urllib.request

import pytest
from kubernetes.aio import client
from kubernetes.aio.client.exceptions import ApiException

try:  # loaded as a plugin module; import by whichever name is on sys.path
    import k8s_harness as harness
except ImportError:  # pragma: no cover
    from tests import k8s_harness as harness

pytestmark = pytest.mark.k8s

GROUP, VERSION, PLURAL = "nbvalidation.dev", "v1alpha1", "notebookvalidationjobs"

VALID_SPEC = {
    "notebook": {"path": "analysis/report.ipynb"},
    "goldenNotebook": {"path": "analysis/report.golden.ipynb"},
    "podConfig": {
        "containerImage": "quay.io/jupyter/minimal-notebook:2026-01-01",
        "env": [{"name": "MPLBACKEND", "value": "Agg"}, {"name": "EMPTY"}],
        "nodeSelector": {"nvidia.com/gpu.present": "true"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi", "nvidia.com/gpu": 1}},
        "buildConfig": {
            "enabled": True,
            "strategy": "kaniko",
            "baseImage": "python:3.12-slim",
            "requirements": ["numpy>=2", "pandas"],
            "timeout": "10m30s",
        },
    },
    "comparisonConfig": {"strategy": "normalized", "floatingPointTolerance": 1e-6, "relativeTolerance": 0,
                         "ignoreTimestamps": False, "customTimestampPatterns": [r"run-\d+"],
                         "ignoreOutputTypes": ["stream:stderr", "image/*", "text/html"],
                         "ignoreExecutionCount": True},
    "timeout": "1h",
    "cellTimeout": "90s",
}


def nvj(name: str, spec: dict | None = None) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "NotebookValidationJob",
            "metadata": {"name": name}, "spec": copy.deepcopy(VALID_SPEC if spec is None else spec)}


def status_body(exc: ApiException) -> dict:
    try:
        return json.loads(exc.body)
    except (TypeError, ValueError):
        return {}


# --------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_apiserver_up_and_reports_built_version(kube_apiserver):
    h = kube_apiserver
    out = subprocess.run([str(h.apiserver_bin), "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"Kubernetes {h.version}"
    async with await h.admin_client() as api:
        info = await client.VersionApi(api).get_code()
    assert info.git_version == h.version
    assert info.git_tree_state == "clean"
    assert (info.major, info.minor) == ("1", h.version.split(".")[1])
    # /readyz is public (system:public-info-viewer)
    with urllib.request.urlopen(f"{h.host}/readyz", context=h.ssl_context, timeout=10) as r:
        assert r.status == 200
    print(f"kube-apiserver {h.version} ready in {h.ready_seconds:.1f} s")


@pytest.mark.asyncio
async def test_crd_established_with_printer_columns_and_short_name(kube_apiserver):
    async with await kube_apiserver.admin_client() as api:
        crd = await client.ApiextensionsV1Api(api).read_custom_resource_definition(harness.CRD_NAME)
        conds = {c.type: c.status for c in crd.status.conditions}
        assert conds.get("Established") == "True"
        assert conds.get("NamesAccepted") == "True"
        assert crd.spec.names.short_names == ["nvj"]
        assert crd.spec.names.categories == ["nbvalidation"]
        assert crd.spec.scope == "Namespaced"
        (v,) = crd.spec.versions
        assert (v.name, v.served, v.storage) == (VERSION, True, True)
        assert [(c.name, c.json_path) for c in v.additional_printer_columns] == [
            ("Phase", ".status.phase"), ("Notebook", ".spec.notebook.path"),
            ("Reason", ".status.reason"), ("Age", ".metadata.creationTimestamp")]

    # discovery, as kubectl sees it
    disc = kube_apiserver.request("GET", f"/apis/{GROUP}/{VERSION}")
    by_name = {r["name"]: r for r in disc["resources"]}
    res = by_name[PLURAL]
    assert res["kind"] == "NotebookValidationJob"
    assert res["namespaced"] is True
    assert res["shortNames"] == ["nvj"]
    assert res["categories"] == ["nbvalidation"]
    assert res["singularName"] == "notebookvalidationjob"
    assert f"{PLURAL}/status" in by_name


def _without(spec: dict, *path: str) -> dict:
    spec = copy.deepcopy(spec)
    cur = spec
    for p in path[:-1]:
        cur = cur[p]
    del cur[path[-1]]
    return spec


def _with(spec: dict, value, *path: str) -> dict:
    spec = copy.deepcopy(spec)
    cur = spec
    for p in path[:-1]:
        cur = cur.setdefault(p, {})
    cur[path[-1]] = value
    return spec


INVALID = {
    "missing-notebook-path": (_with(VALID_SPEC, {}, "notebook"), "spec.notebook.path", "Required value"),
    "missing-notebook": (_without(VALID_SPEC, "notebook"), "spec.notebook", "Required value"),
    "notebook-not-ipynb": (_with(VALID_SPEC, "report.py", "notebook", "path"), "spec.notebook.path",
                           "should match"),
    "golden-without-path": (_with(VALID_SPEC, {}, "goldenNotebook"), "spec.goldenNotebook.path",
                            "Required value"),
    "bad-timeout": (_with(VALID_SPEC, "ten minutes", "timeout"), "spec.timeout", "should match"),
    "bad-cell-timeout": (_with(VALID_SPEC, "90", "cellTimeout"), "spec.cellTimeout", "should match"),
    "bad-build-timeout": (_with(VALID_SPEC, "1d", "podConfig", "buildConfig", "timeout"),
                          "spec.podConfig.buildConfig.timeout", "should match"),
    "strategy-not-in-enum": (_with(VALID_SPEC, "docker", "podConfig", "buildConfig", "strategy"),
                             "spec.podConfig.buildConfig.strategy", "Unsupported value"),
    "comparison-strategy-not-in-enum": (_with(VALID_SPEC, "fuzzy", "comparisonConfig", "strategy"),
                                        "spec.comparisonConfig.strategy", "Unsupported value"),
    "negative-tolerance": (_with(VALID_SPEC, -0.5, "comparisonConfig", "floatingPointTolerance"),
                           "spec.comparisonConfig.floatingPointTolerance", "greater than or equal to 0"),
    "bad-quantity": (_with(VALID_SPEC, {"memory": "lots"}, "podConfig", "resources", "limits"),
                     "spec.podConfig.resources.limits.memory", "should match"),
    "bad-toleration-operator": (_with(VALID_SPEC, [{"key": "k", "operator": "Maybe"}], "podConfig", "tolerations"),
                                "spec.podConfig.tolerations[0].operator", "Unsupported value"),
    "bad-output-selector": (_with(VALID_SPEC, ["pictures"], "comparisonConfig", "ignoreOutputTypes"),
                            "spec.comparisonConfig.ignoreOutputTypes[0]", "should match"),
    "enabled-not-bool": (_with(VALID_SPEC, "yes", "podConfig", "buildConfig", "enabled"),
                         "spec.podConfig.buildConfig.enabled", "must be of type boolean"),
    "requirements-and-file": (_with(VALID_SPEC, "requirements.txt", "podConfig", "buildConfig",
                                    "requirementsFile"),
                              "spec.podConfig.buildConfig.requirements",
                              "requirementsFile and requirements are mutually exclusive"),
}


@pytest.mark.asyncio
@pytest.mark.parametrize("case", sorted(INVALID))
async def test_invalid_spec_rejected_with_field_named(kube_apiserver, k8s_namespace, case):
    spec, field, words = INVALID[case]
    async with await kube_apiserver.admin_client() as api:
        co = client.CustomObjectsApi(api)
        with pytest.raises(ApiException) as ei:
            await co.create_namespaced_custom_object(GROUP, VERSION, k8s_namespace, PLURAL,
                                                     nvj(f"bad-{case}", spec))
    assert ei.value.status == 422, ei.value.body
    st = status_body(ei.value)
    assert st["reason"] == "Invalid"
    causes = [(c.get("field"), c.get("message", "")) for c in st["details"]["causes"]]
    assert any(f == field and words in m for f, m in causes), (causes, st["message"])
    # and the human-readable message names the field too
    assert field in st["message"] and words in st["message"]


@pytest.mark.asyncio
async def test_missing_spec_rejected(kube_apiserver, k8s_namespace):
    body = nvj("no-spec")
    del body["spec"]
    async with await kube_apiserver.admin_client() as api:
        with pytest.raises(ApiException) as ei:
            await client.CustomObjectsApi(api).create_namespaced_custom_object(
                GROUP, VERSION, k8s_namespace, PLURAL, body)
    assert ei.value.status == 422
    assert "spec: Required value" in status_body(ei.value)["message"]


@pytest.mark.asyncio
async def test_unknown_spec_fields_pruned_or_rejected_when_strict(kube_apiserver, k8s_namespace):
    spec = _with(_with(VALID_SPEC, "x", "notebookConfigMap"), True, "podConfig", "buildConfig", "push")
    async with await kube_apiserver.admin_client() as api:
        co = client.CustomObjectsApi(api)
        with pytest.raises(ApiException) as ei:
            await co.create_namespaced_custom_object(GROUP, VERSION, k8s_namespace, PLURAL,
                                                     nvj("strict", spec), field_validation="Strict")
        assert ei.value.status in (400, 422)
        msg = status_body(ei.value).get("message", ei.value.body)
        assert 'unknown field "spec.notebookConfigMap"' in msg
        assert 'unknown field "spec.podConfig.buildConfig.push"' in msg

        created = await co.create_namespaced_custom_object(GROUP, VERSION, k8s_namespace, PLURAL,
                                                           nvj("pruned", spec))
        assert "notebookConfigMap" not in created["spec"]
        assert "push" not in created["spec"]["podConfig"]["buildConfig"]
        assert created["spec"] == VALID_SPEC


@pytest.mark.asyncio
async def test_valid_cr_accepted_and_status_only_via_subresource(kube_apiserver, k8s_namespace):
    ns = k8s_namespace
    body = nvj("ok")
    body["metadata"]["annotations"] = {"nbvalidation.dev/notebook-configmap": "ok-snapshot"}
    body["status"] = {"phase": "Succeeded"}  # ignored on create (status subresource)
    async with await kube_apiserver.admin_client() as api:
        co = client.CustomObjectsApi(api)
        created = await co.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
        assert created["spec"] == VALID_SPEC
        assert "status" not in created or not created["status"]
        assert created["metadata"]["generation"] == 1

        # a status change through the main resource is ignored
        patched = await co.patch_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, "ok", {"status": {"phase": "Failed"}},
            _content_type=harness.MERGE)
        assert not patched.get("status")

        status = {
            "phase": "ValidationRunning", "reason": "ValidationStarted", "message": "running",
            "startTime": "2026-01-02T03:04:05.123456Z", "observedGeneration": 1,
            "conditions": [{"type": "Ready", "status": "False", "reason": "Running", "message": "",
                            "lastTransitionTime": "2026-01-02T03:04:05Z"}],
            "transitions": [{"phase": "Initializing", "reason": "Accepted", "message": "",
                             "time": "2026-01-02T03:04:00.000001Z"}],
            "buildStatus": {"image": "registry/x@sha256:" + "0" * 64, "extra": {"kept": True}},
            "results": [{"cell": 0, "status": "ok"}],
            "comparisonResult": {"matched": 3, "total": 3},
            "futureField": "kept",  # status preserves unknown fields
        }
        after = await co.patch_namespaced_custom_object_status(
            GROUP, VERSION, ns, PLURAL, "ok", {"status": status}, _content_type=harness.MERGE)
        assert after["status"] == status
        assert after["metadata"]["generation"] == 1  # status writes do not bump generation
        # a spec change through the status subresource is ignored
        after = await co.patch_namespaced_custom_object_status(
            GROUP, VERSION, ns, PLURAL, "ok", {"spec": {"timeout": "5m"}}, _content_type=harness.MERGE)
        assert after["spec"]["timeout"] == "1h"

        # the status schema is enforced too
        with pytest.raises(ApiException) as ei:
            await co.patch_namespaced_custom_object_status(
                GROUP, VERSION, ns, PLURAL, "ok", {"status": {"phase": "Exploded"}},
                _content_type=harness.MERGE)
        assert ei.value.status == 422
        assert "status.phase" in status_body(ei.value)["message"]
        with pytest.raises(ApiException) as ei:
            await co.patch_namespaced_custom_object_status(
                GROUP, VERSION, ns, PLURAL, "ok", {"status": {"completionTime": "yesterday"}},
                _content_type=harness.MERGE)
        assert ei.value.status == 422

        # optimistic concurrency on the status subresource (the engine relies on it)
        current = await co.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "ok")
        stale = copy.deepcopy(current)
        current["status"]["phase"] = "Succeeded"
        await co.replace_namespaced_custom_object_status(GROUP, VERSION, ns, PLURAL, "ok", current)
        stale["status"]["phase"] = "Failed"
        with pytest.raises(ApiException) as ei:
            await co.replace_namespaced_custom_object_status(GROUP, VERSION, ns, PLURAL, "ok", stale)
        assert ei.value.status == 409


@pytest.mark.asyncio
async def test_limited_identity_is_confined_to_its_namespace(kube_apiserver):
    h = kube_apiserver
    ns_a, ns_b = h.create_namespace(), h.create_namespace()
    harness.limited_in_namespace(h, ns_a)
    async with await h.admin_client() as admin:
        await client.CustomObjectsApi(admin).create_namespaced_custom_object(
            GROUP, VERSION, ns_b, PLURAL, nvj("in-b"))
    async with await h.limited_client() as api:
        co = client.CustomObjectsApi(api)
        # namespace A: allowed (list, create, status)
        assert (await co.list_namespaced_custom_object(GROUP, VERSION, ns_a, PLURAL))["items"] == []
        await co.create_namespaced_custom_object(GROUP, VERSION, ns_a, PLURAL, nvj("mine"))
        await co.patch_namespaced_custom_object_status(
            GROUP, VERSION, ns_a, PLURAL, "mine", {"status": {"phase": "Initializing"}},
            _content_type=harness.MERGE)
        names = [o["metadata"]["name"] for o in
                 (await co.list_namespaced_custom_object(GROUP, VERSION, ns_a, PLURAL))["items"]]
        assert names == ["mine"]
        # namespace B and cluster-wide: 403 Forbidden
        for call in (co.list_namespaced_custom_object(GROUP, VERSION, ns_b, PLURAL),
                     co.get_namespaced_custom_object(GROUP, VERSION, ns_b, PLURAL, "in-b"),
                     co.list_cluster_custom_object(GROUP, VERSION, PLURAL)):
            with pytest.raises(ApiException) as ei:
                await call
            assert ei.value.status == 403
            st = status_body(ei.value)
            assert st["reason"] == "Forbidden"
            assert 'User "alice" cannot' in st["message"]
        # things role.yaml does not grant, even in A
        core = client.CoreV1Api(api)
        with pytest.raises(ApiException) as ei:
            await core.list_namespaced_secret(ns_a)
        assert ei.value.status == 403
        with pytest.raises(ApiException) as ei:
            await core.create_namespaced_pod_binding("x", ns_a, {
                "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "x"},
                "target": {"kind": "Node", "name": "n"}})
        assert ei.value.status == 403
        # what it needs in A, as the API server's authorizer answers
        authz = client.AuthorizationV1Api(api)
        for group, resource, sub, verb in [
            (GROUP, PLURAL, "", "watch"), (GROUP, PLURAL, "status", "update"),
            ("", "configmaps", "", "create"), ("", "pods", "log", "get"), ("", "pods", "", "delete"),
            ("batch", "jobs", "", "create"), ("events.k8s.io", "events", "", "patch"),
            ("coordination.k8s.io", "leases", "", "update"),
        ]:
            for ns, allowed in ((ns_a, True), (ns_b, False)):
                r = await authz.create_self_subject_access_review({
                    "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                    "spec": {"resourceAttributes": {"namespace": ns, "verb": verb, "group": group,
                                                    "resource": resource, "subresource": sub}}})
                assert r.status.allowed is allowed, (ns, group, resource, sub, verb)


POD = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "validate"},
    "spec": {"restartPolicy": "Never",
             "containers": [{"name": "runner", "image": "python:3.12-slim", "command": ["true"]},
                            {"name": "sidecar", "image": "busybox", "command": ["true"]}]},
}


@pytest.mark.asyncio
async def test_complete_pod_writes_status_the_apiserver_accepts(kube_apiserver, k8s_namespace):
    ns = k8s_namespace
    async with await kube_apiserver.admin_client() as api:
        core = client.CoreV1Api(api)
        ok, bad = copy.deepcopy(POD), copy.deepcopy(POD)
        ok["metadata"]["name"], bad["metadata"]["name"] = "ok", "bad"
        await core.create_namespaced_pod(ns, ok)
        await core.create_namespaced_pod(ns, bad)

        running = await harness.start_pod(api, ns, "ok")
        assert running["status"]["phase"] == "Running"
        assert running["spec"]["nodeName"] == "fake-node"

        digest = "sha256:" + "ab" * 32
        done = await harness.complete_pod(api, ns, "ok", message=digest)
        assert done["status"]["phase"] == "Succeeded"
        cs = {c["name"]: c for c in done["status"]["containerStatuses"]}
        term = cs["runner"]["state"]["terminated"]
        assert (term["exitCode"], term["reason"], term["message"]) == (0, "Completed", digest)
        assert term["startedAt"] and term["finishedAt"]
        assert cs["sidecar"]["state"]["terminated"]["exitCode"] == 0

        failed = await harness.complete_pod(api, ns, "bad", exit_code=3, message="cell 4 raised")
        assert failed["status"]["phase"] == "Failed"
        term = {c["name"]: c for c in failed["status"]["containerStatuses"]}["runner"]["state"]["terminated"]
        assert (term["exitCode"], term["reason"], term["message"]) == (3, "Error", "cell 4 raised")

        # read back through the typed client, as the backend will
        pod = await core.read_namespaced_pod("bad", ns)
        (runner,) = [c for c in pod.status.container_statuses if c.name == "runner"]
        assert runner.state.terminated.exit_code == 3

        with pytest.raises(ValueError):
            await harness.complete_pod(api, ns, "ok", container="nope")


JOB = {
    "apiVersion": "batch/v1", "kind": "Job",
    "metadata": {"name": "build"},
    "spec": {"backoffLimit": 0,
             "template": {"spec": {"restartPolicy": "Never",
                                   "containers": [{"name": "kaniko", "image": "kaniko:latest"}]}}},
}


async def _new_job(batch, ns: str, name: str) -> None:
    job = copy.deepcopy(JOB)
    job["metadata"]["name"] = name
    await batch.create_namespaced_job(ns, job)


@pytest.mark.asyncio
async def test_complete_job_success_and_failure(kube_apiserver, k8s_namespace):
    ns = k8s_namespace
    async with await kube_apiserver.admin_client() as api:
        batch = client.BatchV1Api(api)
        await _new_job(batch, ns, "good")
        await _new_job(batch, ns, "bad")

        job = await harness.complete_job(api, ns, "good")
        st = job["status"]
        assert [(c["type"], c["status"]) for c in st["conditions"]] == [
            ("SuccessCriteriaMet", "True"), ("Complete", "True")]
        assert st["succeeded"] == 1 and st.get("active", 0) == 0  # 0 is omitted
        assert st["startTime"] and st["completionTime"]

        job = await harness.complete_job(api, ns, "bad", succeeded=False, message="build failed")
        st = job["status"]
        assert [(c["type"], c["status"], c["reason"]) for c in st["conditions"]] == [
            ("FailureTarget", "True", "BackoffLimitExceeded"), ("Failed", "True", "BackoffLimitExceeded")]
        assert st["conditions"][1]["message"] == "build failed"
        assert st["failed"] == 1 and st.get("active", 0) == 0
        assert "completionTime" not in st

        typed = await batch.read_namespaced_job("good", ns)
        assert any(c.type == "Complete" and c.status == "True" for c in typed.status.conditions)


@pytest.mark.asyncio
async def test_job_status_validation_rules(kube_apiserver, k8s_namespace):
    """Records, by trial, what the 1.35 Job status validation rejects (the
    reason complete_job writes what it writes, in that order)."""
    ns = k8s_namespace
    now = "2026-01-01T00:00:00Z"
    later = "2026-01-01T00:01:00Z"

    def cond(t):
        return {"type": t, "status": "True", "reason": "R", "message": "m",
                "lastProbeTime": now, "lastTransitionTime": now}

    rejected = {
        "Complete without SuccessCriteriaMet": {
            "startTime": now, "active": 0, "succeeded": 1, "completionTime": later,
            "conditions": [cond("Complete")]},
        "Failed without FailureTarget": {
            "startTime": now, "active": 0, "failed": 1, "conditions": [cond("Failed")]},
        "Complete without completionTime": {
            "startTime": now, "active": 0, "succeeded": 1,
            "conditions": [cond("SuccessCriteriaMet"), cond("Complete")]},
        "completionTime on a running Job": {"startTime": now, "active": 1, "completionTime": later},
        "Complete while active > 0": {
            "startTime": now, "active": 1, "succeeded": 1, "completionTime": later,
            "conditions": [cond("SuccessCriteriaMet"), cond("Complete")]},
        "Complete without startTime": {
            "active": 0, "succeeded": 1, "completionTime": later,
            "conditions": [cond("SuccessCriteriaMet"), cond("Complete")]},
        "completionTime on a Failed Job": {
            "startTime": now, "active": 0, "failed": 1, "completionTime": later,
            "conditions": [cond("FailureTarget"), cond("Failed")]},
        "Complete with uncounted terminated pods": {
            "startTime": now, "active": 0, "succeeded": 1, "completionTime": later,
            "uncountedTerminatedPods": {"succeeded": ["0f0e0d0c-0b0a-0908-0706-050403020100"]},
            "conditions": [cond("SuccessCriteriaMet"), cond("Complete")]},
        "more ready than active": {"startTime": now, "active": 1, "ready": 2},
    }
    accepted = {
        # both conditions in one write is accepted too; the controller (and
        # complete_job) write the interim one first
        "SuccessCriteriaMet and Complete at once": {
            "startTime": now, "active": 0, "succeeded": 1, "completionTime": later,
            "conditions": [cond("SuccessCriteriaMet"), cond("Complete")]},
        "FailureTarget while a pod is still active": {
            "startTime": now, "active": 1, "failed": 1, "conditions": [cond("FailureTarget")]},
        # not checked against succeeded/completions (a success policy may fire early)
        "SuccessCriteriaMet before completions are reached": {
            "startTime": now, "active": 1, "succeeded": 0, "conditions": [cond("SuccessCriteriaMet")]},
    }
    async with await kube_apiserver.admin_client() as api:
        batch = client.BatchV1Api(api)
        outcome = {}
        for i, (what, status) in enumerate([*rejected.items(), *accepted.items()]):
            name = f"v{i}"
            await _new_job(batch, ns, name)
            try:
                await batch.patch_namespaced_job_status(name, ns, {"status": status},
                                                        _content_type=harness.MERGE)
                outcome[what] = "accepted"
            except ApiException as e:
                outcome[what] = f"{e.status}: {status_body(e).get('message', e.body)}"
        print(json.dumps(outcome, indent=1))
        assert {w for w, o in outcome.items() if o == "accepted"} == set(accepted), outcome
        assert all(outcome[w].startswith("422: ") for w in rejected), outcome


def test_kubectl_get_nvj_shows_printer_columns(kube_apiserver, k8s_namespace):
    h, ns = kube_apiserver, k8s_namespace
    h.request("POST", f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{PLURAL}", nvj("shown"))
    h.request("PATCH", f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{PLURAL}/shown/status",
              {"status": {"phase": "Failed", "reason": "ValidationFailed"}},
              content_type=harness.MERGE)
    # the Table the printer columns produce (what kubectl renders)
    req = urllib.request.Request(
        f"{h.host}/apis/{GROUP}/{VERSION}/namespaces/{ns}/{PLURAL}",
        headers={"Authorization": f"Bearer {h.admin_token}",
                 "Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
    with urllib.request.urlopen(req, context=h.ssl_context, timeout=10) as r:
        table = json.loads(r.read())
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Phase", "Notebook", "Reason", "Age"]
    assert table["rows"][0]["cells"][:4] == ["shown", "Failed", "analysis/report.ipynb", "ValidationFailed"]

    kubectl = harness.kubectl_binary()
    cache = ["--cache-dir", str(h.work_dir / "kubectl-cache")]  # not ~/.kube/cache
    out = subprocess.run([kubectl, *cache, "--kubeconfig", h.admin_kubeconfig, "get", "nvj", "-n", ns],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    header, row = out.stdout.splitlines()[:2]
    assert header.split() == ["NAME", "PHASE", "NOTEBOOK", "REASON", "AGE"]
    assert row.split()[:4] == ["shown", "Failed", "analysis/report.ipynb", "ValidationFailed"]
    # the category works too
    out = subprocess.run([kubectl, *cache, "--kubeconfig", h.admin_kubeconfig, "get", "nbvalidation", "-n", ns, "-o", "name"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"notebookvalidationjob.{GROUP}/shown"
    # the limited kubeconfig is usable (and confined): alice has no rights in ns
    out = subprocess.run([kubectl, *cache, "--kubeconfig", h.limited_kubeconfig, "get", "nvj", "-n", ns],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "Forbidden" in out.stderr


@pytest.mark.asyncio
async def test_apiserver_restart_keeps_data(kube_apiserver, k8s_namespace):
    h, ns = kube_apiserver, k8s_namespace
    async with await h.admin_client() as api:
        await client.CustomObjectsApi(api).create_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, nvj("survivor"))
    h.stop_apiserver()
    assert not h.apiserver_running
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{h.host}/readyz", context=h.ssl_context, timeout=5)
    h.start_apiserver()
    assert h.apiserver_running
    print(f"restarted: ready in {h.ready_seconds:.1f} s")
    async with await h.admin_client() as api:
        got = await client.CustomObjectsApi(api).get_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, "survivor")
    assert got["spec"]["notebook"]["path"] == "analysis/report.ipynb"
