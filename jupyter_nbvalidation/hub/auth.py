"""Who is asking the service: every request is authenticated with the JupyterHub (a token in
the Authorization header, or the OAuth cookie of a browser), through ``jupyterhub.services.auth
.HubOAuth``, as a jupyter_server IdentityProvider; the identity is the Hub user (or service).

The Authorizer lets an authenticated caller use this package's routes only (resource
``nbvalidation``): the Jupyter server the service runs in has kernels, files and terminals
routes too, which no Hub user may reach through the service."""

from __future__ import annotations

from typing import Any

from jupyter_server.auth.authorizer import Authorizer
from jupyter_server.auth.decorator import allow_unauthenticated
from jupyter_server.auth.identity import IdentityProvider, User
from jupyterhub.services.auth import HubOAuth, HubOAuthCallbackHandler
from tornado import web
from traitlets import Instance, default

#: the custom scope that sees and manages every user's jobs (declared by ``hub-config``)
ADMIN_SCOPE = "custom:nbvalidation:admin"
#: the resource of this package's routes (service/handlers.py AUTH_RESOURCE)
RESOURCE = "nbvalidation"


class HubUser(User):
    """A jupyter_server user made from the Hub's model of the caller."""

    def __init__(self, model: dict[str, Any]):
        kind = model.get("kind", "user")
        name = str(model.get("name", ""))
        # a service's name never passes for a user's of the same name
        super().__init__(username=name if kind == "user" else f"{kind}:{name}", name=name)
        self.hub_model = model

    @property
    def groups(self) -> frozenset[str]:
        """The Hub groups the user is in, as the Hub's model of them says (the secrets a user may
        name: docs/secrets.md); a service has none."""
        groups = self.hub_model.get("groups") if self.hub_model.get("kind", "user") == "user" else None
        return frozenset(g for g in groups or () if isinstance(g, str))

    @property
    def admin(self) -> bool:
        """A Hub admin (the model says so) or a holder of the custom admin scope."""
        scopes = self.hub_model.get("scopes") or []
        return self.hub_model.get("admin") is True or ADMIN_SCOPE in scopes


def is_admin(user: Any) -> bool:
    return isinstance(user, HubUser) and user.admin


class HubCallbackHandler(HubOAuthCallbackHandler):  # type: ignore[misc]  # jupyterhub is untyped
    """The end of a browser's OAuth login with the Hub."""

    def initialize(self, hub_auth: HubOAuth) -> None:
        self.hub_auth = hub_auth

    @allow_unauthenticated
    async def get(self) -> None:
        await super().get()


class ServiceHubOAuth(HubOAuth):  # type: ignore[misc]  # jupyterhub is untyped
    """HubOAuth, its XSRF left to jupyter_server: a request with a Hub token is token-authenticated
    (HubAuth sets ``handler._token_authenticated``, which jupyter_server's check reads) and needs no
    XSRF cookie. HubOAuth's own patch replaces jupyter_server's check on its classes, process-wide,
    after which tornado's check before ``prepare()`` (before any user is known) refuses every POST
    that carries a token."""

    def _patch_xsrf(self, handler: web.RequestHandler) -> None:
        return


class HubIdentityProvider(IdentityProvider):
    """The caller as the Hub knows it: a token (``Authorization: token …``) or the service's OAuth
    cookie, checked against the service's access scopes (``access:services!service=<name>``, from
    the Hub's environment). No Hub user, or one without access: no identity (the handlers' 401/403)."""

    hub_auth = Instance(HubOAuth)

    @default("hub_auth")
    def _default_hub_auth(self) -> HubOAuth:
        return ServiceHubOAuth(parent=self)

    @property
    def token(self) -> str:  # type: ignore[override]  # jupyter_server's own token is never used here
        return str(self.hub_auth.api_token)

    async def get_user(self, handler: web.RequestHandler) -> User | None:
        if hasattr(handler, "_nbvalidation_hub_user"):
            cached: User | None = handler._nbvalidation_hub_user
            return cached
        model = await self.hub_auth.get_user(handler, sync=False)
        user: HubUser | None = None
        if model is not None:
            if self.hub_auth.check_scopes(self.hub_auth.access_scopes, model):
                user = HubUser(model)
            else:  # known to the Hub, not allowed here: 403, not a login
                self.log.warning("nbvalidation service: %s %s has no access to this service",
                                 model.get("kind"), model.get("name"))
                raise web.HTTPError(403, f"{model.get('kind', 'user')} {model.get('name')} may not use this service")
        handler._nbvalidation_hub_user = user  # type: ignore[attr-defined]  # once per request
        return user

    def get_handlers(self) -> list[tuple[str, object, dict[str, Any]]]:  # type: ignore[override]
        return [("/oauth_callback", HubCallbackHandler, {"hub_auth": self.hub_auth})]

    def validate_security(self, app: Any, ssl_options: dict[str, Any] | None = None) -> None:
        """The Hub authenticates every request: the server's own token is never used."""


class HubAuthorizer(Authorizer):
    """An authenticated Hub user may use this package's routes, and nothing else of the server."""

    def is_authorized(self, handler: web.RequestHandler, user: User, action: str, resource: str) -> bool:
        return isinstance(user, HubUser) and resource == RESOURCE
