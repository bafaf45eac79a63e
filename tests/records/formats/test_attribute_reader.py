"""Reading OTLP attribute values (records.formats.otlp_spans.AttributeReader): long arrays of
strings remembered by their wire bytes, without losing a NUL check or handing out a shared list."""

from __future__ import annotations

import json

import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue

from records.formats import otlp_spans
from records.formats.otlp_spans import AttributeReader


def strings(*texts) -> AnyValue:
    values = [AnyValue(string_value=t) if isinstance(t, str) else AnyValue(int_value=t)
              for t in texts]  # fmt: skip
    return AnyValue(array_value=ArrayValue(values=values))


def tools(count: int, marker: str = "") -> list[str]:
    return [
        json.dumps({"name": f"tool_{i}", "description": f"A tool.{marker}"}) for i in range(count)
    ]


@pytest.fixture(autouse=True)
def forgotten(monkeypatch):
    monkeypatch.setattr(otlp_spans, "READ_ARRAYS", {})


def test_a_long_array_read_again_is_a_fresh_list_with_the_same_values():
    offered = tools(12)
    first = AttributeReader().value(strings(*offered))
    assert first == offered and len(otlp_spans.READ_ARRAYS) == 1
    first.append("changed by the caller")
    reader = AttributeReader()
    again = reader.value(strings(*offered))
    assert again == offered and again is not first
    assert not reader.dirty


def test_an_array_with_a_nul_is_flagged_every_time_and_never_remembered():
    for texts in (tools(12, "\x00"), tools(12, "\\u0000"), [*tools(12), "bad\x00"]):
        for _ in range(2):
            reader = AttributeReader()
            assert reader.value(strings(*texts)) == texts
            assert reader.dirty
    assert otlp_spans.READ_ARRAYS == {}


def test_a_clean_array_read_after_a_dirty_value_keeps_the_reader_dirty():
    reader = AttributeReader()
    reader.value(AnyValue(string_value="a\x00b"))
    assert reader.value(strings(*tools(12))) == tools(12)
    assert reader.dirty
    reader = AttributeReader()
    reader.value(strings(*tools(12)))  # remembered now
    reader.value(AnyValue(string_value="a\x00b"))
    assert reader.value(strings(*tools(12))) == tools(12)
    assert reader.dirty


def test_short_and_mixed_arrays_are_read_each_time():
    reader = AttributeReader()
    assert reader.value(strings("stop")) == ["stop"]
    assert reader.value(strings(*tools(12), 7)) == [*tools(12), 7]
    assert otlp_spans.READ_ARRAYS == {}


def test_the_arrays_remembered_stay_bounded(monkeypatch):
    monkeypatch.setattr(otlp_spans, "MAX_REMEMBERED_ARRAYS", 20)
    for i in range(100):
        texts = tools(12, str(i))
        assert AttributeReader().value(strings(*texts)) == texts
        assert len(otlp_spans.READ_ARRAYS) <= 20
    huge = ["x" * otlp_spans.MAX_REMEMBERED_ARRAY_BYTES]
    assert AttributeReader().value(strings(*huge)) == huge
    limit = otlp_spans.MAX_REMEMBERED_ARRAY_BYTES
    assert all(len(wire) <= limit for wire in otlp_spans.READ_ARRAYS)
