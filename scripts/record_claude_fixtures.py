#!/usr/bin/env python3
"""Record REAL Claude Code sessions (verified native binaries) against ScriptedModel as test fixtures.

    python scripts/record_claude_fixtures.py [--version V ...] [--scenario S ...]

Writes tests/fixtures/claude_code/<version>/<scenario>/: session.jsonl (the native session file),
<session-id>/subagents/ (sub-agent transcripts, when created),
stdout.jsonl, stderr.txt, requests.jsonl (what the model server received; system/tools as hashes),
script.json, meta.json, workspace-initial/, tool-results/ (persisted large outputs, when created), tasks/ (the
session's task list files, when created) and workspace-final/ (scenarios with keep_final).

The recording cwd (/tmp/forkpoint-rec/<scenario>) and HOME (/tmp/forkpoint-rec-home/<scenario>) are
fixed and recreated fresh, and tool_use ids are seeded per scenario, so re-recordings differ only in
uuids, timestamps, session ids and the persisted-output file id.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fixture_recording import fresh_scenario, installed, read_jsonl, write_requests, write_script

from forkpoint import runtimes
from forkpoint.adapters import agent_spec
from forkpoint.testing.scripted_model import Block, ScriptedModel, text, tool_use

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "claude_code"
REC_ROOT = Path("/tmp/forkpoint-rec")
HOME_ROOT = Path("/tmp/forkpoint-rec-home")
CLEAN_PATH = "/usr/local/bin:/usr/bin:/bin"
RUN_TIMEOUT_S = 180.0

Json = dict[str, Any]
Turns = list[list[Block]]


def bash(command: str, description: str) -> Block:
    return tool_use("Bash", {"command": command, "description": description})


@dataclass(frozen=True)
class Scenario:
    name: str
    task: str
    files: dict[str, str | bytes]
    turns: Callable[[str], Turns]  # cwd -> scripted assistant turns
    error_steps: frozenset[int] = frozenset()  # steps whose every tool_result must be is_error
    kill_step: int | None = None  # SIGKILL claude once this step's tool_use is in the session file
    check: Callable[[list[Json], Path], None] | None = None
    notes: str = ""
    extra_args: tuple[str, ...] = ()  # e.g. --tools: -p runs defer or leave out TaskCreate, NotebookEdit, ...
    # SDK mode (--input-format stream-json --permission-prompt-tool stdio): the task is sent on stdin and every
    # can_use_tool control request is answered by this function (request -> response payload). Plan mode and
    # AskUserQuestion only run this way: a plain -p run disables them.
    sdk_answer: Callable[[Json], Json] | None = None
    keep_final: bool = False  # also store the workspace as the run left it (workspace-final/)
    # the sub-agents' script: a request carrying SUBAGENT_KEY (only a sub-agent's system prompt has it) is
    # answered from these turns (their tool_use ids are given: the seeded ids would repeat the parent's)
    sub_turns: Callable[[str], Turns] | None = None
    # MCP servers, in Claude's --mcp-config format (written to <home>/mcp.json and passed with --mcp-config)
    mcp_servers: dict[str, Json] | None = None
    # the versions it is recorded for (None: the verified versions); an old line's scenario names its version
    only: tuple[str, ...] | None = None


def _result_texts(lines: list[Json]) -> list[str]:
    texts = []
    for line in lines:
        content = line.get("message", {}).get("content") if line.get("type") == "user" else None
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "tool_result":
                value = block.get("content")
                texts.append(value if isinstance(value, str) else json.dumps(value))
    return texts


def _check_cd(lines: list[Json], _: Path) -> None:
    results = _result_texts(lines)
    assert results[0].endswith("/sub") and results[1].endswith("/sub"), results


def _check_large(lines: list[Json], fixture: Path) -> None:
    assert "<persisted-output>" in _result_texts(lines)[0]
    files = list((fixture / "tool-results").glob("*"))
    assert len(files) == 1 and files[0].read_text().startswith("1\n2\n3\n"), files


def _check_stale(lines: list[Json], _: Path) -> None:
    results = _result_texts(lines)
    assert "<tool_use_error>" in results[0] and "<tool_use_error>" in results[1], results


def png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A solid-colour RGB PNG (no imaging library needed)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    row = b"\0" + bytes(rgb) * width
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(row * height, 9)) + chunk(
        b"IEND", b"")


def pdf(text_line: str) -> bytes:
    """A one-page PDF 1.4 with one line of text and a correct xref table."""
    stream = f"BT /F1 24 Tf 72 720 Td ({text_line}) Tj ET".encode()
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
               b"/Resources << /Font << /F1 5 0 R >> >> >>",
               b"<< /Length " + str(len(stream)).encode() + b" >>\nstream\n" + stream + b"\nendstream",
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    out, offsets = b"%PDF-1.4\n", []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{offset:010d} 00000 n \n".encode() for offset in offsets)
    return out + f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()


NOTEBOOK = json.dumps({
    "cells": [
        {"cell_type": "markdown", "id": "intro", "metadata": {}, "source": ["# Demo\n", "Adds numbers."]},
        {"cell_type": "code", "execution_count": 1, "id": "add", "metadata": {},
         "outputs": [{"name": "stdout", "output_type": "stream", "text": ["adding\n"]},
                     {"data": {"text/plain": ["3"]}, "execution_count": 1, "metadata": {},
                      "output_type": "execute_result"}],
         "source": ["print('adding')\n", "1 + 2"]},
        {"cell_type": "code", "execution_count": 2, "id": "boom", "metadata": {},
         "outputs": [{"ename": "ZeroDivisionError", "evalue": "division by zero", "output_type": "error",
                      "traceback": ["Traceback (most recent call last)", "ZeroDivisionError: division by zero"]}],
         "source": "1 / 0"},
        {"cell_type": "raw", "id": "note", "metadata": {}, "source": "raw text"},
    ],
    "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                 "language_info": {"name": "python", "version": "3.12.0"}},
    "nbformat": 4, "nbformat_minor": 5,
}, indent=1) + "\n"


def _check_media(lines: list[Json], _: Path) -> None:
    results = _result_texts(lines)
    assert "<cell" in results[0] and "image" in results[1], results[:2]


def _check_cd_continue(lines: list[Json], _: Path) -> None:
    results = _result_texts(lines)
    assert results[0] == "(Bash completed with no output)", results
    assert results[1] == "inside" and results[2].startswith("/tmp/forkpoint-rec/cd_continue/pkg\n"), results


#: The workspace-free and notebook tools: ``-p`` runs defer NotebookEdit (ToolSearch) and leave the others out,
#: so these scenarios name them with ``--tools`` (the binary then offers exactly those, schemas loaded).
TOOLS_ARGS = ("--tools", "Bash,Read,TaskCreate,TaskUpdate,TaskList,TaskGet,NotebookEdit,Skill,TodoWrite,"
              "EnterPlanMode,ExitPlanMode,AskUserQuestion")


def _check_tasks(lines: list[Json], _: Path) -> None:
    results = _result_texts(lines)
    assert results[1] == "Task #1 created successfully: Write tests", results
    assert results[-1].startswith("#1 ["), results


def _check_notebook(lines: list[Json], fixture: Path) -> None:
    results = _result_texts(lines)
    assert results[1].startswith("Updated cell add with "), results
    assert (fixture / "workspace-final" / "demo.ipynb").is_file()


def _answer_as_user(request: Json) -> Json:
    """What a person answers: "X" to every question, yes to everything else (plan approval included)."""
    tool_input = request.get("input") or {}
    if request.get("tool_name") == "AskUserQuestion":
        answers = {q["question"]: "X" for q in tool_input.get("questions", [])}
        return {"behavior": "allow", "updatedInput": {**tool_input, "answers": answers}}
    return {"behavior": "allow", "updatedInput": tool_input}


def _check_interactive(lines: list[Json], _: Path) -> None:
    results = _result_texts(lines)
    assert results[0].startswith("Entered plan mode."), results
    assert results[1] == 'Your questions have been answered: "Which one?"="X". You can now continue with these ' \
                         "answers in mind.", results
    assert results[2] == "User has approved exiting plan mode. You can now proceed.", results


#: a phrase of the built-in general-purpose sub-agent's system prompt (both versions), never in the main prompt
SUBAGENT_KEY = "You are an agent for Claude Code"


def _check_subagent(lines: list[Json], fixture: Path) -> None:
    results = _result_texts(lines)
    assert "Sub-agent report: sub.txt written" in results[1], results
    assert results[2] == "from-sub\nbase", results
    files = sorted(p.name for p in fixture.glob("*/subagents/*.jsonl"))
    assert len(files) == 1, files


#: the tiny real MCP server (forkpoint.testing.mcp_server, the official SDK) the mcp_tools scenario talks to
MCP_TINY = {"tiny": {"command": sys.executable, "args": ["-m", "forkpoint.testing.mcp_server"],
                     "env": {"PYTHONPATH": str(REPO / "src")}}}


def _check_mcp(lines: list[Json], _: Path) -> None:
    results = _result_texts(lines)
    assert results[1] == '{"result":"echo: hi"}' and results[5] == "count.txt has one line", results


def task(name: str, **arguments: Any) -> list[Block]:
    return [tool_use(name, arguments)]


#: old lines recorded for the tool profiles of unverified versions (tool_profile.V2_0), not verified versions
OLD_LINES = ("1.0.128", "2.0.27")
#: 2.1.x releases recorded for a measured recorded-version profile (tool_profile.NO_CONTEXT_NOTE)
NOTE_LESS = ("2.1.108",)


def _todo(content: str, status: str) -> Json:
    return {"content": content, "status": status, "activeForm": f"Doing: {content}"}


def _check_old_line(lines: list[Json], _: Path) -> None:
    todos = [line["toolUseResult"] for line in lines if line.get("type") == "user"
             and isinstance(line.get("toolUseResult"), dict) and "newTodos" in line["toolUseResult"]]
    assert len(todos) == 4 and todos[0]["oldTodos"] == [] and todos[1]["oldTodos"] == todos[0]["newTodos"], todos
    assert todos[3]["oldTodos"] == [], "a list of completed todos is cleared"


#: absolute paths outside the recording cwd that exist on no Linux host (what real recordings made on a Mac hold)
OUTSIDE_PNG = "/var/folders/zz/forkpoint_rec/T/TemporaryItems/NSIRD_screencaptureui_x/Screenshot 1.png"
OUTSIDE_TEXT = "/var/folders/zz/forkpoint_rec/notes.txt"


SCENARIOS: dict[str, Scenario] = {s.name: s for s in [
    Scenario(
        "single_bash", "List the files here, then read notes.txt and summarise it.",
        {"notes.txt": "hello from notes\nsecond line\n", "src/app.py": "print('hi')\n"},
        lambda cwd: [[text("I'll list the files first."), bash("ls", "List files")],
                     [tool_use("Read", {"file_path": f"{cwd}/notes.txt"})],
                     [text("notes.txt says hello and has a second line.")]],
    ),
    Scenario(
        "old_line", "Track todos while reading, writing and editing files.",
        {"a.txt": "alpha\n", "long.txt": "".join(f"line {i}\n" for i in range(1, 13)), "one.txt": "x\n",
         "empty.txt": ""},
        lambda cwd: [[text("Planning."), tool_use("TodoWrite", {"todos": [_todo("Read files", "in_progress"),
                                                                             _todo("Edit files", "pending")]})],
                     [tool_use("Read", {"file_path": f"{cwd}/long.txt"}),
                      tool_use("Read", {"file_path": f"{cwd}/a.txt"})],
                     [tool_use("Edit", {"file_path": f"{cwd}/long.txt", "old_string": "line 8\n",
                                        "new_string": "line eight\nline 8b\n"})],
                     [tool_use("Write", {"file_path": f"{cwd}/new.txt", "content": "one\ntwo\n"})],
                     [tool_use("Write", {"file_path": f"{cwd}/a.txt", "content": "ALPHA\nBETA\n"})],
                     [tool_use("TodoWrite", {"todos": [_todo("Read files", "completed"),
                                                       _todo("Edit files", "in_progress")]})],
                     [tool_use("Edit", {"file_path": f"{cwd}/long.txt", "old_string": "line 1",
                                        "new_string": "LINE 1", "replace_all": True})],
                     [tool_use("Read", {"file_path": f"{cwd}/long.txt", "offset": 5, "limit": 3}),
                      tool_use("Read", {"file_path": f"{cwd}/empty.txt"}),
                      tool_use("Read", {"file_path": f"{cwd}/one.txt", "offset": 2})],
                     [tool_use("TodoWrite", {"todos": [_todo("Read files", "completed"),
                                                       _todo("Edit files", "completed")]})],
                     [tool_use("TodoWrite", {"todos": [_todo("Report", "pending")]})],
                     [bash("true", "No output"), bash("echo out; echo err >&2", "Both streams")],
                     [text("Done.")]],
        check=_check_old_line, only=OLD_LINES, keep_final=True,
        notes="2.0.x: cat -n Read with its reminder, snippet Write/Edit texts, TodoWrite (oldTodos across calls, a "
              "completed list cleared), Bash without output and with both streams",
    ),
    Scenario(
        "no_context_note", "Create new.txt, change it, then overwrite it.",
        {"README.md": "# demo\n"},
        lambda cwd: [[tool_use("Write", {"file_path": f"{cwd}/new.txt", "content": "line one\nline two\n"})],
                     [tool_use("Edit", {"file_path": f"{cwd}/new.txt", "old_string": "line two",
                                        "new_string": "line 2"})],
                     [tool_use("Write", {"file_path": f"{cwd}/new.txt", "content": "rewritten\n"})],
                     [text("Done.")]],
        only=NOTE_LESS,
        notes="2.1.94-2.1.126: Write (new and over a file) and Edit answer without 2.1.220's ' (file state is "
              "current in your context — no need to Read it back)' (tool_profile.NO_CONTEXT_NOTE)",
    ),
    Scenario(
        "parallel", "Show the contents of a.txt and b.txt.",
        {"a.txt": "alpha\n", "b.txt": "beta\n"},
        lambda cwd: [[text("Reading both files in parallel."), bash("sleep 1 && cat a.txt", "Show a.txt"),
                      bash("cat b.txt", "Show b.txt")],
                     [text("a.txt has alpha, b.txt has beta.")]],
        notes="call 1 sleeps 1 s, so call 2 finishes first: shows completion-order result lines",
    ),
    Scenario(
        "file_tools", "Create new.txt with two lines, then change 'line two' to 'line 2'.",
        {"README.md": "# demo\n"},
        lambda cwd: [[tool_use("Write", {"file_path": f"{cwd}/new.txt", "content": "line one\nline two\n"})],
                     [tool_use("Read", {"file_path": f"{cwd}/new.txt"})],
                     [tool_use("Edit", {"file_path": f"{cwd}/new.txt", "old_string": "line two",
                                        "new_string": "line 2"})],
                     [tool_use("Read", {"file_path": f"{cwd}/new.txt"})],
                     [text("new.txt now reads 'line one' and 'line 2'.")]],
    ),
    Scenario(
        "error_result", "Look into missing-dir and missing.txt.",
        {"README.md": "# demo\n"},
        lambda cwd: [[bash("ls missing-dir", "List missing-dir")],
                     [tool_use("Read", {"file_path": f"{cwd}/missing.txt"})],
                     [text("Neither missing-dir nor missing.txt exists.")]],
        error_steps=frozenset({0, 1}), only=(*agent_spec("claude-code").versions, *OLD_LINES),
    ),
    Scenario(
        "read_outside", "Look at the screenshot and the notes I saved outside the project.",
        {"README.md": "# demo\n"},
        lambda cwd: [[tool_use("Read", {"file_path": OUTSIDE_PNG})],
                     [tool_use("Read", {"file_path": OUTSIDE_TEXT})],
                     [tool_use("Read", {"file_path": f"{cwd}/missing.png"})],
                     [text("Neither the screenshot nor the notes exist here.")]],
        error_steps=frozenset({0, 1, 2}), only=(*agent_spec("claude-code").versions, *OLD_LINES),
        notes="Read of missing absolute paths outside the cwd (a macOS screenshot temp path, a text file) and of a "
              "missing PNG inside it: Claude's 'File does not exist' text",
    ),
    Scenario(
        "stale_tools", "Find the text files and the lines containing hello.",
        {"hello.txt": "hello world\n", "other.txt": "nothing\n"},
        lambda cwd: [[tool_use("Glob", {"pattern": "*.txt"})],
                     [tool_use("Grep", {"pattern": "hello"})],
                     [bash("ls", "List files")],
                     [text("hello.txt and other.txt; hello.txt contains hello.")]],
        error_steps=frozenset({0, 1}), check=_check_stale,
        notes="Glob and Grep are not offered by these versions: <tool_use_error> results",
    ),
    Scenario(
        "dangling", "Start the job and wait for it.",
        {"README.md": "# demo\n"},
        lambda cwd: [[bash("echo started > started.txt && cat started.txt", "Start")],
                     [bash("echo waiting && sleep 30 && echo finished", "Wait for the job")],
                     [text("The job finished.")]],
        kill_step=1,
        notes="claude was SIGKILLed while `sleep 30` ran: the last tool_use has no result "
              "(a standalone `sleep 30` is blocked by the Bash tool, hence the echo chain)",
    ),
    Scenario(
        "cd_persist", "Make a sub directory, go there and show where you are.",
        {"README.md": "# demo\n"},
        lambda cwd: [[bash("mkdir -p sub && cd sub && pwd", "Create and enter sub")],
                     [bash("pwd", "Show cwd")],
                     [text("The shell stayed in sub.")]],
        check=_check_cd, notes="the Bash tool's shell cwd persists across calls",
    ),
    Scenario(
        "large_output", "Print the numbers 1 to 9000.",
        {"README.md": "# demo\n"},
        lambda cwd: [[bash("seq 1 9000", "Print numbers")],
                     [text("Printed 1..9000.")]],
        check=_check_large, notes="output > 30,000 chars is persisted under <session-id>/tool-results/",
    ),
    Scenario(
        "read_media", "Look at the notebook, the two images and the PDF.",
        {"demo.ipynb": NOTEBOOK, "small.png": png(4, 3, (200, 30, 30)), "big.png": png(3000, 2000, (20, 90, 200)),
         "doc.pdf": pdf("Hello from the PDF")},
        lambda cwd: [[tool_use("Read", {"file_path": f"{cwd}/demo.ipynb"})],
                     [tool_use("Read", {"file_path": f"{cwd}/small.png"})],
                     [tool_use("Read", {"file_path": f"{cwd}/big.png"})],
                     [tool_use("Read", {"file_path": f"{cwd}/doc.pdf"})],
                     [text("A notebook, a red and a blue image, and a one-page PDF.")]],
        check=_check_media, notes="Read of a notebook (cell blocks), a small and a large PNG and a PDF",
    ),
    Scenario(
        "cd_continue", "Make a package directory, work inside it and show its marker.",
        {"README.md": "# demo\n"},
        lambda cwd: [[bash("mkdir -p pkg && printf 'inside\\n' > pkg/marker.txt && cd pkg", "Enter pkg")],
                     [bash("cat marker.txt", "Show the marker")],
                     [bash("pwd && ls", "Show where we are")],
                     [text("The shell is in pkg.")]],
        check=_check_cd_continue, notes="`cd pkg` persists: later relative commands run in pkg/",
    ),
    Scenario(
        "tasks", "Plan the work as tasks and track it.",
        {"README.md": "# demo\n"},
        lambda cwd: [task("TaskList"),
                     task("TaskCreate", subject="Write tests", description="Add the tests", activeForm="Writing tests"),
                     task("TaskCreate", subject="Fix bug", description="Fix it", metadata={"k": 1, "keep": "yes"}),
                     task("TaskCreate", subject="Ship"),
                     task("TaskUpdate", taskId="1", status="in_progress"),
                     task("TaskUpdate", taskId="2", addBlockedBy=["1"], owner="me"),
                     task("TaskUpdate", taskId="3", addBlocks=["2", "9"]),
                     task("TaskList"),
                     task("TaskGet", taskId="2"),
                     task("TaskGet", taskId="9"),
                     task("TaskUpdate", taskId="7", status="completed"),
                     task("TaskUpdate", taskId="1", subject="Write tests"),
                     task("TaskUpdate", taskId="2", subject="Fix the bug", description="d2", activeForm="Fixing",
                          metadata={"k": None, "j": "x"}),
                     task("TaskUpdate", taskId="1", status="completed"),
                     task("TaskGet", taskId="2"),
                     task("TaskUpdate", taskId="3", status="deleted"),
                     task("TaskGet", taskId="2"),
                     task("TaskCreate", subject="After delete", description="takes id 4"),
                     task("TaskList"),
                     [text("Tasks tracked.")]],
        check=_check_tasks, extra_args=TOOLS_ARGS,
        notes="TaskCreate/Update/List/Get on the session's task list (<home>/.claude/tasks/<session id>/)",
    ),
    Scenario(
        "unavailable_tools", "Track todos, plan, ask and load a skill.",
        {"README.md": "# demo\n"},
        lambda cwd: [task("TodoWrite", todos=[{"content": "a", "status": "pending", "activeForm": "Doing a"}]),
                     task("EnterPlanMode"),
                     task("ExitPlanMode", plan="1. do it"),
                     task("AskUserQuestion", questions=[
                         {"question": "Which one?", "header": "Pick", "multiSelect": False,
                          "options": [{"label": "X", "description": "x"}, {"label": "Y", "description": "y"}]}]),
                     task("Skill", skill="no-such-skill"),
                     task("TaskCreate", subject=""),
                     [text("None of these ran.")]],
        error_steps=frozenset({0, 1, 2, 3, 4, 5}), extra_args=TOOLS_ARGS,
        notes="-p runs do not offer TodoWrite / plan mode / AskUserQuestion even when named in --tools; an unknown "
              "skill and a blank TaskCreate subject are rejected before running (<tool_use_error>)",
    ),
    Scenario(
        "interactive_tools", "Plan first and ask me before you start.",
        {"README.md": "# demo\n"},
        lambda cwd: [task("EnterPlanMode"),
                     task("AskUserQuestion", questions=[
                         {"question": "Which one?", "header": "Pick", "multiSelect": False,
                          "options": [{"label": "X", "description": "x"}, {"label": "Y", "description": "y"}]}]),
                     task("ExitPlanMode", plan="1. do it"),
                     [bash("cat README.md", "Show the readme")],
                     [text("Planned, asked, approved and done.")]],
        check=_check_interactive, sdk_answer=_answer_as_user,
        extra_args=("--tools", "Bash,Read,EnterPlanMode,ExitPlanMode,AskUserQuestion", "--permission-prompt-tool",
                    "stdio"),
        notes="SDK mode (stream-json input, can_use_tool answered on stdin as a person would: 'X', approve): plan "
              "mode and AskUserQuestion run only this way",
    ),
    Scenario(
        "subagent", "Delegate the file work to a sub-agent, then check it.",
        {"base.txt": "base\n"},
        lambda cwd: [[bash("echo start > log.txt", "Start the log")],
                     task("Agent", description="Write sub.txt", subagent_type="general-purpose",
                          run_in_background=False, prompt="Write sub.txt next to base.txt and report."),
                     [bash("cat sub.txt base.txt", "Check the result")],
                     [text("The sub-agent wrote sub.txt.")]],
        sub_turns=lambda cwd: [[tool_use("Bash", {"command": "echo from-sub > sub.txt && ls",
                                                  "description": "Write sub.txt"}, id="toolu_sub_0001")],
                               [tool_use("Read", {"file_path": f"{cwd}/base.txt"}, id="toolu_sub_0002")],
                               [tool_use("Bash", {"command": "cat nope.txt", "description": "A failing read"},
                                         id="toolu_sub_0003")],
                               [text("Sub-agent report: sub.txt written (from-sub); base.txt says base.")]],
        check=_check_subagent,
        notes="a foreground sub-agent (Agent, run_in_background false) runs Bash, Read and a failing Bash in the "
              "same workspace; its transcript is <session-id>/subagents/agent-<id>.jsonl (+ .meta.json)",
    ),
    Scenario(
        "mcp_tools", "Use the tiny MCP server's tools.",
        {"README.md": "# demo\n"},
        lambda cwd: [[bash("echo ready && sleep 3", "Let the MCP server connect")],
                     task("mcp__tiny__echo", text="hi"),
                     task("mcp__tiny__plain", text="p"),
                     task("mcp__tiny__two", text="t"),
                     task("mcp__tiny__count", label="first"),
                     [bash("wc -l < count.txt | sed 's/^1$/count.txt has one line/'", "Count the lines")],
                     task("mcp__tiny__fail", reason="x"),
                     [text("The MCP tools answered.")]],
        error_steps=frozenset({6}), check=_check_mcp, mcp_servers=MCP_TINY,
        notes="a real stdio MCP server (forkpoint.testing.mcp_server): structured, text-block and error results, and "
              "a tool that writes count.txt in the workspace (the server runs in claude's cwd); the first step "
              "waits for the server to connect (2.1.220 answers 'still connecting' otherwise)",
    ),
    Scenario(
        "notebook_edit", "Edit the notebook.",
        {"demo.ipynb": NOTEBOOK, "old.ipynb": NOTEBOOK.replace('"nbformat_minor": 5', '"nbformat_minor": 4'),
         "crlf.ipynb": NOTEBOOK.replace("\n", "\r\n")},
        lambda cwd: [[tool_use("Read", {"file_path": f"{cwd}/demo.ipynb"})],
                     task("NotebookEdit", notebook_path=f"{cwd}/demo.ipynb", cell_id="add", new_source="x = 1 + 2\nx"),
                     task("NotebookEdit", notebook_path=f"{cwd}/demo.ipynb", cell_id="intro", new_source="## Added",
                          cell_type="markdown", edit_mode="insert"),
                     task("NotebookEdit", notebook_path=f"{cwd}/demo.ipynb", new_source="import os",
                          cell_type="code", edit_mode="insert"),
                     task("NotebookEdit", notebook_path=f"{cwd}/demo.ipynb", cell_id="boom", new_source="",
                          edit_mode="delete"),
                     task("NotebookEdit", notebook_path=f"{cwd}/demo.ipynb", cell_id="note",
                          new_source="now *markdown*", cell_type="markdown"),
                     task("NotebookEdit", notebook_path=f"{cwd}/demo.ipynb", cell_id="intro", new_source="print(1)",
                          cell_type="code"),
                     task("NotebookEdit", notebook_path=f"{cwd}/demo.ipynb", cell_id="cell-0", new_source="# first"),
                     task("NotebookEdit", notebook_path=f"{cwd}/demo.ipynb", cell_id="nope", new_source="x"),
                     task("NotebookEdit", notebook_path=f"{cwd}/old.ipynb", cell_id="add", new_source="y"),
                     [tool_use("Read", {"file_path": f"{cwd}/old.ipynb"})],
                     task("NotebookEdit", notebook_path=f"{cwd}/old.ipynb", cell_id="add", new_source="y = 2",
                          cell_type="code", edit_mode="insert"),
                     [tool_use("Read", {"file_path": f"{cwd}/crlf.ipynb"})],
                     task("NotebookEdit", notebook_path=f"{cwd}/crlf.ipynb", cell_id="boom", new_source="1 / 1"),
                     [text("The notebooks are edited.")]],
        error_steps=frozenset({8, 9}), check=_check_notebook, extra_args=TOOLS_ARGS, keep_final=True,
        notes="NotebookEdit replace / insert (nbformat 4.5: random 8-hex id; 4.4: no id) / delete / type change, "
              "cell-N ids, an unknown id, an unread notebook, a CRLF notebook; workspace-final/ holds the bytes",
    ),
]}


def encode_cwd(cwd: Path) -> str:
    return re.sub(r"[^A-Za-z0-9]", "-", str(cwd))


def compact_request(entry: Json) -> Json:
    """A request log entry with the big, constant parts (system, tools) replaced by hashes / names."""
    out = {k: v for k, v in entry.items() if k != "body"}
    body = entry.get("body")
    if isinstance(body, dict):
        slim = dict(body)
        for key in ("system", "tools"):
            if key in slim:
                slim[f"{key}_sha256"] = hashlib.sha256(json.dumps(slim.pop(key), sort_keys=True).encode()).hexdigest()
        slim["tool_names"] = [t.get("name") for t in body.get("tools") or []]
        out["body"] = slim
    return out


@dataclass
class Recording:
    session: Path
    lines: list[Json]
    session_id: str
    exit_code: int | None
    killed: bool
    hand_cut: bool
    aux: list[str] = field(default_factory=list)


def _tool_use_lines(lines: list[Json]) -> dict[str, int]:
    found = {}
    for index, line in enumerate(lines):
        if line.get("type") == "assistant":
            for block in line.get("message", {}).get("content") or []:
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    found[block["id"]] = index
    return found


def _descendants(root: int) -> list[int]:
    """Pids of every descendant of ``root`` (from /proc)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
    found, frontier = [], [root]
    while frontier:
        children = [pid for pid, ppid in parents.items() if ppid in frontier]
        found += children
        frontier = children
    return found


