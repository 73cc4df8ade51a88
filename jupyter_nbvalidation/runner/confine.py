"""What the sandboxed kernel may change, and as whom (Linux; standard library only).

Loaded by runner/sandbox.py by its path (that file runs as a script with ``python -I -S``
and imports nothing of the package), and used by it in the namespace's first process and
the kernel:

- :func:`set_readonly`: ``mount_setattr(2)``; every mount of the namespace is made
  read-only (recursively, from ``/``), then the run's own writable mounts are made
  writable again: a write (and a ``chmod``, ``utime``, ``rename``) anywhere else fails
  with ``EROFS``, whatever the file's owner;
- :func:`landlock`: a Landlock ruleset that handles every write access and allows them
  only beneath the writable folders (and on a few devices), applied to the kernel and
  all it starts (it cannot be undone); with ABI 6 and later, abstract UNIX sockets and
  signals are scoped to the kernel's own processes too;
- :func:`idmap_userns` and :func:`idmapped_bind`: when the server runs as root, the
  kernel runs as ``nobody``; what it must read (its environment, the project root, its
  working copy, its connection file) is bound through an idmapped mount on which root's
  files are nobody's (read-only but for the run's own folders), so a project in a 0700
  folder still works while ``/etc/shadow`` stays root's;
- :func:`drop_to`: the uid and gid switch (no supplementary groups).
"""

from __future__ import annotations

import ctypes
import errno
import os
from typing import Any, Iterable

SYS_OPEN_TREE = 428
SYS_MOVE_MOUNT = 429
SYS_MOUNT_SETATTR = 442
SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446
AT_FDCWD = -100
AT_EMPTY_PATH = 0x1000
AT_RECURSIVE = 0x8000
OPEN_TREE_CLONE = 1
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_IDMAP = 0x100000
CLONE_NEWUSER = 0x10000000
NOBODY = 65534
PR_SET_NO_NEW_PRIVS = 38
PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
# NOROOT, NO_SETUID_FIXUP, NO_CAP_AMBIENT_RAISE, each with its lock, and KEEP_CAPS_LOCKED
SECUREBITS = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80
CAP_VERSION_3 = 0x20080522
# Landlock's filesystem rights (linux/landlock.h)
WRITE_FILE, REMOVE_DIR, REMOVE_FILE = 1 << 1, 1 << 4, 1 << 5
MAKE_CHAR, MAKE_DIR, MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = (1 << n for n in range(6, 13))
REFER, TRUNCATE = 1 << 13, 1 << 14
LANDLOCK_RULE_PATH_BENEATH = 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1, 2
# the devices a kernel writes to (a terminal, the null device, random numbers)
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx")
DEVICE_DIRS = ("/dev/pts",)


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc: Any = None


def _c() -> Any:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
    return _libc


def _sys(number: int, *args: Any, what: str) -> int:
    result = int(_c().syscall(ctypes.c_long(number), *args))
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def set_readonly(path: str, readonly: bool, *, recursive: bool = False) -> None:
    """The mount at ``path`` (and, recursive, every mount beneath it) read-only or writable."""
    attr = _MountAttr(MOUNT_ATTR_RDONLY if readonly else 0, 0 if readonly else MOUNT_ATTR_RDONLY, 0, 0)
    _sys(SYS_MOUNT_SETATTR, ctypes.c_int(AT_FDCWD), ctypes.c_char_p(path.encode()),
         ctypes.c_uint(AT_RECURSIVE if recursive else 0), ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)),
         what=f"read-only {path}" if readonly else f"writable {path}")


def real_root() -> bool:
    """Root of the machine: uid 0 in the initial user namespace (not a container's root
    mapped to another uid, which gets the sandbox of any other user)."""
    if os.geteuid() != 0:
        return False
    try:
        with open("/proc/self/uid_map", encoding="ascii") as f:
            return f.read().split() == ["0", "0", "4294967295"]
    except OSError:
        return False


def closed_ancestors(paths: Iterable[str]) -> list[str]:
    """Root only (its kernel runs as nobody): the folders above ``paths`` that others
    cannot pass through, to be hidden by a tmpfs others can pass through (nobody
    could not see into them anyway); nothing for another user."""
    if not real_root():
        return []
    out: set[str] = set()
    for path in paths:
        real = os.path.realpath(path)
        while real != "/":
            real = os.path.dirname(real)
            try:
                if not os.stat(real).st_mode & 0o001:
                    out.add(real)
            except OSError:
                break
    return sorted(out)


