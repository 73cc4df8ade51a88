"""``jupyter nbvalidation install``: apply (or print) the CRD and the Role on a cluster."""

from __future__ import annotations

import argparse

from jupyter_nbvalidation.cli.command import Command


def cmd_install(args: argparse.Namespace) -> int:
    """Apply the manifests (``--print``: print them instead)."""
    from jupyter_nbvalidation.backends.kubernetes.install import install  # deferred: start-up time of the CLI

    return install(namespace=args.namespace, print_only=args.print, kubeconfig=args.kubeconfig)


def arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("--namespace", "-n", default=None)
    s.add_argument("--print", action="store_true", help="print the YAML instead of applying it")
    s.add_argument("--kubeconfig", default=None)


INSTALL = Command("install", "apply (or print) the CRD and Role on a cluster", cmd_install, arguments, parents="none")
