"""Alert rules, their per-group states and events, channels and deliveries.

A rule turns itself into plain data for the pure code: `Rule.query()` (what it reads, see
alerts.windows) and `Rule.condition()` (how it judges, see alerts.evaluate). Validation lives in
`rule_errors()`, which the API serializer and the page's form both call.
"""

from __future__ import annotations

import secrets
from datetime import timedelta

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import models
from django.utils import timezone

from alerts import evaluate as ev
from alerts import units
from alerts.windows import (
    RELEASE_REGRESSION,
    RULE_METRICS,
    Family,
    Query,
    query_errors,
    window_errors,
)
from records.contract.filters import FilterError, check_text, parse_time
from records.models import Project

# The metrics a rule may watch, for forms. Not `choices` on the field: validation is
# rule_errors(), and a metric added to records.metrics.definitions then needs no migration here.
METRIC_CHOICES = [(name, name.replace("_", " ")) for name in RULE_METRICS]


def new_secret() -> str:
    return secrets.token_hex(32)


class Channel(models.Model):
    """Where notifications go: a webhook or email addresses (see alerts.transports)."""

    class Kind(models.TextChoices):
        WEBHOOK = "webhook", "webhook"
        EMAIL = "email", "email"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="alert_channels")
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=10, choices=Kind.choices)
    url = models.URLField(max_length=2000, blank=True, help_text="Webhook: the URL to POST to.")
    secret = models.CharField(
        max_length=128,
        default=new_secret,
        help_text="Webhook: signs each body (X-Decisionboard-Signature, hex HMAC-SHA256).",
    )
    addresses = models.JSONField(default=list, blank=True, help_text="Email: the recipients.")
    # Failed attempts in a row, over every notification; a success resets it. Past the limit
    # the channel is disabled until an operator enables it again.
    consecutive_failures = models.PositiveIntegerField(default=0)
    disabled = models.BooleanField(default=False)
    disabled_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["project", "name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"

    def clean(self) -> None:
        from alerts.safety import UnsafeURL, check_webhook_url

        errors: dict[str, list[str]] = {}
        if self.kind == self.Kind.WEBHOOK:
            if not self.url:
                errors["url"] = ["a webhook needs a URL"]
            else:
                try:
                    check_webhook_url(self.url)
                except UnsafeURL as exc:
                    errors["url"] = [str(exc)]
        elif self.kind == self.Kind.EMAIL:
            if not isinstance(self.addresses, list) or not self.addresses:
                errors["addresses"] = ["an email channel needs at least one address"]
            else:
                for address in self.addresses:
                    try:
                        validate_email(address)
                    except ValidationError:
                        errors["addresses"] = [f"{address!r} is not an email address"]
                        break
        if errors:
            raise ValidationError(errors)

    def enable(self) -> None:
        self.disabled, self.disabled_at, self.consecutive_failures = False, None, 0
        self.save(update_fields=["disabled", "disabled_at", "consecutive_failures"])


# A rule's overall state, worst first: what the alerts page sorts and filters by. Paused says
# nothing of the groups; then the worst group state; a rule never evaluated yet is "new".
NEW, PAUSED = "new", "paused"
GROUP_STATES_WORST_FIRST = (ev.FIRING, ev.NODATA, ev.PENDING)
OVERALL_STATES = (*GROUP_STATES_WORST_FIRST, ev.OK, NEW, PAUSED)


class RuleQuerySet(models.QuerySet):
    def with_overall_rank(self) -> RuleQuerySet:
        """Annotate `overall_rank`, the index of Rule.overall_state() in OVERALL_STATES, in SQL
        (one EXISTS per group state), so that lists sort and filter by it in the database."""
        return self.annotate(
            overall_rank=models.Case(
                models.When(paused=True, then=models.Value(OVERALL_STATES.index(PAUSED))),
                *(
                    models.When(
                        models.Exists(
                            AlertState.objects.filter(rule=models.OuterRef("pk"), state=state)
                        ),
                        then=models.Value(OVERALL_STATES.index(state)),
                    )
                    for state in GROUP_STATES_WORST_FIRST
                ),
                models.When(
                    last_evaluated_at__isnull=True, then=models.Value(OVERALL_STATES.index(NEW))
                ),
                default=models.Value(OVERALL_STATES.index(ev.OK)),
            )
        )


class Rule(models.Model):
    # What a rule evaluates: the metric, its filters and grouping, and the condition. The API
    # serializer and the rule form both list these, with their own extras around them.
    CONDITION_FIELDS = (
        "metric",
        "agent",
        "model",
        "classifier",
        "kind",
        "match",
        "group_by",
        "comparator",
        "threshold",
        "warning_threshold",
        "window_minutes",
    )
    # How it fires and notifies.
    FIRING_FIELDS = ("min_records", "for_minutes", "no_data", "renotify_minutes")

    class Comparator(models.TextChoices):
        GT = "gt", "above (>)"
        GTE = "gte", "at or above (≥)"
        LT = "lt", "below (<)"
        LTE = "lte", "at or below (≤)"

    class NoData(models.TextChoices):
        OK = ev.NODATA_OK, "treat as ok"
        NODATA = ev.NODATA_ALERT, "alert as no data"
        KEEP = ev.NODATA_KEEP, "keep the last state"

    class GroupBy(models.TextChoices):
        NONE = "", "nothing (one value)"
        MODEL = "model", "model"
        AGENT = "agent", "agent"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="alert_rules")
    name = models.CharField(max_length=200)
    metric = models.CharField(max_length=40)
    # Filters: empty means any. `classifier` is the classifier model (a pick's classifier.model,
    # a verdict's seatModel); `match` pins a metric's other dimensions, e.g. {"verdict": "block"}.
    agent = models.CharField(max_length=200, blank=True)
    model = models.CharField(max_length=200, blank=True)
    classifier = models.CharField(max_length=200, blank=True)
    kind = models.CharField(max_length=40, blank=True)
    match = models.JSONField(default=dict, blank=True)
    group_by = models.CharField(max_length=10, choices=GroupBy.choices, blank=True, default="")
    comparator = models.CharField(max_length=3, choices=Comparator.choices, default="gt")
    threshold = models.FloatField()
    warning_threshold = models.FloatField(null=True, blank=True)
    window_minutes = models.PositiveIntegerField(
        default=5,
        help_text="The metric over this many minutes, the current one included; over an hour, "
        "whole hours.",
    )
    min_records = models.PositiveIntegerField(
        default=1, help_text="Fewer records behind a rate or latency is no data."
    )
    for_minutes = models.PositiveIntegerField(
        default=0, help_text="How long the condition must hold before the rule fires."
    )
    no_data = models.CharField(max_length=10, choices=NoData.choices, default=NoData.OK)
    channels = models.ManyToManyField(Channel, blank=True, related_name="rules")
    renotify_minutes = models.PositiveIntegerField(
        default=0, help_text="Remind the channels this often while firing; 0 never."
    )
    paused = models.BooleanField(default=False)
    silenced_until = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)
    # Kept by the engine.
    last_evaluated_at = models.DateTimeField(null=True, blank=True, editable=False)
    last_error = models.TextField(blank=True, editable=False)
    # A tick claims the rules it evaluates so that two overlapping ticks never both fire.
    lease_token = models.CharField(max_length=32, blank=True, editable=False)
    lease_until = models.DateTimeField(null=True, blank=True, editable=False)

    objects = RuleQuerySet.as_manager()

    class Meta:
        ordering = ["project", "name", "id"]
        indexes = [models.Index(fields=["paused", "lease_until"], name="alert_rule_due")]

    def __str__(self) -> str:
        return self.name

    def query(self) -> Query:
        return Query(
            metric=self.metric,
            agent=self.agent,
            model=self.model,
            classifier=self.classifier,
            kind=self.kind,
            match=tuple(sorted((self.match or {}).items())),
            group_by=self.group_by,
        )

    @property
    def metric_label(self) -> str:
        return self.metric.replace("_", " ")

    @property
    def family(self) -> Family | None:
        return RULE_METRICS.get(self.metric)

    @property
    def grouped(self) -> bool:
        """Whether the rule's value comes in groups: grouped by model or agent, or a release
        regression rule, whose groups are the measures that regressed."""
        return bool(self.group_by) or self.metric == RELEASE_REGRESSION

    def condition(self) -> ev.Condition:
        family = self.family
        return ev.Condition(
            comparator=self.comparator,
            threshold=self.threshold,
            warning=self.warning_threshold,
            for_duration=timedelta(minutes=self.for_minutes),
            no_data=self.no_data,
            min_records=self.min_records if family in (Family.RATE, Family.LATENCY) else 0,
            absent_is_zero=family == Family.COUNT,
            grouped=self.grouped,
            renotify=timedelta(minutes=self.renotify_minutes) if self.renotify_minutes else None,
            silenced_until=self.silenced_until,
            paused=self.paused,
        )

    def overall_state(self) -> str:
        """The rule's state in OVERALL_STATES (reads the prefetched `states`); the same rule as
        RuleQuerySet.with_overall_rank, in Python."""
        if self.paused:
            return PAUSED
        present = {state.state for state in self.states.all()}
        for state in GROUP_STATES_WORST_FIRST:
            if state in present:
                return state
        return ev.OK if self.last_evaluated_at else NEW

    def is_silenced(self, now=None) -> bool:
        return self.silenced_until is not None and (now or timezone.now()) < self.silenced_until

    def describe(self) -> str:
        """The condition in words, e.g. `pick error rate > 5 % over 5 min by model`."""
        if self.metric == RELEASE_REGRESSION:
            who = self.agent or "each agent"
            return (
                f"a decision measure of {who}'s newest release worse than the release before "
                f"(q ≤ {self.threshold:g}, from {self.min_records:,} runs)"
            )
        words = [
            self.metric_label,
            ev.SYMBOLS.get(self.comparator, self.comparator),
            units.threshold(self.metric, self.threshold),
        ]
        if self.metric != "contract_broken_streak":
            words.append(f"over {self.window_minutes} min")
        if self.for_minutes:
            words.append(f"for {self.for_minutes} min")
        if self.group_by:
            words.append(f"by {self.group_by}")
        return " ".join(words)

    def definition_errors(self) -> dict:
        """rule_errors() of this rule's metric, filters, grouping and condition."""
        return rule_errors(**{name: getattr(self, name) for name in self.CONDITION_FIELDS})

    def clean(self) -> None:
        errors = self.definition_errors()
        if errors:
            raise ValidationError(errors)


