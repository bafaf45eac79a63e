"""The runs list's reads: its sort orders, a keyset page of run summaries, and a row as
the runs list, the sessions, the overview and the fallbacks pages show it.

A page link carries the last row's sort value and id (`after`), never an offset: the next page
costs the same as the first and new runs do not shift it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q, QuerySet
from django.urls import reverse
from django.utils.timezone import localtime

from dashboard.formatting import duration_ms, unpriced_cost
from records.contract.cursor import decode_cursor, encode_cursor
from records.contract.rollup_keys import MODEL_CALL, PICK, PICK_ERROR, PROVIDER_ERROR, VERDICT
from records.models import Run

PAGE_SIZE = 50
# ?sort= values: a column, descending with a leading "-". Ties break on id in the same direction.
# By last record (the default) a run that gets new records while one pages moves to the front:
# the list is "what is active", and the cursor never repeats or skips a run that did not move.
SORTS = {"last_ts": "last", "first_ts": "first", "record_count": "records"}
DEFAULT_SORT = "-last_ts"


@dataclass(frozen=True)
class Sort:
    field: str
    descending: bool

    @classmethod
    def parse(cls, value: str | None) -> Sort:
        value = value or DEFAULT_SORT
        descending = value.startswith("-")
        field = value.lstrip("-")
        if field not in SORTS:
            return cls.parse(DEFAULT_SORT)
        return cls(field, descending)

    @property
    def param(self) -> str:
        return f"-{self.field}" if self.descending else self.field

    def ordering(self) -> tuple[str, str]:
        sign = "-" if self.descending else ""
        return f"{sign}{self.field}", f"{sign}id"

    @property
    def kinds(self) -> tuple[type, type]:
        """The kinds of a cursor's values in this order: the sort column's, then the id."""
        return (int if self.field == "record_count" else datetime, int)

    def toggled(self, field: str) -> str:
        """The ?sort= a column header links to: flips the direction of the current column."""
        if field == self.field:
            return field if self.descending else f"-{field}"
        return f"-{field}"


def keyset_page(
    runs: QuerySet, sort: Sort, cursor: str | None, size: int = PAGE_SIZE
) -> tuple[list[Run], str | None]:
    """One page of `runs` in `sort` order after `cursor`, and the cursor of the next page.

    A cursor this list did not write raises records.contract.cursor.CursorError."""
    if cursor:
        value, pk = decode_cursor(cursor, sort.kinds)
        op = "lt" if sort.descending else "gt"
        runs = runs.filter(
            Q(**{f"{sort.field}__{op}": value}) | Q(**{sort.field: value, f"id__{op}": pk})
        )
    rows = list(runs.order_by(*sort.ordering())[: size + 1])
    if len(rows) <= size:
        return rows, None
    rows = rows[:size]
    last = rows[-1]
    return rows, encode_cursor([getattr(last, sort.field), last.pk])


# Kind counts shown as columns: (heading, kinds added up).
COUNT_COLUMNS = (
    ("picks", (PICK, PICK_ERROR)),
    ("calls", (MODEL_CALL,)),
    ("verdicts", (VERDICT,)),
    ("errors", (PICK_ERROR, PROVIDER_ERROR)),
)


_FLAGS = (("swap", "has_swap"), ("fallback", "has_fallback"), ("error", "has_error"),
          ("contract_break", "has_contract_break"))  # fmt: skip
MODELS_SHOWN = 3
TIME = "%Y-%m-%d %H:%M:%S"


def run_row(run: Run) -> dict[str, Any]:
    """What a row of the list shows, from the run summary, formatted here (no query).

    Fifty rows of template tags (dates, urls, inclusion tags) cost more than the page's query;
    plain strings in the row keep the page's time in the query.
    """
    kinds = run.kind_counts or {}
    models = sorted((run.models_seen or {}).items(), key=lambda item: (-item[1], item[0]))
    return {
        "run": run,
        "url": reverse("dash-run-detail", args=[run.run_id]),
        "parent_url": reverse("dash-run-detail", args=[run.parent_run_id])
        if run.parent_run_id
        else "",
        "first": localtime(run.first_ts).strftime(TIME),
        "last": localtime(run.last_ts).strftime(TIME),
        "duration": duration_ms((run.last_ts - run.first_ts).total_seconds() * 1000),
        "counts": [f"{sum(kinds.get(k, 0) for k in ks):,}" for _, ks in COUNT_COLUMNS],
        "records": f"{run.record_count:,}",
        # The catch-up keeps the run's spend (records.models.Run.cost_nano).
        "cost": unpriced_cost(run.cost_nano, run.cost_unknown),
        "models": ", ".join(name for name, _ in models[:MODELS_SHOWN]),
        "more_models": max(0, len(models) - MODELS_SHOWN),
        "flags": [
            (name, name.replace("_", " ")) for name, column in _FLAGS if getattr(run, column)
        ],
    }
