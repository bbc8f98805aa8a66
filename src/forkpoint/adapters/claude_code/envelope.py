"""What Claude Code sends for a rebuilt session prefix, and the manifest the bridge gate checks it against (pure).

Measured on the real binaries (2.1.220 and 2.1.332; the captures are in tests/fixtures/claude_code/requests/):

* The resumed request replays the session's user/assistant lines verbatim. Assistant lines (one per content
  block) are merged by ``message.id``; consecutive user lines (one per tool result, in FILE order = completion
  order) are merged into one user message. Attachment lines are not messages of their own: they render as a
  ``role:"system"`` message after the first prompt (2.1.332: environment, skills...; 2.1.220: agent listing) or
  as ``<system-reminder>`` text blocks in front of the prompt (2.1.332: attribution; 2.1.220: ``# currentDate``,
  which is rebuilt from today's date on every request and is not in the file at all). The projection ignores
  both, on both sides of the comparison.
* ``cache_control`` moves: the recorded request had it on the last tool_result, the resumed one on the nonce.
  The projection removes every marker.

``ExpectedPrefix`` carries only hashes, ids, roles and block types, never message bodies, so it can be stored
in the run's state dir and logged.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from forkpoint.bridge.gate import check_resume_nonce, envelope_profile, load_manifest
from forkpoint.core.errors import trajectory
from forkpoint.core.hashing import canonical_sha256
from forkpoint.core.model import JsonObject
from forkpoint.core.releases import number

SCHEMA_VERSION = "forkpoint.claude-expected-prefix/v1"
SYSTEM_REMINDER_PREFIX = "<system-reminder>"
NO_RESPONSE_TEXT = "No response requested."
CONTINUE_TEXT = "Continue from where you left off."
#: how the git attribution reminder Claude Code renders in front of a prompt begins (2.1.268 on)
ATTRIBUTION_REMINDER = "<system-reminder>\nAttribution for git commits and pull requests you create from here on"


@dataclass(frozen=True)
class EnvelopeProfile:
    """How one verified Claude Code version wraps a resumed session (see docs: native resume envelopes §2, §4)."""

    version: str
    profile: str
    continue_closure: bool  # 2.1.220 appends CONTINUE_TEXT as a text block to the last tool_result message
    #: ``<system-reminder>`` text blocks may precede the nonce in its message: 2.1.332 resuming a 2.1.220 session
    #: (no attribution latched in it) renders its git attribution reminder there (``--agent-version``, issue 17)
    reminders_before_nonce: bool = False
    #: when set, the only reminder allowed before the nonce: at most one block, starting with this text
    nonce_reminder: str | None = None


PROFILES: dict[str, EnvelopeProfile] = {
    "2.1.220": EnvelopeProfile("2.1.220", "claude-code/2.1.220/native-resume-v1", continue_closure=True),
    "2.1.332": EnvelopeProfile("2.1.332", "claude-code/2.1.332/native-resume-v1", continue_closure=False,
                               reminders_before_nonce=True),
}


def profile_for_version(version: str) -> EnvelopeProfile:
    return envelope_profile(PROFILES, version, "Claude Code")


#: what 2.1.268, 2.1.269 and 2.1.270 send on ``--resume`` (measured on the three real releases by ``forkpoint agents
#: calibrate``; captures in tests/fixtures/claude_code/requests/releases/2.1.269/): 2.1.220's closure (the boundary's
#: tool results followed by the text block ``Continue from where you left off.``) AND, in front of the nonce, the
#: git attribution reminder (``ATTRIBUTION_REMINDER``, the only reminder allowed there). The reminder is not a
#: fixed notice: these releases render it when the attribution they compute on resume differs from the one latched
#: in the session (its ``remote_session_change`` attachment): a resumed ``-p`` run names the model without
#: "(1M context)" (``Co-Authored-By: Claude Opus 5`` against the recording's ``Claude Opus 5 (1M context)``), so a
#: session recorded with the default 1M model always gets it. 2.1.267 has no attribution attachment yet; 2.1.271
#: keeps the model naming on resume and sends 2.1.220's form again.
SENDER_2_1_268 = EnvelopeProfile("2.1.268", "claude-code/2.1.268-2.1.270/native-resume-v1", continue_closure=True,
                                 reminders_before_nonce=True, nonce_reminder=ATTRIBUTION_REMINDER)
#: the releases that send ``SENDER_2_1_268``'s form (inclusive)
SENDER_2_1_268_RELEASES = ((2, 1, 268), (2, 1, 270))


def sender_profile(release: str | None, recorded: EnvelopeProfile) -> EnvelopeProfile:
    """The envelope the SENDING release (the continuing binary, or a release a calibration resumes its own session
    with) wraps a session rebuilt with ``recorded``'s profile in: 2.1.268-2.1.270 their own form, every other
    release the verified version's."""
    parsed = number(release)
    low, high = SENDER_2_1_268_RELEASES
    return SENDER_2_1_268 if parsed is not None and low <= parsed <= high else recorded


