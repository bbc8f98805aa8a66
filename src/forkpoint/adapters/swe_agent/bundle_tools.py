"""SWE-agent's bundle tools, re-implemented: ``str_replace_editor`` (edit_anthropic), ``submit``
(review_on_submit_m), the windowed viewer (``windowed``, formerly ``defaults``: open, goto, scroll_up,
scroll_down, create), ``search`` (find_file, search_dir, search_file) and the linting edit bundles
(``windowed_edit_replace``: edit, insert; ``windowed_edit_linting``: edit <start>:<end>), run as a script inside the
replayed shell like SWE-agent runs its bundle scripts.

    python -I bundle_tools.py [--legacy] <registry file> <patch file> <tool> [tool arguments...]

A STANDALONE stdlib-only script (it runs in the sandbox with ``-I``, without forkpoint importable; the edit tools
call the ``flake8`` on ``PATH``). Written from the public facts of SWE-agent (tools/edit_anthropic/bin/
str_replace_editor, tools/review_on_submit_m/bin/submit, tools/registry/lib/registry.py, tools/windowed/lib/*,
tools/windowed_edit_*/bin/*; see docs/adapters/swe-agent.md), not copied, and checked against the real scripts.
``--legacy``: the late-2024 windowed/edit scripts of SWE-agent's 1.0 development trajectories. What it reproduces:

- the registry: one JSON object in a file (SWE-agent: ``/root/.swe-agent-env``), created from
  ``tools.registry_variables``; ``get`` prefers the file, falls back to an environment variable, then the default;
- every message, exit code and output shape of the editor (``cat -n``-like numbering ``{n:6}\\t{line}``, the
  16,000-character clip, the 4-line snippets, the window expansion of ``MAX_WINDOW_EXPANSION_*``), the path checks
  in SWE-agent's order, ``find -maxdepth 2`` for directories, the encoding fallbacks, tab expansion on edits;
- the edit history exactly as 1.1.0 keeps it: each edit appends to a FRESH copy of the registry's ``file_history``
  that is never written back, so nothing persists and ``undo_edit`` always answers "No edit history found";
- ``submit``: ``git add -A && git diff --cached`` into the patch file in ``$ROOT``, then the next review stage of
  ``SUBMIT_REVIEW_MESSAGES`` (``SUBMIT_STAGE`` counted in the registry) or the ``<<SWE_AGENT_SUBMISSION>>`` markers;
- the edit bundles: flake8 before and after, ``format_flake8_output``'s filter, the revert with both windows.

Not reproduced (the parser marks such calls stale): the tree-sitter "filemap" abbreviation of large Python files
(SWE-agent's fallback when tree-sitter is missing is used instead), the flake8 epilogue of ``str_replace_editor``
with ``USE_LINTER``, Python tracebacks.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

TRUNCATED_MESSAGE = ("<response clipped><NOTE>To save on context only part of this file has been shown to you. You "
                     "should retry this tool after you have searched inside the file with `grep -n` in order to "
                     "find the line numbers of what you are looking for.</NOTE>")
MAX_RESPONSE_LEN = 16000
SNIPPET_LINES = 4
COMMANDS = '"view", "create", "str_replace", "insert", "undo_edit"'
#: ``--legacy``: the windowed and edit tools as SWE-agent's 1.0 development trajectories ran them (``tools/defaults``
#: and ``tools/edit_replace`` of late November 2024, e.g. SWE-agent a47c0088): older messages, ``create`` writing a
#: newline, the window clamped one line earlier, 1-based ``insert`` lines, no lint filter above the edit
LEGACY = False


class Registry:
    """SWE-agent's ``EnvRegistry``: a JSON object in one file, read afresh on every access."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _load(self) -> dict[str, Any]:
        if not self.path.exists():
            self.path.write_text("{}")
        data: dict[str, Any] = json.loads(self.path.read_text())
        return data

    def get(self, key: str, default: Any = None) -> Any:
        if key in os.environ:
            default = os.environ[key]
        return self._load().get(key, default)

    def set(self, key: str, value: Any) -> None:
        data = self._load()
        data[key] = value
        self.path.write_text(json.dumps(data))


def fail(message: str, code: int) -> NoReturn:
    print(message)
    sys.exit(code)


def clip(text: str) -> str:
    return text if len(text) <= MAX_RESPONSE_LEN else text[:MAX_RESPONSE_LEN] + TRUNCATED_MESSAGE


def numbered(content: str, descriptor: str, first: int = 1) -> str:
    """The editor's ``cat -n``-like rendering (clipped, tabs expanded, ``{n:6}\\t{line}``)."""
    lines = clip(content).expandtabs().split("\n")
    body = "\n".join(f"{number:6}\t{line}" for number, line in enumerate(lines, start=first))
    return f"Here's the result of running `cat -n` on {descriptor}:\n{body}\n"


_BREAK_AT = (re.compile(r"^\s*def\s+"), re.compile(r"^\s*class\s+"), re.compile(r"^\s*@"))


