"""forkpoint's re-implementation of SWE-agent 1.1.0's bundle tools, run as the script the replay shell runs.

Expected texts are derived by hand from SWE-agent's tools (edit_anthropic/bin/str_replace_editor,
review_on_submit_m/bin/submit, registry/lib/registry.py); the editor fixture covers the common messages, these
tests the rarer paths (window expansion, tab expansion, review stages, argument errors).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from forkpoint.adapters.swe_agent import bundle_tools

SCRIPT = bundle_tools.__file__


def tool(tmp_path: Path, *argv: str, registry: dict[str, object] | None = None,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    registry_file = tmp_path / "registry.json"
    if registry is not None:
        registry_file.write_text(json.dumps(registry))
    environment = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8", "COLUMNS": "80", "HOME": str(tmp_path),
                   **(env or {})}
    return subprocess.run([sys.executable, "-I", SCRIPT, str(registry_file), str(tmp_path / "model.patch"), *argv],
                          cwd=tmp_path, env=environment, capture_output=True, text=True, check=False, timeout=60)


def test_view_range_expands_to_definitions_with_max_window_expansion(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("import os\n\n\ndef f():\n    x = 1\n    return x\n\nclass C:\n    pass\n")
    done = tool(tmp_path, "str_replace_editor", "view", str(source), "--view_range", "5", "6",
                registry={"MAX_WINDOW_EXPANSION_VIEW": 5})
    assert done.stdout == (f"Here's the result of running `cat -n` on {source}:\n     4\tdef f():\n     5\t    x = 1\n"
                           "     6\t    return x\n     7\t\n\n")
    # the registry is read first, the environment only when the key is missing
    done = tool(tmp_path, "str_replace_editor", "view", str(source), "--view_range", "5", "6", registry={},
                env={"MAX_WINDOW_EXPANSION_VIEW": "5"})
    assert done.stdout.splitlines()[1] == "     4\tdef f():"
    done = tool(tmp_path, "str_replace_editor", "view", str(source), "--view_range", "5", "6",
                registry={"MAX_WINDOW_EXPANSION_VIEW": 0}, env={"MAX_WINDOW_EXPANSION_VIEW": "5"})
    assert done.stdout.splitlines()[1] == "     5\t    x = 1"


def test_edits_expand_every_tab_of_the_file(tmp_path: Path) -> None:
    table = tmp_path / "t.txt"
    table.write_text("a\tb\nc\n")
    done = tool(tmp_path, "str_replace_editor", "str_replace", str(table), "--old_str", "c", "--new_str", "d",
                registry={})
    assert table.read_text() == "a       b\nd\n"
    # the snippet ends at min(line + 4, len(splitlines())): the empty last "line" is not shown
    assert done.stdout == (f"The file {table} has been edited. Here's the result of running `cat -n` on a snippet of "
                           f"{table}:\n     1\ta       b\n     2\td\nReview the changes and make sure they "
                           "are as expected. Edit the file again if necessary.\n")
    assert done.returncode == 0


def test_argument_and_range_errors(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    target.write_text("x\n")
    done = tool(tmp_path, "str_replace_editor", "view", registry={})
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.endswith("str_replace_editor: error: the following arguments are required: path\n")
    assert done.stderr.startswith("usage: str_replace_editor [-h] [--file_text FILE_TEXT]\n")
    done = tool(tmp_path, "str_replace_editor", "insert", str(target), "--insert_line", "5", "--new_str", "y")
    assert (done.returncode, done.stdout) == (17, "Invalid `insert_line` parameter: 5. It should be within the range "
                                                  "of lines of the file: [0, 2]\n")
    done = tool(tmp_path, "str_replace_editor", "view", str(target), "--view_range", "0", "1")
    assert done.stdout == ("Invalid `view_range`: [0, 1]. Its first element `0` should be within the range of lines "
                           "of the file: [1, 2]\n")
    done = tool(tmp_path, "str_replace_editor", "delete", str(target))
    assert (done.returncode, done.stdout) == (5, 'Unrecognized command delete. The allowed commands for the '
                                                 'str_replace_editor tool are: "view", "create", "str_replace", '
                                                 '"insert", "undo_edit"\n')
    done = tool(tmp_path, "str_replace_editor", "str_replace", str(target), "--old_str", "x", "--new_str", "x")
    assert (done.returncode, done.stdout) == (161, "No replacement was performed, old_str `x` is the same as "
                                                   "new_str `x`.\n")


def test_submit_walks_the_review_stages_then_submits(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.txt").write_text("one\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main"]
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "init"]):
        subprocess.run([*git, *command], cwd=repo, check=True, capture_output=True, env={**os.environ,
                                                                                      "HOME": str(tmp_path)})
    (repo / "a.txt").write_text("two\n")
    patch = ("diff --git a/a.txt b/a.txt\nindex 5626abf..f719efd 100644\n--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n"
             "-one\n+two\n")
    env = {"ROOT": str(repo), "PROBLEM_STATEMENT": "the task"}
    registry: dict[str, object] = {"SUBMIT_REVIEW_MESSAGES": ["check {{diff}} for {{problem_statement}}"]}
    first = tool(tmp_path, "submit", registry=registry, env=env)
    assert (first.returncode, first.stdout) == (0, f"check {patch} for the task\n")
    assert json.loads((tmp_path / "registry.json").read_text())["SUBMIT_STAGE"] == 1
    second = tool(tmp_path, "submit", env=env)
    assert second.stdout == f"<<SWE_AGENT_SUBMISSION>>\n{patch}\n<<SWE_AGENT_SUBMISSION>>\n"
    forced = tool(tmp_path, "submit", "-f", registry=registry, env=env)
    assert forced.stdout.startswith("<<SWE_AGENT_SUBMISSION>>\n")


# -- the linting edit bundles: expected texts measured on SWE-agent's real scripts (tools/ at 3ea751c, flake8 7.2.0) --
LINTED = "def f(a):\n    return a - 1\n\n\ndef g(a):\n    return a\n\n\ndef h():\n    return undefined_x\n"
_RULE = "-" * 48
_REVERTED = ("Your changes have NOT been applied. Please fix your edit command and try again.\nDO NOT re-run the same "
             "failed edit command. Running it again will lead to the same error.\n")


def lint_tool(tmp_path: Path, *argv: str, stdin: str | None = None) -> tuple[subprocess.CompletedProcess[str], str]:
    """Run an edit tool on ``a.py`` (LINTED, already holding an F821 at line 10) open in a 5-line window."""
    from forkpoint.runtimes.flake8 import ensure_flake8

    shim = tmp_path / "bin"
    shim.mkdir(exist_ok=True)
    if not (shim / "flake8").exists():
        (shim / "flake8").symlink_to(ensure_flake8() / "bin" / "flake8")
    source = tmp_path / "a.py"
    source.write_text(LINTED)
    (tmp_path / "registry.json").write_text(json.dumps({"WINDOW": "5", "OVERLAP": "2", "FIRST_LINE": "0",
                                                        "CURRENT_FILE": str(source)}))
    environment = {"PATH": f"{shim}:{os.environ['PATH']}", "LANG": "C.UTF-8", "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-I", SCRIPT, str(tmp_path / "registry.json"), str(tmp_path / "model.patch"),
                           *argv], cwd=tmp_path, env=environment, input=stdin or "", capture_output=True, text=True,
                          check=False, timeout=120)
    return done, source.read_text()


def window(path: Path, total: int, lines: str, below: int = 0, above: int = 0) -> str:
    return (f"[File: {path} ({total} lines total)]\n" + (f"({above} more lines above)\n" if above else "") + lines
            + (f"\n({below} more lines below)" if below else ""))


def test_edit_ignores_lint_errors_the_file_already_had(tmp_path: Path) -> None:
    done, text = lint_tool(tmp_path, "edit_replace", "a - 1", "a + 1")
    assert (done.returncode, text) == (0, LINTED.replace("a - 1", "a + 1"))
    assert done.stdout == (
        "Text replaced. Please review the changes and make sure they are correct:\n\n1. The edited file is correctly "
        "indented\n2. The edited file does not contain duplicate lines\n3. The edit does not break existing "
        "functionality\n\nEdit the file again if necessary.\n"
        + window(tmp_path / "a.py", 10, "1:def f(a):\n2:    return a + 1\n3:\n4:\n5:def g(a):", below=5) + "\n")


def test_replace_all_reports_every_lint_error_and_reverts(tmp_path: Path) -> None:
    done, text = lint_tool(tmp_path, "edit_replace", "return a\n", "return a + 0\n", "yes")
    assert (done.returncode, text) == (4, LINTED)
    path = tmp_path / "a.py"
    assert done.stdout == (
        "Your proposed edit has introduced new syntax error(s). Please read this error message carefully and then "
        "retry editing the file.\n\nERRORS:\n\n- F821 undefined name 'undefined_x'\n\nThis is how your edit would have "
        f"looked if applied\n{_RULE}\n"
        + window(path, 10, "6:    return a + 0\n7:\n8:\n9:def h():\n10:    return undefined_x", above=5)
        + f"\n{_RULE}\n\nThis is the original code before your edit\n{_RULE}\n"
        + window(path, 10, "1:def f(a):\n2:    return a - 1\n3:\n4:\n5:def g(a):", below=5)
        + f"\n{_RULE}\n\n{_REVERTED}\n###SWE-AGENT-RETRY-WITH-OUTPUT###\n")


def test_line_range_edit_reads_its_body_up_to_end_of_edit_and_lints_indentation(tmp_path: Path) -> None:
    done, text = lint_tool(tmp_path, "edit_lines", "5:6", stdin="def g(a):\n  return a\nend_of_edit\nignored\n")
    assert (done.returncode, text) == (1, LINTED)
    original = window(tmp_path / "a.py", 10, "1:def f(a):\n2:    return a - 1\n3:\n4:\n5:def g(a):", below=5)
    assert done.stdout == (
        "Your proposed edit has introduced new syntax error(s). Please read this error message carefully and then "
        "retry editing the file.\n\nERRORS:\n- E111 indentation is not a multiple of 4\n\nThis is how your edit would "
        f"have looked if applied\n{_RULE}\n{original}\n{_RULE}\n\nThis is the original code before your edit\n"
        f"{_RULE}\n{original}\n{_RULE}\n\n{_REVERTED}")


def test_a_reversed_line_range_inserts_and_miscounts_old_errors_like_swe_agent(tmp_path: Path) -> None:
    """``edit 3:1``: Python's slice assignment inserts the text at line 3, and the pre-existing F821 is not matched
    after the shift (SWE-agent computes a negative window), so the edit is refused with it."""
    done, text = lint_tool(tmp_path, "edit_lines", "3:1", "x = 1")
    assert (done.returncode, text) == (1, LINTED)
    assert "ERRORS:\n- F821 undefined name 'undefined_x'\n\n" in done.stdout
    assert window(tmp_path / "a.py", 11, "1:def f(a):\n2:    return a - 1\n3:x = 1\n4:\n5:", below=6) in done.stdout


def test_guard_multiline_input_makes_the_body_a_heredoc() -> None:
    from forkpoint.adapters.swe_agent.tools import guard_multiline_input

    ends = {"edit": "end_of_edit"}
    already = "edit 1:2 << 'end_of_edit'\nx = 1\nend_of_edit"
    assert guard_multiline_input("edit 1:2\nx = 1\nend_of_edit", ends) == already
    assert guard_multiline_input(already, ends) == already
    assert guard_multiline_input("ls -la", ends) == "ls -la"


def legacy_tool(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``--legacy``: the late-2024 scripts of SWE-agent's 1.0 development trajectories."""
    from forkpoint.runtimes.flake8 import ensure_flake8

    shim = tmp_path / "bin"
    shim.mkdir(exist_ok=True)
    if not (shim / "flake8").exists():
        (shim / "flake8").symlink_to(ensure_flake8() / "bin" / "flake8")
    registry = tmp_path / "registry.json"
    if not registry.exists():
        registry.write_text(json.dumps({"WINDOW": "5", "OVERLAP": "2", "FIRST_LINE": "0", "CURRENT_FILE": ""}))
    environment = {"PATH": f"{shim}:{os.environ['PATH']}", "LANG": "C.UTF-8", "HOME": str(tmp_path)}
    return subprocess.run([sys.executable, "-I", SCRIPT, "--legacy", str(registry), str(tmp_path / "model.patch"),
                           *argv], cwd=tmp_path, env=environment, capture_output=True, text=True, check=False,
                          timeout=120)


