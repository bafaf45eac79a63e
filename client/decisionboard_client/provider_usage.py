"""A provider's token usage, as its API or SDK returns it, in a `model_call`'s terms.

A `model_call`'s usage counts each token once: `input` excludes the cache reads (`cacheRead`)
and cache writes (`cacheWrite`), `output` excludes the reasoning tokens (`thinking`). That is
Anthropic's convention. OpenAI's (and Gemini's, and LangChain's) prompt count includes the
cached tokens and its completion count the reasoning tokens, so copying those counts as they
are charges the cached and reasoning tokens twice; nothing in the stored record can show it.
These functions take the provider's usage as it came (a dict, or an SDK object read by
attribute) and return the disjoint counts.

`call_usage` recognises the shape itself; the `usage_from_*` functions say which it is.
Each returns None for something it cannot read, rather than raise into the agent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict


class CallUsage(TypedDict, total=False):
    """A `model_call`'s usage: disjoint counts, each token in one of them."""

    input: int
    output: int
    cacheRead: int
    cacheWrite: int
    thinking: int


_OURS = frozenset({"input", "output", "cacheRead", "cacheWrite", "thinking"})


def _get(source: Any, *names: str) -> Any:
    """The first of `names` that `source` holds (a key, or an attribute of an SDK object)."""
    for name in names:
        value = source.get(name) if isinstance(source, Mapping) else getattr(source, name, None)
        if value is not None:
            return value
    return None


def _has(source: Any, *names: str) -> bool:
    if isinstance(source, Mapping):
        return any(name in source for name in names)
    return any(hasattr(source, name) for name in names)


def _count(source: Any, *path: str | tuple[str, ...]) -> int:
    """A token count at `path` (each step a name, or the names it may go by), 0 when absent."""
    for step in path:
        if source is None:
            return 0
        source = _get(source, *((step,) if isinstance(step, str) else step))
    if isinstance(source, bool) or not isinstance(source, (int, float)):
        return 0
    return max(0, int(source))


def _usage(
    fresh: int, output: int, cache_read: int = 0, cache_write: int = 0, thinking: int = 0
) -> CallUsage:
    out: CallUsage = {"input": max(0, fresh), "output": max(0, output)}
    # Zero counts are left out, as a record without cache or reasoning tokens would be.
    if cache_read:
        out["cacheRead"] = cache_read
    if cache_write:
        out["cacheWrite"] = cache_write
    if thinking:
        out["thinking"] = thinking
    return out


def _unwrap(source: Any, *names: str) -> Any:
    """The usage inside a whole response (`response.usage`), or `source` itself."""
    inner = _get(source, *names)
    return inner if inner is not None else source


def usage_from_openai(usage: Any) -> CallUsage | None:
    """OpenAI's usage, of Chat Completions (`prompt_tokens`, `completion_tokens` and their
    `*_details`) or of the Responses API (`input_tokens`, `output_tokens`,
    `input_tokens_details.cached_tokens`, `output_tokens_details.reasoning_tokens`). Both
    include the cached tokens (read, and written where `cache_write_tokens` says so) in the
    prompt count and the reasoning tokens in the output count; they are taken out here. Also
    for Azure OpenAI and the OpenAI-compatible APIs that report usage the same way."""
    try:
        usage = _unwrap(usage, "usage")
        if _has(usage, "prompt_tokens", "completion_tokens"):
            prompt, completion = _count(usage, "prompt_tokens"), _count(usage, "completion_tokens")
            details = "prompt_tokens_details"
            reasoning = _count(usage, "completion_tokens_details", "reasoning_tokens")
        elif _has(usage, "input_tokens", "output_tokens"):
            prompt, completion = _count(usage, "input_tokens"), _count(usage, "output_tokens")
            details = "input_tokens_details"
            reasoning = _count(usage, "output_tokens_details", "reasoning_tokens")
        else:
            return None
        cached = _count(usage, details, "cached_tokens")
        written = _count(usage, details, "cache_write_tokens")
        return _usage(prompt - cached - written, completion - reasoning, cached, written, reasoning)
    except Exception:  # an SDK object that misbehaves must not reach the agent
        return None


