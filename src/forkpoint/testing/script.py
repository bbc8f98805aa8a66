"""The protocol-independent core of ScriptedModel: script blocks, turns, which turn answers a request, the log,
and the scripted faults.

See forkpoint.testing.scripted_model for the server, how a turn is chosen and how faults are scripted; the
per-protocol answers are in ``scripted_anthropic``, ``scripted_responses`` and ``scripted_chat``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Self

from aiohttp import web

from forkpoint.bridge.upstream import cut, error_json
from forkpoint.process.loopback import LoopbackSite

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


DROPS = ("before_first_byte", "after_first_byte")
Drop = Literal["before_first_byte", "after_first_byte"]


@dataclass(frozen=True)
class Fault:
    """One scripted failure of one request: an error ``status`` (with ``headers``, e.g. Retry-After), or ``drop``
    the connection before the first byte of the answer or after it (the answer's first piece was sent)."""

    status: int | None = None
    headers: tuple[tuple[str, str], ...] = ()
    drop: Drop | None = None

    def __post_init__(self) -> None:
        if (self.status is None) == (self.drop is None):
            raise ValueError("a scripted fault has exactly one of status and drop")
        if self.drop is not None and (self.drop not in DROPS or self.headers):
            raise ValueError(f"a scripted drop is one of {', '.join(DROPS)} (without headers), not {self.drop!r}")
        if self.status is not None and not 400 <= self.status <= 599:
            raise ValueError(f"a scripted fault status is 4xx or 5xx, not {self.status}")

    @classmethod
    def of(cls, value: Fault | dict[str, Any]) -> Fault:
        """From script.json: ``{"status": 429, "headers": {"Retry-After": "0"}}`` or ``{"drop": "..."}``."""
        if isinstance(value, Fault):
            return value
        unknown = set(value) - {"status", "headers", "drop"}
        if unknown:
            raise ValueError(f"unknown scripted fault keys: {', '.join(sorted(unknown))}")
        headers = value.get("headers") or {}
        return cls(value.get("status"), tuple((str(k), str(v)) for k, v in headers.items()), value.get("drop"))

    @property
    def label(self) -> str:
        return f"status {self.status}" if self.status is not None else f"drop {self.drop}"

    async def answer(self, request: web.Request, pieces: Sequence[bytes], content_type: str) -> web.StreamResponse:
        """Fail ``request`` as scripted; ``pieces`` is the real answer (its first piece is what a drop after the
        first byte sends before the connection is closed)."""
        if self.status is not None:
            kind = {429: "rate_limit_error", 503: "overloaded_error", 529: "overloaded_error"}.get(self.status,
                                                                                                  "api_error")
            return web.json_response(error_json(kind, f"ScriptedModel: scripted HTTP {self.status}"),
                                     status=self.status, headers=dict(self.headers))
        response = web.StreamResponse(status=200, headers={"Content-Type": content_type})
        if self.drop == "after_first_byte":
            await response.prepare(request)
            await response.write(pieces[0] if pieces and pieces[0] else b" ")
        cut(request)
        return response

    async def answer_json(self, request: web.Request, whole: dict[str, Any]) -> web.StreamResponse:
        """Fail a non-streamed request: a drop after the first byte sends half of the ``whole`` JSON answer."""
        body = json.dumps(whole).encode()
        middle = max(1, len(body) // 2)
        return await self.answer(request, [body[:middle], body[middle:]], "application/json")




@dataclass(frozen=True)
class Turn:
    """One assistant response. ``stop_reason`` defaults to tool_use when it has tool calls, else end_turn."""

    content: tuple[Block, ...]
    stop_reason: str | None = None
    #: answer with headers and then nothing, forever (an upstream that goes silent; Chat Completions only)
    stall: bool = False
    #: the first requests this turn answers fail like this, one fault per request, in order; then it answers
    faults: tuple[Fault, ...] = ()

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
            return cls(tuple(value["content"]), value.get("stop_reason"), bool(value.get("stall", False)),
                       tuple(Fault.of(fault) for fault in value.get("faults", ())))
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
    #: how a Chat request asking for token ids is answered: ``vllm``, or a hostile server
    #: (``forkpoint.testing.scripted_tokens.MODES``)
    token_mode: str = "vllm"
    _script: list[Turn] = field(init=False, repr=False)
    _scripts: dict[str, list[Turn]] = field(init=False, repr=False)
    _chosen: list[Turn] = field(init=False, repr=False)
    _main_count: int = field(default=0, init=False, repr=False)
    #: id of a turn -> how many of its faults were served
    _faulted: dict[int, int] = field(default_factory=dict, init=False, repr=False)
    _site: LoopbackSite = field(default_factory=LoopbackSite, init=False, repr=False)

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

    def fault_for(self, kind: str, step: int | None, entry: dict[str, Any]) -> Fault | None:
        """The scripted fault this main request gets (the turn's next unserved one, noted in its log ``entry``),
        else None; call it once per request, right after ``_select`` (helper requests never fail)."""
        turn = None if kind != "main" or step is None else self.turn_at(step)
        if turn is None or not turn.faults:
            return None
        served = self._faulted.get(id(turn), 0)
        if served >= len(turn.faults):
            return None
        self._faulted[id(turn)] = served + 1
        entry["fault"] = turn.faults[served].label
        return turn.faults[served]

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
