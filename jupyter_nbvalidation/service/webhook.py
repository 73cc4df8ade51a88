"""Webhook deliveries of the notifications a schedule's series sends (docs/watching.md, "When it
turns red"): a JSON POST signed as GitHub signs its webhooks (``X-Nbvalidation-Signature-256:
sha256=<hex HMAC-SHA256 of the body>``), with a delivery id header, tried again with exponential
backoff on a connection error, a timeout, a 429 or a 5xx, a bounded number of times; then it is
recorded as undelivered. Tornado's AsyncHTTPClient: nothing here blocks the loop."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import uuid
from dataclasses import dataclass
from typing import Any, Mapping

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from jupyter_nbvalidation.core.redaction import mask_urls

SIGNATURE_HEADER = "X-Nbvalidation-Signature-256"
DELIVERY_HEADER = "X-Nbvalidation-Delivery"
EVENT_HEADER = "X-Nbvalidation-Event"
_FIELDS = frozenset({"url", "secret", "secretKey", "key"})


@dataclass(frozen=True)
class Webhook:
    """One configured receiver: its URL and the HMAC key, by secret name (``secret``: the
    secrets registry's, its key ``secretKey``, else its only key) or as a literal (``key``)."""

    url: str
    secret: str | None = None
    secret_key: str | None = None
    key: str | None = None

    @property
    def shown(self) -> str:
        """The URL as a record or a log shows it: no user-info, no query (tokens live there)."""
        return mask_urls(self.url).split("?", 1)[0]


def parse_webhooks(config: Any) -> list[Webhook]:
    """``c.NBValidation.webhooks`` checked: a ValueError naming the entry and the field."""
    if not isinstance(config, (list, tuple)):
        raise ValueError("c.NBValidation.webhooks: must be a list of {'url': ..., 'secret' or 'key': ...}")
    out = []
    for i, raw in enumerate(config):
        where = f"c.NBValidation.webhooks[{i}]"
        if isinstance(raw, str):
            raw = {"url": raw}
        if not isinstance(raw, Mapping):
            raise ValueError(f"{where}: must be a URL or a mapping with 'url'")
        unknown = sorted(set(raw) - _FIELDS)
        if unknown:
            raise ValueError(f"{where}.{unknown[0]}: not a field of a webhook (url, secret, secretKey, key)")
        url = raw.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"{where}.url: must be an http:// or https:// URL")
        for field in ("secret", "secretKey", "key"):
            if raw.get(field) is not None and (not isinstance(raw[field], str) or not raw[field]):
                raise ValueError(f"{where}.{field}: must be a non-empty string")
        if raw.get("secret") and raw.get("key"):
            raise ValueError(f"{where}.key: give the HMAC key by secret name or as a literal, not both")
        if raw.get("secretKey") and not raw.get("secret"):
            raise ValueError(f"{where}.secretKey: names a key of 'secret', which is not given")
        out.append(Webhook(url, raw.get("secret"), raw.get("secretKey"), raw.get("key")))
    return out


def signature(key: bytes, body: bytes) -> str:
    """The signature header's value: ``sha256=`` and the hex HMAC-SHA256 of the body."""
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()


async def deliver(hook: Webhook, body: bytes, key: bytes | None, event: str, *, attempts: int, backoff: float,
                  timeout: float, log: Any) -> dict[str, Any]:
    """POST ``body`` to ``hook``; the delivery's record (``url`` as shown, ``delivered``,
    ``attempts``, ``status`` or ``error``, ``id``). Never raises but for a cancel."""
    delivery = str(uuid.uuid4())
    headers = {"Content-Type": "application/json", DELIVERY_HEADER: delivery, EVENT_HEADER: event,
               "User-Agent": "jupyter-nbvalidation"}
    if key is not None:
        headers[SIGNATURE_HEADER] = signature(key, body)
    client = AsyncHTTPClient()
    record: dict[str, Any] = {"url": hook.shown, "id": delivery, "delivered": False}
    attempts = max(1, attempts)
    for attempt in range(1, attempts + 1):
        record["attempts"] = attempt
        retry = True
        try:
            response = await client.fetch(HTTPRequest(hook.url, method="POST", body=body, headers=headers,
                                                      connect_timeout=timeout, request_timeout=timeout,
                                                      follow_redirects=False), raise_error=False)
            record.pop("error", None)
            record["status"] = response.code
            if 200 <= response.code < 300:
                record["delivered"] = True
                return record
            retry = response.code >= 500 or response.code == 429 or response.code == 599
        except (OSError, HTTPClientError, asyncio.TimeoutError) as e:  # refused, reset, a timeout (599)
            record.pop("status", None)
            record["error"] = mask_urls(f"{type(e).__name__}: {e}")[:300]
        if not retry:
            break
        if attempt < attempts:
            await asyncio.sleep(backoff * 2 ** (attempt - 1))
    log.warning("nbvalidation: the %s notification could not be delivered to %s after %d attempt(s): %s",
                event, hook.shown, record["attempts"], record.get("error") or f"HTTP {record.get('status')}")
    return record
