"""The built-in detectors of secrets and personal data in free text (docs/operations.md,
"Redaction").

Each detector is a regular expression and, where the format has one, a check that a match must
pass (Luhn for card numbers, mod 97 for IBANs, a digit among a key's characters), so that a
look-alike (a 16-digit order number, `sk-` in prose, a version string) is kept.

The patterns run on Python's `re`: they are ours, written so that no pattern can backtrack more
than a bounded number of steps at a position (every repetition is bounded). A project's own
patterns run on RE2 instead (records.contract.redaction).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

# Groups of detectors, as a project switches them on and off.


def marker(detector: str) -> str:
    """What a redacted value becomes."""
    return f"[REDACTED:{detector}]"


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


# Issuer prefixes and lengths of the card networks: a Luhn-valid number outside them (an epoch
# in milliseconds, an order number) is not taken for a card.
_CARD_PREFIX = re.compile(
    r"4\d{12}(?:\d{3}|\d{6})?"  # Visa: 13, 16, 19
    r"|(?:5[1-5]\d{2}|222[1-9]|22[3-9]\d|2[3-6]\d{2}|27[01]\d|2720)\d{12}"  # Mastercard
    r"|3[47]\d{13}"  # American Express
    r"|(?:6011|65\d{2}|64[4-9]\d)\d{12,15}"  # Discover
    r"|35(?:2[89]|[3-8]\d)\d{12,15}"  # JCB
    r"|3(?:0[0-5]|[68]\d)\d{11,16}"  # Diners Club
    r"|62\d{14,17}"  # UnionPay
)


def card_ok(text: str) -> bool:
    digits = text.replace(" ", "").replace("-", "")
    return _CARD_PREFIX.fullmatch(digits) is not None and luhn_ok(digits)


def iban_ok(text: str) -> bool:
    compact = text.replace(" ", "").upper()
    if not 15 <= len(compact) <= 34:
        return False
    rearranged = compact[4:] + compact[:4]
    number = "".join(str(int(ch, 36)) for ch in rearranged)
    return int(number) % 97 == 1


def phone_ok(text: str) -> bool:
    digits = sum(ch.isdigit() for ch in text)
    return 8 <= digits <= 15


def key_ok(text: str) -> bool:
    """A key's body mixes letters and digits; a hyphenated phrase after `sk-` does not."""
    return any(ch.isdigit() for ch in text) and any(ch.isalpha() for ch in text)


def assigned_ok(text: str) -> bool:
    """An assigned secret has a digit or is long; `password: required` in prose is neither."""
    return len(text) >= 16 or any(ch.isdigit() for ch in text)


@dataclass(frozen=True, slots=True)
class Detector:
    name: str
    # The pattern starts with a literal or a small class and has no lookbehind, so that `re`
    # skips to its candidates in C; what may precede a match is `boundary`'s to check.
    pattern: str
    check: Callable[[str], bool] | None = None
    # Substrings of which one must be in the text for the pattern to run at all; without them,
    # the pattern's own search is the test (as fast as a substring search for a literal start).
    triggers: tuple[str, ...] = ()
    # Characters that must not precede a match (it would be inside a longer token).
    boundary: str = ""


_WORD = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_"
_KEY_END = r"(?![A-Za-z0-9_-])"
# The names a secret is assigned to (`api_key=…`, `"password": "…"`), in any case.
_ASSIGNED_NAMES = frozenset(
    f"{head}{sep}{tail}"
    for head, tail in (
        ("api", "key"), ("secret", "key"), ("access", "key"), ("private", "key"),
        ("access", "token"), ("auth", "token"), ("refresh", "token"), ("client", "secret"),
    )
    for sep in ("_", "-", "")
) | {"passwd", "password", "secret", "token"}  # fmt: skip