def gate_profile(version: str, profile: str) -> EnvelopeProfile | None:
    """The envelope profile a manifest names (``version``: the verified version the prefix was rebuilt as), when
    forkpoint knows it: the verified version's own, or a measured sender's over any verified version."""
    found = PROFILES.get(version)
    if found is None:
        return None
    if found.profile == profile:
        return found
    return SENDER_2_1_268 if profile == SENDER_2_1_268.profile else None



# -- the messages Claude Code sends for a session --------------------------------------------------------------


def api_messages_from_session(records: Iterable[JsonObject]) -> list[JsonObject]:
    """The Anthropic ``messages`` Claude Code sends for these session lines (parsed objects, in file order).

    Only ``user`` and ``assistant`` lines become messages; attachment, system and bookkeeping lines are skipped
    (what they render to is dropped by ``project``). Assistant lines sharing ``message.id`` become one message,
    consecutive user lines become one message (tool results in file order).
    """
    messages: list[JsonObject] = []
    last_assistant: JsonObject | None = None
    last_assistant_id: str | None = None
    for record in records:
        kind = record.get("type")
        message = record.get("message")
        if kind not in ("user", "assistant") or not isinstance(message, dict) or record.get("isSidechain") is True:
            continue
        blocks = _as_blocks(message.get("content"))
        if kind == "assistant":
            if record.get("isApiErrorMessage") is True:
                continue
            message_id = message.get("id")
            if last_assistant is not None and isinstance(message_id, str) and message_id == last_assistant_id:
                last_assistant["content"].extend(blocks)  # a later block of the same response
                continue
            last_assistant = {"role": "assistant", "content": blocks}
            last_assistant_id = message_id if isinstance(message_id, str) else None
            messages.append(last_assistant)
            continue
        if messages and messages[-1]["role"] == "user":
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": "user", "content": blocks})
    return messages


def _as_blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return list(content)
    return []


# -- the canonical projection ------------------------------------------------------------------------------------


def project(messages: Sequence[Any]) -> list[JsonObject]:
    """The canonical form compared on both sides: model-visible conversation only, no cache markers.

    Drops ``role:"system"`` messages, ``cache_control``, top-level text blocks that start with
    ``<system-reminder>``, and messages left empty. Keeps text, thinking, redacted_thinking, tool_use,
    tool_result and image blocks with their model-visible keys only; any other block type is kept whole (minus
    ``cache_control``) so that a difference in it is still caught.
    """
    return [message for _, message in project_indexed(messages)]


def project_indexed(messages: Sequence[Any]) -> list[tuple[int, JsonObject]]:
    """``project`` with, for each projected message, its index in ``messages``."""
    projected: list[tuple[int, JsonObject]] = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            projected.append((index, {"role": None, "content": [_strip_cache_control(message)]}))
            continue
        role = message.get("role")
        if role == "system":
            continue
        content = message.get("content")
        raw_blocks: list[Any] = [{"type": "text", "text": content}] if isinstance(content, str) else (
            content if isinstance(content, list) else [])
        blocks = [_project_block(block) for block in raw_blocks if not is_reminder(block)]
        if blocks:
            projected.append((index, {"role": role, "content": blocks}))
    return projected


