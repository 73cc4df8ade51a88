"""``jupyter nbvalidation lock NOTEBOOK``: the exact pins of the environment of the notebook's
last success (or of ``--job``) as a requirements file (``pip install -r`` takes it). A local
``--find-links`` folder is written relative to the lock file (printed: to the current folder),
as pip and uv read it, so the lock works wherever its project is moved or cloned."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from jupyter_nbvalidation.cli.command import EXIT_OK, Command
from jupyter_nbvalidation.cli.connect import connect
from jupyter_nbvalidation.cli.last_success import last_success
from jupyter_nbvalidation.clients.base import ClientError
from jupyter_nbvalidation.clients.in_process import InProcess


def arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("notebook")
    s.add_argument("--job", help="the job whose environment to pin (default: the notebook's last success)")
    s.add_argument("-o", "--output", dest="lock_file", metavar="FILE",
                   help="write it to FILE (default: print it; - prints it)")


def portable(text: str, folder: Path) -> str:
    """``text`` with every ``--find-links`` line naming a local absolute folder made relative to
    ``folder`` (where the lock file is: pip and uv resolve such a path from the file's folder)."""
    out = []
    for line in text.splitlines(keepends=True):
        option, _, value = line.rstrip("\n").partition(" ")
        if option in ("--find-links", "-f") and os.path.isabs(value):
            try:
                rel = Path(os.path.relpath(value, folder.resolve())).as_posix()
            except ValueError:  # another drive: stays absolute
                rel = value
            line = f"{option} {rel}" + ("\n" if line.endswith("\n") else "")
        out.append(line)
    return "".join(out)


def cmd_lock(args: argparse.Namespace) -> int:
    """The pins of a job's environment (default: the notebook's last success) as a requirements file."""
    if not Path(args.notebook).is_file():
        raise ClientError(f"{args.notebook}: no such notebook")
    api = connect(args, args.notebook)
    try:
        path = api.api_path(args.notebook)
        if args.job:
            job = api.get(args.job)
            if job["spec"]["notebook"]["path"] != path:
                raise ClientError(f"job {args.job} is of {job['spec']['notebook']['path']}, not of {path}")
        else:
            found = last_success(api, path)
            if found is None:
                raise ClientError(f"{path} has no Succeeded job to pin (validate it first)")
            job = found
        text = api.lock(job["metadata"]["name"])
    finally:
        if isinstance(api, InProcess):
            api.close()
    if not args.lock_file or args.lock_file == "-":
        sys.stdout.write(portable(text, Path.cwd()))
        return EXIT_OK
    text = portable(text, Path(args.lock_file).parent)
    try:
        Path(args.lock_file).write_text(text, encoding="utf-8")
    except OSError as e:
        raise ClientError(f"-o {args.lock_file}: {e.strerror}") from None
    print(f"wrote the {sum(1 for ln in text.splitlines() if ln and not ln.startswith(('#', '-')))} pins of job "
          f"{job['metadata']['name']} to {args.lock_file}", file=sys.stderr)
    return EXIT_OK


LOCK = Command("lock", "write the exact pins of the environment of a notebook's last success as a "
                       "requirements file (uv pip install -r / pip install -r take it)", cmd_lock, arguments,
               parents="reach")
