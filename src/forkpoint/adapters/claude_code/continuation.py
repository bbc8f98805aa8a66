"""Continue the real `claude` on the rebuilt session, its model traffic behind the fail-closed bridge."""

from __future__ import annotations

import os
from pathlib import Path

import orjson

from forkpoint.adapters.claude_code import launch
from forkpoint.adapters.claude_code.continued import clean_continued
from forkpoint.adapters.claude_code.envelope import expected_prefix
from forkpoint.adapters.claude_code.gate import ClaudeGate
from forkpoint.adapters.claude_code.parse import parse_session
from forkpoint.bridge.protocols import make_upstream
from forkpoint.bridge.server import Bridge
from forkpoint.bridge.upstream import Upstream
from forkpoint.errors import ErrorKind, ReplayError, classify_continuation_output
from forkpoint.fs import read_file_strict, refused_as, write_file_strict
from forkpoint.hashing import make_nonce
from forkpoint.model import ActionSignature, Continuation, ContinueSettings, NativePrefix, Plan, RunContext
from forkpoint.results import write_atomic, write_json
from forkpoint.sandbox import local_sandbox, runtime_paths

BRIDGE_AGENT_KEY = "forkpoint-bridge"  # what the agent sends; the real upstream key never reaches it
_TAIL = 4000


def continue_session(
    plan: Plan, prefix: NativePrefix, context: RunContext, settings: ContinueSettings
) -> Continuation:
    session_id = prefix.session_id
    assert session_id is not None
    rebuilt = prefix.path.read_bytes().splitlines()
    sandbox = context.sandbox or local_sandbox(context.workspace)
    # Start where the replayed shell ended (Claude keeps no shell cwd across --resume; see launch.resume_directory).
    cwd, shell_cwd = launch.resume_directory(context.state_dir, context.workspace, sandbox.cwd)
    # `claude --resume` looks under the project folder of the cwd it sees (the recorded one under bwrap).
    session_file = launch.session_path(context.home, Path(cwd), session_id)
    # Replayed commands could write the HOME: no link planted there is followed (forkpoint.fs strict helpers).
    context.home.mkdir(parents=True, exist_ok=True)
    in_home = session_file.relative_to(context.home)
    with refused_as(ErrorKind.CONTINUATION, f"write the rebuilt session to {session_file}"):
        write_file_strict(context.home, in_home, b"".join(line + b"\n" for line in rebuilt))

    nonce = make_nonce()
    expected = expected_prefix([orjson.loads(line) for line in rebuilt], nonce, settings.target.version)
    write_json(context.state_dir / "expected-prefix.json", expected.to_json())
    context.logs.mkdir(parents=True, exist_ok=True)
    agent_log = context.logs / "claude-code.jsonl"

    bridge = Bridge(
        ClaudeGate(expected, settings.boundary_prompt or None),
        _upstream(settings),
        log_path=context.state_dir / "bridge-log.jsonl",
    )
    with bridge:
        env = launch.environment(os.environ, context.home, bridge.base_url, BRIDGE_AGENT_KEY)
        argv = launch.argv(settings.target.entrypoint, session_id, nonce, settings.remaining_steps)
        # The network is shared with the host for the continuation only: the bridge listens on 127.0.0.1.
        result = sandbox.run(
            argv,
            cwd=cwd,
            env=env,
            network=True,
            writable=(context.home,),
            readable=runtime_paths(settings.target.entrypoint),
            timeout_s=settings.timeout_s,
            grace_s=2.0,
            die_with_parent=True,
            max_output_bytes=16 * 1024 * 1024,
            log_path=agent_log,
        )
        summary = bridge.finish()
    metadata = {
        "native_cli": "claude",
        "native_session_id": session_id,
        "model_bridge": summary.to_json(),
        "agent_exit_code": result.returncode,
        "agent_log": str(agent_log),
        "shell_cwd": shell_cwd,
    }
    outcome = launch.read_stream(result.stdout)
    output_tail = (result.stdout[-_TAIL:] + b"\n" + result.stderr[-_TAIL:]).decode("utf-8", "replace")
    bridge_error = summary.error()
    if bridge_error is not None:
        if summary.first_failure is None:  # no request at all: say what the agent printed instead
            detail = outcome.detail or result.stderr.decode("utf-8", "replace").strip()[-500:] or "no output"
            raise ReplayError(bridge_error.kind, f"{bridge_error.message} (claude exited with "
                                                 f"{result.returncode}: {detail}; see {agent_log})")
        raise bridge_error
    if result.timed_out:
        raise ReplayError(ErrorKind.CONTINUATION, f"claude did not finish within {settings.timeout_s:.0f} s; "
                                                  f"see {agent_log}")
    if result.returncode != 0 and outcome.status != "max_steps":
        kind = classify_continuation_output(output_tail)
        detail = outcome.detail or result.stderr.decode("utf-8", "replace").strip()[-500:]
        raise ReplayError(kind, f"claude exited with {result.returncode}: {detail}; see {agent_log}")
    if outcome.session_id is not None and outcome.session_id != session_id:
        raise ReplayError(ErrorKind.CONTINUATION,
                          f"claude resumed session {outcome.session_id}, not the rebuilt {session_id}")
    if outcome.status == "failed":
        raise ReplayError(classify_continuation_output(output_tail),
                          f"claude reported an error: {outcome.detail}; see {agent_log}")

    try:
        with refused_as(ErrorKind.CONTINUATION, f"read the continued session {session_file}"):
            continued_bytes = read_file_strict(context.home, in_home)
    except OSError as exc:
        raise ReplayError(ErrorKind.CONTINUATION, f"read the continued session {session_file}: {exc}") from None
    cleaned = clean_continued(continued_bytes.splitlines(), rebuilt, nonce, settings.boundary_prompt)
    continued_path = context.output_dir / "native" / "continued" / f"{session_id}.jsonl"
    continued_path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(continued_path, b"".join(line + b"\n" for line in cleaned.lines))
    next_action = _next_action(continued_path, plan.after_step)
    metadata["envelope_lines_removed"] = cleaned.removed_envelope_lines
    metadata["num_turns_reported"] = outcome.num_turns
    return Continuation(
        agent_status="max_steps" if outcome.status == "max_steps" else "completed",
        continued_steps=cleaned.continued_turns,
        continued_path=continued_path,
        next_action=next_action,
        metadata=metadata,
    )


def _upstream(settings: ContinueSettings) -> Upstream:
    return make_upstream("anthropic", settings.upstream, settings.upstream_url, settings.upstream_key)


def _next_action(continued: Path, after_step: int) -> ActionSignature | None:
    """The first live turn after the boundary, read back with the same parser as the source."""
    try:
        parsed = parse_session(continued)
    except ReplayError as error:
        raise ReplayError(ErrorKind.CONTINUATION, f"the continued session does not parse: {error.message}") from None
    actions = parsed.next_actions
    return actions[after_step] if after_step < len(actions) else None
