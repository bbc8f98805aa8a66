"""No import cycle among forkpoint's modules, deferred imports included, and every module imports on its own in a
fresh interpreter.

The load-time graph holds the imports a module runs when it is loaded (module level, outside ``if
TYPE_CHECKING:``); the full graph adds the imports inside functions: a cycle through a deferred import cannot
break loading, but it is still two modules that need each other (issue 30), so neither graph may have one. Only
``if TYPE_CHECKING:`` imports are left out. A package's ``__init__`` that a submodule's import loads first is the
package pattern, not an edge. Registries that name modules as ``"module:attr"`` strings (agents, protocols) are
not imports.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted((SRC / "forkpoint").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__main__":
            continue
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _load_time_imports(name: str, path: Path, modules: dict[str, Path], *, lazy: bool = False) -> set[str]:
    """What loading ``name`` imports (``lazy``: also the imports inside its functions)."""
    tree = ast.parse(path.read_text("utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for child in list(ast.walk(node)) if lazy or isinstance(node, ast.Try | ast.If) else [node]:
            if isinstance(child, ast.Import):
                targets.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")
                    base = ".".join([*parts[: len(parts) - child.level + 1], base]).strip(".")
                for alias in child.names:  # `from package import submodule` imports the submodule
                    targets.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {t for t in targets if t in modules and t != name and not name.startswith(f"{t}.")}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_load_time_import_cycle() -> None:
    modules = _modules()
    graph = {name: _load_time_imports(name, path, modules) for name, path in modules.items()}
    assert graph["forkpoint.runtimes"] >= {"forkpoint.runtimes.base"}  # the graph sees real edges
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_no_import_cycle_even_through_deferred_imports() -> None:
    """Every import counts, inside functions too (e.g. the runtimes' installers use the cache, only the package's
    entry points dispatch to them; the adapter kit's continuation and the run request share the protocol registry
    instead of importing each other)."""
    modules = _modules()
    graph = {name: _load_time_imports(name, path, modules, lazy=True) for name, path in modules.items()}
    assert graph["forkpoint.runtimes"] >= {"forkpoint.runtimes.npm", "forkpoint.runtimes.python"}  # deferred edges
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])
    assert "forkpoint.core.protocols" in graph["forkpoint.adapters.kit.continuation"] & graph["forkpoint.run.request"]


def test_type_checking_imports_are_not_edges(tmp_path: Path) -> None:
    """An import under ``if TYPE_CHECKING:`` is for annotations only; one inside a function is a real edge."""
    (tmp_path / "m.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import a\n"
                                   "def f():\n    import b\n", "utf-8")
    modules = {"a": tmp_path / "a.py", "b": tmp_path / "b.py", "m": tmp_path / "m.py"}
    assert _load_time_imports("m", modules["m"], modules, lazy=True) == {"b"}
    assert _load_time_imports("m", modules["m"], modules) == set()


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_runtime_and_spec_modules_import_first_in_a_fresh_interpreter() -> None:
    """Each module the registry and the runtimes are made of loads on its own (no order-dependent cycle)."""
    names = [name for name in _modules() if name.startswith(("forkpoint.runtimes", "forkpoint.adapters.spec",
                                                              "forkpoint.run.documents", "forkpoint.run.engine",
                                                              "forkpoint.cli", "forkpoint.adapters.detect"))
             or name.endswith(".spec")]
    code = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
    for name in names:
        done = subprocess.run([sys.executable, "-c", code, name], capture_output=True, text=True, timeout=60,
                              check=False, env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
        assert done.returncode == 0, (name, done.stderr[-2000:])