def is_reminder(block: Any) -> bool:
    return (
        isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
        and block["text"].startswith(SYSTEM_REMINDER_PREFIX)
    )


def _project_block(block: Any) -> Any:
    if not isinstance(block, dict):
        return block
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": block.get("text")}
    if kind == "thinking":
        return {"type": "thinking", "thinking": block.get("thinking"), "signature": block.get("signature")}
    if kind == "redacted_thinking":
        return {"type": "redacted_thinking", "data": block.get("data")}
    if kind == "tool_use":
        return {"type": "tool_use", "id": block.get("id"), "name": block.get("name"), "input": block.get("input")}
    if kind == "tool_result":
        return {
            "type": "tool_result",
            "tool_use_id": block.get("tool_use_id"),
            "content": _strip_cache_control(block.get("content")),
            "is_error": block.get("is_error") is True,
        }
    if kind == "image":
        return {"type": "image", "source": block.get("source")}
    return _strip_cache_control(block)


def _strip_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _strip_cache_control(item) for key, item in value.items() if key != "cache_control"}
    if isinstance(value, list):
        return [_strip_cache_control(item) for item in value]
    return value


def observation_digest(block: JsonObject) -> str:
    """Canonical hash of one projected tool_result: its id, content and error flag."""
    return canonical_sha256(
        {"tool_use_id": block.get("tool_use_id"), "content": block.get("content"), "is_error": block.get("is_error")}
    )


# -- the manifest ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BlockDigest:
    """One projected block: its type, canonical hash, and the tool_use id it carries or answers (if any)."""

    type: str
    sha256: str
    tool_use_id: str | None = None


@dataclass(frozen=True)
class ExpectedPrefix:
    """What the first resumed request must contain before the envelope, as hashes and ids only."""

    profile: str
    version: str
    nonce: str
    message_count: int
    prefix_sha256: str
    message_sha256: tuple[str, ...]
    tool_use_ids: tuple[str, ...]
    observation_sha256: tuple[str, ...]
    boundary_tool_use_ids: tuple[str, ...]
    message_roles: tuple[str, ...]
    message_blocks: tuple[tuple[BlockDigest, ...], ...]
    schema_version: str = SCHEMA_VERSION

    def to_json(self) -> JsonObject:
        """Plain JSON types only (lists, not tuples); ``from_json`` reverses it."""
        data: JsonObject = {}
        for key, value in asdict(self).items():
            data[key] = list(value) if isinstance(value, tuple) else value
        data["message_blocks"] = [[asdict(block) for block in blocks] for blocks in self.message_blocks]
        return data

    @classmethod
    def from_json(cls, data: Any) -> ExpectedPrefix:
        """Parse ``to_json`` output; raises ValueError on anything else."""
        prefix = load_manifest(data, SCHEMA_VERSION, cls._build)
        counts = {len(prefix.message_sha256), len(prefix.message_roles), len(prefix.message_blocks)}
        if counts != {prefix.message_count}:
            raise ValueError("manifest message_count does not match its per-message lists")
        return prefix

    @classmethod
    def _build(cls, data: JsonObject) -> ExpectedPrefix:
        return cls(
            profile=str(data["profile"]),
            version=str(data["version"]),
            nonce=str(data["nonce"]),
            message_count=int(data["message_count"]),
            prefix_sha256=str(data["prefix_sha256"]),
            message_sha256=tuple(str(h) for h in data["message_sha256"]),
            tool_use_ids=tuple(str(i) for i in data["tool_use_ids"]),
            observation_sha256=tuple(str(h) for h in data["observation_sha256"]),
            boundary_tool_use_ids=tuple(str(i) for i in data["boundary_tool_use_ids"]),
            message_roles=tuple(str(r) for r in data["message_roles"]),
            message_blocks=tuple(tuple(BlockDigest(str(b["type"]), str(b["sha256"]), b.get("tool_use_id"))
                                       for b in message) for message in data["message_blocks"]),
        )


