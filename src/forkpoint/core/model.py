"""Neutral, frozen types shared by the engine and every adapter.

Adapters translate their native format into these; the engine never looks at native data itself
(it passes ``native`` fields back to the adapter that produced them).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Literal

if TYPE_CHECKING:
    from typing_extensions import TypeVar

    from forkpoint.bridge.translate.sampling import SamplingPins
    from forkpoint.process.mcp import McpClients
    from forkpoint.sandbox.base import Sandbox

    #: an adapter's own parsed form of a recording (``Trajectory[CodexNative]``); ``Any`` where the agent is not
    #: known (a TypeVar default is PEP 696: only the type checker has it before Python 3.13)
    N = TypeVar("N", default=Any)
else:
    from typing import TypeVar

    N = TypeVar("N")

JsonObject = dict[str, Any]


class Mode(StrEnum):
    PREPARE_ONLY = "prepare_only"
    REPLAY_ONLY = "replay_only"
    REPLAY_AND_CONTINUE = "replay_and_continue"


class CallPolicy(StrEnum):
    """How a historical call can be treated when its batch is inside the prefix."""

    FRESH = "fresh"  # re-run in the workspace, observation regenerated
    STALE = "stale"  # observation cannot be refreshed; reuse needs --allow-stale-observations
    REFUSED = "refused"  # cannot be replayed at all (would change semantics silently)
    # the recorded observation is reused BY DESIGN, not for want of a way to re-run it: a sub-agent's final answer
    # (its own calls are re-run), a tool the user declared read-only (--reuse-observations). ``policy_reason`` is
    # the quality reason the run records (``subagent_answer_reused``, ``reused_by_request``); no opt-in needed.
    REUSED = "reused"

    @staticmethod
    def listed(name: str, fresh: Collection[str], stale: Mapping[str, str]) -> tuple[CallPolicy, str | None] | None:
        """The policy of a tool an adapter lists: fresh, or stale for its listed reason; None for an unlisted
        tool, whose policy the adapter decides."""
        if name in fresh:
            return CallPolicy.FRESH, None
        if name in stale:
            return CallPolicy.STALE, stale[name]
        return None


@dataclass(frozen=True)
class Observation:
    """What a tool call returned, in the agent's native content shape (a string or a list of blocks)."""

    content: Any
    is_error: bool = False

    @property
    def text(self) -> str:
        return observation_text(self.content)


def observation_text(content: Any) -> str:
    """Flatten native content to the text a human would compare (text blocks joined, others as JSON)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
                parts.append(block["text"])
            else:
                from forkpoint.core.hashing import canonical_json

                parts.append(canonical_json(block))
        return "\n".join(parts)
    from forkpoint.core.hashing import canonical_json

    return canonical_json(content)


@dataclass(frozen=True)
class ToolCall:
    call_id: str
    name: str
    arguments: JsonObject
    historical: Observation | None
    policy: CallPolicy = CallPolicy.FRESH
    policy_reason: str | None = None  # why the call is stale or refused
    native: Any = field(default=None, compare=False, repr=False)
    #: the sub-agent that made this call (its calls appear in observations.json under this name), None for the
    #: agent's own calls
    subagent: str | None = None
    #: the calls the sub-agent this call started made, in order: replayed before this call, in the same workspace
    subcalls: tuple[ToolCall, ...] = ()
    #: (server, tool) of a stale MCP tool call: re-run against the user's server when --mcp-config names it
    mcp: tuple[str, str] | None = None

    @property
    def stale(self) -> bool:
        return self.policy is not CallPolicy.FRESH

    def replay_order(self) -> tuple[ToolCall, ...]:
        """This call's sub-agent calls (theirs first, depth first) and then the call itself: the order they ran."""
        return (*(inner for call in self.subcalls for inner in call.replay_order()), self)


@dataclass(frozen=True)
class Batch:
    """Every tool call of one assistant response with all their results: the unit of replay."""

    ordinal: int
    calls: tuple[ToolCall, ...]
    locator: str  # where it sits in the native file, e.g. "line:12"
    complete: bool = True
    native: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class ActionSignature:
    """What an assistant turn did: visible text, reasoning and tool calls (for next-action comparison)."""

    text: str
    reasoning: str
    tools: tuple[tuple[str, JsonObject], ...]

    def to_json(self) -> JsonObject:
        return {
            "text": self.text,
            "reasoning": self.reasoning,
            "tools": [{"name": name, "arguments": args} for name, args in self.tools],
        }


