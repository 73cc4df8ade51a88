"""A schedule on a REAL single-node cluster (tests/real_cluster.py, ``bash tools/cluster/up.sh``):
a NotebookValidationSchedule applied with ``kubectl apply`` over a git repository served on
loopback (``git http-backend``) is run by the server's loop as validation Pods (no build: the
runner image), turns red on a commit that breaks a cell, and a real webhook receiver on loopback
gets the notification naming that commit as the culprit. docs/watching.md, Schedules."""

from __future__ import annotations

import json
import time

import pytest
from git_support import GitHTTP, Repo
from helpers import wait
from webhook_receiver import Receiver

from jupyter_nbvalidation.core.model import Phase

pytestmark = pytest.mark.cluster
KEY = "real-node-hook-key"


def test_a_kubectl_schedule_over_git_turns_red_and_the_webhook_names_the_commit(real_cluster, tmp_path):
    ns = real_cluster.namespace()
    repo = Repo(tmp_path / "git")
    repo.notebook("nbs/check.ipynb", ["x = 1", "assert x == 1, 'x moved'"])
    a = repo.commit("A: the first notebook")
    receiver = Receiver()
    server = None
    try:
        with GitHTTP(repo.bare.parent) as http:
            server = real_cluster.server(tmp_path, ns, NBValidation={
                "schedule_seconds_field": True, "schedule_max_sleep": 1.0,
                "webhooks": [{"url": receiver.url, "key": KEY}], "webhook_backoff": 0.05}).start()
            api = server.client()
            real_cluster.kubectl("apply", "-f", "-", namespace=ns, input=json.dumps({
                "apiVersion": "nbvalidation.dev/v1alpha1", "kind": "NotebookValidationSchedule",
                "metadata": {"name": "nightly"},
                "spec": {"schedule": "*/2 * * * * *", "jobTemplate": {"spec": {
                    "notebook": {"git": {"url": http.url(), "ref": "main"}, "path": "nbs/check.ipynb"},
                    "podConfig": {"buildConfig": {"enabled": False}}}}}}))
            started = time.monotonic()

            def runs() -> list[dict]:
                return api.request("GET", "schedules/nightly/jobs")["items"]

            def green() -> dict | None:
                return next((j for j in runs() if j["status"].get("phase") == Phase.SUCCEEDED), None)

            first = wait(green, 300, lambda: f"a green run of the schedule: {runs()}")
            print(f"first green run {first['metadata']['name']} {time.monotonic() - started:.1f} s after apply")
            pods = real_cluster.get(ns, "pods", "-l", f"nbvalidation.dev/job={first['metadata']['name']}")
            assert pods["items"], "the run was a validation Pod on the node"
            assert receiver.got == []  # green after nothing: no news

            repo.notebook("nbs/check.ipynb", ["x = 2", "assert x == 1, 'x moved'"])
            b = repo.commit("B: x is two now")
            pushed = time.monotonic()
            payload = wait(lambda: next((p for p, _ in receiver.got if p.get("event") == "turned-red"), None), 300,
                           lambda: f"the turned-red notification: runs {[j['status'].get('phase') for j in runs()]}")
            print(f"turned-red notification {time.monotonic() - pushed:.1f} s after the breaking commit")
            real_cluster.kubectl("patch", "nvs", "nightly", "--type=merge", "-p", '{"spec": {"suspend": true}}',
                                 namespace=ns)
            assert payload["schedule"] == "nightly", payload
            assert payload["culprit"]["kind"] == "commit" and payload["culprit"]["commit"] == b, payload["culprit"]
            assert payload["job"]["source"]["commit"] == b and a != b
            red = api.request("GET", f"jobs/{payload['job']['name']}")
            assert red["status"]["phase"] == Phase.FAILED, red["status"]
            assert KEY not in json.dumps(payload)
            listed = real_cluster.kubectl("get", "nvs", namespace=ns).stdout
            assert "nightly" in listed, listed
    finally:
        if server is not None:
            server.stop()
        receiver.close()
