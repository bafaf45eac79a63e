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


def test_a_list_read_again_is_a_fresh_list_with_the_same_names():
    offered = [json.dumps({"name": "a"}), json.dumps({"function": {"name": "b"}}), {"name": "c"}]
    first = attributes.tool_names(offered, "tools", [])
    first.append("changed by the caller")
    assert attributes.tool_names(offered, "tools", []) == ["a", "b", "c"]
    texts = offered[:2]
    first = attributes.tool_names(texts, "tools", [])
    first.append("changed by the caller")
    assert attributes.tool_names(texts, "tools", []) == ["a", "b"]


def test_lists_kept_by_their_texts_stay_bounded(monkeypatch):
    monkeypatch.setattr(attributes, "NAMES_BY_LIST", {})
    monkeypatch.setattr(attributes, "MAX_NAMED_LISTS", 20)
    long = [json.dumps({"name": f"t{i}", "description": "x" * 4000}) for i in range(20)]
    assert attributes.tool_names(long, "tools", []) == [f"t{i}" for i in range(20)]
    assert attributes.NAMES_BY_LIST == {}
    for i in range(100):
        texts = [json.dumps({"name": f"tool_{i}"}), json.dumps({"name": "common"})]
        assert attributes.tool_names(texts, "tools", []) == [f"tool_{i}", "common"]
    assert len(attributes.NAMES_BY_LIST) == 20
