"""Schedules on the Kubernetes backend, against the API server harness (no kubelet: a run's Pod is
only created): NotebookValidationSchedule objects (manifests/schedule-crd.yaml) made, listed,
read, paused and deleted through the service and through REST, owner-scoped as jobs are (another
user's schedule is a 404; a user's names are their own), the job template refused by the API
server's strict field validation as a job's spec is, and a schedule applied with kubectl run by
the leader's loop. docs/watching.md, "Where schedules are kept"."""

from __future__ import annotations

import json
import subprocess

import pytest
import pytest_asyncio
import yaml
from git_support import GitHTTP, Repo
from helpers import write_notebook
from k8s_harness import kubectl_binary
from k8s_support import REGISTRY, RUNNER_IMAGE, get_or_none, make_env, wait_for

from jupyter_nbvalidation.backends.kubernetes.client import KubeApiError, connect
from jupyter_nbvalidation.backends.kubernetes.schedules import NVS, object_name
from jupyter_nbvalidation.backends.kubernetes.store import NVJ
from jupyter_nbvalidation.service.errors import ApiError
from jupyter_nbvalidation.service.scheduler import Scheduler
from jupyter_nbvalidation.service.schedules import Schedules
from jupyter_nbvalidation.store.base import OWNER_LABEL, SCHEDULE_LABEL, Conflict, NotFound

pytestmark = pytest.mark.k8s
NO_BUILD = {"buildConfig": {"enabled": False}}
API = ("nbvalidation", "api", "v1")


@pytest_asyncio.fixture
async def env(kube_apiserver, k8s_namespace, tmp_path):
    """The server as the shipped Role lets it act (role.yaml bound to it): its rules on
    notebookvalidationschedules are what every call below needs."""
    kube_apiserver.limited_in_namespace(k8s_namespace)
    e = make_env(kube_apiserver, k8s_namespace, tmp_path / "root", kubeconfig=kube_apiserver.limited_kubeconfig,
                 runner_image=RUNNER_IMAGE)
    write_notebook(e.root / "ok.ipynb", ["print(1)"])
    await e.engine.start()
    yield e
    await e.engine.stop()


def manifest(name: str, job: dict, schedule: str = "@daily") -> dict:
    return {"metadata": {"name": name}, "spec": {"schedule": schedule, "jobTemplate": {"spec": job}}}


async def refused(call) -> ApiError:
    with pytest.raises(ApiError) as e:
        await call
    return e.value


@pytest.mark.asyncio
async def test_schedules_are_custom_resources_made_read_paused_and_deleted_through_the_service(env, admin):
    assert env.store.schedules_supported
    schedules = Schedules(env.service)
    made = await schedules.create(manifest("nightly", {"notebook": {"path": "ok.ipynb"}, "podConfig": NO_BUILD}))
    assert made["metadata"]["name"] == "nightly" and made["spec"]["suspend"] is False
    assert made["status"]["nextScheduleTime"] and made["status"]["recent"] == []
    obj = await admin.request("GET", NVS.path(env.ns, "nightly"))  # the server's own user: the name itself
    assert obj["kind"] == "NotebookValidationSchedule" and obj["spec"]["schedule"] == "@daily"
    assert OWNER_LABEL not in (obj["metadata"].get("labels") or {})
    assert "x-caller" not in made and "x-caller" not in obj

    err = await refused(schedules.create(manifest("nightly", {"notebook": {"path": "ok.ipynb"}})))
    assert err.status == 409 and err.field == "metadata.name"
    assert [s["metadata"]["name"] for s in (await schedules.list())["items"]] == ["nightly"]

    paused = await schedules.set_suspend("nightly", {"spec": {"suspend": True}})
    assert paused["spec"]["suspend"] is True and paused["status"]["nextScheduleTime"] is None
    assert (await admin.request("GET", NVS.path(env.ns, "nightly")))["spec"]["suspend"] is True
    resumed = await schedules.set_suspend("nightly", {"spec": {"suspend": False}})
    assert resumed["status"]["lastTickTime"]  # written through the status subresource
    assert (await admin.request("GET", NVS.path(env.ns, "nightly")))["status"]["lastTickTime"]

    read = await env.store.get_schedule("nightly", None)  # conditional writes: a stale one is a Conflict
    read["status"]["message"] = "first"
    await env.store.replace_schedule(read, None)
    read["status"]["message"] = "second, on the version the first replaced"
    with pytest.raises(Conflict):
        await env.store.replace_schedule(read, None)
    assert (await env.store.get_schedule("nightly", None))["status"]["message"] == "first"

    run = await schedules.trigger("nightly")
    name = run["metadata"]["name"]
    assert run["metadata"]["labels"][SCHEDULE_LABEL] == "nightly"
    assert not (await admin.request("GET", NVJ.path(env.ns, name)))["metadata"].get("ownerReferences")
    assert (await schedules.get("nightly"))["status"]["active"] == name
    assert [j["metadata"]["name"] for j in (await schedules.jobs("nightly", 10))["items"]] == [name]
    err = await refused(schedules.trigger("nightly"))  # no kubelet: the run still goes
    assert err.status == 409 and name in err.message

    gone = await schedules.delete("nightly")
    assert gone["details"]["name"] == "nightly"
    assert await get_or_none(admin, NVS.path(env.ns, "nightly")) is None
    assert await get_or_none(admin, NVJ.path(env.ns, name)) is not None  # its jobs are kept
    assert (await refused(schedules.get("nightly"))).status == 404
    with pytest.raises(NotFound):
        await env.store.get_schedule("nightly", None)


