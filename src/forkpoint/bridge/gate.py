"""The gate kit (pure, agent-free): verdicts, refusals, the ``Gate`` base and every gate's shared preamble.

A gate is one agent's fail-closed check of the model requests its resumed process sends: the first request must
end exactly at the rebuilt prefix (O'N plus the agent's resume envelope, which the gate strips), later requests
repeat that prefix and add the real continuation. Each wire protocol's projection and comparison live in
``bridge.protocols``; each agent's envelope (what it adds or changes on resume) in its adapter folder.

The rule for a later request that adds nothing after the prefix is the same for every gate: it is accepted (it is
a retry of an already validated request: its content is exactly what the first request proved, so forwarding it
again forwards nothing unchecked; agents and their SDKs resend the same body after a 429/5xx or a broken stream),
and the ``continuation_messages`` fact is 0.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Generic, Protocol, TypeVar

from forkpoint.core.errors import configuration, unsupported_version
from forkpoint.core.hashing import canonical_sha256, count_text
from forkpoint.core.model import JsonObject


@dataclass(frozen=True)
class Verdict:
    """``ok`` with the cleaned ``body`` to forward, or a refusal ``reason``. ``facts`` never hold bodies."""

    ok: bool
    body: JsonObject | None
    reason: str | None
    facts: JsonObject = field(default_factory=dict)


class Refusal(Exception):
    """Raised inside a gate's checks; ``checked`` turns it into a refusing Verdict."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


NO_MESSAGE_OBJECTS = "the request has no list of message objects"


class Profiled(Protocol):
    @property
    def profile(self) -> str: ...


P = TypeVar("P", bound=Profiled)
E = TypeVar("E", bound=Profiled)
M = TypeVar("M")

#: the shortest resume nonce a gate accepts (forkpoint's own, hashing.make_nonce, are far longer)
MIN_NONCE_LENGTH = 16


# -- building an expected prefix (the rebuild side) ----------------------------------------------------------------


def envelope_profile(profiles: Mapping[str, P], version: str, agent: str) -> P:
    """The resume envelope profile verified for ``agent version``; unsupported_version for any other version."""
    found = profiles.get(version)
    if found is None:
        raise unsupported_version(
            f"{agent} {version} has no verified resume envelope profile (verified: {', '.join(profiles)})")
    return found


def check_resume_nonce(nonce: str, rebuilt: Any, what: str) -> None:
    """A nonce a gate can find exactly once: long enough, without white space, and nowhere in the ``rebuilt``
    prefix yet (``what`` names it in the refusal)."""
    if len(nonce) < MIN_NONCE_LENGTH or any(c.isspace() for c in nonce):
        raise configuration(f"the resume nonce must be at least {MIN_NONCE_LENGTH} characters without spaces")
    if count_text(rebuilt, nonce):
        raise configuration(f"the resume nonce already occurs in the {what}")


def load_manifest(data: Any, schema: str, build: Callable[[JsonObject], M]) -> M:
    """An expected-prefix manifest ``build`` makes from its ``to_json`` document; ValueError for a document of
    another schema, or one ``build`` cannot read."""
    if not isinstance(data, dict) or data.get("schema_version") != schema:
        raise ValueError(f"not a {schema} manifest")
    try:
        return build(data)
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"malformed {schema} manifest: {error!r}") from None


# -- checking requests (the bridge side) -----------------------------------------------------------------------


def verified_profile(profiles: Mapping[str, P], version: str, profile: str, agent: str) -> P:
    """The envelope profile verified for ``agent version``; a refusal when the manifest names another one."""
    found = profiles.get(version)
    if found is None or found.profile != profile:
        raise Refusal(f"no verified resume envelope profile {profile!r} for {agent} {version}")
    return found


def open_request(body: Any, *, nonce: str | None = None, boundary_prompt: str | None = None, key: str = "messages",
                 shape: str = NO_MESSAGE_OBJECTS, objects: bool = True,
                 checks: Callable[[JsonObject], None] | None = None) -> tuple[JsonObject, list[Any]]:
    """Every gate's preamble, in this order: a non-empty boundary prompt (when configured), a JSON object body
    whose ``key`` is a list (of objects, with ``objects``; else the refusal ``shape``), the gate's own ``checks``,
    then the nonce (when the gate has one) exactly once anywhere in the body. Returns (body, that list)."""
    if boundary_prompt is not None and not boundary_prompt.strip():
        raise Refusal("the configured boundary prompt is empty")
    if not isinstance(body, dict):
        raise Refusal("the request body is not a JSON object")
    items = body.get(key)
    if not isinstance(items, list) or (objects and not all(isinstance(item, dict) for item in items)):
        raise Refusal(shape)
    if checks is not None:
        checks(body)
    if nonce is not None:
        occurrences = count_text(body, nonce)
        if occurrences != 1:
            raise Refusal(f"the resume nonce occurs {occurrences} times in the request (expected exactly once)")
    return body, items


def nonce_position(items: Sequence[JsonObject], is_nonce: Callable[[JsonObject], bool], refusal: str,
                   facts: JsonObject) -> int:
    """The index of the one entry ``is_nonce`` recognises (noted as the ``nonce_index`` fact), else ``refusal``."""
    found = [index for index, item in enumerate(items) if is_nonce(item)]
    if len(found) != 1:
        raise Refusal(refusal)
    facts["nonce_index"] = found[0]
    return found[0]


