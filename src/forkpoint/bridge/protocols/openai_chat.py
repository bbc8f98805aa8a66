"""OpenAI Chat Completions on the bridge (OpenCode, Pi, litellm agents): upstream, stub and wire encoding.

Shared with forkpoint.testing's ScriptedModel and OpenCode's tool host. A scripted or stubbed answer's blocks map to:

* ``text`` -> ``message.content`` (several text blocks are joined),
* ``thinking`` -> ``message.reasoning_content`` (what DeepSeek-style servers send and Pi / litellm read),
* ``tool_use`` -> one ``tool_calls`` entry (``id`` = the block's id or ``call_id(index)``; ``arguments`` = the
  JSON of ``input``); ``function_call`` blocks pass a raw ``arguments`` string through (e.g. invalid JSON).

Streaming follows OpenAI: a role chunk, content / reasoning / tool-call deltas (the first delta of a call carries
``id``, ``type`` and ``name``), a finish chunk, an optional usage chunk (``stream_options.include_usage``), then
``data: [DONE]``.

The gate side: ``ExpectedChat`` (the one expected-prefix type of this protocol), ``compare``/``explain`` and
``ChatGate``, the one Chat Completions gate. What differs between agents is DATA, a ``ChatProfile`` kept in each
adapter's gate.py: how the agent's wire messages are projected for comparison, whether a leading system message
is part of the prefix or fingerprinted, the resume envelope (the shape of the one nonce message the agent appends,
replaced by the boundary prompt in the same shape), whether the model and tool list are pinned, messages that must
never appear, and helper (non-step) requests. The rules every profile shares:

* the first request ends exactly at the rebuilt prefix (plus the nonce message, when the profile resumes with one);
  a later request repeats the prefix and keeps what follows (a later request that adds nothing is a retry of the
  validated first request and is accepted, as in every gate: see ``bridge.gate``);
* every message is compared by the hash of its projection; a refusal names the first differing message;
* the nonce occurs exactly once and never in the cleaned body; the system fingerprint never changes between
  requests; ``previous_response_id``/``conversation`` (history the gate cannot see) are refused.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from forkpoint.bridge.gate import (
    PrefixGate,
    Refusal,
    Verdict,
    compare_prefix,
    helper_request,
    nonce_position,
    open_request,
    refuse_nonce_in,
)
from forkpoint.bridge.protocols.openai import OpenAIUpstream, model_of, openai_error_response
from forkpoint.bridge.protocols.spec import ProtocolSpec
from forkpoint.bridge.tool_schemas import from_chat
from forkpoint.bridge.translate.sampling import chat_pins
from forkpoint.bridge.upstream import CHUNK, LocalStub, Sent, sse_event, stream_events
from forkpoint.core.hashing import canonical_sha256
from forkpoint.core.model import JsonObject
from forkpoint.core.protocols import wire

if TYPE_CHECKING:
    from forkpoint.bridge.protocols import Patience

PROTOCOL = "openai-chat"
CREATED = 1767225600
ROUTES = frozenset({"/v1/chat/completions", "/chat/completions"})


class OpenAIChatUpstream(OpenAIUpstream):
    """OpenAI Chat Completions (OpenCode's openai-compatible provider, Pi's openai-completions, litellm)."""

    name = wire(PROTOCOL).upstream
    endpoint = "/chat/completions"


def chat_message(blocks: list[JsonObject], call_id: Callable[[int], Any]) -> tuple[JsonObject, str]:
    """(assistant message, finish_reason) for scripted blocks; ``call_id(index)`` names calls without an id."""
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[JsonObject] = []
    for index, block in enumerate(blocks):
        kind = block.get("type")
        if kind == "text":
            texts.append(block["text"])
        elif kind == "thinking":
            reasoning.append(block["thinking"])
        elif kind in ("tool_use", "function_call"):
            arguments = block["arguments"] if kind == "function_call" else json.dumps(block["input"],
                                                                                      ensure_ascii=False)
            calls.append({"id": block.get("id") or call_id(index), "type": "function",
                          "function": {"name": block["name"], "arguments": arguments}})
        else:
            raise ValueError(f"unsupported scripted block type {kind!r} for Chat Completions")
    message: JsonObject = {"role": "assistant", "content": "".join(texts) if texts or not calls else None}
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    if calls:
        message["tool_calls"] = calls
    return message, "tool_calls" if calls else "stop"


def usage_for(message: JsonObject) -> JsonObject:
    completion = 10 + len(json.dumps(message)) // 4
    return {"prompt_tokens": 100, "completion_tokens": completion, "total_tokens": 100 + completion}


def chat_completion(response_id: str, model: str, message: JsonObject, finish_reason: str,
                    usage: JsonObject | None = None) -> JsonObject:
    """The non-streaming ``chat.completion`` object."""
    return {"id": response_id, "object": "chat.completion", "created": CREATED, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}],
            "usage": usage_for(message) if usage is None else usage}


def chat_chunks(response_id: str, model: str, message: JsonObject, finish_reason: str, include_usage: bool,
                usage: JsonObject | None = None, chunk_size: int = CHUNK) -> Iterator[JsonObject]:
    """The ``chat.completion.chunk`` objects of one streamed answer (without the final ``[DONE]``)."""
    def chunk(delta: JsonObject, finish: str | None = None) -> JsonObject:
        return {"id": response_id, "object": "chat.completion.chunk", "created": CREATED, "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}

    def parts(value: str) -> list[str]:
        return [value[i:i + chunk_size] for i in range(0, len(value), chunk_size)]

    yield chunk({"role": "assistant", "content": ""})
    for part in parts(message.get("reasoning_content") or ""):
        yield chunk({"reasoning_content": part})
    for part in parts(message.get("content") or ""):
        yield chunk({"content": part})
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        yield chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                     "function": {"name": function["name"], "arguments": ""}}]})
        for part in parts(function["arguments"]):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
    yield chunk({}, finish_reason)
    if include_usage:
        yield {"id": response_id, "object": "chat.completion.chunk", "created": CREATED, "model": model,
               "choices": [], "usage": usage_for(message) if usage is None else usage}


def sse_data(payload: JsonObject | str) -> bytes:
    """One ``data:`` line of the Chat Completions stream (``"[DONE]"`` is sent verbatim)."""
    return sse_event(None, payload)


def wants_usage(body: JsonObject) -> bool:
    """Whether a streamed answer ends with a usage chunk (``stream_options.include_usage``)."""
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def encode(chunks: Iterable[JsonObject]) -> list[bytes]:
    """The SSE bytes of a streamed answer, ``[DONE]`` included."""
    return [*(sse_data(chunk) for chunk in chunks), sse_data("[DONE]")]


def encode_events(events: Iterable[tuple[str, JsonObject]]) -> list[bytes]:
    """The codec's form of ``encode``: Chat chunks are unnamed ``data:`` lines (the event name is not sent)."""
    return encode(data for _, data in events)


