"""Live views of a Kubernetes job on the REAL single-node cluster (tests/real_cluster.py):
the build log over REST while kaniko builds (``GET /jobs/{name}/buildlog?offset=N``, the
build Pod's container log), and ``status.progress`` while the validation Pod's runner works
through the cells (its progress records, read from the Pod's log by the backend).

One job serves both tests (one real build): the fixture submits it to a real `jupyter
server` with ``backend = "kubernetes"`` and watches it over REST from submit to verdict,
recording what a panel polling the API would have seen.

Run: ``.venv/bin/python -m pytest tests/test_k8s_real_progress.py`` (the cluster must be up).
"""

from __future__ import annotations

import json
import urllib.request
import uuid

import pytest
from helpers import wait, write_notebook

import jupyter_nbvalidation.backends.kubernetes.objects as obj
from jupyter_nbvalidation.core.model import RETRY_REASONS, Phase, Reason, parse_time
from jupyter_nbvalidation.runner.protocol import TERMINATION_LOG_LIMIT, parse_summary

pytestmark = pytest.mark.cluster

WAIT = 600.0  # a cold kaniko build on a loaded 2-core machine, pip reaching the index
SLEEP = 1.5  # seconds per slow cell: a few progress writes each (the engine writes at most once a second)
CELLS = ["# md\n# A slow notebook\nThree cells sleep.", "import time\nimport six", f"time.sleep({SLEEP})",
         f"time.sleep({SLEEP})", f"time.sleep({SLEEP})", "print('done', six.__version__)"]
CODE = [1, 2, 3, 4, 5]  # the code cells' notebook indexes


