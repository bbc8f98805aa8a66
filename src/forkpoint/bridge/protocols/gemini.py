"""Google's Generative Language API (``generateContent`` / ``streamGenerateContent``) on the bridge: Gemini CLI.

Measured on Gemini CLI 0.61.0 (docs/adapters/gemini-cli.md): the agent POSTs to
``<GOOGLE_GEMINI_BASE_URL>/v1beta/models/<model>:streamGenerateContent?alt=sse`` with its key in
``x-goog-api-key``; the body is ``contents`` (``{role: user|model, parts: [...]}``), ``systemInstruction``,
``tools`` (``[{functionDeclarations: [...]}]``) and ``generationConfig``. The model is in the URL, not the body.
The answer is an SSE stream of ``data:`` lines, each a whole ``GenerateContentResponse`` (``candidates[0].content
.parts`` pieces, the last with ``finishReason``; ``usageMetadata`` with ``promptTokenCount`` /
``candidatesTokenCount`` / ``thoughtsTokenCount`` / ``cachedContentTokenCount``).

A scripted or stubbed answer's blocks map to parts: ``text`` -> ``{text}`` (streamed in pieces), ``thinking`` ->
``{text, thought: true}``, ``tool_use`` -> ``{functionCall: {name, args, id?}}`` (one chunk each).

The gate side (``GeminiGate``, the one gate of this protocol; an agent's envelope is DATA, a ``GeminiProfile`` in
its adapter's gate.py): every content is compared by the hash of its canonical projection (``project_content``:
text / thought / call ``{name, args}`` / result ``{name, response}``; call ids and ``thoughtSignature`` are not
history the model sees across a resume and are left out), the first request must end exactly at the rebuilt
prefix plus the profile's resume envelope and the nonce content, later requests repeat it and keep what follows.
``cachedContent`` (server-side history the gate cannot see) and top-level fields the gate does not know are refused.

Translated to Chat Completions (``--upstream openai-chat``) by ``bridge.translate.gemini_chat`` and
``gemini_answer``; the model and method of the route reach the translation through ``ChatTranslation.route``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

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
from forkpoint.bridge.protocols.spec import ChatTranslation, ProtocolSpec
from forkpoint.bridge.translate.gemini_answer import google_error_json, response_object
from forkpoint.bridge.translate.gemini_chat import API_VERSION, STREAM, WHOLE, route_of
from forkpoint.bridge.translate.sampling import Change, Put, SamplingPins, UnsupportedPin
from forkpoint.bridge.upstream import (
    CHUNK,
    DROPPED_REQUEST_HEADERS,
    HttpUpstream,
    LocalStub,
    Sent,
    pieces,
    route_path,
    sse_event,
    stream_events,
)
from forkpoint.core.hashing import canonical_sha256
from forkpoint.core.model import JsonObject
from forkpoint.core.protocols import wire

if TYPE_CHECKING:
    from forkpoint.bridge.protocols import Patience
    from forkpoint.bridge.translate.common import ChatOptions, Translated
    from forkpoint.bridge.translate.pipeline import Prepared
    from forkpoint.bridge.translate.sequencer import BlockSequencer

PROTOCOL = "google-generate-content"
#: the top-level request fields the gate knows (anything else is refused: it could carry history or tools)
KNOWN_FIELDS = frozenset({"contents", "systemInstruction", "tools", "toolConfig", "generationConfig",
                          "safetySettings", "labels"})
#: server-side history the gate cannot see
SERVER_HISTORY_FIELDS = ("cachedContent",)


def model_routes(model: str) -> frozenset[str]:
    """The bridge paths (under its token) of one model's two methods."""
    return frozenset(f"/{API_VERSION}/models/{model}:{method}" for method in (STREAM, WHOLE))


# -- errors --------------------------------------------------------------------------------------------------------


def google_error_response(status: int, message: str) -> web.Response:
    return web.json_response(google_error_json(status, message), status=status)


def agent_error(status: int, message: str) -> web.Response:
    """An upstream failure as the Gemini API reports it (Gemini CLI retries 429 and 5xx)."""
    return google_error_response(status, message)


def _refusal(status: int, message: str) -> web.Response:
    """What Gemini CLI does not retry: a 400 ``INVALID_ARGUMENT``."""
    return google_error_response(400 if status < 400 or status >= 500 else status, message)


