"""``jupyter nbvalidation hub-config``: the ``jupyterhub_config.py`` lines that register the
team's validation service, ready to paste or ``exec`` (after ``c = get_config()``). Each line
adds to what the file already has (``.append``, ``.extend``, ``.update``), so it can go at its
end. What it sets:

- ``c.JupyterHub.services``: the service (local backend: managed, the Hub starts it with the
  same Python; kubernetes: external, its Deployment runs it in-cluster and holds the only
  Kubernetes credentials);
- ``c.JupyterHub.custom_scopes``: ``custom:nbvalidation:admin`` (sees and manages every job)
  and ``custom:nbvalidation:metrics`` (reads ``/metrics``);
- ``c.JupyterHub.load_roles``: users and their servers get ``access:services!service=<name>``
  (the default ``user`` and ``server`` roles with that scope added), and a role
  ``<name>-admin`` holding the two custom scopes (add users or services to it);
- ``c.Spawner.environment``: ``NBVALIDATION_SERVICE_URL``, by which each user's server finds
  the service and forwards its REST routes there (hub/forward.py)."""

from __future__ import annotations

import sys
from pprint import pformat

from jupyter_nbvalidation.hub.forward import SERVICE_URL_ENV

DEFAULT_NAME = "nbvalidation"
DEFAULT_LOCAL_URL = "http://127.0.0.1:10101"
DEFAULT_K8S_URL = "http://nbvalidation:8000"
ADMIN_SCOPE = "custom:nbvalidation:admin"
METRICS_SCOPE = "custom:nbvalidation:metrics"


def hub_config(backend: str = "local", url: str | None = None, name: str = DEFAULT_NAME,
               data_dir: str | None = None, allow_root: bool = False, python: str | None = None) -> str:
    """The lines (Python source)."""
    url = (url or (DEFAULT_K8S_URL if backend == "kubernetes" else DEFAULT_LOCAL_URL)).rstrip("/")
    access = f"access:services!service={name}"
    service: dict[str, object] = {"name": name, "url": url, "display": False, "oauth_no_confirm": True}
    if backend == "local":
        command = [python or sys.executable, "-m", "jupyter_nbvalidation.cli.main", "service", "--name", name]
        if data_dir:
            command += ["--data-dir", data_dir]
        if allow_root:
            command.append("--allow-root")
        service["command"] = command
    roles = [
        {"name": "user", "description": "Standard user privileges, and the team's validation service",
         "scopes": ["self", access]},
        {"name": "server", "description": "A user's server: activity, access to itself and to the validation "
         "service", "scopes": ["users:activity!user", "access:servers!server", access]},
        {"name": f"{name}-admin", "description": "Sees and manages every user's validation jobs; reads /metrics",
         "scopes": [ADMIN_SCOPE, METRICS_SCOPE, access], "users": [], "services": []},
    ]
    scopes = {ADMIN_SCOPE: {"description": "See and manage every user's notebook validation jobs"},
              METRICS_SCOPE: {"description": "Read the notebook validation service's Prometheus metrics"}}
    env = {SERVICE_URL_ENV: f"{url}/services/{name}/"}
    lines = [f"# jupyter nbvalidation hub-config --backend {backend} --url {url} --name {name}",
             "# the team's notebook validation service (docs: For a team (JupyterHub))"]
    if backend == "kubernetes":
        lines += ["# an external service: its Deployment runs `jupyter nbvalidation service --url "
                  "http://0.0.0.0:8000` in-cluster; the Hub and it share this token (a Secret)",
                  "import os",
                  f"c.JupyterHub.services.append({pformat(service, sort_dicts=False)[:-1]},\n"
                  "    'api_token': os.environ['NBVALIDATION_SERVICE_TOKEN']})"]
    else:
        lines.append(f"c.JupyterHub.services.append({pformat(service, sort_dicts=False)})")
    lines += [f"c.JupyterHub.custom_scopes.update({pformat(scopes, sort_dicts=False)})",
              "# the default `user` and `server` roles, each with access to the service added",
              f"c.JupyterHub.load_roles.extend({pformat(roles, sort_dicts=False)})",
              "# each user's server finds the service here and forwards its REST routes to it",
              f"c.Spawner.environment.update({pformat(env, sort_dicts=False)})"]
    return "\n".join(lines) + "\n"
