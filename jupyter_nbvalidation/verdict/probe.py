"""The environment probe: what is installed in the kernel's interpreter, read with
that interpreter (``python -I -c PROBE``). The server takes it for the local
backend (verdict/environment_record.py); the runner takes it in a Kubernetes Pod
(``--print-environment``) and prints it on one ``NBVALIDATION-ENVIRONMENT`` line.
Standard library only: the runner imports it (runner.SHARED_MODULES), in its image too."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

BASE_IMAGE_VAR = "NBV_BASE_IMAGE"  # set by the image build (backends/kubernetes/objects.py): FROM, by digest when resolved
MAX_PROBE_BYTES = 4 * 2**20
PROBE_TIMEOUT = 120.0

# Runs in the kernel's interpreter, isolated (-I: no PYTHONPATH, no user site, no
# current folder): what ``import`` there would find, first distribution of a name wins.
PROBE = r"""
import json, platform, sys
import importlib.metadata as md
seen, dists = set(), []
for d in md.distributions():
    name = (d.metadata["Name"] or "").strip()
    key = name.lower().replace("_", "-").replace(".", "-")
    if not name or key in seen:
        continue
    seen.add(key)
    entry = {"name": name, "version": d.version or ""}
    try:
        du = d.read_text("direct_url.json")
    except Exception:
        du = None
    if du:
        try:
            entry["directUrl"] = json.loads(du)
        except ValueError:
            pass
    try:
        inst = (d.read_text("INSTALLER") or "").strip()
    except Exception:
        inst = ""
    if inst:
        entry["installer"] = inst
    dists.append(entry)
impl = sys.implementation.name
print(json.dumps({"python": {"version": platform.python_version(), "implementation": platform.python_implementation(),
                             "implementationVersion": ".".join(map(str, sys.implementation.version[:3])),
                             "platform": platform.platform(), "machine": platform.machine()},
                  "distributions": dists}))
"""


def take(python: str, timeout: float = PROBE_TIMEOUT) -> dict[str, Any]:
    """PROBE's document, run with ``python`` (the runner's own process: no event loop
    here); ``{"error": why}`` when it cannot be taken."""
    try:
        proc = subprocess.run([python, "-I", "-c", PROBE], stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": f"{python} could not list its distributions: {e}"}
    if proc.returncode != 0:
        last = (proc.stderr.decode("utf-8", "replace").strip().splitlines() or [""])[-1][:300]
        return {"error": f"{python} could not list its distributions (exit {proc.returncode}): {last}"}
    if len(proc.stdout) > MAX_PROBE_BYTES:
        return {"error": f"{python} listed over {MAX_PROBE_BYTES} bytes of distributions"}
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        return {"error": f"{python} printed something other than the list of its distributions"}
    if os.environ.get(BASE_IMAGE_VAR):  # an image this tool built: what it was built FROM
        doc["baseImage"] = os.environ[BASE_IMAGE_VAR][:300]
    return doc
