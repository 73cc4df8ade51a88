"""What a build builds, and whether it needs to run: the build inputs of a job
(Dockerfile FROM the base image pinned by digest, the context files, the
destination ``<registry>/env:<content hash>``), the image-reuse check against
the registry, and one build per image (jobs of the same content wait for the
one build that pushes it, then reuse it)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

import jupyter_nbvalidation.backends.kubernetes.objects as obj
import jupyter_nbvalidation.environment.local_sources as local_sources
from jupyter_nbvalidation.backends.base import FAILED, RUNNING, SUCCEEDED, Fault, Notice, Observation
from jupyter_nbvalidation.backends.kubernetes.builders.base import BuildInputs, strip_tag
from jupyter_nbvalidation.backends.kubernetes.registry import RegistryClient, RegistryError, parse_reference
from jupyter_nbvalidation.core.documents import Job, JobSpec
from jupyter_nbvalidation.core.errors import InputRejected, TemporaryFailure
from jupyter_nbvalidation.core.model import build_enabled, isotime, parse_time
from jupyter_nbvalidation.core.vocabulary import EventReason
from jupyter_nbvalidation.environment.requirements import Requirements
from jupyter_nbvalidation.spec.plan import ValidationPlan

BASE_DIGEST_TTL = 60.0  # seconds a resolved base-image digest is used before asking again
PROBE_TTL = 5.0  # seconds /health's registry probe is reused
ENV_REPOSITORY = "env"  # built images: <registry>/env:<content hash>
FAILED_BUILDS_KEPT = 256  # builds that failed for good, remembered for the jobs that waited on them


@dataclass(frozen=True)
class ImageSettings:
    registry: str = ""
    registry_insecure: bool = False
    builder_args: tuple[str, ...] = ()
    registry_timeout: float = 10.0
    image_reuse: bool = True
    kernel_requirements: tuple[str, ...] = ("ipykernel",)
    runner_requirements: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Recipe:
    digest: str | None  # of the base image, when it resolved
    problem: str
    base_image: str  # FROM, by digest when it resolved
    dockerfile: str
    requirements_txt: str
    context: dict[str, Any]
    tag: str
    destination: str  # <registry>/env:<tag>, "" without a registry


class Images:
    """The build inputs of each job (cached by uid) and the reuse decisions.

    The requirement lines and the build timeout come from the job's plan
    (plan.py); ``base_image(job)`` gives its base image."""

    def __init__(self, settings: ImageSettings, *, base_image: Callable[[Job], str],
                 notify: Callable[[str], None], log: logging.Logger):
        self.settings = settings
        self._base_image = base_image
        self.notify = notify
        self.log = log
        self._inputs: dict[str, BuildInputs] = {}  # by job uid
        self._base_digests: dict[str, tuple[float, str | None, str]] = {}  # image -> (when, digest, problem)
        self._reuse_checked: set[str] = set()  # job uids whose own build may run
        self._tag_builder: dict[str, str] = {}  # destination -> uid of the job whose build pushes it
        self._tag_waiters: dict[str, set[str]] = {}  # destination -> names of jobs waiting for that build
        self._client: RegistryClient | None = None
        self._probe: tuple[float, str | None, bool] | None = None  # (when, problem, plain HTTP without insecure)
        self._base_probe: dict[str, tuple[float, str | None, str]] = {}  # /health's base digest, per PROBE_TTL
        self._transient_bases: set[str] = set()  # base images whose last digest lookup failed transiently
        self._unreachable: dict[str, str] = {}  # job uid -> why its base digest could not be read (transient)
        self._off: dict[str, str] = {}  # job uid -> why image reuse (and the verdict key) are off for it
        self._refused: str | None = None  # the last reuse lookup the registry refused (none answered since)
        # destination -> (time.time() it failed, the job whose build it was, its observation): a build
        # that failed for good (not a fault), shared by the jobs of that image submitted before it failed
        self._failed: dict[str, tuple[float, str, Observation]] = {}

    def _plain_http_hosts(self) -> set[str]:
        s = self.settings
        hosts = set()
        if s.registry_insecure or "--insecure" in s.builder_args:
            hosts.add(parse_reference(f"{s.registry}/x").api_host)
        return hosts

    @property
    def registry_client(self) -> RegistryClient:
        if self._client is None:
            self._client = RegistryClient(plain_http_hosts=self._plain_http_hosts(),
                                          timeout=self.settings.registry_timeout)
        return self._client

    async def close(self) -> None:
        self._inputs.clear()
        self._reuse_checked.clear()
        self._tag_builder.clear()
        self._tag_waiters.clear()
        if self._client is not None:
            await self._client.close()
            self._client = None

    def forget(self, uid: str) -> None:
        self._inputs.pop(uid, None)
        self._reuse_checked.discard(uid)
        self._unreachable.pop(uid, None)
        self._off.pop(uid, None)
        self.release(uid)

    async def base_digest(self, image: str) -> tuple[str | None, str]:
        """(digest of the image, problem): the reference's own digest, or
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
            if e.transient:  # the registry away for a moment: not cached, asked again next time
                self._transient_bases.add(image)
                return digest, problem
        self._transient_bases.discard(image)
        self._base_digests[image] = (now, digest, problem)
        return digest, problem

    async def inputs(self, job: Job, plan: ValidationPlan | None = None) -> BuildInputs:
        """What the build of ``job`` builds from its ``plan``: the Dockerfile
        (FROM the base image by digest when it resolves), the context files,
        the destination tag (a hash of all of it) and whether that tag may be
        reused. Computed once per job (``ensure_build`` hands the plan); a
        builder asks again without it."""
        uid = job["metadata"]["uid"]
        if uid in self._inputs:
            return self._inputs[uid]
        if plan is None:  # a builder runs only after ensure_build(job, plan) computed them
            raise TemporaryFailure(f"the build inputs of {job['metadata']['name']} are not computed yet")
        s = self.settings
        base = self._base_image(job)
        r = await self._recipe(base, plan.requirements)
        if base in self._transient_bases and s.registry and \
                parse_reference(base).api_host == parse_reference(f"{s.registry}/x").api_host:
            # the base image on the registry builds push to: a build now would fail there too
            self._unreachable[uid] = r.problem
        elif not r.digest and r.destination:
            self._off[uid] = (f"Image reuse and the verdict key are off for this job: the base image {base} has no "
                              f"digest ({r.problem or 'its registry did not say'}); it is built FROM the tag (which "
                              "may move), never reused, and its verdict is not cached.")
        inputs = BuildInputs(dockerfile=r.dockerfile, requirements_txt=r.requirements_txt,
                             destination=r.destination, base_image=r.base_image, content_hash=r.tag,
                             timeout_seconds=int(plan.build_timeout), context=r.context,
                             reusable=bool(r.digest and r.destination and s.image_reuse), note=r.problem)
        self._inputs[uid] = inputs
        return inputs

    async def _recipe(self, base: str, requirements: Requirements) -> "_Recipe":
        """What an image of ``requirements`` (their display lines: this backend takes no
        credential; their local paths packed in the snapshot, unpacked where the lines
        name them; their constraints; apt.txt's packages) on ``base`` is built from, and its tag."""
        s = self.settings
        digest, problem = await self.base_digest(base)
        from_ = f"{strip_tag(base)}@{digest}" if digest else base
        lines = list(requirements.display_lines)
        packed = requirements.packed
        if packed is not None:
            try:
                lines = local_sources.relocate(lines, packed.places)
            except ValueError as e:
                raise InputRejected(f"{e}: submit the job again", "spec.podConfig.buildConfig.requirements") from None
        elif requirements.local_paths:
            raise InputRejected(f"The requirements name local paths ({', '.join(sorted(requirements.local_paths)[:3])}) "
                                "that did not travel with the job: submit it again",
                                "spec.podConfig.buildConfig.requirements")
        system = list(requirements.system_packages)
        interpreter = requirements.interpreter_wanted()
        constraints = "".join(f"{ln}\n" for ln in requirements.display_constraints)  # pip's -c over the install

        def made() -> _Recipe:  # reads the runner's files and compresses the context: not on the event loop
            docker_file = obj.dockerfile(from_, local_paths=packed is not None, system_packages=bool(system),
                                         interpreter=bool(interpreter), constraints=bool(constraints))
            reqs_txt = obj.build_requirements(list(s.kernel_requirements), lines)
            context = obj.build_context(docker_file, reqs_txt,
                                        obj.runner_requirements_txt(list(s.runner_requirements)),
                                        local_paths=None if packed is None else packed.data,
                                        system_packages=system, interpreter=interpreter,
                                        constraints_txt=constraints or None)
            files = [context[k] for k in sorted(context) if k != obj.RUNNER_TAR]
            runner = [f"{p}\0".encode() + v for p, v in sorted(obj.runner_files().items())]
            content = obj.content_hash(*files, *runner, length=32)
            # an unresolved base (a tag that may move) is never reused
            tag = content if digest else f"u{content[:31]}"
            destination = f"{s.registry}/{ENV_REPOSITORY}:{tag}" if s.registry else ""
            return _Recipe(digest, problem, from_, docker_file, reqs_txt, context, tag, destination)

        return await asyncio.to_thread(made)

    async def built_environment(self, base: str, requirements: Requirements) -> str | None:
        """The verdict cache's identity of the image a build of ``requirements``
        on ``base`` would push now: its content tag in the registry (base image
        digest, Dockerfile, requirements, constraints, their local paths and system packages, runner);
        None when the base image's digest is not known (its tag may move) or there
        is no registry."""
        r = await self._recipe(base, requirements)
        return r.destination if r.digest and r.destination else None

    async def image_digest(self, image: str, *, fresh: bool = False) -> str | None:
        """The digest the registry serves for ``image`` (its own, when pinned); None
        when it cannot be read. Asked again after a minute, or now when ``fresh``."""
        ref = parse_reference(image)
        if ref.digest:
            return ref.digest
        if not fresh:
            return (await self.base_digest(image))[0]
        try:
            return await self.registry_client.digest(image)
        except RegistryError as e:
            self.log.info("nbvalidation: the digest of %s could not be read: %s", image, e)
            return None

    async def verdict_environment(self, spec: JobSpec, requirements: Requirements, *, base_image: str,
                                  runner_image: str) -> str | None:
        """The verdict cache's identity of a spec's environment. Built: the content tag
        of the image a build would push now (``base_image`` by digest, requirements,
        runner). Build disabled: the image the Pod would run (``podConfig.containerImage``
        or ``runner_image``), by the digest its registry serves now. None when a digest
        cannot be read (the notebook then always runs)."""
        if build_enabled(spec):
            dest = await self.built_environment(base_image, requirements)
            return None if dest is None else f"built:{dest}"
        image = (spec.get("podConfig") or {}).get("containerImage") or runner_image
        if not image:
            return None
        digest = await self.image_digest(image)
        return None if digest is None else f"unbuilt:{strip_tag(image)}@{digest}"

    async def same_verdict_environment(self, job: Job, environment: str) -> bool:
        """Built: the registry still serves, at the content tag, the very image the
        job's Pod ran (an image lost and built again may resolve its requirements to
        other versions). Build disabled: the image's digest is in the key."""
        if environment.startswith("unbuilt:"):
            return True
        reference = ((job.get("status") or {}).get("buildStatus") or {}).get("imageReference") or ""
        ran = reference.rpartition("@")[2]
        if not environment.startswith("built:") or not ran.startswith("sha256:"):
            return False
        return await self.image_digest(environment.removeprefix("built:"), fresh=True) == ran

    async def reused(self, inputs: BuildInputs, strategy: str, uid: str | None = None) -> Observation | None:
        """The image of the same content, when the registry has it already; a
        transient Fault (engine retry) when the registry cannot be reached (no
        connection, timeout, 5xx, 429): a full build then would fail at its push
        for the same cause. A refusal (401/403, TLS refused) builds, as without
        reuse, and is the job's notice (``notice(uid)``) and /health's."""
        try:
            digest = await self.registry_client.digest(inputs.destination)
        except RegistryError as e:
            if e.transient:
                return registry_fault(e, inputs.destination, strategy)
            self.log.warning("nbvalidation: reuse check for %s failed (building without reuse): %s",
                             inputs.destination, e)
            self._refused = f"the registry refused the image-reuse lookup of {inputs.destination} ({e})"
            if uid is not None:
                self._off[uid] = (f"Image reuse is off for this job: {self._refused}; it is built in full, and "
                                  "the verdict cache cannot confirm the image either, so its verdict is not reused.")
            return None
        self._refused = None
        if digest is None:
            return None
        repository = inputs.destination.rsplit(":", 1)[0]
        now = isotime()
        return Observation(SUCCEEDED, reference=f"{repository}@{digest}", strategy=strategy,
                           started_at=now, finished_at=now, reused=True,
                           message=f"Reused {inputs.destination} from the registry (same base image digest, "
                                   "requirements and runner); no build ran.")

    async def registry_state(self, base_image: str) -> dict[str, Any]:
        """What /health says of the registry: whether it answers (probed with
        ``GET /v2/`` within ``min(registry_timeout, 3 s)``, cached ``PROBE_TTL``
        seconds), and whether image reuse and the verdict key are on, with why not."""
        s = self.settings
        if not s.registry:
            return {}
        now = asyncio.get_running_loop().time()
        if self._probe is None or now - self._probe[0] >= PROBE_TTL:
            host = parse_reference(f"{s.registry}/x").api_host
            timeout = min(s.registry_timeout, 3.0)
            problem = await _ping(host, self._plain_http_hosts(), timeout)
            plain = False
            if problem is not None and host not in self._plain_http_hosts():
                # https failed: a plain-HTTP registry without registry_insecure answers http
                plain = await _ping(host, {host}, timeout) is None
                problem = None if plain else problem
            self._probe = (now, problem, plain)
        _, problem, plain = self._probe
        off = []
        if problem is not None:
            off.append(f"the registry is unreachable ({problem})")
        if plain:
            off.append(f"the registry {s.registry} answers plain HTTP, but c.KubernetesBackend.registry_insecure "
                       "is not set: its lookups use https and fail")
        cached = self._base_probe.get(base_image)
        if cached is not None and now - cached[0] < PROBE_TTL:
            digest, why = cached[1], cached[2]
        else:  # at most one lookup per PROBE_TTL for /health, even when it fails (not cached by base_digest)
            digest, why = await self.base_digest(base_image)
            self._base_probe[base_image] = (now, digest, why)
        if digest is None:
            off.append(f"the base image {base_image} has no digest: {why}" if why else
                       f"the base image {base_image} has no digest")
        if self._refused and not plain:  # plain HTTP says why already
            off.append(self._refused)
        reuse_reason = None if s.image_reuse else "image reuse is turned off (c.KubernetesBackend.image_reuse)"
        reasons = [r for r in off if r]
        return {"registryReachable": problem is None, "registryProblem": problem,
                "imageReuse": {"enabled": not reasons and reuse_reason is None,
                               "reason": "; ".join(reasons) or reuse_reason},
                "verdictKey": {"enabled": not reasons, "reason": "; ".join(reasons) or None}}

    def notice(self, uid: str) -> Notice | None:
        """What is off for the job ``uid`` (a Warning event, once): image reuse and
        the verdict key, and why; None when nothing is."""
        why = self._off.get(uid)
        return None if why is None else Notice(EventReason.IMAGE_REUSE_OFF, why)

    def checked(self, uid: str) -> bool:
        """Whether the reuse decision of ``uid`` was taken (its own build may run)."""
        return uid in self._reuse_checked

    async def before_build(self, job: Job, strategy: str) -> Observation | None:
        """Before a job's own build starts: the reused image, a wait for the
        build of the same image another job runs, or None (build)."""
        uid, name = job["metadata"]["uid"], job["metadata"]["name"]
        inputs = await self.inputs(job)
        problem = self._unreachable.pop(uid, None)
        if problem is not None:  # computed again on the retry, when the registry may answer
            self._inputs.pop(uid, None)
            host = parse_reference(self._base_image(job)).api_host
            return Observation(FAILED, strategy=strategy, message=problem, fault=Fault(
                f"The registry {host} could not be reached for the base image's digest: {problem}", transient=True))
        shared = self._shared_failure(inputs.destination, job)
        if shared is not None:
            return shared
        if not inputs.reusable:
            return None
        reused = await self.reused(inputs, strategy, uid)
        if reused is not None:
            return reused
        owner = self._tag_builder.get(inputs.destination)
        if owner is not None and owner != uid:
            # one build per image: wait for the one running, then reuse what it pushed
            self._tag_waiters.setdefault(inputs.destination, set()).add(name)
            return Observation(RUNNING, strategy=strategy,
                               message=f"Waiting for the build of the same image ({inputs.destination}).")
        self._tag_builder[inputs.destination] = uid
        return None

    def building(self, uid: str) -> None:
        self._reuse_checked.add(uid)

    def _shared_failure(self, destination: str, job: Job) -> Observation | None:
        """The build of the same image (``destination``) that failed for good after
        ``job`` was submitted: the job waited for it (for that build, or queued for a
        build slot), so it gets that failure without building again. A job submitted
        after the failure builds anew (a failure is never cached: the index may have
        changed since)."""
        kept = self._failed.get(destination) if destination else None
        if kept is None:
            return None
        failed_at, builder, obs = kept
        submitted = parse_time(job["metadata"].get("creationTimestamp"))
        # creationTimestamp is in whole seconds: shared only when that second ended before the failure
        if submitted is None or submitted.timestamp() + 1 > failed_at:
            return None
        return dataclasses.replace(obs, notices=[], message=(
            f"{obs.message} (the build of this image for job {builder}, which failed while this job waited for "
            "it; not built again)"))

    def release(self, uid: str, outcome: Observation | None = None, name: str = "") -> None:
        """The build of job ``uid`` (``name``) is over (``outcome``: how it ended): the
        jobs waiting for the same image look again; a build that failed for good is
        kept for the jobs of the same image submitted before it failed."""
        inputs = self._inputs.get(uid)
        if outcome is not None and outcome.state == FAILED and outcome.fault is None and inputs is not None \
                and inputs.destination:
            self._failed.pop(inputs.destination, None)
            self._failed[inputs.destination] = (time.time(), name or uid, outcome)
            while len(self._failed) > FAILED_BUILDS_KEPT:
                del self._failed[next(iter(self._failed))]
        for dest, owner in list(self._tag_builder.items()):
            if owner == uid:
                del self._tag_builder[dest]
                for name in self._tag_waiters.pop(dest, set()):
                    self.notify(name)


def registry_fault(e: RegistryError, destination: str, strategy: str) -> Observation:
    """The reuse lookup of ``destination`` could not reach its registry: a transient Fault."""
    host = e.host or parse_reference(destination).api_host
    cause = f"The registry {host} could not be reached for the image-reuse lookup of {destination}: {e}"
    return Observation(FAILED, strategy=strategy, message=cause, fault=Fault(cause, transient=True))


async def _ping(host: str, plain_http_hosts: set[str], timeout: float) -> str | None:
    client = RegistryClient(plain_http_hosts=plain_http_hosts, timeout=timeout)
    try:
        return await client.ping(host)
    finally:
        await client.close()
