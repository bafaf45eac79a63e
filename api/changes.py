"""GET /api/v1/changes: two sides of one agent compared, measure by measure, from rollups only
(records.metrics.release_comparison; the page /changes/ shows the same rows)."""

from __future__ import annotations

from urllib.parse import urlencode

from django.urls import reverse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response

from api.access import project_for_request
from api.metrics import ReadView
from records.contract.filters import check_text
from records.metrics.freshness import project_freshness
from records.metrics.release_comparison import (
    DEFAULT_WEEKS,
    Comparison,
    ComparisonError,
    MeasureChange,
    Side,
    compare_sides,
    parse_sides,
)

_SIDE = "`release:<name>`, `before` (the weeks before the other side's release), or "
_SIDE += "`<from>..<to>` (dates or RFC 3339 times, the end excluded)"


def runs_url(side: Side, agent: str, has: str = "", project: str = "") -> str:
    """The runs page, filtered to the runs behind a side (and a measure's `has=`), of
    `project` when given (the pages' project switch)."""
    query = {"project": project} if project else {}
    query.update(side.runs_query(agent))
    if has:
        query["has"] = has
    return f"{reverse('dash-runs')}?{urlencode(query)}"


def measure_body(m: MeasureChange, comparison: Comparison) -> dict:
    agent = comparison.agent
    return {
        "measure": m.measure,
        "label": m.label,
        "group": m.group,
        "method": m.method,
        "unit": m.unit,
        "worse": m.worse,
        "a": {"value": m.value_a, "n": m.n_a, "runs": runs_url(comparison.a, agent, m.has)},
        "b": {"value": m.value_b, "n": m.n_b, "runs": runs_url(comparison.b, agent, m.has)},
        "change": m.change,
        "interval": list(m.interval) if m.interval else None,
        "p_value": m.p_value,
        "q_value": m.q_value,
        "test": m.test,
        "verdict": m.verdict,
        "needed_per_side": m.needed_per_side,
        "more_needed": m.more_needed,
        **({"table": m.detail} if m.detail else {}),
    }


def side_body(side: Side, agent: str) -> dict:
    return {
        "spec": side.spec,
        "label": side.label,
        "release": side.release,
        "from": side.start if side.release is None else None,
        "to": side.end if side.release is None else None,
        "runs": runs_url(side, agent),
    }


def read_comparison(project_id: int, params) -> Comparison:
    """The comparison the query parameters ask for (agent, a, b, weeks); ComparisonError names
    a bad one."""
    agent = check_text("agent", params.get("agent") or "")
    weeks = params.get("weeks") or str(DEFAULT_WEEKS)
    if not weeks.isdigit():
        raise ComparisonError("weeks", "must be a whole number of weeks")
    a, b = parse_sides(project_id, agent, params.get("a") or "", params.get("b") or "",
                       weeks=int(weeks), now=timezone.now())  # fmt: skip
    return compare_sides(project_id, agent, a, b)


class ChangesView(ReadView):
    @extend_schema(
        parameters=[
            OpenApiParameter("agent", str, description="The agent compared (all when absent)."),
            OpenApiParameter("a", str, required=True, description=f"Side A: {_SIDE}."),
            OpenApiParameter("b", str, required=True, description=f"Side B: {_SIDE}."),
            OpenApiParameter("weeks", int, description="Weeks `before` covers; default 4."),
        ],
        responses=OpenApiTypes.OBJECT,
        description="Each decision measure of side A against side B: both values, the change "
        "B − A with its 95 % interval, the p-value, the Benjamini–Hochberg q-value over the "
        "comparison's measures, a verdict (regression, improvement, no evidence), and how many "
        "more observations a side needs; regressions first, then by significance × size.",
    )
    def get(self, request):
        project = project_for_request(request)
        comparison = read_comparison(project.pk, request.query_params)
        return Response(
            {
                "agent": comparison.agent,
                "a": side_body(comparison.a, comparison.agent),
                "b": side_body(comparison.b, comparison.agent),
                "measures": [measure_body(m, comparison) for m in comparison.measures],
                "freshness": project_freshness(project.pk),
            }
        )