class ChatStubUpstream(LocalStub):
    """Answers a validated Chat Completions request itself with one short assistant message (SSE when ``stream``)."""

    async def send(self, request: web.Request, body: JsonObject) -> tuple[web.StreamResponse, Sent]:
        self._count += 1
        completion_id = f"chatcmpl-forkpoint-stub-{self._count:04d}"
        usage: JsonObject = {"prompt_tokens": 0, "completion_tokens": 1, "total_tokens": 1}
        message: JsonObject = {"role": "assistant", "content": self.text}
        if body.get("stream") is not True:
            return web.json_response({**chat_completion(completion_id, model_of(body), message, "stop", usage),
                                      "created": 0}), Sent(200, False)
        chunks = chat_chunks(completion_id, model_of(body), message, "stop", wants_usage(body), usage,
                             chunk_size=max(1, len(self.text)))
        return await stream_events(request, encode({**c, "created": 0} for c in chunks)), Sent(200, False)


# -- the gate ----------------------------------------------------------------------------------------------------

SCHEMA_VERSION = "forkpoint.chat-expected-prefix/v1"
SERVER_HISTORY_FIELDS = ("previous_response_id", "conversation")


@dataclass(frozen=True)
class ExpectedChat:
    """The conversation a resumed Chat Completions agent must send, projected the way its profile compares it.

    ``messages`` stay in memory (they name a difference); ``to_json`` (what is written to expected-prefix.json)
    holds hashes, roles, ids and the nonce only, never message bodies.
    """

    profile: str
    messages: tuple[Any, ...]
    message_sha256: tuple[str, ...]
    prefix_sha256: str
    nonce: str | None = None  # set when the agent resumes by sending a nonce message (see ChatProfile.nonce_message)
    model: str | None = None  # the recorded model the request must ask for (None: not pinned)
    tools: tuple[str, ...] | None = None  # the tool names the request must offer, in order (None: not pinned)
    system_sha256: str | None = None  # the fingerprint the leading system message must have (None: any, then stable)

    @classmethod
    def of(cls, profile: str, messages: Sequence[Any], *, nonce: str | None = None, model: str | None = None,
           tools: Sequence[str] | None = None, system_sha256: str | None = None) -> ExpectedChat:
        return cls(profile, tuple(messages), tuple(canonical_sha256(m) for m in messages),
                   canonical_sha256(list(messages)), nonce, model, None if tools is None else tuple(tools),
                   system_sha256)

    @property
    def message_count(self) -> int:
        return len(self.messages)

    @property
    def message_roles(self) -> tuple[str, ...]:
        return tuple(str(m.get("role")) if isinstance(m, dict) else "?" for m in self.messages)

    @property
    def boundary_call_ids(self) -> tuple[str, ...]:
        """The ids of the trailing tool results (the boundary batch)."""
        ids: list[str] = []
        for message in reversed(self.messages):
            if not isinstance(message, dict) or message.get("role") != "tool":
                break
            ids.insert(0, str(message.get("tool_call_id")))
        return tuple(ids)

    def to_json(self) -> JsonObject:
        return {"schema_version": SCHEMA_VERSION, "profile": self.profile, "nonce": self.nonce, "model": self.model,
                "tools": None if self.tools is None else list(self.tools), "message_count": self.message_count,
                "message_roles": list(self.message_roles), "message_sha256": list(self.message_sha256),
                "prefix_sha256": self.prefix_sha256, "boundary_call_ids": list(self.boundary_call_ids),
                "system_sha256": self.system_sha256}