def _breakpoint(lines: list[str], line: int, step: int, budget: int, suffix: str) -> int:
    """Where a viewport edge may move to (1-based, inclusive): blank lines, Python definitions, the file's ends."""
    if (step == 1 and line == len(lines)) or (step == -1 and line == 1):
        return line
    end = min(line + budget, len(lines)) + 1 if step == 1 else max(line - budget, 1) - 1
    candidates = range(line, end, step)
    best_score, best = 0, line
    for number in candidates:
        text = lines[number - 1]
        following = lines[number + step - 1] if (number + step) in candidates else None
        score = 0
        if text == "":
            score = 2 if following == "" else 1
        if suffix == ".py" and any(pattern.match(text) for pattern in _BREAK_AT):
            score = 3
        if score > best_score:
            best_score, best = score, number
            if step == 1 and number != line:
                best -= 1
        if number in (1, len(lines)) and best_score < 3:
            best_score, best = 3, number
    if (step == 1 and best < line) or (step == -1 and best > line):
        return line
    return best


def expand_window(lines: list[str], start: int, stop: int, budget: int, suffix: str) -> tuple[int, int]:
    if not 1 <= start <= stop <= len(lines):  # SWE-agent asserts this and crashes with a traceback
        raise AssertionError((start, stop, len(lines)))
    if budget <= 0:
        return start, stop
    return _breakpoint(lines, start, -1, budget, suffix), _breakpoint(lines, stop, 1, budget, suffix)


class Editor:
    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.encoding: str | None = None

    def setting(self, key: str) -> str:
        return str(self.registry.get(key, "0" if key.startswith("MAX_") else "false"))

    def history_of(self, path: Path) -> list[str]:
        """1.1.0 looks its history up by ``Path`` in a dict whose JSON keys are strings: never found."""
        history: dict[Any, list[str]] = json.loads(self.registry.get("file_history", "{}"))
        return history.get(path, [])

    def run(self, args: argparse.Namespace) -> None:
        path = Path(args.path)
        self.validate(args.command, path)
        if args.command == "view":
            self.view(path, args.view_range)
        elif args.command == "create":
            if args.file_text is None:
                fail("Parameter `file_text` is required for command: create", 1)
            self.create(path, args.file_text)
        elif args.command == "str_replace":
            if args.old_str is None:
                fail("Parameter `old_str` is required for command: str_replace", 2)
            self.replace(path, args.old_str, args.new_str)
        elif args.command == "insert":
            if args.insert_line is None:
                fail("Parameter `insert_line` is required for command: insert", 3)
            if args.new_str is None:
                fail("Parameter `new_str` is required for command: insert", 4)
            self.insert(path, args.insert_line, args.new_str)
        elif args.command == "undo_edit":
            self.undo(path)
        else:
            fail(f"Unrecognized command {args.command}. The allowed commands for the str_replace_editor tool are: "
                 f"{COMMANDS}", 5)

    def validate(self, command: str, path: Path) -> None:
        if not path.is_absolute():
            fail(f"The path {path} is not an absolute path, it should start with `/`. Maybe you meant "
                 f"{Path.cwd() / path}?", 6)
        if not path.exists() and command != "create":
            fail(f"The path {path} does not exist. Please provide a valid path.", 7)
        if path.exists() and command == "create":
            fail(f"File already exists at: {path}. Cannot overwrite files using command `create`.", 8)
        if path.is_dir() and command != "view":
            fail(f"The path {path} is a directory and only the `view` command can be used on directories", 9)

    def read(self, path: Path) -> str:
        for encoding, errors in ((None, None), ("utf-8", None), ("latin-1", None), ("utf-8", "replace")):
            self.encoding = encoding
            try:
                return path.read_text(encoding=encoding, errors=errors)
            except UnicodeDecodeError as error:
                problem = error
        fail(f"Ran into UnicodeDecodeError {problem} while trying to read {path}", 19)

    def write(self, path: Path, text: str) -> None:
        try:
            path.write_text(text, encoding=self.encoding or "utf-8")
        except Exception as error:
            fail(f"Ran into {error} while trying to write to {path}", 20)

    def view(self, path: Path, view_range: list[int] | None) -> None:
        if path.is_dir():
            if view_range:
                fail("The `view_range` parameter is not allowed when `path` points to a directory.", 10)
            found = subprocess.run(rf"find {path} -maxdepth 2 -not -path '*/\.*'", shell=True, capture_output=True,
                                   check=False)
            if not found.stderr.decode():
                print(f"Here's the files and directories up to 2 levels deep in {path}, excluding hidden items:\n"
                      f"{found.stdout.decode()}\n")
            return
        content = self.read(path)
        first = 1
        if view_range:
            lines = content.split("\n")
            count = len(lines)
            start, stop = view_range
            if start < 1 or start > count:
                fail(f"Invalid `view_range`: {view_range}. Its first element `{start}` should be within the range of "
                     f"lines of the file: {[1, count]}", 12)
            if stop > count:
                fail(f"Invalid `view_range`: {view_range}. Its second element `{stop}` should be smaller than the "
                     f"number of lines in the file: `{count}`", 13)
            if stop != -1 and stop < start:
                fail(f"Invalid `view_range`: {view_range}. Its second element `{stop}` should be larger or equal "
                     f"than its first `{start}`", 14)
            stop = count if stop == -1 else stop
            first, stop = expand_window(lines, start, stop, int(self.setting("MAX_WINDOW_EXPANSION_VIEW")),
                                        path.suffix)
            content = "\n".join(lines[first - 1: stop])
        # a large .py file with USE_FILEMAP: SWE-agent shows a tree-sitter filemap; without tree-sitter it falls
        # back to the clipped file, as here (the parser marks recorded filemaps stale)
        print(numbered(content, str(path), first))

    def create(self, path: Path, text: str) -> None:
        if not path.parent.exists():
            fail(f"The parent directory {path.parent} does not exist. Please create it first.", 21)
        self.write(path, text)
        self.history_of(path).append(text)  # lost, as in 1.1.0
        print(f"File created successfully at: {path}")

    def replace(self, path: Path, old: str, new: str | None) -> None:
        content = self.read(path).expandtabs()
        old = old.expandtabs()
        new = new.expandtabs() if new is not None else ""
        occurrences = content.count(old)
        if occurrences == 0:
            fail(f"No replacement was performed, old_str `{old}` did not appear verbatim in {path}.", 15)
        if occurrences > 1:
            where = [number for number, line in enumerate(content.split("\n"), start=1) if old in line]
            fail(f"No replacement was performed. Multiple occurrences of old_str `{old}` in lines {where}. Please "
                 "ensure it is unique", 16)
        if new == old:
            fail(f"No replacement was performed, old_str `{old}` is the same as new_str `{new}`.", 161)
        updated = content.replace(old, new)
        self.write(path, updated)
        self.history_of(path).append(content)  # lost, as in 1.1.0
        at = content.split(old)[0].count("\n")
        start = max(1, at - SNIPPET_LINES)
        stop = min(at + SNIPPET_LINES + new.count("\n"), len(updated.splitlines()))
        lines = updated.split("\n")
        start, stop = expand_window(lines, start, stop, int(self.setting("MAX_WINDOW_EXPANSION_EDIT_CONFIRM")),
                                    path.suffix)
        snippet = "\n".join(lines[start - 1: stop])
        print(f"The file {path} has been edited. " + numbered(snippet, f"a snippet of {path}", start)
              + "Review the changes and make sure they are as expected. Edit the file again if necessary.")

    def insert(self, path: Path, line: int, new: str) -> None:
        text = self.read(path).expandtabs()
        new = new.expandtabs()
        lines = text.split("\n")
        if line < 0 or line > len(lines):
            fail(f"Invalid `insert_line` parameter: {line}. It should be within the range of lines of the file: "
                 f"{[0, len(lines)]}", 17)
        added = new.split("\n")
        self.write(path, "\n".join(lines[:line] + added + lines[line:]))
        self.history_of(path).append(text)  # lost, as in 1.1.0
        snippet = "\n".join(lines[max(0, line - SNIPPET_LINES): line] + added + lines[line: line + SNIPPET_LINES])
        print(f"The file {path} has been edited. "
              + numbered(snippet, "a snippet of the edited file", max(1, line - SNIPPET_LINES + 1))
              + "Review the changes and make sure they are as expected (correct indentation, no duplicate lines, "
                "etc). Edit the file again if necessary.")

    def undo(self, path: Path) -> None:
        history = self.history_of(path)
        if not history:
            fail(f"No edit history found for {path}.", 18)
        old = history.pop()
        self.write(path, old)
        print(f"Last edit to {path} undone successfully. {numbered(old, str(path))}")


