"""Kind names and the rollup key codec: declared once, used by derive and by every reader.

A rollup row is split within its kind by `key` (records.models.Rollup): the skip reason of a pick,
the selected and previous model of a selection, and so on. Each kind declares the fields of its key
here, once; `encode` builds a key on ingest (records.contract.derive) and `decode` reads it back in
the metrics, the pages and the alert engine, so that none of them parses keys its own way.

Besides the record kinds, the catch-up pass writes rows of *derived* kinds, which
are not records and never count as records:

- `CLASSIFICATION`: one per classification (run, toolCallId), in the bucket of its first rung-0
  attempt, keyed by whether it fell back to rung 1 (the ladder fallback rate) and why;
- `VIOLATION`: one per broken contract of a record, in the record's bucket and
  under its model, keyed by the record's kind and the violation code; code "" counts each
  violating record once, whatever its number of codes;
- the tool kinds of records.catchup.tool_funnel (TOOL, TOOL_CALL, TOOL_LINK, SELECTION_LINK,
  NARROWING): per tool, what picks offered, ranked, served and narrowed out, what turns called, and
  what each pick's iteration then called (see records.catchup.tool_funnel for their exact
  definitions);
- `TOOL_DEFINITIONS`: the model calls that report `toolsCount`, per hour and day, under the call's
  agent and model, keyed by provider, toolsCount and messagesCount ("" when not reported): `count`
  the calls, `tokens_in` the sum of their prompt tokens (input, cached read and written) and
  `latency_sum` the sum of those tokens' squares. Enough to fit prompt tokens on the tools served,
  exactly, without a record (dashboard.queries.tool_definition_cost).
"""

from __future__ import annotations

from collections.abc import Mapping

PICK = "tool_choice.pick"
PICK_ERROR = "tool_choice.pick_error"
OUTCOME = "tool_choice.outcome"
SELECTION = "model_selection"
TURN = "turn"
VERDICT = "classifier.verdict"
NOTICE = "notice"
PROVIDER_ERROR = "provider.error"
RELIABILITY = "reliability"
MODEL_CALL = "model_call"

PICKS = (PICK, PICK_ERROR)
RECORD_KINDS = (
    PICK, PICK_ERROR, OUTCOME, SELECTION, TURN, VERDICT, NOTICE, PROVIDER_ERROR, RELIABILITY,
    MODEL_CALL,
)  # fmt: skip

CLASSIFICATION = "derived.classification"
VIOLATION = "derived.violation"
# records.catchup.tool_funnel: per-record tool rows (TOOL, TOOL_CALL) and rows of a pick joined with
# the outcome of its iteration (TOOL_LINK, SELECTION_LINK, NARROWING), which move when either side
# (or an earlier duplicate) arrives, like CLASSIFICATION.
TOOL = "derived.tool"
TOOL_CALL = "derived.tool_call"
TOOL_LINK = "derived.tool_link"
SELECTION_LINK = "derived.selection"
NARROWING = "derived.narrowing"
TOOL_KINDS = (TOOL, TOOL_CALL, TOOL_LINK, SELECTION_LINK, NARROWING)
# The latencies of both pick kinds, whatever their skip reason, one row per (bucket, agent,
# classifier model) with key "": every reader of pick latencies merges over kind and skip reason
# (the classifier_latency metrics, the overview, the classifiers page), so the catch-up merges them
# once as it writes instead of each read merging a sketch per pick row (records.catchup.passes).
PICK_LATENCY = "derived.pick_latency"
# Each run the catch-up folded records of, counted once in the bucket of its last record
# (Run.last_ts), by the run's agent, model and key "": the overview's active runs of a period
# are these counts summed, not a count over the runs table. A run whose last record moves to a
# later bucket (a late record) is taken back from the old one (records.catchup.upserts.merge_runs).
RUN_LAST = "derived.run_last"
# The model calls' prompt tokens by the tool definitions they carried (hour and day rows only).
TOOL_DEFINITIONS = "derived.tool_definitions"
DERIVED_KINDS = (CLASSIFICATION, VIOLATION, PICK_LATENCY, RUN_LAST, TOOL_DEFINITIONS, *TOOL_KINDS)
# Derived kinds whose cells a pass can take counts back from (a cell left at zero is deleted).
RETRACTING_KINDS = frozenset({CLASSIFICATION, TOOL_LINK, SELECTION_LINK, NARROWING, RUN_LAST})

