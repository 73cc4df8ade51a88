"""Looking at jobs: ``list``, ``describe`` (``--follow``: until the verdict) and ``events``."""

from __future__ import annotations

import argparse
from typing import Any, Callable

import jupyter_nbvalidation.cli.render as render
from jupyter_nbvalidation.cli.command import EXIT_OK, Command, name_argument, out
from jupyter_nbvalidation.cli.connect import connect
from jupyter_nbvalidation.cli.follow import Follower, follow
from jupyter_nbvalidation.clients.base import ClientError
from jupyter_nbvalidation.core.model import is_terminal
from jupyter_nbvalidation.why_red.culprit import culprit_of


def cmd_list(args: argparse.Namespace) -> int:
    """The jobs, newest first (``--notebook``: of one notebook)."""
    api = connect(args)
    notebook = api.api_path(args.notebook) if args.notebook else None
    jobs = api.list_jobs(notebook, args.limit)
    out(args, {"items": jobs}, render.job_rows(jobs))
    return EXIT_OK


def if_found(get: Callable[[str], dict[str, Any]], name: str) -> dict[str, Any] | None:
    """``get(name)``, or None when it answers 404 (nothing recorded, or not on this backend)."""
    try:
        return get(name)
    except ClientError as e:
        if e.status != 404:
            raise
        return None


def cmd_describe(args: argparse.Namespace) -> int:
    """A job's status, timeline, events, environment and what changed since the last success."""
    api = connect(args)
    job, timeline, events = api.get(args.name), api.timeline(args.name), api.events(args.name)
    environment, since = if_found(api.environment, args.name), None
    if is_terminal((job.get("status") or {}).get("phase")):
        since = if_found(api.changes, args.name)
    out(args, {"job": job, "timeline": timeline, "events": events, "environment": environment, "changes": since,
               "culprit": culprit_of(job, since)},
         render.describe(job, timeline, events) + render.environment_block(job, environment)
         + render.changes_block(since) + render.culprit_block(job, since))
    if getattr(args, "follow", False) and args.output != "json":
        # then the build log as it grows, the phases and the progress, until the verdict
        follower = Follower(follow_log=True, phase=render.phase_label(job))
        if not is_terminal((job.get("status") or {}).get("phase")):
            job = follow(api, args.name, follower, None)
            print(render.verdict_line(job))
            for line in render.failure_lines(job):
                print(line)
        elif follower.wants_log(job):
            print("Build log:")
            try:
                follower.log(*api.build_log(args.name, 0))
            except ClientError as e:
                if e.status != 404:
                    raise
                print("  <none>")
    return EXIT_OK


def cmd_events(args: argparse.Namespace) -> int:
    api = connect(args)
    events = api.events(args.name)
    out(args, {"items": events}, render.events_table(events))
    return EXIT_OK


def list_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("--notebook", help="only jobs of this notebook")
    s.add_argument("--limit", type=int, default=50)


def describe_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("name")
    s.add_argument("--follow", "-f", action="store_true",
                   help="then print the build log as it grows and the progress, until the verdict")


LIST = Command("list", "list jobs, newest first", cmd_list, list_arguments)
DESCRIBE = Command("describe", "status, timeline and events of a job", cmd_describe, describe_arguments)
EVENTS = Command("events", "a job's events", cmd_events, name_argument)
