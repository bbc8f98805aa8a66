"""The protocol-independent core of ScriptedModel: script blocks, turns, which turn answers a request, the log.

See forkpoint.testing.scripted_model for the server and how a turn is chosen; the per-protocol answers are in
``scripted_anthropic``, ``scripted_responses`` and ``scripted_chat``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Self

from aiohttp import web

Block = dict[str, Any]
StepMode = Literal["conversation", "counter"]

_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_SECRET_HEADERS = {"x-api-key", "authorization", "proxy-authorization", "cookie"}


def text(value: str) -> Block:
    return {"type": "text", "text": value}


def thinking(value: str, signature: str = "c2NyaXB0ZWQtc2lnbmF0dXJl") -> Block:
    return {"type": "thinking", "thinking": value, "signature": signature}


def tool_use(name: str, input: dict[str, Any], id: str | None = None) -> Block:
    block: Block = {"type": "tool_use", "name": name, "input": input}
    if id is not None:
        block["id"] = id
    return block


def custom_tool_call(name: str, input: str, id: str | None = None) -> Block:
    """A freeform tool call (Responses API only), e.g. Codex's ``apply_patch`` with the patch text as input."""
    block: Block = {"type": "custom_tool_call", "name": name, "input": input}
    if id is not None:
        block["id"] = id
    return block


@dataclass(frozen=True)
class Turn:
    """One assistant response. ``stop_reason`` defaults to tool_use when it has tool calls, else end_turn."""

    content: tuple[Block, ...]
    stop_reason: str | None = None
    #: answer with headers and then nothing, forever (an upstream that goes silent; Chat Completions only)
    stall: bool = False

    @property
    def effective_stop_reason(self) -> str:
        if self.stop_reason:
            return self.stop_reason
        return "tool_use" if any(b.get("type") == "tool_use" for b in self.content) else "end_turn"

    @classmethod
    def of(cls, value: Turn | Sequence[Block] | dict[str, Any]) -> Turn:
        if isinstance(value, Turn):
            return value
        if isinstance(value, dict):
            return cls(tuple(value["content"]), value.get("stop_reason"), bool(value.get("stall", False)))
        return cls(tuple(value))


def stable_id(prefix: str, *parts: object, length: int = 24) -> str:
    """``prefix`` + ``length`` alphanumerics derived from ``parts`` (deterministic)."""
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    number = int.from_bytes(digest, "big")
    chars = []
    for _ in range(length):
        number, rem = divmod(number, len(_ALPHABET))
        chars.append(_ALPHABET[rem])
    return prefix + "".join(chars)


@dataclass
class ScriptCore:
    """The script and the request log shared by every protocol's answers (``requests``: auth headers removed)."""

    turns: Sequence[Turn | Sequence[Block] | dict[str, Any]]
    seed: str = "forkpoint"
    step_mode: StepMode = "conversation"
    log_path: Path | None = None
    model: str = "claude-scripted"
    final_text: str = "Done."
    aux_text: str = "Scripted helper answer"
    #: False: a request without ``tools`` is a main request too (agents that parse actions from text)
    tools_required: bool = True
    #: past the end of the script, repeat the last turn (a model that never stops) instead of ``final_text``
    loop_last: bool = False
    requests: list[dict[str, Any]] = field(default_factory=list)
    #: key -> turns: a request whose JSON body contains the key is answered from these turns (first key wins)
    keyed: dict[str, Sequence[Turn | Sequence[Block] | dict[str, Any]]] = field(default_factory=dict)
    _script: list[Turn] = field(init=False, repr=False)
    _scripts: dict[str, list[Turn]] = field(init=False, repr=False)
    _chosen: list[Turn] = field(init=False, repr=False)
    _main_count: int = field(default=0, init=False, repr=False)
    _runner: web.AppRunner | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self._script = [Turn.of(t) for t in self.turns]
        self._scripts = {key: [Turn.of(t) for t in turns] for key, turns in self.keyed.items()}
        self._chosen = self._script

    @classmethod
    def from_file(cls, path: Path, **kwargs: Any) -> Self:
        """Load ``{"turns": [{"content": [...], "stop_reason"?: ...}, ...], "seed"?: str}``."""
        data = json.loads(Path(path).read_text("utf-8"))
        kwargs.setdefault("seed", data.get("seed", "forkpoint"))
        return cls(data["turns"], **kwargs)

    # -- answering -------------------------------------------------------------------------------------

    def _select(self, body: dict[str, Any], turns_so_far: Callable[[], int]) -> tuple[str, int | None]:
        # select and respond run back to back (no await between them), so the choice holds for this request
        raw = json.dumps(body, ensure_ascii=False) if self._scripts else ""
        self._chosen = next((script for key, script in self._scripts.items() if key in raw), self._script)
        if self.tools_required and not body.get("tools"):
            return "aux", None
        if self.step_mode == "counter":
            step = self._main_count
            self._main_count += 1
            return "main", step
        return "main", turns_so_far()

    def turn_at(self, step: int) -> Turn | None:
        """The scripted turn answering ``step``; None past the end (unless ``loop_last``)."""
        script = self._chosen
        if step < len(script):
            return script[step]
        return script[-1] if self.loop_last and script else None

    def _log(self, entry: dict[str, Any]) -> None:
        self.requests.append(entry)
        if self.log_path is not None:
            with self.log_path.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(entry, ensure_ascii=False) + "\n")

    async def _record(self, request: web.Request) -> dict[str, Any]:
        raw = await request.read()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _SECRET_HEADERS}
        entry = {"seq": len(self.requests) + 1, "method": request.method, "path": request.path_qs,
                 "headers": headers, "body": body}
        return entry
