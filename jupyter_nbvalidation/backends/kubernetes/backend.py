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
  ``podConfig.containerImage`` / ``runner_image``); after a transient fault
  (the Pod deleted, evicted, preempted, its node lost; its image not pulled
  within ``image_pull_deadline``) the engine retries in a fresh Pod
  ``nvj-<name>-validate-r<n>`` (``status.validationRetries``; executor.py).

Finished children are kept (evidence) until the job is deleted.
"""

from __future__ import annotations

import dataclasses
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _dist_version
from typing import Any, Callable, Mapping, cast

from traitlets import All, Bool, Dict, Enum, Float, Int, List, Unicode, default, observe

import jupyter_nbvalidation.backends.kubernetes.folders as folders
import jupyter_nbvalidation.backends.kubernetes.objects as obj
import jupyter_nbvalidation.backends.kubernetes.records as records
import jupyter_nbvalidation.backends.kubernetes.secrets as secrets_of
import jupyter_nbvalidation.environment.local_sources as local_sources
from jupyter_nbvalidation.backends.base import RUNNING, Backend, Capabilities, Observation, lease_traits
from jupyter_nbvalidation.backends.kubernetes.builders import (
    BUILDERS,
    Builder,
    BuildInputs,
    BuildSettings,
    BuildSite,
    builders_for,
)
from jupyter_nbvalidation.backends.kubernetes.builders.discovery import discover
from jupyter_nbvalidation.backends.kubernetes.children import IMAGE_ANNOTATION, Children
from jupyter_nbvalidation.backends.kubernetes.client import Kube, KubeApiError, default_namespace
from jupyter_nbvalidation.backends.kubernetes.executor import PodSettings, ValidationExecutor
from jupyter_nbvalidation.backends.kubernetes.health import CRD_NAME, crd_state, network_policy_state
from jupyter_nbvalidation.backends.kubernetes.images import Images, ImageSettings
from jupyter_nbvalidation.backends.kubernetes.leader import LeaseElector, new_identity
from jupyter_nbvalidation.backends.kubernetes.snapshot import Snapshots
from jupyter_nbvalidation.backends.kubernetes.spec import check_spec as spec_check
from jupyter_nbvalidation.backends.kubernetes.store import KubernetesJobStore
from jupyter_nbvalidation.core.documents import Job, JobSpec
from jupyter_nbvalidation.core.errors import InputRejected
from jupyter_nbvalidation.core.model import ROOT_ANNOTATION, WORKDIR_ANNOTATION
from jupyter_nbvalidation.environment.requirements import INTERPRETER_JSON, SYSTEM_PACKAGES_TXT, Requirements
from jupyter_nbvalidation.secrets.registry import Caller, SecretNotAvailable
from jupyter_nbvalidation.spec.checks import SpecError, spec_fields
from jupyter_nbvalidation.spec.plan import Snapshot, ValidationPlan
from jupyter_nbvalidation.store.base import OWNER_LABEL, StoreError

__all__ = ["CRD_NAME", "IMAGE_ANNOTATION", "KubernetesBackend"]

def _pinned_versions(*dists: str) -> list[str]:
    """``dist==<the version installed here>`` (the runner venv gets what the server runs with)."""
    out = []
    for d in dists:
        try:
            out.append(f"{d}=={_dist_version(d)}")
        except PackageNotFoundError:  # pragma: no cover - both are dependencies
            out.append(d)
    return out


#: spec fields the local backend takes and this one not yet
NOT_YET_ON_KUBERNETES: dict[str, str] = {}

class KubernetesBackend(Backend):
    name = "kubernetes"
    # the kernel runs in a Pod, where the server's files are not: the notebook's folder travels
    capabilities = Capabilities(folder_in_snapshot=True, local_requirement_paths=True, local_paths_travel=True,
                                system_packages=True, environment_records=True, constraint_files=True)
    store: KubernetesJobStore  # made in __init__

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
    lease_duration, renew_deadline, retry_period = lease_traits(15.0, 10.0, 2.0, "the namespace's Lease")
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
    registry_timeout = Float(10.0, help="Seconds a registry lookup (base image digest, reuse check) may take. "
                                        "A reuse lookup without an answer (or refused, 5xx, 429) is a transient "
                                        "fault: the build is retried (BuildRetried), never silently built in "
                                        "full; a 404 builds.").tag(config=True)
    runner_image = Unicode("", help="Image for jobs that disable the build and give no "
                                    "podConfig.containerImage; it must contain jupyter-nbvalidation "
                                    "and ipykernel.").tag(config=True)
    service_account = Unicode("", help="Service account of the build and validation pods (default: the "
                                       "namespace's default). Their API token is never mounted.").tag(config=True)
    allowed_service_accounts = List(Unicode(), help="Service accounts of the namespace a job may name in "
                                                    "podConfig.serviceAccountName (its validation Pod runs as it, "
                                                    "with its API token mounted: the rights the admin gave it). "
                                                    "Default: none, and a job naming one is refused, naming the "
                                                    "field.").tag(config=True)
    run_as_user = Int(1000, help="UID (and GID) the validation pod runs as (runAsNonRoot).").tag(config=True)
    progress_interval = Float(1.0, help="Seconds between reads of a running validation Pod's log for its "
                                         "runner's progress records (status.progress; the engine writes it "
                                         "at most once a second); 0 = no progress on this backend.").tag(config=True)
    image_pull_deadline = Float(300.0, help="Seconds a validation Pod may wait on an image pull that fails "
                                            "(ErrImagePull / ImagePullBackOff: the kubelet retries, e.g. after "
                                            "'pull QPS exceeded' or a registry away for a moment), from the first "
                                            "time it was seen waiting; then the attempt is a transient fault and "
                                            "is retried in a fresh Pod (ValidationRetried). An image that does "
                                            "not exist fails at once (InfrastructureFailed).").tag(config=True)
    validation_resources = Dict(help="resources (requests/limits) of the validation container.").tag(config=True)
    max_notebook_bytes_configmap = Int(2**20 - 8 * 2**10,
                                       help="Largest notebook snapshot (notebook + golden + requirements + the "
                                            "input files: spec.inputFiles, else the notebook's folder; keys "
                                            "included) accepted at submit: it is stored in a ConfigMap, which "
                                            "Kubernetes caps at 1 MiB.").tag(config=True)
    max_folder_files = Int(20000, help="Most files of a notebook's folder (jobs without spec.inputFiles: the "
                                       "folder and below travel with the job, as the local backend copies "
                                       "them, in its input ConfigMap, so their bytes are bounded by "
                                       "max_notebook_bytes_configmap); a larger folder is refused at submit "
                                       "(name the files the notebook reads in spec.inputFiles).").tag(config=True)

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
        self.children = Children(self.store, self.namespace, self.log)
        self.snapshots = Snapshots(self.children, self.store, self.namespace, self.log)
        self.images = Images(self._image_settings(), base_image=self._base_image,
                             notify=lambda name: self._notify(name), log=self.log)
        self.build_site = BuildSite(children=self.children, settings=self._build_settings(),
                                    inputs=self.images.inputs, log=self.log)
        self.builders: dict[str, Builder] = builders_for(self.build_site)
        self.executor = ValidationExecutor(self.children, self._pod_settings(), log=self.log,
                                           secret_of=lambda name: self.secrets.kubernetes_secret(name))
        self.available_strategies: list[str] | None = None  # from discovery (None: not known yet)
        self.auto_strategy = "job"
        self.auto_reason = "auto: API discovery has not run yet"
        self.identity = new_identity()
        self.elector: LeaseElector | None = None

    # -- the parts' settings (from the traits; a trait changed later reaches them) -----------
    def _image_settings(self) -> ImageSettings:
        return ImageSettings(registry=self.registry, registry_insecure=self.registry_insecure,
                             builder_args=tuple(self.builder_args), registry_timeout=self.registry_timeout,
                             image_reuse=self.image_reuse, kernel_requirements=tuple(self.kernel_requirements),
                             runner_requirements=tuple(self.runner_requirements))

    def _build_settings(self) -> BuildSettings:
        return BuildSettings(builder_image=self.builder_image, builder_args=tuple(self.kaniko_args()),
                             service_account=self.service_account, registry_secret=self.registry_secret,
                             tekton_task=self.tekton_task, tekton_task_resolver=self.tekton_task_resolver,
                             tekton_task_namespace=self.tekton_task_namespace, tekton_run_kind=self.tekton_run_kind)

    def _pod_settings(self) -> PodSettings:
        return PodSettings(runner_image=self.runner_image, service_account=self.service_account,
                           run_as_user=self.run_as_user,
                           resources=dict(self.validation_resources), image_pull_secrets=tuple(self.image_pull_secrets),
                           progress_interval=self.progress_interval, image_pull_deadline=self.image_pull_deadline)

    @observe(All)
    def _trait_changed(self, change: Any) -> None:
        if "executor" in self.__dict__:  # wired (traits set by the constructor come before)
            self.images.settings = self._image_settings()
            self.build_site.settings = self._build_settings()
            self.executor.settings = self._pod_settings()

    elects_leader = True

    @property
    def kube(self) -> Kube:
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
        self.executor.clear()
        self.snapshots.clear()
        await self.images.close()

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
            watched = self.builders[strategy].watched
            if watched is not None:
                await self.children.watch(strategy, watched.resource, watched.api_version, watched.kind)

    async def run_election(self, on_started_leading: Callable[[], None],
                           on_stopped_leading: Callable[[], None]) -> None:
        """One active reconciler per namespace (coordination.k8s.io/v1 Lease)."""
        self.elector = LeaseElector(self.kube, self.namespace, self.lease_name, identity=self.identity,
                                    lease_duration=self.lease_duration, renew_deadline=self.renew_deadline,
                                    retry_period=self.retry_period, log=self.log)
        await self.elector.run(on_started_leading, on_stopped_leading)

    # -- spec --------------------------------------------------------------------
    def supported_fields(self) -> set[str]:
        return spec_fields() - set(NOT_YET_ON_KUBERNETES)

    def unsupported_reason(self, field: str) -> str | None:
        return NOT_YET_ON_KUBERNETES.get(field)

    def check_spec(self, spec: JobSpec) -> None:
        spec_check(spec, self._strategy_of(spec), self.available_strategies, self.registry, self.runner_image,
                   self.allowed_service_accounts)

    def credential_problem(self, name: str) -> str | None:
        """A job's secret reaches its Pod from a Secret of the namespace (envFrom): only a
        ``fromSecret`` entry can; the server never hands a Pod values it read itself."""
        if self.secrets.kubernetes_secret(name) is None:
            return (f"secret {name!r}: on the kubernetes backend a job's secret must be a Secret of the namespace "
                    "(an entry with fromSecret in c.NBValidation.secrets); the server does not copy values it "
                    "reads itself into the cluster")
        return None

    async def secret_values(self, name: str) -> dict[str, str]:
        """A ``fromSecret`` entry's Secret, read from the namespace now (a git source's
        credentialsSecret: the server fetches); any other entry as the registry reads it."""
        secret = self.secrets.kubernetes_secret(name)
        if secret is None:
            return await super().secret_values(name)
        return await secrets_of.read_secret(self.kube, self.namespace, name, secret)

    async def adopt_snapshot(self, job: Job, files: dict[str, bytes] | None, annotations: dict[str, str]) -> None:
        folder = None if job["spec"].get("inputFiles") else annotations.get(WORKDIR_ANNOTATION)
        await self.snapshots.adopt(job, files, annotations, self.max_notebook_bytes_configmap, folder=folder)

    def _check_past_the_service(self, job: Job) -> None:
        """A job made past the service (kubectl: no service checked it): its service account
        and secrets as submit checks them, for its owner (its owner label; none: the server's own
        user, who may use every secret: creating jobs in the namespace is the right to). Raises
        InputRejected naming the field."""
        spec: Mapping[str, Any] = job["spec"]
        pc = spec.get("podConfig") or {}
        try:
            spec_check(cast(JobSpec, spec), self._strategy_of(spec), self.available_strategies, self.registry,
                       self.runner_image, self.allowed_service_accounts)
        except SpecError as e:
            field = e.field if e.field.startswith("spec") else f"spec.{e.field}"
            raise InputRejected(f"{field}: {e.reason}", field) from None
        owner = (job["metadata"].get("labels") or {}).get(OWNER_LABEL)
        caller = Caller(owner) if owner else Caller()
        for i, name in enumerate(pc.get("credentials") or []):
            field = f"spec.podConfig.credentials[{i}]"
            try:
                self.secrets.check(name, caller)
            except SecretNotAvailable as e:
                raise InputRejected(f"{field}: {e}", field) from None
            problem = self.credential_problem(name)
            if problem:
                raise InputRejected(f"{field}: {problem}", field)

    def _strategy_of(self, spec: Mapping[str, Any]) -> str:  # a JobSpec, or {} (the default)
        s = ((spec.get("podConfig") or {}).get("buildConfig") or {}).get("strategy") or "auto"
        if s == "kaniko":
            return "job"
        if s == "auto":
            s = self.default_build_strategy
        if s == "auto":
            s = self.auto_strategy
        return s

    def build_strategy(self, job: Job) -> str:
        """The strategy a job builds with: the one recorded when its build
        started (a later discovery never switches a running build)."""
        recorded = ((job.get("status") or {}).get("buildStatus") or {}).get("strategy")
        return recorded if recorded in BUILDERS else self._strategy_of(job["spec"])

    def build_strategy_reason(self, job: Mapping[str, Any]) -> str:  # a Job, or {"spec": {}} (the default)
        s = ((job["spec"].get("podConfig") or {}).get("buildConfig") or {}).get("strategy") or "auto"
        if s != "auto":
            return f"requested by the job (podConfig.buildConfig.strategy={s})"
        if self.default_build_strategy != "auto":
            return f"configured (c.KubernetesBackend.default_build_strategy={self.default_build_strategy})"
        return self.auto_reason

    # -- submit / prepare -------------------------------------------------------------
    def private_paths(self) -> frozenset[str]:
        return folders.private_paths(self.kubeconfig)

    def check_working_folder(self, folder: str, root: str | None) -> None:
        folders.check_working_folder(folder, root, self.private_paths(), self.max_folder_files,
                                     self.max_notebook_bytes_configmap)

    def folder_files(self, folder: str, root: str | None) -> dict[str, bytes]:
        return folders.folder_files(folder, root, self.private_paths(), self.max_folder_files,
                                    self.max_notebook_bytes_configmap)

    async def submit(self, job: Job, files: dict[str, bytes]) -> Job:
        folder = None if job["spec"].get("inputFiles") else (job["metadata"].get("annotations") or {}).get(
            WORKDIR_ANNOTATION)
        return await self.snapshots.submit(job, files, self.max_notebook_bytes_configmap, folder=folder)

    async def read_snapshot(self, job: Job) -> Snapshot:
        """The snapshot ConfigMap as the plan needs it (its input files: the
        ConfigMap keys the validation pod's init container copies, with their paths). A job created
        past the service (kubectl) with a field this backend does not take yet fails naming it,
        never runs without it."""
        spec: Mapping[str, Any] = job["spec"]
        for path, reason in NOT_YET_ON_KUBERNETES.items():
            head, _, leaf = path.rpartition(".")
            if (spec.get(head) or {}).get(leaf):
                raise InputRejected(f"spec.{path}: {reason}", f"spec.{path}")
        if ROOT_ANNOTATION not in (job["metadata"].get("annotations") or {}):  # made past the service
            self._check_past_the_service(job)
        data, binary = await self.snapshots.read(job)
        return Snapshot(names=frozenset(data) | frozenset(binary), requirements_txt=data.get("requirements.txt"),
                        constraints_txt=data.get("constraints.txt"), input_files=tuple(obj.inputs_index(data)),
                        local_paths=binary.get(local_sources.ARCHIVE),
                        system_packages_txt=data.get(SYSTEM_PACKAGES_TXT),
                        interpreter_json=data.get(INTERPRETER_JSON))

    async def prepare(self, job: Job, plan: ValidationPlan) -> str:
        # the plan's requirements were checked at submit (requirements.py; this backend refuses
        # index credentials there, so the display lines are the build lines; local paths travel
        # packed, and constraints go into the image build as pip's -c)
        if not plan.build:
            return f"{plan.detected}; build disabled."
        return f"{plan.detected}; image build on {self._base_image(job)}."

    def unbuilt_environment(self, job: Job) -> str:
        image = (job["spec"].get("podConfig") or {}).get("containerImage") or self.runner_image
        return f"the image {image}"

    # -- build ---------------------------------------------------------------------------
    def _base_image(self, job: Mapping[str, Any]) -> str:  # a Job, or {"spec": spec}: only its spec is read
        pc = job["spec"].get("podConfig") or {}
        return (pc.get("buildConfig") or {}).get("baseImage") or pc.get("containerImage") or self.base_image

    def kaniko_args(self) -> list[str]:
        """The executor's extra arguments: --insecure(-pull) for a plain-HTTP
        registry, then ``builder_args``."""
        args = []
        if self.registry_insecure:
            args += ["--insecure", "--insecure-pull"]
        return args + [a for a in self.builder_args if a not in args]

    # -- the verdict cache ------------------------------------------------------------------
    async def verdict_environment(self, spec: JobSpec, requirements: Requirements) -> str | None:
        return await self.images.verdict_environment(spec, requirements, base_image=self._base_image({"spec": spec}),
                                                     runner_image=self.runner_image)

    async def same_verdict_environment(self, job: Job, environment: str) -> bool:
        return await self.images.same_verdict_environment(job, environment)

    async def build_inputs(self, job: Job, plan: ValidationPlan | None = None) -> BuildInputs:
        return await self.images.inputs(job, plan)

    async def ensure_build(self, job: Job, plan: ValidationPlan) -> Observation:
        uid = job["metadata"]["uid"]
        await self.images.inputs(job, plan)  # once per job: what every builder builds from
        strategy = self.build_strategy(job)
        builder = self.builders[strategy]
        obs = None
        if not self.images.checked(uid) and not await builder.started(job):
            obs = await self.images.before_build(job, strategy)
        if obs is None:
            self.images.building(uid)
            obs = await builder.ensure(job)
            if obs.state != RUNNING:
                self.images.release(uid, obs, job["metadata"]["name"])
        notice = self.images.notice(uid)  # image reuse off for this job, and why: the engine posts it once
        return obs if notice is None else dataclasses.replace(obs, notices=[*obs.notices, notice])

    async def cancel_build(self, job: Job) -> None:
        await self.builders[self.build_strategy(job)].cancel(job)
        self.images.release(job["metadata"]["uid"])

    async def build_log(self, job: Job) -> str | None:
        return await self.builders[self.build_strategy(job)].build_log(job)

    # -- validation ------------------------------------------------------------------------
    async def ensure_validation(self, job: Job, reference: str | None, plan: ValidationPlan) -> Observation:
        return await self.executor.ensure(job, reference, plan)

    async def cancel_validation(self, job: Job) -> None:
        await self.executor.cancel(job)

    async def cleanup(self, job: Job) -> None:
        # nothing destructive: owner references let the garbage collector remove
        # the children with the job; until then they are the evidence
        uid = cast(str, job["metadata"].get("uid"))  # a stored job: the API server gave it its uid
        self.executor.forget(uid)
        self.snapshots.forget(uid)
        self.images.forget(uid)

    async def executed_notebook(self, job: Job) -> dict[str, Any] | None:
        return await self.executor.executed_notebook(job)

    async def snapshot_files(self, job: Job) -> dict[str, bytes]:
        return await self.snapshots.files(job)

    async def environment_record(self, job: Job) -> dict[str, Any] | None:
        """The record of what the validation Pod's kernel had, from the probe its runner
        printed before the notebook ran (read from the Pod's log, as the executed notebook
        is; gone with the Pod): records.py."""
        got = await self.executor.environment_probe(job)
        if got is None:
            return None
        probe, started = got
        files = await self.snapshots.files(job)
        return await records.environment_record(job, probe, started, files, strategy=self.build_strategy(job),
                                                base_image=self._base_image(job), runner_image=self.runner_image)

    # -- health ------------------------------------------------------------------------------
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
        established, problem = await crd_state(self.kube)
        out["crdEstablished"] = established
        out["networkPolicy"] = await network_policy_state(self.kube, self.namespace, out["api"]["apiReachable"])
        out["cacheSynced"] = self.store.synced
        if problem is None and not self.store.synced:
            errors = [i.last_error for i in (self.store.jobs, self.store.build_jobs, self.store.pods)
                      if i is not None and i.last_error]
            problem = "watching the namespace failed: " + (errors[0] if errors else "not synced yet")
        if not out["api"]["apiReachable"]:
            problem = (f"the API server is unreachable since {out['api']['since']} ({out['api']['lastError']}); "
                       "serving the last known state, reconciling resumes when it is back")
        state = await self.images.registry_state(self.base_image)
        out.update(state)
        if problem is None and state and not state["registryReachable"]:
            problem = f"the registry {self.registry} is unreachable ({state['registryProblem']}); builds wait for it"
        out["usable"] = problem is None
        out["problem"] = problem
        if problem is None and not self.registry:
            out["warning"] = "no registry is configured (c.KubernetesBackend.registry): jobs that build are refused"
        return out

