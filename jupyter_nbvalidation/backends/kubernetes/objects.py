"""The child objects of a job, as plain dicts: names, labels, owner
references, the input and build-context ConfigMaps, the build Job and the
validation Pod. Pure functions; no I/O.

Names are deterministic (derived from the job's name), so a repeated create
is a 409 that the backend turns into "adopt the existing one".
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import re
import tarfile
from pathlib import Path, PurePosixPath
from typing import Any, Mapping

import jupyter_nbvalidation.environment.local_sources as local_sources
from jupyter_nbvalidation.backends.kubernetes.store import JOB_LABEL
from jupyter_nbvalidation.core.documents import Job
from jupyter_nbvalidation.core.model import API_VERSION, GROUP, KIND, build_attempt
from jupyter_nbvalidation.environment.kinds.apt_txt import APT_TXT
from jupyter_nbvalidation.environment.requirements import INTERPRETER_JSON
from jupyter_nbvalidation.spec.plan import CONSTRAINTS_TXT, ValidationPlan
from jupyter_nbvalidation.verdict.probe import BASE_IMAGE_VAR

COMPONENT_LABEL = f"{GROUP}/component"
MANAGED_BY = {"app.kubernetes.io/managed-by": "jupyter-nbvalidation"}
INPUT_ANNOTATION = f"{GROUP}/input-configmap"
BUILD_CONTAINER = "build"
RUNNER_CONTAINER = "runner"
INPUT_MOUNT = "/input"
WORKSPACE = "/workspace"
WORKDIR = "/tmp/work"  # the kernel's working directory in the validation pod: the input files, writable
INPUTS_PREFIX = "inputs/"  # snapshot keys of the files beside the notebook (spec.inputFiles)
INPUTS_INDEX = "nbvalidation-inputs.json"  # in the input ConfigMap: [[key, relative path], ...]
# the two interpreters of a built image: the runner's venv (nbclient, nbformat and the
# runner package, nothing else) and the kernel's (ipykernel + the notebook's requirements)
RUNNER_VENV = "/opt/nbv-runner"
KERNEL_VENV = "/opt/nbv-kernel"
RUNNER_PYTHON = f"{RUNNER_VENV}/bin/python"
KERNEL_PYTHON = f"{KERNEL_VENV}/bin/python"
CONTEXT_TAR = "context.tar.gz"
RUNNER_TAR = "runner.tar.gz"
NAME_LIMIT = 63  # a Job's name becomes a label value; a Pod's a hostname


def _short(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{text[: limit - 9].rstrip('-.')}-{digest}"


def child_name(job_name: str, suffix: str) -> str:
    """``nvj-<job>-<suffix>``, shortened with a hash when over 63 characters."""
    return _short(f"nvj-{job_name}-{suffix}", NAME_LIMIT)


def input_configmap_name(job_name: str) -> str:
    return child_name(job_name, "input")


def build_context_name(job_name: str) -> str:
    return child_name(job_name, "build-ctx")


def build_job_name(job_name: str, attempt: int = 0) -> str:
    """The build object of an attempt (``model.build_attempt``): ``nvj-<job>-build``,
    retry n after a transient fault ``nvj-<job>-build-r<n>`` (Job and Tekton builds)."""
    return child_name(job_name, "build" if attempt <= 0 else f"build-r{attempt}")


def current_build_name(job: Job) -> str:
    """The build object (a Job builder's Job, a Tekton run) of the job's current build attempt."""
    return build_job_name(job["metadata"]["name"], build_attempt(job))


def validation_pod_name(job_name: str, attempt: int = 0) -> str:
    """The validation Pod of an attempt (``model.validation_attempt``): attempt 0 is
    ``nvj-<job>-validate``, retry n after a transient fault ``nvj-<job>-validate-r<n>``."""
    return child_name(job_name, "validate" if attempt <= 0 else f"validate-r{attempt}")


def label_value(job_name: str) -> str:
    return _short(job_name, NAME_LIMIT)


def labels(job: Job, component: str) -> dict[str, str]:
    return {JOB_LABEL: label_value(job["metadata"]["name"]), COMPONENT_LABEL: component, **MANAGED_BY}


def owner_reference(job: Job) -> dict[str, Any]:
    # no blockOwnerDeletion: that needs update on notebookvalidationjobs/finalizers,
    # which the server Role does not grant (and does not need)
    return {"apiVersion": API_VERSION, "kind": KIND, "name": job["metadata"]["name"],
            "uid": job["metadata"]["uid"], "controller": True}


def owned_by(obj: dict[str, Any], job: Job) -> bool:
    uid = job["metadata"]["uid"]
    return any(r.get("uid") == uid for r in (obj.get("metadata") or {}).get("ownerReferences") or [])


def _meta(job: Job, name: str, component: str) -> dict[str, Any]:
    return {"name": name, "namespace": job["metadata"]["namespace"], "labels": labels(job, component),
            "ownerReferences": [owner_reference(job)]}


def configmap_size(data: dict[str, str], binary: dict[str, bytes] | None = None) -> int:
    """What the API server counts against a ConfigMap's 1 MiB: keys + values
    (binaryData by its decoded bytes)."""
    return (sum(len(k.encode()) + len(v.encode()) for k, v in data.items())
            + sum(len(k.encode()) + len(v) for k, v in (binary or {}).items()))


def input_key(index: int) -> str:
    """ConfigMap keys allow no '/': input file ``index`` is stored as ``input-<index>``."""
    return f"input-{index:04d}"


def split_snapshot(files: dict[str, bytes]) -> tuple[dict[str, str], dict[str, bytes], list[list[str]]]:
    """The submit snapshot as ConfigMap content: the notebook, golden notebook
    and requirements as text ``data``; every ``inputs/<relpath>`` file as
    ``binaryData`` under a key of its own, with the key -> path index (also in
    ``data``, as :data:`INPUTS_INDEX`). Content is stored once: an input file
    with the bytes of another (the notebook itself, in its folder) is indexed
    under that one's key (a Pod projects a key to several paths). Raises
    ValueError for a non-UTF-8 text file or an input path that cannot be mounted."""
    data: dict[str, str] = {}
    binary: dict[str, bytes] = {}
    index: list[list[str]] = []
    stored: dict[str, str] = {}  # sha256 of a content -> the key holding it
    for key in sorted(k for k in files if not k.startswith(INPUTS_PREFIX)):
        if key == local_sources.ARCHIVE:  # the requirements' local paths, packed: bytes as they are
            binary[key] = files[key]
            continue
        try:
            data[key] = files[key].decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{key} is not UTF-8 text") from None
        stored.setdefault(hashlib.sha256(files[key]).hexdigest(), key)
    for key in sorted(k for k in files if k.startswith(INPUTS_PREFIX)):
        value = files[key]
        rel = key[len(INPUTS_PREFIX):]
        parts = PurePosixPath(rel).parts
        if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\\" in rel:
            raise ValueError(f"{key}: not a relative path inside the notebook's folder")
        digest = hashlib.sha256(value).hexdigest()
        k = stored.get(digest)
        if k is None:
            k = stored[digest] = input_key(len(binary))
            binary[k] = value
        index.append([k, "/".join(parts)])
    if index:
        data[INPUTS_INDEX] = json.dumps(index, separators=(",", ":"))
    return data, binary, index


def input_configmap(job: Job, files: dict[str, bytes]) -> dict[str, Any]:

    data, binary, _ = split_snapshot(files)
    cm: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": _meta(job, input_configmap_name(job["metadata"]["name"]), "input"),
                          "immutable": True, "data": data}
    if binary:
        cm["binaryData"] = {k: base64.b64encode(v).decode() for k, v in binary.items()}
    return cm


def inputs_index(cm_data: dict[str, str]) -> list[tuple[str, str]]:
    """The (ConfigMap key, relative path) pairs of a stored snapshot's input files."""
    raw = cm_data.get(INPUTS_INDEX)
    return [(k, p) for k, p in json.loads(raw)] if raw else []


# --- the build ------------------------------------------------------------------

_IMAGE_RE = re.compile(r"^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*$")


def valid_repository(repo: str) -> bool:
    return bool(_IMAGE_RE.match(repo))


INTERPRETER_CHECK = "interpreter-check.py"
# run by the kernel venv's Python before anything is installed into it: what the repository asks of
# the interpreter (runtime.txt, requires-python, a lock's environments), which only the build knows
INTERPRETER_CHECK_PY = """import json, platform, sys
try:
    from packaging.markers import Marker
    from packaging.specifiers import SpecifierSet
except ImportError:  # the venv's pip carries it
    from pip._vendor.packaging.markers import Marker
    from pip._vendor.packaging.specifiers import SpecifierSet
with open(sys.argv[1]) as f:
    want = json.load(f)
v = platform.python_version()
spec = want.get("pythonRequires")
if spec and not SpecifierSet(spec[0]).contains(v, prereleases=True):
    sys.exit(f"nbvalidation: {spec[1]} asks for Python {spec[0]}; the base image has Python {v}, so the notebook "
             "cannot be validated on it as its repository declares it (spec.podConfig.buildConfig.baseImage "
             "names another)")
envs = want.get("environments")
if envs and not any(Marker(m).evaluate() for m in envs[0]):
    sys.exit(f"nbvalidation: {envs[1]} lists the environments the lock is valid for ({'; '.join(envs[0])}); the "
             f"base image (Python {v} on {sys.platform} {platform.machine()}) is not one of them")
"""


def dockerfile(base_image: str, *, local_paths: bool = False, system_packages: bool = False,
               interpreter: bool = False, constraints: bool = False) -> str:
    """FROM the base image (by digest when it could be resolved); the runner in
    a venv of its own (``/opt/nbv-runner``: created with nbclient and nbformat
    unless the base image has it; the runner package of this server copied in);
    the kernel in another (``/opt/nbv-kernel``, created unless the base image
    has it): ipykernel and the notebook's requirements only, so a notebook sees
    exactly what it declared, as with the local backend. ``local_paths``: the
    requirements' local paths (local_sources.ARCHIVE) unpacked where their lines
    name them first. ``system_packages``: the packages of the repository's
    ``apt.txt`` (:data:`APT_TXT`, one a line) installed first, as repo2docker does.
    ``interpreter``: the kernel's Python checked first against what the repository
    asks of it (:data:`INTERPRETER_CHECK_PY` over ``interpreter.json``). ``constraints``:
    the kernel's install is constrained by :data:`CONSTRAINTS_TXT` (pip's ``-c``), as
    the local backend's ``uv pip install -c`` is."""
    rp, kp = RUNNER_PYTHON, KERNEL_PYTHON
    extra = (f" {local_sources.ARCHIVE}" if local_paths else "") + (f" {APT_TXT}" if system_packages else "") + \
        (f" {INTERPRETER_CHECK} {INTERPRETER_JSON}" if interpreter else "") + \
        (f" {CONSTRAINTS_TXT}" if constraints else "")
    with_constraints = f" -c /tmp/nbv-build/{CONSTRAINTS_TXT}" if constraints else ""
    check = (f"    {kp} /tmp/nbv-build/{INTERPRETER_CHECK} /tmp/nbv-build/{INTERPRETER_JSON}; \\\n"
             if interpreter else "")
    apt = (
        "RUN set -e; command -v apt-get >/dev/null || { echo \"nbvalidation: apt.txt needs apt-get in the base "
        "image\" >&2; exit 1; }; \\\n"
        "    export DEBIAN_FRONTEND=noninteractive; apt-get -o Acquire::Retries=3 update -q; \\\n"
        f"    xargs -a /tmp/nbv-build/{APT_TXT} apt-get -o Acquire::Retries=3 install -y -q --no-install-recommends; \\\n"
        "    rm -rf /var/lib/apt/lists/*\n"
    ) if system_packages else ""
    unpack = (f"    mkdir -p {local_sources.BUILD_DIR}; "
              f"tar -xzf /tmp/nbv-build/{local_sources.ARCHIVE} -C {local_sources.BUILD_DIR} --no-same-owner; \\\n"
              ) if local_paths else ""
    return (
        "# generated by jupyter-nbvalidation\n"
        f"FROM {base_image}\n"
        f"ENV {BASE_IMAGE_VAR}={base_image}\n"  # the runner names it in the environment record
        f"COPY requirements.txt runner-requirements.txt runner.tar.gz{extra} /tmp/nbv-build/\n"
        "USER 0\n"
        f"{apt}"
        "RUN set -e; pipi='-m pip install --no-cache-dir --disable-pip-version-check'; \\\n"
        f"    if [ ! -x {rp} ]; then python3 -m venv {RUNNER_VENV}; {rp} $pipi -r /tmp/nbv-build/runner-requirements.txt; fi; \\\n"
        f"    site=$({rp} -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])'); \\\n"
        "    rm -rf \"$site/jupyter_nbvalidation\"; \\\n"
        f"    {rp} -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' /tmp/nbv-build/runner.tar.gz \"$site\"; \\\n"
        f"    {rp} -c 'import jupyter_nbvalidation.runner'; \\\n"
        f"    if [ ! -x {kp} ]; then python3 -m venv {KERNEL_VENV}; fi; \\\n"
        f"{check}"
        f"{unpack}"
        f"    {kp} $pipi -r /tmp/nbv-build/requirements.txt{with_constraints}; \\\n"
        f"    {kp} -c 'import ipykernel_launcher'; \\\n"
        "    rm -rf /tmp/nbv-build\n"
    )


def build_requirements(kernel_requirements: list[str], requirements: list[str]) -> str:
    """The kernel venv's requirements: a kernel, then the notebook's."""
    lines = ["# the kernel", *kernel_requirements, "# the notebook", *requirements]
    return "\n".join(lines) + "\n"


def runner_requirements_txt(runner_requirements: list[str]) -> str:
    return "\n".join(["# the validation runner's venv", *runner_requirements]) + "\n"


def content_hash(*parts: str | bytes, length: int = 16) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()[:length]


_PACKAGE_DIR = Path(__file__).resolve().parents[2]
_runner_files: dict[str, bytes] | None = None


def runner_files() -> dict[str, bytes]:
    """The runner's sources as they go into the image's runner venv
    (``jupyter_nbvalidation/...`` paths): the package's ``__init__``, its
    version and the ``runner`` package; while the runner is still a module
    beside others, every module of the package (the runner venv imports only
    what the runner needs). Read once."""
    global _runner_files
    if _runner_files is None:
        pkg = _PACKAGE_DIR
        if (pkg / "runner" / "__init__.py").is_file():
            from jupyter_nbvalidation.runner import (
                SHARED_MODULES,  # deferred: start-up time (the runner's files are read once, when an image is first built); the pure modules it imports beside runner/
            )

            paths = [*(pkg / m for m in SHARED_MODULES), *sorted((pkg / "runner").rglob("*.py"))]
        else:
            paths = sorted(p for p in pkg.rglob("*.py") if "labextension" not in p.parts)
        _runner_files = {f"jupyter_nbvalidation/{p.relative_to(pkg).as_posix()}": p.read_bytes() for p in paths}
    return _runner_files


def deterministic_tar(files: dict[str, bytes]) -> bytes:
    """A gzipped tar of ``files`` whose bytes depend on the contents only."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for path in sorted(files):
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(files[path]), 0o644, 0
            tar.addfile(info, io.BytesIO(files[path]))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def build_context(docker_file: str, requirements_txt: str, runner_reqs_txt: str, *,
                  local_paths: bytes | None = None, system_packages: list[str] | None = None,
                  interpreter: dict[str, Any] | None = None, constraints_txt: str | None = None) -> dict[str, bytes]:
    """The files of a build context (flat names: ConfigMap keys)."""
    out = {"Dockerfile": docker_file.encode(), "requirements.txt": requirements_txt.encode(),
           "runner-requirements.txt": runner_reqs_txt.encode(), RUNNER_TAR: deterministic_tar(runner_files())}
    if local_paths is not None:
        out[local_sources.ARCHIVE] = local_paths
    if system_packages:
        out[APT_TXT] = "".join(f"{p}\n" for p in system_packages).encode()
    if interpreter:
        out[INTERPRETER_CHECK] = INTERPRETER_CHECK_PY.encode()
        out[INTERPRETER_JSON] = json.dumps(interpreter, sort_keys=True).encode()
    if constraints_txt:
        out[CONSTRAINTS_TXT] = constraints_txt.encode()
    return out


def build_context_configmap(job: Job, context: dict[str, bytes]) -> dict[str, Any]:
    """The context as flat keys (for builders that copy a ConfigMap) plus the
    same files as one ``context.tar.gz`` (kaniko's ``tar://`` context: a
    ConfigMap volume's keys are symlinks into ``..data/``, which kaniko's COPY
    would copy as dangling links; files unpacked from a tar are regular)."""

    data, binary = {}, {}
    for key, value in context.items():
        if key.endswith(".gz"):
            binary[key] = value
        else:
            data[key] = value.decode()
    binary[CONTEXT_TAR] = deterministic_tar(context)
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": _meta(job, build_context_name(job["metadata"]["name"]), "build"),
            "immutable": True, "data": data,
            "binaryData": {k: base64.b64encode(v).decode() for k, v in binary.items()}}


def build_job(job: Job, *, builder_image: str, destination: str, deadline_seconds: int,
              service_account: str = "", registry_secret: str = "", extra_args: list[str] | None = None,
              attempt: int = 0) -> dict[str, Any]:
    """A batch/v1 Job running a kaniko-compatible executor once (no retries).
    The image digest comes back through the container's termination message
    (``--digest-file=/dev/termination-log``)."""
    name = job["metadata"]["name"]
    # the context is the tar (regular files once unpacked), the Dockerfile is
    # found in it; the base image the executor unpacked into its container is
    # deleted once the image is built (--cleanup): the finished Pod stays as the
    # build's evidence (its log) without holding a whole image's files on the
    # node's disk; plain-text logs (no ANSI colours in failure messages)
    args = [f"--context=tar://{WORKSPACE}/{CONTEXT_TAR}", "--dockerfile=Dockerfile",
            f"--destination={destination}", "--digest-file=/dev/termination-log", "--cleanup",
            "--log-format=text", *(extra_args or [])]
    mounts = [{"name": "context", "mountPath": WORKSPACE, "readOnly": True}]
    volumes: list[dict[str, Any]] = [{"name": "context", "configMap": {
        "name": build_context_name(name), "items": [{"key": CONTEXT_TAR, "path": CONTEXT_TAR}]}}]
    if registry_secret:
        mounts.append({"name": "registry-auth", "mountPath": "/kaniko/.docker", "readOnly": True})
        volumes.append({"name": "registry-auth", "secret": {
            "secretName": registry_secret, "items": [{"key": ".dockerconfigjson", "path": "config.json"}]}})
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        # success: the digest file is the termination message; failure: the file
        # is empty and the kubelet uses the log's tail, which Failed carries
        "containers": [{"name": BUILD_CONTAINER, "image": builder_image, "args": args,
                        "volumeMounts": mounts, "terminationMessagePath": "/dev/termination-log",
                        "terminationMessagePolicy": "FallbackToLogsOnError"}],
        "volumes": volumes,
    }
    if service_account:
        pod_spec["serviceAccountName"] = service_account
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": _meta(job, build_job_name(name, attempt), "build"),
            "spec": {"backoffLimit": 0, "activeDeadlineSeconds": max(1, int(deadline_seconds)),
                     "template": {"metadata": {"labels": labels(job, "build")}, "spec": pod_spec}}}


# --- the validation -----------------------------------------------------------------


#: the prefix of the variables a job's secrets reach the runner's container with (envFrom), which
#: the runner takes out of its environment and hands to the kernel without it (runner --secrets-from-env)
SECRET_ENV_PREFIX = "NBV_SECRET_"


def runner_command(plan: ValidationPlan, *, print_executed: bool, progress: bool = True) -> list[str]:
    """The runner's command in the pod: the mount points, then what the plan
    asks (``plan.runner_args``). A built image (``plan.build``): the runner
    runs from its own venv and starts the kernel with the kernel venv's
    interpreter; else (a given image) ``python`` on the image's PATH has both.
    ``progress``: the runner prints its progress records in the log (``--progress``)."""
    built = plan.build
    head = [RUNNER_PYTHON, "-m", "jupyter_nbvalidation.runner"] if built else ["python", "-m",
                                                                                 "jupyter_nbvalidation.runner"]
    cmd = [*head, f"{INPUT_MOUNT}/notebook.ipynb",
           "--result", "/tmp/result.json", "--executed", "/tmp/executed.ipynb",
           "--termination-log", "/dev/termination-log", "--cwd", WORKDIR]
    if built:
        cmd += ["--python", KERNEL_PYTHON]
    if plan.golden:
        cmd += ["--golden", f"{INPUT_MOUNT}/golden.ipynb"]
    cmd += plan.runner_args
    if print_executed:
        cmd.append("--print-executed")
    cmd.append("--print-environment")  # the job's environment record, read from the Pod's log
    if progress:
        cmd.append("--progress")
    # the job's variables go to the kernel only (the runner builds the kernel's
    # environment from an allow-list, not from the container's)
    cmd += [f"--kernel-env={name}={value}" for name, value in plan.kernel_env]
    if plan.credentials:  # their values: in the container's environment (envFrom), masked by the runner
        cmd.append(f"--secrets-from-env={SECRET_ENV_PREFIX}")
    return cmd


def merged_resources(defaults: dict[str, Any] | None, spec: Mapping[str, Any]) -> dict[str, Any]:
    """The server's default requests/limits with the job's ``podConfig.resources`` over them."""
    out = {k: dict(v) for k, v in (defaults or {}).items()}
    for kind, values in ((spec.get("podConfig") or {}).get("resources") or {}).items():
        out.setdefault(kind, {}).update(values)
    return out


def validation_pod(job: Job, *, image: str, command: list[str], deadline_seconds: int, run_as_user: int,
                   service_account: str = "", resources: dict[str, Any] | None = None,
                   image_pull_secrets: list[str] | None = None, inputs: list[tuple[str, str]] | None = None,
                   attempt: int = 0, secrets: list[str] | None = None, token: bool = False) -> dict[str, Any]:
    """``resources``: the server's defaults; the job's own ``podConfig.resources``,
    ``nodeSelector`` and ``tolerations`` are applied here (its ``env`` is the
    kernel's, in the command: :func:`runner_command`).
    ``inputs``: the snapshot's input files (ConfigMap key, relative path),
    copied by an init container into the kernel's working directory (writable,
    regular files, as beside the notebook locally).
    ``secrets``: the Kubernetes Secrets of the job's ``podConfig.credentials``, every key of each
    in the runner container's environment as ``NBV_SECRET_<key>`` (envFrom: the server never
    holds the values; a later Secret's key wins, as locally); the runner takes them out of its
    own environment for the kernel's and masks them (:func:`runner_command`).
    ``token``: the service account's API token is mounted (a job's own ``serviceAccountName``,
    which the admin allowed: its rights are what the job asked for); else it never is."""
    name = job["metadata"]["name"]
    pod_config = job["spec"].get("podConfig") or {}
    container: dict[str, Any] = {
        "name": RUNNER_CONTAINER,
        "image": image,
        "command": command,
        "env": [{"name": "HOME", "value": "/tmp"}, {"name": "PYTHONUNBUFFERED", "value": "1"},
                {"name": "JUPYTER_RUNTIME_DIR", "value": "/tmp/.jupyter-runtime"},
                {"name": "IPYTHONDIR", "value": "/tmp/.ipython"}],
        "volumeMounts": [{"name": "input", "mountPath": INPUT_MOUNT, "readOnly": True},
                         {"name": "scratch", "mountPath": "/tmp"}, {"name": "work", "mountPath": WORKDIR}],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "securityContext": {"runAsNonRoot": True, "allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]}},
    }
    if secrets:
        container["envFrom"] = [{"secretRef": {"name": s}, "prefix": SECRET_ENV_PREFIX} for s in secrets]
    resources = merged_resources(resources, job["spec"])
    if resources:
        container["resources"] = resources
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "activeDeadlineSeconds": max(1, int(deadline_seconds)),
        # the notebook gets no credentials for the API server (but those of a service account it asked for)
        "automountServiceAccountToken": token,
        "securityContext": {"runAsNonRoot": True, "runAsUser": run_as_user, "runAsGroup": run_as_user,
                            "fsGroup": run_as_user, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container],
        "volumes": [{"name": "input", "configMap": {"name": input_configmap_name(name)}},
                    {"name": "scratch", "emptyDir": {}}, {"name": "work", "emptyDir": {}}],
    }
    if inputs:
        # the input files, copied into the (writable) working directory before
        # the runner starts: the ConfigMap's files are symlinks into ``..data/``,
        # ``cp -L`` makes regular files of them
        keys = ["notebook.ipynb"] + (["golden.ipynb"] if job["spec"].get("goldenNotebook") else [])
        spec["volumes"][0]["configMap"]["items"] = (
            [{"key": k, "path": k} for k in keys] + [{"key": key, "path": f"inputs/{rel}"} for key, rel in inputs])
        spec["initContainers"] = [{
            "name": "inputs", "image": image, "command": ["sh", "-c", f"cp -RL {INPUT_MOUNT}/inputs/. {WORKDIR}/"],
            "volumeMounts": [{"name": "input", "mountPath": INPUT_MOUNT, "readOnly": True},
                             {"name": "work", "mountPath": WORKDIR}],
            "securityContext": container["securityContext"],
            **({"resources": resources} if resources else {}),
        }]
    if pod_config.get("nodeSelector"):
        spec["nodeSelector"] = dict(pod_config["nodeSelector"])
    if pod_config.get("tolerations"):
        spec["tolerations"] = [dict(t) for t in pod_config["tolerations"]]
    if pod_config.get("serviceAccountName"):  # allowed by the admin (KubernetesBackend.allowed_service_accounts)
        spec["serviceAccountName"] = pod_config["serviceAccountName"]
    elif service_account:
        spec["serviceAccountName"] = service_account
    if image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in image_pull_secrets]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": _meta(job, validation_pod_name(name, attempt), "validation"), "spec": spec}

