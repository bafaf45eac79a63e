"""The API's exception handler: the domain's parameter errors become 400s naming the parameter.

records.contract.filters (the filter vocabulary, cursors, limits, export formats), alerts' history
filters and records.metrics.definitions raise FilterError or MetricError with the parameter at
fault; a view lets them propagate and the answer is `{"<param>": ["message"]}`, the shape DRF gives
a serializer's field errors. Everything else is DRF's own handling.
"""

from __future__ import annotations

from rest_framework.exceptions import ValidationError
from rest_framework.views import exception_handler as drf_exception_handler

from records.contract.filters import FilterError
from records.metrics.definitions import MetricError


def exception_handler(exc: Exception, context: dict):
    if isinstance(exc, FilterError):
        exc = ValidationError({exc.param: [exc.message]})
    elif isinstance(exc, MetricError):
        exc = ValidationError({exc.param: [str(exc)]})
    return drf_exception_handler(exc, context)
