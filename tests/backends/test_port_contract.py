"""The ports' contract (store/base.py, backends/base.py), run against every implementation.

The store contract runs against the SQLite store (local backend), the Kubernetes store (a real
kube-apiserver and etcd, tests/k8s_harness.py) and the in-memory store of the engine-semantics
tests (tests/fake_backend.py), so that the fake the fast tests trust is held to what the real
stores do. The backend contract runs real notebooks in real kernels through the engine and the
service against the local backend, tests/toy_backend.py (a third backend written against the
port only: the runner in a subprocess, no build) and the Kubernetes backend on the REAL node
(``real-node``: tests/real_cluster.py, lane K; a real kaniko build, Pods run by the real kubelet,
build-disabled jobs in the runner image of this checkout, ``NBV_RUNNER_IMAGE``): the same specs
give the same phases, events, verdicts and refusals. Every case runs on every backend; where a
backend declares (supported_fields, capabilities) that a case's premise does not hold for it,
the case says so by an assertion on that declaration and checks the rule that does hold.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from pathlib import Path

import pytest
import pytest_asyncio
from fake_backend import FakeBackend
from helpers import wait_async, write_golden, write_notebook
from toy_backend import SubprocessBackend

from jupyter_nbvalidation.backends.base import Backend, Capabilities
from jupyter_nbvalidation.backends.local import LocalBackend
from jupyter_nbvalidation.core.events import make_event
from jupyter_nbvalidation.core.model import REASON_PHASE, Phase, Reason, new_job
from jupyter_nbvalidation.service.errors import ApiError
from jupyter_nbvalidation.service.jobs import JobService
from jupyter_nbvalidation.spec.checks import spec_fields
from jupyter_nbvalidation.store.base import AlreadyExists, Conflict, NotFound
from jupyter_nbvalidation.store.sqlite import SQLiteJobStore

LOG = logging.getLogger("nbvalidation.test.contract")


# --- the store port ---------------------------------------------------------------------


@pytest_asyncio.fixture(params=["sqlite", "kubernetes", "memory"])
async def store(request, tmp_path):
    if request.param == "sqlite":
        s = SQLiteJobStore(tmp_path / "jobs.db")
        ns = "default"
    elif request.param == "kubernetes":
        from jupyter_nbvalidation.backends.kubernetes.store import KubernetesJobStore

        h = request.getfixturevalue("kube_apiserver")
        ns = h.create_namespace()
        s = KubernetesJobStore(namespace=ns, kubeconfig=h.admin_kubeconfig)
    else:
        from fake_backend import MemoryStore

        s, ns = MemoryStore(), "default"
    await s.start()
    s.test_namespace = ns
    yield s
    await s.stop()


def _job(store, notebook: str = "a/nb.ipynb", name: str | None = None) -> dict:
    return new_job({"notebook": {"path": notebook}}, name=name, namespace=store.test_namespace)


@pytest.mark.asyncio
async def test_store_create_get_and_refusals(store):
    created = await store.create(_job(store, name="one"))
    meta = created["metadata"]
    assert meta["name"] == "one" and meta["uid"] and meta["creationTimestamp"] and meta["resourceVersion"]
    got = await store.get("one")
    assert got["metadata"]["uid"] == meta["uid"] and got["spec"] == {"notebook": {"path": "a/nb.ipynb"}}
    with pytest.raises(AlreadyExists):
        await store.create(_job(store, name="one"))
    with pytest.raises(NotFound):
        await store.get("nosuch")


@pytest.mark.asyncio
async def test_store_status_writes_are_optimistic(store):
    job = await store.create(_job(store, name="two"))
    rv = job["metadata"]["resourceVersion"]
    written = await store.update_status("two", {"phase": Phase.INITIALIZING, "reason": Reason.ACCEPTED}, rv)
    assert written["status"]["phase"] == Phase.INITIALIZING and written["metadata"]["resourceVersion"] != rv
    with pytest.raises(Conflict):  # based on the version before that write
        await store.update_status("two", {"phase": Phase.BUILDING}, rv)
    assert (await store.get("two"))["status"]["phase"] == Phase.INITIALIZING
    with pytest.raises(NotFound):
        await store.update_status("nosuch", {"phase": Phase.BUILDING}, rv)
    annotated = await store.set_annotation("two", "nbvalidation.dev/x", "1")
    assert annotated["metadata"]["annotations"]["nbvalidation.dev/x"] == "1"
    assert (await store.get("two"))["status"]["phase"] == Phase.INITIALIZING  # an annotation keeps the status


@pytest.mark.asyncio
async def test_store_lists_newest_first_by_page_and_active_only(store):
    names = []
    for i in range(5):
        job = await store.create(_job(store, notebook="a.ipynb" if i % 2 else "b.ipynb", name=f"j{i}"))
        names.append(job["metadata"]["name"])
        await asyncio.sleep(0.002)  # distinct creation times
    done = await store.get("j0")
    await store.update_status("j0", {"phase": Phase.SUCCEEDED}, done["metadata"]["resourceVersion"])
    seen, token = [], None
    while True:
        page, token = await store.list_jobs(limit=2, continue_token=token)
        assert len(page) <= 2
        seen += [j["metadata"]["name"] for j in page]
        if token is None:
            break
    assert seen == list(reversed(names)), seen
    only_a, _ = await store.list_jobs(notebook="a.ipynb")
    assert [j["metadata"]["name"] for j in only_a] == ["j3", "j1"]
    assert sorted(j["metadata"]["name"] for j in await store.list_active()) == ["j1", "j2", "j3", "j4"]
    await store.delete("j4")
    with pytest.raises(NotFound):
        await store.get("j4")
    with pytest.raises(NotFound):
        await store.delete("j4")


@pytest.mark.asyncio
async def test_store_records_an_event_once_per_name_in_time_order(store):
    job = await store.create(_job(store, name="ev"))
    other = await store.create(_job(store, name="ev2"))
    first = make_event(job, reason=Reason.ACCEPTED, note="accepted", transition=0,
                       event_time="2026-12-03T10:00:00.000001Z")
    second = make_event(job, reason=Reason.BUILD_STARTED, note="building", transition=1,
                        event_time="2026-12-03T10:00:01.000001Z")
    await store.add_event(second)
    await store.add_event(first)
    await store.add_event(first)  # a retry of the same transition's event: recorded once
    await store.add_event(make_event(other, reason=Reason.ACCEPTED, note="the other job", transition=0))
    evs = await store.list_events(job)
    assert [e["reason"] for e in evs] == [Reason.ACCEPTED, Reason.BUILD_STARTED], evs
    grouped = await store.list_events_of([job, other])
    assert [e["reason"] for e in grouped[job["metadata"]["uid"]]] == [Reason.ACCEPTED, Reason.BUILD_STARTED]
    assert [e["note"] for e in grouped[other["metadata"]["uid"]]] == ["the other job"]


@pytest.mark.asyncio
async def test_store_watch_names_what_changed_until_unsubscribed(store):
    seen: list[str] = []
    unsubscribe = store.watch(seen.append)
    job = await store.create(_job(store, name="w1"))
    await store.update_status("w1", {"phase": Phase.INITIALIZING}, job["metadata"]["resourceVersion"])
    await wait_async(lambda: "w1" in seen, 10, "the watch to see w1's write")
    assert "w1" in seen
    unsubscribe()
    await asyncio.sleep(0.3)  # what was in flight arrives
    seen.clear()
    await store.create(_job(store, name="w2"))
    await asyncio.sleep(1.0)
    assert "w2" not in seen, seen


# --- the backend port -------------------------------------------------------------------

NO_BUILD = {"podConfig": {"buildConfig": {"enabled": False}}}


REAL_NODE = "real-node"  # tests/conftest.py kubernetes_marker_of: this parameter needs the real node


@pytest_asyncio.fixture(params=["local", "toy", REAL_NODE])
async def backend_env(request, tmp_path, start_engine):
    root = tmp_path / "root"
    root.mkdir()
    env = type("Env", (), {})()
    env.root, env.base, env.timeout = root, NO_BUILD, 180.0
    if request.param == REAL_NODE:
        cluster = request.getfixturevalue("real_cluster")
        # build-disabled jobs run in the runner image of this checkout (KubernetesBackend.runner_image:
        # NBV_RUNNER_IMAGE of tools/cluster/runner-image.sh)
        async with cluster.engine(root, cluster.env["NBV_REGISTRY"], log=LOG) as k:
            assert k.backend.runner_image == cluster.env["NBV_RUNNER_IMAGE"]
            env.backend, env.engine, env.service = k.backend, k.engine, k.service
            env.timeout = 600.0  # a cold kaniko build (pip from the index) on a loaded 2-core machine
            yield env
        return
    if request.param == "local":
        backend = LocalBackend(data_dir=str(tmp_path / "data"))
    else:
        backend = SubprocessBackend(SQLiteJobStore(tmp_path / "jobs.db"), tmp_path / "toy")
    engine, _ = await start_engine(backend, log=LOG, resync_period=3600)
    env.backend, env.engine = backend, engine
    env.service = JobService(engine, backend, str(root))
    yield env


async def _verdict(env, spec: dict, build: bool = False) -> tuple[dict, list[dict]]:
    job = await env.service.submit(spec if build else {**env.base, **spec})
    done = await env.engine.wait_for_terminal(job["metadata"]["name"], env.timeout)
    await env.engine.wait_idle(30)
    await env.engine.recorder.flush()
    evs = sorted(await env.backend.store.list_events(done), key=lambda e: e.get("eventTime") or "")
    return done, evs


def _transition_events_match(done: dict, evs: list[dict]) -> None:
    assert [e["reason"] for e in evs if e["reason"] in REASON_PHASE] == \
        [t["reason"] for t in done["status"]["transitions"]]


@pytest.mark.asyncio
async def test_backend_declares_what_it_does(backend_env):
    b = backend_env.backend
    assert isinstance(b.capabilities, Capabilities)
    assert {"notebook.path", "goldenNotebook.path", "timeout"} <= b.supported_fields()
    health = await b.health()
    assert health["backend"] == b.name and health["usable"] is True


@pytest.mark.asyncio
async def test_backend_a_passing_notebook_goes_build_first_then_validate(backend_env):
    write_notebook(backend_env.root / "ok.ipynb", ["x = 21", "print(x * 2)"])
    done, evs = await _verdict(backend_env, {"notebook": {"path": "ok.ipynb"}}, build=True)
    st = done["status"]
    assert (st["phase"], st["reason"]) == (Phase.SUCCEEDED, Reason.VALIDATION_SUCCEEDED), st
    assert [t["phase"] for t in st["transitions"]] == [Phase.INITIALIZING, Phase.BUILDING, Phase.BUILD_COMPLETE,
                                                       Phase.VALIDATION_RUNNING, Phase.SUCCEEDED]
    _transition_events_match(done, evs)
    executed = await backend_env.backend.executed_notebook(done)
    text = executed["cells"][1]["outputs"][0]["text"]
    assert ("".join(text) if isinstance(text, list) else text) == "42\n", executed["cells"][1]


@pytest.mark.asyncio
async def test_backend_a_failing_cell_is_the_verdict(backend_env):
    write_notebook(backend_env.root / "bad.ipynb", ["x = 1", "1 / 0", "print('never')"])
    done, evs = await _verdict(backend_env, {"notebook": {"path": "bad.ipynb"}})
    st = done["status"]
    assert (st["phase"], st["reason"]) == (Phase.FAILED, Reason.VALIDATION_FAILED), st
    assert st["failedCellIndex"] == 1 and st["message"] == "Cell 2 raised ZeroDivisionError: division by zero"
    _transition_events_match(done, evs)


@pytest.mark.asyncio
async def test_backend_compares_with_the_golden_notebook(backend_env):
    write_notebook(backend_env.root / "nb.ipynb", ["print(1 + 1)"])
    golden = {"notebook": {"path": "nb.ipynb"}, "goldenNotebook": {"path": "golden.ipynb"}}
    # a golden notebook with other outputs than this run's: the comparison fails the job
    write_golden(backend_env.root / "nb.ipynb", "3\n", backend_env.root / "golden.ipynb")
    done, _ = await _verdict(backend_env, golden)
    assert (done["status"]["phase"], done["status"]["reason"]) == (Phase.FAILED, Reason.VALIDATION_FAILED)
    assert [d["cellIndex"] for d in done["status"]["comparisonResult"]["diffs"]] == [0], done["status"]


@pytest.mark.asyncio
async def test_backend_cancel_during_a_cell_ends_cancelled(backend_env):
    write_notebook(backend_env.root / "slow.ipynb", ["import time", "time.sleep(60)"])
    job = await backend_env.service.submit({**backend_env.base, "notebook": {"path": "slow.ipynb"}})
    name = job["metadata"]["name"]
    async def running() -> bool:
        return ((await backend_env.backend.store.get(name)).get("status") or {}).get("phase") == Phase.VALIDATION_RUNNING

    await wait_async(running, 120, f"{name} to run its slow cell", interval=0.1)
    await backend_env.engine.request_cancel(name)
    done = await backend_env.engine.wait_for_terminal(name, 30)
    assert (done["status"]["phase"], done["status"]["reason"]) == (Phase.FAILED, Reason.CANCELLED), done["status"]
    # a build turned off skips Building, on every backend
    assert [t["phase"] for t in done["status"]["transitions"]][:2] == [Phase.INITIALIZING, Phase.VALIDATION_RUNNING]


def _a_field_refused_by(backend: Backend) -> tuple[str, object]:
    """A spec field this backend refuses, with a value: one of the spec's fields that it declares
    unsupported (local, toy: podConfig.nodeSelector), else, for a backend that declares every
    field of the spec (Kubernetes), a field no backend takes (podConfig.volumes)."""
    unsupported = spec_fields() - backend.supported_fields()
    if "podConfig.nodeSelector" in unsupported:
        return "podConfig.nodeSelector", {"disk": "ssd"}
    assert not unsupported, sorted(unsupported)  # a new unsupported field: give it a value above
    assert backend.supported_fields() == spec_fields(), backend.name
    assert "podConfig.volumes" not in spec_fields()
    return "podConfig.volumes", [{"name": "host", "hostPath": {"path": "/"}}]


@pytest.mark.asyncio
async def test_backend_refuses_a_field_it_does_not_support_and_creates_nothing(backend_env):
    write_notebook(backend_env.root / "nb.ipynb", ["print(1)"])
    field, value = _a_field_refused_by(backend_env.backend)
    spec = {"notebook": {"path": "nb.ipynb"},
            "podConfig": {"buildConfig": {"enabled": False}, field.split(".")[1]: value}}
    with pytest.raises(ApiError) as err:
        await backend_env.service.submit(spec)
    assert err.value.status == 400 and err.value.field == f"spec.{field}", err.value
    jobs, _ = await backend_env.backend.store.list_jobs()
    assert jobs == []


def test_the_toy_backend_is_an_afternoons_work():
    """The issue's bound: a backend that passes this contract in under 200 lines."""
    lines = (Path(__file__).parents[1] / "toy_backend.py").read_text(encoding="utf-8").splitlines()
    assert len(lines) < 200, len(lines)


def test_the_port_is_abstract_and_every_backend_supplies_its_required_operations():
    """Backend (backends/base.py) is an abstract base class: a backend that leaves out a
    required operation cannot be made, and the local, Kubernetes, fake and toy backends can."""
    from jupyter_nbvalidation.backends.kubernetes.backend import KubernetesBackend

    assert inspect.isabstract(Backend)
    with pytest.raises(TypeError, match="abstract"):
        Backend()

    class StartsOnly(Backend):
        async def start(self, notify):
            pass

    with pytest.raises(TypeError, match="ensure_validation"):
        StartsOnly()
    for backend in (LocalBackend, KubernetesBackend, FakeBackend, SubprocessBackend):
        assert not inspect.isabstract(backend), (backend.__name__, sorted(backend.__abstractmethods__))
    assert isinstance(FakeBackend(), Backend)
