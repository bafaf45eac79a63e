"""A project's redaction rules: which built-in detectors run on its records' free text, and its
own patterns and JSON keys (records.contract.redaction applies them; docs/operations.md,
"Redaction")."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import models

from records.models.tenancy import Project
from records.redaction_syntax import (
    BUILT_IN,
    CARDS,
    RULE_NAME,
    SECRETS,
    PatternError,
    compile_pattern,
)


class RedactionPolicy(models.Model):
    """The built-in detectors a project runs. A project without a policy row has the defaults:
    secrets (keys, tokens, card numbers) on, personal data (e-mail, phone, IBAN) off."""

    project = models.OneToOneField(
        Project, on_delete=models.CASCADE, related_name="redaction_policy"
    )
    secrets = models.BooleanField(
        default=True,
        help_text="API keys (OpenAI, Anthropic, AWS, GitHub, Slack, Google), JWTs, bearer "
        "tokens and secrets assigned to a name such as api_key= or password:.",
    )
    cards = models.BooleanField(default=True, help_text="Payment card numbers (Luhn-checked).")
    emails = models.BooleanField(default=False, help_text="E-mail addresses.")
    phones = models.BooleanField(default=False, help_text="Phone numbers.")
    ibans = models.BooleanField(default=False, help_text="IBANs (mod-97-checked).")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "redaction policies"

    def __str__(self) -> str:
        return f"redaction of {self.project}"

    def detectors(self) -> tuple[str, ...]:
        on = []
        if self.secrets:
            on += SECRETS
        if self.cards:
            on += CARDS
        on += [name for name in ("email", "phone", "iban") if getattr(self, f"{name}s")]
        return tuple(on)


class RedactionRule(models.Model):
    """A project's own rule: a pattern (RE2 syntax) whose matches are redacted, or a JSON key
    whose value is always redacted, wherever it appears in a record's JSON."""

    class Kind(models.TextChoices):
        PATTERN = "pattern", "pattern"
        JSON_KEY = "json_key", "JSON key"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="redaction_rules")
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.PATTERN)
    name = models.CharField(
        max_length=40,
        blank=True,
        help_text="A pattern's name, in its marker ([REDACTED:<name>]) and its counts: lower "
        "case letters, digits, _ and -. Not used for a JSON key.",
    )
    value = models.CharField(
        max_length=1000,
        help_text="The pattern (RE2 syntax: no lookaround, no backreferences), or the JSON key "
        "(matched in any case).",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "kind", "value"], name="redaction_rule_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.name or self.value}"

    def save(self, *args, **kwargs) -> None:
        # Ingest compiles every saved pattern: one that cannot compile must never be stored.
        self.clean()
        super().save(*args, **kwargs)

    def clean(self) -> None:
        if self.kind == self.Kind.JSON_KEY:
            self.value = self.value.strip()
            if not self.value:
                raise ValidationError({"value": "Name the JSON key."})
            return
        if not RULE_NAME.match(self.name or ""):
            raise ValidationError(
                {
                    "name": "A pattern needs a name of lower case letters, digits, _ and - "
                    "(at most 40, starting with a letter)."
                }
            )
        if self.name in BUILT_IN:
            raise ValidationError({"name": f"{self.name} is a built-in detector's name."})
        try:
            compile_pattern(self.value)
        except PatternError as exc:
            raise ValidationError({"value": str(exc)}) from None
