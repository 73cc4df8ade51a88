"""What is off, said on the REAL single-node cluster (tests/real_cluster.py,
``bash tools/cluster/up.sh``; issue 19 point 5): the project's `jupyter server` pointed at the
harness's plain-HTTP registry WITHOUT ``c.KubernetesBackend.registry_insecure``. kaniko is told
the registry is plain HTTP through ``builder_args`` (``--insecure-registry=<host>``), so builds
push fine; the server's own lookups go over https and fail. Before, it rebuilt every job
silently; now /health says image reuse and the verdict key are off and why, each job gets one
Warning ``ImageReuseOff`` event saying so, and the job still gets its own verdict.

Run: ``bash tools/cluster/up.sh && .venv/bin/python -m pytest tests/test_k8s_real_reuse_off.py``
"""

from __future__ import annotations

import json
import uuid

import pytest
from helpers import job_of, wait, write_notebook

import jupyter_nbvalidation.backends.kubernetes.objects as obj
from jupyter_nbvalidation.core.model import NOTICE_REASONS, REASON_PHASE, Phase, Reason
from jupyter_nbvalidation.verdict.cache import ANNOTATION as VERDICT_KEY

pytestmark = pytest.mark.cluster

BUILD_WAIT = 600.0  # a cold kaniko build (no reuse here) on a loaded 2-core machine


def test_a_plain_http_registry_without_registry_insecure_is_said_by_health_and_one_warning_per_job(
        real_cluster, tmp_path):
    host = real_cluster.env["NBV_REGISTRY_HOST"]
    builder_args = [a for a in json.loads(real_cluster.env["NBV_BUILDER_ARGS"])
                    if a not in ("--insecure", "--insecure-pull")] + [f"--insecure-registry={host}"]
    ns = real_cluster.namespace()
    server = real_cluster.server(tmp_path, ns, KubernetesBackend={
        "builder_args": builder_args, "registry_insecure": False,
        "registry": f"{real_cluster.env['NBV_REGISTRY']}/o{uuid.uuid4().hex[:8]}"}).start()
    try:
        api = server.client()
        # usable once its watches synced: the registry answers (plain HTTP), only reuse is off
        health = wait(lambda: (lambda h: h if h["usable"] else None)(api.request("GET", "health")), 60,
                      "the server to be usable")
        assert health["registryReachable"], json.dumps(health, indent=1)
        for switch in ("imageReuse", "verdictKey"):
            assert health[switch]["enabled"] is False, json.dumps(health, indent=1)
            assert "plain HTTP" in health[switch]["reason"] and "registry_insecure" in health[switch]["reason"], \
                health[switch]

        write_notebook(server.root / "nb.ipynb", ["import six\nprint(six.__version__)"])
        names = []
        for _ in range(2):  # the same content twice: without reuse each builds (and each is told so)
            job = api.request("POST", "jobs", {"notebook": {"path": "nb.ipynb"},
                                               "podConfig": {"buildConfig": {"requirements": ["six==1.16.0"]}}})
            assert VERDICT_KEY not in (job["metadata"].get("annotations") or {}), job["metadata"]
            names.append(job["metadata"]["name"])
        for name in names:
            done = wait(lambda name=name: (lambda j: j if (j.get("status") or {}).get("phase") in Phase.TERMINAL else None)(
                job_of(api, name)), BUILD_WAIT, f"job {name} to end")
            st = done["status"]
            assert (st["phase"], st["reason"]) == (Phase.SUCCEEDED, Reason.VALIDATION_SUCCEEDED), \
                json.dumps(st, indent=1)
            # FROM the tag: the base image's digest could not be read
            assert st["buildStatus"]["imageReference"].startswith(f"{real_cluster.env['NBV_REGISTRY']}/o"), st
            evs = wait(lambda name=name: (lambda got: got if any(x["reason"] == Reason.VALIDATION_SUCCEEDED for x in got) else None)(
                api.request("GET", f"jobs/{name}/events")["items"]), 30, f"the events of {name}")
            notices = [e for e in evs if e["reason"] in NOTICE_REASONS]
            assert len(notices) == 1, [(e["reason"], e.get("note") or e.get("message")) for e in evs]
            (n,) = notices
            note = n.get("note") or n.get("message") or ""
            assert n["type"] == "Warning" and n["reason"] == "ImageReuseOff", n
            assert note.startswith("Image reuse and the verdict key are off for this job: the base image "
                                   f"{real_cluster.env['NBV_BASE_IMAGE']} has no digest"), note
            assert "registry_insecure" in note, note
            # the transitions' events are as ever, once each
            assert [e["reason"] for e in evs if e["reason"] in REASON_PHASE] == [t["reason"] for t in st["transitions"]]
            print(f"{name}: built in {st['buildStatus'].get('duration')}; notice: {note}")
        # both built (no reuse without the lookups): two build Jobs
        for name in names:
            assert real_cluster.get(ns, "job", obj.build_job_name(name)) is not None, name
    finally:
        server.stop()