def editor_main(registry: Registry, argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="str_replace_editor")
    parser.add_argument("command", type=str)
    parser.add_argument("path", type=str)
    parser.add_argument("--file_text", type=str)
    parser.add_argument("--view_range", type=int, nargs=2)
    parser.add_argument("--old_str", type=str)
    parser.add_argument("--new_str", type=str)
    parser.add_argument("--insert_line", type=int)
    Editor(registry).run(parser.parse_args(argv))


def submit_main(registry: Registry, patch_path: Path, argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="submit", description="Submit changes for review")
    parser.add_argument("-f", "--force", action="store_true", help="Force submit without review")
    args = parser.parse_args(argv)
    root = registry.get("ROOT", os.getenv("ROOT"))
    if not root:
        raise AssertionError
    subprocess.run(f"git add -A && git diff --cached > {patch_path}", shell=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, cwd=root, check=False)
    patch = patch_path.read_text(errors="backslashreplace")
    messages = registry.get("SUBMIT_REVIEW_MESSAGES", [])
    stage = registry.get("SUBMIT_STAGE", 0)
    if not args.force and stage != len(messages):
        message = str(messages[stage]).replace("{{diff}}", patch)
        message = message.replace("{{problem_statement}}", str(registry.get("PROBLEM_STATEMENT", "")))
        registry.set("SUBMIT_STAGE", stage + 1)
        print(message)
        sys.exit(0)
    print("<<SWE_AGENT_SUBMISSION>>")
    print(patch)
    print("<<SWE_AGENT_SUBMISSION>>")