# -- the pass-through upstream -------------------------------------------------------------------------------------


class GeminiUpstream(HttpUpstream):
    """POST the cleaned body to ``<base>/v1beta/models/<model>:<method>`` with the bridge's key in
    ``x-goog-api-key``. The model and method come from the agent's path (the gate accepted only the recorded
    model's routes); a ``--model`` pin (a ``model`` field the pins put in the body) replaces the model in the URL
    and is removed from the body (the API has no such body field)."""

    name = wire(PROTOCOL).upstream
    dropped_request_headers: ClassVar[frozenset[str]] = DROPPED_REQUEST_HEADERS | {
        "x-goog-api-key", "x-gemini-api-privileged-user-id", "x-goog-user-project"}
    passed_response_headers: ClassVar[frozenset[str]] = frozenset({
        "content-type", "content-encoding", "cache-control", "retry-after", "x-request-id"})
    passed_response_prefixes: ClassVar[tuple[str, ...]] = ("x-goog-",)

    def url_for(self, base: str) -> str:
        return base if base.endswith(f"/{API_VERSION}") else f"{base}/{API_VERSION}"

    def target(self, request: web.Request, body: JsonObject) -> tuple[str, JsonObject]:
        tail = route_path(request).partition("?")[0]
        route = route_of(tail)
        if route is None:  # the gate routes only model paths here: a bug, not input
            raise ValueError(f"not a Gemini model path: {tail!r}")
        model, method = route
        if "model" in body:
            body = dict(body)
            pinned = body.pop("model")
            model = pinned.removeprefix("models/") if isinstance(pinned, str) else model
        query = f"?{request.query_string}" if request.query_string else ""
        return f"{self.url}/models/{model}:{method}{query}", body

    def key_headers(self, api_key: str) -> dict[str, str]:
        return {"x-goog-api-key": api_key}

    def error(self, status: int, message: str) -> web.Response:
        return google_error_response(status, message)

    def refusal(self, status: int, message: str) -> web.Response:
        return _refusal(status, message)


# -- answers (ScriptedModel and the stub) --------------------------------------------------------------------------


def answer_parts(blocks: Iterable[JsonObject]) -> list[JsonObject]:
    """Scripted blocks as Gemini parts (see the module docstring)."""
    parts: list[JsonObject] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            parts.append({"text": block["text"]})
        elif kind == "thinking":
            parts.append({"text": block["thinking"], "thought": True})
        elif kind == "tool_use":
            call: JsonObject = {"name": block["name"], "args": block["input"]}
            if block.get("id"):
                call["id"] = block["id"]
            parts.append({"functionCall": call})
        else:
            raise ValueError(f"unsupported scripted block type {kind!r} for the Gemini API")
    return parts


