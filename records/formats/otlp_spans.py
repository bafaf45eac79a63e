"""OTLP spans as plain data, and where each belongs.

`spans_of` reads the spans of a decoded export into `SpanView`s (attributes as JSON values, an
`AttributeReader` noting whether any value needs normalise's scrub); `Trace` indexes one export's
spans so a span finds its ancestors, and from them its `Scope`: run, parent run, agent, session.
Pure functions; records.formats.otlp_mapping turns spans into records.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Status

from records.formats import ai_sdk_spans, openinference
from records.formats import attributes as attrs

# --- attribute names -------------------------------------------------------------------------
# Decisionboard's own attributes: on a span (inherited by its descendants in the same export),
# on the resource, or on a decisionboard.<kind> event (that record only).
PREFIX = "decisionboard."
RUN_ID = "decisionboard.run_id"
PARENT_RUN_ID = "decisionboard.parent_run_id"
AGENT = "decisionboard.agent"
SESSION_ID = "decisionboard.session_id"
ITERATION = "decisionboard.iteration"
RETRYABLE = "decisionboard.retryable"  # a failed inference span: overrides the guessed retryable

# OpenTelemetry GenAI semantic conventions (semconv 1.37+); the model-call attributes are read
# by records.formats.genai_messages.
OPERATION = "gen_ai.operation.name"
RESPONSE_ID = "gen_ai.response.id"
FINISH_REASONS = "gen_ai.response.finish_reasons"
AGENT_NAME = "gen_ai.agent.name"
CONVERSATION_ID = "gen_ai.conversation.id"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
ERROR_TYPE = "error.type"
# What the agent ran as, the record's `release`: the resource's service.version, unless a span
# of the lineage names the agent's version, unless the AI SDK caller's metadata names a release.
SERVICE_VERSION = "service.version"
AGENT_VERSION = "gen_ai.agent.version"
# (AI SDK 7 passes the caller's context as ai.settings.context.*, as it does the session.)
RELEASE_NAMES = (
    ai_sdk_spans.METADATA + "release",
    ai_sdk_spans.RUNTIME_CONTEXT + "release",
    AGENT_VERSION,
)
# Where a span's agent and session are named, in the order they are looked for.
AGENT_NAMES = (AGENT, AGENT_NAME, openinference.AGENT_NAME, ai_sdk_spans.FUNCTION_ID)
SESSION_NAMES = (SESSION_ID, CONVERSATION_ID, openinference.SESSION_ID, *ai_sdk_spans.SESSION_KEYS)

EXECUTE_TOOL = "execute_tool"
INVOKE_AGENT = "invoke_agent"
# How far up a parent chain is followed (a loop of parent ids in a hostile export ends too).
_MAX_DEPTH = 100
# A span's name in a rejection is cut here: the answer names every rejected span.
_LABEL_NAME_CHARS = 120


@dataclass(slots=True)
class EventView:
    """A span event. Its attributes are read from the decoded export when first asked for; a
    decisionboard.<kind> event's are read straight into its record instead (record_event)."""

    index: int
    name: str
    time_ns: int
    key_values: Any  # the event's KeyValues, in the decoded export
    reader: AttributeReader
    _attributes: dict[str, Any] | None = None

    @property
    def attributes(self) -> dict[str, Any]:
        if self._attributes is None:
            self._attributes = self.reader.attributes(self.key_values)
        return self._attributes


@dataclass(slots=True)
class SpanView:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    failed: bool
    status_message: str
    events: list[EventView]
    # What each convention names the span's operation (spans_of reads them once: every
    # declaration asks): gen_ai.operation.name when it is a string,
    operation: str | None
    # openinference.span.kind (upper case) when it is a string,
    oi_kind: str | None
    # and the Vercel AI SDK's operation (`ai.generateText.doGenerate`, ...) when it is one.
    ai_operation: str | None
    # `ended` and `scope_keys`, once asked for: a span's records and its children ask again.
    _ended: datetime | None = None
    _scope_keys: ScopeKeys | None = None

    @property
    def label(self) -> str:
        name = (
            self.name
            if len(self.name) <= _LABEL_NAME_CHARS
            else self.name[:_LABEL_NAME_CHARS] + "…"
        )
        return f"span {self.span_id or '(no id)'} {name!r}"

    @property
    def identified(self) -> bool:
        """Whether the span has the trace and span ids OTLP requires (not empty, not zeros):
        records are keyed by them, so without them a span cannot be mapped."""
        return bool(self.trace_id.strip("0") and self.span_id.strip("0"))

    @property
    def scope_keys(self) -> ScopeKeys:
        """Which attributes of its scope the span names (scope_keys_of)."""
        if self._scope_keys is None:
            self._scope_keys = scope_keys_of(self.attributes)
        return self._scope_keys

    @property
    def ended(self) -> datetime:
        """When the span ended, the `ts` of the records that stand for it."""
        if self._ended is None:
            self._ended = timestamp(self.end_ns)
        return self._ended

    @property
    def duration_ms(self) -> float:
        return max(self.end_ns - self.start_ns, 0) / 1e6


