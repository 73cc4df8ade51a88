"""``jupyter nbvalidation submit NOTEBOOK``: validate one notebook, through a running server
or (none serving its folder, or ``--local``) in this process, which then runs an engine
until the verdict; with ``--wait`` the exit status is the verdict's (0 succeeded, 1 failed,
3 an infrastructure fault), so it can gate CI."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import jupyter_nbvalidation.cli.render as render
from jupyter_nbvalidation.cli.command import EXIT_INTERRUPTED, EXIT_OK, Command, out, verdict_exit_code
from jupyter_nbvalidation.cli.connect import connect, keep_outputs_dir, ready_keep_outputs
from jupyter_nbvalidation.cli.follow import Follower, follow
from jupyter_nbvalidation.cli.interrupts import cancel_interrupted, interrupt_signals
from jupyter_nbvalidation.cli.spec_options import add_spec_options, build_spec
from jupyter_nbvalidation.clients.base import ClientError
from jupyter_nbvalidation.clients.in_process import InProcess, SubmitInterrupted
from jupyter_nbvalidation.core.model import Phase, is_terminal


def arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("notebook", help="the notebook (with --git: its path in the repository, from its root)")
    s.add_argument("--golden", help="golden notebook to compare outputs with")
    s.add_argument("--git", metavar="URL", help="take the notebook from this git repository (https://, http://, "
                                               "ssh://, git@host:path or file://) at --ref, fetched by the server")
    s.add_argument("--ref", metavar="REF", help="with --git: a branch, a tag or a full commit SHA (default: main)")
    add_spec_options(s)
    s.add_argument("--constraints-from-last-success", action="store_true",
                   help="keep every package at the version the notebook's last success had, wherever its "
                        "requirements allow (its pins as spec.podConfig.buildConfig.constraints)")
    s.add_argument("--wait", action="store_true", help="wait for the verdict; exit 0 only if it succeeded")
    s.add_argument("--wait-timeout", type=float, default=None, help="give up waiting after this many seconds")
    s.add_argument("--follow-build-log", "--follow", action="store_true",
                   help="with --wait: print the environment build log as it is written")
    s.add_argument("--keep-outputs", metavar="DIR",
                   help="copy the files the notebook created or changed in its working copy to "
                        "DIR/<notebook path without .ipynb>/ (in this process only: with --local or no server)")


def cmd_submit(args: argparse.Namespace) -> int:
    """Submit one notebook; with ``--wait``, follow it and exit with its verdict."""
    if args.ref and not args.git:
        raise ClientError("--ref: give --git URL with it")
    if not args.git and not Path(args.notebook).is_file():
        raise ClientError(f"{args.notebook}: no such notebook")
    if args.git and args.keep_outputs:
        raise ClientError("--keep-outputs: not with --git (the notebook's folder is the repository's, not yours)")
    keep = keep_outputs_dir(args.keep_outputs, [(Path(args.notebook), args.notebook)]) if args.keep_outputs else None
    # (in this process: its one run; no kernel is pre-started for a run that will not come)
    api = connect(args, None if args.git else args.notebook,
                  {"kernel_pool_runs_expected": 1, **({"keep_outputs_dir": keep} if keep else {})})
    ready_keep_outputs(args, api, keep)
    spec = build_spec(args, api)
    quiet = args.output == "json"
    follower = Follower(quiet, follow_log=args.follow_build_log)

    if isinstance(api, InProcess):
        if not args.wait and not quiet:
            print("No running Jupyter server serves this folder; validating in this process.", flush=True)
        try:
            job = api.run(spec, follower, args.wait_timeout)
        except SubmitInterrupted as e:
            phase = ((e.job or {}).get("status") or {}).get("phase")
            said = (f"cancelled: {render.verdict_line(e.job)}" if e.job is not None and is_terminal(phase)
                    else "cancelled")
            print(f"\ninterrupted: job {e.name} {said}", file=sys.stderr, flush=True)
            return EXIT_INTERRUPTED
        finally:
            api.close()
    else:
        job = api.submit(spec)
        if not args.wait:
            out(args, job, f"{job['metadata']['name']} submitted")
            return EXIT_OK
        name = job["metadata"]["name"]
        with interrupt_signals():
            try:
                job = follow(api, name, follower, args.wait_timeout)
            except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the job is cancelled on the server, not left running
                return cancel_interrupted(api, name)
    if quiet:
        print(json.dumps(job, indent=2))
    else:
        print(render.verdict_line(job))
        if (job.get("status") or {}).get("phase") == Phase.FAILED:
            for line in render.environment_lines(job):
                print(line)
        for line in render.failure_lines(job):
            print(line)
    return verdict_exit_code(job)


SUBMIT = Command("submit", "validate a notebook", cmd_submit, arguments)
