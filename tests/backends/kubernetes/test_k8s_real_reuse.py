"""Image reuse, the clean kernel environment and input files on the REAL
single-node cluster (tests/real_cluster.py, ``bash tools/cluster/up.sh``): the
engine and the Kubernetes backend run in this process against the cluster's API
server; the real Job controller runs the kaniko build, kaniko pushes to the
registry Pod, the kubelet runs the validation Pods. Nothing writes a status on
anyone's behalf.

Every test module run pushes under a fresh repository prefix
(``<NBV_REGISTRY>/<run id>``), so the first job of a content really builds.

Run: ``bash tools/cluster/up.sh && .venv/bin/python -m pytest tests/test_k8s_real_reuse.py``
"""

from __future__ import annotations

import json
import logging
import time
import uuid

import pytest
import pytest_asyncio
from helpers import write_notebook

import jupyter_nbvalidation.backends.kubernetes.objects as obj
from jupyter_nbvalidation.backends.kubernetes.client import JOBS, KubeApiError
from jupyter_nbvalidation.core.model import Phase, Reason, build_attempt
from jupyter_nbvalidation.core.vocabulary import RETRY_REASONS

pytestmark = pytest.mark.cluster

LOG = logging.getLogger("nbvalidation.test.real")
BUILD_WAIT = 600.0  # a cold kaniko build (two venvs, pip from the index) on a loaded 2-core machine
RUN_WAIT = 240.0
RUN_ID = uuid.uuid4().hex[:8]


@pytest.fixture(scope="module")
def run_registry(real_cluster) -> str:
    return f"{real_cluster.env['NBV_REGISTRY']}/r{RUN_ID}"


@pytest_asyncio.fixture
async def real(real_cluster, run_registry, tmp_path):
    async with real_cluster.engine(tmp_path / "root", run_registry, log=LOG) as env:
        yield env


async def verdict(env, name: str, timeout: float) -> dict:
    job = await env.engine.wait_for_terminal(name, timeout)
    await env.engine.wait_idle(30)
    await env.engine.recorder.flush()
    return job


async def event_reasons(env, job: dict) -> list[str]:
    """The job's transition events, oldest first. A retry of a transient fault (the
    harness's registry resets a connection now and then on a loaded node) is a Warning
    event beside the transitions: printed, not compared."""
    evs = sorted(await env.backend.store.list_events(job), key=lambda e: e.get("eventTime") or "")
    for e in evs:
        if e["reason"] in RETRY_REASONS:
            print(f"{job['metadata']['name']}: {e['reason']}: {e.get('note') or e.get('message')}")
    return [e["reason"] for e in evs if e["reason"] not in RETRY_REASONS]


async def build_job(env, name: str, attempt: int = 0) -> dict | None:
    """The build Job of the job ``name``'s attempt ``attempt`` (nvj-<name>-build, then -build-r<n>)."""
    try:
        return await env.kube.request("GET", JOBS.path(env.ns, obj.build_job_name(name, attempt)))
    except KubeApiError as e:
        if e.status == 404:
            return None
        raise


