"""GET /api/v1/metrics/{metric} and GET /api/v1/streaks: answered from rollups only."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.authentication import SessionAuthentication
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from api.access import CanRead, RoleRequired, project_for_request
from api.auth import ApiKeyAuthentication
from records.contract.filters import parse_filters
from records.metrics.definitions import METRICS, query_metric
from records.metrics.freshness import project_freshness, streaks_freshness
from records.models import Streak

DEFAULT_RANGE = timedelta(hours=24)
# Rollups are kept per project, agent, release and model, not per run or session.
_NOT_FOR_METRICS = ("run_id", "session_id", "kind", "has")


class ReadView(APIView):
    authentication_classes = [ApiKeyAuthentication, SessionAuthentication]
    permission_classes = [CanRead, RoleRequired]


_METRIC_PARAMETERS = [
    OpenApiParameter("metric", str, OpenApiParameter.PATH, enum=list(METRICS)),
    OpenApiParameter(
        "interval", str, enum=["minute", "hour", "day"], description="Bucket size; default hour."
    ),
    OpenApiParameter(
        "group_by",
        str,
        enum=["model", "agent", "reason", "kind", "provider"],
        description="Default: the metric's own grouping.",
    ),
    OpenApiParameter("from", OpenApiTypes.DATETIME, description="Default: `to` minus 24 h."),
    OpenApiParameter("to", OpenApiTypes.DATETIME, description="Default: now."),
    OpenApiParameter("agent", str, description="Comma list of agents."),
    OpenApiParameter("release", str, description="Comma list of releases (all when absent)."),
    OpenApiParameter("model", str, description="Comma list of models."),
]


class MetricView(ReadView):
    @extend_schema(
        parameters=_METRIC_PARAMETERS,
        responses=OpenApiTypes.OBJECT,
        description="A metric from rollups: series per group and bucket "
        "({t, value, count}), totals per group, and the rollups' freshness for the project's "
        "own records. The spend metrics (`cost`, `cost_per_run`) give their value in USD and "
        "add `unknown` to each point and total: the records with usage whose price is "
        "unknown, which the value leaves out (a group of such records only has value null).",
    )
    def get(self, request, metric: str):
        project = project_for_request(request)
        params = request.query_params
        for name in _NOT_FOR_METRICS:
            if params.get(name):
                raise ValidationError(
                    {
                        name: [
                            "is not available for metrics (rollups are kept "
                            "per agent, release and model, not per run)"
                        ]
                    }
                )
        # FilterError and MetricError are 400s naming the parameter (api.errors). parse_time
        # keeps `to` a day inside the calendar, so the default range cannot underflow.
        filters = parse_filters(params)
        end = filters.end or timezone.now()
        start = filters.start or end - DEFAULT_RANGE
        body = query_metric(
            project_id=project.pk,
            name=metric,
            interval=params.get("interval") or "hour",  # empty is absent, as everywhere
            start=start,
            end=end,
            group_by=params.get("group_by") or None,
            agents=filters.agents,
            models=filters.models,
            releases=filters.releases,
        )
        body["freshness"] = project_freshness(project.pk)
        return Response(body)


class StreakView(ReadView):
    @extend_schema(
        parameters=[OpenApiParameter("model", str, description="Comma list of models.")],
        responses=OpenApiTypes.OBJECT,
        description="Per model: current and longest contract-broken streak, last broken at.",
    )
    def get(self, request):
        project = project_for_request(request)
        models = parse_filters(request.query_params).models
        streaks = Streak.objects.filter(project=project).order_by("-current", "-longest", "model")
        if models:
            streaks = streaks.filter(model__in=models)
        results = [
            {
                "model": s.model,
                "current": s.current,
                "longest": s.longest,
                "last_broken_at": s.last_broken_at,
            }
            for s in streaks
        ]
        return Response(
            {
                "results": results,
                "next": None,
                "freshness": project_freshness(project.pk),
                # Late verdicts wait a few seconds before they count (records.catchup.passes).
                "streaks": streaks_freshness(project.pk),
            }
        )