@dataclass(frozen=True)
class Forbidden:
    """A message that must never appear in a request: ``role`` with content equal to (or starting with) ``text``."""

    role: str
    text: str
    reason: str
    prefix: bool = False

    def matches(self, message: JsonObject) -> bool:
        content = message.get("content")
        if message.get("role") != self.role or not isinstance(content, str):
            return False
        return content.startswith(self.text) if self.prefix else content == self.text


@dataclass(frozen=True)
class ChatProfile:
    """One agent's Chat Completions envelope, as data (kept in the adapter's gate.py)."""

    agent: str
    #: request message (and its index) -> the compared form; the expected side is built in the same form
    project: Callable[[Any, int], Any]
    #: the leading system message: "prefix" = part of the compared conversation; "optional" = fingerprinted when
    #: present (roles ``system_roles``); "required" = exactly one ``{role: system, content: str}`` fingerprinted
    system: str = "prefix"
    system_roles: tuple[str, ...] = ("system",)
    #: the system fingerprint (e.g. with a date line masked)
    system_hash: Callable[[Any], str] = canonical_sha256
    #: the message the agent appends to carry the nonce (its text replaced by the boundary prompt, same shape)
    nonce_message: Callable[[str], JsonObject] | None = None
    #: the agent wraps its prompt in volatile context of its own (Copilot CLI's ``<current_datetime>`` line, Qwen
    #: Code's ``<system-reminder>`` parts): ``(request message, nonce) -> builder`` when the message is the nonce
    #: message in that envelope (else None); ``builder(text)`` is the same message with ``text`` in the nonce's place,
    #: so a boundary prompt is forwarded as the agent would have sent it. None: the nonce message is exact.
    nonce_envelope: Callable[[Any, str], Callable[[str], JsonObject] | None] | None = None
    forbidden: tuple[Forbidden, ...] = ()
    #: requests without tools are the agent's helper calls (title generation): forwarded, not a step
    helpers_without_tools: bool = False
    #: envelope profile ids this profile was verified for (None: the manifest's profile is not checked)
    verified: frozenset[str] | None = None


def tool_names(tools: Any) -> tuple[str | None, ...] | None:
    """The function names a Chat Completions ``tools`` array offers (None when it is not an array)."""
    if tools is None:
        return ()
    if not isinstance(tools, list):
        return None
    functions = [t.get("function") if isinstance(t, dict) else None for t in tools]
    return tuple(f.get("name") if isinstance(f, dict) and isinstance(f.get("name"), str) else None
                 for f in functions)


def parsed_arguments(call: Any) -> Any:
    """A tool call with its ``function.arguments`` JSON string parsed (unparseable arguments stay strings)."""
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        return call
    arguments = call["function"].get("arguments")
    if not isinstance(arguments, str):
        return call
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return call
    return {**call, "function": {**call["function"], "arguments": value}}


def describe(message: Any) -> str:
    """A message as a refusal names it."""
    if not isinstance(message, dict):
        return f"a {type(message).__name__}"
    role = message.get("role")
    if role == "tool":
        return f"the tool result for {message.get('tool_call_id')}"
    calls = message.get("tool_calls")
    if role == "assistant" and isinstance(calls, list) and calls:
        ids = [c.get("id") for c in calls if isinstance(c, dict)]
        return f"the assistant message with tool calls {ids}"
    return f"the {role} message"


