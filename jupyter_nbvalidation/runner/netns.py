"""One network per run (Linux): the kernel's own network namespace.

Loaded by the sandbox's launcher (runner/sandbox.py, ``python -I -S``) by path, so
standard library only and nothing of the package. The launcher's ``unshare`` takes
:attr:`Network.flags` too (``CLONE_NEWNET``): the kernel, and everything it starts,
is then in a network of its own, whose loopback (brought up here, ``SIOCSIFFLAGS``
on ``lo`` while the launcher still has ``CAP_NET_ADMIN`` in its user namespace) is
its alone. It cannot connect to what listens on the host's loopback (the Jupyter
server, other kernels, other runs' listeners), and nothing outside connects to its
listeners.

The kernel's own channels do not need the network: the runner starts it with ZMQ over
``ipc://`` (runner/execute.py), Unix sockets in the runner's temporary folder, which
the sandbox shows to this kernel only (another run's folder is hidden from it).

The modes (``{"network": {...}}`` in the launcher's configuration):

* ``{"mode": "none"}``: the namespace with its loopback only, no network at all;
* ``{"mode": "user", "tool": "slirp4netns", "path": ...}``: outbound network through a
  user-mode network, as rootless Podman gives a container: ``slirp4netns``, started
  by a helper the launcher forks *before* it unshares (so that it stays in the
  host's namespaces), against the launcher's pid once it has unshared, with
  ``--disable-host-loopback`` (the host's 127.0.0.1 is not reachable through its
  gateway either). It ends with the launcher: it holds the read end of a pipe
  (``--exit-fd``) whose write end only the launcher holds, so a launcher killed
  (SIGKILL to the group included) ends it too; a launcher that exits closes it and
  waits for it.

:func:`detect` (the runner's side, blocks) tries it for real.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any, Callable, Mapping

CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
IFF_RUNNING = 0x40
READY_TIMEOUT = 10.0  # how long the user-mode network may take to come up
STOP_TIMEOUT = 2.0  # how long it may take to exit once the launcher lets it go
TAP = "tap0"
MODES = ("none", "user")
TOOLS = ("slirp4netns",)


def loopback_up() -> None:
    """``ip link set lo up`` in the current network namespace (needs ``CAP_NET_ADMIN`` there)."""
    import fcntl  # deferred: only a launcher with a network of its own (python -I -S, start-up time)
    import socket  # deferred: as above
    import struct  # deferred: as above

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifreq = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, ifreq))[1]
        fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP | IFF_RUNNING))


class Network:
    """The launcher's side of one run's network: :meth:`start` before the launcher
    unshares (forks the user-mode network's helper), :attr:`flags` for its
    ``unshare``, :meth:`inside` once it has unshared and mapped its user (loopback
    up, the helper let go, its network waited for), :meth:`in_child` in the
    namespace's first process, :meth:`stop` when the kernel has ended."""

    def __init__(self, config: Mapping[str, Any] | None) -> None:
        config = config or {}
        self.mode = str(config.get("mode") or "")
        self.tool = str(config.get("tool") or "slirp4netns")
        self.path = str(config.get("path") or self.tool)
        self.flags = CLONE_NEWNET if self.mode in MODES else 0
        self.helper: int | None = None
        self._fds: dict[str, int] = {}

    def start(self) -> None:
        if self.mode != "user":
            return
        go_r, go_w = os.pipe()
        ready_r, ready_w = os.pipe()
        exit_r, exit_w = os.pipe()
        launcher = os.getpid()
        pid = os.fork()
        if pid == 0:  # the helper: in the host's namespaces, until the launcher has its own
            code = 126
            try:
                for fd in (go_w, ready_r, exit_w):
                    os.close(fd)
                go = os.read(go_r, 16)
                if go not in (b"go", b"go-root"):  # the launcher failed, or is gone
                    os._exit(0)
                os.set_inheritable(ready_w, True)
                os.set_inheritable(exit_r, True)
                # a root launcher makes no user namespace (it drops to nobody): only its network is joined
                userns = [] if go == b"go-root" else [f"--userns-path=/proc/{launcher}/ns/user"]
                argv = [self.path, "--configure", "--mtu=65520", "--disable-host-loopback",
                        f"--ready-fd={ready_w}", f"--exit-fd={exit_r}", *userns, str(launcher), TAP]
                # the group's signals stay ignored (the launcher ignores them): an interrupt
                # of the kernel (SIGINT to the group) does not end its network; a SIGKILL does
                devnull = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):  # its chatter is not the kernel's log (its failure is said by inside())
                    os.dup2(devnull, fd)
                os.execv(self.path, argv)
            except OSError:
                code = 127
            finally:
                os._exit(code)
        self.helper = pid
        for fd in (go_r, ready_w, exit_r):
            os.close(fd)
        self._fds = {"go": go_w, "ready": ready_r, "exit": exit_w}

    def inside(self, in_user_namespace: bool = True) -> None:
        """In the launcher, after ``unshare`` and the user's mapping (``in_user_namespace``:
        False for a root launcher, which makes none): raises OSError when the network cannot
        be made."""
        if not self.flags:
            return
        loopback_up()
        if self.mode != "user":
            return
        os.write(self._fds["go"], b"go" if in_user_namespace else b"go-root")
        os.close(self._fds.pop("go"))
        ready = self._fds.pop("ready")
        try:
            got = _read_within(ready, READY_TIMEOUT)
        finally:
            os.close(ready)
        if got != b"1":
            detail = f"did not come up within {READY_TIMEOUT:g} s" if got is None else self._exit_status()
            raise OSError(f"network: {self.tool} ({self.path}) {detail}")

    def _exit_status(self) -> str:
        try:
            pid, status = os.waitpid(self.helper, 0) if self.helper else (0, 0)
        except ChildProcessError:
            return "ended before its network was up"
        self.helper = None
        if pid and os.WIFEXITED(status):
            code = os.WEXITSTATUS(status)
            return "could not be run" if code == 127 else f"exited with {code} before its network was up"
        return "was killed before its network was up"

    def in_child(self) -> None:
        """In the namespace's first process: none of the helper's pipes."""
        for fd in self._fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds = {}

    def stop(self) -> None:
        """The user-mode network ends (its exit pipe closed) and is waited for, then killed."""
        self.in_child()  # the pipes closed: the exit pipe's close is what ends it
        if self.helper is None:
            return
        pid, self.helper = self.helper, None
        deadline = time.monotonic() + STOP_TIMEOUT
        while True:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                return
            except InterruptedError:
                continue
            if done:
                return
            if time.monotonic() > deadline:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
                deadline = float("inf")
                try:
                    os.waitpid(pid, 0)
                except (ChildProcessError, InterruptedError):
                    pass
                return
            time.sleep(0.005)


