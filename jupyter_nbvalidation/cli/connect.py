"""Where a command's jobs are: a running Jupyter server (clients.remote.Remote) when one
serves the notebook's folder, else this process (clients.in_process.InProcess on the local
data dir, its service assembled by composition.local_service); and ``--keep-outputs``,
which only this process can do."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from jupyter_nbvalidation.clients.base import ClientError
from jupyter_nbvalidation.clients.http import ServerClient, find_server
from jupyter_nbvalidation.clients.in_process import InProcess
from jupyter_nbvalidation.clients.remote import Remote
from jupyter_nbvalidation.spec.project import settings_folder_above


def _with_project(root: Path) -> Path:
    """``root`` widened to the folder of the project settings file above it, if any: the
    jobs of this process read that file as a server whose root holds the project does."""
    above = settings_folder_above(root)
    return above if above is not None and above in root.parents else root


def in_process(root_dir: str, data_dir: str | None = None,
               backend_config: dict[str, Any] | None = None) -> InProcess:
    """The jobs of ``root_dir`` in this process, on ``data_dir`` (default: the local backend's)."""
    from jupyter_nbvalidation.composition import local_service  # deferred: start-up time of the CLI

    # the CLI is itself the user's batch work, as pytest --nbmake is: its runners and
    # kernels run at its own priority (a server lowers theirs to stay responsive)
    return InProcess(local_service(root_dir, data_dir, {"niceness": 0, **(backend_config or {})}), root_dir)


def _say_outside(path: str) -> None:
    """Never switch to this process silently: when a server runs for the current folder
    but ``path`` is outside its root, say that this process validates it instead."""
    here = find_server(os.getcwd())
    if here is not None:
        print(f"jupyter nbvalidation: {path} is outside the root of the server at {here.get('url')} "
              f"({here.get('root_dir') or here.get('notebook_dir')}): validating it in this process, "
              "with its own engine; that server will not show these jobs", file=sys.stderr)


def connect(args: argparse.Namespace, path_hint: str | None = None,
            backend_config: dict[str, Any] | None = None) -> Remote | InProcess:
    """The client for a command (``--server``, ``--local``, ``--root-dir``, ``--data-dir``):
    the server whose root holds ``path_hint`` (or the current folder), else this process."""
    if args.server:
        return Remote(ServerClient(args.server, args.token or os.environ.get("JUPYTER_TOKEN", ""), args.root_dir))
    if not args.local:
        info = find_server(path_hint or os.getcwd())
        if info is not None:
            return Remote(ServerClient.from_info(info))
        if path_hint:
            _say_outside(path_hint)
    root = args.root_dir or os.getcwd()
    if path_hint:
        hint = Path(path_hint).resolve()
        if Path(root).resolve() not in hint.parents:
            root = str(hint.parent)
    widened = _with_project(Path(root).resolve())
    return in_process(str(widened) if widened != Path(root).resolve() else root, args.data_dir, backend_config)


def connect_batch(args: argparse.Namespace, folder: str, jobs: int,
                   backend_config: dict[str, Any] | None = None, anywhere: bool = False) -> Remote | InProcess:
    """Like ``connect`` for a folder holding every notebook of a batch; in this process,
    the engine runs up to ``jobs`` validations at once (and the backend gets ``backend_config``).
    ``anywhere``: the notebooks are not the server's files (from git): the server running for
    the current folder takes them, else this process, rooted at ``folder``."""
    if args.server:
        return Remote(ServerClient(args.server, args.token or os.environ.get("JUPYTER_TOKEN", ""), args.root_dir))
    if not args.local:
        info = find_server(os.getcwd() if anywhere else folder)
        if info is not None:
            return Remote(ServerClient.from_info(info))
        if not anywhere:
            _say_outside(folder)
    if anywhere:
        return in_process(folder, args.data_dir, {"max_parallel_validations": jobs,
                                                  "max_parallel_builds": max(1, min(jobs, 2)),
                                                  **(backend_config or {})})
    root = Path(args.root_dir or os.getcwd()).resolve()
    target = Path(folder).resolve()
    if target != root and root not in target.parents:
        root = target
    return in_process(str(_with_project(root)), args.data_dir,
                      {"max_parallel_validations": jobs, "max_parallel_builds": max(1, min(jobs, 2)),
                       **(backend_config or {})})


def keep_outputs_dir(given: str, notebooks: list[tuple[Path, str]]) -> str:
    """--keep-outputs DIR: absolute, never inside the folder of a notebook validated
    (path, as shown): what it writes would become part of that folder; or ClientError (exit 2)."""
    target = Path(given).resolve()
    for path, shown in notebooks:
        folder = path.resolve().parent
        if target == folder or folder in target.parents:
            raise ClientError(f"--keep-outputs {given}: inside the folder of {shown}, which is validated; "
                              "choose a folder outside the notebooks' folders")
    return str(target)


def ready_keep_outputs(args: argparse.Namespace, api: Remote | InProcess, keep: str | None) -> None:
    """--keep-outputs needs this process's engine (the files stay where the kernel ran);
    the folder is made now, so one that cannot be is refused before anything runs."""
    if not keep:
        return
    if not isinstance(api, InProcess):
        raise ClientError(f"--keep-outputs {args.keep_outputs}: the files a notebook writes stay with the server "
                          f"at {api.client.url}; give --local to validate in this process")
    try:
        Path(keep).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        api.close()
        raise ClientError(f"--keep-outputs {args.keep_outputs}: {e.strerror}") from None
