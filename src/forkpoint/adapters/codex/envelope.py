"""What Codex sends for a rebuilt rollout prefix, and the manifest the bridge gate checks it against (pure).

Measured on the real binaries (0.149.0 and 0.171.0; the captures are in tests/fixtures/codex/requests/):

* ``codex exec resume`` sends the rollout's ``response_item`` payloads, in file order, as the request ``input``:
  the same keys and values, item ids included (``msg_…``, ``fc_…``, ``fco_…``, ``rs_…``), parallel outputs in
  file order, ``reasoning`` items with their ``encrypted_content`` and ``content: null``. The one difference:
  the rollout-only key ``internal_chat_message_metadata_passthrough`` (turn id, create time, 0.171's
  content-item kinds) is never sent. ``project`` drops exactly that key on both sides and keeps everything
  else, so any other difference is caught.
* 0.171.0 puts a developer message holding the base instructions at ``input[0]``: it is built from
  ``session_meta`` (0.149 sends the same text as top-level ``instructions``), is not a ``response_item`` of
  the rollout, and is replayed identically on resume. The gate checks its shape, fingerprints it and keeps it;
  it is not part of the conversation compared here (like ``instructions``).
* After the last tool output the resume appends its envelope (see ``forkpoint.adapters.codex.gate``).
* The SENDING release's wire form (``WireForm``, ``sender_form``): Codex 0.142.0-0.145.0 write every item's
  ``id`` (``msg_``/``fc_``/``ctc_``/``rs_``) to the rollout but never send one (``store: false``), when recording
  and on resume alike (measured by ``forkpoint agents calibrate`` on 0.142.0-0.145.0 and recorded on 0.145.0:
  tests/fixtures/codex/requests/releases/0.145.0/); 0.138-0.141 write none, 0.146.1 and later send them. The
  manifest of a release in that range (a calibration runs it in a verified version's place) is made from the
  items without ``id``; every other sender's keeps it, so a request of the one form is refused for the other.
  A continuing 0.171.0 sends such a rollout's items with their ids (releases/cross/0.145.0-0.171.0/).
* Across versions (``--agent-version``; tests/fixtures/codex/requests/cross/): 0.171.0 resuming a 0.149.0 rollout
  sends the rollout's items unchanged (no 0.171-only keys are added to them) after its base-instructions item
  (built from the 0.149 ``session_meta`` as from its own; 0.149 sent it as top-level ``instructions``), and
  adds one item to its envelope: ``DEFERRED_TOOLS``, the part its own sessions' first developer message
  carries and the 0.149 context lacks. A profile lists the recorded versions it resumes and what it then adds.

``CodexExpectedPrefix`` carries only hashes, ids, and item kinds, never item bodies, so it can be stored in
the run's state dir and logged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from forkpoint.bridge.gate import check_resume_nonce, envelope_profile, load_manifest
from forkpoint.core.errors import trajectory, unsupported_version
from forkpoint.core.hashing import canonical_sha256
from forkpoint.core.model import JsonObject
from forkpoint.core.releases import number

SCHEMA_VERSION = "forkpoint.codex-expected-prefix/v1"
#: keys the rollout stores on a response_item that Codex never puts on the wire
ROLLOUT_ONLY_KEYS = frozenset({"internal_chat_message_metadata_passthrough"})
CALL_TYPES = frozenset({"function_call", "custom_tool_call"})
OUTPUT_TYPES = frozenset({"function_call_output", "custom_tool_call_output"})
OUTPUT_OF = {"function_call": "function_call_output", "custom_tool_call": "custom_tool_call_output"}


@dataclass(frozen=True)
class WireForm:
    """How a sending release puts the rollout's items on the wire: the item keys it leaves off (both sides of the
    comparison are the items without them; a request that keeps one is refused)."""

    name: str
    unsent_keys: frozenset[str]


#: the verified versions' form: every rollout item as written, without the rollout-only metadata
ROLLOUT_ITEMS = WireForm("rollout-items", ROLLOUT_ONLY_KEYS)
#: Codex 0.142.0-0.145.0: the items without their ``id`` (see the module docstring)
ITEMS_WITHOUT_IDS = WireForm("rollout-items-without-ids", ROLLOUT_ONLY_KEYS | {"id"})
WIRE_FORMS = {form.name: form for form in (ROLLOUT_ITEMS, ITEMS_WITHOUT_IDS)}
#: the releases that send ``ITEMS_WITHOUT_IDS``: from the first (0.142.0) up to, not including, the first release
#: measured to send the ids again (0.146.1; no 0.146.0 was published)
WITHOUT_IDS_FROM, WITHOUT_IDS_BEFORE = (0, 142, 0), (0, 146, 1)


def sender_form(release: str | None) -> WireForm:
    """The wire form of the release that sends the requests (the continuing binary, or the release a calibration
    runs in a verified version's place)."""
    value = number(release)
    if value is not None and WITHOUT_IDS_FROM <= value < WITHOUT_IDS_BEFORE:
        return ITEMS_WITHOUT_IDS
    return ROLLOUT_ITEMS


@dataclass(frozen=True)
class ResumeNotice:
    """A message a newer Codex adds to the envelope when it resumes an older version's rollout: the context its
    own sessions start with but the rollout lacks. Matched by role and exact, whole text (one part)."""

    name: str
    role: str
    text: str


#: 0.171's sessions start with this part in their first developer message; 0.149 rollouts lack it, so 0.171
#: resuming one announces it right before the resume prompt (tests/fixtures/codex/requests/cross/)
DEFERRED_TOOLS = ResumeNotice("deferred_tools", "developer", "<tools>\nDeferred tool namespaces:\n- multi_agent_v1: "
                                                             "Tools for spawning and managing sub-agents.\n</tools>")


@dataclass(frozen=True)
class EnvelopeProfile:
    """How one verified Codex version wraps a resumed rollout (docs: native resume envelopes §2.3, §4)."""

    version: str
    profile: str
    #: input[0] is a developer message with the base instructions that is not in the rollout (0.171)
    instructions_item: bool
    #: rollouts of other versions this one resumes (pairs proven e2e), with the notices it then adds
    resumes: Mapping[str, tuple[ResumeNotice, ...]] = field(default_factory=dict)

    def notices_for(self, recorded_version: str) -> tuple[ResumeNotice, ...] | None:
        """The notices this version adds on resuming a rollout written by ``recorded_version``; None for a
        version whose rollouts it is not verified to resume."""
        return () if recorded_version == self.version else self.resumes.get(recorded_version)


PROFILES: dict[str, EnvelopeProfile] = {
    "0.149.0": EnvelopeProfile("0.149.0", "codex/0.149.0/native-resume-v1", instructions_item=False),
    "0.171.0": EnvelopeProfile("0.171.0", "codex/0.171.0/native-resume-v1", instructions_item=True,
                               resumes={"0.149.0": (DEFERRED_TOOLS,)}),
}


def profile_for_version(version: str) -> EnvelopeProfile:
    return envelope_profile(PROFILES, version, "Codex")



# -- the canonical projection ------------------------------------------------------------------------------------


def project_item(item: Any, form: WireForm = ROLLOUT_ITEMS) -> Any:
    """One item as the model sees it: the keys the sender never sends removed, everything else kept as is."""
    if not isinstance(item, dict):
        return item
    return {key: value for key, value in item.items() if key not in form.unsent_keys}


def project(items: Sequence[Any], form: WireForm = ROLLOUT_ITEMS) -> list[Any]:
    """The canonical form compared on both sides (rollout ``response_item`` payloads / request ``input``): a
    request is projected with ``ROLLOUT_ITEMS`` only, so a key its sender's ``form`` never sends is a difference."""
    return [project_item(item, form) for item in items]


def item_kind(item: Any) -> str:
    """``message:<role>`` for messages, the item ``type`` otherwise (``?`` when there is none)."""
    if not isinstance(item, dict):
        return type(item).__name__
    kind = item.get("type")
    kind = kind if isinstance(kind, str) else "?"
    if kind == "message":
        return f"message:{item.get('role')}"
    return kind


def item_call_id(item: Any) -> str | None:
    if isinstance(item, dict) and item.get("type") in CALL_TYPES | OUTPUT_TYPES:
        call_id = item.get("call_id")
        return call_id if isinstance(call_id, str) else None
    return None


def output_digest(item: JsonObject) -> str:
    """Canonical hash of one tool output: its call id and output (string or content-part list)."""
    return canonical_sha256({"call_id": item.get("call_id"), "output": item.get("output")})


# -- the manifest ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ItemDigest:
    """One projected item: its kind, canonical hash, and the call id it carries or answers (if any)."""

    kind: str
    sha256: str
    call_id: str | None = None


@dataclass(frozen=True)
class OutputDigest:
    call_id: str
    sha256: str  # output_digest: {call_id, output}


@dataclass(frozen=True)
class CodexExpectedPrefix:
    """What the resumed request's ``input`` must hold before the envelope, as hashes and ids only."""

    profile: str
    version: str
    nonce: str
    item_count: int
    prefix_sha256: str
    items: tuple[ItemDigest, ...]
    call_ids: tuple[str, ...]  # every function_call / custom_tool_call, in order
    outputs: tuple[OutputDigest, ...]  # every tool output, in order
    boundary_call_ids: tuple[str, ...]  # the outputs that end the prefix (batch N), in file order
    recorded_version: str  # the version that wrote the rollout (``version`` resumes it)
    wire_form: str = ROLLOUT_ITEMS.name  # the sending release's ``WireForm``
    schema_version: str = SCHEMA_VERSION

    def to_json(self) -> JsonObject:
        """Plain JSON types only (lists, not tuples); ``from_json`` reverses it."""
        return {
            "schema_version": self.schema_version,
            "profile": self.profile,
            "version": self.version,
            "nonce": self.nonce,
            "item_count": self.item_count,
            "prefix_sha256": self.prefix_sha256,
            "items": [asdict(item) for item in self.items],
            "call_ids": list(self.call_ids),
            "outputs": [asdict(output) for output in self.outputs],
            "boundary_call_ids": list(self.boundary_call_ids),
            "recorded_version": self.recorded_version,
            "wire_form": self.wire_form,
        }

    @classmethod
    def from_json(cls, data: Any) -> CodexExpectedPrefix:
        """Parse ``to_json`` output; raises ValueError on anything else."""
        prefix = load_manifest(data, SCHEMA_VERSION, cls._build)
        if len(prefix.items) != prefix.item_count:
            raise ValueError("manifest item_count does not match its item list")
        return prefix

    @classmethod
    def _build(cls, data: JsonObject) -> CodexExpectedPrefix:
        return cls(
            profile=str(data["profile"]),
            version=str(data["version"]),
            nonce=str(data["nonce"]),
            item_count=int(data["item_count"]),
            prefix_sha256=str(data["prefix_sha256"]),
            items=tuple(ItemDigest(str(i["kind"]), str(i["sha256"]),
                                   None if i.get("call_id") is None else str(i["call_id"]))
                        for i in data["items"]),
            call_ids=tuple(str(c) for c in data["call_ids"]),
            outputs=tuple(OutputDigest(str(o["call_id"]), str(o["sha256"])) for o in data["outputs"]),
            boundary_call_ids=tuple(str(c) for c in data["boundary_call_ids"]),
            recorded_version=str(data.get("recorded_version") or data["version"]),
            wire_form=str(data.get("wire_form") or ROLLOUT_ITEMS.name),
        )


def digest_items(projected: Sequence[Any]) -> tuple[ItemDigest, ...]:
    return tuple(ItemDigest(item_kind(item), canonical_sha256(item), item_call_id(item)) for item in projected)


def calls_and_outputs(projected: Sequence[Any]) -> tuple[tuple[str, ...], tuple[OutputDigest, ...]]:
    """Every call id and every output digest, in item order."""
    calls: list[str] = []
    outputs: list[OutputDigest] = []
    for item in projected:
        if not isinstance(item, dict):
            continue
        if item.get("type") in CALL_TYPES:
            calls.append(str(item.get("call_id")))
        elif item.get("type") in OUTPUT_TYPES:
            outputs.append(OutputDigest(str(item.get("call_id")), output_digest(item)))
    return tuple(calls), tuple(outputs)


def expected_prefix(rollout_items: Sequence[Any], nonce: str, version: str,
                    recorded_version: str | None = None, sender: str | None = None) -> CodexExpectedPrefix:
    """The manifest for a rebuilt rollout prefix: its ``response_item`` payloads, in file order, resumed by
    ``version`` (the rollout written by ``recorded_version``, default the same version; the requests sent by the
    release ``sender``, default ``version``: its ``sender_form``).

    Refuses a version pair without a resume profile, a prefix that does not end with the outputs of exactly the
    calls of its last model response, a call without exactly one output of the matching type (Codex would invent
    an ``aborted`` output on resume), and a nonce that is short or already occurs in the prefix.
    """
    profile = profile_for_version(version)
    recorded = recorded_version or version
    if profile.notices_for(recorded) is None:
        raise unsupported_version(f"Codex {version} has no verified resume envelope for a rollout written by "
                                  f"{recorded} (verified: {', '.join(profile.resumes) or 'none'})")
    items = list(rollout_items)
    check_resume_nonce(nonce, items, "rebuilt rollout")
    for index, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("type"), str):
            raise trajectory(f"rollout response_item {index} is not an item object with a type")
    form = sender_form(sender or version)
    projected = project(items, form)
    _check_pairing(projected)
    end = len(projected)
    while end > 0 and is_image_message(projected[end - 1]):
        end -= 1  # Codex 0.40's view_image: the image message after the output belongs to the batch
    start = end
    while start > 0 and projected[start - 1]["type"] in OUTPUT_TYPES:
        start -= 1
    if start == end:
        raise trajectory("the rebuilt Codex prefix does not end with a tool output")
    boundary = tuple(str(item["call_id"]) for item in projected[start:end])
    first_call = start
    while first_call > 0 and _is_model_item(projected[first_call - 1]):
        first_call -= 1
    last_calls = [str(item["call_id"]) for item in projected[first_call:start] if item["type"] in CALL_TYPES]
    if sorted(boundary) != sorted(last_calls):
        raise trajectory(
            "the last tool outputs of the rebuilt Codex prefix do not answer exactly the tool calls of the model "
            f"response before them (calls {last_calls}, outputs {list(boundary)})"
        )
    calls, outputs = calls_and_outputs(projected)
    return CodexExpectedPrefix(
        profile=profile.profile,
        version=profile.version,
        nonce=nonce,
        item_count=len(projected),
        prefix_sha256=canonical_sha256(projected),
        items=digest_items(projected),
        call_ids=calls,
        outputs=outputs,
        boundary_call_ids=boundary,
        recorded_version=recorded,
        wire_form=form.name,
    )


