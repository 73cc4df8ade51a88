"""One validation plan for both backends (docs/architecture.md, "The validation plan"):
the plan is computed from a spec and its snapshot, and each backend's runner
command and environment identity come from it, never from the spec itself."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from jupyter_nbvalidation.backends.kubernetes.backend import KubernetesBackend
from jupyter_nbvalidation.backends.local import LocalBackend
from jupyter_nbvalidation.core.errors import InputRejected
from jupyter_nbvalidation.core.plan import Snapshot, make_plan
from jupyter_nbvalidation.core.spec_checks import validate_spec

BASE = "python@sha256:" + "a" * 64  # pinned: no registry lookup

SPEC = {
    "notebook": {"path": "nb.ipynb"},
    "goldenNotebook": {"path": "golden.ipynb"},
    "comparisonConfig": {"strategy": "normalized", "floatingPointTolerance": 0.001, "relativeTolerance": 0.01,
                         "ignoreTimestamps": False, "ignoreOutputTypes": ["stream:stderr"]},
    "cellTimeout": "90s",
    "podConfig": {"env": [{"name": "MODE", "value": "test"}], "buildConfig": {"timeout": "5m"}},
}


def _job(spec: dict, uid: str = "u-1") -> dict:
    return {"metadata": {"name": "nb-1", "uid": uid, "namespace": "ns", "annotations": {}},
            "spec": validate_spec(spec)}


def _plan(job: dict, requirements: str = "six==1.16.0\n", **kw):
    snapshot = Snapshot(names=frozenset({"notebook.ipynb", "golden.ipynb", "requirements.txt"}),
                        requirements_txt=requirements)
    kw = {"build_timeout": 900.0, "validation_timeout": 1800.0, "cell_timeout": 600.0, **kw}
    return make_plan(job, snapshot, **kw)


def _contains(argv: list[str], part: tuple[str, ...]) -> bool:
    return any(tuple(argv[i:i + len(part)]) == part for i in range(len(argv) - len(part) + 1))


def test_the_plan_holds_what_the_spec_and_snapshot_decide():
    plan = _plan(_job(SPEC))
    assert plan.requirements.display_lines == ["six==1.16.0"]
    assert (plan.build_timeout, plan.validation_timeout, plan.cell_timeout) == (300.0, 1800.0, 90.0)
    assert plan.runner_args == ("--comparison", "normalized", "--abs-tol", "0.001", "--rel-tol", "0.01",
                                "--keep-timestamps", "--ignore-output-type=stream:stderr",
                                "--cell-timeout", "90", "--timeout", "1800")
    assert plan.kernel_env == (("MODE", "test"),) and plan.golden and plan.build
    assert plan.detected == "1 requirement from requirements.txt beside the notebook"
    # deterministic: an engine taking over computes the same plan
    assert _plan(_job(SPEC)) == plan
    assert _plan(_job(SPEC), "six==1.17.0\n").requirements_key != plan.requirements_key


def test_a_snapshot_missing_a_file_is_refused_naming_the_field():
    with pytest.raises(InputRejected) as e:
        make_plan(_job(SPEC), Snapshot(names=frozenset({"notebook.ipynb"})), build_timeout=1,
                  validation_timeout=1, cell_timeout=1)
    assert e.value.field == "spec.goldenNotebook.path"
    with pytest.raises(InputRejected) as e:
        make_plan(_job(SPEC), Snapshot(names=frozenset()), build_timeout=1, validation_timeout=1, cell_timeout=1)
    assert e.value.field == "spec.notebook.path"


def test_both_backends_carry_out_the_same_plan(tmp_path: Path):
    """The same plan gives the local runner and the validation pod the same
    spec-decided arguments and kernel environment; each backend's environment
    identity follows the plan's requirements (a different plan, a different
    environment; the same plan, the same one)."""
    job = _job(SPEC)
    plan = _plan(job)
    local = LocalBackend(data_dir=str(tmp_path / "data"))
    argv = local.runner_argv(job, tmp_path / "run-1", "/env/bin/python", plan)
    kube = KubernetesBackend(namespace="ns", registry="registry.example/nbv", base_image=BASE)
    pod = kube.executor.pod(job, "registry.example/nbv/env@sha256:" + "b" * 64, plan)
    command = pod["spec"]["containers"][0]["command"]
    for args in (argv, command):
        assert _contains(args, plan.runner_args), args
        assert "--golden" in args
    assert "--kernel-env=MODE=test" in command and "--kernel-env-file" in argv
    assert pod["spec"]["activeDeadlineSeconds"] == int(plan.validation_timeout) + 30

    # a plan with other server defaults: both commands follow the plan, not the spec or their own traits
    other = _plan(_job({k: v for k, v in SPEC.items() if k != "cellTimeout"}), validation_timeout=60.0,
                  cell_timeout=5.0)
    assert _contains(local.runner_argv(job, tmp_path / "run-1", "/py", other), ("--cell-timeout", "5",
                                                                                "--timeout", "60"))
    assert _contains(kube.executor.pod(job, "img", other)["spec"]["containers"][0]["command"],
                     ("--cell-timeout", "5", "--timeout", "60"))

    # the environment: locally the env key, on Kubernetes the build's requirements and tag
    changed = _plan(job, "six==1.17.0\n")
    assert local.env_key(plan) == local.env_key(_plan(job)) != local.env_key(changed)

    async def build_inputs(p):
        kube.images.forget(job["metadata"]["uid"])
        return await kube.build_inputs(job, p)

    first, again, second = (asyncio.run(build_inputs(p)) for p in (plan, _plan(job), changed))
    assert "six==1.16.0" in first.requirements_txt and "six==1.17.0" in second.requirements_txt
    assert first.content_hash == again.content_hash != second.content_hash
    assert first.timeout_seconds == int(plan.build_timeout) == 300


def _failed(name: str, message: str, index: int = 2) -> dict:
    return {"reason": "CellExecutionFailed", "failedCellIndex": index,
            "results": [{"cellIndex": index, "status": "Failure", "errorName": name, "errorMessage": message}]}


def test_a_missing_relative_file_says_what_travelled():
    from jupyter_nbvalidation.core.model import ROOT_ANNOTATION, WORKDIR_ANNOTATION
    from jupyter_nbvalidation.core.plan import missing_file_hint

    job = {"metadata": {"annotations": {WORKDIR_ANNOTATION: "/srv/root/proj/a", ROOT_ANNOTATION: "/srv/root"}},
           "spec": {"notebook": {"path": "proj/a/nb.ipynb"}}}
    missing = _failed("FileNotFoundError", "[Errno 2] No such file or directory: 'data.csv'")
    k8s = missing_file_hint(job, missing, folder_in_snapshot=True, input_files=3)
    assert k8s is not None and "holds the notebook's folder (proj/a) and everything below it" in k8s, k8s
    assert "(3 files)" in k8s and "'data.csv' was not among them" in k8s and "spec.inputFiles" in k8s, k8s
    local = missing_file_hint(job, missing, folder_in_snapshot=False)
    assert local is not None and "a copy of the notebook's folder (proj/a) made when the run started" in local, local
    named = {**job, "spec": {**job["spec"], "inputFiles": ["*.txt", "sub/**"]}}
    hint = missing_file_hint(named, missing, folder_in_snapshot=True, input_files=1)
    assert hint is not None and "only the files spec.inputFiles named (*.txt, sub/**: 1 file," in hint, hint
    assert "add 'data.csv' to inputFiles" in hint, hint
    # the runner's termination summary (a Pod whose log could not be read) says it too
    summary = {"failedCellIndex": 0, "error": {"name": "FileNotFoundError",
                                               "message": "[Errno 2] No such file or directory: \"x/y.csv\""}}
    assert "'x/y.csv'" in (missing_file_hint(job, summary, folder_in_snapshot=True) or "")
    # no hint: an absolute path, another error, no failed cell
    assert missing_file_hint(job, _failed("FileNotFoundError", "[Errno 2] No such file or directory: '/d.csv'"),
                             folder_in_snapshot=True) is None
    assert missing_file_hint(job, _failed("KeyError", "'data.csv'"), folder_in_snapshot=True) is None
    assert missing_file_hint(job, {**missing, "failedCellIndex": None}, folder_in_snapshot=True) is None