@pytest.mark.asyncio
async def test_a_second_job_of_the_same_content_reuses_the_built_image(real):
    write_notebook(real.root / "nb.ipynb", ["import six\nprint(six.__version__)"])
    (real.root / "requirements.txt").write_text("six==1.16.0\n")
    times, jobs = [], []
    for _ in range(2):
        t0 = time.monotonic()
        job = await real.service.submit({"notebook": {"path": "nb.ipynb"}})
        jobs.append(await verdict(real, job["metadata"]["name"], BUILD_WAIT))
        times.append(time.monotonic() - t0)
    first, second = jobs
    for j in jobs:
        assert j["status"]["phase"] == Phase.SUCCEEDED, json.dumps(j["status"], indent=1)
    ref = first["status"]["buildStatus"]["imageReference"]
    assert second["status"]["buildStatus"]["imageReference"] == ref and "@sha256:" in ref
    # the first built (a real kaniko Job, Complete), the second did not build at all
    bj = await build_job(real, first["metadata"]["name"], build_attempt(first))
    assert bj is not None and any(c["type"] == "Complete" and c["status"] == "True"
                                  for c in bj["status"]["conditions"])
    assert await build_job(real, second["metadata"]["name"]) is None
    assert await event_reasons(real, first) == [Reason.ACCEPTED, Reason.BUILD_STARTED, Reason.BUILD_SUCCEEDED,
                                                Reason.VALIDATION_STARTED, Reason.VALIDATION_SUCCEEDED]
    assert await event_reasons(real, second) == [Reason.ACCEPTED, Reason.BUILD_STARTED, Reason.BUILD_REUSED,
                                                 Reason.VALIDATION_STARTED, Reason.VALIDATION_SUCCEEDED]
    print(f"time to verdict: first (build) {times[0]:.1f} s, second (reused) {times[1]:.1f} s")


@pytest.mark.asyncio
@pytest.mark.parametrize("module", ["yaml", "nbformat"])
async def test_an_undeclared_package_the_server_has_is_not_importable(real, module):
    """The kernel's interpreter holds ipykernel and the declared requirements only,
    as locally: the runner's nbformat and the server's yaml are not there."""
    write_notebook(real.root / "nb.ipynb", ["import six", f"import {module}", "print('never')"])
    (real.root / "requirements.txt").write_text("six==1.16.0\n")
    job = await real.service.submit({"notebook": {"path": "nb.ipynb"}})
    done = await verdict(real, job["metadata"]["name"], BUILD_WAIT)
    st = done["status"]
    assert st["phase"] == Phase.FAILED and st["reason"] == Reason.VALIDATION_FAILED, json.dumps(st, indent=1)
    assert st["failedCellIndex"] == 1 and st["validationStatus"]["reason"] == "CellExecutionFailed", st
    # the runner's words first, then where the environment came from (issue 21; six was declared, not this)
    said, hint = st["message"].split(". ", 1)
    assert said == f"Cell 2 raised ModuleNotFoundError: No module named '{module}'", st["message"]
    assert hint.startswith(f"No module named '{module}': the environment was built from "), st["message"]
    assert f"; declare {module} there" in hint and st["environment"].startswith("1 requirement"), st


@pytest.mark.asyncio
async def test_input_files_beside_the_notebook_reach_the_kernel(real):
    """The files spec.inputFiles names, collected by the service at submit (its real input
    collection: patterns matched beside the notebook, read into the snapshot's
    ``inputs/<relpath>``), are regular, writable files in the kernel's working directory of
    a real Pod; a file beside them that no pattern names does not travel."""
    write_notebook(real.root / "nb.ipynb", [
        "import csv, os\nrows = list(csv.reader(open('data.csv')))\nassert rows == [['a', 'b'], ['1', '2']], rows",
        "assert open('sub/blob.bin', 'rb').read() == bytes(range(256))",
        "assert not os.path.islink('data.csv') and os.path.isfile('data.csv')",
        "assert not os.path.exists('secret.txt')",
        "open('out.txt', 'w').write('written')",
    ])
    (real.root / "requirements.txt").write_text("six==1.16.0\n")
    (real.root / "data.csv").write_bytes(b"a,b\n1,2\n")
    (real.root / "sub").mkdir()
    (real.root / "sub" / "blob.bin").write_bytes(bytes(range(256)))
    (real.root / "secret.txt").write_text("not named: stays here\n")
    job = await real.service.submit({"notebook": {"path": "nb.ipynb"}, "inputFiles": ["data.csv", "sub/*"]})
    done = await verdict(real, job["metadata"]["name"], BUILD_WAIT)
    assert done["status"]["phase"] == Phase.SUCCEEDED, json.dumps(done["status"], indent=1)