def test_legacy_create_writes_a_line_and_insert_counts_lines_from_one(tmp_path: Path) -> None:
    """Texts measured on SWE-agent a47c0088's tools/defaults and tools/edit_replace (the public marshmallow
    demonstration shows the same ``(1 lines total)`` and the empty first line after ``insert``)."""
    path = tmp_path / "r.py"
    assert legacy_tool(tmp_path, "create", "r.py").stdout == "[File: r.py (1 lines total)]\n1:\n"
    done = legacy_tool(tmp_path, "insert", "import os\nprint(os)")
    assert (done.returncode, done.stdout) == (0, f"[File: {path} (3 lines total)]\n1:\n2:import os\n3:print(os)\n")
    done = legacy_tool(tmp_path, "insert", "x = undefined_y", "2")
    assert done.returncode == 4
    assert done.stdout == (
        " Your proposed edit has introduced new syntax error(s). Please read this error message carefully and then "
        "retry editing the file.\n\nERRORS:\n\n- F821 undefined name 'undefined_y'\nThis is how your edit would have "
        f"looked if applied\n{_RULE}\n[File: {path} (4 lines total)]\n1:\n2:x = undefined_y\n3:import os\n4:print(os)\n"
        f"{_RULE}\n\nThis is the original code before your edit\n{_RULE}\n[File: {path} (3 lines total)]\n1:\n"
        f"2:import os\n3:print(os)\n{_RULE}\n\n{_REVERTED}\n")
    done = legacy_tool(tmp_path, "insert", "y = 1", "1")
    assert done.stdout == f"[File: {path} (4 lines total)]\n1:y = 1\n2:\n3:import os\n4:print(os)\n"
    assert path.read_text() == "y = 1\n\nimport os\nprint(os)"


