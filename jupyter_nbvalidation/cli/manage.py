"""Changing jobs: ``cancel``, ``delete`` and (local backend) ``gc``."""

from __future__ import annotations

import argparse
import os

from jupyter_nbvalidation.cli.command import EXIT_OK, Command, name_argument, out
from jupyter_nbvalidation.cli.connect import connect, in_process


def cmd_cancel(args: argparse.Namespace) -> int:
    api = connect(args)
    job = api.cancel(args.name)
    out(args, job, f"{args.name}: cancellation requested")
    return EXIT_OK


def cmd_delete(args: argparse.Namespace) -> int:
    api = connect(args)
    code, answer = api.delete(args.name)
    if code == 202:
        out(args, answer, f"{args.name}: still running; cancellation requested (delete it once it has finished)")
    else:
        out(args, answer, f"{args.name}: deleted (job, events and files)")
    return EXIT_OK


def cmd_gc(args: argparse.Namespace) -> int:
    """Local backend: remove expired jobs and evict environments over the cache cap; say what went."""
    root = args.root_dir or os.getcwd()
    api = in_process(root, args.data_dir)
    try:
        report = api.gc(args.job_ttl, args.env_cache_max_bytes)
    finally:
        api.close()
    lines = [f"removed job {j['name']} (finished {j['completionTime']})" for j in report["jobs"]]
    lines += [f"removed leftover job folder {d}" for d in report["orphanDirs"]]
    lines += [f"removed environment {e['key']} ({e['bytes'] / 2**20:.1f} MiB, last used {e['lastUse']})"
              for e in report["envs"]]
    lines += [f"removed the files of commit {c} (no job of it is left)" for c in report.get("gitTrees", [])]
    lines += [f"removed the fetched repository {r} (not fetched for NBValidation.git_cache_ttl)"
              for r in report.get("gitRepos", [])]
    lines.append(f"{len(report['jobs'])} job(s), {len(report['envs'])} environment(s) removed; "
                 f"environment cache {report['envCacheBytes'] / 2**20:.1f} MiB")
    out(args, report, "\n".join(lines))
    return EXIT_OK


def gc_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("--job-ttl", type=float, default=None, metavar="SECONDS",
                   help="remove jobs finished more than this long ago (default: LocalBackend.job_ttl; 0 keeps all)")
    s.add_argument("--env-cache-max-bytes", type=int, default=None, metavar="BYTES",
                   help="evict environments above this cache size (default: LocalBackend.env_cache_max_bytes; "
                        "0: no cap)")


CANCEL = Command("cancel", "cancel a job", cmd_cancel, name_argument)
DELETE = Command("delete", "delete a finished job with its events and files (a running one is cancelled)",
                 cmd_delete, name_argument)
GC = Command("gc", "local backend: remove finished jobs past their retention and evict "
                   "least-recently-used environments over the cache cap; prints what it removed", cmd_gc, gc_arguments)
