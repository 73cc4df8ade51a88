"""The kernel in a sandbox (Linux, no root needed): what it can see of the machine.

The kernel's command is wrapped by this file, run as a script by the runner's own
interpreter (``python -I -S sandbox.py CONFIG -- KERNEL ARGV...``; standard library
only, nothing of the package is imported; its sibling confine.py is read by path).
The launcher:

1. ``unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC)``, the user
   mapped to itself (files, ``os.getuid()`` are as without it); the machine's root
   needs no user namespace: its kernel will run as nobody (confine.py);
2. forks the namespace's first process (PID 1 there), which mounts a fresh
   ``/proc`` (only the kernel's own processes), puts an empty tmpfs over each
   *hidden* path (the data dir: the store, other jobs' folders and environments;
   the server's Jupyter runtime dir: its token, other kernels' connection files;
   the user's HOME; ``/dev/shm``), binds a *scratch* folder on disk over ``/tmp``
   and ``/var/tmp`` (fresh, empty folders of the attempt, inside its run folder:
   scratch files take disk as without the sandbox, not memory; with none given,
   an empty tmpfs), then binds again, at their own paths, the *shown* paths a
   hidden one covers (the project root, the kernel's environment and its base
   interpreter, the runner's temporary folder with its connection file and owner
   record) and the *written* ones (its working copy, its own folder ``k/`` in the
   runner's: HOME, sockets). The deepest rule wins: the data
   dir inside the root stays hidden, the job's environment inside it is seen. No
   link's target is shown: a link resolves in this view, into a hidden path it
   finds nothing. Every mount is then made read-only but the written ones;
3. drops every capability (bounding set, securebits ``NOROOT``, ``no_new_privs``;
   root: switched to nobody first): the kernel cannot undo a mount;
4. forks the kernel (PID 2, signals at their defaults, under a Landlock ruleset
   on writes where the Linux kernel has one) and reaps the namespace's orphans
   until it exits; then everything left in the namespace is killed, and the
   launcher exits as the kernel did (by the same signal).

The launcher, the namespace's first process and the kernel are one process group
(jupyter_client signals the group): the first two ignore SIGINT, SIGTERM, SIGHUP,
SIGQUIT, so an interrupt reaches the kernel once and a terminate ends it as
without the sandbox; a SIGKILL to the group ends the namespace.

:func:`detect` (run once at start, in a thread) tries it for real and says what
is used and missing, or why it cannot be.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import signal
import stat
import sys
import time
from typing import Any, Iterable, Mapping, Sequence

if __package__:  # imported by the package (the runner, the backend)
    import jupyter_nbvalidation.runner.confine as confine
else:  # the launcher (python -I -S, see wrap): its sibling, loaded by path (its bytecode cached)
    confine = None  # type: ignore[assignment]  # set below, once _sibling is defined

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWIPC = 0x08000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
PR_SET_PDEATHSIG = 1
SYS_LANDLOCK_CREATE_RULESET = 444
LANDLOCK_CREATE_RULESET_VERSION = 1
# what a launcher and the namespace's first process ignore (the kernel gets them from the group)
GROUP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
# the tmpfs put over hidden paths: sticky and writable by all where the real one is (/tmp)
HIDDEN_BY_DEFAULT = ("/tmp", "/var/tmp", "/dev/shm")
# what a scratch folder on disk may replace (instead of a tmpfs): a notebook's scratch files
# there use the disk, as on a machine without the sandbox (/dev/shm is memory everywhere)
SCRATCH_PATHS = ("/tmp", "/var/tmp")
PROBE_TIMEOUT = 20.0
# what the launcher says (on the kernel's stderr, its log) when it refuses to start a kernel
REFUSED = "refused"
# the kernel's own folder in the runner's temporary one (its HOME, its sockets): the only part it
# writes; the rest (owner.json, which the start-up sweep reads; the connection file) is read-only.
# Short: the kernel's socket paths (ipc://) must fit in 107 bytes
KERNEL_FOLDER = "k"

_libc: Any = None
_siblings: dict[str, Any] = {}  # runner/NAME.py loaded by path: "confine", "bounds", "netns"
# the launcher's command (wrap): this file loaded by path, so that its bytecode is cached as its
# siblings' is (a script given to python is compiled again at every start: ~30 ms of CPU)
BOOT = ("import sys;from importlib.machinery import SourceFileLoader as L;n,p='_nbvalidation_sandbox',sys.argv[1];"
        "m=sys.modules[n]=type(sys)(n);m.__file__=p;exec(L(n,p).get_code(n),m.__dict__);sys.exit(m.main(sys.argv[2:]))")


def _sibling(name: str) -> Any:
    """runner/NAME.py beside this file, loaded by path once, its bytecode cached (as the launcher,
    this file imports nothing of the package): confine.py, bounds.py (the run's limits), netns.py
    (its network). As :data:`BOOT` loads this file: no importlib.util (a few ms at every start)."""
    if name not in _siblings:
        from importlib.machinery import SourceFileLoader  # deferred: the launcher's start (-I -S) only

        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
        module = sys.modules[f"_nbvalidation_{name}"] = type(sys)(f"_nbvalidation_{name}")
        module.__file__ = path
        code = SourceFileLoader(module.__name__, path).get_code(module.__name__)
        assert code is not None
        exec(code, module.__dict__)
        _siblings[name] = module
    return _siblings[name]


if confine is None:
    confine = _sibling("confine")


def _c() -> Any:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
        _libc.unshare.argtypes = [ctypes.c_int]
        _libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
        _libc.syscall.restype = ctypes.c_long
    return _libc


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _enc(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = _enc
    _check(_c().mount(enc(source), target.encode(), enc(fstype), flags, enc(data)), f"mount {target}")


def landlock_abi() -> int | None:
    """The kernel's Landlock ABI version, or None (reported; the sandbox does not need it)."""
    try:
        version = int(_c().syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0),
                                   ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION)))
    except Exception:
        return None
    return version if version > 0 else None