def test_legacy_edit_messages(tmp_path: Path) -> None:
    source = tmp_path / "a.py"
    source.write_text(LINTED)
    (tmp_path / "registry.json").write_text(json.dumps({"WINDOW": "5", "OVERLAP": "2", "FIRST_LINE": "0",
                                                        "CURRENT_FILE": str(source)}))
    done = legacy_tool(tmp_path, "edit_replace", "nothing", "x")
    assert (done.returncode, done.stdout) == (3, (
        "Text 'nothing' not found in displayed lines.\nNote: By default, we only replace the first occurrence in the "
        "lines that are currently visible in the editor.\nIf you want to replace all occurrences in and outside of "
        "the visible lines, use the `--replace-all` flag.\n\n"))
    done = legacy_tool(tmp_path, "edit_replace", "def f(a):", "def f(a)")
    original = window(source, 10, "1:def f(a):\n2:    return a - 1\n3:\n4:\n5:def g(a):", below=5)
    assert (done.returncode, source.read_text()) == (4, LINTED)
    assert done.stdout == (
        "\nYour proposed edit has introduced new syntax error(s). Please read this error message carefully and then "
        "retry editing the file.\n\nERRORS:\n\n- E999 SyntaxError: expected ':'\nThis is how your edit would have "
        f"looked if applied\n{_RULE}\n{original.replace('1:def f(a):', '1:def f(a)')}\n{_RULE}\n\nThis is the "
        f"original code before your edit\n{_RULE}\n{original}\n{_RULE}\n\n{_REVERTED}\n")
    # the late-2024 window is one line off, so the F821 the file already had counts as new (the real scripts agree)
    done = legacy_tool(tmp_path, "edit_replace", "a - 1", "a + 1")
    assert (done.returncode, source.read_text()) == (4, LINTED)
    assert "ERRORS:\n\n- F821 undefined name 'undefined_x'\nThis is how" in done.stdout
    source.write_text(LINTED.replace("undefined_x", "None"))
    done = legacy_tool(tmp_path, "edit_replace", "a - 1", "a + 1")
    assert done.stdout.startswith("Text replaced. Please review the changes and make sure they are correct\n"
                                  "(correct indentation, no duplicate lines, etc). Edit the file again if necessary.\n")


def test_guard_multiline_input_is_linear_on_a_hostile_action() -> None:
    """A recorded action of 100,000 ``edit`` lines with no end marker after them: the pattern's lazy scan from every
    such line to the end would be quadratic (hours); only the text up to the last marker is searched."""
    import time

    from forkpoint.adapters.swe_agent.tools import guard_multiline_input

    tail = "edit 1:2\n" * 100_000
    guarded_head = "edit 1:2 << 'end_of_edit'\nx\nend_of_edit\n"
    for action, head in ((tail, ""), ("edit 1:2\nx\nend_of_edit\n" + tail, guarded_head)):
        started = time.monotonic()
        guarded = guard_multiline_input(action, {"edit": "end_of_edit"})
        assert time.monotonic() - started < 2.0
        assert guarded.startswith(head) and guarded.endswith(tail)  # SWE-agent's join adds one newline in between