def idmap_userns(uid: int, gid: int) -> int:
    """A descriptor of a new user namespace in which id 0 is ``uid``/``gid`` (root
    only: an idmapped mount's mapping, root's files shown as ``uid``'s)."""
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(ready_r)
        os.close(go_w)
        err = 0 if _c().unshare(ctypes.c_int(CLONE_NEWUSER)) == 0 else ctypes.get_errno()
        os.write(ready_w, str(err).encode())
        os.read(go_r, 1)  # held until the maps are written and the namespace is opened
        os._exit(0)
    os.close(ready_w)
    os.close(go_r)
    try:
        err = int(os.read(ready_r, 16) or b"0")
        if err:
            raise OSError(err, f"unshare(CLONE_NEWUSER) for the idmapped mounts: {os.strerror(err)}")
        for name, ident in (("uid_map", uid), ("gid_map", gid)):
            fd = os.open(f"/proc/{child}/{name}", os.O_WRONLY)
            try:
                os.write(fd, f"0 {ident} 1\n".encode())
            finally:
                os.close(fd)
        return os.open(f"/proc/{child}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(go_w)
        os.close(ready_r)
        os.waitpid(child, 0)


def idmapped_bind(source_fd: int, target: str, userns_fd: int, *, readonly: bool) -> None:
    """What ``source_fd`` holds bound at ``target`` through an idmapped mount (its
    owners mapped by ``userns_fd``), read-only unless ``readonly`` is False."""
    tree = _sys(SYS_OPEN_TREE, ctypes.c_int(source_fd), ctypes.c_char_p(b""),
                ctypes.c_uint(OPEN_TREE_CLONE | os.O_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE), what=f"clone {target}")
    try:
        attr = _MountAttr(MOUNT_ATTR_IDMAP | (MOUNT_ATTR_RDONLY if readonly else 0), 0, 0, userns_fd)
        _sys(SYS_MOUNT_SETATTR, ctypes.c_int(tree), ctypes.c_char_p(b""), ctypes.c_uint(AT_EMPTY_PATH | AT_RECURSIVE),
             ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), what=f"idmap {target}")
        _sys(SYS_MOVE_MOUNT, ctypes.c_int(tree), ctypes.c_char_p(b""), ctypes.c_int(AT_FDCWD),
             ctypes.c_char_p(target.encode()), ctypes.c_uint(MOVE_MOUNT_F_EMPTY_PATH), what=f"attach {target}")
    finally:
        os.close(tree)


def idmap_refused(paths: Iterable[str], userns_fd: int, fault: str | None = None) -> str | None:
    """The first of ``paths`` on whose filesystem an idmapped mount is refused (NFS, overlayfs, a
    Linux before 5.12: ``mount_setattr(MOUNT_ATTR_IDMAP)`` fails with EINVAL or EPERM), as
    "PATH (why)", or None when each takes one. Tried on a detached copy of each (nothing is
    mounted). ``fault``, an errno name (fault injection, the tests'), refuses the first path."""
    for path in paths:
        try:
            if fault:
                code = getattr(errno, fault, errno.EINVAL)
                raise OSError(code, f"{os.strerror(code)}, injected")
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                tree = _sys(SYS_OPEN_TREE, ctypes.c_int(fd), ctypes.c_char_p(b""),
                            ctypes.c_uint(OPEN_TREE_CLONE | os.O_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE),
                            what=f"clone {path}")
            finally:
                os.close(fd)
            try:
                attr = _MountAttr(MOUNT_ATTR_IDMAP, 0, 0, userns_fd)
                _sys(SYS_MOUNT_SETATTR, ctypes.c_int(tree), ctypes.c_char_p(b""),
                     ctypes.c_uint(AT_EMPTY_PATH | AT_RECURSIVE), ctypes.byref(attr),
                     ctypes.c_size_t(ctypes.sizeof(attr)), what=f"idmap {path}")
            finally:
                os.close(tree)
        except OSError as e:
            why = str(e.strerror or e).split(": ")[-1]
            return f"{path} ({why})"
    return None