@pytest.mark.asyncio
async def test_another_owners_schedule_is_a_404_and_a_users_names_are_their_own(env, admin, tmp_path):
    repo = Repo(tmp_path / "git")
    repo.notebook("nb.ipynb", ["print(1)"])
    repo.commit("first")
    with GitHTTP(repo.bare.parent) as server:
        job = {"notebook": {"git": {"url": server.url(), "ref": "main"}, "path": "nb.ipynb"}, "podConfig": NO_BUILD}
        alice, bob = Schedules(env.service.as_user("alice")), Schedules(env.service.as_user("bob"))
        await alice.create(manifest("nightly", job))
        for call in (bob.get("nightly"), bob.delete("nightly"), bob.trigger("nightly"), bob.jobs("nightly", 10),
                     bob.set_suspend("nightly", {"spec": {"suspend": True}})):
            err = await refused(call)
            assert err.status == 404 and err.message == "no schedule named 'nightly'"
        assert (await bob.list())["items"] == []
        assert (await Schedules(env.service).list())["items"] == []  # the server's own user's: none
        await bob.create(manifest("nightly", job))  # bob's names are his own
        objs = (await admin.request("GET", NVS.path(env.ns)))["items"]
        assert sorted(o["metadata"]["name"] for o in objs) == sorted(
            [object_name("nightly", "alice"), object_name("nightly", "bob")])
        assert {o["metadata"]["labels"][OWNER_LABEL] for o in objs} == {"alice", "bob"}
        assert len(await env.store.list_schedules(None, every_owner=True)) == 2

        run = await alice.trigger("nightly")
        labels = run["metadata"]["labels"]
        assert labels[OWNER_LABEL] == "alice" and labels[SCHEDULE_LABEL] == "nightly"
        assert [j["metadata"]["name"] for j in (await alice.jobs("nightly", 10))["items"]] == [run["metadata"]["name"]]
        assert (await bob.jobs("nightly", 10))["items"] == []
        await alice.delete("nightly")
        assert (await bob.get("nightly"))["metadata"]["name"] == "nightly"


def _kubectl(kube_apiserver, ns: str, doc: dict) -> subprocess.CompletedProcess:
    return subprocess.run([kubectl_binary(), "--kubeconfig", kube_apiserver.admin_kubeconfig, "-n", ns, "apply",
                           "-f", "-"], input=yaml.safe_dump(doc), capture_output=True, text=True, timeout=60)


def nvs(name: str, job: dict, schedule: str) -> dict:
    return {"apiVersion": "nbvalidation.dev/v1alpha1", "kind": "NotebookValidationSchedule",
            "metadata": {"name": name}, "spec": {"schedule": schedule, "jobTemplate": {"spec": job}}}


@pytest.mark.asyncio
async def test_an_unknown_field_is_refused_by_the_api_servers_strict_field_validation(kube_apiserver, k8s_namespace,
                                                                                     admin):
    job = {"notebook": {"path": "ok.ipynb"}, "podConfig": {**NO_BUILD, "containerImage": RUNNER_IMAGE,
                                                           "nodeName": "n1"}}
    r = _kubectl(kube_apiserver, k8s_namespace, nvs("strict", job, "@daily"))
    assert r.returncode != 0 and "unknown field" in r.stderr and "nodeName" in r.stderr, r.stderr
    with pytest.raises(KubeApiError) as e:
        await admin.request("POST", NVS.path(k8s_namespace), body=nvs("strict", {"notebook": {"path": "ok.ipynb"},
                                                                                "extra": 1}, "@daily"),
                            query={"fieldValidation": "Strict"})
    assert e.value.status == 400 and 'unknown field "spec.jobTemplate.spec.extra"' in e.value.message
    assert (await admin.request("GET", NVS.path(k8s_namespace)))["items"] == []
    r = _kubectl(kube_apiserver, k8s_namespace, nvs("strict", {"notebook": {"path": "ok.ipynb"}}, "@daily"))
    assert r.returncode == 0, r.stderr  # the same without it: made
    got = await admin.request("GET", NVS.path(k8s_namespace, "strict"))
    assert got["spec"]["suspend"] is False and got["spec"]["concurrencyPolicy"] == "Forbid"  # the CRD's defaults


