"""How the real `codex exec resume` continues the rebuilt rollout (``CodexHooks`` for adapters.kit.continuation).

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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from forkpoint.adapters.codex.parse import parse_rollout
from forkpoint.adapters.kit import continuation as shell
from forkpoint.adapters.kit.continuation import AgentHooks, Collected, GateSpec, Job, LaunchSpec, Outcome, Ran
from forkpoint.adapters.kit.ids import check_id
from forkpoint.adapters.kit.jsondoc import HUGE_RECORD_BYTES, loads_record
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.model import ActionSignature
from forkpoint.core.results import atomic_writer
from forkpoint.process import sanitized_env
from forkpoint.sandbox import runtime_paths

if TYPE_CHECKING:
    from forkpoint.adapters.codex.envelope import ResumeNotice
    from forkpoint.bridge.server import BridgeSummary

BRIDGE_KEY_ENV = "FORKPOINT_BRIDGE_KEY"
PROVIDER = "forkpoint"
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
    shell.loopback_no_proxy(env)
    env.update({"HOME": str(home), "CODEX_HOME": str(codex_home(home)), BRIDGE_KEY_ENV: shell.BRIDGE_KEY,
                "OPENAI_API_KEY": shell.BRIDGE_KEY})  # only ever sent to the bridge (openai_base_url mode)
    return env


_INJECTED_PREFIXES = ("<skills_instructions>", "## Skills update", "<permissions instructions>",
                      "<environment_context>")


def clean_continued(
    lines: list[bytes], prefix: list[bytes], nonce: str, boundary_prompt: str | None,
    notices: tuple[ResumeNotice, ...] = (), *, consume: bool = False,
) -> tuple[list[bytes], int]:
    """Remove the resume envelope from the continued rollout: the nonce user item and the context items the
    resume injected right before it (with ``--agent-version``, the profile's ``notices`` too); with a boundary
    prompt the nonce item stays, holding the prompt text. ``consume`` empties ``lines`` so that each raw line is
    freed once re-serialised (the collect step's huge answers)."""
    if lines[: len(prefix)] != prefix:
        raise ReplayError(ErrorKind.CONTINUATION, "codex rewrote lines of the rebuilt rollout prefix")
    # the tail is parsed twice, one line at a time, and each raw line is released once re-serialised: a huge answer
    # is held about twice at most (raw + re-serialised), never also as a list of parsed objects
    tail: list[bytes | None] = list(lines[len(prefix):])
    if consume:
        lines.clear()
    kinds: list[tuple[bool, bool, bool]] = []  # per tail line: the nonce item, a response_item, injected context
    for raw in tail:
        obj = loads_record(raw or b"null")
        kinds.append((_is_user_text(obj, nonce), obj.get("type") == "response_item",
                      _injected_context(obj) or any(_is_message(obj, n.role, n.text) for n in notices)))
        del obj
    nonce_at = [i for i, kind in enumerate(kinds) if kind[0]]
    if len(nonce_at) != 1:
        raise ReplayError(ErrorKind.CONTINUATION,
                          f"expected exactly one resume prompt item in the continued rollout, found {len(nonce_at)}")
    drop = {nonce_at[0]} if not boundary_prompt else set()
    for index in range(nonce_at[0] - 1, -1, -1):
        if not kinds[index][1]:
            continue
        if kinds[index][2]:
            drop.add(index)
            continue
        break
    out = list(prefix)
    nonce_bytes = nonce.encode()
    for index in range(len(tail)):
        raw, tail[index] = tail[index], None
        if index in drop:
            continue
        if raw is not None and len(raw) >= HUGE_RECORD_BYTES and nonce_bytes not in raw:
            out.append(raw)  # kept as Codex wrote it: orjson.dumps of a huge text transiently costs ~12x its size
            continue
        obj = loads_record(raw or b"null")
        del raw
        data = orjson.dumps(obj)
        if nonce_bytes in data:
            if obj.get("type") == "event_msg" and not boundary_prompt:
                continue  # the UI copy of the resume prompt (user_message events)
            if not boundary_prompt:
                raise ReplayError(ErrorKind.CONTINUATION, "the resume nonce remains in the continued rollout")
            data = data.replace(nonce_bytes, orjson.dumps(boundary_prompt)[1:-1])
        del obj
        out.append(data)
    return out, len(drop)


def _is_user_text(obj: Mapping[str, Any], text: str) -> bool:
    return _is_message(obj, "user", text)


def _is_message(obj: Mapping[str, Any], role: str, text: str) -> bool:
    """A rollout ``response_item`` message of ``role`` whose one part's text is ``text``."""
    payload = obj.get("payload")
    if obj.get("type") != "response_item" or not isinstance(payload, dict):
        return False
    if payload.get("type") != "message" or payload.get("role") != role:
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
        raise shell.reparse_error("rollout", error) from None
    steps = max(0, len(parsed.native.response_starts) - parsed.native.response_starts_before(after_step))
    return shell.next_action_at(parsed.next_actions, after_step), steps


@dataclass(frozen=True)
class Installed:
    session_id: str
    rebuilt: list[bytes]
    rollout: Path  # in the isolated CODEX_HOME
    meta: Mapping[str, Any]


class CodexHooks(AgentHooks[Installed]):
    """Codex has no max-steps option: the bridge answers the (remaining + 1)-th model request with an error."""

    protocol = "openai-responses"
    label = "codex"
    native_cli = "codex"

    def install(self, job: Job) -> Installed:
        session_id = job.prefix.session_id
        assert session_id is not None
        rebuilt = job.prefix.path.read_bytes().splitlines()
        meta = job.plan.trajectory.native.session_meta
        target = rollout_path(job.context.home, meta, job.plan.trajectory.source_path.name, session_id)
        # Replayed commands could write the HOME: no link planted there is followed (forkpoint.core.fs strict helpers).
        shell.write_home_file(job.context.home, target, b"".join(line + b"\n" for line in rebuilt),
                              "the rebuilt rollout")
        return Installed(session_id, rebuilt, target, meta)

    def gate(self, job: Job, state: Installed) -> GateSpec:
        from forkpoint.adapters.codex.envelope import expected_prefix
        from forkpoint.adapters.codex.gate import CodexGate
        from forkpoint.runtimes import trial_release

        items = [obj["payload"] for obj in map(orjson.loads, state.rebuilt) if obj.get("type") == "response_item"]
        # a calibration runs its release in the verified version's place: the gate expects what that release sends
        target = job.settings.target
        expected = expected_prefix(items, job.nonce, target.version, job.plan.trajectory.version,
                                   sender=trial_release("codex", target.entrypoint) or target.version)
        return GateSpec(CodexGate(expected, job.boundary_prompt), expected.to_json())

    def launch(self, job: Job, state: Installed, bridge_url: str) -> LaunchSpec:
        home = job.context.home
        provider = state.meta.get("model_provider") if isinstance(state.meta.get("model_provider"), str) else None
        model = recorded_model(state.rebuilt) or "gpt-5.5"
        shell.write_home_file(home, codex_home(home) / "config.toml", config_toml(bridge_url, model, provider).encode())
        entrypoint = job.settings.target.entrypoint
        return LaunchSpec(argv(entrypoint, state.session_id, job.nonce), environment(os.environ, home),
                          job.sandbox.cwd, job.context.logs / "codex.jsonl", writable=(home,),
                          readable=runtime_paths(entrypoint))

    def outcome(self, job: Job, state: Installed, ran: Ran, summary: BridgeSummary) -> Outcome:
        transport = {"prompt_mode": "boundary_user_prompt" if job.boundary_prompt else "nonce",
                     "removed_before_model_request": True}
        return Outcome("completed", metadata={"native_session_id": state.session_id,
                                              "codex_resume_transport": transport})

    def collect(self, job: Job, state: Installed, ran: Ran, outcome: Outcome,
                summary: BridgeSummary) -> Collected:
        from forkpoint.adapters.codex.envelope import profile_for_version

        # the gate already refused a pair without a profile entry, so None is not reached here
        notices = profile_for_version(job.settings.target.version).notices_for(job.plan.trajectory.version or "")
        # one copy of a huge answer at a time: the read bytes die with the split, the cleaned lines are written one
        # by one and dropped before the re-parse (a 20 MB answer held ~5 copies at once)
        cleaned, removed = clean_continued(
            shell.read_home_file(job.context.home, state.rollout, "the continued rollout").splitlines(),
            state.rebuilt, job.nonce, job.settings.boundary_prompt, notices or (), consume=True)
        path = job.continued_dir / state.rollout.name
        with atomic_writer(path) as handle:
            for line in cleaned:
                handle.write(line)
                handle.write(b"\n")
        del cleaned
        next_action, steps = _continued_actions(path, job.plan.after_step)
        return Collected(path, steps, next_action, {"envelope_items_removed": removed})
