"""The layout's rules, as docs/architecture.md ("Packages and their rules") states them: the
import contracts, no module reaching into another's private names, modules of a readable size,
and the house style's lint and format."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("records", "alerts", "api", "dashboard", "workers", "ops", "config")
# A module past this many lines holds more than one concern: split it by what it makes.
MOST_LINES = 600


def product_modules() -> list[Path]:
    return sorted(
        path
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "migrations" not in path.parts
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
            if node.module.split(".")[0] not in PACKAGES:
                continue
            for alias in node.names:
                if is_private(alias.name) and node.module != me:
                    found.append(f"{me}: from {node.module} import {alias.name}")
                full = f"{node.module}.{alias.name}"
                if (ROOT / Path(*full.split("."))).with_suffix(".py").exists():
                    modules[alias.asname or alias.name] = full
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PACKAGES and alias.asname:
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
    found = [use for path in product_modules() for use in private_uses(path)]
    assert found == []


def test_no_module_is_over_the_size_that_holds_one_concern():
    long = {
        str(path.relative_to(ROOT)): lines
        for path in product_modules()
        if (lines := len(path.read_text().splitlines())) > MOST_LINES
    }
    assert long == {}


def run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_the_import_contracts_hold():
    """tool.importlinter in pyproject.toml: the domain below the web, the workers and the
    wiring; the catch-up reached only through its package; no cycles within a package."""
    # Run from the checkout itself (python -c puts it first on sys.path), not from wherever the
    # installed entry point would find the packages.
    lint = "import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c())"
    result = run(sys.executable, "-c", lint, "--no-cache")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


@pytest.mark.parametrize("check", [("check",), ("format", "--check")], ids=["lint", "format"])
def test_ruff_finds_nothing_to_change(check):
    result = run(sys.executable, "-m", "ruff", *check, ".")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