# --- what the kernel sees: rules ------------------------------------------------


def _real(path: str) -> str | None:
    try:
        real = os.path.realpath(path)
        os.lstat(real)
    except (OSError, ValueError):
        return None
    return real


def _inside(path: str, parent: str) -> bool:
    return path == parent or parent == "/" or path.startswith(parent.rstrip("/") + "/")


def environment_paths(python: str) -> list[str]:
    """What an interpreter needs to run: its environment (a venv's root), its real
    executable's prefix, the base interpreter a venv names (``home``), the paths
    its site folders' ``.pth`` files add (editable installs) and, for a wrapper
    script, the interpreter it runs (:func:`_script_interpreter`)."""
    out: list[str] = []
    bindir = os.path.dirname(os.path.abspath(python))
    prefix = os.path.dirname(bindir)
    out.append(prefix)
    real = _real(python)
    if real:
        out.append(os.path.dirname(os.path.dirname(real)))
        out += _script_interpreter(real)
    cfg = os.path.join(prefix, "pyvenv.cfg")
    try:
        with open(cfg, encoding="utf-8") as f:
            for line in f:
                key, sep, value = line.partition("=")
                if sep and key.strip() == "home":
                    home = _real(value.strip())
                    if home:
                        out.append(os.path.dirname(home))
    except OSError:
        pass
    lib = os.path.join(prefix, "lib")
    try:
        versions = [os.path.join(lib, n, "site-packages") for n in os.listdir(lib) if n.startswith("python")]
    except OSError:
        versions = []
    for site in versions:
        try:
            names = [n for n in os.listdir(site) if n.endswith(".pth")]
        except OSError:
            continue
        for name in names:
            try:
                with open(os.path.join(site, name), encoding="utf-8", errors="replace") as f:
                    lines = f.read(1 << 16).splitlines()
            except OSError:
                continue
            for line in lines:
                line = line.strip()
                if line and not line.startswith(("#", "import ", "import\t")):
                    path = line if os.path.isabs(line) else os.path.join(site, line)
                    if os.path.exists(path):
                        out.append(path)
                        out += _linked(path)
        out += _linked(site)
    return [p for p in dict.fromkeys(_real(p) for p in out) if p]


def _linked(folder: str) -> list[str]:
    """Where the top-level links of an environment's site folder lead (an environment assembled
    of links into another one, e.g. under HOME): their real targets, as the folders that hold
    them when several lie side by side (one mount, not hundreds)."""
    try:
        with os.scandir(folder) as entries:
            targets = [os.path.realpath(e.path) for e in entries if e.is_symlink()]
    except OSError:
        return []
    parents: dict[str, list[str]] = {}
    for target in targets:
        parents.setdefault(os.path.dirname(target), []).append(target)
    return [p if len(ts) > 1 else ts[0] for p, ts in parents.items()]


