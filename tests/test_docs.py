"""The docs name what the code has: every module of the product in the package table of
docs/architecture.md, and every setting the code reads from the environment in the settings of
docs/operations.md. A module or a setting added without its line fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.test_layout import PACKAGES, ROOT, product_modules

# Django's own per-app modules say nothing a reader of the table needs.
BOILERPLATE = {"__init__", "apps", "admin"}


def section(doc: str, heading: str) -> str:
    text = (ROOT / "docs" / doc).read_text()
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + len(heading) + 2)
    return text[start : end if end != -1 else None]


def named_in(text: str) -> set[str]:
    """Every word of every `code span`: `records.store`, `manage.py doctor`, `cost` alike."""
    return {word for span in re.findall(r"`([^`]+)`", text) for word in re.split(r"[\s./]+", span)}


def test_every_module_of_the_product_is_in_the_package_table():
    table = section("architecture.md", "## Packages and their rules")
    named = named_in(table)
    missing = []
    for path in product_modules():
        name = path.stem
        if name in BOILERPLATE:
            continue
        if path.parent.name == "renderings" and name.endswith("_rendering"):
            # One module a kind, named `<kind>_rendering.py` in the table.
            assert "`<kind>_rendering.py`" in table
            continue
        if name not in named:
            missing.append(str(path.relative_to(ROOT)))
    assert missing == []


def environment_reads(path: Path) -> set[str]:
    """Names read from the environment: config.env's readers, os.environ[...] and .get(...),
    os.getenv(...)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = node.args[0]
            reads_env = (
                name.startswith("env_")
                or name == "getenv"
                or (
                    name == "get"
                    and isinstance(func, ast.Attribute)
                    and isinstance(func.value, ast.Attribute)
                    and func.value.attr == "environ"
                )
            )
            if reads_env and isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.add(first.value)
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.ctx, ast.Load)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "environ"
            and isinstance(node.slice, ast.Constant)
        ):
            found.add(node.slice.value)
    return found


def test_every_setting_the_code_reads_is_in_the_operations_settings():
    code = [*product_modules(), ROOT / "gunicorn.conf.py"]
    read = set().union(*(environment_reads(path) for path in code))
    assert {"DATABASE_URL", "REDIS_URL", "DECISIONBOARD_VAR_DIR"} <= read  # the scan finds them
    documented = named_in(section("operations.md", "## Settings"))
    assert sorted(read - documented) == []


def test_the_package_table_names_every_package():
    table = section("architecture.md", "## Packages and their rules")
    for package in PACKAGES:
        assert f"`{package}" in table, package
