"""What OpenCode sends for a rebuilt session, and the manifest the bridge gate checks it against (pure).

Measured on 1.17.11 and 1.18.33 (``opencode run --format=json --session <id> <NONCE>`` on an imported cut;
tests/fixtures/opencode/*/requests.jsonl are the recorded originals): a Chat Completions body
``{model, max_tokens, messages, tools, tool_choice: "auto", stream: true, stream_options}`` whose ``messages`` are

* ``messages[0]``: one ``system`` message built at request time (not stored; its ``Today's date:`` line changes
  daily, the only part masked);
* then the stored session, message by message: a user message = its one text part as a string (``run`` wraps an
  argv word holding a space in quotes before storing it); an assistant message = ``content`` (its text parts,
  ``""`` when none), ``reasoning_content`` (its reasoning parts, only when there are some) and ``tool_calls``
  (``id`` = callID, ``arguments`` = the JSON of the input), followed by one ``tool`` message per tool part in
  part order (= call order) whose ``content`` is the ``output`` (completed) or the ``error`` text;
* then the envelope: exactly ``{"role": "user", "content": NONCE}`` (the nonce is one argv word: no quotes).

The projection compares tool-call arguments as parsed JSON (OpenCode re-serialises the stored input).
The manifest is the chat protocol's ``ExpectedChat`` (written as hashes, ids and roles only, never bodies).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from forkpoint.bridge.protocols.openai_chat import ExpectedChat, parsed_arguments
from forkpoint.core.errors import configuration, trajectory, unsupported_version
from forkpoint.core.hashing import count_text, sha256_hex
from forkpoint.core.model import JsonObject
from forkpoint.core.releases import number

MIN_NONCE_LENGTH = 16
DATE_LINE = re.compile(r"Today's date: [^\n]*")
INTERRUPTED = "[Tool execution was interrupted]"
STEP_LIMIT_TEXT = "CRITICAL - MAXIMUM STEPS REACHED"
#: the tools OpenCode's ``build`` agent offers with forkpoint's config (a ``question`` tool = permission lost)
BUILD_TOOLS = ("bash", "edit", "glob", "grep", "read", "skill", "task", "todowrite", "webfetch", "write")
#: for a GPT model id OpenCode offers apply_patch instead of edit/write (ToolRegistry.tools, 1.17 and 1.18)
GPT_BUILD_TOOLS = tuple(sorted({*BUILD_TOOLS} - {"edit", "write"} | {"apply_patch"}))


def gpt_model(model: str) -> bool:
    """OpenCode's own rule: ``gpt-`` in the model id, neither ``oss`` nor ``gpt-4``."""
    return "gpt-" in model and "oss" not in model and "gpt-4" not in model


def offered_tools(profile: EnvelopeProfile, model: str) -> tuple[str, ...]:
    return GPT_BUILD_TOOLS if gpt_model(model) and profile.tools == BUILD_TOOLS else profile.tools


@dataclass(frozen=True)
class EnvelopeProfile:
    version: str
    profile: str
    tools: tuple[str, ...]
    #: what the sender appends to the nonce word in its user message
    nonce_suffix: str = ""


PROFILES: dict[str, EnvelopeProfile] = {
    version: EnvelopeProfile(version, f"opencode/{version}/chat-completions-resume-v1", BUILD_TOOLS)
    for version in ("1.17.11", "1.18.33")
}
#: what a 1.x release before 1.17 sends on resume (measured on 1.2.6 by ``forkpoint agents calibrate``): its
#: registry's order, not sorted; ``question`` too (its ``resolveTools`` drops only what the AGENT's permission
#: disables, not the session's ``question: deny``, and the registry adds it for ``OPENCODE_CLIENT`` ``cli``); the
#: nonce message's content ends with a newline
SENDER_1_2 = EnvelopeProfile("1.2", "opencode/1.2/chat-completions-resume-v1",
                             ("question", "bash", "read", "glob", "grep", "edit", "write", "task", "webfetch",
                              "todowrite", "skill"), nonce_suffix="\n")


#: what 1.3.x to 1.14.x send (measured on 1.3.2 and 1.14.41 by the release sweep's older window): 1.2's registry
#: order, but without ``question`` (the session's ``question: deny`` is honoured), and 1.2's nonce message (a bare
#: nonce was refused on both)
SENDER_1_3 = EnvelopeProfile("1.3", "opencode/1.3/chat-completions-resume-v1",
                             tuple(tool for tool in SENDER_1_2.tools if tool != "question"),
                             nonce_suffix=SENDER_1_2.nonce_suffix)
#: the older senders, each from the first (major, minor) line measured sending it, newest first: 1.15.3 and
#: 1.15.4 send the verified versions' form (the enabled tools sorted, no ``question``, the nonce alone)
SENDERS: tuple[tuple[tuple[int, int], EnvelopeProfile | None], ...] = (
    ((1, 15), None), ((1, 3), SENDER_1_3), ((1, 0), SENDER_1_2))


