"""The Kubernetes backend: jobs are NotebookValidationJob custom resources,
builds are kaniko Jobs, Tekton PipelineRuns/TaskRuns or OpenShift Builds
(``k8s/builders``), validations are Pods running the same runner as the
local backend. ``c.NBValidation.backend = "kubernetes"`` selects it; every
setting is ``c.KubernetesBackend.<trait>``.

Per job ``<name>`` in the configured namespace, all owned by the job (so the
garbage collector removes them with it) and labelled
``nbvalidation.dev/job=<name>``:

- ConfigMap ``nvj-<name>-input``: the notebook snapshot taken at submit
  (``notebook.ipynb``, ``golden.ipynb``, ``requirements.txt`` as text; the
  input files ``inputs/<relpath>`` as binaryData);
- ConfigMap ``nvj-<name>-build-ctx`` + batch/v1 Job ``nvj-<name>-build``: the
  image build (Dockerfile FROM the base image pinned by digest: the runner in
  its own venv, the kernel in another with ipykernel + the requirements
  only), pushed to ``<registry>/env:<content hash>`` and recorded
  digest-pinned as ``<registry>/env@sha256:...``. When that tag is in the
  registry already (same base digest, requirements and runner), its digest is
  recorded and no build runs (reason ``BuildReused``);
- Pod ``nvj-<name>-validate``: the runner, in exactly the image recorded in
  ``status.buildStatus.imageReference`` (or, build disabled, in
  ``podConfig.containerImage`` / ``runner_image``).

Finished children are kept (evidence) until the job is deleted.
"""

from __future__ import annotations

import asyncio
import copy
import re
from typing import Any, Callable

from importlib.metadata import PackageNotFoundError, version as _dist_version

from traitlets import Bool, Dict, Enum, Float, Int, List, Unicode, default

from ..backends.base import FAILED, RUNNING, SUCCEEDED, Backend, InputError, Observation
from ..errors import InputRejected
from ..events import scrub
from ..model import GROUP, PLURAL, VERSION, SpecError, build_enabled, isotime, parse_duration, parse_time, \
    spec_fields, utcnow
from ..store.base import StoreError
from ..tasks import wait_within
from . import objects as obj
from . import results as res
from .builders import Builder, BuildInputs, strip_tag
from .builders.discovery import discover
from .builders.job import JobBuilder
from .builders.openshift import OpenShiftBuilder
from .builders.tekton import TektonBuilder
from .client import CONFIGMAPS, JOBS, PODS, KubeApiError, Resource, default_namespace
from .informer import Informer
from .leader import LeaseElector, new_identity
from .registry import RegistryClient, RegistryError, parse_reference
from .store import CREATED_ANNOTATION, KubernetesJobStore

CRD_NAME = f"{PLURAL}.{GROUP}"
STRATEGIES = ("auto", "job", "kaniko", "tekton", "openshift")
BUILDERS = {"job": JobBuilder, "tekton": TektonBuilder, "openshift": OpenShiftBuilder}
IMAGE_ANNOTATION = f"{GROUP}/image"  # on the build Job: the repository:tag it pushes
POD_GRACE_SECONDS = 30  # the runner's own --timeout reports before the pod deadline kills it
SNAPSHOT_GRACE_SECONDS = 60  # a job younger than this may still be getting its snapshot
BASE_DIGEST_TTL = 60.0  # seconds a resolved base-image digest is used before asking again
ENV_REPOSITORY = "env"  # built images: <registry>/env:<content hash>
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]")  # CSI sequences, then other escapes


def strip_ansi(text: str) -> str:
    """Builder output without terminal colour codes (kaniko colours its log)."""
    return _ANSI.sub("", text)


def _pinned_versions(*dists: str) -> list[str]:
    """``dist==<the version installed here>`` (the runner venv gets what the server runs with)."""
    out = []
    for d in dists:
        try:
            out.append(f"{d}=={_dist_version(d)}")
        except PackageNotFoundError:  # pragma: no cover - both are dependencies
            out.append(d)
    return out


class _NotOurs(Exception):
    pass


def _print_executed_supported() -> bool:
    """Whether this version's runner has ``--print-executed`` (pods run the
    same version when built from runner_requirements)."""
    try:
        from ..runner import build_parser

        return "--print-executed" in build_parser()._option_string_actions  # type: ignore[attr-defined]
    except Exception:
        return False


