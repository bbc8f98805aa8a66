"""The fail-closed check of the model requests a resumed Codex sends (OpenAI Responses API; pure).

Measured on the real binaries (0.149.0 and 0.171.0, ``codex exec resume <id> ... <NONCE>`` on a rollout cut
right after a tool batch; tests/fixtures/codex/requests/):

* ``input`` = the rollout's items (see ``envelope``; 0.171 first puts its base-instructions developer item),
  then the envelope, then nothing else in the first request:

  - a developer message ``<skills_instructions>…`` when the CODEX_HOME path differs from the recorded one (it
    always does for forkpoint: a private home per run);
  - a user message ``<environment_context>…`` when the cwd (or 0.171's date / workspace roots) differs from the
    recorded one;
  - across versions (``--agent-version``), the notices of the continuing version's profile for the recording's
    version, exact and in order, right before the nonce (0.171 resuming a 0.149 rollout: the developer message
    ``<tools>`` announcing its deferred ``multi_agent_v1`` namespace; ``envelope.DEFERRED_TOOLS``);
  - the user message whose only part is ``{"type": "input_text", "text": NONCE}`` (its own new ``msg_`` id).

* Items without their ``id``: the form of a sending release 0.142.0-0.145.0 (``envelope.sender_form``; the
  manifest names it, ``wire_form``): compared exactly, a request keeping an ``id`` is refused for it and one
  without is refused for every other sender.
* Later requests repeat the first request's ``input`` verbatim (envelope included, now in the middle) and
  append the live continuation (assistant message, calls, outputs...).
* Top level: ``client_metadata`` (turn ids) is new per request; everything else equals the original request.
* With the built-in ``openai`` provider (``openai_base_url``; sessions recorded against OpenAI keep that provider
  id, and 0.171 refuses to resume a thread whose provider is not configured) every item, envelope included,
  also carries ``internal_chat_message_metadata_passthrough``; elsewhere it is never sent.

The gate strips the envelope (with a boundary prompt, the nonce item stays with the prompt as its text), proves
the conversation before it is the rebuilt rollout's (count, per-item hashes, prefix hash, call ids, output
hashes; a refusal names the first differing ``input`` index and what differs), and refuses anything it does not
know: an item between the last output and the nonce that is not on the allowlist, the nonce anywhere else, a
``previous_response_id`` / ``conversation`` (server-side history the gate cannot see).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from forkpoint.adapters.codex.envelope import (
    CALL_TYPES,
    OUTPUT_TYPES,
    PROFILES,
    ROLLOUT_ONLY_KEYS,
    WIRE_FORMS,
    CodexExpectedPrefix,
    ItemDigest,
    ResumeNotice,
    digest_items,
    is_image_message,
    item_kind,
    project,
)
from forkpoint.bridge import gate as kit
from forkpoint.bridge.gate import PrefixGate, Refusal, Verdict
from forkpoint.core.hashing import canonical_sha256
from forkpoint.core.model import JsonObject

#: (role, text prefix, fact name) of the context items a resume may insert between the last output and the nonce
ENVELOPE_CONTEXT: tuple[tuple[str, str, str], ...] = (
    ("developer", "<skills_instructions>", "skills_instructions"),
    ("developer", "## Skills update", "skills_update"),
    ("developer", "<permissions instructions>", "permissions_instructions"),
    ("user", "<environment_context>", "environment_context"),
)
#: the keys an envelope message may have; the built-in ``openai`` provider also sends the rollout-only metadata
MESSAGE_KEYS = frozenset({"type", "id", "role", "content"}) | ROLLOUT_ONLY_KEYS
#: request fields that make the upstream add history the gate never saw
SERVER_HISTORY_FIELDS = ("previous_response_id", "conversation")


def clean_first_request(expected: CodexExpectedPrefix, body: Any, boundary_prompt: str | None = None) -> Verdict:
    """The first model request: it must end exactly at the boundary outputs (plus the boundary prompt)."""
    return CodexGate(expected, boundary_prompt).first(body)


def clean_later_request(expected: CodexExpectedPrefix, body: Any, boundary_prompt: str | None = None) -> Verdict:
    """A later request: the same prefix and envelope, followed by the live continuation (kept)."""
    return CodexGate(expected, boundary_prompt).later(body)


def _clean(expected: CodexExpectedPrefix, body: Any, boundary_prompt: str | None, *, first: bool,
           facts: JsonObject) -> JsonObject:
    profile = kit.verified_profile(PROFILES, expected.version, expected.profile, "Codex")
    if expected.wire_form not in WIRE_FORMS:
        raise Refusal(f"no measured Codex wire form {expected.wire_form!r}")
    facts["wire_form"] = expected.wire_form
    nonce = expected.nonce
    body, items = kit.open_request(body, nonce=nonce, boundary_prompt=boundary_prompt, key="input",
                                   shape="the request has no input list of item objects", checks=_no_server_history)
    i = kit.nonce_position(items, lambda item: _is_nonce_item(item, nonce),
                           "the resume nonce is not the sole input_text of a user message item", facts)
    if first and i != len(items) - 1:
        raise Refusal(f"input item {i + 1} ({item_kind(items[i + 1])}) follows the resume nonce; the first request "
                       "must end with it")

    # walk back over the context items this resume inserted, up to the last tool output: first the notices of a
    # cross-version resume (exact, in the profile's order, right before the nonce), then the allowlisted items
    notices = profile.notices_for(expected.recorded_version)
    if notices is None:
        raise Refusal(f"no verified resume envelope of Codex {profile.version} for a rollout written by "
                      f"{expected.recorded_version}")
    k = i - 1
    inserted: list[str] = []
    for notice in reversed(notices):
        if k >= 0 and _is_notice(items[k], notice):
            inserted.append(notice.name)
            k -= 1
    # (a Codex 0.40 view_image's image message after the last output is history: compared with the prefix below)
    while k >= 0 and items[k].get("type") not in OUTPUT_TYPES and not is_image_message(items[k]):
        kind = _context_kind(items[k], notices)
        if kind is None:
            raise Refusal(f"input item {k} ({item_kind(items[k])}) between the last tool output and the resume "
                           "nonce is not a known resume context item")
        inserted.append(kind)
        k -= 1
    if k < 0:
        raise Refusal("no tool output precedes the resume nonce")
    inserted.reverse()
    facts["envelope_items"] = inserted
    facts["envelope_sha256"] = [canonical_sha256(item) for item in items[k + 1:i]]

    start = 0
    if profile.instructions_item:
        head = items[0] if items else None
        if k < 1 or head is None or not _is_instructions_item(head):
            raise Refusal(f"input item 0 is not the base-instructions developer message Codex {profile.version} "
                           "sends first")
        facts["instructions_item_sha256"] = canonical_sha256(head)
        start = 1
    _compare(expected, items[start:k + 1], start)

    prompt_item: JsonObject | None = None
    if boundary_prompt is not None:
        prompt_item = _prompt_item(items[i], boundary_prompt)
    facts["boundary_prompt"] = prompt_item is not None
    tail = [prompt_item] if prompt_item is not None else []
    continuation = items[i + 1:]
    if not first:
        facts["continuation_items"] = len(continuation)
    cleaned = {**body, "input": [*items[:k + 1], *tail, *continuation]}
    kit.refuse_nonce_in(tail, nonce)  # items[i], the nonce's only place, is not in the cleaned copy
    facts["item_count"] = expected.item_count
    facts["prefix_sha256"] = expected.prefix_sha256
    return cleaned


def _no_server_history(body: JsonObject) -> None:
    for field in SERVER_HISTORY_FIELDS:
        if body.get(field) is not None:
            raise Refusal(f"the request sets {field!r}: the upstream would add history the gate cannot check")


def _message_parts(item: JsonObject) -> list[str] | None:
    """The texts of a message item made only of ``input_text`` parts with no other keys, else None."""
    if item.get("type") != "message" or not set(item) <= MESSAGE_KEYS:
        return None
    if "id" in item and not isinstance(item["id"], str):
        return None
    content = item.get("content")
    if not isinstance(content, list) or not content:
        return None
    texts = []
    for part in content:
        if not isinstance(part, dict) or set(part) != {"type", "text"} or part["type"] != "input_text":
            return None
        if not isinstance(part["text"], str):
            return None
        texts.append(part["text"])
    return texts


def _is_nonce_item(item: JsonObject, nonce: str) -> bool:
    return item.get("role") == "user" and _message_parts(item) == [nonce]


def _context_kind(item: JsonObject, notices: tuple[ResumeNotice, ...] = ()) -> str | None:
    """The fact name of an allowlisted resume context item; every part must carry an allowlisted prefix, except
    that one part of a message that has an allowlisted part may instead be exactly one of this resume's notices,
    once: 0.171 resuming a rollout that has no context message of its own (Codex 0.40 wrote none) sends its full
    context message, the notice as its last part; resuming a 0.138-0.141 rollout it sends the notice FIRST, then a
    ``<skills_instructions>\n## Skills update`` part, in one message (tests/fixtures/codex/requests/releases/
    cross/0.138.0-0.171.0/). A notice on its own stays the exact item ``notices_for`` places."""
    texts = _message_parts(item)
    if texts is None:
        return None
    kinds: list[str] = []
    noticed: list[str] = []
    for text in texts:
        kind = next((name for role, prefix, name in ENVELOPE_CONTEXT
                     if item.get("role") == role and text.startswith(prefix)), None)
        if kind is None and len(texts) > 1 and not noticed:
            kind = next((n.name for n in notices if item.get("role") == n.role and text == n.text), None)
            if kind is not None:
                noticed.append(kind)
        if kind is None:
            return None
        kinds.append(kind)
    return "+".join(kinds) if len(kinds) > len(noticed) else None


def _is_notice(item: JsonObject, notice: ResumeNotice) -> bool:
    return item.get("role") == notice.role and _message_parts(item) == [notice.text]


def _is_instructions_item(item: JsonObject) -> bool:
    texts = _message_parts(item)
    return item.get("role") == "developer" and texts is not None and len(texts) == 1 and bool(texts[0].strip())


def _prompt_item(nonce_item: JsonObject, prompt: str) -> JsonObject:
    """The nonce item with its text replaced by the boundary prompt (same shape and id, right after O'N)."""
    return {**nonce_item, "content": [{"type": "input_text", "text": prompt}]}


# -- comparison with the manifest ----------------------------------------------------------------------------------


def _compare(expected: CodexExpectedPrefix, conversation: Sequence[JsonObject], offset: int) -> None:
    """Refuse unless the projection of ``conversation`` is exactly the rebuilt rollout's; name the first difference.

    ``offset`` is the ``input`` index of ``conversation[0]``.
    """
    projected = project(conversation)
    got = digest_items(projected)
    want = expected.items
    for position in range(min(len(got), len(want))):
        if got[position].sha256 == want[position].sha256:
            continue
        detail = _explain(expected, position, got, projected)
        raise Refusal(f"input item {offset + position} (rollout item {position}) differs from the rebuilt rollout: "
                       f"{detail}")
    if len(got) > len(want):
        position = len(want)
        raise Refusal(f"input item {offset + position} ({_describe(got[position])}) is extra: the request has "
                       f"{len(got)} items before the envelope, the rebuilt rollout {len(want)}")
    if len(got) < len(want):
        position = len(got)
        raise Refusal(f"rollout item {position} ({_describe(want[position])}) is missing at input item "
                       f"{offset + position}: the request has {len(got)} items before the envelope, the rebuilt "
                       f"rollout {len(want)}")
    # Every item equals the rebuilt rollout's, in number and content: the whole-prefix hash, the call ids, the
    # output digests and the boundary outputs (all functions of those items) are equal too.


def _explain(expected: CodexExpectedPrefix, position: int, got: Sequence[ItemDigest],
             projected: Sequence[JsonObject]) -> str:
    want, have = expected.items[position], got[position]
    if want.kind != have.kind:
        return f"it is {_describe(have)}, expected {_describe(want)}"
    if want.kind in OUTPUT_TYPES:
        if want.call_id != have.call_id:
            # a permutation of the same run of outputs: say so
            run_want = _output_run(expected.items, position)
            run_got = _output_run(got, position)
            if sorted(map(str, run_want)) == sorted(map(str, run_got)) and run_want != run_got:
                return f"the tool outputs are in a different order: expected {run_want}, got {run_got}"
            return f"it is the output of {have.call_id}, expected the output of {want.call_id}"
        want_output = next((o.sha256 for o in expected.outputs if o.call_id == want.call_id), None)
        item = projected[position]
        if want_output is not None and canonical_sha256(
                {"call_id": item.get("call_id"), "output": item.get("output")}) != want_output:
            return f"the output of {have.call_id} differs"
        return f"the output item of {have.call_id} differs outside its output (e.g. its id)"
    if want.kind in CALL_TYPES:
        if want.call_id != have.call_id:
            return f"it is call {have.call_id}, expected call {want.call_id}"
        return f"call {have.call_id} differs in its name, arguments/input or id"
    if want.kind == "reasoning":
        return "the reasoning item differs (summary, encrypted content or id)"
    return f"the {want.kind} item differs (content or id)"


def _output_run(items: Sequence[ItemDigest], position: int) -> list[str | None]:
    """The call ids of the run of output items around ``position``."""
    start = position
    while start > 0 and items[start - 1].kind in OUTPUT_TYPES:
        start -= 1
    end = position
    while end < len(items) and items[end].kind in OUTPUT_TYPES:
        end += 1
    return [item.call_id for item in items[start:end]]


def _describe(digest: ItemDigest) -> str:
    if digest.kind in CALL_TYPES:
        return f"{digest.kind} {digest.call_id}"
    if digest.kind in OUTPUT_TYPES:
        return f"{digest.kind} for {digest.call_id}"
    return digest.kind


class CodexGate(PrefixGate[CodexExpectedPrefix]):
    """OpenAI Responses requests from a resumed Codex (envelope profiles per verified version).

    Codex POSTs ``<provider base_url>/responses``; forkpoint's base_url is ``<bridge>/v1``, so the route under
    the token is ``/v1/responses`` (``/responses`` for a base_url without ``/v1``).
    """

    name = "openai-responses"
    model_routes = frozenset({"/v1/responses", "/responses"})

    def clean(self, body: Any, first: bool, facts: JsonObject) -> JsonObject:
        return _clean(self.expected, body, self.boundary_prompt, first=first, facts=facts)