_CARD_NUMBER = (
    r"[0-9][0-9][0-9][0-9][ -]?"
    r"(?:[0-9]{4}[ -]?[0-9]{4}[ -]?[0-9]{1,7}|[0-9]{6}[ -]?[0-9]{4,5})(?![0-9-])"
)
_PHONE_NUMBER = (
    r"(?:\+[0-9]{1,3}(?:[ .-]?\([0-9]{1,4}\))?(?:[ .-]?[0-9]{1,4}){2,5}"
    r"|\([0-9]{3}\)[ .-]?[0-9]{3}[ .-][0-9]{4}"
    r"|[0-9]{3}[.-][0-9]{3}[.-][0-9]{4})(?![0-9.-]?[0-9])"
)
DETECTORS: dict[str, Detector] = {
    d.name: d
    for d in (
        Detector(
            "anthropic",
            r"sk-ant-[A-Za-z0-9_-]{20,300}" + _KEY_END,
            check=key_ok,
            boundary=_WORD + "-",
        ),
        Detector(
            "openai",
            r"sk-(?:proj-|svcacct-|admin-)?(?!ant-)[A-Za-z0-9_-]{20,300}" + _KEY_END,
            check=key_ok,
            boundary=_WORD + "-",
        ),
        Detector(
            "aws",
            r"A(?:KIA|SIA|BIA|CCA|GPA|IDA|ROA|IPA|NPA|NVA|PKA)[A-Z0-9]{16}(?![A-Za-z0-9])",
            check=key_ok,
            boundary=_WORD,
        ),
        Detector(
            "github",
            r"g(?:h[pousr]_[A-Za-z0-9]{36,251}|ithub_pat_[A-Za-z0-9_]{22,255})(?![A-Za-z0-9_])",
            boundary=_WORD,
        ),
        Detector(
            "slack",
            r"xox[abposr]-[A-Za-z0-9-]{10,250}(?![A-Za-z0-9-])",
            check=key_ok,
            boundary=_WORD,
        ),
        Detector("google", r"AIza[0-9A-Za-z_-]{35}" + _KEY_END, boundary=_WORD + "-"),
        Detector(
            "jwt",
            r"eyJ[A-Za-z0-9_-]{5,4000}\.eyJ[A-Za-z0-9_-]{5,8000}\.[A-Za-z0-9_-]{0,2000}",
            boundary=_WORD + "-",
        ),
        Detector(
            "bearer",
            r"[Bb]earer[ \t]{1,4}(?P<bearer_value>[A-Za-z0-9._~+/-]{16,4000}=*)",
            check=key_ok,
            triggers=("earer",),
            boundary=_WORD,
        ),
        # Matched after a known name (_redact_assignments finds the names).
        Detector(
            "assignment",
            r"\\?[\"']?[ \t]{0,4}[:=][ \t]{0,4}\\?[\"']?"
            r"(?P<assignment_value>[^\s\"'\\,;&<>()\[\]{}]{8,1000})",
            check=assigned_ok,
        ),
        Detector("card", _CARD_NUMBER, check=card_ok, boundary="0123456789.-"),
        Detector(
            "iban",
            r"[A-Z][A-Z][0-9][0-9](?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?(?![A-Za-z0-9])",
            check=iban_ok,
            boundary=_WORD,
        ),
        # The domain, from the `@` on (_redact_emails reads the local part backwards).
        Detector(
            "email",
            r"@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.){1,8}[A-Za-z]{2,24}(?![\w-])",
            triggers=("@",),
        ),
        Detector("phone", _PHONE_NUMBER, check=phone_ok, boundary=_WORD + "+"),
    )
}
# Anthropic's keys start `sk-`: the more specific format goes first, and a key found inside an
# assignment is counted as its format.
_ORDER = (
    "anthropic", "openai", "aws", "github", "slack", "google", "jwt", "bearer", "assignment",
    "card", "iban", "email", "phone",
)  # fmt: skip
# An e-mail address's local part, read backwards from its `@`.
_LOCAL_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._%+-]{0,63}\Z")
_LOCAL_BEFORE = frozenset(_WORD + ".%+-")


