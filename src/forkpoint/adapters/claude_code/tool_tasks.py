"""Claude Code's task list tools (TaskCreate / TaskUpdate / TaskList / TaskGet), re-executed with their own text.

They touch no workspace: their observation is a function of the input and of the run's own earlier task calls.
Every rule here was measured on the real 2.1.332 binary (scripted model, ``tests/fixtures/claude_code/2.1.332/
tasks``) and read from its tool code:

- Ids are ``max(highest task file id, high-water mark) + 1``; deleting a task raises the high-water mark to its id
  (so ids are never reused) and removes it from every other task's ``blocks`` / ``blockedBy``.
- TaskCreate: ``description`` defaults to ``subject``; ``Task #<id> created successfully: <subject>``
  (2.1.220's ``toolUseResult`` leaves the description out).
- TaskUpdate: only fields that change are reported (``Updated task #<id> <fields>``, empty list kept as is),
  ``metadata`` always counts and merges (``null`` deletes a key), ``addBlocks`` / ``addBlockedBy`` link both tasks
  (a missing other task is skipped but the field is still reported); ``status: deleted`` deletes; an unknown id is
  ``Task not found``.
- TaskList: ``#<id> [<status>] <subject>`` + `` (<owner>)`` + `` [blocked by #a, #b]`` (completed blockers
  hidden), by numeric id; ``No tasks found`` when empty. TaskGet: subject, status, description, open blockers
  (2.1.220: all blockers), blocks; ``Task not found``.
- The list is kept where Claude keeps it, ``<config_dir>/tasks/<session id>/<id>.json`` (``JSON.stringify(task,
  null, 2)``, plus ``.lock`` and ``.highwatermark``), so the continued agent sees the replayed tasks. The files are
  written through the confined writer: a link a replayed command planted there is never followed.

Input Claude would coerce (a wrapped or mistyped call) is not re-run: ``policy.task_input_problem`` marks it stale.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from forkpoint.adapters.claude_code.jstext import js_json_stringify, js_truthy
from forkpoint.adapters.claude_code.tool_profile import ToolOutcome
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.fs import ConfinementError, open_confined, write_file_confined

#: Task fields in Claude's schema order (the order of a task file once Claude has rewritten it).
_FIELDS = ("id", "subject", "description", "activeForm", "owner", "status", "blocks", "blockedBy", "metadata")
_STATUSES = ("pending", "in_progress", "completed")
_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "subject": str, "description": str, "activeForm": str, "owner": str, "taskId": str, "metadata": dict,
    "addBlocks": list, "addBlockedBy": list, "status": str,
}
_ALLOWED = {
    "TaskCreate": ({"subject", "description"}, {"subject", "description", "activeForm", "metadata"}),
    "TaskUpdate": ({"taskId"}, {"taskId", "subject", "description", "activeForm", "status", "addBlocks",
                                "addBlockedBy", "owner", "metadata"}),
    "TaskGet": ({"taskId"}, {"taskId"}),
    "TaskList": (set(), set()),
}
TASK_TOOLS = frozenset(_ALLOWED)


def task_input_problem(name: str, arguments: dict[str, Any]) -> str | None:
    """Why a task call's input is not the plain schema shape forkpoint re-runs (Claude would coerce or reject it)."""
    required, allowed = _ALLOWED[name]
    if name == "TaskCreate":
        required = {"subject"}  # description missing: Claude backfills it with the subject (measured)
    missing = sorted(required - set(arguments))
    extra = sorted(set(arguments) - allowed)
    if missing or extra:
        return f"{name} input {'lacks ' + ', '.join(missing) if missing else 'has ' + ', '.join(extra)}"
    for key, value in arguments.items():
        if not isinstance(value, _FIELD_TYPES[key]) or isinstance(value, bool):
            return f"{name} input field {key!r} has the wrong type"
        if isinstance(value, list) and not all(isinstance(item, str) for item in value):
            return f"{name} input field {key!r} is not a list of strings"
    if name == "TaskUpdate" and arguments.get("status") not in (None, *_STATUSES, "deleted"):
        return f"TaskUpdate status {arguments.get('status')!r} is not one Claude accepts"
    if name == "TaskCreate" and "description" not in arguments and not arguments["subject"].strip():
        return "TaskCreate with a blank subject is rejected by Claude before running"
    return None


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


