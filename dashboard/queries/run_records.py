"""One run's records read as the run, pick, compare and fallbacks pages fold them."""

from __future__ import annotations

import orjson
from django.db.models import QuerySet, TextField
from django.db.models.functions import Cast

from dashboard.queries import timeline


def load_records(records: QuerySet) -> list[dict]:
    """Records as dicts of timeline.FIELDS plus `data` and `derived`, in the queryset's order.

    The JSON comes as text and is parsed with orjson, several times faster than the
    JSONField's json.loads: on a page of records it is a third of the time.
    """
    rows = records.annotate(
        data_text=Cast("data", TextField()), derived_text=Cast("derived", TextField())
    ).values_list(*timeline.FIELDS, "data_text", "derived_text")
    out = []
    for *values, data, derived in rows:
        record = dict(zip(timeline.FIELDS, values, strict=True))
        record["data"] = orjson.loads(data)
        record["derived"] = orjson.loads(derived)
        out.append(record)
    return out