class FileNotOpened(Exception):
    """No ``CURRENT_FILE`` in the registry (the edit tools' own message, not the viewer's)."""


class TextNotFound(Exception):
    pass


def _find_all(text: str, sub: str) -> list[int]:
    """Where ``sub`` starts, non-overlapping. SWE-agent's generator never ends for an empty ``sub`` (the command
    hangs until SWE-agent's timeout): the same here, without its unbounded list."""
    if not sub:
        while True:
            time.sleep(3600)
    found, start = [], text.find(sub)
    while start != -1:
        found.append(start)
        start = text.find(sub, start + len(sub))
    return found


class WindowedFile:
    """SWE-agent's ``windowed`` bundle (``tools/windowed/lib/windowed_file.py``, once ``tools/defaults``): a window
    of ``WINDOW`` lines on ``CURRENT_FILE`` starting at the 0-based ``FIRST_LINE``, both kept in the registry.
    ``exit_on_exception=False`` (the edit tools): a missing file raises instead of printing, as there."""

    def __init__(self, registry: Registry, path: Path | None = None, *, exit_on_exception: bool = True) -> None:
        self.registry = registry
        name = path if path is not None else registry.get("CURRENT_FILE")
        if not name:
            if exit_on_exception:
                fail("No file open. Use the open command first.", 1)
            raise FileNotOpened
        self.path = Path(name)
        if self.path.is_dir():
            message = (f"Error: {self.path} is a directory. You can only open files. Use cd or ls to navigate "
                       "directories.")
            if exit_on_exception:
                fail(message, 1)
            raise IsADirectoryError(message)
        if not self.path.exists():
            if exit_on_exception:
                fail(f"Error: File {self.path} not found", 1)
            raise FileNotFoundError(f"Error: File {self.path} not found")
        registry.set("CURRENT_FILE", str(self.path.resolve()))
        self.window = int(registry.get("WINDOW"))
        self.overlap = int(registry.get("OVERLAP", 0))
        self._first_line = 0
        self.first_line = int(registry.get("FIRST_LINE", 0))
        self._original_text = self.text
        self._original_first_line = self.first_line

    @property
    def text(self) -> str:
        return self.path.read_text()

    @text.setter
    def text(self, new_text: str) -> None:
        self._original_text = self.text
        self.path.write_text(new_text)

    @property
    def n_lines(self) -> int:
        return len(self.text.splitlines())

    @property
    def first_line(self) -> int:
        return self._first_line

    @first_line.setter
    def first_line(self, value: float) -> None:
        self._original_first_line = self._first_line
        self._first_line = max(0, min(int(value), self.n_lines - self.window - (1 if LEGACY else 0)))
        self.registry.set("FIRST_LINE", self._first_line)

    @property
    def line_range(self) -> tuple[int, int]:
        return self.first_line, min(self.first_line + self.window - 1, self.n_lines - 1)

    def goto(self, line: float) -> None:
        self.first_line = line - self.window * (1 / 6)

    def scroll(self, lines: int) -> None:
        self.first_line += lines - self.overlap if lines > 0 else lines + self.overlap

    def window_text(self, *, decorated: bool = False) -> str:
        """The window's lines; ``decorated``: with the status line, ``N:`` numbers and the above/below counts."""
        start, end = self.line_range
        lines = self.text.split("\n")[start:end + 1]
        if not decorated:
            return "\n".join(lines)
        total = self.n_lines
        out = [f"[File: {self.path} ({total} lines total)]"]
        if start > 0:
            out.append(f"({start} more lines above)")
        out.extend(f"{number + start + 1}:{line}" for number, line in enumerate(lines))
        if end < total - 1:
            out.append(f"({total - end - 1} more lines below)")
        return "\n".join(out)

    def print_window(self) -> None:
        print(self.window_text(decorated=True))

    def set_window_text(self, new_text: str, line_range: tuple[int, int] | None = None) -> None:
        lines = self.text.split("\n")
        start, stop = line_range if line_range is not None else self.line_range
        lines[start:stop + 1] = new_text.split("\n") if new_text else []
        self.text = "\n".join(lines)

    def replace_in_window(self, search: str, replace: str) -> tuple[int, int, int, int]:
        """(first replaced line, 0-based; search lines; replace lines; replacements)."""
        window = self.window_text()
        index = window.find(search)
        if index == -1:
            raise TextNotFound
        start = self.line_range[0] + len(window[:index].split("\n")) - (0 if LEGACY else 1)
        self.set_window_text(window.replace(search, replace))
        self.goto(start)
        return start, len(search.split("\n")), len(replace.split("\n")), 1

    def replace(self, search: str, replace: str) -> tuple[int, int, int, int]:
        """Every occurrence in the file; the first line is 1-based here, as in SWE-agent."""
        found = _find_all(self.text, search)
        if not found:
            raise TextNotFound
        start = len(self.text[:found[0]].split("\n"))
        self.text = self.text.replace(search, replace)
        self.goto(start)
        return start, len(search.split("\n")), len(replace.split("\n")), len(found)

    def occurrences(self, search: str) -> list[int]:
        """1-based line numbers of every occurrence in the file."""
        return [len(self.text[:index].split("\n")) for index in _find_all(self.text, search)]

    def undo_edit(self) -> None:
        self.text = self._original_text
        self.first_line = self._original_first_line

    def insert(self, text: str, line: int | None) -> tuple[int, int]:
        """(first inserted line, lines added): after ``line`` (negative: at the start; None: at the end)."""
        if not text:
            return (self.n_lines if line is None else line), 0
        text = text[:-1] if text.endswith("\n") else text
        current = self.text
        if line is None:
            new_text = text if not current else (current[:-1] if current.endswith("\n") else current) + "\n" + text
            at = self.n_lines
        elif line < 0:
            new_text = text if not current else text + "\n" + (current[1:] if current.startswith("\n") else current)
            at = 0
        else:
            lines = current.split("\n")
            lines.insert(line, text)
            new_text, at = "\n".join(lines), line
        self.text = new_text
        self.goto(at)
        return at, len(text.split("\n"))