def _script_interpreter(path: str) -> list[str]:
    """When ``path`` is a script (``#!``: a wrapper that execs an interpreter, maybe one
    under a hidden folder such as HOME), the prefixes and executable of the interpreter
    it runs, asked of it (``-I -S -c``; nothing when it does not answer)."""
    try:
        with open(path, "rb") as f:
            if f.read(2) != b"#!":
                return []
    except OSError:
        return []
    import subprocess  # deferred: start-up time of every sandboxed process (run as a script with -I -S)

    code = ("import json, os, sys; print(json.dumps([sys.prefix, sys.exec_prefix, sys.base_prefix, "
            "sys.base_exec_prefix, os.path.realpath(sys.executable)]))")
    try:
        proc = subprocess.run([path, "-I", "-S", "-c", code], capture_output=True, timeout=PROBE_TIMEOUT,
                              stdin=subprocess.DEVNULL, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
        found = json.loads(proc.stdout.decode(errors="replace").strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return []
    if not isinstance(found, list):
        return []
    paths = [p for p in found if isinstance(p, str) and os.path.isabs(p)]
    return paths[:4] + [os.path.dirname(os.path.dirname(p)) for p in paths[4:]]


def plan_mounts(hide: Iterable[str], show: Iterable[str], scratch: Mapping[str, str] | None = None,
                write: Iterable[str] = ()) -> list[tuple[str, ...]]:
    """The mounts to make, in order: ("hide", path) an empty tmpfs, ("show", path)
    the real path bound again (read-only, as everything not written), ("write", path)
    the real path bound again, writable (``write``: the run's own folders, bound even
    where nothing hides them), ("bind", path, folder) the folder bound at path
    (``scratch``: {path: folder}; the path is hidden by it, whatever covers it, and
    the folder is seen there only). Paths are made real (missing ones dropped); the
    deepest rule covering a path decides whether it is seen; a show not covered by
    any hide is already seen (nothing to do); a hide covered by another is too."""
    rules: dict[str, str] = {}
    sources: dict[str, str] = {}
    for path, folder in (scratch or {}).items():
        real, source = _real(path), _real(folder)
        if real and real != "/" and os.path.isdir(real) and source and os.path.isdir(source):
            if rules.setdefault(real, "hide") == "hide" and real not in sources:
                sources[real] = source
    for path in hide:
        real = _real(path)
        if real and real != "/" and os.path.isdir(real):
            rules.setdefault(real, "hide")
    for path in show:
        real = _real(path)
        if real:
            rules[real] = "show"  # on the same path, show wins
    for path in write:
        real = _real(path)
        if real and real != "/":
            rules[real] = "write"
    out: list[tuple[str, ...]] = []
    for path in sorted(rules, key=lambda p: (p.count("/"), p)):
        kind = rules[path]
        above = [p for p in rules if p != path and _inside(path, p)]
        covering = rules[max(above, key=len)] if above else None
        if kind == "hide" and path in sources:
            out.append(("bind", path, sources[path]))
        elif kind == "hide" and covering != "hide":
            out.append((kind, path))
        elif kind == "show" and covering in ("hide", "write") or kind == "write":
            out.append((kind, path))
    return out


def writable_mounts(plan: Sequence[Sequence[str]]) -> list[str]:
    """The mount points of ``plan`` the kernel writes beneath: its own folders, its
    scratch folders (or the tmpfs over /tmp, /var/tmp) and its private /dev/shm."""
    return [path for kind, path, *_ in plan if kind in ("write", "bind") or
            (kind == "hide" and path in HIDDEN_BY_DEFAULT)]


# --- the launcher ------------------------------------------------------------------


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _enter_namespaces(as_root: bool, extra_flags: int = 0) -> None:
    """New mount, PID and IPC namespaces (and ``extra_flags``: the network's); with a user
    namespace (the user mapped to itself) unless the launcher is root, which needs none (and
    drops to nobody)."""
    spaces = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | extra_flags
    if as_root:
        _check(_c().unshare(spaces), "unshare")
        return
    uid, gid = os.geteuid(), os.getegid()
    _check(_c().unshare(CLONE_NEWUSER | spaces), "unshare")
    with _suppress():
        _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1\n")
    _write("/proc/self/gid_map", f"{gid} {gid} 1\n")


class _suppress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> bool:
        return exc[0] is not None and issubclass(exc[0], OSError)


def _make_mountpoint(path: str, like_dir: bool) -> None:
    if os.path.lexists(path):
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if like_dir:
        os.mkdir(path)
    else:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))


