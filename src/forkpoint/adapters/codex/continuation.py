"""Continue the real `codex exec resume` on the rebuilt rollout, its model traffic behind the fail-closed bridge.

The rollout goes to ``<CODEX_HOME>/sessions/YYYY/MM/DD/rollout-...-<id>.jsonl`` in an isolated CODEX_HOME under
the state dir, with a config.toml whose provider points at the bridge (``wire_api = "responses"``) and the
plugin/app sync features off (they call out to the internet). Codex has no max-steps option: the bridge
enforces the step budget by answering the (remaining + 1)-th model request with an error.

``codex exec resume`` runs in the run's sandbox (``context.sandbox``, default local) at the session cwd as the
tools see it (under bwrap the recorded cwd), with the network shared so it reaches the bridge on the host's
127.0.0.1, its isolated HOME (CODEX_HOME inside) writable and its runtime readable.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from forkpoint.adapters.codex.parse import AGENT, parse_rollout
from forkpoint.bridge.protocols import make_upstream
from forkpoint.bridge.server import Bridge
from forkpoint.bridge.upstream import Upstream
from forkpoint.errors import ErrorKind, ReplayError, classify_continuation_output
from forkpoint.fs import read_file_strict, refused_as, write_file_strict
from forkpoint.ids import check_id
from forkpoint.model import ActionSignature, Continuation, ContinueSettings, NativePrefix, Plan, RunContext
from forkpoint.process import sanitized_env
from forkpoint.results import write_atomic
from forkpoint.sandbox import local_sandbox, runtime_paths

BRIDGE_KEY_ENV = "FORKPOINT_BRIDGE_KEY"
PROVIDER = "forkpoint"
_TAIL = 4000
_STAMP = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})")
#: 0.149+ resumes only rollouts named like it names them (paginated history).
_CANONICAL = re.compile(r"rollout-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-[0-9a-fA-F-]{36}\.jsonl")


def codex_home(home: Path) -> Path:
    return home / ".codex"


def rollout_path(home: Path, meta: Mapping[str, Any], source_name: str, session_id: str) -> Path:
    """Codex finds any ``rollout-*.jsonl`` under ``sessions/``; keep the native date layout and name."""
    stamp = meta.get("timestamp") if isinstance(meta.get("timestamp"), str) else ""
    match = _STAMP.match(str(stamp))
    year, month, day, hour, minute, second = match.groups() if match else ("1970", "01", "01", "00", "00", "00")
    name = source_name if _CANONICAL.fullmatch(source_name) else (
        f"rollout-{year}-{month}-{day}T{hour}-{minute}-{second}-{session_id}.jsonl")
    return codex_home(home) / "sessions" / year / month / day / name


def config_toml(bridge_url: str, model: str, provider: str | None) -> str:
    """Point the recorded provider at the bridge: 0.171 refuses to resume a thread whose provider id is gone.

    The built-in ``openai`` provider cannot be redefined; it is redirected with ``openai_base_url`` instead (and
    then reads ``OPENAI_API_KEY``, which the environment sets to the bridge's dummy key).
    """
    head = [f"model = {_toml_string(model)}"]
    if provider in (None, "", "openai"):
        head += [f"openai_base_url = {_toml_string(bridge_url + '/v1')}"]
        providers: list[str] = []
    else:
        assert provider is not None
        head += [f"model_provider = {_toml_string(provider)}"]
        providers = [
            f"[model_providers.{_toml_key(provider)}]",
            'name = "forkpoint bridge"',
            f"base_url = {_toml_string(bridge_url + '/v1')}",
            'wire_api = "responses"',
            f'env_key = "{BRIDGE_KEY_ENV}"',
            "request_max_retries = 0",
            "stream_max_retries = 0",
            "",
        ]
    features = ["[features]", "plugins = false", "remote_plugin = false", "apps = false", ""]
    return "\n".join([*head, "", *providers, *features])


def _toml_key(value: str) -> str:
    return value if re.fullmatch(r"[A-Za-z0-9_-]+", value) else _toml_string(value)


def _toml_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def recorded_model(lines: list[bytes]) -> str | None:
    """The model the recording used (last turn_context), so the resumed agent asks for the same one."""
    model: str | None = None
    for raw in lines:
        obj = orjson.loads(raw)
        if obj.get("type") == "turn_context" and isinstance(obj.get("payload"), dict):
            value = obj["payload"].get("model")
            model = value if isinstance(value, str) and value else model
    return model


def argv(entrypoint: Path, session_id: str, nonce: str) -> list[str]:
    return [str(entrypoint), "exec", "resume", check_id(session_id, "session id"), "--json", "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox", nonce]


def environment(base: Mapping[str, str], home: Path) -> dict[str, str]:
    env = sanitized_env(base, strip_credentials=True)
    for name in list(env):
        if name.startswith(("OPENAI_", "CODEX_")):
            del env[name]
    no_proxy = [p for p in env.get("NO_PROXY", env.get("no_proxy", "")).split(",") if p]
    no_proxy += [h for h in ("127.0.0.1", "localhost", "::1") if h not in no_proxy]
    env.update({"HOME": str(home), "CODEX_HOME": str(codex_home(home)), BRIDGE_KEY_ENV: "forkpoint-bridge",
                "OPENAI_API_KEY": "forkpoint-bridge",  # only ever sent to the bridge (openai_base_url mode)
                "NO_PROXY": ",".join(no_proxy), "no_proxy": ",".join(no_proxy)})
    return env


def continue_rollout(
    plan: Plan, prefix: NativePrefix, context: RunContext, settings: ContinueSettings
) -> Continuation:
    from forkpoint.adapters.codex.envelope import expected_prefix
    from forkpoint.adapters.codex.gate import CodexGate
    from forkpoint.hashing import make_nonce

    session_id = prefix.session_id
    assert session_id is not None
    rebuilt = prefix.path.read_bytes().splitlines()
    meta = plan.trajectory.native.session_meta
    target = rollout_path(context.home, meta, plan.trajectory.source_path.name, session_id)
    # Replayed commands could write the HOME: no link planted there is followed (forkpoint.fs strict helpers).
    context.home.mkdir(parents=True, exist_ok=True)
    in_home = target.relative_to(context.home)
    with refused_as(ErrorKind.CONTINUATION, f"write the rebuilt rollout to {target}"):
        write_file_strict(context.home, in_home, b"".join(line + b"\n" for line in rebuilt))

    nonce = make_nonce()
    items = [obj["payload"] for obj in map(orjson.loads, rebuilt) if obj.get("type") == "response_item"]
    expected = expected_prefix(items, nonce, settings.target.version)
    write_atomic(context.state_dir / "expected-prefix.json", orjson.dumps(expected.to_json()))
    context.logs.mkdir(parents=True, exist_ok=True)
    agent_log = context.logs / "codex.jsonl"
    model = recorded_model(rebuilt) or "gpt-5.5"

    bridge = Bridge(
        CodexGate(expected, settings.boundary_prompt or None),
        _upstream(settings),
        log_path=context.state_dir / "bridge-log.jsonl",
        max_model_requests=settings.remaining_steps,
    )
    with bridge:
        provider = meta.get("model_provider") if isinstance(meta.get("model_provider"), str) else None
        config = codex_home(context.home) / "config.toml"
        with refused_as(ErrorKind.CONTINUATION, f"write {config}"):
            write_file_strict(context.home, config.relative_to(context.home),
                              config_toml(bridge.base_url, model, provider).encode())
        sandbox = context.sandbox or local_sandbox(context.workspace)
        # The network is shared with the host for the continuation only: the bridge listens on 127.0.0.1.
        result = sandbox.run(
            argv(settings.target.entrypoint, session_id, nonce),
            cwd=sandbox.cwd,
            env=environment(os.environ, context.home),
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
    metadata: dict[str, Any] = {
        "native_cli": "codex",
        "native_session_id": session_id,
        "model_bridge": summary.to_json(),
        "agent_exit_code": result.returncode,
        "agent_log": str(agent_log),
        "codex_resume_transport": {"prompt_mode": "boundary_user_prompt" if settings.boundary_prompt else "nonce",
                                   "removed_before_model_request": True},
    }
    tail = (result.stdout[-_TAIL:] + b"\n" + result.stderr[-_TAIL:]).decode("utf-8", "replace")
    bridge_error = summary.error()
    if bridge_error is not None:
        detail = "" if summary.first_failure else f" (codex exited with {result.returncode}: {tail[-500:].strip()})"
        raise ReplayError(bridge_error.kind, bridge_error.message + detail)
    if result.timed_out:
        raise ReplayError(ErrorKind.CONTINUATION, f"codex did not finish within {settings.timeout_s:.0f} s; "
                                                  f"see {agent_log}")
    if result.returncode != 0 and not summary.budget_reached:
        raise ReplayError(classify_continuation_output(tail),
                          f"codex exited with {result.returncode}: {tail[-500:].strip()}; see {agent_log}")

    try:
        with refused_as(ErrorKind.CONTINUATION, f"read the continued rollout {target}"):
            continued_bytes = read_file_strict(context.home, in_home)
    except OSError as exc:
        raise ReplayError(ErrorKind.CONTINUATION, f"read the continued rollout {target}: {exc}") from None
    cleaned, removed = clean_continued(continued_bytes.splitlines(), rebuilt, nonce, settings.boundary_prompt)
    continued_path = context.output_dir / "native" / "continued" / target.name
    continued_path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(continued_path, b"".join(line + b"\n" for line in cleaned))
    metadata["envelope_items_removed"] = removed
    next_action, steps = _continued_actions(continued_path, plan.after_step)
    return Continuation(
        agent_status="max_steps" if summary.budget_reached else "completed",
        continued_steps=steps,
        continued_path=continued_path,
        next_action=next_action,
        metadata=metadata,
    )


def _upstream(settings: ContinueSettings) -> Upstream:
    return make_upstream("openai-responses", settings.upstream, settings.upstream_url, settings.upstream_key)


_INJECTED_PREFIXES = ("<skills_instructions>", "## Skills update", "<permissions instructions>",
                      "<environment_context>")


def clean_continued(
    lines: list[bytes], prefix: list[bytes], nonce: str, boundary_prompt: str | None
) -> tuple[list[bytes], int]:
    """Remove the resume envelope from the continued rollout: the nonce user item and the context items the
    resume injected right before it; with a boundary prompt the nonce item stays, holding the prompt text."""
    if lines[: len(prefix)] != prefix:
        raise ReplayError(ErrorKind.CONTINUATION, "codex rewrote lines of the rebuilt rollout prefix")
    tail = [orjson.loads(raw) for raw in lines[len(prefix):]]
    nonce_at = [i for i, obj in enumerate(tail) if _is_user_text(obj, nonce)]
    if len(nonce_at) != 1:
        raise ReplayError(ErrorKind.CONTINUATION,
                          f"expected exactly one resume prompt item in the continued rollout, found {len(nonce_at)}")
    drop = {nonce_at[0]} if not boundary_prompt else set()
    for index in range(nonce_at[0] - 1, -1, -1):
        obj = tail[index]
        if obj.get("type") != "response_item":
            continue
        if _injected_context(obj):
            drop.add(index)
            continue
        break
    out = list(prefix)
    nonce_bytes = nonce.encode()
    for index, obj in enumerate(tail):
        if index in drop:
            continue
        data = orjson.dumps(obj)
        if nonce_bytes in data:
            if obj.get("type") == "event_msg" and not boundary_prompt:
                continue  # the UI copy of the resume prompt (user_message events)
            if not boundary_prompt:
                raise ReplayError(ErrorKind.CONTINUATION, "the resume nonce remains in the continued rollout")
            data = data.replace(nonce_bytes, orjson.dumps(boundary_prompt)[1:-1])
        out.append(data)
    return out, len(drop)


def _is_user_text(obj: Mapping[str, Any], text: str) -> bool:
    payload = obj.get("payload")
    if obj.get("type") != "response_item" or not isinstance(payload, dict):
        return False
    if payload.get("type") != "message" or payload.get("role") != "user":
        return False
    parts = payload.get("content")
    return isinstance(parts, list) and len(parts) == 1 and isinstance(parts[0], dict) and parts[0].get("text") == text


def _injected_context(obj: Mapping[str, Any]) -> bool:
    payload = obj.get("payload")
    if not isinstance(payload, dict) or payload.get("type") != "message" or payload.get("role") not in (
            "developer", "user"):
        return False
    parts = payload.get("content")
    if not isinstance(parts, list) or not parts:
        return False
    first = parts[0].get("text") if isinstance(parts[0], dict) else None
    return isinstance(first, str) and first.lstrip().startswith(_INJECTED_PREFIXES)


def _continued_actions(path: Path, after_step: int) -> tuple[ActionSignature | None, int]:
    try:
        parsed = parse_rollout(path)
    except ReplayError as error:
        raise ReplayError(ErrorKind.CONTINUATION, f"the continued rollout does not parse: {error.message}") from None
    actions = parsed.next_actions
    next_action = actions[after_step] if after_step < len(actions) else None
    steps = max(0, len(parsed.native.response_starts) - parsed.native.response_starts_before(after_step))
    return next_action, steps


__all__ = ["AGENT", "continue_rollout"]
