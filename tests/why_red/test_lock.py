"""Pin what passed (issue 22): ``GET /jobs/{name}/lock`` and ``jupyter nbvalidation lock NB``
write the exact pins of a job's environment; ``spec.podConfig.buildConfig.constraints`` and
``--constraints-from-last-success`` validate against them. The drift case end to end: a new
release of an unpinned dependency turns the notebook red; the lock of the last success
re-validated, and the same run with its pins as constraints, are green again. Real uv builds
from a --find-links folder of local wheels, real kernels."""

from __future__ import annotations

import json
import os
import shutil
import sys
from functools import partial

import pytest
from helpers import cli as _cli
from helpers import make_wheel, rest_wait_terminal, write_notebook
from helpers import rest_call as call
from tornado.httpclient import HTTPClientError

import jupyter_nbvalidation.why_red.lock as el

JUPYTER = shutil.which("jupyter", path=os.path.dirname(sys.executable)) or "jupyter"
cli = partial(_cli, timeout=900, no_servers=True)


def _record(kind: str = "built", **extra) -> dict:
    return {"python": {"version": "3.11.2", "implementation": "CPython", "platform": "Linux-x86_64"},
            "environment": {"kind": kind, "requirements": ["--find-links /r/wheels", "pkg", "-e /r/local"]},
            "distributions": [
                {"name": "pkg", "version": "1.0", "source": {"kind": "index"}},
                {"name": "local-thing", "version": "0.1", "source": {"kind": "local", "path": "/r/local"}},
                {"name": "private", "version": "2.0", "source": {"kind": "url",
                                                                 "url": "https://***@host/private-2.0.whl"}},
                {"name": "six", "version": "1.16.0", "source": {"kind": "index"}}], **extra}


def test_the_lock_pins_every_distribution_after_the_declared_options():
    job = {"metadata": {"name": "nvj-1"}, "spec": {"notebook": {"path": "a/nb.ipynb"}},
           "status": {"phase": "Succeeded", "completionTime": "2026-12-04T01:00:00Z"}}
    text = el.lock_text(job, _record())
    lines = [ln for ln in text.splitlines() if not ln.startswith("#")]
    assert lines == ["--find-links /r/wheels", "pkg==1.0", "/r/local", "six==1.16.0"]
    assert "job nvj-1 validated a/nb.ipynb in (Succeeded, 2026-12-04T01:00:00Z)" in text
    # a URL whose credentials are masked cannot be installed from: left as a comment, never half-usable
    assert "# private @ https://***@host/private-2.0.whl  (its credentials are not kept" in text
    assert "# note: local-thing comes from a local path: installed as it is now" in text
    assert el.constraint_lines(_record()) == (["pkg==1.0", "six==1.16.0"], ["local-thing", "private"])


@pytest.mark.parametrize("record,why", [
    (_record("interpreter"), "did not build"),
    (_record(error="python could not be run"), "incomplete"),
    (_record(truncated={"distributions": 6000, "kept": 5000}), "kept 5000 of 6000"),
])
def test_no_lock_for_what_cannot_be_pinned(record, why):
    with pytest.raises(el.NoLock, match=why):
        el.lock_text({"metadata": {"name": "x"}}, record)
    with pytest.raises(el.NoLock, match=why):
        el.constraint_lines(record)