def rule_errors(
    *,
    metric: str,
    agent: str = "",
    model: str = "",
    classifier: str = "",
    kind: str = "",
    match: object = None,
    group_by: str = "",
    comparator: str = "gt",
    threshold: float | None = None,
    warning_threshold: float | None = None,
    window_minutes: int | None = 5,
) -> dict[str, list[str]]:
    """Every problem with a rule's definition, by field; empty when the engine can run it."""
    match = {} if match is None else match
    if not isinstance(match, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in match.items()
    ):
        return {"match": ['must be an object of strings, e.g. {"verdict": "block"}']}
    errors = query_errors(
        Query(
            metric=metric,
            agent=agent or "",
            model=model or "",
            classifier=classifier or "",
            kind=kind or "",
            match=tuple(sorted(match.items())),
            group_by=group_by or "",
        )
    )
    errors.update(ev.condition_errors(comparator, threshold, warning_threshold))
    if metric == RELEASE_REGRESSION:
        errors.update(regression_condition_errors(comparator, threshold, warning_threshold))
    if window_minutes is not None and window_errors(window_minutes):
        errors["window_minutes"] = window_errors(window_minutes)
    return errors


def regression_condition_errors(
    comparator: str, threshold: float | None, warning: float | None
) -> dict[str, list[str]]:
    """A release regression rule fires on a q-value (a false discovery rate): at or under a
    threshold between 0 and 1."""
    errors: dict[str, list[str]] = {}
    if comparator != "lte":
        errors["comparator"] = ["a release regression rule fires at or under its q-value: lte"]
    for name, value in (("threshold", threshold), ("warning_threshold", warning)):
        if value is not None and not 0 < value < 1:
            errors[name] = ["a q-value: above 0 and below 1, e.g. 0.05"]
    return errors


