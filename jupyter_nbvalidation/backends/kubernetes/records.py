"""The environment record (environment_record.py) of a Kubernetes job: shaped from
the probe its validation Pod's runner printed before the notebook ran, with what the
job declared (its requirement lines, the packed local paths by their server paths)."""

from __future__ import annotations

import asyncio
from typing import Any

import jupyter_nbvalidation.environment.local_sources as local_sources
import jupyter_nbvalidation.verdict.environment_record as envrec
from jupyter_nbvalidation.core.documents import Job
from jupyter_nbvalidation.core.model import build_enabled, isotime


async def environment_record(job: Job, probe: dict[str, Any], started: str | None, files: dict[str, bytes], *,
                             strategy: str, base_image: str, runner_image: str) -> dict[str, Any]:
    """A built image: ``environment.key`` is the image's digest, with the declared
    requirement lines; a local path installed from the packed archive is shown by its
    server path and content hash. ``files``: the job's snapshot; ``strategy`` and
    ``base_image``: the job's build's."""
    spec = job["spec"]
    reference = ((job.get("status") or {}).get("buildStatus") or {}).get("imageReference") or ""
    local_hashes: dict[str, str] = {}
    places: dict[str, str] = {}
    if build_enabled(spec):
        lines = [ln for ln in (files.get("requirements.txt") or b"").decode().splitlines() if ln.strip()]
        constraints = [ln for ln in (files.get("constraints.txt") or b"").decode().splitlines() if ln.strip()]
        # the image's digest: the same content, the same image (reused), the same key
        environment: dict[str, Any] = {"kind": "built", "key": reference.rpartition("@")[2] or reference,
                                       "image": reference, "strategy": strategy,
                                       "baseImage": str(probe.get("baseImage") or base_image),
                                       "requirements": lines,
                                       "constraints": constraints}
        if local_sources.ARCHIVE in files:
            packed = await asyncio.to_thread(local_sources.read, files[local_sources.ARCHIVE])
            places = {f"{local_sources.BUILD_DIR}/{place}": path for path, place in packed.places.items()}
            local_hashes = {image_path: packed.hashes[path] for image_path, path in places.items()}
    else:
        environment = {"kind": "image",
                       "image": spec.get("podConfig", {}).get("containerImage") or runner_image}
    taken = started or isotime()
    if probe.get("error"):
        record: dict[str, Any] = {"apiVersion": envrec.API_VERSION, "kind": envrec.KIND, "takenAt": taken,
                                  "environment": environment, "error": str(probe["error"])[:300]}
    else:
        record = envrec.shape(probe, environment=environment, tool={}, taken_at=taken, local_hashes=local_hashes)
        for dist in record["distributions"]:  # the image's copy of a local path, by the server's path
            src = dist.get("source") or {}
            path = str(src.get("path") or "").rstrip("/")
            if src.get("kind") == "local" and path in places:
                src["path"] = places[path]
    record["tool"] = await asyncio.to_thread(envrec.tool_identity)
    return record
