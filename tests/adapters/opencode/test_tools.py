"""Tool policy (workspace confinement), the observation taken from OpenCode's tool part, and the session cut."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from forkpoint import runtimes
from forkpoint.adapters.opencode.parse import parse_opencode
from forkpoint.adapters.opencode.session import cut_export
from forkpoint.adapters.opencode.tools import (
    SKILL_MISSING,
    OpenCodeToolExecutor,
    check_paths,
    normalize_volatile,
    observation,
    skill_missing,
    wire_call_id,
)
from forkpoint.core.errors import ReplayError
from forkpoint.core.model import CallPolicy, FreshObservation, Mode, Plan, RunContext, ToolCall
from forkpoint.process import childenv
from forkpoint.sandbox import open_sandbox

FIXTURES = Path(__file__).parents[2] / "fixtures" / "opencode"


def call(name: str, **arguments: Any) -> ToolCall:
    return ToolCall("call_1", name, arguments, None, native={"callID": "call_1", "id": "prt_1"})


@pytest.mark.parametrize(("name", "arguments"), [
    ("read", {"filePath": "/etc/passwd"}),
    ("write", {"filePath": "../outside.txt", "content": "x"}),
    ("glob", {"pattern": "*", "path": "/"}),
    ("bash", {"command": "ls", "workdir": "/tmp"}),
    ("edit", {"filePath": "link/secret.txt", "oldString": "a", "newString": "b"}),
    ("read", {"filePath": ""}),
])
def test_paths_outside_the_workspace_are_refused_before_any_effect(tmp_path: Path, name: str,
                                                                   arguments: dict[str, Any]) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "link").symlink_to(tmp_path)
    with pytest.raises(ReplayError) as caught:
        check_paths(call(name, **arguments), workspace)
    assert caught.value.before_effect and caught.value.kind.category == "executor_error"


def patch_text(*lines: str) -> str:
    return "\n".join(("*** Begin Patch", *lines, "*** End Patch"))


@pytest.mark.parametrize("lines", [
    ("*** Add File: ../planted.txt", "+x"),
    ("*** Add File: /tmp/forkpoint-planted-by-a-patch.txt", "+x"),
    ("*** Update File: inside.txt", "*** Move to: ../planted.txt", "@@", "-a", "+b"),
    ("*** Delete File: link/victim.txt",),
    ("  *** Add File: ../planted.txt", "+x"),  # blanks before a header: checked too (fail closed)
])
def test_apply_patch_files_outside_the_workspace_are_refused_before_any_effect(tmp_path: Path,
                                                                               lines: tuple[str, ...]) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "inside.txt").write_text("a\n")
    (tmp_path / "victim.txt").write_text("keep\n")
    (workspace / "link").symlink_to(tmp_path)
    with pytest.raises(ReplayError) as caught:
        check_paths(call("apply_patch", patchText=patch_text(*lines)), workspace)
    assert caught.value.before_effect and "outside the workspace" in str(caught.value)


def test_apply_patch_inside_the_workspace_passes(tmp_path: Path) -> None:
    check_paths(call("apply_patch", patchText=patch_text("*** Add File: sub/new.txt", "+x",
                                                         f"*** Update File: {tmp_path}/a.txt", "@@", "-a", "+b")),
                tmp_path)


def test_apply_patch_and_edit_both_run_on_the_real_binary(tmp_path: Path) -> None:
    """apply_patch exists only for a GPT model id, edit only for any other: one replay runs both, in order."""
    runtime = runtimes.find("opencode", "1.18.33")
    if runtime is None:
        pytest.skip("opencode 1.18.33 is not installed")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("alpha\nbeta\n")
    outside = tmp_path / "planted.txt"
    executor = OpenCodeToolExecutor(RunContext(workspace, tmp_path / "state", tmp_path / "out"), runtime.entrypoint)
    try:
        with childenv.passing({}, temp_dir=tmp_path / "run-tmp"):
            patched = executor.run(ToolCall("c1", "apply_patch", {"patchText": patch_text(
                "*** Update File: notes.txt", "@@", " alpha", "-beta", "+BETA")}, None, native={"callID": "c1"}))
            edited = executor.run(ToolCall("c2", "edit", {"filePath": str(workspace / "notes.txt"),
                                                          "oldString": "alpha", "newString": "ALPHA"}, None,
                                           native={"callID": "c2"}))
            with pytest.raises(ReplayError):
                executor.run(ToolCall("c3", "apply_patch", {"patchText": patch_text("*** Add File: ../planted.txt",
                                                                                    "+x")}, None,
                                      native={"callID": "c3"}))
    finally:
        executor.close()
    assert patched.content.startswith("Success. Updated the following files:\nM ") and not patched.is_error
    assert edited.content == "Edit applied successfully." and not edited.is_error
    assert (workspace / "notes.txt").read_text() == "ALPHA\nBETA\n"
    assert not outside.exists()


def test_paths_inside_the_workspace_pass(tmp_path: Path) -> None:
    for arguments in ({"filePath": str(tmp_path / "a.txt")}, {"filePath": "sub/b.txt"}, {}):
        check_paths(call("read", **arguments), tmp_path)
    check_paths(call("bash", command="cat /etc/hostname"), tmp_path)  # a command's own paths are its business


def test_observation_follows_opencode_conventions() -> None:
    completed = {"status": "completed", "output": "out\nerr\n", "metadata": {"exit": 3, "truncated": False}}
    fresh = observation(call("bash"), {"tool": "bash", "state": completed}, 5)
    assert (fresh.content, fresh.is_error, fresh.return_code) == ("out\nerr\n", False, 3)
    failed = {"status": "error", "error": "File not found: /x"}
    fresh = observation(call("read"), {"tool": "read", "state": failed}, 5)
    assert (fresh.content, fresh.is_error, fresh.native) == ("File not found: /x", True, failed)
    with pytest.raises(ReplayError, match="running"):
        observation(call("read"), {"tool": "read", "state": {"status": "running"}}, 5)


def test_only_the_saved_output_path_is_volatile() -> None:
    text = "...output truncated...\n\nFull output saved to: /h/.local/share/opencode/tool-output/tool_abc123\n\n9000\n"
    assert normalize_volatile(text) == "...output truncated...\n\nFull output saved to: <saved output>\n\n9000\n"
    assert normalize_volatile("hello\n") == "hello\n" and normalize_volatile(["x"]) == ["x"]
    assert wire_call_id(ToolCall("call_2@prt_9", "bash", {}, None, native={"callID": "call_2"})) == "call_2"


def test_rebuilt_cut_carries_the_fresh_state_and_keeps_the_rest() -> None:
    trajectory = parse_opencode(FIXTURES / "1.17.11" / "errors" / "export.json")
    plan = Plan(trajectory, 2, Mode.REPLAY_ONLY, "p")
    fresh = {c.call_id: FreshObservation(c.call_id, "NEW", native={"status": "completed", "output": "NEW",
                                                                   "metadata": {"exit": 0}, "title": "t"})
             for c in plan.calls}
    export = cut_export(plan, fresh)
    assert export["info"]["permission"] and len(export["messages"]) == 3  # user + the two batch messages
    tools = [p for m in export["messages"] for p in m["parts"] if p["type"] == "tool"]
    assert [p["state"]["output"] for p in tools] == ["NEW", "NEW"]
    assert tools[1]["state"]["input"] == plan.calls[1].arguments and "error" not in tools[1]["state"]
    historical = cut_export(plan, None)
    assert json.dumps(historical).count("File not found") == 1
    with pytest.raises(ReplayError, match="no fresh observation"):
        cut_export(plan, {})


def test_an_event_log_cannot_be_rebuilt() -> None:
    trajectory = parse_opencode(FIXTURES / "1.17.11" / "errors" / "events.jsonl")
    with pytest.raises(ReplayError, match="opencode export ses_"):
        cut_export(Plan(trajectory, 1, Mode.PREPARE_ONLY, "p"), None)


RECORDED = "/tmp/forkpoint-rec/opencode-under-bwrap"
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


@needs_bwrap
def test_under_bwrap_paths_are_read_as_opencode_sees_them(tmp_path: Path) -> None:
    """The recorded cwd is the workspace inside the sandbox; the workspace's host path is outside it."""
    workspace = tmp_path / "elsewhere" / "ws"
    workspace.mkdir(parents=True)
    (workspace / "notes.txt").write_text("hello\n")
    (workspace / "link").symlink_to(tmp_path)
    sandbox = open_sandbox("bwrap", workspace, RECORDED)
    for arguments in ({"filePath": f"{RECORDED}/notes.txt"}, {"filePath": "sub/new.txt"}, {}):
        check_paths(call("read", **arguments), workspace, sandbox)
    check_paths(call("apply_patch", patchText=patch_text(f"*** Add File: {RECORDED}/made.txt", "+x")), workspace,
                sandbox)
    for arguments in ({"filePath": str(workspace / "notes.txt")}, {"filePath": f"{RECORDED}/../x"},
                      {"filePath": f"{RECORDED}/link/secret"}):
        with pytest.raises(ReplayError, match="outside the workspace"):
            check_paths(call("read", **arguments), workspace, sandbox)


