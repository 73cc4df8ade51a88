"""The kernel in a sandbox (Linux, no root needed): what it can see of the machine.

The kernel's command is wrapped by this file, run as a script by the runner's own
interpreter (``python -I -S sandbox.py CONFIG -- KERNEL ARGV...``; standard library
only, nothing of the package is imported). The launcher:

1. ``unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID)``, the user mapped to
   itself (the same uid and gid inside: files, ``os.getuid()`` are as without it);
2. forks the namespace's first process (PID 1 there), which mounts a fresh
   ``/proc`` (only the kernel's own processes: not the server's or the runner's
   ``/proc/<pid>/environ`` nor ``cmdline``), puts an empty tmpfs over each *hidden*
   path (the data dir: the store, other jobs' folders and environments; the
   server's Jupyter runtime dir: ``jpserver-*.json`` holds its token, other
   kernels' connection files; the user's HOME; ``/dev/shm``), binds a *scratch*
   folder on disk over ``/tmp`` and ``/var/tmp`` (fresh, empty folders of the
   attempt, made by the caller inside its run folder, so that a notebook's
   scratch files there take disk as they would without the sandbox, not memory;
   with no scratch folder given, an empty tmpfs hides them too), then bind-mounts
   again, at their own paths and with their own rights, the *shown* paths that a
   hidden one covers (the project root, the attempt's working copy, the targets
   of the links it keeps, the kernel's environment and its base interpreter, the
   runner's temporary folder with the kernel's connection file). The deepest
   rule wins: the data dir inside the root stays hidden, the job's environment
   inside the data dir stays visible; a scratch folder (inside the hidden data
   dir) is seen only where it is bound, its handle taken before anything is hidden;
3. drops every capability (bounding set, securebits ``NOROOT``, ``no_new_privs``):
   the kernel cannot undo a mount nor mount another ``/proc``;
4. forks the kernel (PID 2, signals at their defaults, the ones Python ignores
   restored) and reaps the namespace's orphans until it exits; then everything
   left in the namespace is killed by the kernel, and the launcher exits as the
   kernel did (by the same signal).

The launcher, the namespace's first process and the kernel are one process group
(jupyter_client signals the group): the first two ignore SIGINT, SIGTERM, SIGHUP,
SIGQUIT, so an interrupt reaches the kernel once and a terminate ends it as
without the sandbox; a SIGKILL to the group ends the namespace.

:func:`detect` (run once at start, in a thread) tries it for real and says what
is used, or why it cannot be.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import signal
import stat
import subprocess
import sys
import time
from typing import Any, Iterable, Mapping, Sequence

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
PR_SET_NO_NEW_PRIVS = 38
PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_SET_PDEATHSIG = 1
# NOROOT, NO_SETUID_FIXUP, NO_CAP_AMBIENT_RAISE, each with its lock, and KEEP_CAPS_LOCKED
SECUREBITS = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80
CAP_VERSION_3 = 0x20080522
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

_libc: Any = None
_bounds_module: Any = None


def _bounds() -> Any:
    """runner/bounds.py beside this file, loaded by path (this script imports nothing of the package)."""
    global _bounds_module
    if _bounds_module is None:
        import importlib.util  # deferred: start-up time of every sandboxed process (run as a script with -I -S)

        spec = importlib.util.spec_from_file_location("_nbvalidation_bounds",
                                                      os.path.join(os.path.dirname(__file__), "bounds.py"))
        assert spec is not None and spec.loader is not None
        _bounds_module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_bounds_module)
    return _bounds_module


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


def link_targets(top: str, limit: int = 100000) -> list[str]:
    """The real targets of the symbolic links under ``top`` (the kernel's working
    copy; links are not followed). Bounded; what cannot be read is skipped."""
    found: set[str] = set()
    seen = 0
    for dirpath, dirnames, filenames in os.walk(top, onerror=lambda e: None):
        for name in dirnames + filenames:
            seen += 1
            if seen > limit:
                return sorted(found)
            path = os.path.join(dirpath, name)
            try:
                if os.path.islink(path):
                    real = _real(path)
                    if real is not None:
                        found.add(real)
            except OSError:
                continue
    return sorted(found)


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
    return [p for p in dict.fromkeys(_real(p) for p in out) if p]


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


def plan_mounts(hide: Iterable[str], show: Iterable[str],
                scratch: Mapping[str, str] | None = None) -> list[tuple[str, ...]]:
    """The mounts to make, in order: ("hide", path) an empty tmpfs, ("show", path)
    the real path bound again, ("bind", path, folder) the folder bound at path
    (``scratch``: {path: folder}; the path is hidden by it, whatever covers it,
    and the folder is seen there only). Paths are made real (missing ones
    dropped); the deepest rule covering a path decides whether it is seen; a show
    not covered by any hide is already seen (nothing to do); a hide covered by
    another is too."""
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
    out: list[tuple[str, ...]] = []
    for path in sorted(rules, key=lambda p: (p.count("/"), p)):
        kind = rules[path]
        above = [p for p in rules if p != path and _inside(path, p)]
        covering = rules[max(above, key=len)] if above else None
        if kind == "hide" and path in sources:
            out.append(("bind", path, sources[path]))
        elif kind == "hide" and covering != "hide":
            out.append((kind, path))
        elif kind == "show" and covering == "hide":
            out.append((kind, path))
    return out


# --- the launcher ------------------------------------------------------------------


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _enter_namespaces() -> None:
    uid, gid = os.geteuid(), os.getegid()
    _check(_c().unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID), "unshare")
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


def _set_up_mounts(plan: Sequence[Sequence[str]]) -> None:
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    fds = {}
    for kind, path, *source in plan:  # handles on what is shown, taken before anything hides it
        if kind == "show":
            fds[path] = os.open(path, os.O_PATH | os.O_CLOEXEC)
        elif kind == "bind":  # a scratch folder, inside the (hidden) data dir
            fds[path] = os.open(source[0], os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    for kind, path, *_ in plan:
        if kind == "hide":
            mode = stat.S_IMODE(os.stat(path).st_mode)
            _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={mode:o}")
        elif kind == "bind":
            _make_mountpoint(path, True)
            _mount(f"/proc/self/fd/{fds[path]}", path, None, MS_BIND)
        else:
            fd = fds[path]
            _make_mountpoint(path, stat.S_ISDIR(os.fstat(fd).st_mode))
            _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
    for fd in fds.values():
        os.close(fd)


def _drop_capabilities() -> None:
    libc = _c()
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read().strip())
    except (OSError, ValueError):
        last = 63
    for cap in range(last + 1):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    _check(libc.prctl(PR_SET_SECUREBITS, SECUREBITS, 0, 0, 0), "securebits")

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    header, data = Header(CAP_VERSION_3, 0), (Data * 2)()
    _check(libc.capset(ctypes.byref(header), ctypes.byref(data)), "capset")


def _restore_signals() -> None:
    for signum in (*GROUP_SIGNALS, signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def _first_process(plan: Sequence[Sequence[str]], argv: Sequence[str], status_fd: int) -> int:
    """PID 1 of the namespace: the mounts, no capabilities, the kernel, the reaping."""
    cwd = os.getcwd()
    _c().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # the launcher gone: the namespace goes
    try:
        _set_up_mounts(plan)
        if _bounds_module is not None:  # its /dev/shm, of the run's disk budget (runner/bounds.py)
            _bounds_module.mount_shm(_mount, MS_NOSUID | MS_NODEV)
        os.chdir(cwd)  # the visible copy of it (a bind mount over a hidden path)
        _drop_capabilities()
    except OSError as e:
        os.write(2, f"nbvalidation sandbox: {e}\n".encode())
        os.write(status_fd, b"setup-failed\n")
        return 125
    kernel = os.fork()
    if kernel == 0:
        os.close(status_fd)
        _restore_signals()
        try:
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


def _read_report(fd: int, child: int, parent: int | None) -> str:
    """What the namespace's first process reports (the kernel's wait status), read
    until it closes; meanwhile, the parent gone (ipykernel's parent poller, once a
    second): the namespace is killed."""
    import select  # deferred: start-up time of every sandboxed process (run as a script with -I -S)

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
    try:
        if config.get("bounds"):  # the memory cgroup and rlimits (runner/bounds.py)
            _bounds().apply(config["bounds"])
        _enter_namespaces()
    except OSError as e:
        sys.stderr.write(f"nbvalidation sandbox: {e}\n")
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
        try:
            code = _first_process(plan, argv, write_fd)
        finally:
            os._exit(code)
    os.close(write_fd)
    report = _read_report(read_fd, child, parent if watch else None)
    while True:
        try:
            os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
        except ChildProcessError:
            break
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
    ``{"mounts": plan_mounts(...)}``."""
    return [python or sys.executable, "-I", "-S", os.path.abspath(__file__), config_file, "--", *argv]


