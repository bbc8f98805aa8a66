#!/usr/bin/env python3
"""Record the SWE-agent linting-edit fixtures with SWE-agent's REAL tool-bundle scripts (issue 29).

    python scripts/record_swe_agent_fixtures.py --swe-agent <SWE-agent checkout or its git dir> [--commit REV]

SWE-agent itself is not installable here (not on PyPI), but its tool bundles are plain scripts: this runs the
``tools/`` folder of a SWE-agent source tree (``git archive`` of ``--commit``, default 3ea751c, the commit the public
recordings in ../shared/wild-dev come from) the way SWE-agent's container does — each bundle's ``bin/`` on
``PATH``, ``windowed/lib`` and ``registry/lib`` on ``PYTHONPATH``, the registry file in ``SWE_AGENT_ENV_FILE``
seeded by the bundles' install.sh (their ``pip install flake8`` replaced by forkpoint's pinned flake8, the one
replay uses) — in ``bash`` in the workspace at the recorded path, and keeps what each action printed (stdout and
stderr merged, SWE-agent's retry token removed as ``DefaultAgent.handle_action`` does). The ``.traj`` around those
observations is built by tests/fixtures/swe_agent/make_fixtures.py's ``build`` (the 1.1.0 document layout).

Scenarios (tests/fixtures/swe_agent/1.1.0/<name>/):
- ``windowed_edit``: windowed + windowed_edit_replace (WINDOW=5): edit with several matches in the window, a clean
  edit, text found only outside the window, text found nowhere, an edit introducing a syntax error (reverted with
  flake8's report), identical strings, insert at the end, insert introducing an undefined name (reverted),
  replace-all, and a shell step showing the file.
- ``windowed_edit_linting``: windowed + windowed_edit_linting: ``edit <start>:<end>`` bodies as function calling
  writes them (``end_of_edit``; SWE-agent's heredoc guard), a clean edit, a syntax error (reverted), a line range
  past the end of the file, a malformed range, then the file.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
FIXTURES = ROOT / "tests" / "fixtures" / "swe_agent"
RETRY = "###SWE-AGENT-RETRY-WITH-OUTPUT###"
DEFAULT_COMMIT = "3ea751c087f32b16e039a2233dd6eefecef325d5"
CALC = ("def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n"
        "    return a * b\n")

_spec = importlib.util.spec_from_file_location("make_fixtures", FIXTURES / "make_fixtures.py")
assert _spec is not None and _spec.loader is not None
make_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_fixtures)
Json = dict[str, Any]


def tools_tree(source: Path, commit: str, into: Path) -> Path:
    """``tools/`` of the SWE-agent source at ``commit`` (a git dir or a checkout) extracted into ``into``."""
    git_dir = source if (source / "HEAD").is_file() and not (source / ".git").exists() else source / ".git"
    archive = subprocess.run(["git", f"--git-dir={git_dir}", "archive", "--format=tar", commit, "tools"],
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    for script in (into / "tools").glob("*/bin/*"):
        script.chmod(0o755)
    return into / "tools"


class RealBundles:
    """A SWE-agent-like shell environment for the bundle scripts: one registry file, the bundles' bins on PATH."""

    def __init__(self, tools: Path, bundles: tuple[str, ...], workspace: Path, env_variables: dict[str, str],
                 scratch: Path) -> None:
        from forkpoint.runtimes.flake8 import ensure_flake8

        self.workspace = workspace
        self.registry = scratch / "swe-agent-env.json"
        self.registry.write_text("{}")
        shim = scratch / "flake8-bin"
        shim.mkdir()
        (shim / "flake8").symlink_to(ensure_flake8() / "bin" / "flake8")
        for name in ("python", "python3"):  # the container's Python (the scripts' `#!/usr/bin/env python3`)
            (shim / name).symlink_to(sys.executable)
        bins = [str(tools / name / "bin") for name in ("registry", *bundles)]
        self.env = {"PATH": ":".join([*bins, str(shim), "/usr/local/bin", "/usr/bin", "/bin"]),
                    "PYTHONPATH": f"{tools / 'windowed' / 'lib'}:{tools / 'registry' / 'lib'}",
                    "SWE_AGENT_ENV_FILE": str(self.registry), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
                    "HOME": str(scratch), "ROOT": str(workspace), **env_variables}
        for name in bundles:  # the install scripts, without their `pip install flake8`
            install = tools / name / "install.sh"
            if install.is_file():
                script = scratch / f"install-{name}.sh"
                script.write_text("\n".join(line for line in install.read_text().splitlines()
                                            if "pip install" not in line) + "\n")
                subprocess.run(["bash", "-c", f"cd {tools / name} && source {script}"], env=self.env, check=True,
                               stdout=subprocess.DEVNULL)

    def run(self, action: str) -> Json:
        from forkpoint.adapters.swe_agent.tools import guard_multiline_input

        guarded = guard_multiline_input(action, {"edit": "end_of_edit"}) if "\nend_of_edit" in action else action
        done = subprocess.run(["bash", "-c", guarded.strip()], cwd=self.workspace, env=self.env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, check=False)
        current = json.loads(self.registry.read_text()).get("CURRENT_FILE") or "n/a"
        return {"observation": done.stdout.decode().replace(RETRY, ""),
                "state": {"open_file": current, "working_dir": str(self.workspace)}}