class KubernetesBackend(Backend):
    name = "kubernetes"

    namespace = Unicode(help="The one namespace jobs and their children live in (default: the pod's "
                             "namespace when running in a cluster, else 'default').").tag(config=True)
    kubeconfig = Unicode("", help="Kubeconfig file to use (default: $KUBECONFIG or ~/.kube/config; "
                                  "in a pod without either, the in-cluster service account).").tag(config=True)
    context = Unicode("", help="Kubeconfig context (default: the current context).").tag(config=True)
    registry = Unicode("", help="Where built images are pushed, e.g. 'registry.example.com/nbvalidation': "
                                "a job's image is <registry>/<job name>:<content hash>, recorded by digest. "
                                "Required for jobs that build (the default).").tag(config=True)
    registry_secret = Unicode("", help="Name of a kubernetes.io/dockerconfigjson Secret in the namespace with "
                                       "push credentials for `registry`; mounted into the builder only "
                                       "(its content never leaves the cluster).").tag(config=True)
    image_pull_secrets = List(Unicode(), help="Secrets the validation pods pull images with.").tag(config=True)
    default_build_strategy = Enum(["auto", "job", "tekton", "openshift"], default_value="auto",
                                  help="Build strategy of jobs that do not choose one. 'job': a batch/v1 Job "
                                       "running a kaniko executor; 'tekton': a Tekton PipelineRun/TaskRun over "
                                       "a buildah Task; 'openshift': an OpenShift BuildConfig (Docker "
                                       "strategy); 'auto': API discovery decides (Tekton, else OpenShift "
                                       "builds, else 'job'); /health says which and why.").tag(config=True)
    tekton_task = Unicode("buildah", help="Name of the buildah Task the Tekton builds reference (params IMAGE, "
                                          "DOCKERFILE, CONTEXT; workspaces source, dockerconfig; results "
                                          "IMAGE_URL, IMAGE_DIGEST).").tag(config=True)
    tekton_task_resolver = Unicode("", help="Resolver of the Task reference: '' = a Task of that name in the "
                                            "job's namespace; 'cluster' = the cluster resolver, Task in "
                                            "tekton_task_namespace (e.g. openshift-pipelines); another "
                                            "resolver name gets params kind+name.").tag(config=True)
    tekton_task_namespace = Unicode("", help="Namespace of the Task for the cluster resolver (default: the "
                                             "job's namespace).").tag(config=True)
    tekton_run_kind = Enum(["PipelineRun", "TaskRun"], default_value="PipelineRun",
                           help="Which Tekton object a build is: a PipelineRun with an inline one-task "
                                "pipeline, or a single TaskRun.").tag(config=True)
    lease_name = Unicode("nbvalidation-controller", help="Name of the coordination.k8s.io Lease that elects "
                                                          "the one server reconciling the namespace.").tag(config=True)
    lease_duration = Float(15.0, help="Seconds a Lease is valid without renewal: a dead leader is replaced "
                                      "after at most this (+ retry_period).").tag(config=True)
    renew_deadline = Float(10.0, help="Seconds the leader keeps trying to renew before it stops "
                                      "reconciling (< lease_duration).").tag(config=True)
    retry_period = Float(2.0, help="Seconds between attempts to acquire or renew the Lease.").tag(config=True)
    builder_image = Unicode("ghcr.io/osscontainertools/kaniko:v1.27.0",
                            help="A kaniko-compatible executor image (args --dockerfile, --context, "
                                 "--destination, --digest-file). The default is the maintained "
                                 "osscontainertools fork (upstream GoogleContainerTools/kaniko was "
                                 "archived in 2025); pin it by digest or mirror it in production.").tag(config=True)
    base_image = Unicode("python:3.12-slim",
                         help="Default base image of builds (a job's podConfig.buildConfig.baseImage, else its "
                              "podConfig.containerImage, overrides it); it must have python and pip.").tag(config=True)
    runner_requirements = List(Unicode(),
                               help="pip requirements of the runner's own venv in built images "
                                    "(/opt/nbv-runner, created unless the base image has it; default: nbclient "
                                    "and nbformat at the versions this server runs). The runner package itself "
                                    "is copied in from this server, so it always matches it. Never visible "
                                    "to the notebook.").tag(config=True)
    kernel_requirements = List(Unicode(), default_value=["ipykernel"],
                               help="pip requirements of the kernel's venv in built images (/opt/nbv-kernel), "
                                    "installed with the notebook's: nothing else is in it.").tag(config=True)
    builder_args = List(Unicode(), help="Extra arguments of the kaniko executor of 'job' builds, after the "
                                        "project's own, e.g. ['--insecure-pull', '--cache=true', "
                                        "'--cache-repo=registry.example.com/nbvalidation/cache'].").tag(config=True)
    registry_insecure = Bool(False, help="`registry` is a plain-HTTP registry (a test registry): the image-reuse "
                                         "lookups use http:// and the kaniko executor gets --insecure (and "
                                         "--insecure-pull for a base image there).").tag(config=True)
    image_reuse = Bool(True, help="Before building, ask the registry whether the image of the same content "
                                  "(base image digest + Dockerfile + requirements + runner) is there already; "
                                  "if so, record its digest and skip the build (reason BuildReused).").tag(config=True)
    registry_timeout = Float(10.0, help="Seconds a registry lookup (base image digest, reuse check) may take "
                                        "before the build goes ahead without it.").tag(config=True)
    runner_image = Unicode("", help="Image for jobs that disable the build and give no "
                                    "podConfig.containerImage; it must contain jupyter-nbvalidation "
                                    "and ipykernel.").tag(config=True)
    service_account = Unicode("", help="Service account of the build and validation pods (default: the "
                                       "namespace's default). Their API token is never mounted.").tag(config=True)
    run_as_user = Int(1000, help="UID (and GID) the validation pod runs as (runAsNonRoot).").tag(config=True)
    validation_resources = Dict(help="resources (requests/limits) of the validation container.").tag(config=True)
    default_cell_timeout = Int(600, help="Per-cell timeout in seconds unless the job or notebook sets one.").tag(config=True)
    max_notebook_bytes_configmap = Int(2**20 - 8 * 2**10,
                                       help="Largest notebook snapshot (notebook + golden + requirements, keys "
                                            "included) accepted at submit: it is stored in a ConfigMap, which "
                                            "Kubernetes caps at 1 MiB.").tag(config=True)

    @default("namespace")
    def _namespace_default(self) -> str:
        return default_namespace()

    @default("runner_requirements")
    def _runner_requirements_default(self) -> list[str]:
        return _pinned_versions("nbclient", "nbformat")

    def __init__(self, **kw: Any):
        super().__init__(**kw)
        self.store = KubernetesJobStore(namespace=self.namespace, kubeconfig=self.kubeconfig,
                                        context=self.context, parent=self)
        self._notify: Callable[[str], None] = lambda name: None
        self._submitting: dict[str, asyncio.Event] = {}
        self._requirements: dict[str, tuple[list[str], str]] = {}  # by job uid
        self._finished: dict[str, Observation] = {}  # by job uid: a read final validation outcome
        self._print_executed = _print_executed_supported()
        self.NotOurs = _NotOurs
        self.image_annotation = IMAGE_ANNOTATION
        self.builders: dict[str, Builder] = {k: cls(self) for k, cls in BUILDERS.items()}
        self.available_strategies: list[str] | None = None  # from discovery (None: not known yet)
        self.auto_strategy = "job"
        self.auto_reason = "auto: API discovery has not run yet"
        self.identity = new_identity()
        self.elector: LeaseElector | None = None
        self._inputs: dict[str, list[tuple[str, str]]] = {}  # by job uid: the snapshot's input files
        self._build_inputs: dict[str, BuildInputs] = {}  # by job uid
        self._base_digests: dict[str, tuple[float, str | None, str]] = {}  # image -> (when, digest, problem)
        self._reuse_checked: set[str] = set()  # job uids whose own build may run
        self._tag_builder: dict[str, str] = {}  # destination -> uid of the job whose build pushes it
        self._tag_waiters: dict[str, set[str]] = {}  # destination -> names of jobs waiting for that build
        self._registry_client: RegistryClient | None = None

    elects_leader = True

    @property
    def kube(self):
        return self.store.kube

    # -- lifecycle -------------------------------------------------------------
    async def start(self, notify: Callable[[str], None]) -> None:
        self._notify = notify
        await self.store.start()
        await self.discover()
        h = await self.health()
        if not h["usable"]:
            self.log.warning("nbvalidation: the kubernetes backend is not usable yet: %s", h["problem"])

    async def stop(self) -> None:
        self._requirements.clear()
        self._finished.clear()
        self._inputs.clear()
        self._build_inputs.clear()
        self._reuse_checked.clear()
        self._tag_builder.clear()
        self._tag_waiters.clear()
        if self._registry_client is not None:
            await self._registry_client.close()
            self._registry_client = None

    async def discover(self) -> None:
        """API discovery: which strategies the cluster offers, what ``auto``
        means here, and an informer for each offered build kind."""
        try:
            self.auto_strategy, self.auto_reason, self.available_strategies = await discover(
                self.kube, self.tekton_run_kind)
        except (KubeApiError, StoreError) as e:
            self.auto_reason = f"auto: API discovery failed ({e}); using the Job builder until it succeeds"
            self.log.warning("nbvalidation: %s", self.auto_reason)
            return
        for strategy in self.available_strategies:
            builder = self.builders[strategy]
            if builder.watched is not None:
                await self.store.add_informer(strategy, builder.watched.resource, builder.watched.api_version,
                                              builder.watched.kind)

    async def run_election(self, on_started_leading: Callable[[], None],
                           on_stopped_leading: Callable[[], None]) -> None:
        """One active reconciler per namespace (coordination.k8s.io/v1 Lease)."""
        self.elector = LeaseElector(self.kube, self.namespace, self.lease_name, identity=self.identity,
                                    lease_duration=self.lease_duration, renew_deadline=self.renew_deadline,
                                    retry_period=self.retry_period, log=self.log)
        await self.elector.run(on_started_leading, on_stopped_leading)

    # -- spec --------------------------------------------------------------------
    def supported_fields(self) -> set[str]:
        return spec_fields()

    def check_spec(self, spec: dict) -> None:
        pc = spec.get("podConfig") or {}
        bc = pc.get("buildConfig") or {}
        strategy = bc.get("strategy")
        if strategy is not None and strategy not in STRATEGIES:
            raise SpecError("podConfig.buildConfig.strategy", f"must be one of {', '.join(STRATEGIES)}")
        resolved = self._strategy_of(spec)
        if build_enabled(spec) and resolved != "job" and self.available_strategies is not None \
                and resolved not in self.available_strategies:
            raise SpecError("podConfig.buildConfig.strategy",
                            f"{resolved} builds are not available on this cluster (API discovery found: "
                            f"{', '.join(self.available_strategies)})")
        if build_enabled(spec):
            if not self.registry and resolved != "openshift":
                raise SpecError("podConfig.buildConfig.enabled",
                                "image builds need a registry to push to (c.KubernetesBackend.registry is not "
                                "set); set it, or disable the build and give podConfig.containerImage")
            if not obj.valid_repository(f"{self.registry}/x"):
                raise SpecError("podConfig.buildConfig.enabled",
                                f"c.KubernetesBackend.registry {self.registry!r} is not a valid image "
                                "repository prefix (e.g. registry.example.com/nbvalidation)")
        elif not pc.get("containerImage") and not self.runner_image:
            raise SpecError("podConfig.containerImage",
                            "is required when the build is disabled (no c.KubernetesBackend.runner_image "
                            "is configured)")

    def _strategy_of(self, spec: dict) -> str:
        s = ((spec.get("podConfig") or {}).get("buildConfig") or {}).get("strategy") or "auto"
        if s == "kaniko":
            return "job"
        if s == "auto":
            s = self.default_build_strategy
        if s == "auto":
            s = self.auto_strategy
        return s

    def build_strategy(self, job: dict) -> str:
        """The strategy a job builds with: the one recorded when its build
        started (a later discovery never switches a running build)."""
        recorded = ((job.get("status") or {}).get("buildStatus") or {}).get("strategy")
        return recorded if recorded in BUILDERS else self._strategy_of(job["spec"])

    def build_strategy_reason(self, job: dict) -> str:
        s = ((job["spec"].get("podConfig") or {}).get("buildConfig") or {}).get("strategy") or "auto"
        if s != "auto":
            return f"requested by the job (podConfig.buildConfig.strategy={s})"
        if self.default_build_strategy != "auto":
            return f"configured (c.KubernetesBackend.default_build_strategy={self.default_build_strategy})"
        return self.auto_reason

    # -- helpers -------------------------------------------------------------------
    def _ns(self, job: dict) -> str:
        return job["metadata"].get("namespace") or self.namespace

    async def _read(self, resource: Resource, informer: Informer | None, ns: str, name: str) -> dict | None:
        """A child from the informer cache when it is usable (absent there:
        None, and a create that finds it is a 409 that adopts it), else from
        the API."""
        if informer is not None and informer.usable:
            return informer.get(name)
        try:
            found = await self.kube.request("GET", resource.path(ns, name))
        except KubeApiError as e:
            if e.status == 404:
                return None
            raise StoreError(f"reading {resource.plural}/{name}: {e.reason}: {e.message}") from None
        if informer is not None:
            informer.put(found)
        return found

    async def _create(self, resource: Resource, body: dict, job: dict, informer: Informer | None = None) -> dict:
        """Create a child; "already exists" is fine when it is ours (adopt it)."""
        ns = body["metadata"]["namespace"]
        name = body["metadata"]["name"]
        try:
            created = await self.kube.request("POST", resource.path(ns), body=body)
        except KubeApiError as e:
            if e.status != 409:
                raise StoreError(f"creating {resource.plural}/{name}: {e.reason}: {e.message}") from None
            created = await self._read(resource, None, ns, name)
            if created is None:  # deleted in between: the next reconcile creates it again
                raise StoreError(f"{resource.plural}/{name} exists and vanished; retrying") from None
            if not obj.owned_by(created, job):
                raise _NotOurs(f"{resource.plural}/{name} already exists in namespace {ns} and does not "
                               "belong to this job") from None
        if informer is not None:
            informer.put(created)
        return created

    async def _delete(self, resource: Resource, ns: str, name: str, informer: Informer | None = None) -> None:
        try:
            await self.kube.request("DELETE", resource.path(ns, name),
                                    body={"apiVersion": "v1", "kind": "DeleteOptions",
                                          "propagationPolicy": "Background"})
        except KubeApiError as e:
            if e.status != 404:
                raise StoreError(f"deleting {resource.plural}/{name}: {e.reason}: {e.message}") from None
        if informer is not None:
            informer.forget(name)

    # -- submit / prepare -------------------------------------------------------------
    async def submit(self, job: dict, files: dict[str, bytes]) -> dict:
        try:
            data, binary, index = obj.split_snapshot(files)
        except ValueError as e:
            field = "spec.inputFiles" if str(e).startswith(obj.INPUTS_PREFIX) else "spec.notebook.path"
            raise InputRejected(str(e), field) from None
        size = obj.configmap_size(data, binary)
        limit = self.max_notebook_bytes_configmap
        if size > limit:
            named = [k for k in sorted(files) if not k.startswith(obj.INPUTS_PREFIX)]
            what = " + ".join(named) + (f" + {len(index)} input file(s)" if index else "")
            field = "spec.inputFiles" if index else "spec.notebook.path"
            raise InputRejected(f"{field}: the notebook snapshot ({what}) is {size} bytes; the kubernetes backend "
                                f"stores it in one ConfigMap, limited here to {limit} bytes "
                                "(c.KubernetesBackend.max_notebook_bytes_configmap; Kubernetes caps ConfigMaps at "
                                "1 MiB)", field, status=413, code="TooLarge")
        job = copy.deepcopy(job)
        meta = job["metadata"]
        name = meta["name"]
        meta["namespace"] = self.namespace
        annotations = meta.setdefault("annotations", {})
        annotations[obj.INPUT_ANNOTATION] = obj.input_configmap_name(name)
        annotations[CREATED_ANNOTATION] = isotime()
        done = self._submitting[name] = asyncio.Event()
        try:
            created = await self.store.create(job)
            try:
                await self.kube.request("POST", CONFIGMAPS.path(self.namespace),
                                        body=obj.input_configmap(created, files))
            except KubeApiError as e:
                try:  # nothing half-created
                    await self.store.delete(name)
                except StoreError as de:
                    self.log.warning("nbvalidation: could not roll back job %s: %s", name, de)
                raise StoreError(f"storing the notebook snapshot of {name} failed: {e.reason}: {e.message}") from None
            return created
        finally:
            done.set()
            self._submitting.pop(name, None)

    async def _input(self, job: dict) -> dict:
        name = job["metadata"]["name"]
        pending = self._submitting.get(name)
        if pending is not None:  # this process is still storing the snapshot
            await wait_within(pending.wait(), 30)
        cm_name = (job["metadata"].get("annotations") or {}).get(obj.INPUT_ANNOTATION) or obj.input_configmap_name(name)
        cm = await self._read(CONFIGMAPS, None, self._ns(job), cm_name)
        if cm is None:
            created = parse_time(job["metadata"].get("creationTimestamp")) or utcnow()
            if (utcnow() - created).total_seconds() < SNAPSHOT_GRACE_SECONDS:
                # another server may be between creating the job and its snapshot
                raise StoreError(f"the notebook snapshot of {name} is not stored yet")
            raise InputError(f"The notebook snapshot of this job (ConfigMap {cm_name}) is missing.")
        data = cm.get("data") or {}
        self._inputs[job["metadata"]["uid"]] = obj.inputs_index(data)
        return data

    def _requirements_from(self, job: dict, data: dict) -> tuple[list[str], str]:
        """The requirement lines of the snapshot checked at submit
        (requirements.py; this backend refuses local paths and credentials
        there, so the display lines are the build lines)."""
        from ..requirements import of_job

        reqs = of_job(job, data.get("requirements.txt"), data.get("constraints.txt"))
        if reqs.constraints:
            raise InputError("Constraints files (-c) are not supported by the kubernetes backend yet.",
                             field="spec.podConfig.buildConfig.requirementsFile")
        return list(reqs.display_lines), reqs.origin

    async def prepare(self, job: dict) -> str:
        data = await self._input(job)
        if "notebook.ipynb" not in data:
            raise InputError("The notebook snapshot of this job has no notebook.ipynb.", field="spec.notebook.path")
        if job["spec"].get("goldenNotebook") and "golden.ipynb" not in data:
            raise InputError("The snapshot has no golden notebook.", field="spec.goldenNotebook.path")
        reqs, origin = self._requirements_from(job, data)
        self._requirements[job["metadata"]["uid"]] = (reqs, origin)
        if not build_enabled(job["spec"]):
            return f"{len(reqs)} requirement(s) from {origin}; build disabled."
        return f"{len(reqs)} requirement(s) from {origin}; image build on {self._base_image(job)}."

    # -- build ---------------------------------------------------------------------------
    def _base_image(self, job: dict) -> str:
        pc = job["spec"].get("podConfig") or {}
        return (pc.get("buildConfig") or {}).get("baseImage") or pc.get("containerImage") or self.base_image

    def _build_timeout(self, job: dict) -> float:
        bc = (job["spec"].get("podConfig") or {}).get("buildConfig") or {}
        if bc.get("timeout"):
            return parse_duration(bc["timeout"])
        return float(getattr(self.parent, "build_timeout", 15 * 60))

    def _validation_timeout(self, job: dict) -> float:
        if job["spec"].get("timeout"):
            return parse_duration(job["spec"]["timeout"])
        return float(getattr(self.parent, "validation_timeout", 30 * 60))

    def _plain_http_hosts(self) -> set[str]:
        hosts = set()
        if self.registry_insecure or "--insecure" in self.builder_args:
            hosts.add(parse_reference(f"{self.registry}/x").api_host)
        return hosts

    @property
    def registry_client(self) -> RegistryClient:
        if self._registry_client is None:
            self._registry_client = RegistryClient(plain_http_hosts=self._plain_http_hosts(),
                                                   timeout=self.registry_timeout)
        return self._registry_client

    def kaniko_args(self) -> list[str]:
        """The executor's extra arguments: --insecure(-pull) for a plain-HTTP
        registry, then ``builder_args``."""
        args = []
        if self.registry_insecure:
            args += ["--insecure", "--insecure-pull"]
        return args + [a for a in self.builder_args if a not in args]

    async def base_digest(self, image: str) -> tuple[str | None, str]:
        """(digest of the base image, problem): the reference's own digest, or
        what its registry serves for the tag now (cached for a minute)."""
        ref = parse_reference(image)
        if ref.digest:
            return ref.digest, ""
        now = asyncio.get_running_loop().time()
        cached = self._base_digests.get(image)
        if cached is not None and now - cached[0] < BASE_DIGEST_TTL:
            return cached[1], cached[2]
        problem = ""
        try:
            digest = await self.registry_client.digest(image)
            if digest is None:
                problem = f"the base image {image} is not in its registry"
        except RegistryError as e:
            digest, problem = None, f"the base image's digest could not be read ({e})"
        self._base_digests[image] = (now, digest, problem)
        return digest, problem

    async def build_inputs(self, job: dict) -> BuildInputs:
        """What the build of ``job`` builds: the Dockerfile (FROM the base image
        by digest when it resolves), the context files, the destination tag
        (a hash of all of it) and whether that tag may be reused."""
        uid = job["metadata"]["uid"]
        if uid in self._build_inputs:
            return self._build_inputs[uid]
        if uid not in self._requirements:
            await self.prepare(job)
        reqs, _ = self._requirements[uid]
        base = self._base_image(job)
        digest, problem = await self.base_digest(base)
        from_ = f"{strip_tag(base)}@{digest}" if digest else base
        docker_file = obj.dockerfile(from_)
        reqs_txt = obj.build_requirements(list(self.kernel_requirements), reqs)
        context = obj.build_context(docker_file, reqs_txt, obj.runner_requirements_txt(list(self.runner_requirements)))
        files = [context[k] for k in sorted(context) if k != obj.RUNNER_TAR]
        runner = [f"{p}\0".encode() + v for p, v in sorted(obj.runner_files().items())]
        content = obj.content_hash(*files, *runner, length=32)
        # an unresolved base (a tag that may move) is never reused
        tag = content if digest else f"u{content[:31]}"
        destination = f"{self.registry}/{ENV_REPOSITORY}:{tag}" if self.registry else ""
        inputs = BuildInputs(dockerfile=docker_file, requirements_txt=reqs_txt, destination=destination,
                             base_image=from_, content_hash=tag, timeout_seconds=int(self._build_timeout(job)),
                             context=context, reusable=bool(digest and destination and self.image_reuse),
                             note=problem)
        self._build_inputs[uid] = inputs
        return inputs

    async def build_objects(self, job: dict) -> tuple[dict, dict]:
        """The build-context ConfigMap and the build Job of ``job``."""
        inputs = await self.build_inputs(job)
        ctx = obj.build_context_configmap(job, inputs.context)
        bj = obj.build_job(job, builder_image=self.builder_image, destination=inputs.destination,
                           deadline_seconds=inputs.timeout_seconds, service_account=self.service_account,
                           registry_secret=self.registry_secret, extra_args=self.kaniko_args())
        bj["metadata"].setdefault("annotations", {})[IMAGE_ANNOTATION] = inputs.destination
        return ctx, bj

    async def _create_context(self, job: dict, inputs: BuildInputs) -> None:
        await self._create(CONFIGMAPS, obj.build_context_configmap(job, inputs.context), job)

    # -- image reuse ---------------------------------------------------------------------
    async def _reused(self, job: dict, inputs: BuildInputs) -> Observation | None:
        """The image of the same content, when the registry has it already."""
        try:
            digest = await self.registry_client.digest(inputs.destination)
        except RegistryError as e:
            self.log.info("nbvalidation: reuse check for %s failed (building): %s", inputs.destination, e)
            return None
        if digest is None:
            return None
        repository = inputs.destination.rsplit(":", 1)[0]
        now = isotime()
        return Observation(SUCCEEDED, reference=f"{repository}@{digest}", strategy=self.build_strategy(job),
                           started_at=now, finished_at=now, extra={"reused": True},
                           message=f"Reused {inputs.destination} from the registry (same base image digest, "
                                   "requirements and runner); no build ran.")

    def _release_tag(self, uid: str) -> None:
        """The build of ``uid`` is over: the jobs waiting for the same image look again."""
        for dest, owner in list(self._tag_builder.items()):
            if owner == uid:
                del self._tag_builder[dest]
                for name in self._tag_waiters.pop(dest, set()):
                    self._notify(name)

    async def ensure_build(self, job: dict) -> Observation:
        uid, name = job["metadata"]["uid"], job["metadata"]["name"]
        strategy = self.build_strategy(job)
        if uid not in self._reuse_checked and (strategy != "job" or await self._read(
                JOBS, self.store.build_jobs, self._ns(job), obj.build_job_name(name)) is None):
            inputs = await self.build_inputs(job)
            if inputs.reusable:
                reused = await self._reused(job, inputs)
                if reused is not None:
                    return reused
                owner = self._tag_builder.get(inputs.destination)
                if owner is not None and owner != uid:
                    # one build per image: wait for the one running, then reuse what it pushed
                    self._tag_waiters.setdefault(inputs.destination, set()).add(name)
                    return Observation(RUNNING, strategy=strategy,
                                       message=f"Waiting for the build of the same image ({inputs.destination}).")
                self._tag_builder[inputs.destination] = uid
        self._reuse_checked.add(uid)
        obs = await self.builders[strategy].ensure(job)
        if obs.state != RUNNING:
            self._release_tag(uid)
        return obs

    async def cancel_build(self, job: dict) -> None:
        await self.builders[self.build_strategy(job)].cancel(job)
        self._release_tag(job["metadata"]["uid"])

    async def build_log(self, job: dict) -> str | None:
        return await self.builders[self.build_strategy(job)].log(job)

    async def _job_ensure_build(self, job: dict) -> Observation:
        ns, name = self._ns(job), job["metadata"]["name"]
        bj_name = obj.build_job_name(name)
        try:
            bj = await self._read(JOBS, self.store.build_jobs, ns, bj_name)
            if bj is None:
                ctx, body = await self.build_objects(job)
                await self._create(CONFIGMAPS, ctx, job)
                bj = await self._create(JOBS, body, job, self.store.build_jobs)
            elif not obj.owned_by(bj, job):
                raise _NotOurs(f"jobs/{bj_name} already exists in namespace {ns} and does not belong to this job")
        except _NotOurs as e:
            return Observation(FAILED, message=str(e), finished_at=isotime(), strategy="job")
        return await self._build_observation(job, bj)

    async def _build_observation(self, job: dict, bj: dict) -> Observation:
        st = bj.get("status") or {}
        true = {c.get("type"): c for c in st.get("conditions") or [] if c.get("status") == "True"}
        destination = (bj["metadata"].get("annotations") or {}).get(IMAGE_ANNOTATION, "")
        repository = destination.rsplit(":", 1)[0] if ":" in destination.rsplit("/", 1)[-1] else destination
        started = st.get("startTime")
        if "Complete" in true:
            digest = await self._build_digest(bj)
            if digest is None:
                return Observation(FAILED, strategy="job", started_at=started, finished_at=st.get("completionTime"),
                                   message=f"build job {bj['metadata']['name']} completed but its pod reported no "
                                           "image digest (expected sha256:... as the termination message)")
            return Observation(SUCCEEDED, reference=f"{repository}@{digest}", strategy="job", started_at=started,
                               finished_at=st.get("completionTime") or true["Complete"].get("lastTransitionTime"),
                               message=f"Pushed {destination}.")
        if "Failed" in true:
            cond = true["Failed"]
            detail = await self._build_failure_detail(bj)
            message = f"{cond.get('reason') or 'Failed'}: {cond.get('message') or 'the build job failed'}"
            if detail:
                message += f". Builder output: {detail}"
            return Observation(FAILED, strategy="job", started_at=started,
                               finished_at=cond.get("lastTransitionTime"), message=scrub(message))
        return Observation(RUNNING, strategy="job", started_at=started,
                           message=f"Building {destination} (job {bj['metadata']['name']}).")

    async def _builder_pods(self, bj: dict) -> list[dict]:
        uid = bj["metadata"].get("uid")
        pods = self.store.pods
        found = []
        if pods is not None and pods.usable:
            found = [p for p in pods.cache.values()
                     if any(r.get("uid") == uid for r in (p["metadata"].get("ownerReferences") or []))]
        if found:
            return found
        try:
            page = await self.kube.request("GET", PODS.path(bj["metadata"]["namespace"]), query={
                "labelSelector": f"batch.kubernetes.io/job-name={bj['metadata']['name']}"})
        except KubeApiError as e:
            self.log.warning("nbvalidation: listing the pods of %s failed: %s", bj["metadata"]["name"], e)
            return []
        return [p for p in page.get("items") or []
                if any(r.get("uid") == uid for r in (p["metadata"].get("ownerReferences") or []))]

    async def _build_digest(self, bj: dict) -> str | None:
        for pod in await self._builder_pods(bj):
            digest = res.digest_of(pod, obj.BUILD_CONTAINER)
            if digest:
                return digest
        return None

    async def _build_failure_detail(self, bj: dict) -> str:
        for pod in await self._builder_pods(bj):
            term = res.terminated(pod, obj.BUILD_CONTAINER) or {}
            if term.get("exitCode") not in (None, 0):
                text = " ".join(strip_ansi(term.get("message") or "").split())
                return f"exit code {term['exitCode']} ({term.get('reason') or 'Error'})" + (
                    f": {text[-600:]}" if text else "")
            waiting = res.fatal_waiting(pod, obj.BUILD_CONTAINER)
            if waiting:
                return strip_ansi(f"{waiting[0]}: {waiting[1]}")[:600]
        return ""

    async def _job_cancel_build(self, job: dict) -> None:
        await self._delete(JOBS, self._ns(job), obj.build_job_name(job["metadata"]["name"]), self.store.build_jobs)

    # -- validation ------------------------------------------------------------------------
    def validation_pod(self, job: dict, image: str) -> dict:
        spec = job["spec"]
        cell_timeout = parse_duration(spec["cellTimeout"]) if spec.get("cellTimeout") else self.default_cell_timeout
        timeout = self._validation_timeout(job)
        command = obj.runner_command(job, cell_timeout=cell_timeout, timeout=timeout,
                                     print_executed=self._print_executed, built=build_enabled(spec))
        return obj.validation_pod(job, image=image, command=command,
                                  deadline_seconds=int(timeout) + POD_GRACE_SECONDS, run_as_user=self.run_as_user,
                                  service_account=self.service_account, resources=dict(self.validation_resources),
                                  image_pull_secrets=list(self.image_pull_secrets),
                                  inputs=self._inputs.get(job["metadata"]["uid"]))

    def _image(self, job: dict, reference: str | None) -> str:
        if build_enabled(job["spec"]):
            if not reference:  # the engine never calls without one; never fall back
                raise InputError("No built image is recorded for this job.")
            return reference
        return (job["spec"].get("podConfig") or {}).get("containerImage") or self.runner_image

    async def ensure_validation(self, job: dict, reference: str | None) -> Observation:
        ns, name, uid = self._ns(job), job["metadata"]["name"], job["metadata"]["uid"]
        if uid in self._finished:
            return self._finished[uid]
        image = self._image(job, reference)
        pod_name = obj.validation_pod_name(name)
        try:
            pod = await self._read(PODS, self.store.pods, ns, pod_name)
            if pod is None:
                if uid not in self._inputs:
                    await self._input(job)
                pod = await self._create(PODS, self.validation_pod(job, image), job, self.store.pods)
            elif not obj.owned_by(pod, job):
                raise _NotOurs(f"pods/{pod_name} already exists in namespace {ns} and does not belong to this job")
        except _NotOurs as e:
            return Observation(FAILED, message=str(e), finished_at=isotime(), reference=image,
                               result=res.failure_result("PodConflict", str(e)))
        running = [c.get("image") for c in pod["spec"].get("containers") or [] if c.get("name") == obj.RUNNER_CONTAINER]
        if running != [image]:
            message = (f"The validation pod {pod_name} runs {running[0] if running else 'no runner'}, not the "
                       f"environment recorded for this job ({image}); refusing its result.")
            return Observation(FAILED, message=message, finished_at=isotime(), reference=image,
                               result=res.failure_result("ImageMismatch", message))
        outcome = res.pod_outcome(pod, obj.RUNNER_CONTAINER)
        if not outcome.finished:
            return Observation(RUNNING, message=f"Validating in pod {pod_name}.", reference=image,
                               started_at=outcome.started_at)
        result = await self._result(pod, outcome)
        ok = outcome.exit_code == 0 and result.get("verdict") == "Succeeded"
        observation = Observation(SUCCEEDED if ok else FAILED, message=result.get("message") or "",
                                  result=result, reference=image, started_at=outcome.started_at,
                                  finished_at=outcome.finished_at or isotime())
        self._finished[uid] = observation
        return observation

    async def _result(self, pod: dict, outcome: res.PodOutcome) -> dict:
        """The runner's verdict: the full result from the log when readable,
        else the termination-message summary; infrastructure failures name
        their reason. Never a success without a readable result."""
        code = outcome.exit_code
        if outcome.reason == "OOMKilled" and code != 0:
            # the kernel (the biggest process) was killed for memory; the runner then
            # reports a dead kernel, but the cause is the container's memory limit
            return res.failure_result("OOMKilled", "The validation container ran out of memory (OOMKilled)"
                                                   + (f", exit code {code}: the memory limit was exceeded."
                                                      if code is not None else ": the memory limit was exceeded."))
        if code in (0, 1, 2):
            full = None
            log = await self._log(pod, obj.RUNNER_CONTAINER)
            if log is not None:
                full, _ = res.parse_log(log)
            if full is not None and (full.get("verdict") == "Succeeded") == (code == 0):
                return full
            if outcome.summary is not None and (outcome.summary.get("verdict") == "Succeeded") == (code == 0):
                return res.result_from_summary(outcome.summary)
            if code == 0:
                return res.failure_result("NoResult", "The runner exited 0 but its result could not be read "
                                                      "(no termination message, no readable log).")
            return res.failure_result("RunnerError" if code == 2 else "ValidationFailed",
                                      f"The runner exited with {code} without a readable result"
                                      + (f": {outcome.message[:500]}" if outcome.message else "."))
        if code is not None:
            return res.failure_result(outcome.reason or "ContainerFailed",
                                      f"The validation container exited with code {code}"
                                      + (f" ({outcome.reason})" if outcome.reason else "") + ".")
        return res.failure_result(outcome.reason or "PodFailed",
                                  f"The validation pod failed: {outcome.reason}"
                                  + (f": {outcome.message}" if outcome.message else ""))

    async def _log(self, pod: dict, container: str) -> str | None:
        try:
            return await self.kube.text(PODS.path(pod["metadata"]["namespace"], pod["metadata"]["name"], "log"),
                                        query={"container": container}, timeout=15)
        except KubeApiError as e:
            self.log.debug("nbvalidation: no log for pod %s: %s", pod["metadata"]["name"], e)
            return None

    async def cancel_validation(self, job: dict) -> None:
        await self._delete(PODS, self._ns(job), obj.validation_pod_name(job["metadata"]["name"]), self.store.pods)

    async def cleanup(self, job: dict) -> None:
        # nothing destructive: owner references let the garbage collector remove
        # the children with the job; until then they are the evidence
        uid = job["metadata"].get("uid")
        self._requirements.pop(uid, None)
        self._finished.pop(uid, None)
        self._inputs.pop(uid, None)
        self._build_inputs.pop(uid, None)
        self._reuse_checked.discard(uid)
        self._release_tag(uid)

    # -- artefacts ---------------------------------------------------------------------------
    async def executed_notebook(self, job: dict) -> dict | None:
        pod = await self._read(PODS, self.store.pods, self._ns(job), obj.validation_pod_name(job["metadata"]["name"]))
        if pod is None or not obj.owned_by(pod, job):
            return None
        log = await self._log(pod, obj.RUNNER_CONTAINER)
        if log is None:
            return None
        _, payload = res.parse_log(log)
        return res.decode_executed(payload) if payload else None

    async def _job_build_log(self, job: dict) -> str | None:
        bj = await self._read(JOBS, self.store.build_jobs, self._ns(job), obj.build_job_name(job["metadata"]["name"]))
        if bj is None or not obj.owned_by(bj, job):
            return None
        for pod in await self._builder_pods(bj):
            log = await self._log(pod, obj.BUILD_CONTAINER)
            if log is not None:
                return log
        return None

    # -- health ------------------------------------------------------------------------------
    async def _crd_state(self) -> tuple[bool, str | None]:
        """(installed and Established, problem)."""
        try:
            crd = await self.kube.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}",
                                          timeout=10)
            established = any(c.get("type") == "Established" and c.get("status") == "True"
                              for c in (crd.get("status") or {}).get("conditions") or [])
            return established, None if established else f"the CRD {CRD_NAME} is not Established yet"
        except KubeApiError as e:
            if e.status == 404:
                return False, f"the CRD {CRD_NAME} is not installed (run: jupyter nbvalidation install)"
            if e.status not in (401, 403):
                return False, f"the API server is not usable: {e}"
        # the server's Role cannot read CRDs: discovery serves a CRD's group once it is Established
        try:
            disc = await self.kube.request("GET", f"/apis/{GROUP}/{VERSION}", timeout=10)
        except KubeApiError as e:
            if e.status == 404:
                return False, f"the CRD {CRD_NAME} is not installed (run: jupyter nbvalidation install)"
            return False, f"the API server is not usable: {e}"
        if any(r.get("name") == PLURAL for r in disc.get("resources") or []):
            return True, None
        return False, f"the CRD {CRD_NAME} is not served"

    async def health(self) -> dict[str, Any]:
        out: dict[str, Any] = {"backend": self.name, "namespace": self.namespace, "usable": False, "problem": None,
                               "buildStrategies": list(self.available_strategies or ["job"]),
                               "defaultBuildStrategy": self._strategy_of({}),
                               "buildStrategyReason": self.build_strategy_reason({"spec": {}}),
                               "registry": self.registry or None, "builderImage": self.builder_image,
                               "baseImage": self.base_image, "runnerImage": self.runner_image or None}
        try:
            kube = self.kube
        except StoreError as e:
            out["problem"] = str(e)
            return out
        out["server"] = kube.host
        out["leader"] = self.elector.state() if self.elector is not None else {"identity": self.identity,
                                                                             "isLeader": False, "holder": None}
        out["api"] = self.store.outage()
        if self.available_strategies is None and out["api"]["apiReachable"]:
            await self.discover()
            out["buildStrategies"] = list(self.available_strategies or ["job"])
            out["defaultBuildStrategy"] = self._strategy_of({})
            out["buildStrategyReason"] = self.build_strategy_reason({"spec": {}})
        established, problem = await self._crd_state()
        out["crdEstablished"] = established
        out["cacheSynced"] = self.store.synced
        if problem is None and not self.store.synced:
            errors = [i.last_error for i in (self.store.jobs, self.store.build_jobs, self.store.pods)
                      if i is not None and i.last_error]
            problem = "watching the namespace failed: " + (errors[0] if errors else "not synced yet")
        if not out["api"]["apiReachable"]:
            problem = (f"the API server is unreachable since {out['api']['since']} ({out['api']['lastError']}); "
                       "serving the last known state, reconciling resumes when it is back")
        out["usable"] = problem is None
        out["problem"] = problem
        if problem is None and not self.registry:
            out["warning"] = "no registry is configured (c.KubernetesBackend.registry): jobs that build are refused"
        return out

