"""How the real Qwen Code 0.24.4 continues the rebuilt session: ``QwenHooks`` for forkpoint.adapters.kit.continuation.

Measured on the real binary (docs/adapters/qwen-code.md): ``qwen --resume <id> -p <prompt>`` loads
``~/.qwen/projects/<sanitised cwd>/chats/<id>.jsonl``, sends the history, then the prompt, and appends the new
records to that same file (the chain goes on from its last record). The prompt is always the nonce (headless mode
needs one), which the gate removes or swaps for the boundary prompt, so its text never reaches the model. The model
traffic goes to ``OPENAI_BASE_URL`` = the bridge (Chat Completions), with the dummy key and ``--auth-type openai``.
The bridge enforces the step budget (as for every agent without a step option forkpoint drives).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from forkpoint.adapters.kit import continuation as shell
from forkpoint.adapters.kit.continuation import AgentHooks, Collected, GateSpec, Job, LaunchSpec, Outcome, Ran
from forkpoint.adapters.kit.npm_cli import install_jsonl, node_command, usable_model
from forkpoint.adapters.qwen_code.gate import expected_prefix
from forkpoint.adapters.qwen_code.parse import QwenNative, model_turns, parse_qwen, parts, signature
from forkpoint.adapters.qwen_code.runtime import NODE_START, project_dir, qwen_env, write_settings
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.fs import read_sandbox_file
from forkpoint.core.model import JsonObject
from forkpoint.core.results import write_atomic

if TYPE_CHECKING:
    from forkpoint.bridge.server import BridgeSummary

_MODEL = re.compile(r"[A-Za-z0-9._:/-]{1,128}")


@dataclass(frozen=True)
class Installed:
    native: QwenNative
    model: str
    rebuilt: list[JsonObject]  # the rebuilt records (what the gate's expected prefix is made of)
    data: bytes  # the rebuilt file as written (the continued file must start with it)
    session_file: Path


def recorded_model(native: QwenNative) -> str:
    return usable_model(native.model, _MODEL, "the Qwen Code recording names no usable model on its assistant records")


class QwenHooks(AgentHooks[Installed]):
    protocol = "openai-chat"
    label = "Qwen Code"
    native_cli = "qwen"

    def install(self, job: Job) -> Installed:
        native: QwenNative = job.plan.trajectory.native
        model = recorded_model(native)
        home = job.context.home
        chats = home / ".qwen" / "projects" / project_dir(str(job.sandbox.cwd)) / "chats"
        target = chats / f"{native.session_id}.jsonl"
        data, records = install_jsonl(job.prefix.path, home, target)
        write_settings(home, ErrorKind.CONTINUATION)
        return Installed(native, model, records, data, target)

    def gate(self, job: Job, state: Installed) -> GateSpec:
        from forkpoint.adapters.qwen_code.gate import PROFILE
        from forkpoint.bridge.protocols.openai_chat import ChatGate

        expected = expected_prefix(state.rebuilt, job.nonce, state.model)
        return GateSpec(ChatGate(PROFILE, expected, job.boundary_prompt), expected.to_json())

    def launch(self, job: Job, state: Installed, bridge_url: str) -> LaunchSpec:
        entrypoint = job.settings.target.entrypoint
        env = qwen_env(job.context.home, bridge_url)
        shell.loopback_no_proxy(env)
        node = node_command(job.sandbox, entrypoint, NODE_START)
        env.update(node.env)
        argv = [*node.argv, "--resume", state.native.session_id, "--yolo", "--auth-type", "openai",
                "-m", state.model, "-o", "json", "-p", job.nonce]
        return LaunchSpec(argv, env, job.sandbox.cwd, job.context.logs / "qwen-code.log",
                          writable=(job.context.home,), readable=node.readable)

    def outcome(self, job: Job, state: Installed, ran: Ran, summary: BridgeSummary) -> Outcome:
        result = _json_result(ran.process.stdout) if ran.process is not None else None
        metadata: JsonObject = {"native_session_id": job.prefix.session_id,
                                "qwen_resume_transport": {"method": "--resume <id> + -p NONCE",
                                                          "removed_before_model_request": True}}
        if summary.budget_reached:
            return Outcome("max_steps", metadata=metadata)
        if ran.exit_code != 0 or result is None or result.get("is_error"):
            detail = result.get("result") or result.get("subtype") if result else ran.tail()
            return Outcome("failed", str(detail), metadata=metadata)
        return Outcome("completed", metadata=metadata)

    def collect(self, job: Job, state: Installed, ran: Ran, outcome: Outcome,
                summary: BridgeSummary) -> Collected:
        home = job.context.home
        data = read_sandbox_file(home, state.session_file, kind=ErrorKind.CONTINUATION,
                                 what="the continued session")
        if not data.startswith(state.data):
            raise ReplayError(ErrorKind.CONTINUATION, "Qwen Code changed the rebuilt prefix of the session it "
                                                      "continued (the continued file does not start with it)")
        prompt = job.boundary_prompt
        path = job.continued_dir / state.session_file.name
        write_atomic(path, restore_prompt(data, len(state.data), job.nonce, prompt))
        try:
            parsed = parse_qwen(path)
        except ReplayError as error:
            raise shell.reparse_error("Qwen Code session", error) from None
        records = parsed.native.records
        start = len(state.rebuilt) - 1
        if prompt:
            start = next((i for i in range(len(records) - 1, start, -1)
                          if records[i].get("type") == "user" and _text(records[i]) == prompt), -1)
            if start < 0:
                raise ReplayError(ErrorKind.CONTINUATION, "the continued Qwen Code session holds no resume prompt")
        turns = [i for i in model_turns(records) if i > start]
        next_action = signature(records[turns[0]]) if turns else None
        return Collected(path, len(turns), next_action, {"max_steps_reported": summary.budget_reached})


def restore_prompt(data: bytes, prefix_bytes: int, nonce: str, prompt: str | None) -> bytes:
    """The continued file as the model saw it: the nonce replaced by the boundary prompt, or, without one, the
    nonce's user record removed and the chain relinked over it (the model never saw it). Anything else that
    carries the nonce means the CLI used it in a way the gate did not see: refused."""
    if prompt:
        return data.replace(nonce.encode(), orjson.dumps(prompt)[1:-1])
    kept: list[bytes] = []
    relinked: dict[str, Any] = {}
    for line in data[prefix_bytes:].splitlines():
        if not line.strip():
            continue
        record = orjson.loads(line)
        if not isinstance(record, dict):
            raise ReplayError(ErrorKind.CONTINUATION, "the continued Qwen Code session holds a non-object line")
        if record.get("type") == "user" and _text(record) == nonce:
            relinked[str(record.get("uuid"))] = relinked.get(str(record.get("parentUuid")), record.get("parentUuid"))
            continue
        if nonce.encode() in line:
            raise ReplayError(ErrorKind.CONTINUATION, f"the continued Qwen Code session carries the resume nonce in "
                                                      f"a {record.get('type')!r} record")
        if str(record.get("parentUuid")) in relinked:
            record["parentUuid"] = relinked[str(record["parentUuid"])]
            line = orjson.dumps(record)
        kept.append(line + b"\n")
    return data[:prefix_bytes] + b"".join(kept)


def _text(record: JsonObject) -> str:
    return "".join(str(p["text"]) for p in parts(record) if isinstance(p, dict) and isinstance(p.get("text"), str))


def _json_result(stdout: bytes) -> dict[str, Any] | None:
    """The ``result`` event of the ``-o json`` array Qwen Code prints (success or error, the final text)."""
    text = stdout.decode("utf-8", "replace")
    start = text.find("[")
    try:
        events = orjson.loads(text[start:]) if start >= 0 else None
    except orjson.JSONDecodeError:
        return None
    if not isinstance(events, list):
        return None
    return next((e for e in reversed(events) if isinstance(e, dict) and e.get("type") == "result"), None)