def timestamp(ns: int) -> datetime:
    """A record's `ts` from nanoseconds since the epoch: normalise takes a datetime as it takes
    RFC 3339 text (and judges it the same), without a round trip through text."""
    return datetime.fromtimestamp(ns / 1e9, UTC)


# Arrays of strings read before, by their wire bytes (AttributeReader.array): bounded in count
# and size, since a hostile export may send a new array with every span, and forgotten all at
# once when full, so that the arrays of the moment come back; short arrays (a finish reason)
# cost less to read than to look up.
READ_ARRAYS: dict[bytes, list[str]] = {}
MAX_REMEMBERED_ARRAYS = 256
MIN_REMEMBERED_ARRAY_BYTES = 256
MAX_REMEMBERED_ARRAY_BYTES = 65_536


class AttributeReader:
    """Reads OTLP values as JSON, noting whether any could need normalise's scrub: a NUL in a
    string (PostgreSQL cannot store it) or a non-finite double, as the native path notes them in
    the body. Scrubbing every record would cost a walk over every value."""

    __slots__ = ("dirty",)

    def __init__(self) -> None:
        self.dirty = False

    def value(self, value: AnyValue) -> Any:
        """An AnyValue as JSON: arrays become lists, kvlists objects, bytes base64."""
        which = value.WhichOneof("value")
        if which == "string_value":
            text = value.string_value
            if "\x00" in text or "\\u0000" in text:  # the latter once parsed as JSON
                self.dirty = True
            return text
        if which == "int_value" or which == "bool_value":
            return getattr(value, which)
        if which == "double_value":
            number = value.double_value
            if not math.isfinite(number):
                self.dirty = True
            return number
        if which == "array_value":
            return self.array(value.array_value)
        if which == "kvlist_value":
            return self.attributes(value.kvlist_value.values)
        if which == "bytes_value":
            return base64.b64encode(value.bytes_value).decode()
        return None

    def attributes(self, key_values: Iterable) -> dict[str, Any]:
        """Key-values as an object (the last of a repeated key wins).

        Strings, the most common value by far, are read here rather than through value(), and
        without asking which member is set: only a string value has a non-empty string_value
        (an empty one goes through value()). This loop runs for every attribute of every span
        and event, and each call into the protobuf message costs.
        """
        out: dict[str, Any] = {}
        for kv in key_values:
            value = kv.value
            text = value.string_value
            if text:
                if "\x00" in text or "\\u0000" in text:
                    self.dirty = True
                out[kv.key] = text
            else:
                # Likewise a non-zero int_value is an integer (token counts, mostly).
                out[kv.key] = value.int_value or self.value(value)
        return out

    def array(self, array: Any) -> list[Any]:
        """An ArrayValue's values. An agent sends the same long arrays with every call (the AI
        SDK's offered tools, one JSON string each): such an array's values are remembered by its
        wire bytes, which the protobuf runtime writes out in one call, cheaper than reading its
        strings one by one. Only arrays read clean are remembered, so a hit needs no NUL check;
        a fresh list is handed out each time."""
        wire = array.SerializeToString()
        known = READ_ARRAYS.get(wire)
        if known is not None:
            return list(known)
        dirty, self.dirty = self.dirty, False
        values = self.items(array.values)
        if (
            not self.dirty
            and MIN_REMEMBERED_ARRAY_BYTES <= len(wire) <= MAX_REMEMBERED_ARRAY_BYTES
            and all(isinstance(v, str) for v in values)
        ):
            if len(READ_ARRAYS) >= MAX_REMEMBERED_ARRAYS:
                READ_ARRAYS.clear()
            READ_ARRAYS[wire] = values
            values = list(values)
        self.dirty = self.dirty or dirty
        return values

    def items(self, values: Iterable) -> list[Any]:
        """An array's values (an AI SDK span's offered tools: one string each). Read as strings
        first, in one pass, and checked for NULs together (a `\\u0000` across two of them only
        costs a scrub); what is not a non-empty string is then read by value()."""
        texts = [value.string_value for value in values]
        joined = "".join(texts)
        if "\x00" in joined or "\\u0000" in joined:
            self.dirty = True
        if all(texts):
            return texts
        return [text or self.value(value) for text, value in zip(texts, values, strict=True)]