def open_main(registry: Registry, argv: list[str]) -> int:
    if not argv:
        if not registry.get("CURRENT_FILE"):
            fail('Usage: open "<file>"', 1)
        WindowedFile(registry).print_window()
        return 0
    window = WindowedFile(registry, Path(argv[0]))
    if len(argv) > 1:
        try:
            line = int(argv[1])
        except ValueError:
            fail('Usage: open "<file>" [<line_number>]\nError: <line_number> must be a number', 1)
        if line > window.n_lines:
            print(f"Warning: <line_number> ({line}) is greater than the number of lines in the file "
                  f"({window.n_lines})")
            print(f"Warning: Setting <line_number> to {window.n_lines}")
            line = window.n_lines
        elif line < 1:
            print(f"Warning: <line_number> ({line}) is less than 1")
            print("Warning: Setting <line_number> to 1")
            line = 1
    else:
        line = window.first_line
    window.goto(line - 1)
    window.print_window()
    return 0


def goto_main(registry: Registry, argv: list[str]) -> int:
    if len(argv) > 1:
        fail("goto allows only one line number at a time.", 1)
    if not argv:
        fail("Usage: goto <line>", 1)
    try:
        line = int(argv[0])
    except ValueError:
        fail("Usage: goto <line>\nError: <line> must be a number", 1)
    window = WindowedFile(registry)
    if line > window.n_lines:
        fail(f"Error: <line> must be less than or equal to {window.n_lines}", 1)
    window.goto(line - 1)
    window.print_window()
    return 0


def scroll_main(direction: int) -> Any:
    def scroll(registry: Registry, argv: list[str]) -> int:
        window = WindowedFile(registry)
        window.scroll(direction * window.window)
        window.print_window()
        return 0
    return scroll


def create_main(registry: Registry, argv: list[str]) -> int:
    if not argv:
        fail("Usage: create <filename>", 1)
    path = Path(argv[0])
    if not path.parent.is_dir() and not LEGACY:
        path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        fail(f"Warning: File '{path}' already exists.", 1)
    if LEGACY:  # before SWE-agent #1114 (2025-05): a new file held one empty line
        path.write_text("\n")
    else:
        path.touch()
    window = WindowedFile(registry, path)
    window.first_line = 0
    window.print_window()
    return 0


# -- the linting edit bundles (windowed_edit_replace, once edit_replace; windowed_edit_linting) -----------------------
RETRY_WITH_OUTPUT = "###SWE-AGENT-RETRY-WITH-OUTPUT###"  # SWE-agent removes it from the observation
DEFAULT_LINT_COMMAND = "flake8 --isolated --select=F821,F822,F831,E111,E112,E113,E999,E902 {file_path}"
_CHECKLIST = ("Please review the changes and make sure they are correct:\n\n"
              "1. The edited file is correctly indented\n2. The edited file does not contain duplicate lines\n"
              "3. The edit does not break existing functionality\n\nEdit the file again if necessary.")
_RULE = "-" * 48
_LINT_WINDOWS = (f"This is how your edit would have looked if applied\n{_RULE}\n{{applied}}\n{_RULE}\n\n"
                 f"This is the original code before your edit\n{_RULE}\n{{original}}\n{_RULE}\n\n"
                 "Your changes have NOT been applied. Please fix your edit command and try again.\n"
                 "DO NOT re-run the same failed edit command. Running it again will lead to the same error.")
_SYNTAX = "Your proposed edit has introduced new syntax error(s)."
_READ = "Please read this error message carefully and then retry editing the file."


def flake8(registry: Registry, path: Path) -> str:
    """``flake8_utils.flake8``: the registry's ``LINT_COMMAND`` (a shell line) on a ``.py`` file, its stdout."""
    if path.suffix != ".py":
        return ""
    command = str(registry.get("LINT_COMMAND", DEFAULT_LINT_COMMAND)).format(file_path=path)
    return subprocess.run(command, shell=True, capture_output=True, check=False).stdout.decode()