def get(server, path: str, offset: int | None = None) -> tuple[int, dict, bytes]:
    url = server.url + "nbvalidation/api/v1/" + path + (f"?offset={offset}" if offset is not None else "")
    req = urllib.request.Request(url, headers={"Authorization": f"token {server.token}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:  # noqa: S310 - the test's own server
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


@pytest.fixture(scope="module")
def watched(real_cluster, tmp_path_factory):
    """A job with a real build and slow cells, watched over REST from submit to verdict."""
    tmp = tmp_path_factory.mktemp("progress")
    ns = real_cluster.namespace()
    server = real_cluster.server(tmp, ns).start()
    try:
        write_notebook(server.root / "slow.ipynb", CELLS)
        # an always-true marker new to this run: this requirement set has no image yet, so kaniko builds
        (server.root / "requirements.txt").write_text(
            f'six==1.16.0; platform_machine != "nbv-{uuid.uuid4().hex[:12]}"\n')
        job = server.client().request("POST", "jobs", {"notebook": {"path": "slow.ipynb"}})
        name = job["metadata"]["name"]
        seen: dict = {"chunks": [], "progress": [], "phases": [], "answers": []}
        offset = 0

        def sample() -> bool:  # one look at the job (and its build log); True once it ended
            nonlocal offset
            code, _, body = get(server, f"jobs/{name}")
            st = json.loads(body).get("status") or {} if code == 200 else {}
            phase = st.get("phase")
            if not seen["phases"] or seen["phases"][-1] != phase:
                seen["phases"].append(phase)
            if phase in Phase.TERMINAL:
                return True
            if phase in (Phase.INITIALIZING, Phase.BUILDING):
                code, headers, data = get(server, f"jobs/{name}/buildlog", offset)
                if phase == Phase.BUILDING:
                    seen["answers"].append((code, data[:300]))
                if code == 200 and phase == Phase.BUILDING:
                    seen["chunks"].append((offset, data, headers))
                    offset = int(headers["X-Build-Log-Next-Offset"])
            elif phase == Phase.VALIDATION_RUNNING and st.get("progress"):
                seen["progress"].append(st["progress"])
            return False

        wait(sample, WAIT, lambda: f"job {name} to end: {seen['phases'][-3:]}", interval=0.2)
        seen.update(name=name, ns=ns, server=server, final=json.loads(get(server, f"jobs/{name}")[2]),
                    offset=offset)
        yield seen
    finally:
        server.stop()


def test_the_build_log_grows_over_rest_while_kaniko_builds(watched):
    name, server = watched["name"], watched["server"]
    assert watched["final"]["status"]["phase"] == Phase.SUCCEEDED, json.dumps(watched["final"]["status"], indent=1)
    chunks = watched["chunks"]
    assert chunks, f"no build log answer during Building: {watched['answers'][:5]}"
    for i, (offset, data, headers) in enumerate(chunks):  # during Building: partial, whole lines, offsets add up
        assert headers["Content-Type"].startswith("text/plain"), headers
        assert int(headers["X-Build-Log-Next-Offset"]) == offset + len(data)
        if headers["X-Build-Log-Complete"] == "true":  # the build ended between the job's read and this one
            assert i == len(chunks) - 1, headers
        else:
            assert headers["X-Build-Log-Complete"] == "false", headers
            assert not data or data.endswith(b"\n")
    grown = [data for _, data, headers in chunks if data and headers["X-Build-Log-Complete"] == "false"]
    assert len(grown) >= 2, f"the log did not grow while building: {[len(d) for d in grown]}"
    partial = b"".join(data for _, data, _ in chunks)
    # afterwards: the whole log, complete, of which the partial answers were the start
    code, headers, whole = get(server, f"jobs/{name}/buildlog")
    assert code == 200 and headers["X-Build-Log-Complete"] == "true"
    assert int(headers["X-Build-Log-Next-Offset"]) == len(whole)
    assert whole.startswith(partial) and len(whole) >= len(partial)
    assert b"six" in whole  # kaniko ran pip for the declared requirement
    code, headers, rest = get(server, f"jobs/{name}/buildlog", watched["offset"])
    assert code == 200 and rest == whole[watched["offset"]:] and headers["X-Build-Log-Complete"] == "true"
    code, headers, past = get(server, f"jobs/{name}/buildlog", len(whole) + 100)
    assert code == 200 and past == b"" and int(headers["X-Build-Log-Next-Offset"]) == len(whole)


def test_status_progress_advances_in_the_validation_pod_and_ends_whole(real_cluster, watched):
    st = watched["final"]["status"]
    assert st["phase"] == Phase.SUCCEEDED, json.dumps(st, indent=1)
    seen = watched["progress"]
    assert seen, "no status.progress during ValidationRunning"
    running = []
    for p in seen:
        assert p["cellsTotal"] == len(CODE)
        if p["currentCellIndex"] is not None:
            assert p["currentCellIndex"] in CODE and parse_time(p["currentCellStartedAt"]) is not None
            if p["currentCellIndex"] not in running:
                running.append(p["currentCellIndex"])
    assert len(running) >= 2 and running == sorted(running), running  # the running cell moved on
    done = [p["cellsDone"] for p in seen]
    assert done == sorted(done) and done[0] < len(CODE) and len(set(done)) >= 2, done
    # at the end: as the run ended, kept at the terminal phase, matching the results
    p = st["progress"]
    assert p["cellsDone"] == len(CODE) and p["currentCellIndex"] is None, p
    assert [c["cellIndex"] for c in p["cells"]] == CODE and all(c["status"] == "ok" for c in p["cells"])
    slow = [c["executionTime"] for c in p["cells"] if c["cellIndex"] in (2, 3, 4)]
    assert all(t >= SLEEP - 0.1 for t in slow), slow
    assert [r["cellIndex"] for r in st["results"] if r.get("status") == "Success"] == CODE
    # progress is never an event: the transitions' events only (and a retry of a transient fault of
    # the build, a Warning, which the loaded node gave once in the CI run of 2026-12-03: printed)
    code, _, body = get(watched["server"], f"jobs/{watched['name']}/events")
    items = json.loads(body)["items"]
    retries = [e for e in items if e["reason"] in RETRY_REASONS]
    for e in retries:
        print(f"retry event: {e['reason']}: {e['note']}")
        assert e["type"] == "Warning", e
    assert [e["reason"] for e in items if e["reason"] not in RETRY_REASONS] == [
        Reason.ACCEPTED, Reason.BUILD_STARTED, Reason.BUILD_SUCCEEDED, Reason.VALIDATION_STARTED,
        Reason.VALIDATION_SUCCEEDED]
    # the Pod's runner printed its records on the log the verdict is read from; its termination
    # message (the summary) still fits and parses
    got = real_cluster.get(watched["ns"], "pods", "-l", f"nbvalidation.dev/job={watched['name']},"
                                                        "nbvalidation.dev/component=validation")
    (pod,) = got["items"]
    (ctr,) = [c for c in pod["spec"]["containers"] if c["name"] == obj.RUNNER_CONTAINER]
    assert "--progress" in ctr["command"]
    (cs,) = [c for c in pod["status"]["containerStatuses"] if c["name"] == obj.RUNNER_CONTAINER]
    message = cs["state"]["terminated"]["message"]
    assert len(message.encode()) <= TERMINATION_LOG_LIMIT and parse_summary(message)["verdict"] == "Succeeded"
    log = real_cluster.kubectl("logs", pod["metadata"]["name"], "-c", obj.RUNNER_CONTAINER,
                               namespace=watched["ns"]).stdout
    assert log.count("NBVALIDATION-PROGRESS ") == 1 + 2 * len(CODE)
    assert log.rstrip().splitlines()[-1].startswith(("NBVALIDATION-RESULT ", "NBVALIDATION-EXECUTED "))