def idmap_refusal(where: str) -> str:
    """What a root server's run says when idmapped mounts are refused (:func:`idmap_refused`):
    its kernel would keep root's reach, so it never runs."""
    return (f"idmapped mounts are refused on {where}, so the kernel cannot run as nobody; a root server's "
            "kernel never runs as root, so this run is refused. Run the server as another user, or keep the "
            "data dir, the project and the environments on a filesystem with idmapped mounts (ext4, xfs, btrfs, "
            "tmpfs; not NFS or overlayfs)")


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def drop_capabilities(user: tuple[int, int] | None) -> None:
    """No capability left (nor any to gain by exec); ``user`` (uid, gid): switched to first."""
    libc = _c()
    _check(libc.prctl(ctypes.c_int(PR_SET_NO_NEW_PRIVS), ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0),
                      ctypes.c_ulong(0)), "no_new_privs")
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read().strip())
    except (OSError, ValueError):
        last = 63
    for cap in range(last + 1):
        libc.prctl(ctypes.c_int(PR_CAPBSET_DROP), ctypes.c_ulong(cap), ctypes.c_ulong(0), ctypes.c_ulong(0),
                   ctypes.c_ulong(0))
    _check(libc.prctl(ctypes.c_int(PR_SET_SECUREBITS), ctypes.c_ulong(SECUREBITS), ctypes.c_ulong(0),
                      ctypes.c_ulong(0), ctypes.c_ulong(0)), "securebits")
    if user is not None:  # with the securebits set, the switch keeps the capabilities: cleared next
        drop_to(*user)

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    header, data = Header(CAP_VERSION_3, 0), (Data * 2)()
    _check(libc.capset(ctypes.byref(header), ctypes.byref(data)), "capset")


def write_rights(abi: int) -> int:
    rights = WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_CHAR | MAKE_DIR | MAKE_REG | MAKE_SOCK | MAKE_FIFO
    rights |= MAKE_BLOCK | MAKE_SYM
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    return rights


def landlock(abi: int, writable: Iterable[str]) -> None:
    """Writes allowed beneath ``writable`` (and on :data:`DEVICES`) only, for this
    process and all it starts; with ABI 6+, abstract UNIX sockets and signals scoped."""
    rights = write_rights(abi)
    attr = _RulesetAttr(rights, 0, (SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL) if abi >= 6 else 0)
    size = ctypes.sizeof(attr) if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = _sys(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0),
                   what="landlock ruleset")
    try:
        rules = [(p, rights) for p in (*writable, *DEVICE_DIRS)]
        rules += [(p, rights & (WRITE_FILE | TRUNCATE)) for p in DEVICES]
        for path, allowed in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # not on this machine (or not seen): nothing to allow
            try:
                rule = _PathBeneath(allowed, fd)
                _sys(SYS_LANDLOCK_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(LANDLOCK_RULE_PATH_BENEATH),
                     ctypes.byref(rule), ctypes.c_uint32(0), what=f"landlock rule {path}")
            finally:
                os.close(fd)
        _sys(SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0), what="landlock")
    finally:
        os.close(ruleset)


def drop_to(uid: int, gid: int) -> None:
    """This process as ``uid``:``gid``, without supplementary groups."""
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)


def protections(write_error: str, abi: int | None, uid: Any, idmap_refused: str | None = None) -> dict[str, Any]:
    """What the probe's kernel showed (a write to a shown folder failed with
    ``write_error``, it ran as ``uid``; idmapped mounts refused on ``idmap_refused``) as
    /health says it: ``uses`` and ``missing``."""
    root = real_root()
    uses = ["pid namespace", "mount namespace", "ipc namespace", "no capabilities", "no_new_privs",
            "links resolved in the kernel's view"]
    uses = (["user namespace"] if not root else []) + uses
    missing = []
    if write_error == "EROFS":
        uses.append("read-only mounts")
    else:
        missing.append("read-only mounts (Linux before 5.12): a file's mode and times can change where its "
                       "owner's rights allow")
    if abi:
        uses.append(f"landlock (writes, ABI {abi})")
    else:
        missing.append("landlock: writes are confined by the read-only mounts only")
    if root and idmap_refused is not None:
        missing.append(f"unprivileged uid: {idmap_refusal(idmap_refused)}")
    elif root and uid == NOBODY:
        uses.append("unprivileged uid (nobody, idmapped mounts)")
    elif root:
        missing.append("unprivileged uid: the kernel runs as root")
    return {"uses": uses, "missing": missing}