class Scanner:
    """The enabled built-in detectors: `redact(text, counts)` returns the text with every match
    that passes its detector's check replaced by its marker.

    Each detector runs on its own, and only past a test as fast as a substring search: every
    key and token format is a run of at least _TOKEN_RUN word characters, which one translation
    of the text's bytes and one search find or rule out for all of them; then a detector's own
    pattern (a literal start) or trigger (`@`, `earer`), a separator for an assignment, and
    eight digits for a card. On the free text of most records, nothing passes, and those
    searches are all it costs.
    """

    def __init__(self, enabled: Iterable[str]) -> None:
        wanted = set(enabled)
        compiled = {n: (DETECTORS[n], re.compile(DETECTORS[n].pattern)) for n in wanted}
        # In _ORDER: the key and token formats first, then what a key inside an assignment
        # would otherwise be taken for. Split out once, so that a text costs no lookups here.
        self.tokens = tuple(compiled[n] for n in _ORDER if n in _TOKENS and n in wanted)
        self.assignment = compiled["assignment"][1] if "assignment" in wanted else None
        self.card = compiled["card"][1] if "card" in wanted else None
        self.iban = compiled["iban"] if "iban" in wanted else None
        self.email = compiled["email"][1] if "email" in wanted else None
        self.phone = compiled["phone"] if "phone" in wanted else None
        self.any = bool(wanted)

    def redact(self, text: str, counts: dict[str, int]) -> str:
        if not self.any:
            return text
        if self.tokens or self.card is not None:
            encoded = text.encode("utf-8", "surrogatepass")
        if self.tokens and _TOKEN_RUN in encoded.translate(_TOKEN_SHAPE):
            for detector, pattern in self.tokens:
                if detector.triggers:
                    if any(t in text for t in detector.triggers):
                        text = _redact_matches(text, pattern, counts, detector)
                elif pattern.search(text) is not None:
                    text = _redact_matches(text, pattern, counts, detector)
        if self.assignment is not None:
            text = _redact_assignments(text, self.assignment, counts)
        if self.card is not None:
            # The bytes of the text before any key was replaced: a quick test of whether it
            # holds eight digits, which a marker put in their place does not add.
            text = _redact_cards(text, encoded, self.card, counts)
        if self.iban is not None and self.iban[1].search(text) is not None:
            text = _redact_matches(text, self.iban[1], counts, self.iban[0])
        if self.email is not None and "@" in text:
            text = _redact_emails(text, self.email, counts)
        if self.phone is not None and self.phone[1].search(text) is not None:
            text = _redact_matches(text, self.phone[1], counts, self.phone[0])
        return text


# The detectors of key and token formats, each a run of _TOKEN_RUN word characters at least
# (Slack's shortest, `xoxb-` and ten; a bearer token, sixteen).
_TOKENS = frozenset(("anthropic", "openai", "aws", "github", "slack", "google", "jwt", "bearer"))
_TOKEN_RUN = b"w" * 15
_TOKEN_SHAPE = bytes.maketrans(
    bytes(range(256)),
    bytes(
        ord("w") if chr(c).isascii() and (chr(c).isalnum() or chr(c) in "_-") else ord(" ")
        for c in range(256)
    ),
)


def _redact_matches(
    text: str, pattern: re.Pattern, counts: dict[str, int], detector: Detector
) -> str:
    return pattern.sub(_replacer(detector, counts), text)


def _replacer(detector: Detector, counts: dict[str, int]) -> Callable[[re.Match], str]:
    value_group = f"{detector.name}_value"
    boundary = detector.boundary

    def replace(match: re.Match) -> str:
        found = match.group(0)
        start = match.start()
        if boundary and start and match.string[start - 1] in boundary:
            return found
        has_value = value_group in match.re.groupindex
        value = match.group(value_group) if has_value else found
        if detector.check is not None and not detector.check(value):
            return found
        name = detector.name
        if name == "assignment":
            name = specific_detector(value) or name
        counts[name] = counts.get(name, 0) + 1
        if not has_value:
            return marker(name)
        return found[: match.start(value_group) - start] + marker(name)

    return replace


# Every ASCII digit as "0", every other ASCII character as ".": a card number starts where
# "0000" does, found with a substring search rather than by `re` trying each digit.
_DIGIT_SHAPE = str.maketrans({chr(c): "0" if chr(c).isdigit() else "." for c in range(128)})


# A card number's first eight digits, as bytes: "0" a digit, "s" a space or hyphen.
_CARD_START = bytes.maketrans(b"0123456789 -", b"0000000000ss")