def usage_from_anthropic(usage: Any) -> CallUsage | None:
    """Anthropic's usage (`input_tokens`, `output_tokens`, `cache_read_input_tokens`,
    `cache_creation_input_tokens`): already disjoint. Its output count includes any extended
    thinking, which the API does not report apart, so `thinking` stays out."""
    try:
        usage = _unwrap(usage, "usage")
        if not _has(usage, "input_tokens", "output_tokens"):
            return None
        return _usage(
            _count(usage, "input_tokens"),
            _count(usage, "output_tokens"),
            _count(usage, "cache_read_input_tokens"),
            _count(usage, "cache_creation_input_tokens"),
        )
    except Exception:  # an SDK object that misbehaves must not reach the agent
        return None


def usage_from_gemini(usage: Any) -> CallUsage | None:
    """Google Gemini's `usageMetadata` (REST, camelCase) or `usage_metadata` (google-genai SDK,
    snake_case). `promptTokenCount` includes `cachedContentTokenCount`, which is taken out;
    `candidatesTokenCount` excludes `thoughtsTokenCount`; `toolUsePromptTokenCount` (the
    prompt of a built-in tool) is input too."""
    try:
        usage = _unwrap(usage, "usageMetadata", "usage_metadata")
        prompt_names = ("promptTokenCount", "prompt_token_count")
        if not _has(usage, *prompt_names, "candidatesTokenCount", "candidates_token_count"):
            return None
        cached = _count(usage, ("cachedContentTokenCount", "cached_content_token_count"))
        return _usage(
            _count(usage, prompt_names)
            + _count(usage, ("toolUsePromptTokenCount", "tool_use_prompt_token_count"))
            - cached,
            _count(usage, ("candidatesTokenCount", "candidates_token_count")),
            cached,
            0,
            _count(usage, ("thoughtsTokenCount", "thoughts_token_count")),
        )
    except Exception:  # an SDK object that misbehaves must not reach the agent
        return None


def usage_from_langchain(usage: Any) -> CallUsage | None:
    """LangChain's `usage_metadata` (`input_tokens` and `output_tokens` are sums of every kind,
    `input_token_details` has `cache_read` and `cache_creation`, `output_token_details` has
    `reasoning`), whichever provider the chat model talks to."""
    try:
        usage = _unwrap(usage, "usage_metadata")
        if not _has(usage, "input_tokens", "output_tokens"):
            return None
        read = _count(usage, "input_token_details", "cache_read")
        write = _count(usage, "input_token_details", "cache_creation")
        reasoning = _count(usage, "output_token_details", "reasoning")
        return _usage(
            _count(usage, "input_tokens") - read - write,
            _count(usage, "output_tokens") - reasoning,
            read,
            write,
            reasoning,
        )
    except Exception:  # an SDK object that misbehaves must not reach the agent
        return None


def call_usage(usage: Any) -> CallUsage | None:
    """A `model_call`'s usage from any of the shapes above, told apart by their fields; a
    usage already in the record's terms comes back as it is. None when the shape is unknown."""
    if isinstance(usage, Mapping) and "input" in usage and _OURS.issuperset(usage):
        return dict(usage)  # type: ignore[return-value]
    try:
        inner = _unwrap(usage, "usage", "usageMetadata", "usage_metadata")
        if _has(inner, "prompt_tokens", "completion_tokens", "input_tokens_details"):
            return usage_from_openai(inner)
        if _has(inner, "cache_read_input_tokens", "cache_creation_input_tokens"):
            return usage_from_anthropic(inner)
        if _has(inner, "input_token_details", "output_token_details"):
            return usage_from_langchain(inner)
        if _has(inner, "promptTokenCount", "prompt_token_count"):
            return usage_from_gemini(inner)
        if _has(inner, "input_tokens", "output_tokens"):
            # Input and output alone: no cached or reasoning tokens to tell the conventions apart.
            return usage_from_anthropic(inner)
    except Exception:  # an SDK object that misbehaves must not reach the agent
        return None
    return None
