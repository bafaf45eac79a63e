"""Notification channels as a registry: one small class per kind, found through TRANSPORTS.

`notify(payload)` delivers one notification or raises TransportError; `permanent=True` says a
retry cannot help (a 4xx answer, a refused URL, a refused address), anything else is worth
retrying with backoff (timeouts, refused connections, 5xx, 429).
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import smtplib
import socket
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.mail import BadHeaderError, send_mail

from alerts import release_watch, units
from alerts.safety import UnsafeURL, check_webhook_url

SIGNATURE_HEADER = "X-Decisionboard-Signature"
USER_AGENT = "Decisionboard-Alerts/1"
# Receivers that ask us to wait, or are briefly down, get another try; other 4xx will not change.
_RETRYABLE_STATUS = {408, 425, 429}


class TransportError(Exception):
    def __init__(self, message: str, permanent: bool = False):
        super().__init__(message)
        self.message = message
        self.permanent = permanent


def encode(payload: dict) -> bytes:
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str).encode()


def sign(secret: str, body: bytes) -> str:
    """The X-Decisionboard-Signature of a body: hex HMAC-SHA256 keyed with the channel secret."""
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class Transport:
    def __init__(self, channel: Any) -> None:
        self.channel = channel

    def notify(self, payload: dict) -> None:
        raise NotImplementedError


class _PinnedHTTP(http.client.HTTPConnection):
    """Connects to the address the safety check approved, whatever DNS says by now."""

    def __init__(self, host: str, port: int, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self.address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self.address, self.port), self.timeout)


class _PinnedHTTPS(http.client.HTTPSConnection):
    def __init__(self, host: str, port: int, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self.address = address

    def connect(self) -> None:
        sock = socket.create_connection((self.address, self.port), self.timeout)
        # The certificate is still checked against the host name, not the address.
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


class Webhook(Transport):
    timeout = 10.0

    def notify(self, payload: dict) -> None:
        body = encode(payload)
        try:
            addresses = check_webhook_url(self.channel.url)
        except UnsafeURL as exc:
            raise TransportError(f"refused: {exc}", permanent=True) from None
        parts = urlsplit(self.channel.url)
        https = parts.scheme == "https"
        port = parts.port or (443 if https else 80)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            SIGNATURE_HEADER: sign(self.channel.secret, body),
        }
        if payload.get("event_id") is not None:
            headers["X-Decisionboard-Event"] = str(payload["event_id"])
        connection_class = _PinnedHTTPS if https else _PinnedHTTP
        conn = connection_class(parts.hostname, port, addresses[0], self.timeout)
        try:
            conn.request("POST", path, body=body, headers=headers)
            response = conn.getresponse()
            detail = response.read(500).decode("utf-8", "replace").strip()
            status = response.status
        except (OSError, http.client.HTTPException) as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}") from None
        finally:
            conn.close()
        if 200 <= status < 300:
            return
        message = f"HTTP {status}" + (f": {detail[:200]}" if detail else "")
        if 300 <= status < 400:
            message += " (redirects are not followed: use the final URL)"
        raise TransportError(message, permanent=status < 500 and status not in _RETRYABLE_STATUS)


def _one_line(text: str) -> str:
    # Group names come from posted records: never let one break the mail headers.
    return " ".join(str(text).split())[:150]


def email_message(payload: dict) -> tuple[str, str]:
    rule = payload["rule"]
    group = f" [{payload['group']}]" if payload.get("group") else ""
    if payload.get("test"):
        subject = f"[Decisionboard] Test notification for {rule['name']}"
    elif payload.get("resolved"):
        subject = f"[Decisionboard] RESOLVED {rule['name']}{group}"
    else:
        label = payload["state"].upper()
        if payload.get("severity") == "warning" and payload["state"] == "firing":
            label = "WARNING"
        subject = f"[Decisionboard] {label} {rule['name']}{group}"
    value = payload.get("value")
    lines = [
        f"Rule: {rule['name']} ({rule['condition']})",
        f"Project: {payload.get('project', '')}",
        f"Group: {payload.get('group') or 'all'}",
        f"State: {payload.get('previous_state', '')} -> {payload['state']}"
        + (f" ({payload['severity']})" if payload.get("severity") else ""),
        f"Value: {units.display(rule.get('metric', ''), value)}"
        f" over {payload.get('window_minutes')} min ({payload.get('count', 0)} records)",
        f"Threshold: {units.threshold(rule.get('metric', ''), payload.get('threshold'))}",
        f"At: {payload.get('at')}",
        "",
        f"See it: {payload.get('url')}",
    ]
    detail = payload.get("detail") or {}
    if detail.get("measure"):
        # A release regression: the measure and both releases' values, not a window's value.
        lines[4:6] = [
            *release_watch.detail_lines(detail),
            f"Fires at: q ≤ {payload.get('threshold')}",
        ]
    return _one_line(subject), "\n".join(lines) + "\n"


class Email(Transport):
    def notify(self, payload: dict) -> None:
        subject, text = email_message(payload)
        try:
            send_mail(
                subject,
                text,
                settings.DEFAULT_FROM_EMAIL,
                list(self.channel.addresses),
                fail_silently=False,
            )
        except (smtplib.SMTPRecipientsRefused, BadHeaderError, ValueError) as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}", permanent=True) from None
        except (smtplib.SMTPException, OSError) as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}") from None


TRANSPORTS: dict[str, type[Transport]] = {"webhook": Webhook, "email": Email}


def transport_for(channel: Any) -> Transport:
    try:
        return TRANSPORTS[channel.kind](channel)
    except KeyError:
        raise TransportError(f"unknown channel kind {channel.kind!r}", permanent=True) from None
