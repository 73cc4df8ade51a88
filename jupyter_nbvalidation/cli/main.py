"""``jupyter nbvalidation`` — submit, list, describe, events, cancel, delete, gc, install.

Talks to a running Jupyter server through the REST API when one serves the
notebook's folder; otherwise (local backend) works on the same data dir
itself, and ``submit`` runs an engine in this process until the verdict: it
reconciles when it gets the data dir's lease, and otherwise only submits and
waits while the holder (a server or another CLI on the same data dir) works.
Exit code 0 when the job succeeded, 1 when it failed, 2 on a usage or input
error — so ``jupyter nbvalidation submit nb.ipynb --wait`` can gate CI.

Each command is a module of this folder declaring a ``cli.command.Command`` (its name, help,
arguments and function: ``submit.py``, ``run.py``, ``show.py`` (list, describe, events),
``bisect.py``, ``lock.py``, ``manage.py`` (cancel, delete, gc), ``schedule.py``, ``install.py``). A new command
is one new module and one line in :data:`COMMANDS` below, which also sets its place in
``--help``. What they share: ``command.py`` (the Command, the exit statuses, ``-o json``),
``connect.py`` (which client: a server's or this process's), ``spec_options.py`` (the spec
options), ``interrupts.py`` (Ctrl-C), ``follow.py`` and ``render.py`` (what is printed).
This module keeps :func:`parser` (the docs' CLI reference is generated from it) and
:func:`main` (the console script).
"""

from __future__ import annotations

import argparse
import sys

from jupyter_nbvalidation.cli import bisect, hub, install, lock, manage, run, schedule, show, store, submit
from jupyter_nbvalidation.cli.command import EXIT_ERROR, EXIT_INFRASTRUCTURE, EXIT_INTERRUPTED, Command
from jupyter_nbvalidation.clients.base import ClientError
from jupyter_nbvalidation.clients.in_process import InProcess
from jupyter_nbvalidation.core.errors import Conflict, NoSpace, NotFound, StoreBroken, StoreError

#: the subcommands, in the order ``--help`` lists them
COMMANDS: tuple[Command, ...] = (
    submit.SUBMIT,
    run.RUN,
    show.LIST,
    bisect.BISECT,
    lock.LOCK,
    show.DESCRIBE,
    show.EVENTS,
    manage.CANCEL,
    manage.DELETE,
    manage.GC,
    schedule.SCHEDULE,
    store.STORE,
    install.INSTALL,
    hub.SERVICE,
    hub.HUB_CONFIG,
)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jupyter nbvalidation", description=__doc__.split("\n\n")[0])
    reach = argparse.ArgumentParser(add_help=False)  # where the jobs are
    reach.add_argument("--server", help="URL of a Jupyter server (default: discovered from runtime files)")
    reach.add_argument("--token", help="that server's token (default: $JUPYTER_TOKEN)")
    reach.add_argument("--local", action="store_true", help="never use a running server; work on the data dir")
    reach.add_argument("--root-dir", help="root for notebook paths (default: the server's, or the current dir)")
    reach.add_argument("--data-dir", help="local backend data dir (default: <jupyter data dir>/nbvalidation)")
    common = argparse.ArgumentParser(add_help=False, parents=[reach])
    common.add_argument("--output", "-o", choices=["text", "json"], default="text")
    parents = {"common": [common], "reach": [reach], "none": []}
    sub = p.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        s = sub.add_parser(command.name, parents=parents[command.parents], help=command.help)
        command.arguments(s)
        s.set_defaults(func=command.run)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        rc: int = args.func(args)  # a Command's run (set_defaults in parser())
        return rc
    except ClientError as e:
        print(f"error: {e}", file=sys.stderr)
        # a server's 5xx (its store unavailable, its disk full) is not the user's input: infrastructure
        return EXIT_INFRASTRUCTURE if (e.status or 0) >= 500 else EXIT_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except StoreError as e:
        if isinstance(e, (NotFound, Conflict)):
            raise
        # the data dir's store cannot be read or written: not the notebook's fault, not the user's input
        where = getattr(args, "data_dir", None) or "the default data dir"
        hint = "; try again"
        if isinstance(e, NoSpace):
            hint = "; free some space there, then run again (the jobs recorded so far are kept)"
        elif isinstance(e, StoreBroken):
            hint = ("" if "store recover" in str(e) else "; `jupyter nbvalidation store recover` salvages what it "
                    "can into a new file and keeps the damaged one beside it")
        print(f"error: the job store in {where} is not usable: {e}{hint}", file=sys.stderr)
        return EXIT_INFRASTRUCTURE
    finally:
        close_open_clients()


def close_open_clients() -> None:
    """What a command left open in this process (its in-process service and store) is closed
    before the process exits: no pending task is destroyed at exit, and a Ctrl-C during the close
    is not a traceback."""
    try:
        InProcess.close_all()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