def kernel_mounts(*, hide: Iterable[str], show: Iterable[str], python: str, links: Iterable[str],
                  temp_dir: str, scratch: Mapping[str, str] | None = None) -> list[tuple[str, ...]]:
    """The mounts for a kernel running ``python`` with its files in ``temp_dir``: the
    ``hide`` paths (and /tmp, /var/tmp, /dev/shm) hidden, the ``scratch`` folders
    ({path: folder}, paths among SCRATCH_PATHS) bound over their paths instead of a
    tmpfs, the ``show`` paths, the interpreter's environment, ``temp_dir`` and the
    targets of the links found under ``links`` (the working copy) shown."""
    shown = [*show, temp_dir, *environment_paths(python)]
    for top in links:
        shown += link_targets(top)
    return plan_mounts([*HIDDEN_BY_DEFAULT, *hide], shown, scratch)


def detect(python: str | None = None) -> dict[str, Any]:
    """Whether the sandbox works here, tried for real (blocks: call it in a thread):
    ``{"available": bool, "uses": [...], "reason": str | None, "landlockAbi": int | None}``."""
    info: dict[str, Any] = {"available": False, "uses": [], "reason": None, "landlockAbi": landlock_abi()}
    if not sys.platform.startswith("linux"):
        info["reason"] = f"not Linux ({sys.platform}): no namespaces"
        return info
    import tempfile  # deferred: start-up time of every sandboxed process (run as a script with -I -S)

    with tempfile.TemporaryDirectory(prefix="nbvalidation-sandbox-probe-") as tmp:
        secret = os.path.join(tmp, "hidden", "secret")
        os.makedirs(os.path.dirname(secret))
        with open(secret, "w") as f:
            f.write("x")
        shown = os.path.join(tmp, "hidden", "shown")
        os.makedirs(shown)
        # a scratch folder inside the hidden one, seen at /tmp only (as a run's, see kernel_mounts)
        scratch = os.path.join(tmp, "hidden", "scratch")
        os.makedirs(scratch)
        mark = os.path.basename(tmp) + ".mark"
        open(os.path.join(scratch, mark), "w").close()
        probe = ("import os,sys\n"
                 "ok = os.getpid() == 2 and not os.path.exists(sys.argv[1]) and os.path.isdir(sys.argv[2])\n"
                 "ok = ok and sorted(p for p in os.listdir('/proc') if p.isdigit()) == ['1', '2']\n"
                 "ok = ok and os.path.exists('/tmp/' + sys.argv[3]) and not os.path.exists(sys.argv[4])\n"
                 "print('sandboxed' if ok else 'not sandboxed')\n")
        python = python or sys.executable
        config = os.path.join(tmp, "sandbox.json")
        with open(config, "w", encoding="utf-8") as f:
            mounts = plan_mounts([os.path.join(tmp, "hidden")], [shown, tmp, *environment_paths(python)],
                                 {"/tmp": scratch})
            json.dump({"mounts": mounts}, f)
        argv = wrap([python, "-I", "-S", "-c", probe, secret, shown, mark, scratch], config)
        try:
            proc = subprocess.run(argv, capture_output=True, timeout=PROBE_TIMEOUT, cwd=tmp,
                                  env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
        except (OSError, subprocess.TimeoutExpired) as e:
            info["reason"] = f"the probe could not run: {e}"
            return info
    out = proc.stdout.decode(errors="replace").strip()
    if proc.returncode == 0 and out == "sandboxed":
        info.update(available=True, uses=["user namespace", "pid namespace", "mount namespace",
                                          "no capabilities", "no_new_privs"])
        return info
    err = [ln for ln in proc.stderr.decode(errors="replace").splitlines() if ln.strip()]
    info["reason"] = (err[-1] if err else out or f"the probe exited with {proc.returncode}")[:500]
    return info


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) < 3 or args[1] != "--":
        sys.stderr.write("usage: sandbox.py CONFIG.json -- COMMAND...\n")
        sys.exit(2)
    sys.exit(launch(args[0], args[2:]))