def spans_of(
    request: ExportTraceServiceRequest, reader: AttributeReader | None = None
) -> list[SpanView]:
    reader = reader or AttributeReader()
    read = reader.attributes
    error = Status.STATUS_CODE_ERROR
    spans = []
    for resource_spans in request.resource_spans:
        resource = read(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                attributes = read(span.attributes) if span.attributes else {}
                name = span.name
                status = span.status
                message = status.message
                if "\x00" in name or "\x00" in message:  # both reach `data`
                    reader.dirty = True
                operation = attributes.get(OPERATION)
                events = span.events
                events = (
                    [
                        EventView(i, e.name, e.time_unix_nano, e.attributes, reader)
                        for i, e in enumerate(events)
                    ]
                    if events
                    else []
                )
                spans.append(
                    SpanView(
                        span.trace_id.hex(),
                        span.span_id.hex(),
                        span.parent_span_id.hex(),
                        name,
                        span.start_time_unix_nano,
                        span.end_time_unix_nano,
                        attributes,
                        resource,
                        status.code == error or ERROR_TYPE in attributes,
                        message,
                        events,
                        operation if isinstance(operation, str) else None,
                        openinference.kind_of(attributes)
                        if openinference.SPAN_KIND in attributes
                        else None,
                        ai_sdk_spans.operation_id(name, attributes),
                    )
                )
    return spans


# --- where a span belongs: run, parent run, agent, session -------------------------------------
class Scope(NamedTuple):
    """Where a span's records belong (a tuple: one is made for every span that has records)."""

    run_id: str
    parent_run_id: str | None
    agent: str | None
    session_id: str | None
    release: str | None = None


class Trace:
    """The spans of one export, indexed so a span can look up its ancestors in the same export.

    A span's parent may have been exported in another request (a parent ends after its children,
    so batching exporters often send it later): then the chain stops there, and what the span
    inherits comes from the resource (see docs/api.md, "OTLP", on deterministic runs).
    """

    def __init__(self, spans: list[SpanView]):
        self.spans = spans
        self.by_id = {(s.trace_id, s.span_id): s for s in spans}
        self._scopes: dict[tuple[str, str], Scope] = {}
        # What a resource's attributes give a span that has no attributes and no ancestor in
        # the export: (run_id or None for the trace, parent_run_id, agent, session_id, release).
        self._resource_scopes: dict[int, tuple[str | None, ...]]
        self._resource_scopes = {}
        self._structure_agents: dict[tuple[str, str], str | None] = {}
        self._ancestors: dict[tuple[str, str], list[SpanView]] = {}

    def ancestors(self, span: SpanView) -> list[SpanView]:
        """The span's parent, grandparent, ... as far as this export holds them (a list kept
        for the span's other readers: not to be changed)."""
        key = (span.trace_id, span.span_id)
        chain = self._ancestors.get(key)
        if chain is None:
            chain = self._ancestors[key] = self._lineage_above(span)
        return chain

    def _lineage_above(self, span: SpanView) -> list[SpanView]:
        chain: list[SpanView] = []
        seen = {span.span_id}
        current = span
        while current.parent_span_id and len(chain) < _MAX_DEPTH:
            parent = self.by_id.get((current.trace_id, current.parent_span_id))
            if parent is None or parent.span_id in seen:
                break
            chain.append(parent)
            seen.add(parent.span_id)
            current = parent
        return chain

    def scope(self, span: SpanView) -> Scope:
        if not span.attributes and (span.trace_id, span.parent_span_id) not in self.by_id:
            return self._resource_scope(span)
        key = (span.trace_id, span.span_id)
        scope = self._scopes.get(key)
        if scope is None:
            scope = self._folded(span)
        return scope

    def _folded(self, span: SpanView) -> Scope:
        """The scope of `span`, from its nearest ancestor whose scope is known when every span
        between says nothing of its run and release (a model call or a tool under an agent
        span, typically): such a span's scope is its parent's, with its own agent and session if
        it names them. What _resolve would find, without walking the lineage again for each of
        a run's spans. A span that opens a run or names one is resolved in full."""
        parent = self.by_id.get((span.trace_id, span.parent_span_id))
        if parent is not None and parent.resource is span.resource:
            # Most often the parent's scope is known already (a run's calls under its agent
            # span): one step, without the walk below.
            known = self._scopes.get((parent.trace_id, parent.span_id))
            if known is not None and _inherits_scope(span):
                scope = self._scopes[(span.trace_id, span.span_id)] = _narrowed(span, known)
                return scope
        chain: list[SpanView] = []
        seen: set[str] = set()
        current = span
        base: Scope | None = None
        while len(chain) < _MAX_DEPTH:
            key = (current.trace_id, current.span_id)
            known = self._scopes.get(key)
            if known is not None:
                base = known
                break
            parent = (
                self.by_id.get((current.trace_id, current.parent_span_id))
                if current.parent_span_id
                else None
            )
            if (
                parent is None
                or parent.resource is not current.resource
                or parent.span_id in seen
                or not _inherits_scope(current)
            ):
                break
            chain.append(current)
            seen.add(current.span_id)
            current = parent
        if base is None:
            base = self._scopes[(current.trace_id, current.span_id)] = self._resolve(current)
        for node in reversed(chain):
            base = self._scopes[(node.trace_id, node.span_id)] = _narrowed(node, base)
        return base

    def _resolve(self, span: SpanView) -> Scope:
        lineage = [span, *self.ancestors(span)]
        run_id, parent_run_id = self._run(span, lineage)
        return Scope(
            run_id=run_id,
            parent_run_id=parent_run_id,
            agent=self._agent(lineage),
            session_id=inherited(lineage, SESSION_NAMES),
            release=release_of(lineage),
        )

    def _agent(self, lineage: list[SpanView]) -> str | None:
        """The nearest agent the lineage names: an agent attribute, else the agent a structure
        span stands for (openinference.structure_agent), else the resource's."""
        for node in lineage:
            for name in AGENT_NAMES:
                value = attrs.text(node.attributes.get(name))
                if value is not None:
                    return value
            if node.oi_kind in openinference.STRUCTURE:
                key = (node.trace_id, node.span_id)
                if key not in self._structure_agents:
                    self._structure_agents[key] = openinference.structure_agent(
                        node.oi_kind, node.name, node.attributes
                    )
                if self._structure_agents[key] is not None:
                    return self._structure_agents[key]
        return _resource_agent(lineage[0])

    def _resource_scope(self, span: SpanView) -> Scope:
        """The scope of a span that says nothing itself and has no ancestor in the export (a
        span that only carries decisionboard events, say): its resource's, or else its trace's
        run. What _resolve finds for it, worked out once per resource rather than per span."""
        found = self._resource_scopes.get(id(span.resource))
        if found is None:
            lineage = [span]
            found = self._resource_scopes[id(span.resource)] = (
                attrs.text(span.resource.get(RUN_ID)),
                inherited(lineage, (PARENT_RUN_ID,)),
                inherited(lineage, AGENT_NAMES),
                inherited(lineage, SESSION_NAMES),
                release_of(lineage),
            )
        run_id, parent_run_id, agent, session_id, release = found
        return Scope(run_id or span.trace_id, parent_run_id, agent, session_id, release)

    def _run(self, span: SpanView, lineage: list[SpanView]) -> tuple[str, str | None]:
        """The run a span belongs to, and that run's parent run.

        The nearest span in the lineage that opens a run decides: one with decisionboard.run_id,
        or an invoke_agent span nested in another agent span (a sub-agent: run id
        `<trace id>-<agent span id>`, parent run the enclosing agent's). Without one, the run is
        the resource's decisionboard.run_id, or else the trace.
        """
        # agent_above[i]: an invoke_agent span encloses lineage[i] (one pass, not one per node).
        agent_above = [False] * len(lineage)
        seen = False
        for i in range(len(lineage) - 1, -1, -1):
            agent_above[i] = seen
            seen = seen or is_agent(lineage[i])
        # The runs opened along the lineage, nearest first; resolved here in one pass rather than
        # by asking each ancestor's scope, which would recurse once per nested run.
        openers: list[tuple[int, str]] = []
        for i, node in enumerate(lineage):
            explicit = attrs.text(node.attributes.get(RUN_ID))
            if explicit is not None:
                openers.append((i, explicit))
            elif (is_agent(node) and agent_above[i]) or is_handoff(node):
                openers.append((i, f"{node.trace_id}-{node.span_id}"))
        default_run = attrs.text(span.resource.get(RUN_ID)) or span.trace_id
        if not openers:
            parent = inherited(lineage, (PARENT_RUN_ID,))
            return default_run, parent
        i, run_id = openers[0]
        parent = attrs.text(lineage[i].attributes.get(PARENT_RUN_ID))
        if parent is None and i + 1 < len(lineage):
            enclosing = openers[1][1] if len(openers) > 1 else default_run
            parent = enclosing if enclosing != run_id else None
        return run_id, parent


# What a span may say that changes the run or release of the spans under it.
_RUN_AND_RELEASE = frozenset({RUN_ID, PARENT_RUN_ID, *RELEASE_NAMES})


class ScopeKeys(NamedTuple):
    """Which attributes of a scope a key set holds, each kind in the order looked for."""

    agents: tuple[str, ...]  # of AGENT_NAMES
    sessions: tuple[str, ...]  # of SESSION_NAMES
    run_or_release: bool  # any of _RUN_AND_RELEASE


def _scope_keys_in(attributes: dict[str, Any]) -> ScopeKeys:
    return ScopeKeys(
        agents=tuple(name for name in AGENT_NAMES if name in attributes),
        sessions=tuple(name for name in SESSION_NAMES if name in attributes),
        run_or_release=not _RUN_AND_RELEASE.isdisjoint(attributes),
    )


scope_keys_of = attrs.KeySetCache(_scope_keys_in)


def _narrowed(span: SpanView, base: Scope) -> Scope:
    """The scope of a span that inherits `base` (_inherits_scope): `base`, with the span's own
    agent and session when it names them."""
    agents, sessions, _ = span.scope_keys
    if not agents and not sessions:
        return base
    a = span.attributes
    agent = session = None
    for name in agents:
        agent = attrs.text(a[name])
        if agent is not None:
            break
    for name in sessions:
        session = attrs.text(a[name])
        if session is not None:
            break
    agent = agent if agent is not None else base.agent
    session = session if session is not None else base.session_id
    if agent == base.agent and session == base.session_id:
        return base
    return Scope(base.run_id, base.parent_run_id, agent, session, base.release)


def _inherits_scope(span: SpanView) -> bool:
    """Whether the span's run, parent run and release are its parent's (Trace._folded): it
    opens no run (no run id, not an agent or a handoff), names no release and is no structure
    span that stands for an agent."""
    return (
        not span.scope_keys.run_or_release
        and not is_agent(span)
        and span.oi_kind not in openinference.STRUCTURE
        and not is_handoff(span)
    )


def is_agent(span: SpanView) -> bool:
    """A span that runs an agent: `invoke_agent`, or the AI SDK's `ai.generateText` and its
    kin (an agent that calls another inside a tool makes the inner one a sub-run)."""
    if span.operation is not None:
        return span.operation == INVOKE_AGENT
    return span.ai_operation in ai_sdk_spans.OUTER


def is_handoff(span: SpanView) -> bool:
    """An OpenInference AGENT span that another agent handed the run to (the OpenAI Agents SDK
    names the agent it came from in graph.node.parent_id): a sub-run."""
    return span.oi_kind == openinference.AGENT and bool(
        attrs.text(span.attributes.get(openinference.HANDOFF_FROM))
    )


def _resource_agent(span: SpanView) -> str | None:
    for name in AGENT_NAMES:
        value = attrs.text(span.resource.get(name))
        if value is not None:
            return value
    return None


def release_of(lineage: list[SpanView]) -> str | None:
    """The release of a span's records: each of RELEASE_NAMES in turn, nearest span first (the
    resource's too), else the resource's service.version. Any string is taken: normalise judges
    it as it judges a posted `release`, so a bad one is an error of its record."""
    resource = lineage[0].resource
    for name in RELEASE_NAMES:
        for node in lineage:
            value = attrs.text(node.attributes.get(name))
            if value is not None:
                return value
        value = attrs.text(resource.get(name))
        if value is not None:
            return value
    return attrs.text(resource.get(SERVICE_VERSION))


def inherited(lineage: list[SpanView], names: tuple[str, ...]) -> str | None:
    for node in lineage:
        for name in names:
            value = attrs.text(node.attributes.get(name))
            if value is not None:
                return value
    resource = lineage[0].resource
    for name in names:
        value = attrs.text(resource.get(name))
        if value is not None:
            return value
    return None
