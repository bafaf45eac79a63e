"""Keyset (cursor) pagination for the read API: `{"results": [...], "next": url-or-null}`.

A page is `WHERE (key) > (the last row's key) ORDER BY key LIMIT n`, never OFFSET, so page 10,000
costs what page 1 costs, and rows that arrive meanwhile never shift a page: each row that existed
when the walk started comes back exactly once (a new one at most once). The cursor is the last
row's key in records.contract.cursor's form, opaque to clients; a forged cursor only moves within
the queryset it is applied to, which is already limited to the caller's project.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db.models import Q, QuerySet
from drf_spectacular.utils import OpenApiParameter
from rest_framework.pagination import BasePagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param

from records.contract.cursor import CursorError, decode_cursor, encode_cursor
from records.contract.filters import FilterError

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
# `limit` as the OpenAPI document states it, bounds included (every list takes it).
LIMIT_PARAMETER = OpenApiParameter(
    "limit",
    {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT},
    description=f"Items a page, 1 to {MAX_LIMIT} (default {DEFAULT_LIMIT}).",
)


@dataclass(frozen=True)
class Keyset:
    """The ordering of a list: one or two unique-together fields, all ascending or descending."""

    fields: tuple[tuple[str, type], ...]  # (field name, datetime or int)
    descending: bool = False

    @property
    def order_by(self) -> list[str]:
        return [("-" if self.descending else "") + name for name, _ in self.fields]

    def after(self, values: list[Any]) -> Q:
        """Rows strictly after `values` in this order."""
        strict, loose = ("lt", "lte") if self.descending else ("gt", "gte")
        (first, _), *rest = self.fields
        if not rest:
            return Q(**{f"{first}__{strict}": values[0]})
        (second, _) = rest[0]
        # The redundant `first >= v` bounds the index range scan; the OR alone would not.
        return Q(**{f"{first}__{loose}": values[0]}) & (
            Q(**{f"{first}__{strict}": values[0]}) | Q(**{f"{second}__{strict}": values[1]})
        )

    def encode(self, row: Any) -> str:
        return encode_cursor([getattr(row, name) for name, _ in self.fields])

    def decode(self, cursor: str) -> list[Any]:
        """The key in `cursor`; a cursor this list did not write is a FilterError (a 400)."""
        try:
            return decode_cursor(cursor, [kind for _, kind in self.fields])
        except CursorError:
            raise FilterError(
                "cursor", "is not a cursor from this list; start again without it"
            ) from None


@dataclass
class Page:
    results: list
    next_cursor: str | None


def parse_limit(params: Mapping[str, str]) -> int:
    raw = params.get("limit")
    if raw is None or raw == "":
        return DEFAULT_LIMIT
    try:
        limit = int(raw)
    except ValueError:
        raise FilterError("limit", f"{raw!r} is not a whole number") from None
    if not 1 <= limit <= MAX_LIMIT:
        raise FilterError("limit", f"must be between 1 and {MAX_LIMIT}")
    return limit


def paginate(queryset: QuerySet, keyset: Keyset, params: Mapping[str, str]) -> Page:
    """One page of `queryset` in `keyset` order; raises FilterError for a bad limit or cursor."""
    limit = parse_limit(params)
    cursor = params.get("cursor")
    if cursor:
        queryset = queryset.filter(keyset.after(keyset.decode(cursor)))
    rows = list(queryset.order_by(*keyset.order_by)[: limit + 1])
    if len(rows) <= limit:
        return Page(rows, None)
    rows = rows[:limit]
    return Page(rows, keyset.encode(rows[-1]))


def next_url(request: Request, cursor: str | None) -> str | None:
    """This request's URL with `cursor` set: the same filters and limit, the next page."""
    if cursor is None:
        return None
    return replace_query_param(request.build_absolute_uri(), "cursor", cursor)


class KeysetPagination(BasePagination):
    """DRF pagination in `keyset` order: `{"results": [...], "next": url-or-null}`.

    A viewset names a subclass as its `pagination_class`; a plain APIView list calls
    `page_response`. A bad limit or cursor is a FilterError, a 400 naming it (api.errors).
    """

    keyset: Keyset = Keyset((("id", int),))

    def __init__(self, keyset: Keyset | None = None) -> None:
        if keyset is not None:
            self.keyset = keyset
        self.next: str | None = None

    def paginate_queryset(self, queryset: QuerySet, request: Request, view=None) -> list:
        page = paginate(queryset, self.keyset, request.query_params)
        self.next = next_url(request, page.next_cursor)
        return page.results

    def get_paginated_response(self, data: list) -> Response:
        return Response({"results": data, "next": self.next})

    def get_paginated_response_schema(self, schema: dict) -> dict:
        return {
            "type": "object",
            "required": ["results", "next"],
            "properties": {
                "results": schema,
                "next": {"type": "string", "format": "uri", "nullable": True},
            },
        }


def page_response(
    request: Request, queryset: QuerySet, keyset: Keyset, serializer: type, **kwargs: Any
) -> Response:
    """One page of `queryset` through KeysetPagination, each row through `serializer` (given
    `kwargs`): the list views that are plain APIViews."""
    paginator = KeysetPagination(keyset)
    rows = paginator.paginate_queryset(queryset, request)
    return paginator.get_paginated_response(serializer(rows, many=True, **kwargs).data)
