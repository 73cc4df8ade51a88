"""The child-object helpers (k8s/children.py) on the REAL API server
(tests/k8s_harness.py): what is adopted and what never is, and how an API
failure is classified (docs/architecture.md, "Errors contract")."""

from __future__ import annotations

import uuid

import pytest
import pytest_asyncio
from k8s_support import make_env

import jupyter_nbvalidation.backends.kubernetes.objects as obj
from jupyter_nbvalidation.backends.kubernetes.children import NotOurs, api_failure
from jupyter_nbvalidation.backends.kubernetes.client import CONFIGMAPS, PODS, KubeApiError
from jupyter_nbvalidation.core.errors import PermanentFailure, TemporaryFailure
from jupyter_nbvalidation.store.base import StoreError

pytestmark = pytest.mark.k8s


@pytest_asyncio.fixture
async def children(kube_apiserver, k8s_namespace, tmp_path):
    e = make_env(kube_apiserver, k8s_namespace, tmp_path / "root")
    await e.backend.start(lambda name: None)
    yield e.backend.children
    await e.backend.stop()
    await e.backend.store.stop()


def _job(ns: str, name: str = "adopt") -> dict:
    return {"metadata": {"name": name, "uid": str(uuid.uuid4()), "namespace": ns}, "spec": {}}


def _configmap(job: dict, name: str, owner: dict | None, **data: str) -> dict:
    meta: dict = {"name": name, "namespace": job["metadata"]["namespace"], "labels": obj.labels(job, "build")}
    if owner is not None:
        meta["ownerReferences"] = [obj.owner_reference(owner)]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


@pytest.mark.asyncio
async def test_a_same_named_child_owned_by_another_job_is_never_adopted(children, k8s_namespace, admin):
    mine, theirs = _job(k8s_namespace), _job(k8s_namespace)  # same name, another uid (a re-created job)
    name = obj.build_context_name("adopt")
    await admin.request("POST", CONFIGMAPS.path(k8s_namespace), body=_configmap(mine, name, theirs, who="theirs"))
    with pytest.raises(NotOurs, match=f"configmaps/{name} already exists in namespace {k8s_namespace} and does "
                                      "not belong to this job"):
        await children.create(CONFIGMAPS, _configmap(mine, name, mine, who="mine"), mine)

    async def body() -> dict:
        raise AssertionError("ensure() must not create over a foreign child")

    with pytest.raises(NotOurs):
        await children.ensure(CONFIGMAPS, None, mine, name, body)
    assert await children.mine(CONFIGMAPS, None, mine, name) is None
    kept = await admin.request("GET", CONFIGMAPS.path(k8s_namespace, name))
    assert kept["data"] == {"who": "theirs"}  # untouched


@pytest.mark.asyncio
async def test_our_labels_without_our_owner_reference_are_not_ours(children, k8s_namespace, admin):
    job = _job(k8s_namespace)
    name = obj.build_context_name("adopt")
    await admin.request("POST", CONFIGMAPS.path(k8s_namespace), body=_configmap(job, name, None, who="nobody"))
    with pytest.raises(NotOurs):
        await children.create(CONFIGMAPS, _configmap(job, name, job), job)


@pytest.mark.asyncio
async def test_our_own_orphan_is_adopted_not_created_twice(children, k8s_namespace, admin):
    """A child this job's earlier engine created (it crashed before caching it): the 409 adopts it."""
    job = _job(k8s_namespace)
    name = obj.validation_pod_name("adopt")
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": k8s_namespace, "labels": obj.labels(job, "validation"),
                        "ownerReferences": [obj.owner_reference(job)]},
           "spec": {"containers": [{"name": "runner", "image": "registry.test:5000/x@sha256:" + "0" * 64}]}}
    first = await admin.request("POST", PODS.path(k8s_namespace), body=pod)
    informer = children.pods()
    informer.forget(name)
    adopted = await children.create(PODS, pod, job, informer)
    assert adopted["metadata"]["uid"] == first["metadata"]["uid"]
    assert informer.get(name)["metadata"]["uid"] == first["metadata"]["uid"]  # cached from now on

    async def body() -> dict:
        raise AssertionError("an existing child of ours is read, not created")

    informer.forget(name)
    assert (await children.ensure(PODS, None, job, name, body))["metadata"]["uid"] == first["metadata"]["uid"]
    listed = await admin.request("GET", PODS.path(k8s_namespace))
    assert [p["metadata"]["uid"] for p in listed["items"]] == [first["metadata"]["uid"]]


@pytest.mark.asyncio
async def test_an_invalid_child_is_a_permanent_failure_and_a_missing_one_none(children, k8s_namespace):
    job = _job(k8s_namespace)
    bad = _configmap(job, "Not_A_Valid_Name", job)  # 422 Invalid: the same request fails the same way
    with pytest.raises(PermanentFailure, match="creating configmaps/Not_A_Valid_Name: Invalid"):
        await children.create(CONFIGMAPS, bad, job)
    assert await children.read(CONFIGMAPS, None, k8s_namespace, "nvj-none-build-ctx") is None
    await children.delete(CONFIGMAPS, k8s_namespace, "nvj-none-build-ctx")  # gone already: fine


@pytest.mark.parametrize("status, reason, kind", [
    (403, "Forbidden", PermanentFailure), (422, "Invalid", PermanentFailure), (400, "BadRequest", PermanentFailure),
    (409, "Conflict", TemporaryFailure), (429, "TooManyRequests", TemporaryFailure),
    (500, "InternalError", TemporaryFailure), (503, "ServiceUnavailable", TemporaryFailure),
    (504, "Timeout", TemporaryFailure), (0, "Unreachable", TemporaryFailure),
])
def test_api_failures_are_temporary_or_permanent(status, reason, kind):
    e = api_failure(KubeApiError(status, reason, "said the server", {"retryAfterSeconds": 3}), "creating pods/x")
    assert isinstance(e, kind) and isinstance(e, StoreError)  # a store error still, for the service's 503
    assert not isinstance(e, PermanentFailure if kind is TemporaryFailure else TemporaryFailure)
    assert str(e) == f"creating pods/x: {reason}: said the server"
    if status == 429:
        assert e.delay == 3.0