# Notices whose rollups split by detail fields (the classifiers page charts them by these).
NOTICE_SPLITS: dict[str, tuple[str, ...]] = {
    "classifier.role_defaulted": ("reason",),
    "classifier.unavailable": ("cause", "disposition"),
}

KEY_FIELDS: dict[str, tuple[str, ...]] = {
    PICK: ("skip_reason",),
    PICK_ERROR: ("skip_reason",),
    OUTCOME: ("agreement",),  # agree | disagree | "" (firstAgrees absent)
    SELECTION: ("selected", "previous"),
    TURN: ("decision", "protocol", "invented"),  # invented: "1" | "0"
    VERDICT: ("verdict", "attempt", "seat"),  # attempt: rung0 | rung1 | reask0 | reask1
    NOTICE: ("code",),  # then NOTICE_SPLITS[code]
    PROVIDER_ERROR: ("provider", "error", "refused"),  # refused: "1" | "0"
    RELIABILITY: ("type",),
    MODEL_CALL: ("provider",),
    # fell_back "1" | "0"; cause: records.contract.fallback_causes.LADDER_CAUSES when it fell
    # back, else ""; the row's model is the seat model
    CLASSIFICATION: ("fell_back", "cause"),
    VIOLATION: ("kind", "code"),
    # records.catchup.tool_funnel: role, ranked top|1|0, reason
    TOOL: ("tool", "role", "ranked", "reason"),
    TOOL_CALL: ("tool", "invented", "error"),  # "1" | "0" each
    TOOL_LINK: ("tool", "stage"),  # records.catchup.tool_funnel.LINK_STAGES
    SELECTION_LINK: ("agreement", "chosen_called", "bin"),  # bin: "0".."9" of confidence
    NARROWING: ("offered", "side", "n"),  # side: need | ranked; sizes as decimal text
    TOOL_DEFINITIONS: ("provider", "tools", "messages"),  # counts as decimal text
}

_SEP = "|"


def escape(value: object) -> str:
    text = "" if value is None else str(value)
    if "%" in text or _SEP in text:
        text = text.replace("%", "%25").replace(_SEP, "%7C")
    return text


def unescape(text: str) -> str:
    return text.replace("%7C", _SEP).replace("%25", "%") if "%" in text else text


def fields_of(kind: str, first: str = "") -> tuple[str, ...]:
    fields = KEY_FIELDS.get(kind, ())
    if kind == NOTICE:
        return (*fields, *NOTICE_SPLITS.get(first, ()))
    return fields


def encode(kind: str, values: Mapping[str, object]) -> str:
    """The rollup key of a `kind` row with these field values (missing fields are "")."""
    names = fields_of(kind, str(values.get("code", "")))
    return _SEP.join(escape(values.get(name)) for name in names)


def decode(kind: str, key: str) -> dict[str, str]:
    """The field values of a rollup key; a field the key does not carry is ""."""
    parts = [unescape(p) for p in key.split(_SEP)] if key else []
    names = fields_of(kind, parts[0] if parts else "")
    return {name: parts[i] if i < len(parts) else "" for i, name in enumerate(names)}


# --- the model of a rollup row ----------------------------------------------------------------
# A record that does not name its metric's model (a pick error without classifier.model) is
# stored under model "" (model names are never empty). Readers turn it into None (`null` in the
# API) and pages show NO_MODEL_LABEL; it counts in totals and is never drawn as a rate line.
NO_MODEL_LABEL = "(model not reported)"


def model_of(stored: str) -> str | None:
    return stored or None


def model_label(model: str | None) -> str:
    return model or NO_MODEL_LABEL
