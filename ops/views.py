"""/metrics (Prometheus), /healthz (the process answers) and /readyz (it can serve).

/metrics is off unless DECISIONBOARD_METRICS_TOKEN is set, and then asks for it as a bearer
token, which is how Prometheus authenticates a scrape (`authorization: {credentials: ...}` in
its scrape config): it names projects and agents' activity, so it is never public by default.
The probes carry no data and take no credentials, for load balancers and orchestrators.
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from ops import probes
from ops.multiprocess import FilesCollector
from ops.state import StateCollector


def _bearer(request: HttpRequest) -> str:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    token = settings.DECISIONBOARD["METRICS_TOKEN"]
    if not token:
        return HttpResponse("Not found: /metrics is off (set DECISIONBOARD_METRICS_TOKEN).\n",
                            status=404, content_type="text/plain")  # fmt: skip
    if not hmac.compare_digest(_bearer(request).encode(), token.encode()):
        response = HttpResponse("A bearer token is required.\n", status=401,
                                content_type="text/plain")  # fmt: skip
        response["WWW-Authenticate"] = 'Bearer realm="decisionboard-metrics"'
        return response
    # A registry per scrape: the machine's counters (every process's files) and the
    # installation's state read now; nothing of the process's own default registry.
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FilesCollector())
    registry.register(StateCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


@never_cache
@require_GET
def healthz(request: HttpRequest) -> HttpResponse:
    """The process is up and answering; nothing else is asked (no database)."""
    return JsonResponse({"status": "ok"})


@never_cache
@require_GET
def readyz(request: HttpRequest) -> HttpResponse:
    """200 when the database answers, its migrations are applied and the broker (when one is
    configured) answers; otherwise 503 naming what is not."""
    checks = probes.readiness()
    ready = all(check.ok for check in checks)
    return JsonResponse(
        {
            "status": "ready" if ready else "unavailable",
            "checks": {c.name: {"ok": c.ok, "detail": c.detail} for c in checks},
        },
        status=200 if ready else 503,
    )