class AlertState(models.Model):
    """The current state of one group of a rule.

    An ungrouped rule has one row, group "". A grouped rule has a row for each group that is
    pending, firing or without data; a group with no row is ok.
    """

    class State(models.TextChoices):
        OK = ev.OK
        PENDING = ev.PENDING
        FIRING = ev.FIRING
        NODATA = ev.NODATA

    rule = models.ForeignKey(Rule, on_delete=models.CASCADE, related_name="states")
    group = models.CharField(max_length=200, blank=True)
    state = models.CharField(max_length=10, choices=State.choices, default=State.OK)
    severity = models.CharField(max_length=10, blank=True)
    since = models.DateTimeField()
    pending_since = models.DateTimeField(null=True, blank=True)
    notified_at = models.DateTimeField(null=True, blank=True)
    value = models.FloatField(null=True, blank=True)
    count = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["rule", "group"], name="alert_state_unique")]
        indexes = [
            models.Index(fields=["state"], name="alert_state_state"),
            # "does this rule have a firing group": the rules list's order and state filter.
            models.Index(fields=["rule", "state"], name="alert_state_rule_state"),
        ]

    def __str__(self) -> str:
        return f"{self.rule} [{self.group or 'all'}]: {self.state}"


class AlertEvent(models.Model):
    """A state change of one group (or a reminder of one), with the value seen."""

    # What an event says, in the order the engine writes it and the API shows it.
    FACTS = (
        "group",
        "from_state",
        "to_state",
        "severity",
        "reason",
        "value",
        "count",
        "threshold",
        "comparator",
        "window_minutes",
        "notify",
        "silenced",
        "at",
        "detail",
    )

    class Reason(models.TextChoices):
        TRANSITION = ev.TRANSITION
        RENOTIFY = ev.RENOTIFY
        SEVERITY = ev.SEVERITY

    rule = models.ForeignKey(Rule, on_delete=models.CASCADE, related_name="events")
    # Denormalised from the rule, so that history lists filter and page without a join.
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    group = models.CharField(max_length=200, blank=True)
    from_state = models.CharField(max_length=10, choices=AlertState.State.choices)
    to_state = models.CharField(max_length=10, choices=AlertState.State.choices)
    severity = models.CharField(max_length=10, blank=True)
    reason = models.CharField(max_length=10, choices=Reason.choices, default=Reason.TRANSITION)
    value = models.FloatField(null=True, blank=True)
    count = models.BigIntegerField(default=0)
    threshold = models.FloatField()
    comparator = models.CharField(max_length=3)
    window_minutes = models.PositiveIntegerField()
    notify = models.BooleanField(default=False)
    silenced = models.BooleanField(default=False)
    at = models.DateTimeField()
    # What a rule that is not one value says of the group: a release regression's measure,
    # both values, the change, its interval and the comparison's link (alerts.release_watch).
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["project", "-id"], name="alert_event_recent"),
            models.Index(fields=["rule", "-id"], name="alert_event_rule"),
        ]

    def __str__(self) -> str:
        return f"{self.rule} [{self.group or 'all'}] {self.from_state} → {self.to_state}"

    @property
    def resolved(self) -> bool:
        return self.to_state == ev.OK and self.from_state in ev.NOTIFYING


