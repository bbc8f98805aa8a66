"""Continue the real Pi 0.83.0 through its SDK (the Node runner) on the rebuilt session, behind the bridge.

The rebuilt v3 session goes to ``<agent dir>/sessions/--<cwd>--/`` in an isolated agent dir under the state dir
(``PI_CODING_AGENT_DIR``), with a ``models.json`` pointing the recorded provider/model at the bridge (Pi's
``openai-completions`` API) and a ``settings.json`` without auto-retry or compaction. No boundary prompt ->
``session.agent.continue()`` (no user message at all); a boundary prompt -> one ``session.prompt(NONCE)`` whose
nonce the gate swaps for the prompt, so the prompt text never reaches Pi's files during the run. Pi has no step
option: the runner stops the agent loop after ``remaining`` turns (and the bridge refuses any request past it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from forkpoint.adapters.pi.gate import PROFILE, expected_prefix
from forkpoint.adapters.pi.parse import DEFAULT_TOOLS, PiNative, dumps, model_turns, parse_pi
from forkpoint.adapters.pi.runtime import from_entrypoint
from forkpoint.adapters.pi.tools import tool_environment
from forkpoint.bridge.protocols import make_upstream
from forkpoint.bridge.protocols.openai_chat import ChatGate
from forkpoint.bridge.server import Bridge
from forkpoint.bridge.upstream import Upstream
from forkpoint.errors import ErrorKind, ReplayError, classify_continuation_output, unsupported_version
from forkpoint.fs import lstat_strict, make_dirs_strict, read_sandbox_file, refused_as, write_file_strict
from forkpoint.hashing import make_nonce
from forkpoint.model import Continuation, ContinueSettings, JsonObject, NativePrefix, Plan, RunContext
from forkpoint.results import write_atomic
from forkpoint.sandbox import local_sandbox

API = "openai-completions"
BRIDGE_KEY = "forkpoint-bridge"
SETTINGS = {"retry": {"enabled": False}, "compaction": {"enabled": False}}
_TAIL = 4000



def agent_dir(home: Path) -> Path:
    return home / ".pi" / "agent"


def session_dir_name(cwd: str) -> str:
    """Pi's per-cwd folder: ``--<cwd with / as ->--``."""
    return "--" + cwd.strip("/").replace("/", "-") + "--"


def models_json(bridge_url: str, provider: str, model: str) -> JsonObject:
    """The recorded provider/model, served by the bridge (the same settings the fixtures were recorded with)."""
    return {"providers": {provider: {
        "baseUrl": bridge_url + "/v1", "api": API, "apiKey": BRIDGE_KEY,
        "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
        "models": [{"id": model, "name": model, "reasoning": False, "contextWindow": 128000, "maxTokens": 8192}],
    }}}


def recorded_model(native: PiNative) -> tuple[str, str]:
    provider, model, api = native.model_info()
    if provider is None or model is None:
        raise ReplayError(ErrorKind.TRAJECTORY, "the Pi recording names no provider/model on its assistant messages")
    if api != API:
        raise unsupported_version(f"the Pi recording used the {api!r} API; forkpoint continues Pi 0.83.0 through its "
                                  f"{API!r} provider only (the verified resume profile)")
    return provider, model


def prefix_messages_of(lines: list[bytes]) -> list[JsonObject]:
    return [obj["message"] for obj in map(orjson.loads, lines) if obj.get("type") == "message"]


def _write_home(home: Path, path: Path, data: bytes) -> None:
    with refused_as(ErrorKind.CONTINUATION, f"write {path}"):
        write_file_strict(home, path.relative_to(home), data)


