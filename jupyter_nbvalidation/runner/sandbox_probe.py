"""Whether the kernels' sandbox (runner/sandbox.py) works on this machine, tried for real once
at start: a probe process run through the launcher, as a kernel would be. Apart from the
launcher, which runs as a script under ``python -I -S`` and never needs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any

import jupyter_nbvalidation.runner.confine as confine
import jupyter_nbvalidation.runner.sandbox as sandbox

# fault injection (the tests'): an errno name; idmapped mounts are then refused, here and in runs
IDMAP_FAULT_VAR = "NBVALIDATION_FAULT_IDMAP"


def idmap_check(paths: list[str]) -> str | None:
    """Root only: the first of ``paths`` where an idmapped mount is refused (``confine.idmap_refused``:
    NFS, overlayfs), or None. Not root, or no user namespace to map with: None (nothing to refuse)."""
    if not confine.real_root():
        return None
    try:
        userns = confine.idmap_userns(confine.NOBODY, confine.NOBODY)
    except OSError:
        return None  # the launcher then runs the kernel as any user (protections says so)
    try:
        return confine.idmap_refused([p for p in paths if os.path.exists(p)], userns,
                                     os.environ.get(IDMAP_FAULT_VAR) or None)
    finally:
        os.close(userns)


def detect(python: str | None = None, paths: list[str] | None = None) -> dict[str, Any]:
    """Whether the sandbox works here, tried for real (blocks: call it in a thread):
    ``{"available": bool, "uses": [...], "missing": [...], "reason": str | None,
    "landlockAbi": int | None, "idmapRefused": str | None}``. Root: idmapped mounts are
    also tried on ``paths`` (where runs read); where refused, the rest is tried without them
    and ``missing`` says that a root server's runs are refused (runner/confine.py)."""
    info: dict[str, Any] = {"available": False, "uses": [], "missing": [], "reason": None,
                            "landlockAbi": sandbox.landlock_abi(), "idmapRefused": None}
    if not sys.platform.startswith("linux"):
        info["reason"] = f"not Linux ({sys.platform}): no namespaces"
        return info
    with tempfile.TemporaryDirectory(prefix="nbvalidation-sandbox-probe-") as tmp:
        refused = info["idmapRefused"] = idmap_check([tmp, *(paths or [])])
        secret = os.path.join(tmp, "hidden", "secret")
        os.makedirs(os.path.dirname(secret))
        with open(secret, "w") as f:
            f.write("x")
        shown = os.path.join(tmp, "hidden", "shown")
        os.makedirs(shown)
        # a scratch folder inside the hidden one, seen at /tmp only (as a run's, see kernel_mounts)
        scratch = os.path.join(tmp, "hidden", "scratch")
        os.makedirs(scratch)
        os.chmod(scratch, 0o1777)  # as a run's (workcopy.make_scratch)
        mark = os.path.basename(tmp) + ".mark"
        open(os.path.join(scratch, mark), "w").close()
        probe = ("import errno,json,os,sys\n"
                 "ok = os.getpid() == 2 and not os.path.exists(sys.argv[1]) and os.path.isdir(sys.argv[2])\n"
                 "ok = ok and sorted(p for p in os.listdir('/proc') if p.isdigit()) == ['1', '2']\n"
                 "ok = ok and os.path.exists('/tmp/' + sys.argv[3]) and not os.path.exists(sys.argv[4])\n"
                 "try:\n"
                 "    open(os.path.join(sys.argv[2], 'w'), 'w').close(); w = None\n"
                 "except OSError as e:\n"
                 "    w = errno.errorcode.get(e.errno, str(e.errno))\n"
                 "try:\n"
                 "    open('/tmp/w', 'w').close(); ok = ok and os.path.getsize('/tmp/w') == 0\n"
                 "except OSError:\n"
                 "    ok = False\n"
                 "print(json.dumps({'ok': ok, 'write': w, 'uid': os.getuid()}))\n")
        python = python or sys.executable
        config = os.path.join(tmp, "sandbox.json")
        with open(config, "w", encoding="utf-8") as f:
            seen = [shown, *sandbox.environment_paths(python)]
            mounts = sandbox.plan_mounts([os.path.join(tmp, "hidden"), *confine.closed_ancestors([*seen, tmp])], seen,
                                 {"/tmp": scratch}, [tmp])
            json.dump({"mounts": mounts, **({"idmap": "skip"} if refused else {})}, f)
        argv = sandbox.wrap([python, "-I", "-S", "-c", probe, secret, shown, mark, scratch], config)
        try:
            proc = subprocess.run(argv, capture_output=True, timeout=sandbox.PROBE_TIMEOUT, cwd=tmp,
                                  env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
        except (OSError, subprocess.TimeoutExpired) as e:
            info["reason"] = f"the probe could not run: {e}"
            return info
    out = proc.stdout.decode(errors="replace").strip()
    try:
        found = json.loads(out.splitlines()[-1])
    except (ValueError, IndexError):
        found = {}
    if proc.returncode == 0 and isinstance(found, dict) and found.get("ok") is True and found.get("write"):
        info.update(available=True, **confine.protections(found["write"], info["landlockAbi"], found.get("uid"),
                                                           refused))
        return info
    err = [ln for ln in proc.stderr.decode(errors="replace").splitlines() if ln.strip()]
    info["reason"] = (err[-1] if err else out or f"the probe exited with {proc.returncode}")[:500]
    return info