async def test_constraints_are_checked_at_submit_and_a_job_without_a_build_has_no_lock(jp_fetch, jp_root_dir):
    write_notebook(jp_root_dir / "c.ipynb", ["print(1)"])
    (jp_root_dir / "pkgdir").mkdir()
    bad = [({"constraints": ["pandas<3"], "enabled": False}, "spec.podConfig.buildConfig.constraints",
            "buildConfig.enabled is false"),
           ({"constraints": ["./pkgdir"]}, "spec.podConfig.buildConfig.constraints", "not paths"),
           ({"constraints": ["--find-links ./pkgdir"]}, "spec.podConfig.buildConfig.constraints",
            "not accepted in a constraints file"),
           ({"constraints": ["not a specifier !"]}, "spec.podConfig.buildConfig.constraints", "not a requirement")]
    for bc, field, reason in bad:
        try:
            await call(jp_fetch, "jobs", method="POST", body={"notebook": {"path": "c.ipynb"},
                                                              "podConfig": {"buildConfig": bc}})
        except HTTPClientError as e:
            err = json.loads(e.response.body)["error"]
            assert e.code == 400 and err["field"].startswith(field) and reason in err["message"], (bc, err)
        else:
            raise AssertionError(f"{bc} accepted")
    assert (await call(jp_fetch, "jobs"))["items"] == []  # nothing was created

    job = await call(jp_fetch, "jobs", method="POST", body={"notebook": {"path": "c.ipynb"},
                                                            "podConfig": {"buildConfig": {"enabled": False}}})
    job = await rest_wait_terminal(jp_fetch, job["metadata"]["name"], 120)
    assert job["status"]["phase"] == "Succeeded", job["status"]
    for name, says in ((job["metadata"]["name"], "did not build"), ("nvj-no-such-job", "no job named")):
        try:
            await call(jp_fetch, "jobs", name, "lock")
        except HTTPClientError as e:
            assert e.code == 404 and says in json.loads(e.response.body)["error"]["message"]
        else:
            raise AssertionError(f"a lock for {name}")


# --- end to end: the CLI, in a subprocess, on the local backend --------------------------------------