def is_image_message(item: JsonObject) -> bool:
    """A user message that is only a view_image's image (Codex 0.40 writes one after the call's output)."""
    content = item.get("content")
    return (item.get("type") == "message" and item.get("role") == "user" and isinstance(content, list)
            and all(isinstance(part, dict) and part.get("type") == "input_image" for part in content))


def _is_model_item(item: JsonObject) -> bool:
    """An item of a model response: a call, reasoning, or an assistant message."""
    kind = item.get("type")
    return kind in CALL_TYPES or kind == "reasoning" or (kind == "message" and item.get("role") == "assistant")


def _check_pairing(projected: Sequence[JsonObject]) -> None:
    calls: dict[str, str] = {}
    answered: set[str] = set()
    for index, item in enumerate(projected):
        kind = item["type"]
        if kind not in CALL_TYPES and kind not in OUTPUT_TYPES:
            continue
        call_id = item.get("call_id")
        if not isinstance(call_id, str) or not call_id:
            raise trajectory(f"rollout response_item {index} ({kind}) has no call_id")
        if kind in CALL_TYPES:
            if call_id in calls:
                raise trajectory(f"rollout response_item {index}: duplicate call_id {call_id}")
            calls[call_id] = kind
            continue
        if calls.get(call_id) is None or OUTPUT_OF[calls[call_id]] != kind:
            raise trajectory(f"rollout response_item {index}: {kind} for {call_id} answers no earlier matching call")
        if call_id in answered:
            raise trajectory(f"rollout response_item {index}: a second output for {call_id}")
        answered.add(call_id)
    missing = [call_id for call_id in calls if call_id not in answered]
    if missing:
        raise trajectory(f"tool calls without an output in the rebuilt Codex prefix: {missing} (Codex would send "
                         "an invented 'aborted' output for them)")
