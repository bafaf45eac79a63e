from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from records.models import Project, Run
from workers.heartbeat import last_seen


@login_required
def overview(request):
    projects = Project.objects.order_by("name")
    recent_runs = Run.objects.select_related("project").order_by("-last_ts", "-id")[:50]
    return render(
        request,
        "dashboard/overview.html",
        {"projects": projects, "recent_runs": recent_runs, "worker_last_seen": last_seen()},
    )