@dataclass(frozen=True)
class Trajectory(Generic[N]):
    """A parsed native recording.

    ``batches`` holds every tool batch on the active conversation in order; the selectable ones are the
    leading complete batches (``complete_count``). ``next_actions[n]`` is the first assistant turn after
    batch n (index 0 = after the task), None when the recording ends there.
    """

    agent: str
    version: str | None
    versions: frozenset[str]
    session_id: str | None
    cwd: str | None
    source_path: Path
    source_sha256: str
    batches: tuple[Batch, ...]
    next_actions: tuple[ActionSignature | None, ...]
    boundary_refusals: dict[int, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    #: the adapter's parsed native form: ``plan.trajectory.native`` is typed in the adapter that made it
    native: N = field(compare=False, repr=False, kw_only=True)

    @classmethod
    def recorded(cls, agent: str, version: str | None, source_path: Path, source_sha256: str, *,
                 session_id: str | None, cwd: str | None, batches: Sequence[Batch],
                 next_actions: Sequence[ActionSignature | None], native: N,
                 boundary_refusals: dict[int, str] | None = None, warnings: Sequence[str] = ()) -> Trajectory[N]:
        """A recording that names one version of its agent, or none: ``versions`` is that version alone."""
        return cls(agent, version, frozenset({version}) if version else frozenset(), session_id, cwd, source_path,
                   source_sha256, tuple(batches), tuple(next_actions),
                   {} if boundary_refusals is None else boundary_refusals, tuple(warnings), native=native)

    @property
    def complete_count(self) -> int:
        count = 0
        for batch in self.batches:
            if not batch.complete:
                break
            count += 1
        return count

    @property
    def incomplete_tail(self) -> bool:
        return self.complete_count < len(self.batches)


VersionStatus = Literal["verified", "calibrated", "unverified"]


@dataclass(frozen=True)
class VersionFacts:
    """The three version questions, answered for one recording (forkpoint.adapters.versions).

    (a) it is READ as ``format_family``; (b) its tools re-run with the semantics of ``tool_version`` (a verified
    version: ``profile``); (c) the continuing binary is chosen later, always a verified version. ``recorded``
    is a display label only (escaped, bounded), never a path.
    """

    recorded: str | None
    status: VersionStatus
    format_family: str
    tool_version: str
    profile: str
    #: why the run is degraded by its version (empty when verified/calibrated)
    reasons: tuple[str, ...] = ()
    #: a measured tool profile of the recorded release line that re-runs the tools instead of ``tool_version``'s
    #: (Claude Code 2.0.x, OpenCode 1.2.x): its label; None when ``tool_version``'s own tools do
    tool_profile: str | None = None

    @property
    def tools_as(self) -> str:
        """Whose tool semantics re-ran the calls, as shown to people: the measured profile, else the version."""
        return self.tool_profile or self.tool_version

    def to_json(self) -> dict[str, object]:
        return {"recorded_version": self.recorded, "recorded_version_status": self.status,
                "format_family": self.format_family, "tool_semantics_version": self.tool_version,
                "tool_profile": self.tool_profile, "profile": self.profile, "version_notes": list(self.reasons)}


@dataclass(frozen=True)
class Plan(Generic[N]):
    """A trajectory cut at a boundary: the batches 1..after_step that will be replayed."""

    trajectory: Trajectory[N]
    after_step: int
    mode: Mode
    profile: str
    allow_stale_observations: bool = False
    #: ``--reuse-observations`` globs, matched against tool names (``policy_of``)
    reuse_observations: tuple[str, ...] = ()
    #: the MCP servers ``--mcp-config`` names: their stale MCP calls are re-run (``policy_of``)
    mcp_servers: frozenset[str] = frozenset()
    #: what the recording's version means for this run (None: a plan made before versions were resolved)
    version: VersionFacts | None = field(default=None, compare=False)

    @property
    def batches(self) -> tuple[Batch, ...]:
        return self.trajectory.batches[: self.after_step]

    @property
    def calls(self) -> tuple[ToolCall, ...]:
        return tuple(call for batch in self.batches for call in batch.calls)

    @property
    def replayed_calls(self) -> tuple[ToolCall, ...]:
        """Every call the replay meets, sub-agents' calls included, in the order they ran."""
        return tuple(inner for call in self.calls for inner in call.replay_order())

    def policy_of(self, call: ToolCall) -> tuple[CallPolicy, str | None]:
        """The call's policy in this run: a stale call whose tool name matches a ``--reuse-observations`` glob is
        reused by request (the user declared it read-only); a stale MCP call of a server ``--mcp-config`` names is
        re-run; everything else as parsed."""
        if call.policy is CallPolicy.STALE and any(fnmatch.fnmatchcase(call.name, glob)
                                                   for glob in self.reuse_observations):
            return CallPolicy.REUSED, "reused_by_request"
        if call.policy is CallPolicy.STALE and call.mcp is not None and call.mcp[0] in self.mcp_servers:
            return CallPolicy.FRESH, None
        return call.policy, call.policy_reason

    @property
    def prefix_model_turns(self) -> int:
        return self.after_step

    @property
    def original_next_action(self) -> ActionSignature | None:
        actions = self.trajectory.next_actions
        return actions[self.after_step] if self.after_step < len(actions) else None


@dataclass(frozen=True)
class NativePrefix:
    """The native session files an adapter wrote for a plan, and what identifies them."""

    path: Path
    format: str
    session_id: str | None
    sha256: str
    extra_paths: tuple[Path, ...] = ()


@dataclass(frozen=True)
class FreshObservation:
    """What re-running one historical call produced, in the agent's native content shape.

    ``native`` carries agent-specific extras the session rebuild needs (e.g. Claude's ``toolUseResult``).
    """

    call_id: str
    content: Any
    is_error: bool = False
    truncated: bool = False
    stale_reused: bool = False
    return_code: int | None = None
    duration_ms: int = 0
    native: Any = field(default=None, compare=False)
    #: the quality reason of an observation reused by design (``CallPolicy.REUSED``), else None
    reused: str | None = None
    #: the quality reason of a re-run (compared) observation that took part of its input from the recording (Claude's
    #: AskUserQuestion: ``answer_from_recording``, the original person's answer), else None
    note: str | None = None


@dataclass(frozen=True)
class RunContext:
    """Where one run lives: the workspace tools touch, and the run's private state and output dirs.

    ``sandbox`` runs the tools and the agent (None: local, no isolation; see forkpoint.sandbox).
    """

    workspace: Path
    state_dir: Path
    output_dir: Path
    session_id: str | None = None
    sandbox: Sandbox | None = field(default=None, compare=False, repr=False)
    #: the user's MCP servers (``--mcp-config``), connected on first use during the replay
    mcp: McpClients | None = field(default=None, compare=False, repr=False)
    #: the continuation's view: ``home`` is the continued agent's own home, not the one replayed commands wrote
    continuing: bool = False

    @property
    def home(self) -> Path:
        """The agent's isolated HOME (never the user's real home): the replay's, or the continuation's when
        ``continuing``. Two folders, so nothing a replayed command wrote into its HOME (Claude hooks, Codex
        config.toml, OpenCode plugins, Pi extensions...) configures the continued agent."""
        return self.agent_home if self.continuing else self.replay_home

    @property
    def replay_home(self) -> Path:
        """HOME of replayed commands and tool runners (writable by them)."""
        return self.state_dir / "home"

    @property
    def agent_home(self) -> Path:
        """HOME of the continued agent: rebuilt by the continuation shell right before it starts, holding only
        forkpoint's own files; replayed commands under bwrap never see it writable."""
        return self.state_dir / "agent-home"

    @property
    def logs(self) -> Path:
        return self.output_dir / "logs"


@dataclass(frozen=True)
class LaunchTarget:
    """The verified agent binary a continuation will start (resolved before anything runs)."""

    entrypoint: Path
    version: str


@dataclass(frozen=True)
class ContinueSettings:
    target: LaunchTarget
    upstream: str  # an --upstream value (forkpoint.core.protocols.UPSTREAMS)
    upstream_url: str | None
    upstream_key: str | None = field(default=None, repr=False)
    boundary_prompt: str | None = field(default=None, repr=False)
    remaining_steps: int | None = None
    #: the whole continuation's deadline (``--continuation-timeout``)
    timeout_s: float = 4 * 3600.0
    #: no byte from the upstream for this long cuts the answer (``--upstream-idle-timeout``)
    upstream_idle_timeout_s: float = 300.0
    #: an answer that has not ended after this long is cut (``--answer-timeout``)
    answer_timeout_s: float = 1800.0
    #: the model the continuation asks for (None: the recorded one); set by the bridge after validation or by the
    #: agent's own configuration, per agent
    model: str | None = None
    #: sampling pins applied by the bridge after validation (a ``forkpoint.bridge.translate.sampling.SamplingPins``)
    sampling: SamplingPins | None = None
    #: retries of an upstream failure before the first byte reaches the agent
    upstream_retries: int = 3
    #: save the first validated request's tool definitions to ``<output>/tool-schemas.json`` (issue 20)
    record_tool_schemas: bool = False
    #: ask the upstream for token ids and logprobs, recorded in ``<output>/tokens.jsonl`` (issue 31)
    capture_tokens: bool = False
    #: the user's MCP servers (``--mcp-config``): given to the continued agent too, so its live turns can call them
    mcp_config: Path | None = None


@dataclass(frozen=True)
class Continuation:
    """How the real agent's continuation ended, and where its native session is."""

    agent_status: str  # completed | max_steps
    continued_steps: int
    continued_path: Path
    next_action: ActionSignature | None
    metadata: dict[str, Any] = field(default_factory=dict)