def _set_up_mounts(plan: Sequence[Sequence[str]], idmap: int | None) -> list[str]:
    """The plan's mounts, then every mount read-only but the kernel's writable ones;
    ``idmap`` (root: a user namespace mapping root to nobody) binds what is shown
    through idmapped mounts. What could not be done of the read-only part (an old
    Linux kernel), as a list of words."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    fds = {}
    for kind, path, *source in plan:  # handles on what is shown, taken before anything hides it
        if kind in ("show", "write"):
            fds[path] = os.open(path, os.O_PATH | os.O_CLOEXEC)
        elif kind == "bind":  # a scratch folder, inside the (hidden) data dir
            fds[path] = os.open(source[0], os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    for kind, path, *_ in plan:
        if kind == "hide":
            mode = stat.S_IMODE(os.stat(path).st_mode) | (0o111 if idmap is not None else 0)
            _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={mode:o}")
        elif kind == "bind":
            _make_mountpoint(path, True)
            _mount(f"/proc/self/fd/{fds[path]}", path, None, MS_BIND)
        else:
            fd = fds[path]
            _make_mountpoint(path, stat.S_ISDIR(os.fstat(fd).st_mode))
            if idmap is not None:
                confine.idmapped_bind(fd, path, idmap, readonly=kind == "show")
            else:
                _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
    for fd in fds.values():
        os.close(fd)
    try:
        confine.set_readonly("/", True, recursive=True)
    except OSError as e:
        if e.errno not in (errno.ENOSYS, errno.EINVAL):
            raise
        return ["read-only mounts"]
    for path in writable_mounts(plan):
        confine.set_readonly(path, False)
    return []


def _restore_signals() -> None:
    for signum in (*GROUP_SIGNALS, signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def _first_process(plan: Sequence[Sequence[str]], argv: Sequence[str], status_fd: int, idmap: int | None) -> int:
    """PID 1 of the namespace: the mounts, nobody (root only), no capabilities, the
    kernel (confined by Landlock where the Linux kernel has it), the reaping."""
    cwd = os.getcwd()
    _c().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # the launcher gone: the namespace goes
    abi = landlock_abi()
    try:
        umask = os.umask(0o022)  # the mount points made: nobody passes through them
        _set_up_mounts(plan, idmap)
        if "bounds" in _siblings:  # its /dev/shm, of the run's disk budget (runner/bounds.py)
            _sibling("bounds").mount_shm(_mount, MS_NOSUID | MS_NODEV)
        os.umask(umask)
        if idmap is not None:
            os.close(idmap)
        os.chdir(cwd)  # the visible copy of it (a bind mount over a hidden path)
        confine.drop_capabilities((confine.NOBODY, confine.NOBODY) if idmap is not None else None)
        # the switch to nobody cleared the parent-death signal (prctl(2)): set again
        _c().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except OSError as e:
        os.write(2, f"nbvalidation sandbox: {e}\n".encode())
        os.write(status_fd, b"setup-failed\n")
        return 125
    kernel = os.fork()
    if kernel == 0:
        os.close(status_fd)
        _restore_signals()
        try:
            if abi:
                confine.landlock(abi, writable_mounts(plan))
            os.execvp(argv[0], list(argv))
        except OSError as e:
            os.write(2, f"nbvalidation sandbox: cannot run {argv[0]}: {e}\n".encode())
            os._exit(127 if e.errno == errno.ENOENT else 126)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return 125
        except InterruptedError:
            continue
        if pid == kernel:
            os.write(status_fd, f"{status}\n".encode())
            return 0


def _read_report(fd: int, child: int, parent: int | None, select: Any) -> str:
    """What the namespace's first process reports (the kernel's wait status), read
    until it closes; meanwhile, the parent gone (ipykernel's parent poller, once a
    second): the namespace is killed."""
    data = b""
    while True:
        try:
            ready, _, _ = select.select([fd], [], [], 1.0)
        except InterruptedError:
            continue
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
        elif parent is not None and os.getppid() != parent:
            with _suppress():
                os.kill(child, signal.SIGKILL)
            parent = None
    os.close(fd)
    return data.decode("ascii", "replace").strip()


def launch(config_file: str, argv: Sequence[str]) -> int:
    """The launcher (see the module): returns the exit status, or dies by the
    kernel's signal."""
    for signum in GROUP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    try:
        with open(config_file, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError) as e:
        sys.stderr.write(f"nbvalidation sandbox: {config_file}: {e}\n")
        return 125
    plan = [tuple(str(x) for x in entry) for entry in config.get("mounts") or []]
    network = _sibling("netns").Network(config["network"]) if config.get("network") else None
    # imported before the namespace's mounts begin (the launcher shares them: a module of a
    # hidden interpreter could be missing for a moment while they are made)
    import select  # deferred: the runner's side never needs it
    idmap = None
    try:
        if config.get("bounds"):  # the memory cgroup and rlimits (runner/bounds.py)
            _sibling("bounds").apply(config["bounds"])
        if network is not None:
            network.start()
        extra = network.flags if network is not None else 0
        try:  # root: its kernel runs as nobody, reading what it must through idmapped mounts
            if confine.real_root() and config.get("idmap") != "skip":  # (skip: the probe's, detect says why)
                idmap = confine.idmap_userns(confine.NOBODY, confine.NOBODY)
                refused = confine.idmap_refused([p for kind, p, *_ in plan if kind in ("show", "write")], idmap,
                                                config.get("idmapFault"))
                if refused:  # never root's reach for the kernel: the run is refused, saying why
                    sys.stderr.write(f"nbvalidation sandbox: {REFUSED}: {confine.idmap_refusal(refused)}\n")
                    os.close(idmap)
                    if network is not None:
                        network.stop()
                    return 125
                _enter_namespaces(True, extra)
        except OSError:  # a root without the rights for it (a container's): as any user (detect says)
            if idmap is not None:
                os.close(idmap)
            idmap = None
        if idmap is None:
            _enter_namespaces(False, extra)
        if network is not None:
            network.inside(in_user_namespace=idmap is None)
    except OSError as e:
        sys.stderr.write(f"nbvalidation sandbox: {e}\n")
        if network is not None:
            network.stop()
        return 125
    # ipykernel stops when its parent changes (JPY_PARENT_PID, jupyter_client's pid): in the
    # namespace its parent is PID 1, which ipykernel never watches; the launcher watches for it
    parent = os.getppid()
    watch = os.environ.get("JPY_PARENT_PID") == str(parent)
    if "JPY_PARENT_PID" in os.environ:
        os.environ["JPY_PARENT_PID"] = "1"
    read_fd, write_fd = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read_fd)
        code = 125
        if network is not None:
            network.in_child()
        try:
            code = _first_process(plan, argv, write_fd, idmap)
        finally:
            os._exit(code)
    os.close(write_fd)
    if idmap is not None:
        os.close(idmap)
    report = _read_report(read_fd, child, parent if watch else None, select)
    while True:
        try:
            os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
        except ChildProcessError:
            break
    if network is not None:
        network.stop()
    if not report.lstrip("-").isdigit():
        return 125
    status = int(report)
    if os.WIFSIGNALED(status):
        killed_by = os.WTERMSIG(status)
        signal.signal(killed_by, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [killed_by])
        os.kill(os.getpid(), killed_by)
        time.sleep(1)
        return 128 + killed_by
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 125


