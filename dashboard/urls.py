from __future__ import annotations

from django.urls import path, register_converter

from dashboard.http import staticfiles
from dashboard.run_paths import RunIdConverter
from dashboard.views import (
    alert_pages,
    api_keys,
    audit_log,
    changes,
    classifiers,
    compare,
    export_pages,
    fallbacks,
    invitations,
    models_page,
    overview,
    pick,
    projects,
    run_detail,
    runs,
    sessions,
    streaks_page,
    tool_pages,
)

register_converter(RunIdConverter, "run_id")

urlpatterns = [
    path("favicon.ico", staticfiles.favicon, name="dash-favicon"),
    path("", overview.overview, name="dash-overview"),
    path("runs/", runs.runs_list, name="dash-runs"),
    # Outside runs/: any path there may be a run's, a run id being any string (run "compare"
    # too; its page sends links carrying a comparison's arguments here).
    path("compare/", compare.compare_runs, name="dash-runs-compare"),
    # A run id is any string up to 200 characters, slashes included (dashboard.run_paths): the
    # pick pattern first.
    path("runs/<run_id:run_id>/picks/<int:iteration>/", pick.pick_detail, name="dash-pick"),
    path("runs/<run_id:run_id>/", run_detail.run_detail, name="dash-run-detail"),
    path("models/", models_page.models_page, name="dash-models"),
    path("fallbacks/", fallbacks.fallbacks_page, name="dash-fallbacks"),
    path("fallbacks/runs/<run_id:run_id>/", fallbacks.fallback_run, name="dash-fallback-run"),
    path("sessions/", sessions.sessions_list, name="dash-sessions"),
    path("sessions/<path:session_id>/", sessions.session_detail, name="dash-session"),
    path("classifiers/", classifiers.classifiers_page, name="dash-classifiers"),
    path("streaks/", streaks_page.streaks_page, name="dash-streaks"),
    # Tools (dashboard.views.tool_pages): a tool name is any string up to 200 characters, slashes
    # too.
    path("tools/", tool_pages.tools_list, name="dash-tools"),
    path("tools/<path:name>/", tool_pages.tool_detail, name="dash-tool"),
    path("selection/", tool_pages.selection, name="dash-selection"),
    path("narrowing/", tool_pages.narrowing, name="dash-narrowing"),
    path("changes/", changes.compare_changes, name="dash-changes"),
    path("projects/switch/", projects.switch_project, name="dash-switch-project"),
    path("project/", projects.project_page, name="dash-project"),
    path("project/members/", projects.project_member, name="dash-project-member"),
    path("project/settings/", projects.project_settings, name="dash-project-settings"),
    path("project/invitations/", projects.project_invite, name="dash-project-invite"),
    path(
        "project/invitations/<int:invitation_id>/revoke/",
        projects.invitation_revoke,
        name="dash-project-invitation-revoke",
    ),
    # An invitation's link, opened by someone not yet a member: no role governs it.
    path("invitations/<str:token>/", invitations.accept_invitation, name="dash-invitation-accept"),
    path("project/audit/", audit_log.audit_log, name="dash-audit"),
    path("exports/", export_pages.exports_page, name="dash-exports"),
    path("keys/", api_keys.keys_page, name="dash-keys"),
    path("keys/<int:key_id>/revoke/", api_keys.key_revoke, name="dash-key-revoke"),
    path("alerts/", alert_pages.alerts_list, name="dash-alerts"),
    path("alerts/new/", alert_pages.rule_edit, name="dash-alert-new"),
    path("alerts/events/", alert_pages.alert_events, name="dash-alert-events"),
    path("alerts/<int:rule_id>/", alert_pages.rule_edit, name="dash-alert-edit"),
    path("alerts/<int:rule_id>/pause/", alert_pages.rule_pause, name="dash-alert-pause"),
    path("alerts/<int:rule_id>/silence/", alert_pages.rule_silence, name="dash-alert-silence"),
    path("alerts/<int:rule_id>/delete/", alert_pages.rule_delete, name="dash-alert-delete"),
    path("alerts/channels/new/", alert_pages.channel_edit, name="dash-alert-channel-new"),
    path(
        "alerts/channels/<int:channel_id>/",
        alert_pages.channel_edit,
        name="dash-alert-channel-edit",
    ),
    path(
        "alerts/channels/<int:channel_id>/test/",
        alert_pages.channel_test,
        name="dash-alert-channel-test",
    ),
    path(
        "alerts/channels/<int:channel_id>/enable/",
        alert_pages.channel_enable,
        name="dash-alert-channel-enable",
    ),
]