def compare_prefix(key: str, wanted: Sequence[Any], wanted_sha256: Sequence[str], prefix_sha256: str,
                   conversation: Sequence[Any], *, exact: bool, counted: str, offset: int = 0,
                   describe: Callable[[Any], str], explain: Callable[[Any, Any], str]) -> None:
    """Refuse unless ``conversation`` (projected, the request's ``key`` entries from index ``offset``) starts with
    the ``wanted`` entries of the rebuilt prefix (``exact``: equals them); the refusal names the first difference
    (``describe``/``explain`` in the protocol's words; ``counted``: what the request's count is of)."""
    count = len(wanted)
    for position, got in enumerate(conversation[:count]):
        if canonical_sha256(got) != wanted_sha256[position]:
            want = wanted[position]
            raise Refusal(f"{key}[{offset + position}] ({describe(want)}) differs from the rebuilt prefix: "
                          f"{explain(want, got)}")
    if len(conversation) < count:
        missing = len(conversation)
        raise Refusal(f"{key}[{offset + missing}] ({describe(wanted[missing])}) is missing: the request has "
                      f"{missing} {counted}, the rebuilt prefix {count}")
    if exact and len(conversation) > count:
        raise Refusal(f"{key}[{offset + count}] ({describe(conversation[count])}) is extra: the request has "
                      f"{len(conversation)} {counted}, the rebuilt prefix {count}")
    if canonical_sha256(list(conversation[:count])) != prefix_sha256:
        raise Refusal("the canonical prefix hash differs from the rebuilt prefix")


def helper_request(body: Any, helpers_without_tools: bool, nonce: str | None, profile: str,
                   what: str) -> Verdict | None:
    """With ``helpers_without_tools`` (an agent whose side requests, title generation and the like, carry no
    tools): such a request is forwarded unchanged unless it carries the resume nonce; None for a model request."""
    if not helpers_without_tools or not isinstance(body, dict) or body.get("tools"):
        return None

    def clean(facts: JsonObject) -> JsonObject:
        facts["auxiliary"] = what
        if nonce is not None and count_text(body, nonce):
            raise Refusal("a helper request (no tools) carries the resume nonce")
        return body

    return checked(profile, False, clean)


def refuse_nonce_in(inserted: Any, nonce: str) -> None:
    """The residue check of a cleaning that removed the one message holding the body's single nonce occurrence
    (counted by ``open_request``) and inserted only ``inserted`` (the boundary prompt): the cleaned copy holds
    exactly ``inserted``'s occurrences, so counting them spares a second serialisation of a body of megabytes."""
    if count_text(inserted, nonce):
        raise Refusal("the resume nonce remains in the cleaned request")


def checked(profile: str, first: bool, clean: Callable[[JsonObject], JsonObject]) -> Verdict:
    """Run one protocol's ``clean(facts) -> cleaned body``; a Refusal becomes a refusing Verdict."""
    facts: JsonObject = {"profile": profile, "first_request": first}
    try:
        cleaned = clean(facts)
    except Refusal as refusal:
        return Verdict(False, None, refusal.reason, facts)
    return Verdict(True, cleaned, None, facts)


class Gate(ABC):
    """One agent's fail-closed check: which routes carry model requests and how each request is cleaned.

    ``auxiliary`` is the declared optional hook: a gate that recognises the agent's helper calls (a title
    generation request without tools) returns their verdict; they are forwarded with the returned body without
    counting as a model step and without taking the first request's place. The default, None: a model request.
    """

    name: str  # the wire protocol, e.g. "anthropic-messages"
    model_routes: frozenset[str]  # paths under the bridge token, e.g. "/v1/messages"
    #: the agent's sub-agent tools (name -> the input field holding the sub-agent's prompt): a conversation one of
    #: them started in a forwarded answer may be forwarded (``bridge.subagents``); empty: none may
    subagent_tools: Mapping[str, str] = MappingProxyType({})

    @abstractmethod
    def first(self, body: Any) -> Verdict:
        """The first model request: it must end exactly at the rebuilt prefix (plus the boundary prompt)."""

    @abstractmethod
    def later(self, body: Any) -> Verdict:
        """A later request: the same prefix, followed by the real continuation (kept)."""

    def auxiliary(self, body: Any) -> Verdict | None:
        """The verdict on a helper (non-step) request, or None when ``body`` is a model request."""
        return None


class PrefixGate(Gate, Generic[E]):
    """A gate that checks every request against one expected prefix (``E``: an agent's manifest) with one
    ``clean(body, first, facts) -> cleaned body`` that raises Refusal; the boundary prompt, when configured, takes
    the resume nonce's place."""

    def __init__(self, expected: E, boundary_prompt: str | None = None) -> None:
        self.expected = expected
        self.boundary_prompt = boundary_prompt

    def first(self, body: Any) -> Verdict:
        return checked(self.expected.profile, True, lambda facts: self.clean(body, True, facts))

    def later(self, body: Any) -> Verdict:
        return checked(self.expected.profile, False, lambda facts: self.clean(body, False, facts))

    @abstractmethod
    def clean(self, body: Any, first: bool, facts: JsonObject) -> JsonObject:
        """The cleaned body to forward; raises Refusal (the facts gathered so far stay in the verdict)."""