def test_the_lock_of_the_last_success_turns_a_drifted_notebook_green_again(tmp_path):
    proj, data = tmp_path / "proj", tmp_path / "data"
    wheels = proj / "wheels"
    wheels.mkdir(parents=True)
    for name in ("nbvprobe", "nbvdriftb"):
        (wheels / f"{name}-1.0-py3-none-any.whl").write_bytes(make_wheel(name, "1.0", "VALUE = 1\n"))
    (proj / "requirements.txt").write_text("--find-links ./wheels\nnbvprobe\nnbvdriftb\n")  # unpinned
    write_notebook(proj / "nb.ipynb", ["import nbvprobe, nbvdriftb", "assert nbvprobe.VALUE == 1, nbvprobe.VALUE"])
    local = ("--local", "--data-dir", str(data))
    none = cli("lock", *local, "proj/nb.ipynb", cwd=tmp_path)
    assert none.returncode == 2 and "has no Succeeded job to pin" in none.stderr, none.stderr
    green = cli("run", *local, "proj/nb.ipynb", cwd=tmp_path)
    assert green.returncode == 0, green.stdout + green.stderr

    out = cli("lock", *local, "proj/nb.ipynb", "-o", "pins.txt", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    pins = (tmp_path / "pins.txt").read_text()
    body = [ln for ln in pins.splitlines() if not ln.startswith("#")]
    assert body[0] == "--find-links proj/wheels"  # relative to the lock file (here: the current folder)
    assert "nbvprobe==1.0" in body and "nbvdriftb==1.0" in body and any(ln.startswith("ipykernel==") for ln in body)
    assert cli("lock", *local, "proj/nb.ipynb", cwd=tmp_path).stdout == pins  # printed without -o

    # both release 2.0 (only nbvprobe's breaks the notebook); nobody touches it
    for name in ("nbvprobe", "nbvdriftb"):
        (wheels / f"{name}-2.0-py3-none-any.whl").write_bytes(make_wheel(name, "2.0", "VALUE = 2\n"))
    red = cli("run", *local, "proj/nb.ipynb", cwd=tmp_path)
    assert red.returncode == 1, red.stdout + red.stderr

    # the same declared requirements, with the last success's versions as constraints: green
    kept = cli("run", *local, "--constraints-from-last-success", "proj/nb.ipynb", "-o", "json", cwd=tmp_path)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert "proj/nb.ipynb: constrained to the " in kept.stderr and "versions of its last success (job " in kept.stderr
    assert json.loads(kept.stdout)[0]["verdict"] == "Succeeded"
    listed = json.loads(cli("list", *local, "--notebook", "proj/nb.ipynb", "-o", "json", cwd=tmp_path).stdout)["items"]
    newest = listed[0]
    constraints = newest["spec"]["podConfig"]["buildConfig"]["constraints"]
    assert "nbvprobe==1.0" in constraints and "nbvdriftb==1.0" in constraints
    assert "constraints (spec.podConfig.buildConfig.constraints)" in newest["status"]["environment"]
    # without them the notebook is still red: the cache never answers for the constrained run
    assert cli("run", *local, "proj/nb.ipynb", cwd=tmp_path).returncode == 1

    sub = cli("submit", *local, "proj/nb.ipynb", "--constraints-from-last-success", "--wait", cwd=tmp_path)
    assert sub.returncode == 0, sub.stdout + sub.stderr
    assert "proj/nb.ipynb: constrained to the " in sub.stdout

    # the lock written beside the notebook names its --find-links folder relative to itself (issue 42):
    # the project moved elsewhere (or cloned on another machine), the lock as its requirements file: green
    out = cli("lock", *local, "proj/nb.ipynb", "-o", "proj/pins.txt", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "--find-links wheels" in (proj / "pins.txt").read_text().splitlines()
    moved = tmp_path / "elsewhere" / "proj"
    moved.parent.mkdir()
    shutil.move(str(proj), str(moved))
    again = cli("submit", *local, "elsewhere/proj/nb.ipynb", "--requirements-file", "pins.txt", "--wait",
                cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr


def test_a_backend_without_constraints_refuses_the_field_naming_it(tmp_path):
    """A backend that does not declare constraint_files: the spec's list is a 400 naming it at
    submit, never ignored. Kubernetes declares it (its image build installs with pip's -c)."""
    from types import SimpleNamespace

    import jupyter_nbvalidation.environment.requirements as reqmod
    from jupyter_nbvalidation.backends.base import Capabilities
    from jupyter_nbvalidation.backends.kubernetes.backend import KubernetesBackend
    from jupyter_nbvalidation.service.errors import ApiError
    from jupyter_nbvalidation.service.jobs import JobService

    write_notebook(tmp_path / "nb.ipynb", ["1"])
    spec = {"notebook": {"path": "nb.ipynb"}, "podConfig": {"buildConfig": {"requirements": ["six"],
                                                                            "constraints": ["six<2"]}}}
    reqs = reqmod.collect(spec, str(tmp_path), str(tmp_path / "nb.ipynb"))
    assert reqs.display_constraints == ["six<2"] and reqs.display_lines == ["six"]
    service = SimpleNamespace(backend=SimpleNamespace(name="toy", capabilities=Capabilities()))
    with pytest.raises(ApiError) as e:
        JobService._check_requirement_features(service, reqs)  # type: ignore[arg-type]
    assert e.value.status == 400 and e.value.field == "spec.podConfig.buildConfig.constraints"
    assert "the toy backend does not take constraints yet" in e.value.message
    assert KubernetesBackend.capabilities.constraint_files
    k8s = SimpleNamespace(backend=SimpleNamespace(name="kubernetes", capabilities=KubernetesBackend.capabilities))
    JobService._check_requirement_features(k8s, reqs)  # type: ignore[arg-type]


def test_constraints_of_a_resource_created_around_the_server_are_read_from_its_spec():
    """A job created with kubectl has no snapshot: its spec's constraints are still applied."""
    import jupyter_nbvalidation.environment.requirements as reqmod

    bc = {"requirements": ["six"], "constraints": ["six==1.16.0"]}
    reqs = reqmod.of_job({"spec": {"podConfig": {"buildConfig": bc}}}, None, None)
    assert reqs.display_lines == ["six"] and reqs.display_constraints == ["six==1.16.0"]
    alone = reqmod.of_job({"spec": {"podConfig": {"buildConfig": {"constraints": ["six<2"]}}}}, None, None)
    assert alone.display_constraints == ["six<2"] and alone.origin == reqmod.CONSTRAINTS_FIELD
    stored = reqmod.of_job({"spec": {"podConfig": {"buildConfig": bc}}}, "six\n", "six==1.15.0\n")
    assert stored.display_constraints == ["six==1.15.0"]  # the snapshot, checked at submit, wins