def continue_session(plan: Plan, prefix: NativePrefix, context: RunContext,
                     settings: ContinueSettings) -> Continuation:
    native: PiNative = plan.trajectory.native
    provider, model = recorded_model(native)
    runtime = from_entrypoint(settings.target.entrypoint)
    sandbox = context.sandbox or local_sandbox(context.workspace)
    rebuilt = prefix.path.read_bytes().splitlines()
    rebuilt[0] = dumps({**orjson.loads(rebuilt[0]), "cwd": sandbox.cwd})  # Pi runs at the workspace
    home_agent = agent_dir(context.home)
    target = home_agent / "sessions" / session_dir_name(sandbox.cwd) / prefix.path.name
    # Replayed tools could write the HOME: no link planted there is followed (forkpoint.fs strict helpers).
    home = context.home
    home.mkdir(parents=True, exist_ok=True)
    _write_home(home, target, b"".join(line + b"\n" for line in rebuilt))
    _write_home(home, home_agent / "settings.json", orjson.dumps(SETTINGS))

    boundary_prompt = settings.boundary_prompt or None
    nonce = make_nonce() if boundary_prompt else None
    expected = expected_prefix(prefix_messages_of(rebuilt), nonce, model, native.tools)
    write_atomic(context.state_dir / "expected-prefix.json", orjson.dumps(expected.to_json()))
    context.logs.mkdir(parents=True, exist_ok=True)
    # The runner's own folder (bound writable): never the state dir itself, which holds the journal and lock.
    events_dir = context.state_dir / "pi-continue"
    with refused_as(ErrorKind.CONTINUATION, f"create {events_dir}"):
        make_dirs_strict(context.state_dir, events_dir.name)
    events_path = events_dir / "events.jsonl"
    events_path.unlink(missing_ok=True)
    remaining = settings.remaining_steps
    bridge = Bridge(ChatGate(PROFILE, expected, boundary_prompt), _upstream(settings),
                    log_path=context.state_dir / "bridge-log.jsonl", max_model_requests=remaining)
    with bridge:
        _write_home(home, home_agent / "models.json", orjson.dumps(models_json(bridge.base_url, provider, model)))
        request = {"runtime_root": str(runtime.root), "cwd": sandbox.cwd, "session_file": str(target),
                   "provider": provider, "model": model, "prompt": nonce, "max_turns": remaining,
                   "events_path": str(events_path), "expected_version": runtime.version,
                   # Pi's --tools: only a set other than the defaults is passed (the recorded default path as is)
                   "tools": list(native.tools) if native.tools != DEFAULT_TOOLS else None}
        env = tool_environment(context)
        no_proxy = [p for p in env.get("NO_PROXY", env.get("no_proxy", "")).split(",") if p]
        no_proxy += [h for h in ("127.0.0.1", "localhost", "::1") if h not in no_proxy]
        env.update({"PI_CODING_AGENT_DIR": str(home_agent), "NO_PROXY": ",".join(no_proxy),
                    "no_proxy": ",".join(no_proxy)})
        result = sandbox.run(
            [str(runtime.node), str(runtime.runner), "continue"],
            cwd=sandbox.cwd, env=env, network=True, writable=(context.home, events_dir),
            readable=(runtime.root, runtime.runner.parent), stdin=orjson.dumps(request),
            timeout_s=settings.timeout_s, grace_s=2.0, max_output_bytes=16 * 1024 * 1024,
            log_path=context.logs / "pi-runner.log", die_with_parent=True,
        )
        summary = bridge.finish()
    tail = (result.stdout[-_TAIL:] + b"\n" + result.stderr[-_TAIL:]).decode("utf-8", "replace")
    bridge_error = summary.error()
    if bridge_error is not None:
        raise ReplayError(bridge_error.kind, bridge_error.message + ("" if summary.first_failure else
                                                                     f" (runner: {tail[-500:].strip()})"))
    if result.timed_out:
        raise ReplayError(ErrorKind.CONTINUATION, f"Pi did not finish within {settings.timeout_s:.0f} s")
    reply = _last_json(result.stdout)
    if result.returncode != 0 or reply is None or "fatal" in reply:
        detail = reply.get("fatal") if reply else tail[-500:].strip()
        raise ReplayError(classify_continuation_output(tail), f"the Pi runner exited {result.returncode}: {detail}")
    if reply.get("agent_status") == "failed":
        raise ReplayError(classify_continuation_output(str(reply.get("error"))),
                          f"Pi's continuation ended with a model error: {reply.get('error')}")
    turns = int(reply.get("turns") or 0)
    if turns == 0:
        raise ReplayError(ErrorKind.CONTINUATION, "Pi produced no live continuation turn")

    continued = read_sandbox_file(home, target, kind=ErrorKind.CONTINUATION, what="the continued session")
    continued_lines = continued.splitlines()
    if continued_lines[: len(rebuilt)] != rebuilt:
        raise ReplayError(ErrorKind.CONTINUATION, "Pi rewrote lines of the rebuilt session prefix")
    out_dir = context.output_dir / "native" / "continued"
    out_dir.mkdir(parents=True, exist_ok=True)
    continued_path = out_dir / target.name
    write_atomic(continued_path, _restore_prompt(continued_lines, nonce, boundary_prompt))
    if lstat_strict(events_dir, events_path.name) is not None:
        events = read_sandbox_file(events_dir, events_path, kind=ErrorKind.CONTINUATION, what="the runner's events")
        write_atomic(out_dir / "events.jsonl", _restore_prompt(events.splitlines(), nonce, boundary_prompt))
        events_path.unlink()
    next_action, steps = _continued_actions(continued_path, plan.after_step, len(prefix_messages_of(rebuilt)))
    if steps != turns:
        raise ReplayError(ErrorKind.CONTINUATION, f"the continued session holds {steps} new model turns but the "
                                                  f"runner counted {turns}")
    status = "max_steps" if reply.get("agent_status") == "max_steps" or summary.budget_reached else "completed"
    metadata: dict[str, Any] = {
        "native_cli": "pi-sdk",
        "native_session_id": prefix.session_id,
        "model_bridge": summary.to_json(),
        "agent_exit_code": result.returncode,
        "agent_log": str(context.logs / "pi-runner.log"),
        "pi_resume_transport": {"method": "prompt" if nonce else "agent.continue",
                                "removed_before_model_request": nonce is not None},
        "max_steps_reported": status == "max_steps",
        "pi_tools": {"enabled": list(native.tools), "source": "the recording's calls (Pi does not record its tool "
                     "set: the defaults, plus optional built-ins it ran, minus built-ins it rejected)"},
    }
    return Continuation(status, turns, continued_path, next_action, metadata)