@needs_bwrap
def test_the_tool_host_runs_in_the_sandbox(tmp_path: Path) -> None:
    """The real opencode tool host under bwrap: its tools see the workspace at the recorded cwd, and a replayed
    bash call cannot write outside it, read a canary in the host HOME, reach a host listener or leave a process."""
    from forkpoint.testing.held_out import PROBE_COMMAND, PROBE_FILE, HeldOut

    runtime = runtimes.find("opencode", "1.18.33")
    if runtime is None:
        pytest.skip("opencode 1.18.33 is not installed")
    workspace = tmp_path / "elsewhere" / "ws"
    workspace.mkdir(parents=True)
    (workspace / "notes.txt").write_text("alpha\n")
    context = RunContext(workspace, tmp_path / "state", tmp_path / "out",
                         sandbox=open_sandbox("bwrap", workspace, RECORDED))
    with HeldOut(tmp_path) as probes:
        (workspace / PROBE_FILE).write_text(probes.script(workspace))
        executor = OpenCodeToolExecutor(context, runtime.entrypoint)
        try:
            with childenv.passing({}, temp_dir=tmp_path / "run-tmp"):
                probed = executor.run(ToolCall("c2", "bash", {"command": f"pwd && {PROBE_COMMAND}",
                                                              "description": "probe"}, None, native={"callID": "c2"}))
                read = executor.run(ToolCall("c1", "read", {"filePath": f"{RECORDED}/notes.txt"}, None,
                                             native={"callID": "c1"}))
                written = executor.run(ToolCall("c3", "write", {"filePath": f"{RECORDED}/made.txt", "content": "x\n"},
                                                None, native={"callID": "c3"}))
        finally:
            executor.close()
        # the detached processes lived in the tool host's sandbox (one opencode for every call, as OpenCode runs
        # them): they end with it
        assert probes.violations(str(probed.content)) == []
        assert "alpha" in str(read.content) and not read.is_error
        assert str(probed.content).startswith(f"{RECORDED}\n") and "probed" in str(probed.content), probed.content
    assert not written.is_error and (workspace / "made.txt").read_text() == "x\n"


