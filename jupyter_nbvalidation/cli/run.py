"""``jupyter nbvalidation run PATH...``: many notebooks in one command, each its own job,
several at a time (the batch itself is cli/batch.py, shared with the pytest plugin), with a
summary, JUnit XML, an HTML report and the executed notebooks; exit 0 only when every
notebook succeeded (or is unchanged since it did)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from jupyter_nbvalidation.cli.command import EXIT_INTERRUPTED, Command
from jupyter_nbvalidation.cli.connect import connect_batch, keep_outputs_dir, ready_keep_outputs
from jupyter_nbvalidation.cli.interrupts import interrupt_signals
from jupyter_nbvalidation.cli.last_success import add_constraints, last_success_constraints
from jupyter_nbvalidation.cli.spec_options import add_spec_options, spec_from_options
from jupyter_nbvalidation.clients.base import ClientError
from jupyter_nbvalidation.clients.in_process import InProcess
from jupyter_nbvalidation.spec.checks import SpecError, validate_spec


def arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("paths", nargs="*", metavar="PATH",
                   help="notebooks, folders (recursive) or globs (with --git: in the repository, from its root; "
                        "none: all of it)")
    s.add_argument("--git", metavar="URL", help="validate the notebooks of this git repository (https://, http://, "
                                               "ssh://, git@host:path or file://) at --ref, not local files")
    s.add_argument("--ref", metavar="REF", help="with --git: a branch, a tag or a full commit SHA (default: main)")
    s.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                   help="leave out notebooks whose path, file name or a folder of it matches (repeatable)")
    s.add_argument("-j", "--jobs", type=int, default=None, metavar="N",
                   help="validate up to N notebooks at a time (default: the number of cores)")
    golden = s.add_mutually_exclusive_group()
    golden.add_argument("--golden-suffix", metavar="SUFFIX",
                        help="compare NB.ipynb with NB<SUFFIX>.ipynb beside it when there is one "
                             "(e.g. .golden); golden copies are not validated themselves")
    golden.add_argument("--golden-self", action="store_true",
                        help="compare each notebook with its own stored outputs (as nbval does)")
    s.add_argument("--constraints-from-last-success", action="store_true",
                   help="keep every package at the version each notebook's last success had, wherever its "
                        "requirements allow (its pins as spec.podConfig.buildConfig.constraints)")
    s.add_argument("--no-cache", action="store_true",
                   help="run every notebook, also one unchanged since an earlier job succeeded with it")
    s.add_argument("--junitxml", metavar="FILE", help="write JUnit XML: one testcase per notebook")
    s.add_argument("--html", metavar="FILE", help="write a self-contained HTML report")
    s.add_argument("--output-dir", metavar="DIR", help="save each executed notebook there (same relative paths)")
    s.add_argument("--keep-outputs", metavar="DIR",
                   help="copy the files each notebook created or changed in its working copy to "
                        "DIR/<notebook path without .ipynb>/ (in this process only: with --local or no server)")
    add_spec_options(s)
    s.add_argument("--wait-timeout", type=float, default=None,
                   help="give up waiting for a notebook after this many seconds")


def cmd_run(args: argparse.Namespace) -> int:
    """Validate every notebook found, each as its own job, ``-j`` at a time; the batch's exit status."""
    import jupyter_nbvalidation.cli.batch as batch  # deferred: start-up time of the CLI
    import jupyter_nbvalidation.cli.reports.console as console  # deferred: start-up time of the CLI

    if args.jobs is not None and args.jobs < 1:
        raise ClientError(f"-j/--jobs {args.jobs}: give at least 1")
    jobs = args.jobs or os.cpu_count() or 1
    source = git_checkout(args) if args.git else None  # (url, commit, the commit's files)
    if source is None and not args.paths:
        raise ClientError("name at least one notebook, folder or glob (PATH)")
    try:
        paths = args.paths if source is None else in_checkout(source[2], args.paths or ["."])
        items = batch.discover(paths, args.exclude, args.golden_suffix, args.golden_self,
                               base=None if source is None else source[2])
    except batch.BatchInputError as e:
        raise ClientError(str(e) if source is None else str(e).replace(source[2] + os.sep, "")) from None
    options = spec_from_options(args)
    try:  # a bad option is refused once, before anything is submitted
        validate_spec({"notebook": {"path": "check.ipynb"}, **options})
    except SpecError as e:
        raise ClientError(f"spec.{e.field}: {e.reason}") from None
    for flag, folder in (("--junitxml", args.junitxml and Path(args.junitxml).parent),
                         ("--html", args.html and Path(args.html).parent), ("--output-dir", args.output_dir)):
        try:  # made now (as pytest does for --junitxml): one that cannot be is refused before anything runs
            if folder:
                Path(folder).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ClientError(f"{flag} {getattr(args, flag[2:].replace('-', '_'))}: {e.strerror}") from None
    keep = (keep_outputs_dir(args.keep_outputs, [(item.path, item.shown) for item in items])
            if args.keep_outputs else None)
    # (in this process: a kernel is pre-started only while one of these notebooks is still to run)
    api = connect_batch(args, batch.common_root(items) if source is None else source[2], jobs,
                        {"kernel_pool_runs_expected": len(items), **({"keep_outputs_dir": keep} if keep else {})},
                        anywhere=source is not None)
    ready_keep_outputs(args, api, keep)
    if isinstance(api, InProcess):
        try:
            api.check_spec({"notebook": {"path": "check.ipynb"}, **options})
        except ClientError:
            api.close()
            raise

    quiet = args.output == "json"
    pinned: dict[str, list[str]] = {}
    if args.constraints_from_last_success:  # asked once per notebook, before anything is submitted
        try:
            for item in items:
                path = api.api_path(str(item.path))
                pinned[path], said = last_success_constraints(api, path)
                print(f"{item.shown}: {said}", file=sys.stderr if quiet else sys.stdout, flush=True)
        except ClientError:
            if isinstance(api, InProcess):
                api.close()
            raise

    def make_spec(item: batch.Item) -> dict[str, Any]:
        if source is not None:  # every notebook at the one commit the ref named when the run began
            git = {"url": source[0], "ref": source[1]}
            spec: dict[str, Any] = {"notebook": {"git": git, "path": in_repository(source[2], item.path)}}
            if item.golden is not None:
                spec["goldenNotebook"] = {"git": git, "path": in_repository(source[2], item.golden)}
        else:
            spec = {"notebook": {"path": api.api_path(str(item.path))}}
            if item.golden is not None:
                spec["goldenNotebook"] = {"path": api.api_path(str(item.golden))}
        spec.update(json.loads(json.dumps(options)))
        add_constraints(spec, pinned.get(spec["notebook"]["path"], []))
        return spec

    where = ("in this process" if isinstance(api, InProcess) else f"through the Jupyter server at {api.client.url}")
    if not quiet:
        print(f"Validating {len(items)} notebook(s), up to {jobs} at a time, {where}.", flush=True)
    progress = console.Progress(len(items), sys.stderr if quiet else sys.stdout)
    interrupted = False
    started = time.monotonic()  # the run's wall time: JUnit's <testsuite time> (the notebooks ran in parallel)
    # SIGTERM is a Ctrl-C too, and a second one aborts at once
    try:
        with interrupt_signals():
            outcomes = batch.run_batch(api, items, make_spec,
                                       batch.Options(jobs=jobs, timeout=args.wait_timeout,
                                                     keep_executed=bool(args.output_dir),
                                                     use_cache=not args.no_cache), progress)
    except batch.Interrupted as e:  # Ctrl-C: the jobs this run submitted are cancelled, report what ended
        outcomes, interrupted = e.outcomes, True
        print("\ninterrupted: the jobs that had not ended were cancelled", file=sys.stderr, flush=True)
    finally:
        if isinstance(api, InProcess):
            api.close()
    if args.junitxml:
        import jupyter_nbvalidation.cli.reports.junit as junit  # deferred: start-up time of the CLI

        junit.write(outcomes, args.junitxml, wall=time.monotonic() - started)
    if args.html:
        import jupyter_nbvalidation.cli.reports.html as html  # deferred: start-up time of the CLI

        html.write(outcomes, args.html)
    if args.output_dir:
        batch.save_executed(outcomes, args.output_dir, batch.common_root(items))
    if quiet:
        print(json.dumps([{"notebook": o.item.shown, "verdict": o.verdict, "seconds": round(o.seconds, 3),
                           "job": o.name, "firstFailure": console.first_failure(o), "environment": o.environment,
                           "sinceLastSuccess": o.changes if (o.changes or {}).get("since") else None}
                          for o in outcomes], indent=2))
    else:
        print()
        print(console.summary(outcomes))
    return EXIT_INTERRUPTED if interrupted else batch.exit_code(outcomes)