def _lint_errors(output: str) -> list[tuple[str, int, int, str]]:
    errors = []
    for line in (raw.strip() for raw in output.split("\n")):
        if not line:
            continue
        prefix, _, problem = line.partition(": ")
        try:
            name, number, column = prefix.split(":")
            errors.append((name, int(number), int(column), problem))
        except ValueError as error:
            raise ValueError(f"Invalid flake8 error line: {line}") from error
    return errors


def new_lint_errors(after: str, before: str = "", window: tuple[int, int] | None = None,
                    replacement_lines: int | None = None) -> str:
    """``format_flake8_output``: the errors after the edit that were not there before (earlier errors moved by the
    lines the edit added; those inside the edited window, and new ones above it, not counted), as ``- <problem>``."""
    errors = _lint_errors(after)
    if before:
        if window is None or replacement_lines is None:
            raise AssertionError
        added = replacement_lines - (window[1] - window[0] + 1)
        previous = []
        for name, number, column, problem in _lint_errors(before):
            if number < window[0]:
                previous.append((name, number, column, problem))
            elif number > window[1]:
                previous.append((name, number + added, column, problem))
        errors = [error for error in errors if error not in previous and (LEGACY or error[1] >= window[0])]
    return "\n".join(f"- {error[3]}" for error in errors)


def _edit_target(registry: Registry, no_file: str) -> WindowedFile:
    try:
        return WindowedFile(registry, exit_on_exception=False)
    except FileNotOpened:
        fail(no_file, 1)


def _reverted(window: WindowedFile, errors: str, head: str) -> str:
    applied = window.window_text(decorated=True)
    window.undo_edit()
    return head.format(errors=errors) + _LINT_WINDOWS.format(applied=applied,
                                                             original=window.window_text(decorated=True))


def edit_replace_main(registry: Registry, argv: list[str]) -> None:
    """``windowed_edit_replace``'s ``edit <search> <replace> [<replace-all>]`` (argparse ``type=bool``: any
    non-empty word, ``False`` too, means replace-all): replace in the window (or the whole file), lint, revert on
    new flake8 errors."""
    parser = argparse.ArgumentParser(prog="edit")
    parser.add_argument("search", type=str)
    parser.add_argument("replace", type=str)
    parser.add_argument("replace_all", type=bool, nargs="?", default=False)
    args = parser.parse_args(argv)
    search, replace, replace_all = args.search, args.replace, args.replace_all
    if LEGACY:
        legacy_edit_replace(registry, search, replace, replace_all)
        return
    window = _edit_target(registry, "No file opened. Either `open` or `create` a file first.")
    if search == replace:
        print("Your search and replace strings are the same. No changes were made. Please modify your search or "
              f"replace strings.\n{RETRY_WITH_OUTPUT}")
        sys.exit(2)
    before = flake8(registry, window.path)
    try:
        if not replace_all:
            if window.window_text().count(search) > 1:
                print(f"Your edit was not applied (file not modified): Found more than one occurrence of {search!r} "
                      "in the currently displayed lines.\nPlease make your search string more specific (for "
                      f"example, by including more lines of context).\n\n{RETRY_WITH_OUTPUT}")
                sys.exit(4)
            first, searched, replaced, count = window.replace_in_window(search, replace)
        else:
            first, searched, replaced, count = window.replace(search, replace)
    except TextNotFound:
        found = window.occurrences(search)
        if found:
            lines = "\n".join(f"- line {number}" for number in found)
            print(f"Your edit was not applied (file not modified): Text {search!r} not found in displayed lines.\n\n"
                  f"However, we found the following occurrences of your search string in the file:\n\n{lines}\n\n"
                  "You can use the `goto` command to navigate to these locations before running the edit command "
                  "again.\n")
        else:
            print(f"Your edit was not applied (file not modified): Text {search!r} not found in displayed lines (or "
                  "anywhere in the file).\nPlease modify your search string. Did you forget to properly handle "
                  "whitespace/indentation?\nYou can also call `open` again to re-display the file with the correct "
                  "context.\n")
        print(RETRY_WITH_OUTPUT)
        sys.exit(3)
    after = flake8(registry, window.path)
    if replace_all:  # SWE-agent shows every error then: line numbers moved too much to compare
        errors = new_lint_errors(after)
    else:
        errors = new_lint_errors(after, before, (first, first + searched - 1), replaced)
    if errors:
        print(_reverted(window, errors, f"{_SYNTAX} {_READ}\n\nERRORS:\n\n{{errors}}\n\n") + "\n")
        print(RETRY_WITH_OUTPUT)
        sys.exit(4)
    print(f"Text replaced. {_CHECKLIST}" if not replace_all else f"Replaced {count} occurrences. {_CHECKLIST}")
    window.print_window()


