"""What moves a run to another model than configured, and why: one definition for the record
flags set on ingest (records.contract.derive), the fallbacks page's counts (rollup rows) and its
list of the runs that moved (run summaries).

The causes, in the order a call meets them:

- `route_fallback`, `route_unroutable`: pre-flight route swaps, the notices
  `route.fallback_to_primary` and `route.classifier_unroutable`;
- `ladder`: a classification that walked on from the seat to the main model (a verdict's first
  attempt on rung 1; the CLASSIFICATION rollups with fell_back "1", the ladder fallbacks), split
  by LADDER_CAUSES, what the seat's last attempt came to;
- `classifier_fallback`: the engine's `classifier.fallback` notice, which reports such a walk;
- `reliability`: reliability events of type `fallback_triggered`;
- `router`: a model selection whose selected model is not the default (a swap).

A record of the router cause is a swap (`is_swap`), one of any other a fallback (`is_fallback`);
a run summary keeps either flag once one of its records has it. So a run *moved* when it has a
swap or a fallback (MOVED_RUN), and its records behind the flags are the ones the counts count.
"""

from __future__ import annotations

from django.db.models import Q

from records.contract import rollup_keys
from records.contract.rollup_keys import CLASSIFICATION, NOTICE, RELIABILITY, SELECTION

NOTICE_CAUSES = {
    "route.fallback_to_primary": "route_fallback",
    "route.classifier_unroutable": "route_unroutable",
    "classifier.fallback": "classifier_fallback",
}
RELIABILITY_FALLBACK = "fallback_triggered"
CAUSES = ("route_fallback", "route_unroutable", "ladder", "classifier_fallback", "reliability",
          "router")  # fmt: skip

# A run summary (records.models.Run) of a run that moved.
MOVED_RUN = Q(has_swap=True) | Q(has_fallback=True)


def is_fallback_notice(code: str) -> bool:
    return code in NOTICE_CAUSES


def is_ladder_fallback(rung: int, reask: bool) -> bool:
    """A first attempt (not a re-ask) on rung 1: the seat gave no ruling."""
    return rung == 1 and not reask


# Why a classification walked on to rung 1: what the seat's last attempt (rung 0, a re-ask
# included, the latest by time and record key) came to. A parse error, or the seat unavailable
# by its `cause` (`unavailable` when it gave none); `ruled` when the seat did rule and the ladder
# walked on anyway. "" for classifications folded before causes were kept.
LADDER_CAUSES = ("parse_error", "timeout", "error", "unavailable", "ruled")


def ladder_cause(verdict_class: str, unavailable_cause: str | None) -> str:
    """The LADDER_CAUSES entry of a seat attempt: its verdict class (records.contract.derive:
    allow | block | ruled | parse_error | unavailable) and, when unavailable, its `cause`."""
    if verdict_class == "parse_error":
        return "parse_error"
    if verdict_class == "unavailable":
        return unavailable_cause if unavailable_cause in ("timeout", "error") else "unavailable"
    return "ruled"


def is_swap(default_model: str, selected_model: str) -> bool:
    return selected_model != default_model


def row_cause(kind: str, key: str, model: str) -> str | None:
    """The cause a rollup row counts towards (its kind, key and model), or None."""
    k = rollup_keys.decode(kind, key)
    if kind == NOTICE:
        return NOTICE_CAUSES.get(k["code"])
    if kind == CLASSIFICATION:
        return "ladder" if k["fell_back"] == "1" else None
    if kind == RELIABILITY:
        return "reliability" if k["type"] == RELIABILITY_FALLBACK else None
    if kind == SELECTION:  # the row's model is the default model
        return "router" if is_swap(model, k["selected"]) else None
    return None


# The rollup kinds row_cause reads (and the denominators of the page's rates).
ROW_KINDS = (NOTICE, CLASSIFICATION, RELIABILITY, SELECTION)
