"""A ``fromSecret`` entry of the server's secrets (c.NBValidation.secrets): a Secret of the
namespace, read by the server only for what it does itself (a git source's
``credentialsSecret``: the fetch happens in the server). A job's ``podConfig.credentials``
never pass through here: the validation Pod gets them from the Secret (envFrom), and the
server never holds those values. docs/secrets.md, Kubernetes."""

from __future__ import annotations

import base64
import binascii

from jupyter_nbvalidation.backends.kubernetes.client import Kube, KubeApiError, Resource
from jupyter_nbvalidation.secrets.registry import KEY, SecretNotAvailable

SECRETS = Resource("v1", "secrets")


async def read_secret(kube: Kube, namespace: str, name: str, secret: str) -> dict[str, str]:
    """The keys and values of Secret ``secret`` (the server's secret ``name``): SecretNotAvailable
    naming what is wrong (missing, not readable by the server, a value that is not text), never a
    value."""
    try:
        obj = await kube.request("GET", SECRETS.path(namespace, secret))
    except KubeApiError as e:
        if e.status == 404:
            raise SecretNotAvailable(name, f"the Secret {secret!r} is not in namespace {namespace!r}") from None
        if e.status == 403:
            raise SecretNotAvailable(name, f"the server may not read the Secret {secret!r} (its Role needs get "
                                           "on secrets: docs/kubernetes.md)") from None
        raise SecretNotAvailable(name, f"reading the Secret {secret!r} failed ({e.reason})") from None
    out: dict[str, str] = {}
    for key, value in (obj.get("data") or {}).items():
        if not KEY.fullmatch(str(key)):
            continue
        try:
            out[key] = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, ValueError, UnicodeDecodeError):
            raise SecretNotAvailable(name, f"the Secret {secret!r}: key {key!r} is not UTF-8 text") from None
    for key, value in (obj.get("stringData") or {}).items():  # never stored so, but harmless
        if KEY.fullmatch(str(key)) and isinstance(value, str):
            out[key] = value
    return out
