"""The kernel's reads, recorded by an audit hook in its own process (verdict/readset.py
turns them into the read-set the verdict cache re-checks).

:func:`install` runs a silent execute before the first cell (nothing of the notebook
changes, nothing lands in its namespace or history): it adds an audit hook
(``sys.addaudithook``) that keeps, in a set, each path the kernel opens (``open``, also
``os.open`` and what ``import`` reads), lists (``os.listdir``, ``os.scandir``) or executes
(``subprocess.Popen``, ``os.exec*``, ``os.posix_spawn``, ``os.spawn*``, ``os.system``: the
program and its arguments), a relative one with the working folder of the moment. Nothing
is hashed or resolved in the kernel: that is done by the runner after the run.
:func:`collect`, after the last cell, stops the recording and fetches the set, the files
of the modules imported (``sys.modules``: also what was imported before the hook) and the
folders of the kernel's environment as they were when the hook was added.

A notebook can see and defeat the hook (it runs in its own process): the read-set is an
account of what an honest notebook read, not a wall."""

from __future__ import annotations

import ast
import json
from typing import Any

from jupyter_nbvalidation.core.tasks import wait_within
from jupyter_nbvalidation.runner.kernel import shell_reply

_NAME = "_nbvalidation_reads"  # the attribute of the kernel's sys that fetches the record

INSTALL = r'''
def _nbvalidation_install_reads():
    import json, os, sys
    if getattr(sys, "_nbvalidation_reads", None) is not None or not hasattr(sys, "addaudithook"):
        return
    seen = set()
    add, getcwd, fspath, fsdecode = seen.add, os.getcwd, os.fspath, os.fsdecode
    on = [True]
    paths = {"open": "f", "os.listdir": "d", "os.scandir": "d"}
    runs = frozenset(("subprocess.Popen", "os.exec", "os.posix_spawn", "os.spawn", "os.system"))
    environment = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix,
                   *(p for p in sys.path if isinstance(p, str) and p.startswith("/"))]

    def text(p):
        if p.__class__ is str:
            return p
        p = fspath(p)
        return p if p.__class__ is str else fsdecode(p)

    def hook(event, args):
        kind = paths.get(event)
        if kind is not None:
            if on[0]:
                p = args[0]
                try:  # never fail the notebook's own call (a hook's exception would)
                    if p.__class__ is not str:
                        if p.__class__ is int:
                            return
                        p = "." if p is None else text(p)
                    add((kind, p) if p[:1] == "/" else (kind, p, getcwd()))
                except Exception:  # a working folder removed under the kernel: not placeable
                    add(("f", "/<unknown working folder>"))
        elif event in runs and on[0]:
            try:
                if event == "subprocess.Popen":
                    program, argv, cwd = args[0], args[1], args[2]
                elif event == "os.spawn":
                    program, argv, cwd = args[1], args[2], None
                elif event == "os.system":
                    program, argv, cwd = args[0], (), None
                else:
                    program, argv, cwd = args[0], args[1], None
                words = [program] if program is not None else []
                words += [argv] if isinstance(argv, (str, bytes)) else list(argv or ())
                add(("x", text(cwd) if cwd is not None else getcwd(), *(text(w) for w in words)))
            except Exception:
                add(("f", "/<unreadable command>"))

    def dump():
        on[0] = False
        modules = [m.__file__ for m in list(sys.modules.values()) if isinstance(getattr(m, "__file__", None), str)]
        return json.dumps({"reads": sorted(map(list, seen)), "modules": modules, "cwd": getcwd(),
                           "environment": environment})

    sys._nbvalidation_reads = dump
    sys.addaudithook(hook)

_nbvalidation_install_reads()
del _nbvalidation_install_reads
'''

COLLECT = f"__import__('sys').{_NAME}()"
REPLY_TIMEOUT = 60.0


async def install(kc: Any) -> bool:
    """Add the hook in the kernel (a silent execute); whether it is there."""
    msg_id = kc.execute(INSTALL, silent=True, store_history=False,
                        user_expressions={"ok": f"hasattr(__import__('sys'), {_NAME!r})"})
    try:
        reply = await wait_within(shell_reply(kc, msg_id), REPLY_TIMEOUT)
        return bool(reply["content"]["status"] == "ok"
                    and reply["content"]["user_expressions"]["ok"]["data"]["text/plain"] == "True")
    except Exception:  # no reply in time, a kernel that died: no hook, no cache
        return False


async def collect(kc: Any) -> dict[str, Any] | None:
    """The hook's record (recording stops), or None when it cannot be read."""
    msg_id = kc.execute("", silent=True, store_history=False, user_expressions={"reads": COLLECT})
    try:
        reply = await wait_within(shell_reply(kc, msg_id), REPLY_TIMEOUT)
        value = reply["content"]["user_expressions"]["reads"]["data"]["text/plain"]
        doc = json.loads(ast.literal_eval(value))
    except Exception:  # no reply in time, an unreadable one: not cacheable
        return None
    return doc if isinstance(doc, dict) else None