def git_checkout(args: argparse.Namespace) -> tuple[str, str, str]:
    """--git URL --ref REF: (the URL, the commit the ref names now, that commit's files), fetched
    here into the local data dir's git cache (the one a job in this process fetches from)."""
    import asyncio  # deferred: start-up time of the CLI (only --git needs it)

    from jupyter_nbvalidation.service.git_fetch import FetchFailed, GitCache  # deferred: start-up time of the CLI
    from jupyter_nbvalidation.spec.checks import check_git_ref, check_git_url  # deferred: start-up time of the CLI

    ref = args.ref or "main"
    try:
        check_git_url(args.git, "--git")
        check_git_ref(ref, "--ref")
    except SpecError as e:
        raise ClientError(str(e)) from None
    if args.data_dir:
        data = args.data_dir
    else:
        from jupyter_core.paths import jupyter_data_dir  # deferred: start-up time of the CLI

        data = os.path.join(jupyter_data_dir(), "nbvalidation")
    try:
        got = asyncio.run(GitCache(os.path.join(data, "git")).fetch(args.git, ref))
    except FetchFailed as e:
        raise ClientError(f"--git {args.git} --ref {ref}: cannot fetch: {e}", status=503) from None
    return args.git, got.commit, got.tree


def in_checkout(tree: str, paths: list[str]) -> list[str]:
    """PATHs relative to the repository's root, as paths in its checkout (never out of it)."""
    out = []
    for p in paths:
        if os.path.isabs(p) or ".." in Path(p).parts:
            raise ClientError(f"{p}: with --git, a PATH is relative to the repository's root")
        out.append(os.path.join(tree, p))
    return out


def in_repository(tree: str, path: Path) -> str:
    return Path(os.path.relpath(path, tree)).as_posix()


RUN = Command("run", "validate many notebooks, each as its own job, in parallel", cmd_run, arguments)
