"""Webhook URLs must not reach into the network Decisionboard runs in (SSRF).

A URL is refused when any address its host resolves to is loopback, private, link-local (the
cloud metadata service lives there), shared, multicast, reserved or unspecified, unless
`DECISIONBOARD["ALERTS_ALLOW_PRIVATE_WEBHOOKS"]` is on (a self-hosted receiver on the same
network; the tests' server on 127.0.0.1). The check runs when a channel is saved and again at
every delivery, and the delivery connects to the address that was checked, so a DNS answer that
changes in between (rebinding) cannot redirect it.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from urllib.parse import urlsplit

from django.conf import settings

Resolver = Callable[..., list]
# Carrier-grade NAT space: not "private" to Python 3.11, yet no public service lives there.
_SHARED = ipaddress.ip_network("100.64.0.0/10")


class UnsafeURL(ValueError):
    pass


def allow_private() -> bool:
    return bool(settings.DECISIONBOARD.get("ALERTS_ALLOW_PRIVATE_WEBHOOKS", False))


# IPv6 prefixes whose last 32 bits are an IPv4 address a gateway forwards to: NAT64 (the
# well-known and the local-use prefix) and the deprecated IPv4-compatible ::a.b.c.d.
_NAT64 = (
    ipaddress.ip_network("64:ff9b::/96"),
    ipaddress.ip_network("64:ff9b:1::/48"),
    ipaddress.ip_network("::/96"),
)


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address wraps: mapped, 6to4, Teredo (both ends), NAT64."""
    found = []
    if ip.ipv4_mapped is not None:
        found.append(ip.ipv4_mapped)
    if ip.sixtofour is not None:
        found.append(ip.sixtofour)
    if ip.teredo is not None:
        found.extend(ip.teredo)
    if any(ip in net for net in _NAT64):
        found.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return found


def is_internal(address: str) -> bool:
    """Whether `address`, or an IPv4 address it wraps (http://[2002:7f00:1::]/ is 127.0.0.1
    through 6to4), is one a webhook must not reach."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # drop an IPv6 zone id
    wrapped = _embedded_ipv4(ip) if isinstance(ip, ipaddress.IPv6Address) else []
    return _is_internal_ip(ip) or any(_is_internal_ip(v4) for v4 in wrapped)


def _is_internal_ip(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return (
        ip.is_loopback
        or ip.is_private
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
        or (isinstance(ip, ipaddress.IPv4Address) and ip in _SHARED)
    )


def check_webhook_url(url: str, *, resolver: Resolver = socket.getaddrinfo) -> list[str]:
    """The addresses `url` may be delivered to, or UnsafeURL saying why it may not."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise UnsafeURL(f"not a URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise UnsafeURL("the URL must start with http:// or https://")
    if not parts.hostname:
        raise UnsafeURL("the URL has no host")
    if parts.username or parts.password:
        raise UnsafeURL("put credentials in the channel secret, not in the URL")
    try:
        infos = resolver(parts.hostname, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise UnsafeURL(f"{parts.hostname} does not resolve ({exc})") from None
    addresses = list(dict.fromkeys(info[4][0] for info in infos))
    if not addresses:
        raise UnsafeURL(f"{parts.hostname} does not resolve")
    if not allow_private():
        internal = [a for a in addresses if is_internal(a)]
        if internal:
            raise UnsafeURL(
                f"{parts.hostname} resolves to {internal[0]}, a loopback, private or link-local "
                "address; webhooks go to public addresses only (an administrator can allow "
                "private ones with DECISIONBOARD_ALERTS_ALLOW_PRIVATE_WEBHOOKS)"
            )
    return addresses
