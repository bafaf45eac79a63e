"""Each record kind says once, beside its contract, how the pages show it (records.contract.kinds
and records.contract.renderings); the pages only loop over that table."""

from __future__ import annotations

from dataclasses import replace

from dashboard.queries import timeline
from records.contract import kinds
from records.contract.renderings.kind_rendering import Millis, Rendering, details
from tests.support.factories import BASE_TS


def test_it_lists_what_each_kind_provides():
    provided = {
        name: (
            spec.rendering.describe is not None,
            spec.rendering.lanes is not None,
            spec.rendering.chain_role is not None,
        )
        for name, spec in kinds.KINDS.items()
    }
    # kind: (description, compare lanes, chain role)
    assert provided == {
        "tool_choice.pick": (True, True, False),
        "tool_choice.pick_error": (True, True, False),
        "tool_choice.outcome": (True, True, False),
        "model_selection": (True, True, True),
        "turn": (True, True, False),
        "classifier.verdict": (True, True, True),
        "notice": (True, False, True),
        "provider.error": (True, False, False),
        "reliability": (True, False, True),
        "model_call": (True, False, False),
    }


def test_it_shows_a_kind_registered_with_only_its_own_rendering_on_the_timeline(monkeypatch):
    def describe_probe(data: dict, derived: dict):
        return f"probe {data['name']}", details(("took", Millis(1500)), ("note", data["note"]))

    spec = replace(kinds.KINDS["notice"], name="probe", rendering=Rendering(describe_probe))
    monkeypatch.setitem(kinds.KINDS, "probe", spec)
    record = {"id": 1, "kind": "probe", "ts": BASE_TS, "iteration": None, "model": None,
              "latency_ms": None, "data": {"name": "p1", "note": "<b>"}, "derived": {}}  # fmt: skip
    item = timeline.build([record], BASE_TS)[0].items[0]
    assert item.title == "probe p1"
    assert item.details == [("took", "1.5 s"), ("note", "<b>")]
    assert "<dd>&lt;b&gt;</dd>" in item.details_html