def legacy_edit_replace(registry: Registry, search: str, replace: str, replace_all: bool) -> None:
    """``tools/edit_replace/bin/edit`` of late November 2024: its own messages, no retry token, no search of the
    whole file when the text is not in the window, and the edited window one line longer for the lint filter."""
    window = _edit_target(registry, "No file opened. Either `open` a file first.")
    if search == replace:
        fail("Your search and replace strings are the same. No changes were made.", 2)
    before = flake8(registry, window.path)
    try:
        if not replace_all:
            if window.window_text().count(search) > 1:
                fail(f"Error: Found more than one occurrence of {search} in the window while replace_all=False. "
                     "Aborting edit.", 4)
            first, searched, replaced, count = window.replace_in_window(search, replace)
        else:
            first, searched, replaced, count = window.replace(search, replace)
    except TextNotFound:
        fail(f"Text {search!r} not found in displayed lines.\nNote: By default, we only replace the first occurrence "
             "in the lines that are currently visible in the editor.\nIf you want to replace all occurrences in and "
             "outside of the visible lines, use the `--replace-all` flag.\n", 3)
    after = flake8(registry, window.path)
    errors = new_lint_errors(after) if replace_all else new_lint_errors(after, before, (first, first + searched),
                                                                        replaced)
    if errors:
        print(_reverted(window, errors, f"\n{_SYNTAX} {_READ}\n\nERRORS:\n\n{{errors}}\n") + "\n")
        sys.exit(4)
    legacy = "Please review the changes and make sure they are correct\n(correct indentation, no duplicate lines, " \
             "etc). Edit the file again if necessary."
    print(f"Text replaced. {legacy}" if not replace_all else f"Replaced {count} occurrences. {legacy}")
    window.print_window()


def insert_main(registry: Registry, argv: list[str]) -> None:
    """``windowed_edit_replace``'s ``insert <text> [<line>]``: after line ``<line>`` (or at the end), linted."""
    parser = argparse.ArgumentParser(prog="insert")
    parser.add_argument("text", type=str)
    parser.add_argument("line", type=int, nargs="?", default=None)
    args = parser.parse_args(argv)
    no_file = "No file opened. Use the `create` or `open` command first."
    window = _edit_target(registry, no_file if LEGACY else f"{no_file}\n{RETRY_WITH_OUTPUT}")
    before = flake8(registry, window.path)
    line = args.line - 1 if LEGACY and args.line is not None else args.line
    first, added = window.insert(args.text, line)
    errors = new_lint_errors(flake8(registry, window.path), before, (first, first), added)
    if errors and LEGACY:
        print(_reverted(window, errors, f" {_SYNTAX} {_READ}\n\nERRORS:\n\n{{errors}}\n") + "\n")
        sys.exit(4)
    if errors:
        print(_reverted(window, errors, f"{_SYNTAX}\n{_READ}\n\nERRORS:\n\n{{errors}}\n\n") + "\n")
        print(RETRY_WITH_OUTPUT)
        sys.exit(4)
    window.print_window()


_RANGE_USAGE = "Usage: edit <start_line>:<end_line>\n<replacement_text>\nend_of_edit"


def edit_lines_main(registry: Registry, argv: list[str]) -> None:
    """``windowed_edit_linting``'s ``edit <start>:<end>`` (the text as an argument or on stdin up to
    ``end_of_edit``): lines start..end replaced, linted, reverted on new errors. Line numbers are not checked
    against the file (Python's slice assignment decides, as in SWE-agent)."""
    parser = argparse.ArgumentParser(prog="edit")
    parser.add_argument("line_range", help="Line range in format start:end")
    parser.add_argument("replacement_text", help="Text to insert", nargs="?")
    args = parser.parse_args(argv)
    window = _edit_target(registry, "No file opened. Use the `open` command first.")
    try:
        start, end = (int(part) - 1 for part in args.line_range.split(":"))
    except ValueError:
        fail(_RANGE_USAGE, 1)
    text: str | None = args.replacement_text
    if text is None:
        lines = []
        while True:
            try:
                line = input()
            except EOFError:
                break
            if line == "end_of_edit":
                break
            lines.append(line)
        text = "\n".join(lines)
    elif text.endswith("\n"):
        text = text[:-1]
    before = flake8(registry, window.path)
    window.set_window_text(text, line_range=(start, end))
    errors = new_lint_errors(flake8(registry, window.path), before, (start, end), len(text.splitlines()))
    if errors:
        print(_reverted(window, errors, f"{_SYNTAX} {_READ}\n\nERRORS:\n{{errors}}\n\n"))
        sys.exit(1)
    window.goto(start)
    print("File updated. Please review the changes and make sure they are correct\n(correct indentation, no "
          "duplicate lines, etc). Edit the file again if necessary.")
    window.print_window()


EDIT_TOOLS = {"edit_replace": edit_replace_main, "insert": insert_main, "edit_lines": edit_lines_main}


WINDOWED_TOOLS = {"open": open_main, "goto": goto_main, "scroll_up": scroll_main(-1), "scroll_down": scroll_main(1),
                  "create": create_main}


def _echo(data: bytes) -> None:
    """One ``echo`` of raw bytes (file names and lines are printed as found, never re-decoded)."""
    sys.stdout.flush()
    sys.stdout.buffer.write(data + b"\n")
    sys.stdout.buffer.flush()


