"""What a redaction rule may say, as plain data: the built-in detectors' names, a project
pattern's name and its check. The models validate rules with it and records.contract.redaction
applies them; it imports neither, so that judging records needs no Django set-up."""

from __future__ import annotations

import re
from typing import Any

import re2

# The built-in detectors by name (records.contract.detectors runs them), in the policy's groups.
SECRETS = ("openai", "anthropic", "aws", "github", "slack", "google", "jwt", "bearer", "assignment")
CARDS = ("card",)
PERSONAL = ("email", "phone", "iban")
BUILT_IN = (*SECRETS, *CARDS, *PERSONAL)
# What a project runs until it says otherwise: secrets on, personal data opt-in.
DEFAULTS = (*SECRETS, *CARDS)

# A rule's own name becomes part of its marker and a /metrics label.
RULE_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
MAX_PATTERN_CHARS = 1000
# RE2's own memory budget for one compiled pattern: a counted repetition that would need more
# (`(a{100}){100}`) is refused on save rather than degrading ingest.
_RE2_MAX_MEM = 8 << 20


class PatternError(ValueError):
    """A project's pattern that cannot be used, with the reason in words."""


def compile_pattern(pattern: str) -> Any:
    """The pattern compiled with RE2, or PatternError saying why it is refused."""
    if not pattern:
        raise PatternError("The pattern is empty.")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternError(f"The pattern is longer than {MAX_PATTERN_CHARS} characters.")
    options = re2.Options()
    options.log_errors = False
    options.max_mem = _RE2_MAX_MEM
    try:
        compiled = re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        if "invalid perl operator" in reason or "invalid escape sequence" in reason:
            reason += (
                " (lookaround and backreferences are refused: they need a backtracking engine, "
                "which can take exponential time on a crafted text)"
            )
        raise PatternError(f"The pattern cannot be used: {reason}.") from None
    if compiled.search("") is not None:
        raise PatternError("The pattern matches the empty text; it would match everywhere.")
    return compiled
