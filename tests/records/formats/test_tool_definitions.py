"""Tool definitions read by their JSON text, each text parsed once."""

from __future__ import annotations

import json

from records.formats import attributes


def test_a_definition_read_again_names_the_same_tool_and_a_nameless_one_is_a_problem_each_time():
    named = json.dumps({"type": "function", "name": "get_weather", "inputSchema": {}})
    nested = json.dumps({"type": "function", "function": {"name": "search_docs"}})
    nameless = json.dumps({"type": "function", "description": "no name"})
    for _ in range(3):
        problems: list[str] = []
        names = attributes.tool_names([named, nested, nameless, "not json"], "tools", problems)
        assert names == ["get_weather", "search_docs"]
        assert problems == ["tools[2] names no tool", "tools[3] names no tool"]


def test_definitions_kept_by_their_text_stay_bounded(monkeypatch):
    monkeypatch.setattr(attributes, "NAMES_BY_TEXT", {})
    monkeypatch.setattr(attributes, "MAX_NAMED_DEFINITIONS", 50)
    many = [json.dumps({"name": f"tool_{i}"}) for i in range(200)]
    huge = json.dumps({"name": "big", "description": "x" * attributes.MAX_NAMED_DEFINITION_CHARS})
    assert attributes.tool_names([*many, huge], "tools", []) == [
        *(f"tool_{i}" for i in range(200)),
        "big",
    ]
    assert len(attributes.NAMES_BY_TEXT) == 50
    assert huge not in attributes.NAMES_BY_TEXT
