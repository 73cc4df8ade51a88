"""``jupyter nbvalidation store check|recover``: the local backend's SQLite store, when it is
damaged (a disk fault, a copy taken while it was written). ``check`` says whether it is sound
(exit 0) or what is wrong (exit 3); ``recover`` salvages every job and event it can still read
into a new file, keeps the damaged one beside it, and says what it kept."""

from __future__ import annotations

import argparse
import os
import sys

from jupyter_nbvalidation.cli.command import EXIT_ERROR, EXIT_INFRASTRUCTURE, EXIT_OK, Command, out
from jupyter_nbvalidation.composition import local_store_file
from jupyter_nbvalidation.store.recovery import StoreInUse, check, recover


def cmd_store(args: argparse.Namespace) -> int:
    if args.server:
        print("error: --server: `store` works on this machine's data dir (--data-dir), not a server's", file=sys.stderr)
        return EXIT_ERROR
    path = local_store_file(args.data_dir)
    if not os.path.isfile(path):
        print(f"error: there is no job store at {path}", file=sys.stderr)
        return EXIT_ERROR
    if args.action == "check":
        problems = check(path)
        text = f"{path}: sound" if not problems else f"{path}: damaged\n" + "\n".join(f"  {p}" for p in problems) + (
            "\nrun `jupyter nbvalidation store recover` once nothing uses it")
        out(args, {"file": path, "sound": not problems, "problems": problems}, text)
        return EXIT_OK if not problems else EXIT_INFRASTRUCTURE
    try:
        report = recover(path)
    except StoreInUse as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except OSError as e:
        print(f"error: {path} could not be recovered: {e}", file=sys.stderr)
        return EXIT_INFRASTRUCTURE
    lost = ", ".join(f"{n} damaged spot(s) in {t}" for t, n in report.unreadable.items()) or "nothing unreadable"
    text = (f"{path}: recovered {report.rows.get('jobs', 0)} job(s) and {report.rows.get('events', 0)} event(s) "
            f"({lost}); the damaged file is kept as {report.damaged_file}")
    out(args, {"file": path, "rows": report.rows, "unreadable": report.unreadable,
               "damagedFile": report.damaged_file}, text)
    return EXIT_OK


def arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("action", choices=["check", "recover"], metavar="action",
                   help="check: is the store sound (exit 0) or damaged (exit 3); recover: salvage what can be read "
                        "into a new file, keeping the damaged one beside it (stop the server first)")


STORE = Command("store", "local backend: check the job store, or recover a damaged one", cmd_store, arguments)