def _read_within(fd: int, timeout: float) -> bytes | None:
    """The first byte read from ``fd`` (b"" at its end), None after ``timeout`` s."""
    import select  # deferred: as loopback_up's imports

    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        try:
            ready, _, _ = select.select([fd], [], [], left)
        except InterruptedError:
            continue
        if ready:
            return os.read(fd, 1)
    return None


# --- the runner's side ---------------------------------------------------------------


def find_tool() -> dict[str, str] | None:
    """The user-mode network this system has: ``{"tool": name, "path": path}``, or None."""
    import shutil  # deferred: the runner's side only (the launcher never asks)

    for tool in TOOLS:
        path = shutil.which(tool) or next(
            (p for p in (f"/usr/bin/{tool}", f"/usr/sbin/{tool}") if os.access(p, os.X_OK)), None)
        if path:
            return {"tool": tool, "path": path}
    return None


PROBE = r"""
import os, socket, sys
port = int(sys.argv[1])
names = sorted(os.listdir('/sys/class/net')) if os.path.isdir('/sys/class/net') else []
out = []
with socket.socket() as s:  # its own loopback works
    s.bind(('127.0.0.1', 0)); s.listen(1)
    with socket.create_connection(s.getsockname(), timeout=5):
        pass
with socket.socket() as c:  # the host's loopback does not answer
    c.settimeout(5)
    out.append('host-loopback-refused' if c.connect_ex(('127.0.0.1', port)) else 'host-loopback-reached')
routes = open('/proc/net/route').read().split('\n')[1:]
out.append('default-route' if any(r.split('\t')[1:2] == ['00000000'] for r in routes if r) else 'no-route')
print(' '.join(out))
"""


def detect(python: str, launcher: str, network: Mapping[str, Any],
           mounts: Callable[[str], list[Any]] | None = None) -> dict[str, Any]:
    """Whether a run gets a network of its own here, tried for real through the
    launcher ``launcher`` (runner/sandbox.py) with ``{"network": network}`` and the
    mounts ``mounts(folder)`` gives for a kernel whose files are in ``folder`` (blocks):
    ``{"isolated": bool, "outbound": bool, "reason": str | None, "startSeconds": float}``."""
    import json  # deferred: the runner's side only
    import socket  # deferred: as above
    import subprocess  # deferred: as above
    import tempfile  # deferred: as above

    info: dict[str, Any] = {"isolated": False, "outbound": False, "reason": None, "startSeconds": None}
    with tempfile.TemporaryDirectory(prefix="nbvalidation-netns-probe-") as tmp, socket.socket() as host:
        host.bind(("127.0.0.1", 0))
        host.listen(4)
        config = os.path.join(tmp, "sandbox.json")
        with open(config, "w", encoding="utf-8") as f:
            json.dump({"mounts": mounts(tmp) if mounts else [], "network": dict(network)}, f)
        argv = [python, "-I", "-S", launcher, config, "--",
                python, "-I", "-S", "-c", PROBE, str(host.getsockname()[1])]
        started = time.monotonic()
        try:
            proc = subprocess.run(argv, capture_output=True, timeout=60, cwd=tmp,
                                  env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
        except (OSError, subprocess.TimeoutExpired) as e:
            info["reason"] = f"the network probe could not run: {e}"
            return info
        info["startSeconds"] = round(time.monotonic() - started, 3)
    words = proc.stdout.decode(errors="replace").split()
    if proc.returncode == 0 and "host-loopback-refused" in words:
        info["isolated"] = True
        info["outbound"] = "default-route" in words
        if network.get("mode") == "user" and not info["outbound"]:
            info["reason"] = f"{network.get('tool')} gave the run no route out"
        return info
    err = [ln for ln in proc.stderr.decode(errors="replace").splitlines() if ln.strip()]
    info["reason"] = (err[-1] if err else " ".join(words) or f"the probe exited with {proc.returncode}")[:500]
    return info


if __name__ == "__main__":  # pragma: no cover - a manual check: python netns.py PYTHON
    print(detect(sys.argv[1] if len(sys.argv) > 1 else sys.executable,
                 os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox.py"),
                 {"mode": "user", **(find_tool() or {})}))
