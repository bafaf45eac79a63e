"""The alerts pages: rules with their state, the rule form with its preview,
the event history, pause and silence, and the channels with a "send test" button.

Every page is scoped to the operator's projects: another project's rule or channel is a 404.
The preview's data comes from alerts.preview and its figure from dashboard.charts.alert_charts;
these views only route, validate forms and render.
"""

from __future__ import annotations

import html
from datetime import timedelta

from django import forms
from django.contrib import messages
from django.core.paginator import Paginator
from django.db import transaction
from django.db.models import Count
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_POST

from alerts import delivery, units
from alerts.evaluate import STATES
from alerts.models import (
    METRIC_CHOICES,
    OVERALL_STATES,
    AlertEvent,
    Channel,
    Rule,
    filter_events,
)
from alerts.preview import preview_rule
from dashboard.charts import alert_charts
from dashboard.web.access import (
    get_project_for_user,
    operator_roles,
    projects_for_page,
    role_required,
)
from records.contract.filters import FilterError
from records.models import Project, Role
from records.store import audit_trail

EVENTS_PER_PAGE = 100
RULES_PER_PAGE = 50
SILENCE_CHOICES = ((30, "30 min"), (60, "1 h"), (240, "4 h"), (1440, "1 day"))


def _back(request, default: str):
    """Where a button's form came from (`next`), if it is a page of this site."""
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return redirect(target)
    return redirect(default)


def _get_rule_for_user(request, rule_id: int) -> Rule:
    rule = (
        Rule.objects.filter(pk=rule_id, project__in=Project.objects.for_user(request.user))
        .select_related("project")
        .first()
    )
    if rule is None:
        raise Http404("No such rule.")
    return rule


def _get_channel_for_user(request, channel_id: int) -> Channel:
    channel = (
        Channel.objects.filter(pk=channel_id, project__in=Project.objects.for_user(request.user))
        .select_related("project")
        .first()
    )
    if channel is None:
        raise Http404("No such channel.")
    return channel