# --- the runner's side ---------------------------------------------------------------


def wrap(argv: Sequence[str], config_file: str, *, python: str | None = None) -> list[str]:
    """The kernel's command ``argv`` run in the sandbox; ``config_file`` holds
    ``{"mounts": plan_mounts(...)}``. This file is loaded by path (:data:`BOOT`), as the
    package's own import would, and its :func:`main` runs."""
    return [python or sys.executable, "-I", "-S", "-c", BOOT, os.path.abspath(__file__), config_file, "--", *argv]


def kernel_mounts(*, hide: Iterable[str], show: Iterable[str], python: str, temp_dir: str,
                  write: Iterable[str] = (), scratch: Mapping[str, str] | None = None) -> list[tuple[str, ...]]:
    """The mounts for a kernel running ``python`` with its files in ``temp_dir``: the
    ``hide`` paths (and /tmp, /var/tmp, /dev/shm) hidden, the ``scratch`` folders
    ({path: folder}, paths among SCRATCH_PATHS) bound over their paths instead of a
    tmpfs, the ``show`` paths and the interpreter's environment shown read-only,
    ``temp_dir`` (the runner's: its owner record, the connection file) shown read-only,
    ``temp_dir/k`` (the kernel's HOME, its sockets, made here) and ``write`` (its working
    copy) shown writable. No link's target is shown: a link resolves in the kernel's own
    view, so one into a hidden path finds nothing there, as a missing file."""
    own = os.path.join(temp_dir, KERNEL_FOLDER)
    os.makedirs(own, mode=0o700, exist_ok=True)
    shown = [*show, *environment_paths(python), temp_dir]
    write = [own, *write]
    return plan_mounts([*HIDDEN_BY_DEFAULT, *hide, *confine.closed_ancestors([*shown, *write])], shown, scratch, write)


def main(args: Sequence[str]) -> int:
    """``CONFIG.json -- COMMAND...``: the launcher (:func:`launch`)."""
    if len(args) < 3 or args[1] != "--":
        sys.stderr.write("usage: sandbox.py CONFIG.json -- COMMAND...\n")
        return 2
    return launch(args[0], args[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
