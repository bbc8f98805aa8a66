"""Generated native trajectories with 2 batches (the §12.3 method) and the audit of a prepared prefix.

Each sample lives in its own directory: ``ws/`` is the workspace the trajectory was "recorded" in (its cwd) and
holds one pre-existing file; the trajectory is next to it. Every tool call of both batches is a command that
would create a marker file in the workspace, so a tool that ran (or a prefix that leaked the second action and
got executed) shows up in the inventory. Samples vary: single or parallel first batches, string or block
content, multi-line / unicode outputs, error results, Read / apply_patch calls.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from forkpoint.testing.claude_sessions import ClaudeSessionBuilder, text, thinking, tool_use
from forkpoint.testing.codex_rollouts import CodexRolloutBuilder

ADAPTERS = ("claude-code", "codex")
VERSIONS = {"claude-code": ("2.1.220", "2.1.332"), "codex": ("0.149.0", "0.171.0")}


@dataclass
class Call:
    call_id: str
    name: str
    arguments: dict[str, Any] | str  # codex apply_patch: the freeform patch text
    output: Any  # native content (Claude: str or list of blocks; Codex: str)
    is_error: bool = False


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
    version = VERSIONS[adapter][index % 2]
    if adapter == "claude-code":
        return _claude(index, base, workspace, version)
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


# -- audit of a prepared prefix ------------------------------------------------------------------------------------


def audit_prefix(sample: Sample, prefix: Path) -> list[str]:
    """Problems with a prepared native prefix (empty = faithful): first batch exact, second action excluded."""
    raw = prefix.read_bytes()
    problems: list[str] = []
    source_lines = sample.trajectory.read_bytes().splitlines()
    prefix_lines = raw.splitlines()
    if prefix_lines != source_lines[: len(prefix_lines)]:
        problems.append("the prefix is not a byte-identical head of the source")
    calls, results = (_claude_view if sample.adapter == "claude-code" else _codex_view)(prefix_lines)
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
