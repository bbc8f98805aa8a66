"""Adapter folders stay independent: no adapter imports another one's folder, and shared types have one home.

Helpers two adapters need live outside ``forkpoint/adapters/<agent>/`` (``adapters.kit.shell``,
``adapters.kit.jsondoc``,
``forkpoint.export.chat``...); the generic modules of the adapters package itself are allowed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import forkpoint

SRC = Path(forkpoint.__file__).parent
ADAPTERS = SRC / "adapters"
GENERIC = frozenset({"base", "detect", "kit", "source", "spec"})  # shared by every agent folder


def _agents() -> list[str]:
    return sorted(path.name for path in ADAPTERS.iterdir()
                  if (path / "__init__.py").is_file() and path.name not in GENERIC)


def _imported(tree: ast.AST, package: str) -> list[tuple[int, str]]:
    """(line, dotted name) of every import, relative ones resolved against ``package``; ``from X import y`` also
    yields ``X.y`` (``y`` may be a module)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def _foreign_imports(agent: str) -> list[str]:
    others = set(_agents()) - {agent}
    problems = []
    for path in sorted((ADAPTERS / agent).rglob("*.py")):
        package = "forkpoint.adapters." + ".".join(path.relative_to(ADAPTERS).parent.parts)
        for line, name in _imported(ast.parse(path.read_text("utf-8")), package):
            parts = name.split(".")
            if parts[:2] == ["forkpoint", "adapters"] and len(parts) > 2 and parts[2] in others:
                problems.append(f"{path.relative_to(SRC)}:{line} imports {name}")
    return problems


def test_there_are_adapter_folders_to_check() -> None:
    assert {"claude_code", "codex", "openhands", "swe_agent", "mini_swe_agent"} <= set(_agents())
    assert not set(_agents()) & GENERIC
    assert (ADAPTERS / "kit" / "__init__.py").is_file()  # the kit is a folder, and not an agent's


def test_no_adapter_imports_another_adapters_folder() -> None:
    problems = [problem for agent in _agents() for problem in _foreign_imports(agent)]
    assert problems == []


def test_the_check_sees_absolute_relative_and_package_imports() -> None:
    source = (
        "from forkpoint.adapters.codex.tool_exec import run_command\n"
        "from ..codex import tool_patch\n"
        "from forkpoint.adapters import codex\n"
        "import forkpoint.adapters.codex.parse\n"
        "from forkpoint.adapters.base import Adapter\n"
    )
    names = [name for _, name in _imported(ast.parse(source), "forkpoint.adapters.swe_agent")]
    foreign = [name for name in names if name.split(".")[:3] == ["forkpoint", "adapters", "codex"]]
    assert foreign == [
        "forkpoint.adapters.codex.tool_exec",
        "forkpoint.adapters.codex.tool_exec.run_command",
        "forkpoint.adapters.codex",
        "forkpoint.adapters.codex.tool_patch",
        "forkpoint.adapters.codex",
        "forkpoint.adapters.codex.parse",
    ]
    assert "forkpoint.adapters.base" in names


def test_json_object_has_one_definition() -> None:
    definitions = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.parse(path.read_text("utf-8")).body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, ast.AnnAssign) else []
            if any(isinstance(target, ast.Name) and target.id == "JsonObject" for target in targets):
                definitions.append(str(path.relative_to(SRC)))
    assert definitions == ["core/model.py"]
