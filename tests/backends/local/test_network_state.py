"""LocalBackend.network decided at start (backends/local/network.py): what /health says and what
each run's sandbox file asks, tried for real with the sandbox's launcher; a missing or broken
user-mode network (the fault injected: find_tool answers none, or a tool that exits) keeps the
host's network and says what that leaves open. Through a server: tests/security/test_network.py."""

from __future__ import annotations

import sys

import pytest

import jupyter_nbvalidation.backends.local.network as network
import jupyter_nbvalidation.runner.netns as netns


def test_auto_is_a_namespace_with_slirp4netns():
    said, config = network.network_state("auto", sys.executable, True)
    assert said["isolated"] is True and said["outbound"] == "slirp4netns" and said["reason"] is None, said
    assert config is not None and config["mode"] == "user" and config["tool"] == "slirp4netns", config
    assert said["probeSeconds"] > 0, said


def test_none_is_a_namespace_without_network():
    said, config = network.network_state("none", sys.executable, True)
    assert said["isolated"] is True and said["outbound"] == "none", said
    assert config == {"mode": "none"}


@pytest.mark.parametrize("mode, sandboxed, says", [("host", True, "host (LocalBackend.network)"),
                                                    ("auto", False, "no sandbox"), ("none", False, "no sandbox")])
def test_the_host_network_says_what_it_leaves_open(mode, sandboxed, says):
    said, config = network.network_state(mode, sys.executable, sandboxed)
    assert config is None and said["isolated"] is False and said["outbound"] == "host", said
    assert said["reason"].startswith(says) and "loopback" in said["reason"], said


def test_auto_without_slirp4netns_keeps_the_host_network_and_says_so(monkeypatch):
    monkeypatch.setattr(netns, "find_tool", lambda: None)
    said, config = network.network_state("auto", sys.executable, True)
    assert config is None and said["isolated"] is False and "install slirp4netns" in said["reason"], said


def test_auto_with_a_broken_slirp4netns_keeps_the_host_network_and_names_it(monkeypatch):
    monkeypatch.setattr(netns, "find_tool", lambda: {"tool": "slirp4netns", "path": "/bin/false"})
    said, config = network.network_state("auto", sys.executable, True)
    assert config is None and said["isolated"] is False, said
    assert "slirp4netns (/bin/false) exited with 1" in said["reason"], said
