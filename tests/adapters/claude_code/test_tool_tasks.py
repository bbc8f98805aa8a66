"""The task list tools on hostile input: ids that look like paths, links planted in the agent home, coerced input.

The measured texts and files are proven on the real fixtures in ``test_fixture_fidelity``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from forkpoint.core.errors import ErrorKind, ReplayError

from .conftest import Run

NEW = "2.1.332"


def test_the_list_lives_where_the_continued_claude_reads_it(
        make: Callable[[str], Run], tmp_path: Path, session_id: str) -> None:
    run = make(NEW)
    assert run("TaskCreate", subject="A", description="d").content == "Task #1 created successfully: A"
    folder = tmp_path / "home" / ".claude" / "tasks" / session_id
    assert (folder / "1.json").read_text() == (
        '{\n  "id": "1",\n  "subject": "A",\n  "description": "d",\n  "status": "pending",\n  "blocks": [],\n'
        '  "blockedBy": []\n}')
    assert run("TaskUpdate", taskId="1", status="deleted").content == "Updated task #1 deleted"
    assert not (folder / "1.json").exists() and (folder / ".highwatermark").read_text() == "1"
    assert run("TaskCreate", subject="B", description="d").content == "Task #2 created successfully: B"


@pytest.mark.parametrize("task_id", ["../../../escape", "1/../1", "/etc/passwd", "1.json"])
def test_ids_that_look_like_paths_are_just_unknown_tasks(
        make: Callable[[str], Run], tmp_path: Path, task_id: str) -> None:
    run = make(NEW)
    run("TaskCreate", subject="A", description="d")
    assert run("TaskGet", taskId=task_id).content == "Task not found"
    assert run("TaskUpdate", taskId=task_id, status="deleted").content == "Task not found"
    assert sorted(path.name for path in tmp_path.rglob("*.json")) == ["1.json"]


def test_a_link_planted_as_the_task_folder_is_never_followed(
        make: Callable[[str], Run], tmp_path: Path, session_id: str) -> None:
    run = make(NEW)
    outside = tmp_path / "outside"
    outside.mkdir()
    tasks = tmp_path / "home" / ".claude" / "tasks"
    tasks.mkdir(parents=True)
    (tasks / session_id).symlink_to(outside)  # what a replayed `ln -s` in the agent's HOME could leave
    with pytest.raises(ReplayError) as error:
        run("TaskCreate", subject="A", description="d")
    assert error.value.kind is ErrorKind.EXECUTOR and "task list" in error.value.message
    assert list(outside.iterdir()) == []


def test_a_link_planted_as_the_config_dir_is_never_followed(make: Callable[[str], Run], tmp_path: Path) -> None:
    run = make(NEW)
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "home").mkdir(exist_ok=True)
    os.symlink(outside, tmp_path / "home" / ".claude")
    with pytest.raises(ReplayError) as error:
        run("TaskCreate", subject="A", description="d")
    assert "symbolic link" in error.value.message
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize(("name", "arguments"), [
    ("TaskCreate", {"task": {"subject": "A"}}),
    ("TaskCreate", {"subject": ["A"]}),
    ("TaskUpdate", {"taskId": 1}),
    ("TaskUpdate", {"taskId": "1", "addBlocks": [2]}),
    ("TaskGet", {}),
])
def test_input_claude_would_coerce_is_refused_before_any_effect(
        make: Callable[[str], Run], tmp_path: Path, name: str, arguments: dict[str, object]) -> None:
    run = make(NEW)
    with pytest.raises(ReplayError) as error:
        run(name, **arguments)
    assert error.value.before_effect and "forkpoint does not re-run it" in error.value.message
    assert not (tmp_path / "home" / ".claude" / "tasks").exists()


def test_internal_tasks_are_hidden_by_javascript_truthiness(make: Callable[[str], Run]) -> None:
    """TaskList hides ``metadata._internal`` tasks when the value is truthy in JS: ``[]`` and ``{}`` are."""
    run = make(NEW)
    run("TaskCreate", subject="seen", description="d", metadata={"_internal": 0})
    run("TaskCreate", subject="hidden", description="d", metadata={"_internal": []})
    assert run("TaskList").content == "#1 [pending] seen"



def test_the_policy_knows_the_same_task_tools_without_loading_this_module() -> None:
    from forkpoint.adapters.claude_code import policy, tool_tasks

    assert policy._TASK_TOOLS == tool_tasks.TASK_TOOLS
