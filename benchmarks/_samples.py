"""Generated native trajectories with 2 batches (the §12.3 method) and the audit of a prepared prefix.

Each sample lives in its own directory: ``ws/`` is the workspace the trajectory was "recorded" in (its cwd) and
holds one pre-existing file; the trajectory is next to it. Every tool call of both batches is a command that
would create a marker file in the workspace, so a tool that ran (or a prefix that leaked the second action and
got executed) shows up in the inventory. Samples vary: single or parallel first batches, string or block
content, multi-line / unicode outputs, error results, Read / apply_patch calls.

Claude and Codex samples come from forkpoint's test builders; Pi (a v3 session file) and OpenHands (a
``save_trajectory_path`` event list) samples are written here line for line in the shape of the committed real
recordings (tests/fixtures/pi, tests/fixtures/openhands): OpenHands' system / task / recall events and its event
fields are copied from the real ``basic`` recording, only commands, ids, outputs and paths are substituted.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import orjson

from forkpoint.testing.claude_sessions import ClaudeSessionBuilder, text, thinking, tool_use
from forkpoint.testing.codex_rollouts import CodexRolloutBuilder

ADAPTERS = ("claude-code", "codex", "pi", "openhands")
VERSIONS = {"claude-code": ("2.1.220", "2.1.332"), "codex": ("0.149.0", "0.171.0"), "pi": ("0.83.0",),
            "openhands": ("0.62.0",)}
OPENHANDS_TEMPLATE = Path(__file__).resolve().parents[1] / "tests/fixtures/openhands/0.62.0/basic/trajectory.json"


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


# -- audit of a prepared prefix ------------------------------------------------------------------------------------


def audit_prefix(sample: Sample, prefix: Path) -> list[str]:
    """Problems with a prepared native prefix (empty = faithful): first batch exact, second action excluded."""
    raw = prefix.read_bytes()
    problems: list[str] = []
    if sample.adapter == "openhands":  # one JSON document: the prefix must be the head of the source's event list
        events = json.loads(raw)
        if not isinstance(events, list) or events != json.loads(sample.trajectory.read_bytes())[: len(events)]:
            problems.append("the prefix is not the head of the source's event list")
        calls, results = _openhands_view(events)
    else:
        source_lines = sample.trajectory.read_bytes().splitlines()
        prefix_lines = raw.splitlines()
        if prefix_lines != source_lines[: len(prefix_lines)]:
            problems.append("the prefix is not a byte-identical head of the source")
        calls, results = VIEWS[sample.adapter](prefix_lines)
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


VIEWS = {"claude-code": _claude_view, "codex": _codex_view, "pi": _pi_view}