def explain(want: Any, got: Any) -> str:
    """What differs between an expected and a request message (both projected), first difference only."""
    if not isinstance(got, dict):
        return f"it is a {type(got).__name__}, not a message object"
    if not isinstance(want, dict):
        return "it differs"
    if want.get("role") != got.get("role"):
        return f"role is {got.get('role')!r}, expected {want.get('role')!r}"
    key = next((k for k in sorted(set(want) | set(got)) if (k in want) != (k in got) or want[k] != got[k]), None)
    if key is None:
        return "it differs"
    same_call = want.get("role") == "tool" and want.get("tool_call_id") == got.get("tool_call_id")
    if same_call and key in want and key in got:
        return f"the observation of {got.get('tool_call_id')} differs (in {key!r})"
    if key not in got:
        return f"its {key!r} is missing"
    if key not in want:
        return f"it has an unexpected {key!r}"
    return f"its {key!r} differs"


def compare(expected: ExpectedChat, conversation: Sequence[Any], offset: int, *, exact: bool, where: str) -> None:
    """Refuse unless ``conversation`` (request messages from ``offset``, projected) starts with the expected
    conversation (``exact``: equals it); name the first difference."""
    compare_prefix("messages", expected.messages, expected.message_sha256, expected.prefix_sha256, conversation,
                   exact=exact, counted=f"conversation messages {where}", offset=offset, describe=describe,
                   explain=explain)