def _written_tool_ids(path: Path) -> set[str]:
    """tool_use ids in a session file being written (a partial last line is skipped)."""
    lines = []
    for raw in path.read_text("utf-8").splitlines():
        try:
            lines.append(json.loads(raw))
        except ValueError:
            continue
    return set(_tool_use_lines(lines))


def _run_sdk(argv: list[str], env: dict[str, str], cwd: Path, answer: Callable[[Json], Json], out: Path) -> int:
    """One SDK-mode run: the task as a stream-json user message, every control request answered by ``answer``."""
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=(out / "stderr.txt").open("wb"), start_new_session=True)
    assert proc.stdin is not None and proc.stdout is not None
    timer = threading.Timer(RUN_TIMEOUT_S, lambda: os.killpg(proc.pid, signal.SIGKILL))
    timer.start()
    try:
        task = argv[argv.index("-p") + 1]
        proc.stdin.write(json.dumps({"type": "user", "message": {"role": "user", "content": task}}).encode() + b"\n")
        proc.stdin.flush()
        with (out / "stdout.jsonl").open("wb") as stdout:
            for raw in proc.stdout:
                stdout.write(raw)
                message = json.loads(raw)
                if message.get("type") == "control_request":
                    response = {"type": "control_response", "response": {
                        "subtype": "success", "request_id": message["request_id"],
                        "response": answer(message["request"])}}
                    proc.stdin.write(json.dumps(response).encode() + b"\n")
                    proc.stdin.flush()
                elif message.get("type") == "result":
                    proc.stdin.close()
        return proc.wait()
    finally:
        timer.cancel()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def run_claude(runtime: runtimes.Runtime, scenario: Scenario, model: ScriptedModel, expected: list[list[str]],
               cwd: Path, home: Path, out: Path) -> Recording:
    if scenario.sdk_answer is not None:
        argv = [str(runtime.entrypoint), "-p", scenario.task, "--input-format", "stream-json", "--output-format",
                "stream-json", "--verbose", *scenario.extra_args]
        with model.serve() as url:
            env = {"PATH": CLEAN_PATH, "HOME": str(home), "LANG": "C.UTF-8", "TZ": "UTC", "ANTHROPIC_BASE_URL": url,
                   "ANTHROPIC_API_KEY": "dummy", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "IS_SANDBOX": "1"}
            exit_code = _run_sdk(argv, env, cwd, scenario.sdk_answer, out)
        sessions = sorted((home / ".claude" / "projects" / encode_cwd(cwd)).glob("*.jsonl"))
        if len(sessions) != 1:
            raise RuntimeError(f"expected one session file, found {sessions}")
        return Recording(sessions[0], read_jsonl(sessions[0]), sessions[0].stem, exit_code, False, False)
    argv = [str(runtime.entrypoint), "-p", scenario.task, "--output-format", "stream-json", "--verbose",
            "--dangerously-skip-permissions", *scenario.extra_args]
    if scenario.mcp_servers is not None:
        (home / "mcp.json").write_text(json.dumps({"mcpServers": scenario.mcp_servers}))
        argv += ["--mcp-config", str(home / "mcp.json")]
    project = home / ".claude" / "projects" / encode_cwd(cwd)
    with model.serve() as url:
        env = {"PATH": CLEAN_PATH, "HOME": str(home), "LANG": "C.UTF-8", "TZ": "UTC", "ANTHROPIC_BASE_URL": url,
               "ANTHROPIC_API_KEY": "dummy", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "IS_SANDBOX": "1"}
        with (out / "stdout.jsonl").open("wb") as stdout, (out / "stderr.txt").open("wb") as stderr:
            proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                                    start_new_session=True)
            killed = False
            deadline = time.monotonic() + RUN_TIMEOUT_S
            kill_ids = set(expected[scenario.kill_step]) if scenario.kill_step is not None else set()
            try:
                while proc.poll() is None:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"claude did not finish within {RUN_TIMEOUT_S} s")
                    if kill_ids and any(kill_ids <= _written_tool_ids(p) for p in project.glob("*.jsonl")):
                        time.sleep(0.5)  # let the tool start
                        children = _descendants(proc.pid)  # the tool shell runs in its own session
                        os.killpg(proc.pid, signal.SIGKILL)
                        for pid in children:
                            with contextlib.suppress(ProcessLookupError):
                                os.kill(pid, signal.SIGKILL)
                        killed = proc.wait() == -signal.SIGKILL
                        break
                    time.sleep(0.05)
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
    sessions = sorted(project.glob("*.jsonl"))
    if len(sessions) != 1:
        raise RuntimeError(f"expected one session file in {project}, found {sessions}")
    session = sessions[0]
    lines = read_jsonl(session)
    hand_cut = False
    if scenario.kill_step is not None:
        results = {b.get("tool_use_id") for line in lines if line.get("type") == "user"
                   for b in (line["message"]["content"] if isinstance(line["message"]["content"], list) else [])}
        if not killed or kill_ids & results:  # fallback: cut right after the last tool_use line
            cut = max(_tool_use_lines(lines)[i] for i in kill_ids)
            lines, hand_cut = lines[:cut + 1], True
    return Recording(session, lines, session.stem, proc.returncode, killed, hand_cut)


