"""``jupyter nbvalidation service`` (the team's validation service behind JupyterHub) and
``jupyter nbvalidation hub-config`` (the Hub's configuration lines for it)."""

from __future__ import annotations

import argparse
import os
import sys

from jupyter_nbvalidation.cli.command import EXIT_ERROR, Command

ROOT_REFUSAL = ("refusing to run the validation service as root: every user's notebook would be run by a "
                "service whose files and processes are root's. Run it as an unprivileged user (the Hub's "
                "services run as the Hub's user unless `user` is set), or pass --allow-root if you mean it "
                "(the sandbox still confines each run where this host allows it).")


def cmd_service(args: argparse.Namespace) -> int:
    if os.geteuid() == 0 and not args.allow_root:
        print(f"error: {ROOT_REFUSAL}", file=sys.stderr)
        return EXIT_ERROR
    try:
        from jupyter_nbvalidation.hub import service_app  # deferred: start-up time of the CLI (jupyterhub, the server)
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] != "jupyterhub":
            raise
        print("error: the validation service needs JupyterHub's client (no module jupyterhub): "
              "pip install 'jupyter-nbvalidation[hub]'", file=sys.stderr)
        return EXIT_ERROR
    data_dir = args.data_dir or os.path.join(os.environ.get("JUPYTER_DATA_DIR") or _jupyter_data_dir(), "nbvalidation")
    extra = list(args.server_option or [])
    return service_app.main(args.url, args.name, data_dir, args.allow_root, extra)


def _jupyter_data_dir() -> str:
    from jupyter_core.paths import jupyter_data_dir  # deferred: start-up time of the CLI

    return str(jupyter_data_dir())


def service_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("--url", help="where to serve (default: $JUPYTERHUB_SERVICE_URL, set by the Hub for a managed "
                                 "service)")
    s.add_argument("--name", default="nbvalidation", help="the service's name in the Hub (default: nbvalidation)")
    s.add_argument("--data-dir", help="the local backend's data dir (default: <jupyter data dir>/nbvalidation)")
    s.add_argument("--allow-root", action="store_true", help="run as root all the same (refused otherwise: every "
                                                            "user's notebook would run under root's service)")
    s.add_argument("--server-option", action="append", metavar="OPTION", help="a Jupyter server option "
                   "(repeatable), e.g. --server-option=--NBValidationService.max_active_per_user=10")


def cmd_hub_config(args: argparse.Namespace) -> int:
    from jupyter_nbvalidation.hub.config import hub_config  # deferred: start-up time of the CLI

    if args.backend == "kubernetes" and (args.data_dir or args.allow_root):
        print("error: --data-dir and --allow-root are for the local backend's managed service")
        return EXIT_ERROR
    print(hub_config(args.backend, args.url, args.name, args.data_dir, args.allow_root), end="")
    return 0


def hub_config_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("--backend", choices=["local", "kubernetes"], default="local")
    s.add_argument("--url", help="the service's URL as the Hub and the user servers reach it (default: "
                                 "http://127.0.0.1:10101 local, http://nbvalidation:8000 kubernetes)")
    s.add_argument("--name", default="nbvalidation", help="the service's name in the Hub (default: nbvalidation)")
    s.add_argument("--data-dir", help="the managed service's data dir (local backend)")
    s.add_argument("--allow-root", action="store_true", help="the managed service runs as root all the same")


SERVICE = Command("service", "run the team's validation service behind JupyterHub", cmd_service,
                  service_arguments, parents="none")
HUB_CONFIG = Command("hub-config", "print the jupyterhub_config.py lines that register the validation service",
                     cmd_hub_config, hub_config_arguments, parents="none")
