"""`forkpoint inspect`: what a trajectory contains and which boundaries are valid (read-only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from forkpoint.adapters import get_adapter
from forkpoint.adapters.detect import guess_agent
from forkpoint.core.errors import ReplayError, configuration
from forkpoint.core.fs import DEFAULT_MAX_INPUT_BYTES
from forkpoint.core.model import CallPolicy, ToolCall

_SHORT = 60


def describe(path: Path, agent: str | None = None, max_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> dict[str, Any]:
    """The stable JSON shape scripts rely on (see README); extra keys may be added, never removed."""
    if max_bytes < 1:
        raise configuration("--max-trajectory-bytes must be positive")
    if not path.is_file():
        raise configuration(f"trajectory does not exist or is not a regular file: {path}")
    name = agent or guess_agent(path, max_bytes)
    if name is None:
        raise configuration(f"cannot tell which agent wrote {path}; pass --agent NAME")
    adapter = get_adapter(name)
    parsed = adapter.parse(path.resolve(), max_bytes)
    version_problem: str | None = None
    try:
        adapter.profile_for(parsed)
    except ReplayError as error:
        version_problem = error.message
    from forkpoint.adapters.versions import label

    facts = adapter.version_facts(parsed)  # refuses only what cannot be replayed at all (as a replay would)
    complete = parsed.complete_count
    # a run's end (e.g. SWE-agent's final submit) is a refused boundary: never offer it as the range's end
    last = next((n for n in range(complete, 0, -1) if n not in parsed.boundary_refusals), 0)
    return {
        "agent": adapter.name,
        "version": label(parsed.version),
        "recorded_version": facts.recorded,
        "recorded_version_status": facts.status,
        "format_family": facts.format_family,
        "tool_semantics_version": facts.tool_version,
        "tool_profile": facts.tool_profile,
        "profile": facts.profile,
        "version_notes": list(facts.reasons),
        "session_id": parsed.session_id,
        "cwd": parsed.cwd,
        "batches": [
            {
                "ordinal": batch.ordinal,
                "locator": batch.locator,
                "calls": [_call(call) for call in batch.calls],
                "boundary_refusal": parsed.boundary_refusals.get(batch.ordinal),
            }
            for batch in parsed.batches[:complete]
        ],
        "incomplete_tail": parsed.incomplete_tail,
        "complete_batches": complete,
        "after_step_range": [1, last] if last else None,
        "source_sha256": parsed.source_sha256,
        # the exact-pin view (--require-verified-version): False does not stop prepare-only or replay-only
        "version_supported": version_problem is None,
        "version_problem": version_problem,
        "warnings": list(parsed.warnings),
    }


def _call(call: ToolCall) -> dict[str, Any]:
    historical = call.historical
    return {
        "id": call.call_id,
        "name": call.name,
        "input": call.arguments,
        "observation_bytes": len(historical.text.encode("utf-8")) if historical else 0,
        "is_error": historical.is_error if historical else None,
        "stale": call.policy is CallPolicy.STALE or call.policy is CallPolicy.REFUSED,
        "policy": call.policy.value,
        "policy_reason": call.policy_reason,
        # a sub-agent's own calls (re-run before this one), each described like any call
        **({"subagent_calls": [{**_call(sub), "subagent": sub.subagent} for sub in call.subcalls]}
           if call.subcalls else {}),
    }


def short_input(arguments: dict[str, Any]) -> str:
    """One line a human can scan: the most telling argument first."""
    for key in ("command", "file_path", "path", "pattern", "cmd", "url", "description", "prompt"):
        value = arguments.get(key)
        if isinstance(value, str) and value:
            text = " ".join(value.split())
            return text if len(text) <= _SHORT else text[: _SHORT - 1] + "…"
    import orjson

    text = orjson.dumps(arguments).decode()
    return text if len(text) <= _SHORT else text[: _SHORT - 1] + "…"


def render_table(description: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    console.print(f"agent    {description['agent']} {description['version'] or '(version unknown)'}", markup=False)
    console.print(f"version  {description['recorded_version_status']}: read as {description['format_family']}, "
                  f"tools re-run as {description['tool_profile'] or description['tool_semantics_version']} "
                  f"({description['profile']})", markup=False)
    console.print(f"session  {description['session_id']}")
    console.print(f"cwd      {description['cwd']}")
    table = Table(show_lines=False)
    for column in ("batch", "tool", "input", "obs bytes", "notes"):
        table.add_column(column, overflow="fold")
    for batch in description["batches"]:
        for index, call in enumerate(batch["calls"]):
            notes = []
            if call["is_error"]:
                notes.append("error")
            if call["stale"]:
                notes.append(f"{call['policy']}: {call['policy_reason']}")
            if index == 0 and batch["boundary_refusal"]:
                notes.append(f"boundary refused: {batch['boundary_refusal']}")
            table.add_row(
                str(batch["ordinal"]) if index == 0 else "",
                call["name"],
                short_input(call["input"]),
                str(call["observation_bytes"]),
                "; ".join(notes),
            )
    console.print(table)
    complete = description["complete_batches"]
    if description["after_step_range"]:
        console.print(f"valid --after-step: 1..{description['after_step_range'][1]}")
    elif complete:
        console.print("every boundary is refused (see the notes above): nothing to replay")
    else:
        console.print("no complete tool batch: nothing to replay")
    if description["incomplete_tail"]:
        console.print(f"batch {complete + 1} is incomplete (a tool call without a recorded result); not selectable")
    for note in description["version_notes"]:
        console.print(f"[yellow]note:[/yellow] {escape(note)} (prepare-only and replay-only run, marked degraded; "
                      "--require-verified-version refuses it)")
    for warning in description["warnings"]:
        console.print(f"[yellow]warning:[/yellow] {warning}")