def digest_messages(projected: Sequence[JsonObject]) -> tuple[tuple[str, ...], tuple[str, ...],
                                                                  tuple[tuple[BlockDigest, ...], ...]]:
    """Per-message hashes, roles and block digests of projected messages."""
    hashes = tuple(canonical_sha256(message) for message in projected)
    roles = tuple(str(message.get("role")) for message in projected)
    blocks = tuple(tuple(_block_digest(block) for block in message["content"]) for message in projected)
    return hashes, roles, blocks


def _block_digest(block: Any) -> BlockDigest:
    if not isinstance(block, dict):
        return BlockDigest(type(block).__name__, canonical_sha256(block))
    kind = str(block.get("type"))
    tool_id = block.get("id") if kind == "tool_use" else block.get("tool_use_id") if kind == "tool_result" else None
    return BlockDigest(kind, canonical_sha256(block), tool_id if isinstance(tool_id, str) else None)


def tool_ids_and_observations(projected: Sequence[JsonObject]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Every tool_use id and every tool_result observation hash, in message/block order."""
    ids: list[str] = []
    observations: list[str] = []
    for message in projected:
        for block in message["content"]:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use":
                ids.append(str(block.get("id")))
            elif block.get("type") == "tool_result":
                observations.append(observation_digest(block))
    return tuple(ids), tuple(observations)


def expected_prefix(records: Iterable[JsonObject], nonce: str, version: str,
                    sender: str | None = None) -> ExpectedPrefix:
    """The manifest for a rebuilt session prefix (its kept lines' parsed objects, in file order) that ``sender``
    (default: ``version``, the verified version it is rebuilt as) resumes: the profile is the sender's form
    (``sender_profile``).

    Refuses a prefix that does not end with a user message made only of tool results answering every tool_use
    of the assistant message before it, and a nonce that is short or already occurs in the prefix.
    """
    profile = profile_for_version(version)
    sent = sender_profile(sender if sender is not None else version, profile)
    record_list = list(records)
    check_resume_nonce(nonce, record_list, "rebuilt session")
    projected = project(api_messages_from_session(record_list))
    if len(projected) < 3:
        raise trajectory("the rebuilt Claude Code prefix needs a prompt, a tool call and its results")
    last, before = projected[-1], projected[-2]
    blocks = last["content"]
    if last["role"] != "user" or not all(isinstance(b, dict) and b.get("type") == "tool_result" for b in blocks):
        raise trajectory("the rebuilt Claude Code prefix does not end with a user message of tool results only")
    if before["role"] != "assistant":
        raise trajectory("the rebuilt Claude Code prefix has no assistant message before its last tool results")
    boundary = tuple(str(b.get("tool_use_id")) for b in blocks)
    calls = [str(b.get("id")) for b in before["content"] if isinstance(b, dict) and b.get("type") == "tool_use"]
    if len(set(boundary)) != len(boundary) or sorted(boundary) != sorted(calls):
        raise trajectory(
            "the last tool results of the rebuilt Claude Code prefix do not answer exactly the tool calls of "
            f"the assistant message before them (calls {calls}, results {list(boundary)})"
        )
    hashes, roles, block_digests = digest_messages(projected)
    tool_ids, observations = tool_ids_and_observations(projected)
    return ExpectedPrefix(
        profile=sent.profile,
        version=profile.version,
        nonce=nonce,
        message_count=len(projected),
        prefix_sha256=canonical_sha256(projected),
        message_sha256=hashes,
        tool_use_ids=tool_ids,
        observation_sha256=observations,
        boundary_tool_use_ids=boundary,
        message_roles=roles,
        message_blocks=block_digests,
    )
