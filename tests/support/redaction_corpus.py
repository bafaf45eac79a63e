"""Records with planted secrets and personal data, and as many look-alikes that must be kept.

`corpus(seed)` places them, at random but reproducibly, into every free-text place of the record
kinds (a turn's text and its tool calls' nested arguments, a notice's message and detail, error
messages, a request patch, a field the kind does not declare), and says what each record must
count once redacted. The values are known test numbers and made-up keys in the real formats.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tests.support.factories import record

# (detector, the whole planted text, the part of it that must disappear)
SECRETS: list[tuple[str, str, str]] = [
    (
        "openai",
        "sk-proj-Zq4Lm8Nw2Xc7Vb1Rt6Yu3Pk9Hs5Dg0Fa",
        "sk-proj-Zq4Lm8Nw2Xc7Vb1Rt6Yu3Pk9Hs5Dg0Fa",
    ),
    (
        "openai",
        "sk-T3BlbkFJ9xQ2mW7vK4pL8nR1sD6fG0hJ5kZ3aB",
        "sk-T3BlbkFJ9xQ2mW7vK4pL8nR1sD6fG0hJ5kZ3aB",
    ),
    (
        "anthropic",
        "sk-ant-api03-Wx7Kp2Qr9Lm4Nz8Vb3Hc6Tj1Yf5Gd0Su-AbCd",
        "sk-ant-api03-Wx7Kp2Qr9Lm4Nz8Vb3Hc6Tj1Yf5Gd0Su-AbCd",
    ),
    ("aws", "AKIAZ7Q3L9M2N8P4X6RT", "AKIAZ7Q3L9M2N8P4X6RT"),
    (
        "github",
        "ghp_R8kLm2Qw9Zx4Vc7Bn1Mp6Ts3Yh5Jd0Gf8Kax",
        "ghp_R8kLm2Qw9Zx4Vc7Bn1Mp6Ts3Yh5Jd0Gf8Kax",
    ),
    (
        "slack",
        "xoxb-2849271630-9482716305-QwErTyUiOpAsDfGh",
        "xoxb-2849271630-9482716305-QwErTyUiOpAsDfGh",
    ),
    (
        "google",
        "AIzaSyD7kL2mQ9wX4vC8bN1pT6sR3yH5jG0fK2e",
        "AIzaSyD7kL2mQ9wX4vC8bN1pT6sR3yH5jG0fK2e",
    ),
    (
        "jwt",
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJjdXN0LTQ0MjEiLCJyb2xlIjoiYWRtaW4ifQ"
        ".Qm9k8Xz2Lp4Vr7Ns1Tc6Yh3Jw5Ka0Gf9Eb2Dd",
        "eyJzdWIiOiJjdXN0LTQ0MjEiLCJyb2xlIjoiYWRtaW4ifQ",
    ),
    (
        "bearer",
        "Authorization: Bearer 8f3Kq9Lz2Wm7Xv4Nc1Tb6Ry5Hs0Pd",
        "8f3Kq9Lz2Wm7Xv4Nc1Tb6Ry5Hs0Pd",
    ),
    ("assignment", "api_key=Zx9Qw2Er7Ty4Ui1Op", "Zx9Qw2Er7Ty4Ui1Op"),
    ("assignment", "password: hunter2-Kx93jq", "hunter2-Kx93jq"),
    ("card", "4111 1111 1111 1111", "4111 1111 1111 1111"),
    ("card", "5555555555554444", "5555555555554444"),
    ("card", "3782-822463-10005", "3782-822463-10005"),
]
PERSONAL: list[tuple[str, str, str]] = [
    ("email", "dana.whitfield@northwind-example.com", "dana.whitfield@northwind-example.com"),
    ("email", "ops+alerts@example.org", "ops+alerts@example.org"),
    ("phone", "+44 20 7946 0958", "+44 20 7946 0958"),
    ("phone", "(415) 555-0132", "(415) 555-0132"),
    ("iban", "DE89 3704 0044 0532 0130 00", "DE89 3704 0044 0532 0130 00"),
    ("iban", "GB82WEST12345698765432", "GB82WEST12345698765432"),
]
# Each must be stored exactly as sent.
LOOK_ALIKES: list[str] = [
    "4111 1111 1111 1112",  # a card number's shape, failing Luhn
    "1234567812345678",  # sixteen digits, failing Luhn
    "5105105105105101",  # a Mastercard prefix, failing Luhn
    "1733500000000",  # an epoch in milliseconds
    "order 1234-5678-9012",  # twelve digits
    "sk-learn",  # a library's name
    "sk-this-is-a-long-hyphenated-phrase-in-prose",  # `sk-` in prose, no digits
    "v1.2.3",
    "2.14.0-rc.1",
    "10.0.0.12",
    "2026-12-06",
    "DE89 3704 0044 0532 0130 01",  # an IBAN's shape, failing mod 97
    "GB82WEST12345698765431",
    "AKIA1234",  # too short for an access key id
    "ghp_short",
    "xoxo, the team",
    "the bearer of bad news",
    "password: required",  # no secret assigned
    "token budget: 4096",
    "pkg@1.2.3",  # a version pin, not an address
    "user@localhost",
    "ticket #4242",
    "10:30:45",
]

PROSE = [
    "The customer wrote in about {}.",
    "Retrying with {} after the timeout.",
    "Note: {} was in the prompt.",
    "See {}, then continue.",
]


@dataclass
class Planted:
    raw: dict[str, Any]
    # What must be gone and what must stay, and the counts the record must keep.
    gone: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)


def _sentence(rng: random.Random, values: list[str]) -> str:
    return " ".join(rng.choice(PROSE).format(v) for v in values)


def _carriers(rng: random.Random, texts: list[str]) -> tuple[str, dict[str, Any]]:
    """A kind and its data with each text put into one of its free-text places."""
    kind = rng.choice(["turn", "notice", "provider.error", "reliability", "model_selection"])
    slots: list[str] = []
    if kind == "turn":
        data: dict[str, Any] = {"protocol": "implicit", "text": "", "toolCalls": []}
        for text in texts:
            place = rng.choice(["text", "arguments", "nested", "undeclared"])
            if place == "text":
                data["text"] += text + " "
            elif place == "arguments":
                data["toolCalls"].append({"name": "send_mail", "arguments": {"body": text}})
            elif place == "nested":
                data["toolCalls"].append(
                    {"name": "http_get", "arguments": {"headers": [{"value": text}], "n": 3}}
                )
            else:
                slots.append(text)
        if slots:
            data["vendorContext"] = {"notes": slots}
        return kind, data
    if kind == "notice":
        data = {"code": "agent.note", "level": "info", "message": "", "detail": {}}
        for i, text in enumerate(texts):
            if rng.random() < 0.5:
                data["message"] += text + " "
            else:
                data["detail"][f"part{i}"] = {"lines": [text], "seen": True}
        return kind, data
    if kind == "provider.error":
        return kind, {"message": " ".join(texts)}
    if kind == "reliability":
        return kind, {"type": "fail_fast", "reason": " ".join(texts)}
    patch = {"preamble": "", "additional_params": {"metadata": []}}
    for text in texts:
        if rng.random() < 0.5:
            patch["preamble"] += text + " "
        else:
            patch["additional_params"]["metadata"].append(text)
    return kind, {"request_patch": patch}


def corpus(seed: int, n: int = 40, *, personal: bool = True) -> list[Planted]:
    """`n` records; each carries one to three planted values and one to three look-alikes.
    With `personal` false, the personal data is planted as look-alikes (kept by default)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        planted = Planted(raw={})
        secrets = rng.sample(SECRETS, rng.randint(1, 2))
        personal_values = rng.sample(PERSONAL, rng.randint(0, 1))
        looks = rng.sample(LOOK_ALIKES, rng.randint(1, 3))
        texts = []
        for detector, text, part in secrets + (personal_values if personal else []):
            planted.gone.append(part)
            planted.counts[detector] += 1
            texts.append(_sentence(rng, [text]))
        if not personal:
            planted.kept += [text for _d, text, _p in personal_values]
            texts += [_sentence(rng, [text]) for _d, text, _p in personal_values]
        planted.kept += looks
        texts += [_sentence(rng, [text]) for text in looks]
        rng.shuffle(texts)
        kind, data = _carriers(rng, texts)
        planted.raw = record(kind, data=data, run_id=f"redaction-{seed}-{i // 8}")
        out.append(planted)
    return out