def _redact_cards(text: str, encoded: bytes, number: re.Pattern, counts: dict[str, int]) -> str:
    # A quick test first, on the text's bytes: eight digits, or four, a separator and four.
    # Dates, versions and times have neither.
    start = encoded.translate(_CARD_START)
    if b"00000000" not in start and b"0000s0000" not in start:
        return text
    shape = text.translate(_DIGIT_SHAPE)
    at = shape.find("0000")
    if at == -1:
        return text
    parts: list[str] = []
    done = 0
    before = DETECTORS["card"].boundary
    while at != -1:
        if at == 0 or text[at - 1] not in before:
            match = number.match(text, at)
            if match is not None and card_ok(match.group(0)):
                parts.append(text[done:at])
                parts.append(marker("card"))
                counts["card"] = counts.get("card", 0) + 1
                done = match.end()
                at = shape.find("0000", done)
                continue
        end = at + 4  # past this run of digits: no card starts inside one
        while end < len(shape) and shape[end] == "0":
            end += 1
        at = shape.find("0000", end)
    if not parts:
        return text
    parts.append(text[done:])
    return "".join(parts)


def _redact_emails(text: str, domain: re.Pattern, counts: dict[str, int]) -> str:
    """Addresses found from their `@` (the domain forward, the local part backward), so that
    the scan is linear in the text."""
    parts: list[str] = []
    done = 0
    at = text.find("@")
    while at != -1:
        after = domain.match(text, at)
        local = _LOCAL_PART.search(text, max(done, at - 64), at) if after else None
        if local is not None and after is not None:
            begin = local.start()
            if begin == 0 or text[begin - 1] not in _LOCAL_BEFORE:
                parts.append(text[done:begin])
                parts.append(marker("email"))
                counts["email"] = counts.get("email", 0) + 1
                done = after.end()
        at = text.find("@", max(at + 1, done))
    if not parts:
        return text
    parts.append(text[done:])
    return "".join(parts)


def _redact_assignments(text: str, value: re.Pattern, counts: dict[str, int]) -> str:
    """Secrets assigned to a known name: found from their `=` or `:` (few in most text), the
    name read backwards from it, and `value` (the separator and the value) matched after it."""
    if "=" not in text and ":" not in text:
        return text
    found: list[re.Match] = []
    for separator in "=:":
        at = text.find(separator)
        while at != -1:
            # Most separators (a time's, a URL's) follow no name: one look at the character
            # before rules them out.
            if at and text[at - 1] in _NAME_TAIL:
                end = assigned_name_end(text, at)
                if end is not None and (match := value.match(text, end)) is not None:
                    found.append(match)
            at = text.find(separator, at + 1)
    if not found:
        return text
    parts: list[str] = []
    done = 0
    replace = _replacer(DETECTORS["assignment"], counts)
    for match in sorted(found, key=lambda m: m.start()):
        if match.start() < done:
            continue
        parts.append(text[done : match.start()])
        parts.append(replace(match))
        done = match.end()
    parts.append(text[done:])
    return "".join(parts)


def assigned_name_end(text: str, separator: int) -> int | None:
    """Where a known name ends before the separator at `separator` (past blanks, a quote and a
    backslash, as in `"api_key": "…"`), if one does, starting a word."""
    end = separator
    while end > 0 and separator - end < 4 and text[end - 1] in " \t":
        end -= 1
    if end > 0 and text[end - 1] in "\"'":
        end -= 1
    if end > 0 and text[end - 1] == "\\":
        end -= 1
    # Every known name ends in y, n, t or d: most separators are passed over here.
    if end == 0 or text[end - 1] not in "yntdYNTD":
        return None
    for length in _NAME_LENGTHS:
        begin = end - length
        if begin < 0:
            break
        if text[begin:end].lower() in _ASSIGNED_NAMES and (
            begin == 0 or text[begin - 1] not in _NAME_BEFORE
        ):
            return end
    return None


# A name may end an identifier (`DB_PASSWORD`, `AWS_SECRET_ACCESS_KEY`), not a word (`mytoken`).
_NAME_BEFORE = frozenset(_WORD) - {"_"}
# What may stand right before a separator that follows a name: its last letter, blanks, a quote.
_NAME_TAIL = frozenset("yntdYNTD \t\"'\\")
_NAME_LENGTHS = tuple(sorted({len(name) for name in _ASSIGNED_NAMES}))
_SPECIFIC_PATTERNS = tuple((DETECTORS[n], re.compile(DETECTORS[n].pattern)) for n in _ORDER[:7])


def specific_detector(value: str) -> str | None:
    """The key format an assigned value has, if any: it is counted as that, not as an
    assignment."""
    for detector, pattern in _SPECIFIC_PATTERNS:
        if pattern.fullmatch(value) and (detector.check is None or detector.check(value)):
            return detector.name
    return None
