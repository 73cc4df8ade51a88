"""One network per run (LocalBackend.network, runner/netns.py): decided once at start,
tried for real, said in /health's sandbox entry, and what each run's sandbox file asks."""

from __future__ import annotations

import os
from typing import Any

import jupyter_nbvalidation.runner.netns as netns
import jupyter_nbvalidation.runner.sandbox as sandbox

MODES = ("auto", "none", "host")
HELP = ("Linux, with the sandbox: the network of each run's kernel. auto (the default): a network "
        "namespace of its own (its loopback is its alone: it cannot connect to the Jupyter server, "
        "other kernels or other runs' listeners on the host's loopback, nor they to its) with outbound "
        "network through a user-mode network (slirp4netns, Debian package slirp4netns, with the host's "
        "loopback not mapped), when this system has it; else the host's network, with a warning. none: "
        "the namespace with its loopback only, no network at all. host: the host's network, loopback "
        "included (as without the sandbox). /health's sandbox.network says what is used.")
LEFT_OPEN = ("runs share the host's network: a notebook can connect to what listens on the host's "
             "loopback (the Jupyter server, other kernels, other runs' listeners)")


def network_state(mode: str, python: str, sandboxed: bool) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """``(what /health says, what each run's sandbox file asks or None)`` for
    ``LocalBackend.network = mode`` (blocks: tries it for real, call it in a thread)."""
    if mode == "host":
        return _said(mode, False, "host", f"host (LocalBackend.network): {LEFT_OPEN}"), None
    if not sandboxed:
        return _said(mode, False, "host", f"no sandbox: {LEFT_OPEN}"), None
    launcher = os.path.abspath(sandbox.__file__)

    def mounts(folder: str) -> list[Any]:  # as a kernel's (a root launcher's kernel runs as nobody)
        return list(sandbox.kernel_mounts(hide=[], show=[], python=python, temp_dir=folder))

    if mode == "none":
        config: dict[str, Any] = {"mode": "none"}
        found = netns.detect(python, launcher, config, mounts)
        if not found["isolated"]:
            return _said(mode, False, "host", f"no network namespace ({found['reason']}): {LEFT_OPEN}"), None
        return _said(mode, True, "none", None, found), config
    tool = netns.find_tool()
    if tool is None:
        return _said(mode, False, "host", f"no user-mode network (install slirp4netns): {LEFT_OPEN}"), None
    config = {"mode": "user", **tool}
    found = netns.detect(python, launcher, config, mounts)
    if not found["isolated"] or not found["outbound"]:
        return _said(mode, False, "host", f"{tool['tool']} did not work ({found['reason']}): {LEFT_OPEN}"), None
    return _said(mode, True, tool["tool"], None, found), config


def _said(mode: str, isolated: bool, outbound: str, reason: str | None,
          found: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"mode": mode, "isolated": isolated, "outbound": outbound, "reason": reason,
            "probeSeconds": (found or {}).get("startSeconds")}