class TaskList:
    """One session's task list: in memory (the truth for the replay) and mirrored to Claude's own files."""

    def __init__(self, directory: Path, root: Path, modern: bool = True) -> None:
        self.modern = modern  # 2.1.332's texts (2.1.220: no description in the result, TaskGet shows done blockers)
        self.directory = directory  # <config_dir>/tasks/<session id>
        self.root = root  # the confinement root of the writes (the agent's config dir)
        self.tasks: dict[str, dict[str, Any]] = {}
        self.high_water = 0

    # -- storage -------------------------------------------------------------------------------------------------

    def _write(self, name: str, data: str) -> None:
        if self.root.is_symlink():  # the agent's config dir is forkpoint's: a link there was planted
            raise ReplayError(ErrorKind.EXECUTOR, f"{self.root} is a symbolic link; forkpoint does not follow it")
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            write_file_confined(self.root, self.directory / name, data.encode("utf-8"), create_parents=True)
        except (ConfinementError, OSError) as exc:
            raise ReplayError(ErrorKind.EXECUTOR, f"cannot keep Claude's task list in {self.directory}: {exc}") from exc

    def _save(self, task_id: str) -> None:
        task = self.tasks[task_id]
        ordered = {key: task[key] for key in _FIELDS if task.get(key) is not None}
        self._write(f"{task_id}.json", js_json_stringify(ordered, 2))

    def _delete_file(self, task_id: str) -> None:
        try:  # the folder is opened through the confined walk, the file unlinked in it (a link is never followed)
            fd = open_confined(self.root, self.directory, os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:
            return
        except (ConfinementError, OSError) as exc:
            raise ReplayError(ErrorKind.EXECUTOR, f"cannot delete task file {task_id}: {exc}") from exc
        try:
            os.unlink(f"{task_id}.json", dir_fd=fd)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise ReplayError(ErrorKind.EXECUTOR, f"cannot delete task file {task_id}: {exc}") from exc
        finally:
            os.close(fd)

    # -- tools -------------------------------------------------------------------------------------------------

    def create(self, arguments: dict[str, Any]) -> ToolOutcome:
        subject = arguments["subject"]
        description = arguments.get("description", subject)
        numeric = [int(key) for key in self.tasks]
        task_id = str(max([*numeric, self.high_water, 0]) + 1)
        if not self.tasks and not self.directory.exists():
            self._write(".lock", "")
        self.tasks[task_id] = {"id": task_id, "subject": subject, "description": description,
                               "activeForm": arguments.get("activeForm"), "status": "pending", "blocks": [],
                               "blockedBy": [], "metadata": arguments.get("metadata")}
        self._save(task_id)
        created = {"id": task_id, "subject": subject, "description": description}
        if not self.modern:
            del created["description"]
        native = {"task": created}
        return ToolOutcome(f"Task #{task_id} created successfully: {subject}", False, native)

    def update(self, arguments: dict[str, Any]) -> ToolOutcome:
        task_id = arguments["taskId"]
        task = self.tasks.get(task_id)
        if task is None:
            native = {"success": False, "taskId": task_id, "updatedFields": [], "error": "Task not found"}
            return ToolOutcome("Task not found", False, native)
        fields: list[str] = []
        changes: dict[str, Any] = {}
        for key in ("subject", "description", "activeForm", "owner"):
            if key in arguments and arguments[key] != task.get(key):
                changes[key] = arguments[key]
                fields.append(key)
        if "metadata" in arguments:
            fields.append("metadata")
        status = arguments.get("status")
        status_change: dict[str, str] | None = None
        if status == "deleted":
            self._remove(task_id)
            native = {"success": True, "taskId": task_id, "updatedFields": ["deleted"],
                      "statusChange": {"from": task["status"], "to": "deleted"}}
            return ToolOutcome(f"Updated task #{task_id} deleted", False, native)
        if status is not None and status != task["status"]:
            changes["status"] = status
            fields.append("status")
            status_change = {"from": task["status"], "to": status}
        if fields:
            task.update(changes)
            if "metadata" in arguments:
                merged = dict(task.get("metadata") or {})
                for key, value in arguments["metadata"].items():
                    if value is None:
                        merged.pop(key, None)
                    else:
                        merged[key] = value
                task["metadata"] = merged
            self._save(task_id)
        added = [other for other in arguments.get("addBlocks") or [] if other not in task["blocks"]]
        for other in added:
            self._link(task_id, other)
        if added:
            fields.append("blocks")
        added = [other for other in arguments.get("addBlockedBy") or [] if other not in task["blockedBy"]]
        for other in added:
            self._link(other, task_id)
        if added:
            fields.append("blockedBy")
        native = {"success": True, "taskId": task_id, "updatedFields": fields}
        if status_change is not None:
            native["statusChange"] = status_change
        return ToolOutcome(f"Updated task #{task_id} {', '.join(fields)}", False, native)

    def list(self, arguments: dict[str, Any]) -> ToolOutcome:
        del arguments
        shown = [task for _, task in sorted(self.tasks.items(), key=lambda item: int(item[0]))
                 if not (isinstance(task.get("metadata"), dict) and js_truthy(task["metadata"].get("_internal")))]
        completed = {task["id"] for task in shown if task["status"] == "completed"}
        entries = []
        for task in shown:
            entry = {"id": task["id"], "subject": task["subject"], "status": task["status"]}
            if task.get("owner") is not None:
                entry["owner"] = task["owner"]
            entry["blockedBy"] = [other for other in task["blockedBy"] if other not in completed]
            entries.append(entry)
        if not entries:
            return ToolOutcome("No tasks found", False, {"tasks": []})
        lines = []
        for entry in entries:
            owner = f" ({entry['owner']})" if entry.get("owner") else ""
            blocked = entry["blockedBy"]
            blockers = f" [blocked by {', '.join('#' + other for other in blocked)}]" if blocked else ""
            lines.append(f"#{entry['id']} [{entry['status']}] {entry['subject']}{owner}{blockers}")
        return ToolOutcome("\n".join(lines), False, {"tasks": entries})

    def get(self, arguments: dict[str, Any]) -> ToolOutcome:
        task = self.tasks.get(arguments["taskId"])
        if task is None:
            return ToolOutcome("Task not found", False, {"task": None})
        blocked = [other for other in task["blockedBy"]
                   if not self.modern or (self.tasks.get(other) or {}).get("status") != "completed"]
        lines = [f"Task #{task['id']}: {task['subject']}", f"Status: {task['status']}",
                 f"Description: {task['description']}"]
        if blocked:
            lines.append(f"Blocked by: {', '.join('#' + other for other in blocked)}")
        if task["blocks"]:
            lines.append(f"Blocks: {', '.join('#' + other for other in task['blocks'])}")
        native = {"task": {"id": task["id"], "subject": task["subject"], "description": task["description"],
                           "status": task["status"], "blocks": list(task["blocks"]), "blockedBy": blocked}}
        return ToolOutcome("\n".join(lines), False, native)

    # -- helpers -----------------------------------------------------------------------------------------------

    def _link(self, blocker: str, blocked: str) -> None:
        """Claude's blockTask: both tasks must exist; each side gains the other once."""
        first, second = self.tasks.get(blocker), self.tasks.get(blocked)
        if first is None or second is None:
            return
        if blocked not in first["blocks"]:
            first["blocks"] = _unique([*first["blocks"], blocked])
            self._save(blocker)
        if blocker not in second["blockedBy"]:
            second["blockedBy"] = _unique([*second["blockedBy"], blocker])
            self._save(blocked)

    def _remove(self, task_id: str) -> None:
        if re.fullmatch(r"[0-9]+", task_id) and int(task_id) > self.high_water:
            self.high_water = int(task_id)
            self._write(".highwatermark", str(self.high_water))
        del self.tasks[task_id]
        self._delete_file(task_id)
        for other_id, other in sorted(self.tasks.items(), key=lambda item: int(item[0])):
            if task_id in other["blocks"] or task_id in other["blockedBy"]:
                other["blocks"] = [item for item in other["blocks"] if item != task_id]
                other["blockedBy"] = [item for item in other["blockedBy"] if item != task_id]
                self._save(other_id)

    def run(self, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        problem = task_input_problem(name, arguments)
        if problem is not None:
            raise ReplayError(ErrorKind.EXECUTOR, f"{problem}; forkpoint does not re-run it", before_effect=True)
        handler = {"TaskCreate": self.create, "TaskUpdate": self.update, "TaskList": self.list, "TaskGet": self.get}
        return handler[name](arguments)
