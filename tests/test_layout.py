"""The layout's rules, as docs/architecture.md ("Packages and their rules") states them: no
module (the tests and benchmarks too) reaching into another's private names, modules of a
readable size, and one place only telling the databases apart. bin/lint checks the import
contracts and the house style's lint and format."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("records", "alerts", "api", "dashboard", "workers", "ops", "sso", "config")
# The tests and benchmarks keep the rule on private names too.
ALL_CODE = (*PACKAGES, "tests", "bench")
# A module past this many lines holds more than one concern: split it by what it makes.
MOST_LINES = 600


def product_modules(packages: tuple[str, ...] = PACKAGES) -> list[Path]:
    return sorted(
        path
        for package in packages
        for path in (ROOT / package).rglob("*.py")
        if "migrations" not in path.parts and "node_modules" not in path.parts
    )


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_uses(path: Path) -> list[str]:
    """`from other import _name`, and `other._name` where `other` is a module of the product
    imported by name: what this module takes of another's privates."""
    tree = ast.parse(path.read_text(), str(path))
    me = module_name(path)
    modules: dict[str, str] = {}  # local name -> product module
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] not in ALL_CODE:
                continue
            for alias in node.names:
                if is_private(alias.name) and node.module != me:
                    found.append(f"{me}: from {node.module} import {alias.name}")
                full = f"{node.module}.{alias.name}"
                if (ROOT / Path(*full.split("."))).with_suffix(".py").exists():
                    modules[alias.asname or alias.name] = full
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in ALL_CODE and alias.asname:
                    modules[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and is_private(node.attr)
            and modules[node.value.id] != me
        ):
            found.append(f"{me}: {modules[node.value.id]}.{node.attr}")
    return found


def test_no_module_takes_another_modules_private_names():
    found = [use for path in product_modules(ALL_CODE) for use in private_uses(path)]
    assert found == []


def test_no_module_is_over_the_size_that_holds_one_concern():
    long = {
        str(path.relative_to(ROOT)): lines
        for path in product_modules()
        if (lines := len(path.read_text().splitlines())) > MOST_LINES
    }
    assert long == {}


# The one interface that tells the databases apart (records.store.backends); migrations keep
# their own branches, for they run frozen and import no live code.
BACKENDS = ROOT / "records" / "store" / "backends"
VENDORS = {"postgresql", "sqlite"}


def vendor_branches(path: Path) -> list[str]:
    """Where a module looks at a connection's vendor (`x.vendor`) or keys a table by one (a
    dict with a "postgresql" or "sqlite" key): a difference its backend should answer."""
    tree = ast.parse(path.read_text(), str(path))
    where = path.relative_to(ROOT) if ROOT in path.parents else path
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "vendor":
            found.append(f"{where}:{node.lineno} .vendor")
        elif isinstance(node, ast.Dict) and any(
            isinstance(key, ast.Constant) and key.value in VENDORS for key in node.keys
        ):
            found.append(f"{where}:{node.lineno} a table by vendor")
    return found


def test_only_the_store_backends_tell_the_databases_apart():
    found = [
        branch
        for path in product_modules()
        if BACKENDS not in path.parents
        for branch in vendor_branches(path)
    ]
    assert found == []


def test_the_vendor_check_finds_a_branch(tmp_path):
    module = tmp_path / "branchy.py"
    module.write_text(
        "from django.db import connection\n"
        "BATCH = {'postgresql': 10, 'sqlite': 1}\n"
        "if connection.vendor == 'sqlite':\n"
        "    pass\n"
    )
    assert vendor_branches(module) == [f"{module}:2 a table by vendor", f"{module}:3 .vendor"]