def record(tools: Path, scenario: str, bundles: tuple[str, ...], env_variables: dict[str, str],
           steps: list[tuple[str, str, Json, str]], task: str) -> Path:
    cwd = Path(f"{make_fixtures.REC_ROOT}/{scenario}")
    files = {"pkg/__init__.py": "", "pkg/calc.py": CALC}
    if cwd.exists():
        shutil.rmtree(cwd)
    for relative, text in files.items():
        (cwd / relative).parent.mkdir(parents=True, exist_ok=True)
        (cwd / relative).write_text(text)
    recorded = []
    with tempfile.TemporaryDirectory(prefix="swe-agent-bundles-") as scratch:
        shell = RealBundles(tools, bundles, cwd, env_variables, Path(scratch))
        for thought, tool, arguments, action in steps:
            ran = shell.run(action)
            recorded.append({"thought": thought, "action": action, "tool": tool, "arguments": arguments, **ran})
            print(f"--- {action!r}\n{ran['observation']}", file=sys.stderr)
    shutil.rmtree(cwd)
    document = make_fixtures.build(scenario, task, recorded, function_calling=True,
                                   templates={"next_step_template": make_fixtures.NEXT_STEP,
                                              "next_step_no_output_template": make_fixtures.NO_OUTPUT},
                                   exit_status="exit_cost", bundles=("registry", *bundles),
                                   env_variables={**make_fixtures.ENV_VARIABLES, **env_variables})
    target = FIXTURES / make_fixtures.VERSION / scenario
    if target.exists():
        shutil.rmtree(target)
    (target / "workspace-initial").mkdir(parents=True)
    for relative, text in files.items():
        (target / "workspace-initial" / relative).parent.mkdir(parents=True, exist_ok=True)
        (target / "workspace-initial" / relative).write_text(text)
    (target / f"toy__{scenario}-1.traj").write_text(json.dumps(document, indent=2))
    meta = {"agent": "swe-agent", "version": make_fixtures.VERSION, "scenario": scenario, "constructed": False,
            "observations": "SWE-agent's real tool-bundle scripts", "cwd": str(cwd),
            "generator": "scripts/record_swe_agent_fixtures.py"}
    (target / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return target


def step(thought: str, tool: str, arguments: Json, action: str) -> tuple[str, str, Json, str]:
    return thought, tool, arguments, action


def replace_steps() -> list[tuple[str, str, Json, str]]:
    return [
        step("Open it.", "open", {"path": "pkg/calc.py"}, 'open "pkg/calc.py"'),
        step("Rename.", "edit", {"search": "(a, b)", "replace": "(x, y)"}, "edit '(a, b)' '(x, y)'"),
        step("More context.", "edit", {"search": "def add(a, b):\n    return a - b",
                                       "replace": "def add(a, b):\n    return a + b"},
             "edit 'def add(a, b):\n    return a - b' 'def add(a, b):\n    return a + b'"),
        step("Below the window.", "edit", {"search": "return a * b", "replace": "return a * b * 1"},
             "edit 'return a * b' 'return a * b * 1'"),
        step("Nowhere.", "edit", {"search": "return a / b", "replace": "return a // b"},
             "edit 'return a / b' 'return a // b'"),
        step("Break it.", "edit", {"search": "def add(a, b):", "replace": "def add(a, b)"},
             "edit 'def add(a, b):' 'def add(a, b)'"),
        step("Same.", "edit", {"search": "add", "replace": "add"}, "edit add add"),
        step("Append.", "insert", {"text": "\n\ndef div(a, b):\n    return a / b"},
             "insert '\n\ndef div(a, b):\n    return a / b'"),
        step("Undefined.", "insert", {"text": "    total = missing_name", "line": 1},
             "insert '    total = missing_name' 1"),
        step("All of them.", "edit", {"search": "a - b", "replace": "b - a", "replace-all": True},
             "edit 'a - b' 'b - a' True"),
        ("Look.", "bash", {"command": "cat pkg/calc.py"}, "cat pkg/calc.py"),
    ]


def linting_steps() -> list[tuple[str, str, Json, str]]:
    def body(start: int, end: int, text: str) -> tuple[Json, str]:
        return ({"start_line": start, "end_line": end, "replacement_text": text},
                f"edit {start}:{end}\n{text}\nend_of_edit")

    clean = body(1, 2, "def add(a, b):\n    return a + b")
    broken = body(5, 6, "def sub(a, b)\n    return a - b")
    past = body(40, 50, "\n\ndef neg(a):\n    return -a")
    return [
        step("Open it.", "open", {"path": "pkg/calc.py"}, 'open "pkg/calc.py"'),
        step("Fix add.", "edit", clean[0], clean[1]),
        step("Break sub.", "edit", broken[0], broken[1]),
        step("Past the end.", "edit", past[0], past[1]),
        step("Bad range.", "edit", {"start_line": "a", "end_line": "b", "replacement_text": "x"},
             "edit a:b\nx\nend_of_edit"),
        ("Look.", "bash", {"command": "cat pkg/calc.py"}, "cat pkg/calc.py"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--swe-agent", type=Path, required=True, help="SWE-agent checkout or git dir")
    parser.add_argument("--commit", default=DEFAULT_COMMIT)
    args = parser.parse_args()
    os.umask(0o022)
    with tempfile.TemporaryDirectory(prefix="swe-agent-tools-") as temp:
        tools = tools_tree(args.swe_agent, args.commit, Path(temp))
        window = {"WINDOW": "5", "OVERLAP": "2"}
        print(record(tools, "windowed_edit", ("windowed", "windowed_edit_replace"), window, replace_steps(),
                     "Fix add() in pkg/calc.py."))
        print(record(tools, "windowed_edit_linting", ("windowed", "windowed_edit_linting"), window,
                     linting_steps(), "Fix add() in pkg/calc.py."))


if __name__ == "__main__":
    main()