# --- forms -------------------------------------------------------------------------------------
class RuleForm(forms.ModelForm):
    project = forms.ModelChoiceField(queryset=None, to_field_name="name")
    metric = forms.ChoiceField(choices=METRIC_CHOICES)
    match = forms.JSONField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text='Pin a dimension of the metric, e.g. {"verdict": "block"}; for notices, '
        'the code and any detail field: {"code": "route.fallback_to_primary", '
        '"detail.cause": "timeout"}.',
    )

    class Meta:
        model = Rule
        fields = [
            "name",
            *Rule.CONDITION_FIELDS,
            *Rule.FIRING_FIELDS,
            "channels",
        ]
        widgets = {"channels": forms.CheckboxSelectMultiple}

    # A rate's thresholds are typed in per cent (alerts.units); the unit shows beside them.
    PERCENT_FIELDS = ("threshold", "warning_threshold")

    def __init__(self, *args, user, project=None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        projects = Project.objects.for_user(user).order_by("name")
        if self.instance.pk:
            del self.fields["project"]
            self.fields["channels"].queryset = Channel.objects.filter(project=self.instance.project)
            for name in self.PERCENT_FIELDS:
                self.initial[name] = units.to_form(self.instance.metric, self.initial.get(name))
        else:
            self.fields["project"].queryset = projects
            self.fields["channels"].queryset = Channel.objects.filter(project__in=projects)
            if project is not None:  # the project the operator is looking at
                self.initial.setdefault("project", project.name)
        self.fields[
            "threshold"
        ].help_text = "A rate in per cent (10 means 10 %), a latency in ms, a count as a number."

    @property
    def unit(self) -> str:
        """The thresholds' unit for the metric the form holds (typed, or the rule's)."""
        metric = self.data.get("metric") if self.is_bound else None
        return units.unit(metric or self.initial.get("metric") or self.instance.metric or "")

    def clean_match(self) -> dict:
        return self.cleaned_data.get("match") or {}

    def clean(self) -> dict:
        cleaned = super().clean()
        metric = cleaned.get("metric", "")
        if units.is_rate(metric):
            for name in self.PERCENT_FIELDS:
                value = cleaned.get(name)
                if value is not None and not 0 <= value <= 100:
                    self.add_error(name, "a rate is between 0 and 100 (per cent)")
                else:
                    cleaned[name] = units.from_form(metric, value)
        project = cleaned.get("project") if "project" in self.fields else self.instance.project
        if project is not None:
            self.instance.project = project
            strangers = [c for c in cleaned.get("channels") or () if c.project_id != project.pk]
            if strangers:
                self.add_error("channels", f"{strangers[0].name} belongs to another project")
        return cleaned


class ChannelForm(forms.ModelForm):
    project = forms.ModelChoiceField(queryset=None, to_field_name="name")
    url = forms.URLField(
        max_length=2000, required=False, assume_scheme="https", help_text="Webhook: the URL."
    )
    addresses = forms.CharField(required=False, help_text="Email: addresses separated by commas.")

    class Meta:
        model = Channel
        fields = ["name", "kind", "url", "addresses"]

    def __init__(self, *args, user, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            del self.fields["project"]
            self.initial["addresses"] = ", ".join(self.instance.addresses or [])
        else:
            self.fields["project"].queryset = Project.objects.for_user(user).order_by("name")

    def clean_addresses(self) -> list[str]:
        raw = self.cleaned_data.get("addresses") or ""
        return [a.strip() for a in raw.replace(";", ",").split(",") if a.strip()]

    def clean(self) -> dict:
        cleaned = super().clean()
        if cleaned.get("project") is not None:
            self.instance.project = cleaned["project"]
        return cleaned


# --- rules ---------------------------------------------------------------------------------------
@role_required
def alerts_list(request):
    projects = projects_for_page(request)
    rules = Rule.objects.filter(project__in=projects).with_overall_rank()
    counts = dict(
        rules.order_by()
        .values_list("overall_rank")
        .annotate(n=Count("id"))
        .values_list("overall_rank", "n")
    )
    query = request.GET.get("q", "").strip()
    if query:
        rules = rules.filter(name__icontains=query)
    state = request.GET.get("state", "")
    if state in OVERALL_STATES:
        rules = rules.filter(overall_rank=OVERALL_STATES.index(state))
    # Worst first: a firing rule is what an operator opens this page for.
    rules = (
        rules.select_related("project")
        .prefetch_related("states", "channels")
        .order_by("overall_rank", "project__name", "name", "id")
    )
    page = Paginator(rules, RULES_PER_PAGE).get_page(request.GET.get("page"))
    channels = (
        Channel.objects.filter(project__in=projects)
        .select_related("project")
        .order_by("project__name", "name")
    )
    kept = request.GET.copy()
    kept.pop("page", None)
    return render(
        request,
        "alerts/list.html",
        {
            "page": page,
            "rules": page.object_list,
            "kept_query": kept.urlencode(),
            "query": query,
            "state": state if state in OVERALL_STATES else "",
            "state_counts": [(name, counts.get(i, 0)) for i, name in enumerate(OVERALL_STATES)],
            "total": sum(counts.values()),
            "channels": channels,
            "silence_choices": SILENCE_CHOICES,
            "now": timezone.now(),
            "can_edit": any(role.covers(Role.EDITOR) for role in operator_roles(request).values()),
        },
    )


@role_required
def rule_edit(request, rule_id: int | None = None):
    rule = _get_rule_for_user(request, rule_id) if rule_id is not None else Rule()
    # Taken before the form is validated, which writes the posted values onto the rule.
    before = audit_trail.snapshot(rule) if rule.pk else None
    form = RuleForm(
        request.POST or None, instance=rule, user=request.user, project=_current_project(request)
    )
    preview = None
    if request.method == "POST" and form.is_valid():
        if "preview" not in request.POST:
            with transaction.atomic():
                rule = form.save()
                audit_trail.record_change(
                    "update" if before else "create",
                    rule,
                    actor=audit_trail.actor_of(request),
                    before=before,
                )
            messages.success(request, f"Saved {rule.name}.")
            return redirect("dash-alert-edit", rule_id=rule.pk)
        preview = _preview(request, form.save(commit=False))
    elif request.method == "GET" and rule.pk:
        preview = _preview(request, rule)
    context = {
        "form": form,
        "rule": rule,
        "preview": preview,
        "preview_figure": alert_charts.alert_preview(preview, units.is_rate(rule.metric))
        if preview
        else None,
        "groups": _field_groups(form),
        "units": {metric: units.unit(metric) for metric, _ in METRIC_CHOICES},
        "now": timezone.now(),
    }
    if rule.pk:
        context["states"] = rule.states.order_by("group")
        context["events"] = (
            AlertEvent.objects.filter(rule=rule)
            .order_by("-id")
            .prefetch_related("notifications__channel")[:20]
        )
    return render(request, "alerts/rule_form.html", context)


# The rule form in three parts, each a fieldset (templates/alerts/rule_form.html).
FIELD_GROUPS = (
    ("What to watch", ("name", "project", "metric", "agent", "model", "classifier", "kind",
                       "match", "group_by")),
    ("When it fires", ("comparator", "threshold", "warning_threshold", "window_minutes",
                       "min_records", "for_minutes", "no_data")),
    ("Who hears of it", ("channels", "renotify_minutes")),
)  # fmt: skip


def _field_groups(form: RuleForm) -> list[tuple[str, list]]:
    return [(title, [form[n] for n in names if n in form.fields]) for title, names in FIELD_GROUPS]


def _current_project(request):
    try:
        return get_project_for_user(request)
    except Http404:
        if request.GET.get("project"):  # a project they are not in: as on every other page
            raise
        return None  # an operator in no project: the form says so


def _preview(request, rule: Rule):
    try:
        return preview_rule(rule)
    except ValueError as exc:
        messages.error(request, str(exc))
        return None


@role_required
@require_POST
def rule_pause(request, rule_id: int):
    rule = _get_rule_for_user(request, rule_id)
    with transaction.atomic():
        before = audit_trail.snapshot(rule)
        rule.paused = request.POST.get("paused") == "1"
        rule.save(update_fields=["paused", "updated_at"])
        audit_trail.record_change(
            "update", rule, actor=audit_trail.actor_of(request), before=before
        )
    messages.success(request, f"{'Paused' if rule.paused else 'Resumed'} {rule.name}.")
    return _back(request, "dash-alerts")


@role_required
@require_POST
def rule_silence(request, rule_id: int):
    rule = _get_rule_for_user(request, rule_id)
    try:
        minutes = int(request.POST.get("minutes", "0"))
    except ValueError:
        minutes = -1
    if not 0 <= minutes <= 7 * 24 * 60:
        messages.error(request, "Silence for 0 minutes to 7 days.")
        return redirect("dash-alerts")
    with transaction.atomic():
        before = audit_trail.snapshot(rule)
        rule.silenced_until = timezone.now() + timedelta(minutes=minutes) if minutes else None
        rule.save(update_fields=["silenced_until", "updated_at"])
        audit_trail.record_change(
            "update", rule, actor=audit_trail.actor_of(request), before=before
        )
    if minutes:
        messages.success(request, f"Silenced {rule.name} for {minutes} min.")
    else:
        messages.success(request, f"{rule.name} is no longer silenced.")
    return _back(request, "dash-alerts")


@role_required
@require_POST
def rule_delete(request, rule_id: int):
    rule = _get_rule_for_user(request, rule_id)
    with transaction.atomic():
        audit_trail.record_deletion(rule, actor=audit_trail.actor_of(request))
        rule.delete()
    messages.success(request, f"Deleted {rule.name}.")
    return redirect("dash-alerts")


@role_required
def alert_events(request):
    projects = projects_for_page(request)
    events = (
        AlertEvent.objects.filter(project__in=projects)
        .select_related("rule", "project")
        .prefetch_related("notifications__channel")
        .order_by("-id")
    )
    error = ""
    try:
        events = filter_events(events, request.GET)
    except FilterError as exc:
        error = f"{exc.param}: {exc.message}"
        events = events.none()
    before = request.GET.get("before", "")
    if before.isascii() and before.isdecimal() and int(before) < 2**63:
        events = events.filter(id__lt=int(before))
    page = list(events[: EVENTS_PER_PAGE + 1])
    more = len(page) > EVENTS_PER_PAGE
    page = page[:EVENTS_PER_PAGE]
    params = request.GET.copy()
    if more:
        params["before"] = str(page[-1].pk)
    filters = {k: request.GET.get(k, "") for k in ("rule", "group", "state", "reason")}
    # The rule filter's options, built here in one go: a template loop (or format_html) over a
    # thousand rules costs more than the rest of the page. Names are escaped; ids are ints.
    rules = Rule.objects.filter(project__in=projects).order_by("name", "id")
    rule_options = mark_safe(
        "".join(
            f'<option value="{pk}"{" selected" if str(pk) == filters["rule"] else ""}>'
            f"{html.escape(name)}</option>"
            for pk, name in rules.values_list("pk", "name")
        )
    )
    return render(
        request,
        "alerts/events.html",
        {
            "events": page,
            "error": error,
            "next_query": params.urlencode() if more else "",
            "rule_options": rule_options,
            "states": STATES,
            "reasons": AlertEvent.Reason.values,
            "filters": filters,
        },
    )


# --- channels ------------------------------------------------------------------------------------
@role_required
def channel_edit(request, channel_id: int | None = None):
    if channel_id is not None:
        channel = _get_channel_for_user(request, channel_id)
    else:
        _current_project(request)
        channel = Channel()
    # Taken before the form is validated, which writes the posted values onto the channel.
    before = audit_trail.snapshot(channel) if channel.pk else None
    form = ChannelForm(request.POST or None, instance=channel, user=request.user)
    if request.method == "POST" and form.is_valid():
        with transaction.atomic():
            channel = form.save()
            audit_trail.record_change(
                "update" if before else "create",
                channel,
                actor=audit_trail.actor_of(request),
                before=before,
            )
        messages.success(request, f"Saved channel {channel.name}.")
        return redirect("dash-alert-channel-edit", channel_id=channel.pk)
    return render(request, "alerts/channel_form.html", {"form": form, "channel": channel})


@role_required
@require_POST
def channel_test(request, channel_id: int):
    channel = _get_channel_for_user(request, channel_id)
    problem = delivery.send_test(channel)
    if problem is None:
        messages.success(request, f"Sent a test notification to {channel.name}.")
    else:
        messages.error(request, f"The test to {channel.name} failed: {problem}")
    return _back(request, "dash-alerts")


@role_required
@require_POST
def channel_enable(request, channel_id: int):
    channel = _get_channel_for_user(request, channel_id)
    with transaction.atomic():
        before = audit_trail.snapshot(channel)
        channel.enable()
        audit_trail.record_change(
            "update", channel, actor=audit_trail.actor_of(request), before=before
        )
    messages.success(request, f"Enabled {channel.name} again.")
    return redirect("dash-alerts")
