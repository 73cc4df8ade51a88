"""``jupyter nbvalidation service``: the REST API and the reconciler as a JupyterHub service.

A Jupyter server that loads this one extension and no other (``NBValidationService``, a
subclass of the server extension ``app.NBValidation``: the same traits, routes and engine),
serving under the service's prefix (``JUPYTERHUB_SERVICE_PREFIX`` + ``nbvalidation/api/v1/…``),
bound to ``JUPYTERHUB_SERVICE_URL`` when the Hub manages it (or ``--url`` when it runs
beside the Hub). Every request is authenticated with the Hub (auth.py) and seen through the
caller's view of the service (``JobService.as_user``: their own jobs, their quotas; an admin's:
every job). The jobs' files live in the local backend's data dir; each submit's uploaded files
in ``<data dir>/hub-uploads/<user>/<id>/``."""

from __future__ import annotations

import os
import sys
from typing import Any
from urllib.parse import urlparse

from traitlets import Int

from jupyter_nbvalidation.app import NBValidation
from jupyter_nbvalidation.hub import forward
from jupyter_nbvalidation.hub import handlers as hub_handlers
from jupyter_nbvalidation.hub.auth import HubUser, is_admin
from jupyter_nbvalidation.hub.metrics import Counters
from jupyter_nbvalidation.service.errors import ApiError
from jupyter_nbvalidation.service.jobs import JobService
from jupyter_nbvalidation.service.tenancy import Quotas


class NBValidationService(NBValidation):
    """The team's validation service (``c.NBValidationService.*``; ``c.NBValidation.*`` applies too)."""

    name = "jupyter_nbvalidation_hub_service"  # not "nbvalidation_service": that settings key is the JobService
    load_other_extensions = False

    max_active_per_user = Int(None, allow_none=True, help="Jobs of one Hub user in flight (not ended) at once; "
                              "past it a submit is 429 with Retry-After and the numbers. None: no limit."
                              ).tag(config=True)
    max_queued_per_user = Int(None, allow_none=True, help="Jobs of one Hub user waiting for a slot at once; past "
                              "it a submit is 429 with Retry-After and the numbers. None: no limit.").tag(config=True)
    quota_retry_after = Int(10, help="Seconds a submit refused for a quota is told to wait (Retry-After)."
                            ).tag(config=True)

    @classmethod
    def get_extension_package(cls) -> str:
        return __name__

    def initialize_settings(self) -> None:
        os.environ.pop(forward.SERVICE_URL_ENV, None)  # the service runs the jobs; it forwards nowhere
        super().initialize_settings()
        self.service.quotas = Quotas(self.max_active_per_user, self.max_queued_per_user, self.quota_retry_after)
        root = self.serverapp.root_dir if self.serverapp is not None else "."
        self.settings.update({"nbvalidation_user_scope": user_view, "nbvalidation_uploads": root,
                              "nbvalidation_counters": Counters()})

    def initialize_handlers(self) -> None:
        self.handlers.extend(hub_handlers.routes())


def user_view(handler: Any, service: JobService) -> JobService:
    """The service as the request's Hub user sees it (settings ``nbvalidation_user_scope``)."""
    user = handler.current_user
    if not isinstance(user, HubUser):
        raise ApiError(401, "Unauthorized", "authenticate with the Hub (a token or the service's login)")
    return service.as_user(user.username, is_admin(user), groups=user.groups)


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    return [{"module": __name__, "app": NBValidationService}]


def server_argv(url: str, prefix: str, data_dir: str, allow_root: bool) -> list[str]:
    """The Jupyter server's options for a service at ``url`` under ``prefix`` with the jobs in ``data_dir``."""
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError(f"the service URL must be http(s)://host:port, not {url!r}")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    uploads = os.path.join(data_dir, "hub-uploads")
    os.makedirs(uploads, mode=0o700, exist_ok=True)
    prefix = "/" + prefix.strip("/") + "/"
    return [f"--ServerApp.ip={parsed.hostname}", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
            f"--ServerApp.base_url={prefix}", f"--ServerApp.root_dir={uploads}", "--ServerApp.open_browser=False",
            "--ServerApp.identity_provider_class=jupyter_nbvalidation.hub.auth.HubIdentityProvider",
            "--ServerApp.authorizer_class=jupyter_nbvalidation.hub.auth.HubAuthorizer",
            "--ServerApp.terminals_enabled=False", f"--LocalBackend.data_dir={data_dir}",
            f"--ServerApp.allow_root={allow_root}"]


def main(url: str | None, name: str, data_dir: str, allow_root: bool, extra: list[str]) -> int:
    """Run the service until it is stopped; 2 when it must not start (no URL). (Root is refused
    before: cli/hub.py.)"""
    url = url or os.environ.get("JUPYTERHUB_SERVICE_URL")
    if not url:
        print("error: no URL to serve on: the Hub sets JUPYTERHUB_SERVICE_URL for a managed service; "
              "pass --url for one that runs beside the Hub", file=sys.stderr)
        return 2
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX") or f"/services/{name}/"
    try:
        argv = server_argv(url, prefix, data_dir, allow_root)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    NBValidationService.launch_instance(argv + extra)  # type: ignore[no-untyped-call]  # jupyter_server's
    return 0
