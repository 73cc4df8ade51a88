"""A notification by e-mail (docs/watching.md, "When it turns red"): the standard library's SMTP
client, in a worker thread (never on the loop), tried again with backoff on a connection error
or a temporary (4xx) answer, a bounded number of times; then recorded as undelivered."""

from __future__ import annotations

import asyncio
import smtplib
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Any, Mapping


@dataclass(frozen=True)
class Mail:
    """Where the e-mail goes: an SMTP server (``host``, ``port``, STARTTLS or not), the sender,
    the recipients, and a login (``username``, ``password``) read from a secret, or none."""

    host: str
    port: int
    sender: str
    recipients: tuple[str, ...]
    starttls: bool = False
    timeout: float = 10.0

    @property
    def shown(self) -> str:
        return f"smtp://{self.host}:{self.port}"


def subject_of(payload: Mapping[str, Any]) -> str:
    job = payload.get("job") or {}
    what = job.get("notebook") or job.get("name")
    schedule = f" (schedule {payload['schedule']})" if payload.get("schedule") else ""
    said = {"turned-red": "turned red", "infrastructure-failed": "could not be validated (infrastructure)",
            "back-to-green": "is green again"}.get(str(payload.get("event")), str(payload.get("event")))
    return f"[nbvalidation] {what}{schedule} {said}"


def body_of(payload: Mapping[str, Any]) -> str:
    job = payload.get("job") or {}
    lines = [subject_of(payload).removeprefix("[nbvalidation] "), "", f"job: {job.get('name')}",
             f"verdict: {job.get('phase')} ({job.get('reason')}) {job.get('message') or ''}".rstrip()]
    source = job.get("source") or {}
    if source.get("commit"):
        lines.append(f"source: {source.get('url')} at {source.get('ref')} ({source.get('commit')})")
    culprit = payload.get("culprit") or {}
    if culprit:
        lines.append(f"the cause ({culprit.get('kind')}): {culprit.get('message', '')}")
    changes = payload.get("changes") or {}
    if changes.get("sentence"):
        lines.append(f"since the last success: {changes['sentence']}")
    if payload.get("url"):
        lines.append(f"link: {payload['url']}")
    return "\n".join(lines) + "\n"


def _send(mail: Mail, message: EmailMessage, login: tuple[str, str] | None) -> None:
    with smtplib.SMTP(mail.host, mail.port, timeout=mail.timeout) as client:
        if mail.starttls:
            client.starttls()
        if login is not None:
            client.login(*login)
        client.send_message(message)


async def send(mail: Mail, payload: Mapping[str, Any], login: tuple[str, str] | None, *, attempts: int,
               backoff: float, log: Any) -> dict[str, Any]:
    """Send the (masked) payload as a plain-text e-mail; the delivery's record."""
    message = EmailMessage()
    message["Subject"], message["From"], message["To"] = subject_of(payload), mail.sender, ", ".join(mail.recipients)
    message.set_content(body_of(payload))
    record: dict[str, Any] = {"url": mail.shown, "delivered": False}
    for attempt in range(1, max(1, attempts) + 1):
        record["attempts"] = attempt
        try:
            await asyncio.to_thread(_send, mail, message, login)
            record.pop("error", None)
            record["delivered"] = True
            return record
        except smtplib.SMTPResponseException as e:
            record["error"] = f"SMTP {e.smtp_code}"
            if not 400 <= e.smtp_code < 500:  # a permanent refusal: trying again cannot help
                break
        except (OSError, smtplib.SMTPException) as e:
            record["error"] = type(e).__name__
        if attempt < attempts:
            await asyncio.sleep(backoff * 2 ** (attempt - 1))
    log.warning("nbvalidation: the %s e-mail could not be sent through %s after %d attempt(s): %s",
                payload.get("event"), mail.shown, record["attempts"], record.get("error"))
    return record