class ChatGate(PrefixGate[ExpectedChat]):
    """Chat Completions requests from a resumed agent, checked against ``expected`` with the agent's profile."""

    name = PROTOCOL
    model_routes = ROUTES

    def __init__(self, profile: ChatProfile, expected: ExpectedChat, boundary_prompt: str | None = None) -> None:
        super().__init__(expected, boundary_prompt)
        self.profile = profile
        self._system: str | None = None  # the fingerprint of the first request's system message

    def auxiliary(self, body: Any) -> Verdict | None:
        """With ``helpers_without_tools``: a request without tools is forwarded unchanged unless it carries the
        nonce; otherwise every request is a model request."""
        return helper_request(body, self.profile.helpers_without_tools, self.expected.nonce, self.expected.profile,
                              "no-tools helper request (title generation)")

    def clean(self, body: Any, first: bool, facts: JsonObject) -> JsonObject:
        profile, expected, prompt = self.profile, self.expected, self.boundary_prompt
        if profile.verified is not None and expected.profile not in profile.verified:
            raise Refusal(f"no verified resume envelope profile {expected.profile!r} for {profile.agent}")
        if prompt is not None and (expected.nonce is None or profile.nonce_message is None):
            raise Refusal("the gate was configured inconsistently (a boundary prompt needs the resume nonce)")
        body, messages = open_request(body, nonce=expected.nonce, boundary_prompt=prompt, objects=False,
                                      shape="the request has no list of messages", checks=self._check_top)
        start = self._system_message(messages, facts)
        end = self._nonce_index(messages, start, first, facts)
        nonced = end is not None
        if end is None:
            end = start + expected.message_count
        projected = [profile.project(message, start + index) for index, message in enumerate(messages[start:end])]
        compare(expected, projected, start, exact=nonced,
                where="before the resume nonce" if nonced else "after the system prompt" if start else "in all")
        rest = messages[end + 1:] if nonced else messages[end:]
        if first and rest:
            raise Refusal(f"messages[{end}] ({describe(rest[0])}) follows the boundary; the first request must end "
                          "at the last fresh observation (or the boundary prompt after it)")
        for index, message in enumerate(messages):
            for rule in profile.forbidden:
                if isinstance(message, dict) and rule.matches(message):
                    raise Refusal(f"messages[{index}] is {rule.reason}")
        cleaned_tail = [] if prompt is None or profile.nonce_message is None else [
            self._prompt_message(messages[end] if nonced else None, prompt, profile.nonce_message)]
        cleaned = {**body, "messages": [*messages[:end], *cleaned_tail, *rest]}
        if expected.nonce is not None:  # the nonce message, its only place, is not in the cleaned copy
            refuse_nonce_in(cleaned_tail, expected.nonce)
        facts["boundary_prompt"] = bool(cleaned_tail)
        facts["continuation_messages"] = len(rest)
        facts["message_count"] = expected.message_count
        facts["prefix_sha256"] = expected.prefix_sha256
        return cleaned

    def _check_top(self, body: JsonObject) -> None:
        """The model and tool list the recording pins, and no server-side history."""
        expected = self.expected
        if expected.model is not None and body.get("model") != expected.model:
            raise Refusal(f"the request asks for model {body.get('model')!r}, the recording used {expected.model!r}")
        offered = tool_names(body.get("tools"))
        if expected.tools is not None and offered != expected.tools:
            raise Refusal(f"the offered tools {None if offered is None else list(offered)} differ from "
                          f"{self.profile.agent}'s enabled tool set {list(expected.tools)}")
        for name in SERVER_HISTORY_FIELDS:
            if body.get(name) is not None:
                raise Refusal(f"the request sets {name!r}: the upstream would add history the gate cannot check")

    def _system_message(self, messages: list[Any], facts: JsonObject) -> int:
        """How many leading messages are the fingerprinted system prompt (0 or 1)."""
        rule = self.profile.system
        if rule == "prefix":
            return 0
        head = messages[0] if messages else None
        present = isinstance(head, dict) and head.get("role") in self.profile.system_roles
        if rule == "required" and not (present and isinstance(head, dict) and isinstance(head.get("content"), str)
                                       and set(head) == {"role", "content"}):
            raise Refusal(f"messages[0] is not {self.profile.agent}'s single system message")
        if not present or not isinstance(head, dict):
            return 0
        fingerprint = self.profile.system_hash(head.get("content"))
        facts["system_sha256"] = fingerprint
        if self.expected.system_sha256 is not None and fingerprint != self.expected.system_sha256:
            raise Refusal("the system prompt differs from the expected one")
        if self._system is not None and fingerprint != self._system:
            raise Refusal("the system prompt changed since the first request")
        self._system = fingerprint
        return 1

    def _nonce_index(self, messages: list[Any], start: int, first: bool, facts: JsonObject) -> int | None:
        """Where the nonce message is (the compared conversation ends there), or None for a profile or run that
        resumes without one; it must be the one message equal to the profile's nonce message, after a tool result
        (and, in the first request, the last message)."""
        nonce, shape = self.expected.nonce, self.profile.nonce_message
        if nonce is None or shape is None:
            return None
        envelope = shape(nonce)
        wrapped = self.profile.nonce_envelope

        def is_nonce(message: JsonObject) -> bool:
            return message == envelope or (wrapped is not None and wrapped(message, nonce) is not None)

        i = nonce_position([m if isinstance(m, dict) else {} for m in messages], is_nonce,
                           f"the resume nonce is not the exact content of a user message {_shape(envelope)}", facts)
        if first and i != len(messages) - 1:
            raise Refusal(f"messages[{i + 1}] ({describe(messages[i + 1])}) follows the resume nonce; the first "
                          "request must end with it")
        before = messages[i - 1] if i > start else None
        if not isinstance(before, dict) or before.get("role") != "tool":
            raise Refusal("the message before the resume nonce is not a tool result")
        return i


    def _prompt_message(self, nonce_message: Any, prompt: str, plain: Callable[[str], JsonObject]) -> JsonObject:
        """The boundary prompt in the envelope the agent put around the nonce (the plain prompt message without one)."""
        wrapped, nonce = self.profile.nonce_envelope, self.expected.nonce
        build = wrapped(nonce_message, nonce) if wrapped is not None and nonce is not None else None
        return plain(prompt) if build is None else build(prompt)


def _shape(message: JsonObject) -> str:
    """The nonce message's shape, as a refusal names it (``{role, content}`` or its block list)."""
    return "{role, content}" if isinstance(message.get("content"), str) else "{role, content: [text block]}"


# -- the registry's spec -------------------------------------------------------------------------------------------


def agent_error(status: int, message: str) -> web.Response:
    """An upstream failure as the OpenAI API reports it."""
    return openai_error_response(status, "rate_limit_exceeded" if status == 429 else "server_error", message,
                                 "upstream_error")


def _passthrough(url: str, key: str, patience: Patience) -> OpenAIChatUpstream:
    return OpenAIChatUpstream(url, key, retry=patience.retry, **patience.options())


def _refusal(status: int, message: str) -> web.Response:
    """What OpenAI clients do not retry: an ``invalid_request_error``."""
    return openai_error_response(status, "invalid_request_error", message, "upstream_failed")


SPEC = ProtocolSpec(
    name=PROTOCOL, passthrough=_passthrough, stub=ChatStubUpstream, encode=encode_events, pins=chat_pins,
    tool_schemas=from_chat, error=agent_error, refusal=_refusal,
    sample_request={"model": "gpt-5", "messages": [{"role": "user", "content": "hello"}]},
    translating="forkpoint.bridge.protocols.translating:TranslatingChatUpstream",
)
