"""PostgreSQL plans as their nodes (EXPLAIN (FORMAT JSON)), so that a test asserts on the plan's
shape — which node types, over which relations and indexes — and not on EXPLAIN's text, whose
wording and cost figures change between PostgreSQL versions."""

from __future__ import annotations

import json
from typing import Any

Node = dict[str, Any]


def plan_nodes(cursor, sql: str, params=None, *, analyze: bool = False) -> list[Node]:
    """Every node of the plan of `sql`, depth first from the root."""
    options = "FORMAT JSON, COSTS OFF" + (", ANALYZE" if analyze else "")
    cursor.execute(f"EXPLAIN ({options}) {sql}", params)
    (document,) = cursor.fetchone()
    if isinstance(document, str):
        document = json.loads(document)
    nodes: list[Node] = []
    pending = [document[0]["Plan"]]
    while pending:
        node = pending.pop()
        nodes.append(node)
        pending.extend(reversed(node.get("Plans", ())))
    return nodes


def node_types(nodes: list[Node]) -> list[str]:
    return [node["Node Type"] for node in nodes]


def uses_index(nodes: list[Node], index: str) -> bool:
    """An index scan, index-only scan or bitmap index scan of `index`."""
    return any(node.get("Index Name") == index for node in nodes)


def scans_of(nodes: list[Node], node_type: str, relation: str | None = None) -> list[Node]:
    """The nodes of `node_type` (over `relation`, when named) that ran or would run: with
    ANALYZE, a node never executed has no loops."""
    return [
        node
        for node in nodes
        if node["Node Type"] == node_type
        and (relation is None or node.get("Relation Name") == relation)
        and node.get("Actual Loops", 1) > 0
    ]


def shape(nodes: list[Node]) -> list[tuple]:
    """The plan as node types with their relations and indexes, for comparing two plans."""
    return [
        (node["Node Type"], node.get("Relation Name"), node.get("Index Name")) for node in nodes
    ]
