"""A project's redaction rules as ingest reads them (records.store.redaction_rules)."""

from __future__ import annotations

import pytest

from records.contract.redaction import Rules
from records.models import RedactionPolicy, RedactionRule
from records.redaction_syntax import CARDS, DEFAULTS, SECRETS
from records.store.redaction_rules import project_rules

pytestmark = [pytest.mark.both_dbs]


def test_a_project_without_a_policy_or_rules_has_the_defaults(alice):
    assert project_rules(alice.project.pk) == Rules(tuple(DEFAULTS))


def test_its_policy_patterns_and_keys_are_read_and_no_other_projects(alice, bob):
    RedactionPolicy.objects.create(project=alice.project, secrets=False, cards=True, phones=True)
    RedactionRule.objects.create(project=alice.project, name="order", value=r"ORD-\d{6}")
    RedactionRule.objects.create(project=alice.project, name="customer", value=r"CUST-\d{6}")
    RedactionRule.objects.create(project=alice.project, kind="json_key", value=" Password ")
    RedactionRule.objects.create(project=bob.project, name="other", value=r"X-\d+")
    RedactionPolicy.objects.create(project=bob.project, secrets=False, cards=False)
    assert project_rules(alice.project.pk) == Rules(
        (*CARDS, "phone"),
        (("customer", r"CUST-\d{6}"), ("order", r"ORD-\d{6}")),
        ("Password",),
    )
    assert project_rules(bob.project.pk) == Rules((), (("other", r"X-\d+"),), ())


def test_a_policy_with_everything_off_and_no_rules_redacts_nothing(alice):
    RedactionPolicy.objects.create(project=alice.project, secrets=False, cards=False)
    rules = project_rules(alice.project.pk)
    assert rules == Rules(())
    assert set(DEFAULTS) == {*SECRETS, *CARDS}
