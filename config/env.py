"""Small typed readers for settings that come from the environment.

Each fails loudly with ImproperlyConfigured naming the variable, so that a typo in a deployment
stops the process at start-up instead of running with a silent default.
"""

from __future__ import annotations

import os
import re

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
_SIZE = re.compile(r"^\s*(\d+)\s*([kmg]?)b?\s*$", re.IGNORECASE)
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*(s|sec|second|m|min|minute|h|hour|d|day)\s*$")
_PERIODS = {
    "s": 1,
    "sec": 1,
    "second": 1,
    "m": 60,
    "min": 60,
    "minute": 60,
    "h": 3600,
    "hour": 3600,
    "d": 86400,
    "day": 86400,
}


def env_str(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return default if value is None or value == "" else value


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean (use 1/0, true/false, yes/no)")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={value!r} is below the minimum, {minimum}")
    return number


def parse_size(text: str) -> int:
    """'5MB' -> 5242880; bare numbers are bytes."""
    match = _SIZE.match(text)
    if not match:
        raise ValueError(text)
    number, unit = int(match.group(1)), match.group(2).lower()
    return number * {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[unit]


def env_size(name: str, default: str) -> int:
    value = env_str(name, default)
    try:
        return parse_size(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not a size (e.g. 5MB, 512KB)") from None


def parse_rate(text: str) -> tuple[int, int]:
    """'1000/s' -> (1000, 1); '600/5min' -> (600, 300). Returns (requests, period seconds)."""
    match = _RATE.match(text)
    if not match:
        raise ValueError(text)
    count, multiple, unit = int(match.group(1)), match.group(2), match.group(3)
    period = (int(multiple) if multiple else 1) * _PERIODS[unit]
    if count < 1 or period < 1:
        raise ValueError(text)
    return count, period


def env_rate(name: str, default: str) -> str:
    value = env_str(name, default)
    try:
        parse_rate(value)
    except ValueError:
        raise ImproperlyConfigured(
            f"{name}={value!r} is not a rate (e.g. 1000/s, 20000/min, 600/5min)"
        ) from None
    return value
