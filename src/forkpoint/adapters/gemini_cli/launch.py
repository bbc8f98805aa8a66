"""How the real Gemini CLI 0.61.0 continues the rebuilt session: ``GeminiHooks`` for
forkpoint.adapters.kit.continuation.

Measured on the real binary (docs/adapters/gemini-cli.md): ``gemini --session-file <file> -p <prompt>`` imports the
session into a NEW session (a new id) under ``~/.gemini/tmp/<project>/chats/session-<epoch ms>-<id8>.jsonl`` (the
imported records, an ``info`` import record, then a ``$set.messages`` rewrite of the history, the prompt and the
new turns) and continues headless. The prompt is always the nonce (headless mode needs one), which the gate removes
or swaps for the boundary prompt, so its text never reaches the model. The model traffic goes to
``GOOGLE_GEMINI_BASE_URL`` = the bridge, with the dummy ``GEMINI_API_KEY`` and API-key auth in the isolated HOME's
settings. Gemini CLI has no step option: the bridge enforces the step budget.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from forkpoint.adapters.gemini_cli.gate import expected_prefix
from forkpoint.adapters.gemini_cli.parse import GeminiNative, model_turns, parse_gemini, signature
from forkpoint.adapters.gemini_cli.runtime import NODE_START, gemini_env, write_settings
from forkpoint.adapters.kit import continuation as shell
from forkpoint.adapters.kit.continuation import AgentHooks, Collected, GateSpec, Job, LaunchSpec, Outcome, Ran
from forkpoint.adapters.kit.npm_cli import install_jsonl, node_command, usable_model
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.fs import read_sandbox_file
from forkpoint.core.hashing import canonical_sha256
from forkpoint.core.model import JsonObject
from forkpoint.core.results import write_atomic

if TYPE_CHECKING:
    from forkpoint.bridge.server import BridgeSummary

#: where the rebuilt session is put for ``--session-file`` (inside the isolated HOME)
REBUILT_DIR = ".gemini/forkpoint"
_SESSION_ID = re.compile(r"^[0-9a-fA-F-]{36}$")
_MODEL = re.compile(r"[A-Za-z0-9._-]{1,128}")


@dataclass(frozen=True)
class Installed:
    native: GeminiNative
    model: str
    rebuilt: list[JsonObject]  # the rebuilt messages (what the gate's expected prefix is made of)
    session_file: Path


def recorded_model(native: GeminiNative) -> str:
    return usable_model(native.model, _MODEL, "the Gemini CLI recording names no usable model on its gemini messages")


class GeminiHooks(AgentHooks[Installed]):
    protocol = "google-generate-content"
    label = "Gemini CLI"
    native_cli = "gemini"

    def install(self, job: Job) -> Installed:
        native: GeminiNative = job.plan.trajectory.native
        model = recorded_model(native)
        home = job.context.home
        target = home / REBUILT_DIR / job.prefix.path.name
        _, lines = install_jsonl(job.prefix.path, home, target)
        write_settings(home, ErrorKind.CONTINUATION)
        return Installed(native, model, lines[1:], target)

    def gate(self, job: Job, state: Installed) -> GateSpec:
        from forkpoint.adapters.gemini_cli.gate import PROFILE
        from forkpoint.bridge.protocols.gemini import GeminiGate

        expected = expected_prefix(state.rebuilt, state.model, job.nonce)
        return GateSpec(GeminiGate(PROFILE, expected, job.boundary_prompt), expected.to_json())

    def launch(self, job: Job, state: Installed, bridge_url: str) -> LaunchSpec:
        entrypoint = job.settings.target.entrypoint
        env = gemini_env(job.context.home, bridge_url)
        shell.loopback_no_proxy(env)
        node = node_command(job.sandbox, entrypoint, NODE_START)
        env.update(node.env)
        argv = [*node.argv, "--session-file", str(state.session_file), "--yolo", "--skip-trust",
                "-m", state.model, "-o", "json", "-p", job.nonce]
        return LaunchSpec(argv, env, job.sandbox.cwd, job.context.logs / "gemini-cli.log",
                          writable=(job.context.home,), readable=node.readable)

    def outcome(self, job: Job, state: Installed, ran: Ran, summary: BridgeSummary) -> Outcome:
        reply = _json_reply(ran.process.stdout) if ran.process is not None else None
        session_id = reply.get("session_id") if reply else None
        metadata: JsonObject = {"native_session_id": job.prefix.session_id,
                                "gemini_cli_session_id": session_id if isinstance(session_id, str) else None,
                                "gemini_resume_transport": {"method": "--session-file + -p NONCE",
                                                            "removed_before_model_request": True}}
        if summary.budget_reached:
            return Outcome("max_steps", metadata=metadata)
        if ran.exit_code != 0 or reply is None or "error" in reply:
            error = reply.get("error") if reply else None
            detail = error.get("message") if isinstance(error, dict) else ran.tail()
            return Outcome("failed", str(detail), metadata=metadata)
        return Outcome("completed", metadata=metadata)

    def collect(self, job: Job, state: Installed, ran: Ran, outcome: Outcome,
                summary: BridgeSummary) -> Collected:
        session_id = outcome.metadata.get("gemini_cli_session_id")
        found = _continued_file(job.context.home, session_id if isinstance(session_id, str) else None)
        data = read_sandbox_file(job.context.home, found, kind=ErrorKind.CONTINUATION, what="the continued session")
        prompt = job.boundary_prompt
        restored = data.replace(job.nonce.encode(), orjson.dumps(prompt)[1:-1]) if prompt else data
        path = job.continued_dir / found.name
        write_atomic(path, restored)
        try:
            parsed = parse_gemini(path)
        except ReplayError as error:
            raise shell.reparse_error("Gemini CLI session", error) from None
        messages = parsed.native.messages
        _check_prefix(state.rebuilt, restored if not prompt else data)
        marker = prompt if prompt else job.nonce
        start = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].get("type") == "user"
                      and _text(messages[i].get("content")) == marker), None)
        if start is None:
            raise ReplayError(ErrorKind.CONTINUATION, "the continued Gemini CLI session holds no resume prompt")
        turns = [i for i in model_turns(messages) if i > start]
        next_action = signature(messages[turns[0]]) if turns else None
        return Collected(path, len(turns), next_action, {"max_steps_reported": summary.budget_reached})


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(str(p.get("text")) for p in content or [] if isinstance(p, dict) and isinstance(p.get("text"), str))


def _check_prefix(rebuilt: list[JsonObject], continued: bytes) -> None:
    """The continued file imported every rebuilt message unchanged (its records before its own ``$set.messages``
    rewrite of the history, which the parse folds away)."""
    imported = set()
    for line in continued.splitlines():
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(record, dict):
            imported.add((record.get("id"), canonical_sha256(record)))
    missing = [m.get("id") for m in rebuilt if (m.get("id"), canonical_sha256(m)) not in imported]
    if missing:
        raise ReplayError(ErrorKind.CONTINUATION, f"Gemini CLI changed {len(missing)} messages of the rebuilt prefix "
                                                  f"(first: {missing[0]!r})")


def _json_reply(stdout: bytes) -> dict[str, Any] | None:
    """The ``-o json`` document Gemini CLI prints last (a session id, the response, stats; or an error)."""
    text = stdout.decode("utf-8", "replace")
    start = text.rfind("\n{\n") + 1 if "\n{\n" in text else text.find("{")
    try:
        value = orjson.loads(text[start:]) if start >= 0 else None
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _continued_file(home: Path, session_id: str | None) -> Path:
    """The session file Gemini CLI wrote for the continued (imported) session."""
    if session_id is None or not _SESSION_ID.match(session_id):
        raise ReplayError(ErrorKind.CONTINUATION, "Gemini CLI reported no session id for the continuation")
    base = home / ".gemini" / "tmp"
    candidates = sorted(p for p in base.glob(f"*/chats/session-*-{session_id[:8]}.jsonl")
                        if p.is_file() and not p.is_symlink() and re.fullmatch(r"session-\d+-[0-9a-f]{8}\.jsonl",
                                                                               p.name))
    if len(candidates) != 1:
        raise ReplayError(ErrorKind.CONTINUATION, f"expected one continued Gemini CLI session file for {session_id}, "
                                                  f"found {len(candidates)}")
    return candidates[0]
