"""``jupyter nbvalidation schedule create|list|describe|pause|resume|delete|trigger``: a
notebook validated on a cron expression (docs/watching.md, Schedules). Schedules run in a
server (its loop creates the jobs on time), so this command talks to one (``--server``, or
the server running for the current folder) and never runs them in this process. Bad input
is exit 2 with the field named (the server's 400)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from jupyter_nbvalidation.cli.command import EXIT_ERROR, EXIT_OK, Command, out
from jupyter_nbvalidation.cli.connect import connect
from jupyter_nbvalidation.cli.spec_options import add_spec_options, spec_from_options
from jupyter_nbvalidation.clients.base import ClientError
from jupyter_nbvalidation.clients.remote import Remote

ACTIONS = ("create", "list", "describe", "pause", "resume", "delete", "trigger")


def arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("action", choices=ACTIONS, metavar="action",
                   help="create NAME (--cron, and a notebook: PATH, or --git URL --ref REF PATH; or -f MANIFEST), "
                        "list, describe NAME (its spec, next tick and recent verdicts), pause NAME, resume NAME, "
                        "delete NAME (its jobs stay), trigger NAME (run now; never beside a run still going)")
    s.add_argument("name", nargs="?", help="the schedule's name (metadata.name)")
    s.add_argument("notebook", nargs="?", help="create: the notebook (with --git: its path in the repository)")
    s.add_argument("--cron", metavar="EXPR", help="create: five cron fields in UTC, or @hourly, @daily, @weekly")
    s.add_argument("--git", metavar="URL", help="create: take the notebook from this git repository at --ref")
    s.add_argument("--ref", metavar="REF", help="with --git: a branch, a tag or a full commit SHA (default: main)")
    s.add_argument("--suspend", action="store_true", help="create: paused (resume it later)")
    s.add_argument("--filename", "-f", metavar="MANIFEST",
                   help="create: a NotebookValidationSchedule manifest (YAML or JSON) instead of the options")
    add_spec_options(s)


def _manifest(args: argparse.Namespace, api: Remote) -> dict[str, Any]:
    if args.filename:
        import yaml  # type: ignore[import-untyped]  # deferred: start-up time of the CLI (only create -f)

        try:
            text = Path(args.filename).read_text()
        except OSError as e:
            raise ClientError(f"-f {args.filename}: {e.strerror}") from None
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ClientError(f"-f {args.filename}: not YAML or JSON: {e}") from None
        if args.name and isinstance(doc, dict):
            doc.setdefault("metadata", {})["name"] = args.name
        return doc if isinstance(doc, dict) else {"spec": doc}
    if not args.name:
        raise ClientError("create: give the schedule's NAME")
    if not args.cron:
        raise ClientError("create: give --cron EXPR (five fields in UTC, or @daily, @hourly, @weekly)")
    if not args.notebook:
        raise ClientError("create: give the notebook's PATH (with --git: its path in the repository)")
    if args.ref and not args.git:
        raise ClientError("--ref: give --git URL with it")
    if args.git:
        notebook: dict[str, Any] = {"git": {"url": args.git, "ref": args.ref or "main"}, "path": args.notebook}
    else:
        if not Path(args.notebook).is_file():
            raise ClientError(f"{args.notebook}: no such notebook")
        notebook = {"path": api.api_path(args.notebook)}
    spec = {"notebook": notebook, **spec_from_options(args)}
    return {"apiVersion": "nbvalidation.dev/v1alpha1", "kind": "NotebookValidationSchedule",
            "metadata": {"name": args.name},
            "spec": {"schedule": args.cron, "suspend": bool(args.suspend), "jobTemplate": {"spec": spec}}}


def strip(doc: dict[str, Any]) -> str:
    """The recent verdicts, oldest left: ``✓`` succeeded, ``✗`` failed, ``…`` still going."""
    marks = {"Succeeded": "✓", "Failed": "✗"}
    return "".join(marks.get(r["phase"], "…") for r in reversed((doc.get("status") or {}).get("recent") or []))


def summary(doc: dict[str, Any]) -> str:
    st, spec = doc.get("status") or {}, doc["spec"]
    state = "paused" if spec.get("suspend") else f"next {st.get('nextScheduleTime') or '-'}"
    return f"{doc['metadata']['name']:<24} {spec['schedule']:<16} {state:<40} {strip(doc) or '-'}"


def describe(doc: dict[str, Any]) -> str:
    st, spec = doc.get("status") or {}, doc["spec"]
    job = spec["jobTemplate"]["spec"]
    nb = job.get("notebook") or {}
    source = (f"{nb['git']['url']} at {nb['git']['ref']}: {nb.get('path')}" if nb.get("git") else nb.get("path"))
    lines = [f"Name:         {doc['metadata']['name']}",
             f"Schedule:     {spec['schedule']} (UTC)",
             f"Suspended:    {'yes' if spec.get('suspend') else 'no'}",
             f"Concurrency:  {spec.get('concurrencyPolicy', 'Forbid')}",
             f"Notebook:     {source}",
             f"Last run:     {st.get('lastScheduleTime') or '-'}",
             f"Next tick:    {st.get('nextScheduleTime') or '-'}",
             f"Active:       {st.get('active') or '-'}",
             f"Skipped:      {st.get('skipped', 0)} tick(s) (a run still going)",
             f"Recent:       {strip(doc) or '-'}"]
    if st.get("message"):
        lines.append(f"Message:      {st['message']}")
    for r in st.get("recent") or []:
        commit = f" {r['commit'][:12]}" if r.get("commit") else ""
        lines.append(f"  {r['job']:<32} {r['phase']:<18} {r.get('reason') or '':<20}{commit} {r.get('finished') or ''}")
    lines.append(f"Job spec:     {json.dumps(job, sort_keys=True)}")
    return "\n".join(lines)


def cmd_schedule(args: argparse.Namespace) -> int:
    if args.action not in ("create", "list") and not args.name:
        raise ClientError(f"{args.action}: give the schedule's NAME")
    api = connect(args)
    if not isinstance(api, Remote):
        api.close()
        print("error: schedules run in a Jupyter server (its loop creates the jobs on time): start one for this "
              "folder, or give --server URL", file=sys.stderr)
        return EXIT_ERROR
    client, name = api.client, args.name
    if args.action == "create":
        doc = client.request("POST", "schedules", _manifest(args, api))
        out(args, doc, f"schedule {doc['metadata']['name']} created; next tick "
                       f"{doc['status'].get('nextScheduleTime') or '- (paused)'}")
    elif args.action == "list":
        docs = client.request("GET", "schedules")
        out(args, docs, "\n".join(summary(d) for d in docs["items"]) or "no schedules")
    elif args.action == "describe":
        doc = client.request("GET", f"schedules/{name}")
        out(args, doc, describe(doc))
    elif args.action in ("pause", "resume"):
        doc = client.request("PATCH", f"schedules/{name}", {"spec": {"suspend": args.action == "pause"}})
        out(args, doc, f"schedule {name} {'paused' if args.action == 'pause' else 'resumed'}")
    elif args.action == "delete":
        answer = client.request("DELETE", f"schedules/{name}")
        out(args, answer, f"schedule {name} deleted (its jobs are kept)")
    else:
        job = client.request("POST", f"schedules/{name}/trigger")
        out(args, job, f"{job['metadata']['name']} submitted")
    return EXIT_OK


SCHEDULE = Command("schedule", "validate a notebook on a cron schedule, in a server: create, list, describe, pause, "
                               "resume, delete, trigger", cmd_schedule, arguments)