def sender_profile(release: str, recorded: EnvelopeProfile) -> EnvelopeProfile:
    """The envelope the SENDING release (the continuing binary, or a release a calibration runs in a verified
    version's place) produces for a session rebuilt with ``recorded``'s profile: a 1.x release before 1.15 sends
    its line's older form (``SENDERS``), every other one the verified version's."""
    parsed = number(release)
    if parsed is not None and parsed[0] == 1:
        sender = next((profile for first, profile in SENDERS if parsed[:2] >= first), None)
        if sender is not None:
            return sender
    return recorded


def profile_for_version(version: str) -> EnvelopeProfile:
    profile = PROFILES.get(version)
    if profile is None:
        raise unsupported_version(f"OpenCode {version} has no verified resume envelope profile "
                                  f"(verified: {', '.join(PROFILES)})")
    return profile



def masked_system_sha256(text: str) -> str:
    return sha256_hex(DATE_LINE.sub("Today's date: <DATE>", text))


# -- the projection --------------------------------------------------------------------------------------------------


def session_messages(export: JsonObject) -> list[JsonObject]:
    """The Chat Completions messages OpenCode sends for a stored session (without the system message)."""
    out: list[JsonObject] = []
    for index, message in enumerate(export.get("messages") or []):
        info, parts = message["info"], message["parts"]
        if info.get("role") == "user":
            texts = [p for p in parts if p.get("type") == "text"]
            if len(texts) != 1 or len(parts) != 1 or not isinstance(texts[0].get("text"), str):
                kinds = [p.get("type") for p in parts]
                raise trajectory(f"session message {index} is a user message with parts {kinds}; forkpoint has "
                                 "verified only a single text part")
            out.append({"role": "user", "content": texts[0]["text"]})
            continue
        out.extend(_assistant(index, parts))
    return out


def _assistant(index: int, parts: list[JsonObject]) -> list[JsonObject]:
    known = {"step-start", "step-finish", "text", "reasoning", "tool"}
    unknown = [p.get("type") for p in parts if p.get("type") not in known]
    if unknown:
        raise trajectory(f"session message {index} has parts forkpoint has not verified: {unknown}")
    texts = [str(p.get("text") or "") for p in parts if p.get("type") == "text"]
    reasoning = [str(p.get("text") or "") for p in parts if p.get("type") == "reasoning"]
    tools = [p for p in parts if p.get("type") == "tool"]
    if not texts and not reasoning and not tools:
        return []  # an empty assistant message (an interrupted step) is skipped by OpenCode
    message: JsonObject = {"role": "assistant", "content": "".join(texts)}
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    results = []
    if tools:
        message["tool_calls"] = [{"id": p["callID"], "type": "function",
                                  "function": {"name": p["tool"], "arguments": p["state"].get("input") or {}}}
                                 for p in tools]
        for part in tools:
            state = part["state"]
            if state.get("status") == "completed":
                content = state.get("output") if isinstance(state.get("output"), str) else ""
            elif state.get("status") == "error":
                content = str(state.get("error") or "")
            else:
                raise trajectory(f"tool part {part.get('id')} is {state.get('status')!r}; OpenCode would send "
                                 f"{INTERRUPTED!r} for it")
            results.append({"role": "tool", "tool_call_id": part["callID"], "content": content})
    return [message, *results]


def project_request_message(message: Any) -> Any:
    """A request message in the compared form: tool-call arguments parsed (unparseable ones stay strings)."""
    if not isinstance(message, dict) or not isinstance(message.get("tool_calls"), list):
        return message
    return {**message, "tool_calls": [parsed_arguments(call) for call in message["tool_calls"]]}


# -- the manifest ----------------------------------------------------------------------------------------------------


def expected_prefix(export: JsonObject, nonce: str, version: str, model: str,
                    system_sha256: str | None = None, sender: str | None = None) -> ExpectedChat:
    """The manifest of a cut session; refuses a cut that does not end with the results of one tool batch.
    ``sender``: the release that will send the request, when it is not ``version`` (``sender_profile``)."""
    profile = profile_for_version(version)
    if sender is not None:
        profile = sender_profile(sender, profile)
    if len(nonce) < MIN_NONCE_LENGTH or any(c.isspace() or c in "\"'\\" for c in nonce):
        raise configuration(f"the resume nonce must be at least {MIN_NONCE_LENGTH} characters without spaces "
                            "or quotes (OpenCode quotes such an argv word)")
    if count_text(export, nonce):
        raise configuration("the resume nonce already occurs in the rebuilt session")
    projected = session_messages(export)
    boundary: list[str] = []
    for message in reversed(projected):
        if message["role"] != "tool":
            break
        boundary.insert(0, message["tool_call_id"])
    if not boundary:
        raise trajectory("the rebuilt OpenCode session does not end with tool results")
    calls = projected[-len(boundary) - 1].get("tool_calls") or []
    if [c["id"] for c in calls] != boundary:
        raise trajectory("the last tool results of the rebuilt OpenCode session do not answer exactly the calls of "
                         "the assistant message before them")
    return ExpectedChat.of(profile.profile, projected, nonce=nonce, model=model, tools=offered_tools(profile, model),
                           system_sha256=system_sha256)
