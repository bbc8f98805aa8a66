"""Generated native trajectories with 2 batches (the §12.3 method) and the audit of a prepared prefix.

Each sample lives in its own directory: ``ws/`` is the workspace the trajectory was "recorded" in (its cwd) and
holds one pre-existing file; the trajectory is next to it. Every tool call of both batches is a command that
would create a marker file in the workspace, so a tool that ran (or a prefix that leaked the second action and
got executed) shows up in the inventory. Samples vary: single or parallel first batches, string or block
content, multi-line / unicode outputs, error results, Read / apply_patch calls.

Claude and Codex samples come from forkpoint's test builders; Pi (a v3 session file) is written here line for
line in the shape of the committed real recordings (tests/fixtures/pi). The one-document formats take a
committed fixture as their template, so the samples are what the agent writes; only commands, ids, outputs,
paths and the task are substituted:

* OpenHands (a ``save_trajectory_path`` event list): the system / task / recall events and the event fields of
  the real ``basic`` recording;
* mini-swe-agent (``mini -o`` ``*.traj.json``, 1.17.5 ``mini-swe-agent-1`` and 2.4.6 ``mini-swe-agent-1.1``):
  the real ``basic`` recording of each version (``info`` with its config, system and task messages, the message
  and model-response shapes, the submission tail); observations rendered exactly like the recording's own
  observation template renders them;
* OpenCode (``opencode export``, 1.17.11 and 1.18.33): the session info, message infos and part shapes of the
  real ``parallel`` (bash, read) and ``errors`` (a failed read) recordings of each version;
* SWE-agent 1.1.0 (``.traj``): the constructed ``shell_state`` (function calling) and ``thought_action``
  fixtures (SWE-agent is not installable here, see tests/fixtures/swe_agent/README.md), with the observation
  templates of their replay configs.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import orjson

from forkpoint.testing.claude_sessions import ClaudeSessionBuilder, text, thinking, tool_use
from forkpoint.testing.codex_rollouts import CodexRolloutBuilder

ADAPTERS = ("claude-code", "codex", "pi", "openhands", "mini-swe-agent", "opencode", "swe-agent")
#: agents without a generator yet, and why (the prefix-fidelity and batch benchmarks leave them out, saying so)
NOT_SAMPLED = {"gemini-cli": "added in session 8; its recordings are measured by the fixture benchmarks "
                             "(benchmarks/_fixtures.py) until a generator exists",
               "copilot-cli": "added in session 9; its recordings are measured by the fixture benchmarks "
                              "(benchmarks/_fixtures.py) until a generator exists",
               "qwen-code": "added in session 9; its recordings are measured by the fixture benchmarks "
                            "(benchmarks/_fixtures.py) until a generator exists",
               "openhands-sdk": "added in session 9; its input is a conversation folder (base_state.json + "
                                "events/), which the one-file sample generators do not write yet"}
VERSIONS = {"claude-code": ("2.1.220", "2.1.332"), "codex": ("0.149.0", "0.171.0"), "pi": ("0.83.0",),
            "openhands": ("0.62.0",), "mini-swe-agent": ("1.17.5", "2.4.6"), "opencode": ("1.17.11", "1.18.33"),
            "swe-agent": ("1.1.0",)}
FIXTURES = Path(__file__).resolve().parents[1] / "tests/fixtures"
OPENHANDS_TEMPLATE = FIXTURES / "openhands/0.62.0/basic/trajectory.json"
#: formats that are one JSON document (audited structurally), not JSON lines (audited as a byte-identical head)
DOCUMENT_FORMATS = frozenset({"openhands", "mini-swe-agent", "opencode", "swe-agent"})


@dataclass
class Call:
    call_id: str
    name: str
    arguments: dict[str, Any] | str  # codex apply_patch: the freeform patch text
    output: Any  # native content (Claude: str or list of blocks; Codex, OpenHands: str; Pi: list of blocks)
    is_error: bool = False
    exit_code: int = 0  # OpenHands: a failing command is a normal observation with a non-zero exit code


@dataclass
class Sample:
    adapter: str
    index: int
    root: Path
    trajectory: Path
    workspace: Path
    first: list[Call]
    second: list[Call]
    markers: list[Path] = field(default_factory=list)


def _output(index: int, tag: str) -> str:
    lines = [f"{tag} {index}: ok ✓ — naïve café"]
    lines += [f"line {n:03d} " + "x" * ((index * 37 + n * 11) % 90) for n in range((index * 7) % 23)]
    return "\n".join(lines)


def make(adapter: str, index: int, root: Path) -> Sample:
    base = root / f"{adapter}-{index:02d}"
    workspace = base / "ws"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "notes.txt").write_text(f"pre-existing file of sample {index}\n", "utf-8")
    version = VERSIONS[adapter][index % len(VERSIONS[adapter])]
    if adapter == "claude-code":
        return _claude(index, base, workspace, version)
    if adapter == "pi":
        return _pi(index, base, workspace)
    if adapter == "openhands":
        return _openhands(index, base, workspace)
    if adapter == "mini-swe-agent":
        return _mini(index, base, workspace, version)
    if adapter == "opencode":
        return _opencode(index, base, workspace, version)
    if adapter == "swe-agent":
        return _swe_agent(index, base, workspace)
    return _codex(index, base, workspace, version)


def _claude(index: int, base: Path, workspace: Path, version: str) -> Sample:
    sample = Sample("claude-code", index, base, base / f"session-{index:02d}.jsonl", workspace, [], [])
    builder = ClaudeSessionBuilder(session_id=f"bench-{index:04d}-0000-4000-8000-000000000000", version=version,
                                   cwd=str(workspace))
    builder.user_prompt(f"Benchmark task {index}: look around, then finish.")
    if index % 3 == 0:
        builder.attachment()

    def bash(tag: str, call_id: str, error: bool = False) -> Call:
        marker = workspace / f"marker-{tag}-{call_id}"
        sample.markers.append(marker)
        output: Any = _output(index, tag)
        if error:
            output = f"Exit code 1\n{output}"
        elif index % 5 == 0:
            output = [{"type": "text", "text": output}]
        return Call(call_id, "Bash", {"command": f"touch {marker} && printf '%s\\n' '{tag} {index}'",
                                      "description": f"{tag} step of sample {index}"}, output, error)

    first = [bash("first", f"toolu_{index:02d}a", error=index % 7 == 6)]
    if index % 4 == 3:  # a parallel first batch: a second Bash, or a Read of the pre-existing file
        if index % 8 == 3:
            first.append(bash("first", f"toolu_{index:02d}b"))
        else:
            first.append(Call(f"toolu_{index:02d}b", "Read", {"file_path": str(workspace / "notes.txt")},
                              f"     1\tpre-existing file of sample {index}\n"))
    second = [bash("second", f"toolu_{index:02d}c")]
    for batch, label in ((first, "first"), (second, "second")):
        blocks = [text(f"The {label} step.")]
        if index % 2 and label == "first":
            blocks.insert(0, thinking(f"Thinking about sample {index}."))
        blocks += [tool_use(call.call_id, call.name, dict(call.arguments)) for call in batch
                   if isinstance(call.arguments, dict)]
        builder.assistant(blocks)
        order = [call.call_id for call in reversed(batch)] if len(batch) > 1 else None  # completion order
        builder.results({call.call_id: call.output for call in batch}, order=order,
                        errors=frozenset(call.call_id for call in batch if call.is_error))
    builder.assistant([text(f"Sample {index} is done.")])
    builder.write(sample.trajectory)
    sample.first, sample.second = first, second
    return sample


def _codex(index: int, base: Path, workspace: Path, version: str) -> Sample:
    sample = Sample("codex", index, base, base / f"rollout-2026-11-30T00-00-00-bench{index:02d}.jsonl", workspace,
                    [], [])
    builder = CodexRolloutBuilder(session_id=f"019a0000-0000-7000-8000-{index:012d}", version=version,
                                  cwd=str(workspace))
    builder.user(f"Benchmark task {index}: look around, then finish.")

    def execute(tag: str, call_id: str, error: bool = False) -> Call:
        marker = workspace / f"marker-{tag}-{call_id}"
        sample.markers.append(marker)
        code = 1 if error else 0
        body = _output(index, tag)
        output = (f"Chunk ID: {index:06x}\nWall time: 0.0{index % 10}00 seconds\nProcess exited with code {code}\n"
                  f"Original token count: {len(body) // 4}\nOutput:\n{body}\n")
        arguments: dict[str, Any] = {"cmd": f"touch {marker} && printf '%s\\n' '{tag} {index}'"}
        if index % 3 == 1:
            arguments["workdir"] = str(workspace)
        return Call(call_id, "exec_command", arguments, output, error)

    first = [execute("first", f"call_{index:02d}a", error=index % 7 == 6)]
    if index % 4 == 3:
        first.append(execute("first", f"call_{index:02d}b"))
    if index % 5 == 1:  # apply_patch (freeform custom tool call) as the first batch instead
        name = f"patched-{index}.txt"
        sample.markers.append(workspace / name)
        patch = f"*** Begin Patch\n*** Add File: {name}\n+hello {index}\n*** End Patch\n"
        result = f"Exit code: 0\nWall time: 0 seconds\nOutput:\nSuccess. Updated the following files:\nA {name}\n"
        first = [Call(f"call_{index:02d}p", "apply_patch", patch, result)]
    second = [execute("second", f"call_{index:02d}c")]
    for label, batch in (("first", first), ("second", second)):
        builder.assistant(f"The {label} step.")
        for call in batch:
            if isinstance(call.arguments, str):
                builder.item({"type": "custom_tool_call", "id": f"ctc_{call.call_id}", "status": "completed",
                              "call_id": call.call_id, "name": call.name, "input": call.arguments})
            else:
                builder.call(call.name, call.arguments, call.call_id)
        for call in batch:
            kind = "custom_tool_call_output" if isinstance(call.arguments, str) else "function_call_output"
            builder.item({"type": kind, "id": f"out_{call.call_id}", "call_id": call.call_id, "output": call.output})
    builder.assistant(f"Sample {index} is done.")
    builder.write(sample.trajectory)
    sample.first, sample.second = first, second
    return sample


def _pi(index: int, base: Path, workspace: Path) -> Sample:
    """A Pi 0.83.0 v3 session file, field for field like tests/fixtures/pi/0.83.0/*/session.jsonl."""
    sample = Sample("pi", index, base, base / f"2026-11-30T00-00-{index:02d}-000Z_bench-{index:04d}.jsonl", workspace,
                    [], [])
    lines: list[dict[str, Any]] = []
    clock = [1796075270000 + index * 1000]

    def stamp() -> tuple[str, int]:
        clock[0] += 7
        millis = clock[0]
        return f"2026-11-30T21:47:{(millis // 1000) % 60:02d}.{millis % 1000:03d}Z", millis

    def entry(kind: str, **fields: Any) -> None:
        parent = lines[-1]["id"] if len(lines) > 1 else None
        lines.append({"type": kind, "id": f"{index:02x}{len(lines):06x}", "parentId": parent,
                      "timestamp": stamp()[0], **fields})

    def message(body: dict[str, Any]) -> None:
        entry("message", message={**body, "timestamp": stamp()[1]})

    def assistant(content: list[dict[str, Any]], stop: str) -> None:
        message({"role": "assistant", "content": content, "api": "openai-completions", "provider": "scripted",
                 "model": "scripted-model", "usage": {"input": 100, "output": 50, "cacheRead": 0, "cacheWrite": 0,
                                                      "reasoning": 0, "totalTokens": 150,
                                                      "cost": {"input": 0, "output": 0, "cacheRead": 0,
                                                               "cacheWrite": 0, "total": 0}},
                 "stopReason": stop, "responseId": f"chatcmpl-bench{index:02d}{len(lines):04d}",
                 "rawStopReason": "tool_calls" if stop == "toolUse" else "stop"})

    lines.append({"type": "session", "version": 3, "id": f"01a22e6d-b141-7fdb-a788-{index:012d}",
                  "timestamp": "2026-11-30T21:47:50.465Z", "cwd": str(workspace)})
    entry("model_change", provider="scripted", modelId="scripted-model")
    entry("thinking_level_change", thinkingLevel="off")
    task = f"Benchmark task {index}: look around, then finish."
    message({"role": "user", "content": [{"type": "text", "text": task}]})

    def bash(tag: str, call_id: str, error: bool = False) -> Call:
        marker = workspace / f"marker-{tag}-{call_id}"
        sample.markers.append(marker)
        output = _output(index, tag) + "\n"
        if error:
            output += "\n\nCommand exited with code 1"
        return Call(call_id, "bash", {"command": f"touch {marker} && printf '%s\\n' '{tag} {index}'"},
                    [{"type": "text", "text": output}], error)

    first = [bash("first", f"call_{index:02d}a", error=index % 7 == 6)]
    if index % 4 == 3:
        first.append(Call(f"call_{index:02d}b", "read", {"path": "notes.txt"},
                          [{"type": "text", "text": f"pre-existing file of sample {index}\n"}]))
    second = [bash("second", f"call_{index:02d}c")]
    for label, batch in (("first", first), ("second", second)):
        content: list[dict[str, Any]] = []
        if index % 2 and label == "first":
            content.append({"type": "thinking", "thinking": f"Thinking about sample {index}.",
                            "thinkingSignature": "reasoning_content"})
        content += [{"type": "toolCall", "id": call.call_id, "name": call.name, "arguments": call.arguments}
                    for call in batch]
        assistant(content, "toolUse")
        for call in batch:
            result: dict[str, Any] = {"role": "toolResult", "toolCallId": call.call_id, "toolName": call.name,
                                      "content": call.output}
            if call.is_error:
                result["details"] = {}
            message({**result, "isError": call.is_error})
    assistant([{"type": "text", "text": f"Sample {index} is done."}], "stop")
    sample.trajectory.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    sample.first, sample.second = first, second
    return sample


@cache
def _openhands_template() -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The real recording's head (system, task, recall) and its first run action, run observation and finish."""
    events: list[dict[str, Any]] = json.loads(OPENHANDS_TEMPLATE.read_text("utf-8"))
    head = events[: next(i for i, e in enumerate(events) if e.get("action") == "run")]
    action = next(e for e in events if e.get("action") == "run")
    observation = next(e for e in events if e.get("observation") == "run")
    finish = next(e for e in events if e.get("action") == "finish")
    return head, action, observation, finish


def _openhands(index: int, base: Path, workspace: Path) -> Sample:
    """An OpenHands 0.62.0 trajectory.json built from the real ``basic`` recording's events."""
    sample = Sample("openhands", index, base, base / f"trajectory-{index:02d}.json", workspace, [], [])
    head, action_template, observation_template, finish_template = _openhands_template()
    recorded_cwd = json.loads((OPENHANDS_TEMPLATE.parent / "meta.json").read_text("utf-8"))["cwd"]
    task = f"Benchmark task {index}: look around, then finish."
    events: list[dict[str, Any]] = json.loads(json.dumps(head).replace(recorded_cwd, str(workspace)))
    for event in events:
        if event.get("action") == "message":
            event["message"] = event["args"]["content"] = task
        elif event.get("action") == "recall":
            event["message"] = f"Retrieving content for: {task[:50]}"
            event["args"]["query"] = task

    def bash(tag: str, call_id: str, error: bool = False) -> Call:
        marker = workspace / f"marker-{tag}-{call_id}"
        sample.markers.append(marker)
        return Call(call_id, "execute_bash", {"command": f"touch {marker} && printf '%s\\n' '{tag} {index}'",
                                              "security_risk": "LOW"}, _output(index, tag) + "\n",
                    exit_code=1 if error else 0)

    first = [bash("first", f"call_bench{index:02d}a", error=index % 7 == 6)]
    if index % 4 == 3:
        first.append(bash("first", f"call_bench{index:02d}b"))
    second = [bash("second", f"call_bench{index:02d}c")]
    clock = [0]

    def add(event: dict[str, Any]) -> dict[str, Any]:
        clock[0] += 1
        event["id"] = events[-1]["id"] + 1
        event["timestamp"] = f"2026-11-30T21:52:{47 + clock[0] // 10:02d}.{clock[0] % 10}00000"
        events.append(event)
        return event

    for label, batch in (("first", first), ("second", second)):
        thought = f"The {label} step." if index % 2 or label == "second" else None
        response = copy.deepcopy(action_template["tool_call_metadata"]["model_response"])
        response["id"] = f"chatcmpl-bench{index:02d}{label}"
        response["choices"][0]["message"]["content"] = thought
        response["choices"][0]["message"]["tool_calls"] = [
            {"function": {"arguments": json.dumps(call.arguments), "name": call.name}, "id": call.call_id,
             "type": "function"} for call in batch]
        for position, call in enumerate(batch):
            metadata = {"function_name": call.name, "tool_call_id": call.call_id, "model_response": response,
                        "total_calls_in_response": len(batch)}
            command = call.arguments["command"] if isinstance(call.arguments, dict) else ""
            action = add({**copy.deepcopy(action_template), "message": f"Running command: {command}",
                          "tool_call_metadata": metadata})
            action["args"] = {**action["args"], "command": command,
                              "thought": (thought or "") if position == 0 else ""}
            code = call.exit_code
            observation = add({**copy.deepcopy(observation_template), "cause": action["id"],
                               "message": f"Command `{command}` executed with exit code {code}.",
                               "tool_call_metadata": metadata, "content": call.output, "success": code == 0})
            observation["extras"]["command"] = command
            observation["extras"]["metadata"] = {**observation["extras"]["metadata"], "exit_code": code,
                                                 "working_dir": str(workspace)}
    finish = add(copy.deepcopy(finish_template))
    finish["tool_call_metadata"]["tool_call_id"] = f"call_bench{index:02d}f"
    finish["args"]["final_thought"] = f"Sample {index} is done."
    sample.trajectory.write_text(json.dumps(events, indent=4), "utf-8")
    sample.first, sample.second = first, second
    return sample


def _fixture(agent: str, version: str, scenario: str, name: str) -> tuple[Any, str]:
    """A committed fixture document and the cwd it was recorded in (from its meta.json)."""
    folder = FIXTURES / agent / version / scenario
    return (json.loads((folder / name).read_text("utf-8")),
            json.loads((folder / "meta.json").read_text("utf-8"))["cwd"])


def _relocated(document: Any, recorded: str, workspace: Path) -> Any:
    """A deep copy of ``document`` with the recorded cwd replaced by the sample's workspace (absolute or not)."""
    return json.loads(json.dumps(document).replace(recorded.lstrip("/"), str(workspace).lstrip("/")))


def _touch(workspace: Path, sample: Sample, tag: str, call_id: str, index: int, *, quiet: bool = False) -> str:
    marker = workspace / f"marker-{tag}-{call_id}"
    sample.markers.append(marker)
    return f"touch {marker}" if quiet else f"touch {marker} && printf '%s\\n' '{tag} {index}'"


# -- mini-swe-agent ---------------------------------------------------------------------------------------------------

MINI_TASK = "Fix the add() bug in calc.py."  # the task of the real ``basic`` recordings


def mini_observation_v1(returncode: int, output: str) -> str:
    """1.17.5's ``action_observation_template`` for outputs under 10,000 characters."""
    assert len(output) < 10000
    return f"<returncode>{returncode}</returncode>\n<output>\n{output}</output>"


def mini_observation_v2(returncode: int, output: str) -> str:
    """2.4.6's ``observation_template`` for outputs under 10,000 characters (jinja's ``tojson``: HTML-safe)."""
    assert len(output) < 10000
    encoded = json.dumps(output)
    for char, escape in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("'", "\\u0027")):
        encoded = encoded.replace(char, escape)
    return f'{{\n  "returncode": {returncode},\n  "output": {encoded}\n}}'


def _mini(index: int, base: Path, workspace: Path, version: str) -> Sample:
    """A ``mini -o`` trajectory built from the real ``basic`` recording of ``version``."""
    sample = Sample("mini-swe-agent", index, base, base / f"bench-{index:02d}.traj.json", workspace, [], [])
    template, recorded = _fixture("mini_swe_agent", version, "basic", "trajectory.traj.json")
    data = _relocated(template, recorded, workspace)
    source = data["messages"]
    v2 = data.get("trajectory_format") == "mini-swe-agent-1.1"
    task = f"Benchmark task {index}: look around, then finish."
    messages = copy.deepcopy(source[:2])
    assert MINI_TASK in messages[1]["content"]
    messages[1]["content"] = messages[1]["content"].replace(MINI_TASK, task)
    assistant_template, observation_template = source[2], source[3]
    clock = [1796077400.0 + index]

    def tick() -> float:
        clock[0] += 0.0123
        return round(clock[0], 7)

    def response(content: str, tool_calls: list[dict[str, Any]] | None, label: str) -> dict[str, Any]:
        body: dict[str, Any] = copy.deepcopy(assistant_template["extra"]["response"])
        body["id"] = f"chatcmpl-bench{index:02d}{label}"
        body["choices"][0]["message"]["content"] = content
        body["choices"][0]["message"]["tool_calls"] = copy.deepcopy(tool_calls)
        return body

    def bash(tag: str, call_id: str, error: bool = False) -> Call:
        command = _touch(workspace, sample, tag, call_id, index)
        output = _output(index, tag) + "\n"
        code = 1 if error else 0
        content = mini_observation_v2(code, output) if v2 else mini_observation_v1(code, output)
        return Call(call_id, "bash", {"command": command}, content, error, code)

    if v2:
        first = [bash("first", f"call_bench{index:02d}a", error=index % 7 == 6)]
        if index % 4 == 3:  # a parallel batch: 2.x runs every tool call of one response
            first.append(bash("first", f"call_bench{index:02d}b"))
        second = [bash("second", f"call_bench{index:02d}c")]
    else:  # 1.x: one action per turn, its call id is forkpoint's ``mini-<message index>-1``
        first = [bash("first", "mini-2-1", error=index % 7 == 6)]
        second = [bash("second", "mini-4-1")]
    for label, batch in (("first", first), ("second", second)):
        thought = f"The {label} step."
        if v2:
            tool_calls = [{"function": {"arguments": json.dumps(call.arguments), "name": "bash"}, "id": call.call_id,
                           "type": "function"} for call in batch]
            message = copy.deepcopy(assistant_template)
            message["content"], message["tool_calls"] = thought, tool_calls
            actions = [{"command": call.arguments["command"], "tool_call_id": call.call_id} for call in batch
                       if isinstance(call.arguments, dict)]
            message["extra"] = {**message["extra"], "response": response(thought, tool_calls, label),
                                "timestamp": tick(), "actions": actions}
            messages.append(message)
            for call in batch:
                observation = copy.deepcopy(observation_template)
                observation["content"], observation["tool_call_id"] = call.output, call.call_id
                observation["extra"] = {**observation["extra"], "raw_output": _output(index, label) + "\n",
                                        "returncode": call.exit_code, "timestamp": tick(), "exception_info": ""}
                messages.append(observation)
        else:
            command = batch[0].arguments["command"] if isinstance(batch[0].arguments, dict) else ""
            content = f"THOUGHT: {thought}\n\n```bash\n{command}\n```"
            messages.append({**copy.deepcopy(assistant_template), "content": content, "timestamp": tick(),
                             "extra": {"response": response(content, None, label)}})
            messages.append({**copy.deepcopy(observation_template), "content": batch[0].output, "timestamp": tick()})
    # the submitting turn (never a batch) and what follows it, as the recording has them
    submission = f"pre-existing file of sample {index}\n"
    tail = copy.deepcopy(source[-3:] if v2 else source[-2:])
    final = tail[0]
    submit = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat notes.txt"
    if v2:
        final["content"] = "Done."
        final["tool_calls"] = [{"function": {"arguments": json.dumps({"command": submit}), "name": "bash"},
                                "id": f"call_bench{index:02d}f", "type": "function"}]
        final["extra"] = {**final["extra"], "response": response("Done.", final["tool_calls"], "final"),
                          "actions": [{"command": submit, "tool_call_id": f"call_bench{index:02d}f"}],
                          "timestamp": tick()}
        tail[1]["tool_call_id"] = f"call_bench{index:02d}f"
        tail[1]["extra"]["timestamp"] = tick()
        tail[2]["content"] = submission
        tail[2]["extra"] = {"exit_status": "Submitted", "submission": submission}
    else:
        final["content"] = f"THOUGHT: Done.\n\n```bash\n{submit}\n```"
        final["timestamp"] = tick()
        final["extra"] = {"response": response(final["content"], None, "final")}
        tail[1]["content"], tail[1]["timestamp"] = submission, tick()
    messages += tail
    data["messages"] = messages
    data["info"]["submission"] = submission
    data["info"]["model_stats"]["api_calls"] = 3
    sample.trajectory.write_text(json.dumps(data, indent=2), "utf-8")
    sample.first, sample.second = first, second
    return sample


# -- OpenCode ---------------------------------------------------------------------------------------------------------


def _opencode(index: int, base: Path, workspace: Path, version: str) -> Sample:
    """An ``opencode export`` JSON built from the real ``parallel`` and ``errors`` recordings of ``version``."""
    template, recorded = _fixture("opencode", version, "parallel", "export.json")
    export = _relocated(template, recorded, workspace)
    errors, errors_cwd = _fixture("opencode", version, "errors", "export.json")
    failed_read = next(part for message in _relocated(errors, errors_cwd, workspace)["messages"]
                       for part in message["parts"] if part.get("state", {}).get("status") == "error"
                       and part["tool"] == "read")
    user_template, assistant_template, final_template = export["messages"][0], export["messages"][1], \
        export["messages"][-1]
    parts = {(part["type"], part.get("tool")): part for part in assistant_template["parts"]}
    session = f"ses_{0xdd1900000000 + index:012x}Bench{index:02d}Sample0"
    sample = Sample("opencode", index, base, base / f"{session}.json", workspace, [], [])
    counter = [0]
    clock = [1796075300000 + index * 1000]

    def ident(kind: str) -> str:
        """OpenCode ids: 12 hex digits that grow with time (storage order), then 14 random-looking characters."""
        counter[0] += 1
        return f"{kind}_{0x22e6e0000000 + index * 0x100000 + counter[0] * 0x10:012x}Bench{index:02d}x{counter[0]:06d}"

    def now() -> int:
        clock[0] += 13
        return clock[0]

    def part(message_id: str, fields: dict[str, Any]) -> dict[str, Any]:
        return {**fields, "id": ident("prt"), "sessionID": session, "messageID": message_id}

    task = f"Benchmark task {index}: look around, then finish."
    user_id = ident("msg")
    info = {**copy.deepcopy(user_template["info"]), "id": user_id, "sessionID": session, "time": {"created": now()}}
    messages: list[dict[str, Any]] = [
        {"info": info, "parts": [part(user_id, {"type": "text", "text": json.dumps(task)})]}]

    def bash(tag: str, call_id: str, error: bool = False) -> tuple[Call, dict[str, Any]]:
        command = _touch(workspace, sample, tag, call_id, index)
        output = _output(index, tag) + "\n"
        state = {**copy.deepcopy(parts[("tool", "bash")]["state"]),
                 "input": {"command": command, "description": f"{tag} step of sample {index}"},
                 "output": output, "metadata": {"output": output, "exit": 1 if error else 0, "truncated": False},
                 "title": command, "time": {"start": now(), "end": now()}}
        return Call(call_id, "bash", state["input"], output, exit_code=1 if error else 0), \
            {"type": "tool", "tool": "bash", "callID": call_id, "state": state}

    def read(call_id: str, missing: bool) -> tuple[Call, dict[str, Any]]:
        if missing:
            path = str(workspace / "missing.txt")
            state = {**copy.deepcopy(failed_read["state"]), "input": {"filePath": path},
                     "error": f"File not found: {path}", "time": {"start": now(), "end": now()}}
            return Call(call_id, "read", state["input"], state["error"], True), \
                {"type": "tool", "tool": "read", "callID": call_id, "state": state}
        path, text = str(workspace / "notes.txt"), f"pre-existing file of sample {index}"
        output = (f"<path>{path}</path>\n<type>file</type>\n<content>\n1: {text}\n\n(End of file - total 1 lines)\n"
                  "</content>")
        state = copy.deepcopy(parts[("tool", "read")]["state"])
        state.update(input={"filePath": path}, output=output, title=path.lstrip("/"),
                     time={"start": now(), "end": now()})
        state["metadata"].update(preview=text)
        state["metadata"]["display"].update(path=path, text=text, lineEnd=1, totalLines=1)
        return Call(call_id, "read", state["input"], output), \
            {"type": "tool", "tool": "read", "callID": call_id, "state": state}

    first = [bash("first", f"call_bench{index:02d}a", error=index % 7 == 6)]
    if index % 4 == 3:  # a parallel batch: a second bash, or a read of the pre-existing file
        first.append(bash("first", f"call_bench{index:02d}b") if index % 8 == 3 else
                     read(f"call_bench{index:02d}b", missing=False))
    if index % 5 == 4:  # a failed call (status "error")
        first.append(read(f"call_bench{index:02d}e", missing=True))
    second = [bash("second", f"call_bench{index:02d}c")]

    def assistant(content: list[dict[str, Any]], finish: str, reason_template: dict[str, Any]) -> None:
        message_id = ident("msg")
        created = now()
        info = {**copy.deepcopy(assistant_template["info"]), "parentID": user_id, "id": message_id,
                "sessionID": session, "finish": finish}
        built = [part(message_id, {"type": "step-start"})]
        built += [part(message_id, fields) for fields in content]
        built.append(part(message_id, {key: value for key, value in copy.deepcopy(reason_template).items()
                                       if key not in ("id", "sessionID", "messageID")}))
        info["time"] = {"created": created, "completed": now()}
        messages.append({"info": info, "parts": built})

    finish_part = parts[("step-finish", None)]
    for label, batch in (("first", first), ("second", second)):
        content: list[dict[str, Any]] = []
        if index % 2 and label == "first":
            content.append({"type": "reasoning", "text": f"Thinking about sample {index}.",
                            "time": {"start": now(), "end": now()}})
        if index % 3 == 0:
            content.append({"type": "text", "text": f"The {label} step.", "time": {"start": now(), "end": now()}})
        content += [tool for _, tool in batch]
        assistant(content, "tool-calls", finish_part)
    final_finish = next(p for p in final_template["parts"] if p["type"] == "step-finish")
    assistant([{"type": "text", "text": f"Sample {index} is done.", "time": {"start": now(), "end": now()}}], "stop",
              final_finish)
    export["info"] = {**export["info"], "id": session, "time": {"created": clock[0] - 9000, "updated": now()}}
    export["messages"] = messages
    sample.trajectory.write_text(json.dumps(export, indent=2, ensure_ascii=False), "utf-8")
    sample.first, sample.second = [call for call, _ in first], [call for call, _ in second]
    return sample


# -- SWE-agent --------------------------------------------------------------------------------------------------------

SWE_TRUNCATED = ("<response clipped><NOTE>Observations should not exceeded {limit} characters. {elided} characters "
                 "were elided. Please try a different command that produces less output or use head/tail/grep/"
                 "redirect the output to a file. Do not use interactive pagers.</NOTE>")
SWE_NO_OUTPUT = "Your command ran successfully and did not produce any output."


def _swe_agent(index: int, base: Path, workspace: Path) -> Sample:
    """A SWE-agent 1.1.0 ``.traj``: function calling (even samples) or thought-action, from the SWE-agent fixtures."""
    calling = index % 2 == 0
    scenario = "shell_state" if calling else "thought_action"
    template, recorded = _fixture("swe_agent", "1.1.0", scenario, f"toy__{scenario}-1.traj")
    data = _relocated(template, recorded, workspace)
    config = json.loads(data["replay_config"])
    instance_id = f"bench__sample-{index:02d}-1"
    sample = Sample("swe-agent", index, base, base / f"{instance_id}.traj", workspace, [], [])
    task = f"Benchmark task {index}: look around, then finish."
    recorded_task = config["problem_statement"]["text"]
    config["problem_statement"].update(text=task, id=instance_id)
    limit = config["agent"]["templates"].get("max_observation_length")
    history = copy.deepcopy(data["history"][:2])
    history[1]["content"][0]["text"] = history[1]["content"][0]["text"].replace(recorded_task, task)
    steps: list[dict[str, Any]] = []
    calls: list[Call] = []
    for number, tag in enumerate(("first", "second"), start=1):
        call_id = f"call_bench{index:02d}{'ac'[number - 1]}" if calling else f"swe-agent-step-{number}"
        quiet = tag == "first" and index % 5 == 2  # a command without output: the no-output template
        action = _touch(workspace, sample, tag, call_id, index, quiet=quiet)
        raw = "" if quiet else _output(index, tag) + "\n"
        thought = f"The {tag} step."
        assistant: dict[str, Any] = {"role": "assistant", "content": thought, "thought": thought, "action": action,
                                     "agent": "main", "message_type": "action", "thinking_blocks": []}
        if calling:
            assistant["tool_calls"] = [{"index": 1, "id": call_id, "type": "function",
                                        "function": {"name": "bash", "arguments": json.dumps({"command": action})}}]
            message = SWE_NO_OUTPUT if not raw.strip() else f"OBSERVATION:\n{raw}"
        else:
            assistant["content"] = f"{thought}\n\n```\n{action}\n```"
            message = "Observation: " + raw
            if isinstance(limit, int) and len(raw) > limit:
                message = "Observation: " + raw[:limit] + SWE_TRUNCATED.format(limit=limit, elided=len(raw) - limit)
        query = copy.deepcopy(history)
        history.append(assistant)
        item: dict[str, Any] = {"role": "tool" if calling else "user", "content": message, "agent": "main",
                                "message_type": "observation"}
        if calling:
            item["tool_call_ids"] = [call_id]
        history.append(item)
        steps.append({"action": action, "observation": raw, "response": assistant["content"], "thought": thought,
                      "execution_time": 0.05 * number, "state": {"working_dir": str(workspace)}, "query": query,
                      "extra_info": {}})
        calls.append(Call(call_id, "bash", {"action": action}, message))
    if calling:  # the cache_control history processor (last 2 messages) marks the observation messages
        for item, call in zip([h for h in history if h["message_type"] == "observation"][-2:], calls[-2:],
                              strict=True):
            item["content"] = call.output = [{"type": "text", "text": item["content"],
                                              "cache_control": {"type": "ephemeral"}}]
    data["history"], data["trajectory"] = history, steps
    data["replay_config"] = json.dumps(config)
    data["info"].update(submission=None, exit_status="exit_cost",
                        model_stats={"instance_cost": 0.0, "tokens_sent": 2000, "tokens_received": 40, "api_calls": 2})
    sample.trajectory.write_text(json.dumps(data, indent=2), "utf-8")
    sample.first, sample.second = calls[:1], calls[1:]
    return sample


# -- audit of a prepared prefix ------------------------------------------------------------------------------------


def audit_prefix(sample: Sample, prefix: Path) -> list[str]:
    """Problems with a prepared native prefix (empty = faithful): first batch exact, second action excluded."""
    raw = prefix.read_bytes()
    problems: list[str] = []
    try:
        if sample.adapter in DOCUMENT_FORMATS:  # one JSON document: compared structurally with the source's
            source = json.loads(sample.trajectory.read_bytes())
            problems, calls, results = DOCUMENT_VIEWS[sample.adapter](json.loads(raw), source)
        else:
            source_lines = sample.trajectory.read_bytes().splitlines()
            prefix_lines = raw.splitlines()
            if prefix_lines != source_lines[: len(prefix_lines)]:
                problems.append("the prefix is not a byte-identical head of the source")
            calls, results = VIEWS[sample.adapter](prefix_lines)
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, StopIteration) as error:
        return [f"the prefix cannot be read as a {sample.adapter} record: {type(error).__name__}: {error}"]
    want = {call.call_id: call for call in sample.first}
    if set(calls) != set(want):
        problems.append(f"tool calls in the prefix {sorted(calls)} != first batch {sorted(want)}")
    for call_id, call in want.items():
        if calls.get(call_id) != call.arguments:
            problems.append(f"{call_id}: arguments differ")
        if results.get(call_id) != (call.output, call.is_error):
            problems.append(f"{call_id}: historical observation differs")
    for call in sample.second:
        if call.call_id.encode() in raw or f"second {sample.index}".encode() in raw:
            problems.append(f"the second action ({call.call_id}) leaked into the prefix")
    return problems


def _claude_view(lines: list[bytes]) -> tuple[dict[str, Any], dict[str, Any]]:
    calls: dict[str, Any] = {}
    results: dict[str, Any] = {}
    for line in lines:
        record = orjson.loads(line)
        content = (record.get("message") or {}).get("content")
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "tool_use":
                calls[block["id"]] = block["input"]
            elif block.get("type") == "tool_result":
                results[block["tool_use_id"]] = (block.get("content"), bool(block.get("is_error")))
    return calls, results


def _codex_view(lines: list[bytes]) -> tuple[dict[str, Any], dict[str, Any]]:
    calls: dict[str, Any] = {}
    results: dict[str, Any] = {}
    for line in lines:
        record = orjson.loads(line)
        payload = record.get("payload") or {}
        kind = payload.get("type")
        if record.get("type") != "response_item":
            continue
        if kind == "function_call":
            calls[payload["call_id"]] = json.loads(payload["arguments"])
        elif kind == "custom_tool_call":
            calls[payload["call_id"]] = payload["input"]
        elif kind in ("function_call_output", "custom_tool_call_output"):
            output = payload["output"]
            results[payload["call_id"]] = (output, "Process exited with code 1" in output)
    return calls, results


def _pi_view(lines: list[bytes]) -> tuple[dict[str, Any], dict[str, Any]]:
    calls: dict[str, Any] = {}
    results: dict[str, Any] = {}
    for line in lines:
        message = orjson.loads(line).get("message") or {}
        if message.get("role") == "assistant":
            calls.update({block["id"]: block["arguments"] for block in message["content"]
                          if block.get("type") == "toolCall"})
        elif message.get("role") == "toolResult":
            results[message["toolCallId"]] = (message["content"], bool(message.get("isError")))
    return calls, results


def _head(problems: list[str], what: str, prefix: Any, source: list[Any]) -> list[Any]:
    """``prefix`` must be a list equal to the start of ``source`` (returned as a list either way)."""
    if not isinstance(prefix, list) or prefix != source[: len(prefix)]:
        problems.append(f"the prefix's {what} are not the head of the source's")
        return prefix if isinstance(prefix, list) else []
    return prefix


def _openhands_document(document: Any, source: Any) -> tuple[list[str], dict[str, Any], dict[str, Any]]:
    """The prefix is the head of the source's event list."""
    problems: list[str] = []
    events = _head(problems, "events", document, source)
    return problems, *_openhands_view(events)


def _openhands_view(events: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Arguments from the model response's tool call; the observation's raw content and exit code."""
    calls: dict[str, Any] = {}
    results: dict[str, Any] = {}
    for event in events:
        metadata = event.get("tool_call_metadata") or {}
        call_id = metadata.get("tool_call_id")
        if "action" in event and call_id and event["action"] != "finish":
            tool_calls = metadata["model_response"]["choices"][0]["message"]["tool_calls"]
            calls[call_id] = next(json.loads(call["function"]["arguments"]) for call in tool_calls
                                  if call["id"] == call_id)
        elif "observation" in event and call_id:
            results[call_id] = (event.get("content"), event["observation"] == "error")
    return calls, results


MINI_ACTION = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)  # 1.17.5's action_regex
MINI_RETURNCODE = re.compile(r"^<returncode>(-?\d+)</returncode>")


def _mini_document(document: Any, source: Any) -> tuple[list[str], dict[str, Any], dict[str, Any]]:
    """Messages: the head of the source's. Everything else as recorded, except what says the run ended: ``info``'s
    exit status and submission unset ("" on 2.x, null on 1.x) and ``model_stats.api_calls`` = the prefix's model
    turns (here: its assistant messages)."""
    problems: list[str] = []
    messages = _head(problems, "messages", document["messages"], source["messages"])
    v2 = source["trajectory_format"] == "mini-swe-agent-1.1"
    info = copy.deepcopy(source["info"])
    info["exit_status"] = info["submission"] = "" if v2 else None
    info["model_stats"]["api_calls"] = sum(message["role"] == "assistant" for message in messages)
    if document["info"] != info:
        problems.append("info differs from the source's beyond exit_status, submission and model_stats.api_calls")
    if {key: value for key, value in document.items() if key not in ("info", "messages")} != {
            key: value for key, value in source.items() if key not in ("info", "messages")}:
        problems.append("the prefix's top-level fields differ from the source's")
    calls: dict[str, Any] = {}
    results: dict[str, Any] = {}
    for position, message in enumerate(messages):
        if v2 and message["role"] == "assistant":
            calls.update({action["tool_call_id"]: {"command": action["command"]}
                          for action in (message.get("extra") or {}).get("actions") or []})
        elif v2 and message["role"] == "tool":
            extra = message["extra"]
            results[message["tool_call_id"]] = (message["content"],
                                                extra["returncode"] != 0 or bool(extra["exception_info"]))
        elif not v2 and message["role"] == "assistant" and position >= 2:
            actions = MINI_ACTION.findall(message["content"])
            if len(actions) == 1 and position + 1 < len(messages):
                observation = messages[position + 1]["content"]
                calls[f"mini-{position}-1"] = {"command": actions[0].strip()}
                match = MINI_RETURNCODE.match(observation)
                results[f"mini-{position}-1"] = (observation, bool(match and match.group(1) != "0"))
    return problems, calls, results


def _opencode_document(document: Any, source: Any) -> tuple[list[str], dict[str, Any], dict[str, Any]]:
    """Session info as recorded; messages (with all their parts) the head of the source's."""
    problems: list[str] = []
    if set(document) != {"info", "messages"} or document["info"] != source["info"]:
        problems.append("the prefix's session info differs from the source's")
    messages = _head(problems, "messages", document["messages"], source["messages"])
    calls: dict[str, Any] = {}
    results: dict[str, Any] = {}
    for part in (part for message in messages for part in message["parts"] if part["type"] == "tool"):
        state = part["state"]
        calls[part["callID"]] = state["input"]
        failed = state["status"] == "error"
        results[part["callID"]] = (state["error"] if failed else state["output"], failed)
    return problems, calls, results


SWE_END_OF_RUN = ("exit_status", "submission", "edited_files30", "edited_files50", "edited_files70")


def _swe_agent_document(document: Any, source: Any) -> tuple[list[str], dict[str, Any], dict[str, Any]]:
    """``trajectory`` and ``history`` heads of the source's, history ending at the last step's observation;
    ``replay_config`` / ``environment`` as recorded; ``info`` without what describes the end of the run."""
    problems: list[str] = []
    steps = _head(problems, "trajectory steps", document["trajectory"], source["trajectory"])
    history = _head(problems, "history messages", document["history"], source["history"])
    if set(document) != set(source) or any(document[key] != source[key] for key in ("replay_config", "environment")):
        problems.append("the prefix's top-level fields differ from the source's")
    if document["info"] != {key: value for key, value in source["info"].items() if key not in SWE_END_OF_RUN}:
        problems.append("info differs from the source's beyond the end-of-run fields")
    assistants = [i for i, item in enumerate(history) if item["role"] == "assistant"]
    if len(assistants) != len(steps) or not history or history[-1]["role"] not in ("user", "tool"):
        problems.append("the prefix's history does not end with the observation of its last step")
    calls: dict[str, Any] = {}
    results: dict[str, Any] = {}
    for number, (at, step) in enumerate(zip(assistants, steps, strict=False), start=1):
        tool_calls = history[at].get("tool_calls")
        call_id = tool_calls[0]["id"] if tool_calls else f"swe-agent-step-{number}"
        calls[call_id] = {"action": step["action"]}
        if at + 1 < len(history) and history[at + 1]["role"] in ("user", "tool"):
            results[call_id] = (history[at + 1]["content"], False)
    return problems, calls, results


VIEWS = {"claude-code": _claude_view, "codex": _codex_view, "pi": _pi_view}
DOCUMENT_VIEWS = {"openhands": _openhands_document, "mini-swe-agent": _mini_document, "opencode": _opencode_document,
                  "swe-agent": _swe_agent_document}