def verify(scenario: Scenario, rec: Recording, expected: list[list[str]], fixture: Path) -> None:
    lines = read_jsonl(fixture / "session.jsonl")
    tool_uses = _tool_use_lines(lines)
    results: dict[str, Json] = {}
    for line in lines:
        content = line.get("message", {}).get("content") if line.get("type") == "user" else None
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "tool_result":
                results[block["tool_use_id"]] = block
    for step, ids in enumerate(expected):
        for tool_id in ids:
            assert tool_id in tool_uses, f"step {step}: tool_use {tool_id} missing"
            if step == scenario.kill_step:
                assert tool_id not in results, f"step {step}: dangling tool_use {tool_id} has a result"
                continue
            assert tool_id in results, f"step {step}: no tool_result for {tool_id}"
            assert bool(results[tool_id].get("is_error")) == (step in scenario.error_steps), results[tool_id]
    assert set(results) <= set(tool_uses), "tool_result without tool_use"
    if scenario.kill_step is None:
        assert rec.exit_code == 0, f"claude exited {rec.exit_code}"
        last = [line for line in lines if line.get("type") == "assistant"][-1]
        assert last["message"]["stop_reason"] == "end_turn", last
    if scenario.check:
        scenario.check(lines, fixture)


def record(version: str, scenario: Scenario) -> Path:
    runtime = installed("claude-code", version)
    probed = runtimes.probe_version(runtime)
    cwd, home = REC_ROOT / scenario.name, HOME_ROOT / scenario.name
    fixture = FIXTURES / version / scenario.name
    fresh_scenario(cwd, home, fixture, scenario.files)
    seed = f"claude-code/{scenario.name}"
    turns = scenario.turns(str(cwd))
    write_script(fixture, seed, turns)
    keyed = {SUBAGENT_KEY: scenario.sub_turns(str(cwd))} if scenario.sub_turns is not None else {}
    model = ScriptedModel(turns, seed=seed, keyed=keyed)
    expected = [[b["id"] for b in model.respond("main", step)[1] if b["type"] == "tool_use"]
                for step in range(len(turns))]
    rec = run_claude(runtime, scenario, model, expected, cwd, home, fixture)
    (fixture / "session.jsonl").write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in rec.lines)
                                           if rec.hand_cut else rec.session.read_text("utf-8"), "utf-8")
    if scenario.keep_final:
        shutil.copytree(cwd, fixture / "workspace-final")
    tasks = home / ".claude" / "tasks" / rec.session_id
    if tasks.is_dir():
        shutil.copytree(tasks, fixture / "tasks", ignore=shutil.ignore_patterns(".lock"))
    subagents = rec.session.parent / rec.session_id / "subagents"
    if subagents.is_dir():
        shutil.copytree(subagents, fixture / rec.session_id / "subagents")  # as Claude keeps them
    persisted = rec.session.parent / rec.session_id / "tool-results"
    if persisted.is_dir():
        shutil.copytree(persisted, fixture / "tool-results")
    write_requests(fixture / "requests.jsonl", model.requests, compact_request)
    init = next((line for line in read_jsonl(fixture / "stdout.jsonl")
                 if line.get("type") == "system" and line.get("subtype") == "init"), {})
    if init.get("session_id") not in (None, rec.session_id):
        raise RuntimeError(f"stdout init session {init.get('session_id')} != file {rec.session_id}")
    meta = {
        "agent": "claude-code", "version": version, "probed_version": probed, "scenario": scenario.name,
        "session_id": rec.session_id, "cwd": str(cwd), "home": str(home),
        "session_path": str(rec.session.relative_to(home)),
        "command": ["claude", "-p", scenario.task, "--input-format", "stream-json", "--output-format", "stream-json",
                    "--verbose", *scenario.extra_args] if scenario.sdk_answer is not None else
                   ["claude", "-p", scenario.task, "--output-format", "stream-json", "--verbose",
                    "--dangerously-skip-permissions", *scenario.extra_args,
                    *(["--mcp-config", "<home>/mcp.json"] if scenario.mcp_servers else [])],
        "mcp_servers": scenario.mcp_servers,
        "entrypoint": runtime.manifest()["entrypoint"],
        "env": {"PATH": CLEAN_PATH, "HOME": str(home), "LANG": "C.UTF-8", "TZ": "UTC",
                "ANTHROPIC_BASE_URL": "<scripted model url>", "ANTHROPIC_API_KEY": "dummy",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "IS_SANDBOX": "1"},
        "exit_code": rec.exit_code, "killed": rec.killed, "hand_cut": rec.hand_cut,
        "expected_tool_ids": expected, "notes": scenario.notes,
        "recorded_at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
    }
    (fixture / "meta.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
    verify(scenario, rec, expected, fixture)
    return fixture


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    releases = (*OLD_LINES, *NOTE_LESS)  # recorded besides the verified versions, each for its own scenarios
    parser.add_argument("--version", action="append", choices=(*agent_spec("claude-code").versions, *releases))
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS))
    args = parser.parse_args()
    failed = []
    for version in args.version or tuple(agent_spec("claude-code").versions):
        for name in args.scenario or [n for n, sc in SCENARIOS.items()
                                      if (version in sc.only if sc.only is not None else version not in releases)]:
            try:
                fixture = record(version, SCENARIOS[name])
                meta = json.loads((fixture / "meta.json").read_text())
                flags = " (hand-cut)" if meta["hand_cut"] else " (killed)" if meta["killed"] else ""
                print(f"ok   {version} {name}: {len(read_jsonl(fixture / 'session.jsonl'))} lines{flags}")
            except (AssertionError, RuntimeError) as error:
                failed.append(f"{version}/{name}")
                print(f"FAIL {version} {name}: {error!r}", file=sys.stderr)
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