def usage_metadata(parts: Sequence[JsonObject], prompt_tokens: int = 100) -> JsonObject:
    """A plausible ``usageMetadata`` for an answer of ``parts``."""
    output = 10 + sum(len(str(part)) // 4 for part in parts)
    return {"promptTokenCount": prompt_tokens, "candidatesTokenCount": output,
            "totalTokenCount": prompt_tokens + output}


def response_chunks(response_id: str, model: str, parts: list[JsonObject], usage: JsonObject,
                    chunk: int = CHUNK) -> Iterator[tuple[str, JsonObject]]:
    """The stream of one answer: text in pieces, each call whole, the last chunk with ``finishReason`` (``STOP``:
    Gemini ends a turn with calls with STOP too) and ``usageMetadata``."""
    pieces_out: list[JsonObject] = []
    for part in parts:
        if "text" in part and isinstance(part["text"], str):
            pieces_out.extend({**part, "text": piece} for piece in pieces(part["text"], chunk))
        else:
            pieces_out.append(part)
    if not pieces_out:
        pieces_out = [{"text": ""}]
    for index, piece in enumerate(pieces_out):
        last = index == len(pieces_out) - 1
        yield "", response_object(response_id, model, [piece], "STOP" if last else None, usage if last else None)


def encode(events: Iterable[tuple[str, JsonObject]]) -> list[bytes]:
    """The SSE bytes: one unnamed ``data:`` line per ``GenerateContentResponse`` (``alt=sse``)."""
    return [sse_event(None, data) for _, data in events]


def wants_stream(request: web.Request) -> bool:
    return request.rel_url.path.rstrip("/").endswith(f":{STREAM}")


def model_in_path(request: web.Request) -> str:
    route = route_of(request.rel_url.path)
    return route[0] if route is not None else "forkpoint-stub"


class GeminiStubUpstream(LocalStub):
    """Answers a validated request itself with one short model text (SSE for ``streamGenerateContent``)."""

    async def send(self, request: web.Request, body: JsonObject) -> tuple[web.StreamResponse, Sent]:
        self._count += 1
        parts: list[JsonObject] = [{"text": self.text}]
        usage: JsonObject = {"promptTokenCount": 0, "candidatesTokenCount": 1, "totalTokenCount": 1}
        response_id = f"forkpoint-stub-{self._count:04d}"
        model = model_in_path(request)
        if not wants_stream(request):
            return web.json_response(response_object(response_id, model, parts, "STOP", usage)), Sent(200, False)
        events = response_chunks(response_id, model, parts, usage, chunk=max(1, len(self.text)))
        return await stream_events(request, encode(events)), Sent(200, False)


# -- pins ------------------------------------------------------------------------------------------------------------


def gemini_pins(out: JsonObject, pins: SamplingPins, put: Put, changes: list[Change]) -> None:
    """Sampling lives in ``generationConfig``: the shared top-level ``temperature``/``top_p`` are moved there; the
    ``model`` stays in the body for the upstream to put in the URL (``GeminiUpstream.target``)."""
    for top, field, value in (("temperature", "temperature", pins.temperature), ("top_p", "topP", pins.top_p)):
        if value is None:
            continue
        if out.get(top) == value:
            out.pop(top)
            changes[:] = [change for change in changes if change.field != top]
        put(f"generationConfig.{field}", value)
    if pins.reasoning_effort is not None:
        raise UnsupportedPin("the Gemini API sets thinking with --disable-thinking, not --reasoning-effort")
    if pins.seed is not None:
        put("generationConfig.seed", pins.seed)
    if pins.max_output_tokens is not None:
        put("generationConfig.maxOutputTokens", pins.max_output_tokens)
    if pins.disable_thinking:
        put("generationConfig.thinkingConfig", {"thinkingBudget": 0, "includeThoughts": False})


def tool_schemas(tools: list[Any]) -> tuple[list[JsonObject], tuple[str, ...]]:
    """Gemini ``functionDeclarations`` as Chat function tools (``parametersJsonSchema`` or ``parameters`` become
    ``parameters``); built-in tools (``googleSearch``, ``codeExecution`` ...) are dropped and noted."""
    out: list[JsonObject] = []
    dropped: list[str] = []
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        for key in tool:
            if key != "functionDeclarations":
                dropped.append(f"built-in tool {key!r} dropped")
        for declaration in tool.get("functionDeclarations") or []:
            if not isinstance(declaration, dict) or not isinstance(declaration.get("name"), str):
                continue
            function: JsonObject = {"name": declaration["name"]}
            if isinstance(declaration.get("description"), str):
                function["description"] = declaration["description"]
            schema = declaration.get("parametersJsonSchema", declaration.get("parameters"))
            if schema is not None:
                function["parameters"] = schema
            out.append({"type": "function", "function": function})
    return out, tuple(dropped)


def tool_names(tools: Any) -> tuple[str | None, ...] | None:
    """The function names a request offers, in order (None when ``tools`` is not a list)."""
    if tools is None:
        return ()
    if not isinstance(tools, list):
        return None
    names: list[str | None] = []
    for tool in tools:
        declarations = tool.get("functionDeclarations") if isinstance(tool, dict) else None
        for declaration in declarations if isinstance(declarations, list) else []:
            name = declaration.get("name") if isinstance(declaration, dict) else None
            names.append(name if isinstance(name, str) else None)
    return tuple(names)


# -- the gate ------------------------------------------------------------------------------------------------------

SCHEMA_VERSION = "forkpoint.gemini-expected-prefix/v1"
_VOLATILE_PART_KEYS = frozenset({"thoughtSignature"})


def project_part(part: Any) -> Any:
    """A part as the gate compares it: the history the model sees (call ids and thought signatures left out)."""
    if not isinstance(part, dict):
        return part
    if isinstance(part.get("functionCall"), dict):
        call = part["functionCall"]
        return {"call": {"name": call.get("name"), "args": call.get("args")}}
    if isinstance(part.get("functionResponse"), dict):
        result = part["functionResponse"]
        return {"result": {"name": result.get("name"), "response": result.get("response")}}
    if isinstance(part.get("text"), str) and set(part) - _VOLATILE_PART_KEYS <= {"text", "thought"}:
        return {"thought": part["text"]} if part.get("thought") is True else {"text": part["text"]}
    return {key: value for key, value in part.items() if key not in _VOLATILE_PART_KEYS}


def project_content(content: Any, index: int) -> JsonObject:
    """A request content (at ``contents[index]``) in the compared form ``{role, parts}``."""
    role = content.get("role") if isinstance(content, dict) else None
    parts = content.get("parts") if isinstance(content, dict) else None
    if role not in ("user", "model") or not isinstance(parts, list):
        raise Refusal(f"contents[{index}] is not a user or model content with a list of parts")
    return {"role": role, "parts": [project_part(part) for part in parts]}


def nonce_content(text: str) -> JsonObject:
    """The content a ``-p NONCE`` prompt becomes."""
    return {"role": "user", "parts": [{"text": text}]}


@dataclass(frozen=True)
class ExpectedGemini:
    """The contents a resumed Gemini agent must send, projected (``project_content``). ``to_json`` (what is
    written to expected-prefix.json) holds hashes, roles, the model, tools and the nonce, never content."""

    profile: str
    contents: tuple[JsonObject, ...]
    content_sha256: tuple[str, ...]
    prefix_sha256: str
    model: str
    nonce: str | None = None
    tools: tuple[str, ...] | None = None

    @classmethod
    def of(cls, profile: str, contents: Sequence[JsonObject], model: str, *, nonce: str | None = None,
           tools: Sequence[str] | None = None) -> ExpectedGemini:
        projected = tuple(project_content(content, index) for index, content in enumerate(contents))
        return cls(profile, projected, tuple(canonical_sha256(c) for c in projected),
                   canonical_sha256(list(projected)), model, nonce, None if tools is None else tuple(tools))

    @property
    def boundary_calls(self) -> tuple[str, ...]:
        """The names of the trailing function responses (the boundary batch)."""
        last = self.contents[-1] if self.contents else {}
        return tuple(str(p["result"]["name"]) for p in last.get("parts", []) if isinstance(p, dict) and "result" in p)

    def to_json(self) -> JsonObject:
        return {"schema_version": SCHEMA_VERSION, "profile": self.profile, "model": self.model, "nonce": self.nonce,
                "tools": None if self.tools is None else list(self.tools), "content_count": len(self.contents),
                "content_roles": [c["role"] for c in self.contents], "content_sha256": list(self.content_sha256),
                "prefix_sha256": self.prefix_sha256, "boundary_calls": list(self.boundary_calls)}


@dataclass(frozen=True)
class GeminiProfile:
    """One agent's resume envelope on this protocol, as data (kept in the adapter's gate.py)."""

    agent: str
    #: a leading part of ``contents[0]`` that is the agent's environment (regenerated on every start:
    #: fingerprinted, stable between requests, not compared)
    context_part: Callable[[Any], bool] | None = None
    #: the contents the agent puts between the prefix and the nonce content when it resumes (compared exactly)
    envelope: tuple[JsonObject, ...] = ()
    #: requests without tools are helper calls: forwarded unchanged (never with the nonce), not a step
    helpers_without_tools: bool = False
    #: envelope profile ids this profile was verified for (None: not checked)
    verified: frozenset[str] | None = None


def describe(content: Any) -> str:
    if not isinstance(content, dict):
        return f"a {type(content).__name__}"
    parts = content.get("parts")
    parts = parts if isinstance(parts, list) else []
    calls = [p["call"]["name"] for p in parts if isinstance(p, dict) and "call" in p]
    results = [p["result"]["name"] for p in parts if isinstance(p, dict) and "result" in p]
    if results:
        return f"the function responses {results}"
    if calls:
        return f"the model content with calls {calls}"
    return f"the {content.get('role')} content"


def _explain(want: JsonObject, got: JsonObject) -> str:
    if want.get("role") != got.get("role"):
        return f"role is {got.get('role')!r}, expected {want.get('role')!r}"
    wanted, have = want.get("parts", []), got.get("parts", [])
    for index, (a, b) in enumerate(zip(wanted, have, strict=False)):
        if a != b:
            if isinstance(a, dict) and isinstance(b, dict) and "result" in a and "result" in b:
                return f"the observation of {a['result'].get('name')} (part {index}) differs"
            return f"part {index} differs"
    return f"it has {len(have)} parts, the rebuilt prefix {len(wanted)}"


def compare(expected: ExpectedGemini, conversation: Sequence[JsonObject], *, exact: bool) -> None:
    """Refuse unless ``conversation`` (projected) starts with (``exact``: equals) the expected contents."""
    compare_prefix("contents", expected.contents, expected.content_sha256, expected.prefix_sha256, conversation,
                   exact=exact, counted="contents before the resume envelope", describe=describe, explain=_explain)


class GeminiGate(PrefixGate[ExpectedGemini]):
    """Gemini API requests from a resumed agent, checked against ``expected`` with the agent's profile."""

    name = PROTOCOL

    def __init__(self, profile: GeminiProfile, expected: ExpectedGemini, boundary_prompt: str | None = None) -> None:
        super().__init__(expected, boundary_prompt)
        self.profile = profile
        self.model_routes = model_routes(expected.model)
        self._system: str | None = None
        self._context: str | None = None

    def auxiliary(self, body: Any) -> Verdict | None:
        return helper_request(body, self.profile.helpers_without_tools, self.expected.nonce, self.expected.profile,
                              "no-tools helper request")

    def clean(self, body: Any, first: bool, facts: JsonObject) -> JsonObject:
        profile, expected, prompt = self.profile, self.expected, self.boundary_prompt
        if profile.verified is not None and expected.profile not in profile.verified:
            raise Refusal(f"no verified resume envelope profile {expected.profile!r} for {profile.agent}")
        if prompt is not None and expected.nonce is None:
            raise Refusal("the gate was configured inconsistently (a boundary prompt needs the resume nonce)")
        body, contents = open_request(body, nonce=expected.nonce, boundary_prompt=prompt, key="contents",
                                      shape="the request has no list of content objects", checks=self._check_top)
        self._fingerprint_system(body, facts)
        head = self._strip_context(contents, facts)
        end = self._nonce_index(contents, first, facts)
        nonced = end is not None
        offset = 1 if head is not None and not head["parts"] else 0  # contents[0] held only the context
        stop = (end - len(profile.envelope)) if end is not None else len(expected.contents) + offset
        window = contents[:stop]
        if head is not None:
            window = [head, *window[1:]] if not offset else window[1:]
        projected = [project_content(content, index) for index, content in enumerate(window)]
        compare(expected, projected, exact=nonced)
        rest = contents[end + 1:] if end is not None else contents[stop:]
        if first and rest:
            raise Refusal(f"contents[{stop}] follows the boundary; the first request must end at the last fresh "
                          "observation (or the resume envelope after it)")
        tail = [nonce_content(prompt)] if prompt is not None else []
        cleaned = {**body, "contents": [*contents[:stop], *tail, *rest]}
        if expected.nonce is not None:
            refuse_nonce_in(tail, expected.nonce)
        facts["boundary_prompt"] = bool(tail)
        facts["continuation_messages"] = len(rest)
        facts["message_count"] = len(expected.contents)
        facts["prefix_sha256"] = expected.prefix_sha256
        return cleaned

    def _check_top(self, body: JsonObject) -> None:
        unknown = sorted(set(body) - KNOWN_FIELDS)
        for name in SERVER_HISTORY_FIELDS:
            if body.get(name) is not None:
                raise Refusal(f"the request sets {name!r}: the upstream would add history the gate cannot check")
        if unknown:
            raise Refusal(f"the request sets fields the gate does not know: {unknown}")
        offered = tool_names(body.get("tools"))
        if self.expected.tools is not None and offered != self.expected.tools:
            raise Refusal(f"the offered tools {None if offered is None else list(offered)} differ from "
                          f"{self.profile.agent}'s enabled tool set {list(self.expected.tools)}")

    def _fingerprint_system(self, body: JsonObject, facts: JsonObject) -> None:
        fingerprint = canonical_sha256(body.get("systemInstruction"))
        facts["system_sha256"] = fingerprint
        if self._system is not None and fingerprint != self._system:
            raise Refusal("the system instruction changed since the first request")
        self._system = fingerprint

    def _strip_context(self, contents: list[Any], facts: JsonObject) -> JsonObject | None:
        """``contents[0]`` without its leading environment part (None: the profile has none)."""
        is_context = self.profile.context_part
        if is_context is None:
            return None
        first = contents[0] if contents else None
        parts = first.get("parts") if isinstance(first, dict) else None
        if not isinstance(first, dict) or first.get("role") != "user" or not isinstance(parts, list) or not parts \
                or not is_context(parts[0]):
            raise Refusal(f"contents[0] does not begin with {self.profile.agent}'s environment context")
        fingerprint = canonical_sha256(parts[0])
        facts["context_sha256"] = fingerprint
        if self._context is not None and fingerprint != self._context:
            raise Refusal("the environment context changed since the first request")
        self._context = fingerprint
        return {**first, "parts": parts[1:]}

    def _nonce_index(self, contents: list[Any], first: bool, facts: JsonObject) -> int | None:
        """Where the nonce content is, after exactly the profile's envelope, or None without a nonce."""
        nonce = self.expected.nonce
        if nonce is None:
            return None
        envelope = nonce_content(nonce)
        i = nonce_position([c if isinstance(c, dict) else {} for c in contents], lambda c: c == envelope,
                           "the resume nonce is not the exact text of a user content {role, parts: [{text}]}", facts)
        if first and i != len(contents) - 1:
            raise Refusal(f"contents[{i + 1}] follows the resume nonce; the first request must end with it")
        size = len(self.profile.envelope)
        if i < size or tuple(contents[i - size:i]) != self.profile.envelope:
            raise Refusal(f"the contents before the resume nonce are not {self.profile.agent}'s resume envelope")
        before = contents[i - size - 1] if i - size >= 1 else None
        parts = before.get("parts") if isinstance(before, dict) else None
        if not isinstance(parts, list) or not any(isinstance(p, dict) and "functionResponse" in p for p in parts):
            raise Refusal("the content before the resume envelope holds no function response")
        return i


# the translators load only for a translating run
def _to_chat(body: JsonObject, options: ChatOptions) -> Translated:
    from forkpoint.bridge.translate.gemini_chat import gemini_to_chat

    return gemini_to_chat(body, options)


def _with_route(path: str, body: JsonObject) -> JsonObject:
    from forkpoint.bridge.translate.gemini_chat import with_route

    return with_route(path, body)


def _stream(prepared: Prepared, answer_id: str) -> BlockSequencer:
    from forkpoint.bridge.translate.gemini_answer import ChatToGeminiStream

    return ChatToGeminiStream(response_id=answer_id, model=prepared.model)


def _whole(completion: JsonObject, prepared: Prepared, answer_id: str) -> tuple[JsonObject, list[str]]:
    from forkpoint.bridge.translate.gemini_answer import chat_completion_to_gemini

    return chat_completion_to_gemini(completion, response_id=answer_id, model=prepared.model)


def _passthrough(url: str, key: str, patience: Patience) -> GeminiUpstream:
    return GeminiUpstream(url, key, retry=patience.retry, **patience.options())


SPEC = ProtocolSpec(
    name=PROTOCOL, passthrough=_passthrough,
    stub=GeminiStubUpstream, encode=encode, pins=gemini_pins, tool_schemas=tool_schemas, error=agent_error,
    refusal=_refusal, sample_request={"contents": [{"role": "user", "parts": [{"text": "hello"}]}]},
    chat=ChatTranslation("openai-chat", _to_chat, _stream, _whole, "forkpoint-", route=_with_route,
                         sample_route=f"/{API_VERSION}/models/gemini-2.5-pro:{STREAM}?alt=sse"),
)