def _captured(script: str, *args: str) -> bytes:
    """What bash's ``$(...)`` keeps of a pipeline's output (trailing newlines dropped); stderr goes to the
    terminal as in SWE-agent's scripts."""
    done = subprocess.run(["bash", "-c", script, "bash", *args], stdout=subprocess.PIPE, check=False)
    return done.stdout.rstrip(b"\n")


def _search_dir_arg(argv: list[str], usage: str) -> tuple[str, str] | None:
    if len(argv) == 1:
        return argv[0], os.path.realpath("./")
    if len(argv) == 2:
        if not os.path.isdir(argv[1]):
            print(f"Directory {argv[1]} not found")
            return None
        return argv[0], os.path.realpath(argv[1])
    print(usage)
    return None


def find_file_main(registry: Registry, argv: list[str]) -> None:
    """``tools/search/bin/find_file``: ``find <dir> -type f -name <name>``."""
    found = _search_dir_arg(argv, "Usage: find_file <file_name> [<dir>]")
    if found is None:
        return
    name, where = found
    matches = _captured('find "$1" -type f -name "$2"', where, name)
    if not matches:
        print(f'No matches found for "{name}" in {where}')
        return
    count = matches.count(b"\n") + 1
    print(f'Found {count} matches for "{name}" in {where}:')
    _echo(matches)


def search_dir_main(registry: Registry, argv: list[str]) -> None:
    """``tools/search/bin/search_dir``: per-file match counts of ``grep -nIH`` over non-hidden files."""
    found = _search_dir_arg(argv, "Usage: search_dir <search_term> [<dir>]")
    if found is None:
        return
    term, where = found
    matches = _captured("find \"$1\" -type f ! -path '*/.*' -exec grep -nIH -- \"$2\" {} + "
                        "| cut -d: -f1 | sort | uniq -c", where, term)
    if not matches:
        print(f'No matches found for "{term}" in {where}')
        return
    rows = [line.split() for line in matches.split(b"\n")]
    total = sum(int(row[0]) for row in rows if row)
    if len(rows) > 100:
        print(f'More than {len(rows)} files matched for "{term}" in {where}. Please narrow your search.')
        return
    print(f'Found {total} matches for "{term}" in {where}:')
    for row in rows:
        name = re.sub(rb"^\.+/+", b"./", row[1]) if len(row) > 1 else b""
        _echo(name + b" (" + (row[0] if row else b"") + b" matches)")
    print(f'End of matches for "{term}" in {where}')


def search_file_main(registry: Registry, argv: list[str]) -> None:
    """``tools/search/bin/search_file``: ``grep -nH`` in one file (default: the open one), one line per match."""
    usage = "Usage: search_file <search_term> [<file>]"
    if not argv or not argv[0]:
        print(usage)
        return
    if len(argv) >= 2:
        if not os.path.isfile(argv[1]):
            print(f"{usage}\nError: File name {argv[1]} not found. Please provide a valid file name.")
            return
        name = argv[1]
    else:
        name = str(registry.get("CURRENT_FILE", ""))
        if not name:
            print("No file open. Use the open command first.")
            return
    term, name = argv[0], os.path.realpath(name)
    matches = _captured('grep -nH -- "$1" "$2"', term, name)
    if not matches:
        print(f'No matches found for "{term}" in {name}')
        return
    lines = matches.split(b"\n")
    files = {line.split(b":", 1)[0] for line in lines}  # SWE-agent counts ``cut -d: -f1``: the file name
    if len(files) > 100:
        print(f'More than {len(files)} lines matched for "{term}" in {name}. Please narrow your search.')
        return
    print(f'Found {len(lines)} matches for "{term}" in {name}:')
    numbers = sorted({int(fields[1]) for fields in (line.split(b":", 2) for line in lines)
                      if len(fields) > 1 and fields[1].isdigit()})
    content = Path(name).read_bytes().split(b"\n")
    for number in numbers:
        text = content[number - 1] if number <= len(content) else b""
        _echo(b"Line " + str(number).encode() + b":" + text.rstrip(b"\n"))
    print(f'End of matches for "{term}" in {name}')


SEARCH_TOOLS = {"find_file": find_file_main, "search_dir": search_dir_main, "search_file": search_file_main}


def main(argv: list[str]) -> None:
    global LEGACY
    if argv and argv[0] == "--legacy":
        LEGACY, argv = True, argv[1:]
    registry, patch, tool, rest = Registry(Path(argv[0])), Path(argv[1]), argv[2], argv[3:]
    sys.stdout = io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8")
    if tool == "str_replace_editor":
        editor_main(registry, rest)
    elif tool == "submit":
        submit_main(registry, patch, rest)
    elif tool in WINDOWED_TOOLS:
        sys.exit(WINDOWED_TOOLS[tool](registry, rest))
    elif tool in SEARCH_TOOLS:
        SEARCH_TOOLS[tool](registry, rest)
    elif tool in EDIT_TOOLS:
        EDIT_TOOLS[tool](registry, rest)
    else:
        sys.exit(f"unknown bundle tool {tool!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