@pytest.mark.asyncio
async def test_a_schedule_applied_with_kubectl_is_run_by_the_leaders_loop(kube_apiserver, k8s_namespace, tmp_path,
                                                                         admin):
    kube_apiserver.limited_in_namespace(k8s_namespace)
    e = make_env(kube_apiserver, k8s_namespace, tmp_path / "root", kubeconfig=kube_apiserver.limited_kubeconfig,
                 runner_image=RUNNER_IMAGE)
    write_notebook(e.root / "ok.ipynb", ["print(1)"])
    e.service.schedule_seconds_field = True
    await e.engine.start()
    scheduler = Scheduler(e.service, e.engine.log, max_sleep=0.5)
    scheduler.start()
    try:
        r = _kubectl(kube_apiserver, k8s_namespace,
                     nvs("every-second", {"notebook": {"path": "ok.ipynb"}, "podConfig": NO_BUILD}, "* * * * * *"))
        assert r.returncode == 0, r.stderr

        async def run():
            jobs = [j for j in (await admin.request("GET", NVJ.path(k8s_namespace)))["items"]
                    if (j["metadata"].get("labels") or {}).get(SCHEDULE_LABEL) == "every-second"]
            return jobs or None

        jobs = await wait_for(run, 15, what="the schedule's run")
        assert len(jobs) == 1 and OWNER_LABEL not in jobs[0]["metadata"]["labels"]  # its owner: none (the server's)

        async def recorded():  # the run is written to the status after its submit
            st = (await admin.request("GET", NVS.path(k8s_namespace, "every-second"))).get("status") or {}
            return st if st.get("active") else None

        status = await wait_for(recorded, 15, what="the run in the schedule's status")
        assert status["active"] == jobs[0]["metadata"]["name"] and status["lastScheduleTime"]

        async def skipped():  # no kubelet: the run still goes, so the next ticks are skipped, never a second run
            st = (await admin.request("GET", NVS.path(k8s_namespace, "every-second"))).get("status") or {}
            return st if st.get("skipped", 0) >= 2 else None

        await wait_for(skipped, 15, what="skipped ticks")
        assert len(await run() or []) == 1
    finally:
        await scheduler.stop()
        await e.engine.stop()


@pytest.fixture
def jp_server_config(kube_apiserver, k8s_namespace):
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_nbvalidation": True}, "allow_unauthenticated_access": False},
        "NBValidation": {"backend": "kubernetes"},
        "KubernetesBackend": {"kubeconfig": kube_apiserver.admin_kubeconfig, "namespace": k8s_namespace,
                              "registry": REGISTRY, "runner_image": RUNNER_IMAGE},
    }


async def rest(jp_fetch, *parts, method="GET", body=None):
    from tornado.httpclient import HTTPClientError

    kw: dict = {"method": method}
    if body is not None or method == "POST":
        kw["body"] = json.dumps(body) if body is not None else ""
    if body is not None:
        kw["headers"] = {"Content-Type": "application/json"}
    try:
        r = await jp_fetch(*API, *parts, **kw)
    except HTTPClientError as e:
        return e.code, json.loads(e.response.body) if e.response is not None and e.response.body else None
    return r.code, json.loads(r.body) if r.body else None


async def test_schedules_through_rest_with_the_kubernetes_backend(jp_fetch, jp_root_dir, kube_apiserver,
                                                                  k8s_namespace):
    admin = await connect(kube_apiserver.admin_kubeconfig)  # in the server's loop (pytest-jupyter's)
    try:
        await _through_rest(jp_fetch, jp_root_dir, admin, k8s_namespace)
    finally:
        await admin.close()


async def _through_rest(jp_fetch, jp_root_dir, admin, k8s_namespace):
    write_notebook(jp_root_dir / "ok.ipynb", ["print(2 + 2)"])
    body = manifest("rest", {"notebook": {"path": "ok.ipynb"}, "podConfig": NO_BUILD})
    code, made = await rest(jp_fetch, "schedules", method="POST", body=body)
    assert code == 201 and made["metadata"]["name"] == "rest", made
    assert (await admin.request("GET", NVS.path(k8s_namespace, "rest")))["spec"]["jobTemplate"]["spec"] == \
        body["spec"]["jobTemplate"]["spec"]
    code, listed = await rest(jp_fetch, "schedules")
    assert code == 200 and [s["metadata"]["name"] for s in listed["items"]] == ["rest"]
    code, paused = await rest(jp_fetch, "schedules", "rest", method="PATCH", body={"spec": {"suspend": True}})
    assert code == 200 and paused["spec"]["suspend"] is True
    code, got = await rest(jp_fetch, "schedules", "rest")
    assert code == 200 and got["spec"]["suspend"] is True and got["status"]["nextScheduleTime"] is None
    bad = manifest("bad", {"notebook": {"path": "ok.ipynb"}, "podConfig": {**NO_BUILD, "nodeName": "n1"}})
    code, err = await rest(jp_fetch, "schedules", method="POST", body=bad)
    assert code == 400 and err["error"]["field"] == "spec.jobTemplate.spec.podConfig.nodeName", err
    assert await get_or_none(admin, NVS.path(k8s_namespace, "bad")) is None
    code, _ = await rest(jp_fetch, "schedules", "rest", method="DELETE")
    assert code == 200
    code, _ = await rest(jp_fetch, "schedules", "rest")
    assert code == 404
