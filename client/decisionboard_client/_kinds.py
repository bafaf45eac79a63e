"""One typed method per Decisionboard record kind, field names as the emitting
framework spells them (camelCase for agentfootprint and MemberJunction, snake_case for rig).

Every method takes the record's `run_id` and optionally `ts`, `id`, `session_id`, `agent` and
`parent_run_id`; `extra` fields are kept inside `data` as posted. Optional fields left as None are
left out. Like `record()`, they queue and return at once, and never raise.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, TypedDict

from decisionboard_client.provider_usage import CallUsage, call_usage

SkipReason = Literal["unavailable", "too-few", "after-miss", "wrap-up"]


class Classifier(TypedDict, total=False):
    name: str
    model: str


class RankedTool(TypedDict):
    name: str
    score: float


class PickUsage(TypedDict, total=False):
    inputTokens: int
    outputTokens: int


class ToolCall(TypedDict, total=False):
    name: str
    arguments: Any


class ToolChoice(TypedDict, total=False):
    type: str
    name: str


def _data(fields: dict[str, Any], extra: Mapping[str, Any] | None) -> dict[str, Any]:
    data = {k: v for k, v in fields.items() if v is not None}
    if extra:
        data.update(extra)
    return data


class KindMethods:
    """Mixed into Decisionboard: `record(kind, data, **envelope)` does the work."""

    # Decisionboard.record (the client) does the work; declared here for type checkers.
    record: Callable[..., str | None]

    def tool_choice_pick(
        self,
        *,
        run_id: str,
        iteration: int,
        classifier: Classifier,
        offered: Sequence[str],
        ranked: Sequence[RankedTool],
        confidence: float,
        latencyMs: float,
        served: Sequence[str],
        narrowed: bool,
        chosen: str | None = None,
        usage: PickUsage | None = None,
        narrowedSkipped: SkipReason | None = None,
        source: Literal["classifier"] = "classifier",
        ts: datetime | str | float | None = None,
        id: str | None = None,
        session_id: str | None = None,
        agent: str | None = None,
        parent_run_id: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> str | None:
        """One classifier pick, filed before the model call (agentfootprint ToolChoiceRow)."""
        data = _data(
            dict(
                iteration=iteration,
                source=source,
                classifier=classifier,
                offered=offered,
                ranked=ranked,
                chosen=chosen,
                confidence=confidence,
                usage=usage,
                latencyMs=latencyMs,
                served=served,
                narrowed=narrowed,
                narrowedSkipped=narrowedSkipped,
            ),
            extra,
        )
        return self.record(
            "tool_choice.pick",
            data,
            run_id=run_id,
            ts=ts,
            id=id,
            session_id=session_id,
            agent=agent,
            parent_run_id=parent_run_id,
        )

    def tool_choice_pick_error(
        self,
        *,
        run_id: str,
        iteration: int,
        classifier: Classifier,
        message: str,
        latencyMs: float,
        served: Sequence[str],
        status: int | None = None,
        narrowedSkipped: SkipReason | None = None,
        ts: datetime | str | float | None = None,
        id: str | None = None,
        session_id: str | None = None,
        agent: str | None = None,
        parent_run_id: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> str | None:
        """The classifier call failed; the full set was served."""
        data = _data(
            dict(
                iteration=iteration,
                classifier=classifier,
                status=status,
                message=message,
                latencyMs=latencyMs,
                served=served,
                narrowedSkipped=narrowedSkipped,
            ),
            extra,
        )
        return self.record(
            "tool_choice.pick_error",
            data,
            run_id=run_id,
            ts=ts,
            id=id,
            session_id=session_id,
            agent=agent,
            parent_run_id=parent_run_id,
        )

    def tool_choice_outcome(
        self,
        *,
        run_id: str,
        iteration: int,
        called: Sequence[str],
        firstAgrees: bool | None = None,
        miss: Mapping[str, Sequence[str]] | None = None,
        ts: datetime | str | float | None = None,
        id: str | None = None,
        session_id: str | None = None,
        agent: str | None = None,
        parent_run_id: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> str | None:
        """What the model then called, and whether it agreed with the top pick."""
        data = _data(
            dict(iteration=iteration, called=called, firstAgrees=firstAgrees, miss=miss), extra
        )
        return self.record(
            "tool_choice.outcome",
            data,
            run_id=run_id,
            ts=ts,
            id=id,
            session_id=session_id,
            agent=agent,
            parent_run_id=parent_run_id,
        )

    def model_selection(
        self,
        *,
        run_id: str,
        step: int,
        default_model: str,
        selected_model: str,
        action: Literal["continue", "select", "stop"],
        previous_model: str | None = None,
        stop_reason: str | None = None,
        retry: bool | None = None,
        request_patch: Mapping[str, Any] | None = None,
        capabilities: Mapping[str, bool] | None = None,
        ts: datetime | str | float | None = None,
        id: str | None = None,
        session_id: str | None = None,
        agent: str | None = None,
        parent_run_id: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> str | None:
        """One model-selection event per model-call step (rig ModelSelection)."""
        data = _data(
            dict(
                step=step,
                default_model=default_model,
                selected_model=selected_model,
                previous_model=previous_model,
                action=action,
                stop_reason=stop_reason,
                retry=retry,
                request_patch=request_patch,
                capabilities=capabilities,
            ),
            extra,
        )
        return self.record(
            "model_selection",
            data,
            run_id=run_id,
            ts=ts,
            id=id,
            session_id=session_id,
            agent=agent,
            parent_run_id=parent_run_id,
        )

    def turn(
        self,
        *,
        run_id: str,
        protocol: Literal["envelope", "hybrid", "implicit"] | None = None,
        text: str | None = None,
        toolCalls: Sequence[ToolCall] | None = None,
        toolNameMap: Mapping[str, str] | None = None,
        controlToolMap: Mapping[str, Mapping[str, str]] | None = None,
        finishReason: str | None = None,
        executionError: Any = None,
        durationMs: float | None = None,
        totalCost: float | None = None,
        ts: datetime | str | float | None = None,
        id: str | None = None,
        session_id: str | None = None,
        agent: str | None = None,
        parent_run_id: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> str | None:
        """What the harness observed on the wire before normalisation (MemberJunction RawTurn)."""
        data = _data(
            dict(
                protocol=protocol,
                text=text,
                toolCalls=toolCalls,
                toolNameMap=toolNameMap,
                controlToolMap=controlToolMap,
                finishReason=finishReason,
                executionError=executionError,
                durationMs=durationMs,
                totalCost=totalCost,
            ),
            extra,
        )
        return self.record(
            "turn",
            data,
            run_id=run_id,
            ts=ts,
            id=id,
            session_id=session_id,
            agent=agent,
            parent_run_id=parent_run_id,
        )

    def classifier_verdict(
        self,
        *,
        run_id: str,
        toolName: str,
        toolCallId: str,
        model: str,
        rung: int,
        seat: Literal["off", "low", "think"],
        reask: bool,
        outcome: Literal["ruled", "parse_error", "unavailable"],
        station: Literal["leg", "ancestor"],
        wallMs: float,
        seatModel: str | None = None,
        verdict: Literal["allow", "block"] | None = None,
        form: Literal["missing", "conflict"] | None = None,
        cause: Literal["timeout", "error"] | None = None,
        disposition: Literal["asked", "denied"] | None = None,
        budgetMs: float | None = None,
        ts: datetime | str | float | None = None,
        id: str | None = None,
        session_id: str | None = None,
        agent: str | None = None,
        parent_run_id: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> str | None:
        """One classification of a gated tool call on one rung of the classifier ladder."""
        data = _data(
            dict(
                toolName=toolName,
                toolCallId=toolCallId,
                model=model,
                seatModel=seatModel,
                rung=rung,
                seat=seat,
                reask=reask,
                outcome=outcome,
                verdict=verdict,
                form=form,
                cause=cause,
                disposition=disposition,
                station=station,
                wallMs=wallMs,
                budgetMs=budgetMs,
            ),
            extra,
        )
        return self.record(
            "classifier.verdict",
            data,
            run_id=run_id,
            ts=ts,
            id=id,
            session_id=session_id,
            agent=agent,
            parent_run_id=parent_run_id,
        )

    def notice(
        self,
        *,
        run_id: str,
        code: str,
        message: str,
        detail: Mapping[str, Any] | None = None,
        level: Literal["debug", "info", "warn", "error"] | None = None,
        audience: Literal["operator", "user", "developer"] | None = None,
        ts: datetime | str | float | None = None,
        id: str | None = None,
        session_id: str | None = None,
        agent: str | None = None,
        parent_run_id: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> str | None:
        """An engine notice (`code` dotted, e.g. classifier.contract_broken)."""
        data = _data(
            dict(
                code=code,
                level=level,
                audience=audience,
                message=message,
                detail=detail if detail is not None else {},
            ),
            extra,
        )
        return self.record(
            "notice",
            data,
            run_id=run_id,
            ts=ts,
            id=id,
            session_id=session_id,
            agent=agent,
            parent_run_id=parent_run_id,
        )

    def provider_error(
        self,
        *,
        run_id: str,
        error: str,
        provider: str,
        model: str,
        retryable: bool,
        status: int | None = None,
        message: str | None = None,
        toolChoice: ToolChoice | None = None,
        ts: datetime | str | float | None = None,
        id: str | None = None,
        session_id: str | None = None,
        agent: str | None = None,
        parent_run_id: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> str | None:
        """A provider refused or failed a request."""
        data = _data(
            dict(
                error=error,
                provider=provider,
                model=model,
                retryable=retryable,
                status=status,
                message=message,
                toolChoice=toolChoice,
            ),
            extra,
        )
        return self.record(
            "provider.error",
            data,
            run_id=run_id,
            ts=ts,
            id=id,
            session_id=session_id,
            agent=agent,
            parent_run_id=parent_run_id,
        )

    def reliability(
        self,
        *,
        run_id: str,
        type: Literal["retried", "recovered", "fail_fast", "fallback_triggered", "circuit_changed"],
        attempt: int | None = None,
        fromProvider: str | None = None,
        toProvider: str | None = None,
        errorKind: str | None = None,
        recoveredVia: str | None = None,
        primary: str | None = None,
        fallback: str | None = None,
        reason: str | None = None,
        state: Literal["closed", "open", "half-open"] | None = None,
        providerName: str | None = None,
        ts: datetime | str | float | None = None,
        id: str | None = None,
        session_id: str | None = None,
        agent: str | None = None,
        parent_run_id: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> str | None:
        """Retry, fallback and circuit events (agentfootprint)."""
        data = _data(
            dict(
                type=type,
                attempt=attempt,
                fromProvider=fromProvider,
                toProvider=toProvider,
                errorKind=errorKind,
                recoveredVia=recoveredVia,
                primary=primary,
                fallback=fallback,
                reason=reason,
                state=state,
                providerName=providerName,
            ),
            extra,
        )
        return self.record(
            "reliability",
            data,
            run_id=run_id,
            ts=ts,
            id=id,
            session_id=session_id,
            agent=agent,
            parent_run_id=parent_run_id,
        )

    def model_call(
        self,
        *,
        run_id: str,
        iteration: int,
        provider: str,
        model: str,
        usage: CallUsage | Any,
        stopReason: str,
        durationMs: float,
        toolsCount: int | None = None,
        messagesCount: int | None = None,
        ts: datetime | str | float | None = None,
        id: str | None = None,
        session_id: str | None = None,
        agent: str | None = None,
        parent_run_id: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> str | None:
        """One model call. `usage` is a `CallUsage`, or the provider's usage as it came (OpenAI,
        Anthropic, Gemini or LangChain; a dict or an SDK object), which `call_usage` turns into
        one so that cached and reasoning tokens are counted once. A usage of a shape it does
        not know is sent as it is, for the server to accept or reject."""
        converted = call_usage(usage)
        data = _data(
            dict(
                iteration=iteration,
                provider=provider,
                model=model,
                usage=converted if converted is not None else usage,
                stopReason=stopReason,
                durationMs=durationMs,
                toolsCount=toolsCount,
                messagesCount=messagesCount,
            ),
            extra,
        )
        return self.record(
            "model_call",
            data,
            run_id=run_id,
            ts=ts,
            id=id,
            session_id=session_id,
            agent=agent,
            parent_run_id=parent_run_id,
        )