def filter_events(queryset, params):
    """History filters: rule (id), group, state (the state entered), reason, from, to.

    Raises records.contract.filters.FilterError naming the parameter at fault.
    """
    rule = params.get("rule")
    if rule:
        # isdecimal alone takes "²" and other digits int() refuses; ids fit in a bigint.
        if not (str(rule).isascii() and str(rule).isdecimal() and int(rule) < 2**63):
            raise FilterError("rule", "must be a rule id")
        queryset = queryset.filter(rule_id=int(rule))
    if params.get("group"):
        queryset = queryset.filter(group=check_text("group", params["group"]))
    state = params.get("state")
    if state:
        if state not in ev.STATES:
            raise FilterError("state", f"one of: {', '.join(ev.STATES)}")
        queryset = queryset.filter(to_state=state)
    reason = params.get("reason")
    if reason:
        if reason not in AlertEvent.Reason.values:
            raise FilterError("reason", f"one of: {', '.join(AlertEvent.Reason.values)}")
        queryset = queryset.filter(reason=reason)
    if params.get("from"):
        queryset = queryset.filter(at__gte=parse_time("from", params["from"]))
    if params.get("to"):
        queryset = queryset.filter(at__lt=parse_time("to", params["to"]))
    return queryset


class Notification(models.Model):
    """One event told to one channel: queued, then sent or failed after its attempts."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        SENT = "sent"
        FAILED = "failed"
        SKIPPED = "skipped"  # the channel was disabled

    event = models.ForeignKey(AlertEvent, on_delete=models.CASCADE, related_name="notifications")
    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="notifications")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["event", "channel"], name="notification_unique")
        ]
        indexes = [models.Index(fields=["status", "updated_at"], name="notification_queued")]

    def __str__(self) -> str:
        return f"event {self.event_id} → {self.channel}: {self.status}"


class DeliveryAttempt(models.Model):
    notification = models.ForeignKey(
        Notification, on_delete=models.CASCADE, related_name="delivery_attempts"
    )
    number = models.PositiveIntegerField()
    at = models.DateTimeField()
    ok = models.BooleanField()
    permanent = models.BooleanField(default=False, help_text="A failure not worth retrying.")
    error = models.TextField(blank=True)
    duration_ms = models.FloatField(default=0)

    class Meta:
        ordering = ["notification", "number"]

    def __str__(self) -> str:
        return f"{self.notification} #{self.number}: {'ok' if self.ok else self.error}"
