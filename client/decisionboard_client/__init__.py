"""Send decision records to Decisionboard without ever slowing or breaking the agent."""

from __future__ import annotations

from decisionboard_client._client import Decisionboard as _Client
from decisionboard_client._kinds import KindMethods
from decisionboard_client.provider_usage import (
    CallUsage,
    call_usage,
    usage_from_anthropic,
    usage_from_gemini,
    usage_from_langchain,
    usage_from_openai,
)


class Decisionboard(KindMethods, _Client):
    __doc__ = _Client.__doc__


__all__ = [
    "CallUsage",
    "Decisionboard",
    "call_usage",
    "usage_from_anthropic",
    "usage_from_gemini",
    "usage_from_langchain",
    "usage_from_openai",
]
__version__ = "0.2.0"