def _upstream(settings: ContinueSettings) -> Upstream:
    return make_upstream("openai-chat", settings.upstream, settings.upstream_url, settings.upstream_key)


def _last_json(stdout: bytes) -> dict[str, Any] | None:
    for raw in reversed(stdout.splitlines()):
        if raw.strip():
            try:
                value = orjson.loads(raw)
            except orjson.JSONDecodeError:
                return None
            return value if isinstance(value, dict) else None
    return None


def _restore_prompt(lines: list[bytes], nonce: str | None, prompt: str | None) -> bytes:
    """The continued native file as the model saw it: the nonce replaced by the boundary prompt."""
    data = b"".join(line + b"\n" for line in lines)
    if nonce is None or prompt is None:
        return data
    return data.replace(nonce.encode(), orjson.dumps(prompt)[1:-1])


def _continued_actions(path: Path, after_step: int, prefix_count: int) -> tuple[Any, int]:
    try:
        parsed = parse_pi(path)
    except ReplayError as error:
        raise ReplayError(ErrorKind.CONTINUATION, f"the continued Pi session does not parse: {error.message}") from None
    actions = parsed.next_actions
    next_action = actions[after_step] if after_step < len(actions) else None
    messages = parsed.native.messages
    steps = sum(1 for index in model_turns(messages) if index >= prefix_count)
    return next_action, steps


__all__ = ["continue_session"]