def _skill_call(directory: str | None, name: str = "release-notes") -> ToolCall:
    state: dict[str, Any] = {"status": "completed", "input": {"name": name}, "output": "<skill_content>",
                             "metadata": {"name": name, **({"dir": directory} if directory else {})}}
    return ToolCall("call_s", "skill", {"name": name}, None, native={"callID": "call_s", "state": state})


def test_a_missing_skill_names_the_file_the_original_loaded() -> None:
    error = 'Skill "release-notes" not found. Available skills: customize-opencode'
    inside = skill_missing(_skill_call("/Users/a/proj/.opencode/skills/release-notes"), error, "/Users/a/proj")
    assert inside is not None and inside.startswith(f"{SKILL_MISSING}: OpenCode finds no skill 'release-notes'")
    assert "put .opencode/skills/release-notes/SKILL.md into the workspace" in inside
    outside = skill_missing(_skill_call("/Users/a/.config/opencode/skill/release-notes"), error, "/Users/a/proj")
    assert outside is not None and "outside the project (its own configuration)" in outside
    assert skill_missing(_skill_call(None), "some other failure", "/p") is None


def test_a_skill_the_workspace_lacks_is_a_stale_fallback_on_the_real_binary(tmp_path: Path) -> None:
    """The skill fixture's load, replayed where its SKILL.md is absent: OpenCode's own skill tool finds nothing, and
    the call is a precise stale fallback, not a silently different observation (the old code refused every skill
    load up front instead of re-running it)."""
    runtime = runtimes.find("opencode", "1.18.33")
    if runtime is None:
        pytest.skip("opencode 1.18.33 is not installed")
    fixture = FIXTURES / "1.18.33" / "skill"
    trajectory = parse_opencode(fixture / "export.json")
    loaded = trajectory.batches[0].calls[0]
    assert (loaded.name, loaded.policy) == ("skill", CallPolicy.FRESH)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    executor = OpenCodeToolExecutor(RunContext(workspace, tmp_path / "state", tmp_path / "out"), runtime.entrypoint,
                                    recorded_cwd=trajectory.cwd)
    try:
        with childenv.passing({}, temp_dir=tmp_path / "run-tmp"), pytest.raises(ReplayError) as caught:
            executor.run(loaded)
    finally:
        executor.close()
    assert caught.value.stale_fallback and caught.value.before_effect
    assert SKILL_MISSING in caught.value.message
    assert "put .opencode/skills/release-notes/SKILL.md into the workspace" in caught.value.message


@needs_bwrap
def test_the_tool_host_runs_in_an_image_root(tmp_path: Path) -> None:
    """In an image root (here: bash and coreutils' echo with their libraries, nothing else) the relay inside the
    sandbox starts the host's opencode binary on the host's loader and libraries (``host_command``), not on the
    image's (it exited 127 there: the image had no libpthread, libdl nor libm); the bash call runs the image's
    bash."""
    from forkpoint.testing.images import host_programs_root

    runtime = runtimes.find("opencode", "1.18.33")
    if runtime is None:
        pytest.skip("opencode 1.18.33 is not installed")
    root = tmp_path / "root"
    host_programs_root(root, ["/bin/bash", "/bin/sh", "/bin/echo"])
    workspace = tmp_path / "elsewhere" / "ws"
    workspace.mkdir(parents=True)
    context = RunContext(workspace, tmp_path / "state", tmp_path / "out",
                         sandbox=open_sandbox("bwrap", workspace, RECORDED, rootfs=str(root)))
    executor = OpenCodeToolExecutor(context, runtime.entrypoint)
    try:
        with childenv.passing({}, temp_dir=tmp_path / "run-tmp"):
            fresh = executor.run(ToolCall("c1", "bash", {"command": "echo in-image > made.txt; echo $BASH_VERSION",
                                                         "description": "echo"}, None, native={"callID": "c1"}))
    finally:
        executor.close()
    assert not fresh.is_error, fresh.content
    assert (workspace / "made.txt").read_text() == "in-image\n"
