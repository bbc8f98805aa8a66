"""The one continuation shell: start the real agent on the rebuilt session, its model traffic behind the bridge.

Every agent continues the same way, so the steps live here once and an adapter supplies only what differs
(``AgentHooks``, implemented in ``adapters/<agent>/launch.py``):

1. a nonce (the resume transport's placeholder prompt) and the job's paths, all derived from the ``RunContext``
   (state dir, output dir, HOME): nothing assumes one continuation per state dir, so branching (K continuations
   of one replay, each with its own copied state and output dir) is just K calls;
2. ``install``: the rebuilt session is placed in the agent's isolated HOME (strict writes: no planted link is
   followed);
3. ``gate``: the expected first request and the gate that proves it, and the document written to
   ``<state>/expected-prefix.json``;
4. the bridge, with the upstream picked by ``make_upstream(hooks.protocol, settings)`` (the agent's native wire
   protocol x the user's ``--upstream``) and, for agents without a max-steps option, the step budget at the wire;
5. ``launch`` (argv, env, cwd, writable/readable paths, stdin, log, watchdog) and ``run`` (default: the run's
   sandbox, where the agent reaches the bridge on 127.0.0.1 and, under bwrap, nothing else; a companion request
   or a helper-command sequence overrides it);
6. ``outcome``: what the agent's own output says; ``triage`` (pure) turns the bridge summary, the process result
   and the outcome into the run's failure, or None;
7. ``collect``: clean the continued native file into ``<out>/native/continued``, re-parse it, count the steps
   and find the next action; ``salvage`` (optional) keeps what a failed run left (an agent's database exported
   anyway, before the failure is raised).

The seams the next features use:

* Model choice (issue 17): ``make_upstream`` is the only place an upstream is chosen; the registry in
  ``forkpoint.bridge.protocols`` maps each ``--upstream`` name to the wire protocol it speaks, and an agent whose
  native protocol differs from the upstream's gets a translating upstream (Anthropic Messages -> Chat Completions,
  Responses -> Chat) from there. Model and sampling pins
  (``--model``, ``--temperature``...) are applied by the bridge after the gate validated a request, so they
  reach the ``Bridge`` built in ``continue_with`` and are recorded with the common metadata keys there; a hook
  that must configure the agent to ask for another model reads them from ``job.settings``.
* Branching (issue 18): ``continue_with`` is reentrant and keeps no state outside the job; every path comes from
  the ``RunContext`` the caller gives (branching.py gives each branch its own copy).
* Tool-schema capture (issue 20, ``--record-tool-schemas``): the shell is where the output dir and the bridge
  meet; a capture observer handed to the ``Bridge`` (next to ``log_path``) and writing under
  ``job.context.output_dir`` belongs in ``_open_bridge``.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import secrets
import stat
from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar
from urllib.parse import urlsplit

from forkpoint.core.errors import ErrorKind, ReplayError, classify_continuation_output
from forkpoint.core.fs import (
    PlantedLinkError,
    copy_fd_strict,
    lstat_strict,
    open_regular_strict,
    read_file_strict,
    refused_as,
    write_file_strict,
)
from forkpoint.core.hashing import make_nonce
from forkpoint.core.model import (
    ActionSignature,
    Continuation,
    ContinueSettings,
    JsonObject,
    NativePrefix,
    Plan,
    RunContext,
)
from forkpoint.core.protocols import outgoing_protocol
from forkpoint.core.results import write_json
from forkpoint.sandbox import local_sandbox

if TYPE_CHECKING:
    from forkpoint.bridge.gate import Gate
    from forkpoint.bridge.server import Bridge, BridgeSummary
    from forkpoint.bridge.translate.sampling import SamplingPins
    from forkpoint.bridge.upstream import Upstream
    from forkpoint.process import ProcessResult, Watch
    from forkpoint.sandbox.base import Sandbox

#: the key every agent sends to the bridge; the real upstream key never reaches the agent
BRIDGE_KEY = "forkpoint-bridge"
MAX_AGENT_OUTPUT_BYTES = 16 * 1024 * 1024
_TAIL = 4000
#: ``--record-tool-schemas``: the first validated request's tool definitions, in the output dir (issue 20)
TOOL_SCHEMAS = "tool-schemas.json"

S = TypeVar("S")


@dataclass(frozen=True)
class Job:
    """One continuation: what the caller gave, the nonce and the sandbox. Every path derives from ``context``."""

    plan: Plan
    prefix: NativePrefix
    context: RunContext
    settings: ContinueSettings
    nonce: str
    sandbox: Sandbox

    @property
    def boundary_prompt(self) -> str | None:
        return self.settings.boundary_prompt or None

    @property
    def continued_dir(self) -> Path:
        """Where the continued native files go (created by the shell before ``collect``)."""
        return self.context.output_dir / "native" / "continued"


@dataclass(frozen=True)
class GateSpec:
    """The gate the bridge runs, and the expected-prefix document (no prompt text) written to the state dir."""

    gate: Gate
    document: JsonObject


@dataclass(frozen=True)
class LaunchSpec:
    """How the agent process is started (``cwd`` as the sandbox shows it)."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    log_path: Path
    writable: tuple[Path, ...] = ()
    readable: tuple[Path, ...] = ()
    stdin: bytes | None = None
    watch: Watch | None = None
    grace_s: float = 2.0
    max_output_bytes: int = MAX_AGENT_OUTPUT_BYTES
    #: request document for agents driven over a pipe or a file (a companion, a runner) instead of argv alone
    request: JsonObject = field(default_factory=dict)
    #: the bridge's port on 127.0.0.1 (set by the shell): the only one a sandbox with its own network forwards
    bridge_port: int | None = None


@dataclass(frozen=True)
class Ran:
    """What running the agent gave: the process (None when a warm companion answered a request instead) and the
    reply document of a companion or runner, if any."""

    process: ProcessResult | None
    log: Path
    reply: JsonObject = field(default_factory=dict)

    @property
    def exit_code(self) -> int | None:
        return None if self.process is None else self.process.returncode

    def tail(self) -> str:
        if self.process is None:
            return ""
        return (self.process.stdout[-_TAIL:] + b"\n" + self.process.stderr[-_TAIL:]).decode("utf-8", "replace")


@dataclass(frozen=True)
class Outcome:
    """How the agent says its run ended: ``completed``, ``max_steps`` (its budget) or ``failed`` (``detail`` says
    why; ``kind`` None = classified from the output). ``reported_steps``: the live steps the agent counted, if it
    says. ``metadata``: per-agent facts for the result."""

    status: str
    detail: str = ""
    kind: ErrorKind | None = None
    metadata: JsonObject = field(default_factory=dict)
    reported_steps: int | None = None


@dataclass(frozen=True)
class Collected:
    """The cleaned continued native file, the live steps in it and the first action after the boundary."""

    path: Path
    steps: int
    next_action: ActionSignature | None
    metadata: JsonObject = field(default_factory=dict)


class AgentHooks(ABC, Generic[S]):
    """What an agent supplies to the shell. ``S`` is the adapter's own state between the hooks (where the session
    was installed, the recorded model...). Required hooks are abstract; optional ones have no-op defaults."""

    #: the agent's native wire protocol (``make_upstream`` maps it against ``settings.upstream``)
    protocol: ClassVar[str]
    #: how messages name the agent (its command or runner)
    label: ClassVar[str]
    #: ``native_cli`` in the result metadata
    native_cli: ClassVar[str]
    #: enforce the remaining step budget at the wire (agents without a max-steps option of their own)
    budget_at_bridge: ClassVar[bool] = True

    @abstractmethod
    def install(self, job: Job) -> S:
        """Place the rebuilt session where the agent resumes it (the isolated HOME); return the adapter's state."""

    @abstractmethod
    def gate(self, job: Job, state: S) -> GateSpec:
        """The expected first request (prefix + boundary prompt + version) and its gate."""

    @abstractmethod
    def launch(self, job: Job, state: S, bridge_url: str) -> LaunchSpec:
        """How to start the agent with its model at ``bridge_url``."""

    @abstractmethod
    def outcome(self, job: Job, state: S, ran: Ran, summary: BridgeSummary) -> Outcome:
        """Read how the agent's run ended from its output (or reply)."""

    @abstractmethod
    def collect(self, job: Job, state: S, ran: Ran, outcome: Outcome,
                summary: BridgeSummary) -> Collected:
        """Clean the continued native file into ``job.continued_dir``, re-parse it, count steps, next action."""

    def run(self, job: Job, state: S, spec: LaunchSpec) -> Ran:
        """Run the agent to completion in the run's sandbox (``run_in_sandbox``: the bridge, and under bwrap only
        the bridge, on 127.0.0.1)."""
        return Ran(run_in_sandbox(job, spec), spec.log_path)

    def salvage(self, job: Job, state: S, ran: Ran) -> None:
        """Keep what a failed run left (before its failure is raised); errors here never hide that failure."""

    def carried(self, job: Job) -> Sequence[Path]:
        """Folders of the continued agent's home (relative to it) whose regular files forkpoint itself wrote
        there during the replay and the rebuilt home keeps (Claude's saved large outputs); nothing else is kept."""
        return ()


def run_in_sandbox(job: Job, spec: LaunchSpec) -> ProcessResult:
    """The agent in the run's sandbox. A sandbox with its own network namespace (bwrap) gets no network but the
    bridge's port (``forkpoint.sandbox.forward``); one without (local) shares the host's."""
    options: dict[str, Any] = {
        "cwd": spec.cwd, "env": spec.env, "writable": spec.writable, "stdin": spec.stdin,
        "timeout_s": job.settings.timeout_s, "grace_s": spec.grace_s, "die_with_parent": True,
        "max_output_bytes": spec.max_output_bytes, "log_path": spec.log_path, "watch": spec.watch,
    }
    if not job.sandbox.private_network or spec.bridge_port is None:
        return job.sandbox.run(spec.argv, network=True, readable=spec.readable, **options)
    from forkpoint.sandbox.forward import HostRelay

    with HostRelay(spec.bridge_port, job.context.state_dir) as relay:
        argv = relay.wrap(job.sandbox.host_command(spec.argv))
        return job.sandbox.run(argv, network=False, readable=(*spec.readable, *relay.readable),
                               **options)


def continue_with(hooks: AgentHooks[S], plan: Plan, prefix: NativePrefix, context: RunContext,
                  settings: ContinueSettings) -> Continuation:
    """Continue the agent behind the bridge; a failure is a typed ``ReplayError``."""
    sandbox = context.sandbox or local_sandbox(context.workspace)
    # The continued agent's own home, not the one replayed commands wrote (context.home is now agent_home).
    context = dataclasses.replace(context, continuing=True)
    job = Job(plan, prefix, context, settings, make_nonce(), sandbox)
    rebuild_home(context.home, hooks.carried(job))
    state = hooks.install(job)
    gate = hooks.gate(job, state)
    write_json(context.state_dir / "expected-prefix.json", gate.document)
    context.logs.mkdir(parents=True, exist_ok=True)
    outgoing = outgoing_protocol(hooks.protocol, settings.upstream)
    pinning = Pinning.of(outgoing, settings, translated=outgoing != hooks.protocol)
    bridge = _open_bridge(hooks, job, gate.gate, pinning)
    with bridge:
        spec = dataclasses.replace(hooks.launch(job, state, bridge.base_url),
                                   bridge_port=urlsplit(bridge.base_url).port)
        ran = hooks.run(job, state, spec)
        summary = bridge.finish()
    outcome = hooks.outcome(job, state, ran, summary)
    failure = triage(summary, ran, outcome, hooks.label, settings.timeout_s)
    job.continued_dir.mkdir(parents=True, exist_ok=True)
    if failure is not None:
        with suppress(ReplayError):  # the failure is the news, not what salvaging it met
            hooks.salvage(job, state, ran)
        raise failure
    collected = hooks.collect(job, state, ran, outcome, summary)
    metadata: dict[str, Any] = {"native_cli": hooks.native_cli, "model_bridge": summary.to_json(),
                                "model_usage": summary.model_usage,
                                **({} if ran.process is None else {"agent_exit_code": ran.exit_code}),
                                "agent_log": str(ran.log), **pinning.metadata(), **outcome.metadata,
                                **collected.metadata,
                                "recorded_agent_version": (plan.version.recorded if plan.version
                                                           else plan.trajectory.version),
                                "continuing_agent_version": settings.target.version,
                                "session_upgrade": session_upgrade(plan, settings.target.version),
                                "tool_schemas_recorded": (job.context.output_dir / TOOL_SCHEMAS).is_file(),
                                **({} if bridge.tokens is None else {"token_capture": bridge.tokens.summary()})}
    return Continuation(
        agent_status="max_steps" if reached_budget(outcome, summary) else "completed",
        continued_steps=collected.steps,
        continued_path=collected.path,
        next_action=collected.next_action,
        metadata=metadata,
    )


def _open_bridge(hooks: AgentHooks[Any], job: Job, gate: Gate, pinning: Pinning) -> Bridge:
    """The bridge between the agent and its upstream (the place for request observers: issue 20's tool schemas)."""
    from forkpoint.bridge.server import Bridge
    from forkpoint.bridge.tool_schemas import ToolSchemaRecorder

    settings = job.settings
    recorder = (ToolSchemaRecorder(job.context.output_dir / TOOL_SCHEMAS, hooks.protocol)
                if settings.record_tool_schemas else None)
    from forkpoint.bridge.protocols import refusal_for
    from forkpoint.bridge.token_capture import SIDECAR, TokenLog

    tokens = TokenLog(job.context.output_dir / SIDECAR) if settings.capture_tokens else None
    return Bridge(gate, make_upstream(hooks.protocol, settings), log_path=job.context.state_dir / "bridge-log.jsonl",
                  max_model_requests=settings.remaining_steps if hooks.budget_at_bridge else None, prepare=pinning,
                  observe_first=recorder, refusal=refusal_for(hooks.protocol), tokens=tokens)


@dataclass
class Pinning:
    """The bridge's post-validation body hook for ``--model`` and the sampling pins: every validated request gets
    them (in ``protocol``, the one leaving the bridge), its record the fields changed; the first request's changes
    and the model it was sent with go into the result metadata. The gate saw the agent's own body, so the
    first-request proof is unaffected by the model choice. (A translating upstream: pins are applied here, on the
    agent's body, only when the upstream speaks the agent's protocol; ``protocol`` is then the upstream's.)"""

    protocol: str
    pins: SamplingPins | None
    retries: int
    first_changes: list[JsonObject] | None = None
    sent_model: str | None = None
    #: the upstream translates (another protocol leaves the bridge): it applies the pins to the translated body
    translated: bool = False

    @classmethod
    def of(cls, protocol: str, settings: ContinueSettings, translated: bool = False) -> Pinning:
        from forkpoint.bridge.translate.sampling import SamplingPins

        pins = dataclasses.replace(settings.sampling or SamplingPins(), model=settings.model)
        return cls(protocol, None if pins == SamplingPins() else pins, settings.upstream_retries,
                   translated=translated)

    def __call__(self, body: JsonObject, facts: JsonObject) -> JsonObject:
        from forkpoint.bridge.translate.sampling import apply_pins

        if self.translated:
            if self.sent_model is None:
                model = self.pins.model if self.pins is not None else None
                self.sent_model = model or (body["model"] if isinstance(body.get("model"), str) else None)
            if self.pins is not None and self.first_changes is None:
                self.first_changes = [{"applied_by": "the translating upstream, on the Chat request (see the "
                                                     "bridge log's pins facts)"}]
            return body
        if self.pins is not None:
            body, changes = apply_pins(self.protocol, body, self.pins)
            facts["pins"] = [change.as_json() for change in changes]
            if self.first_changes is None:
                self.first_changes = facts["pins"]
        if self.sent_model is None and isinstance(body.get("model"), str):
            self.sent_model = body["model"]
        return body

    def metadata(self) -> JsonObject:
        """``requested_model``, ``upstream_model`` (what was sent: the bridge does not read the answer's model),
        ``sampling`` (the pins and the first request's changes; no prompt text) and ``upstream_retries``."""
        pins = None if self.pins is None else {key: value for key, value in dataclasses.asdict(self.pins).items()
                                               if value is not None and value is not False}
        return {"requested_model": None if self.pins is None else self.pins.model, "upstream_model": self.sent_model,
                "sampling": None if pins is None else {"pins": pins, "changes": self.first_changes or []},
                "upstream_retries": self.retries}


def session_upgrade(plan: Plan, continuing: str) -> dict[str, Any] | None:
    """What the rebuilt session changed so another version could continue it: nothing is derived today (the
    continuing version reads the recorded records as they are), and the gate proved its first request."""
    recorded = plan.version.recorded if plan.version else plan.trajectory.version
    if (recorded if recorded is not None else plan.trajectory.version) == continuing:  # a Pi session names none
        return None
    return {"recorded_version": recorded, "read_as": plan.trajectory.version, "continuing_version": continuing,
            "derivations": [], "proof": "the gate validated the continuing version's first request"}


def reached_budget(outcome: Outcome, summary: BridgeSummary) -> bool:
    """The agent stopped at its step budget: it said so, or the bridge answered a request past the budget."""
    return outcome.status == "max_steps" or summary.budget_reached


def upstream_failure(summary: BridgeSummary) -> ReplayError | None:
    """The upstream's failure of the agent's last model request, typed (a deterministic 4xx is not retryable, a
    timeout or an answer that is not the protocol's is): why an agent that then gave up failed."""
    if summary.upstream_failure is None:
        return None
    from forkpoint.bridge.server import failure_kind

    return ReplayError(failure_kind(summary.upstream_failure),
                       f"the model upstream failed the agent's last request: {summary.upstream_failure_message}")


def triage(summary: BridgeSummary, ran: Ran, outcome: Outcome, label: str, timeout_s: float) -> ReplayError | None:
    """Why the continuation failed, or None. Order: a gate refusal, no model request at all, the deadline, the
    agent's own failure, a non-zero exit that is not the step budget."""
    tail = ran.tail()
    said = outcome.detail or tail[-500:].strip() or "no output"
    bridge_error = summary.error()
    if bridge_error is not None:
        if summary.first_failure is not None:
            return bridge_error
        ended = f"exited with {ran.exit_code}" if ran.process is not None else "ended"
        return ReplayError(bridge_error.kind, f"{bridge_error.message} ({label} {ended}: {said}; see {ran.log})")
    if ran.process is not None and ran.process.timed_out:
        if summary.in_flight_at_stop:  # the agent was waiting on the model: the upstream's slowness, retryable
            return ReplayError(ErrorKind.MODEL_TIMEOUT, f"{label} did not finish within {timeout_s:g} s "
                                                        "(--continuation-timeout) while the model upstream was still "
                                                        f"answering; see {ran.log}")
        return ReplayError(ErrorKind.CONTINUATION, f"{label} did not finish within {timeout_s:g} s "
                                                   f"(--continuation-timeout); see {ran.log}")
    upstream_failed = upstream_failure(summary)
    if upstream_failed is not None and (outcome.status == "failed" or ran.exit_code not in (0, None)):
        return ReplayError(upstream_failed.kind, f"{upstream_failed.message} ({label} exited with {ran.exit_code}: "
                                                 f"{said}; see {ran.log})")
    if outcome.status == "failed":
        kind = outcome.kind or classify_continuation_output(outcome.detail + "\n" + tail)
        ended = f"exited with {ran.exit_code}" if ran.exit_code not in (0, None) else "reported an error"
        return ReplayError(kind, f"{label} {ended}: {said}; see {ran.log}")
    if ran.exit_code not in (0, None) and not reached_budget(outcome, summary):
        return ReplayError(classify_continuation_output(tail), f"{label} exited with {ran.exit_code}: {said}; "
                                                               f"see {ran.log}")
    return None


# -- the upstream ---------------------------------------------------------------------------------------------------


def make_upstream(protocol: str, settings: ContinueSettings) -> Upstream:
    """The upstream for an agent speaking ``protocol``, as ``settings.upstream`` chose (``stub``: the local stub of
    the agent's own protocol), retrying as ``settings.upstream_retries`` allows; the registry is
    ``forkpoint.bridge.protocols``."""
    from forkpoint.bridge.protocols import Patience
    from forkpoint.bridge.protocols import make_upstream as from_registry
    from forkpoint.bridge.translate.retry import RetryPolicy

    patience = Patience(RetryPolicy(retries=settings.upstream_retries), settings.upstream_idle_timeout_s,
                        settings.answer_timeout_s)
    return from_registry(protocol, settings.upstream, settings.upstream_url, settings.upstream_key,
                         Pinning.of(protocol, settings).pins, patience=patience)


# -- the continued agent's home -------------------------------------------------------------------------------------

#: at most this many files of one carried folder are kept (a bound on a folder forkpoint wrote itself)
MAX_CARRIED_FILES = 100_000


def rebuild_home(home: Path, carried: Sequence[Path] = ()) -> None:
    """Make the continued agent's home anew, right before the agent starts: whatever was there (an earlier
    continuation's agent, a replayed command under ``--sandbox local`` that found the folder) is removed, and only
    the regular files directly in the ``carried`` folders (forkpoint's own: Claude's saved large outputs) are
    copied over, no link followed. So the agent's configuration (Claude's settings and hooks, Codex's config.toml,
    OpenCode's config and plugins, Pi's extensions, ...) is only what the hooks write next."""
    from forkpoint.process.childenv import remove_tree

    old: Path | None = None
    if os.path.lexists(home):
        old = home.with_name(f"{home.name}.old-{secrets.token_hex(6)}")
        os.rename(home, old)  # a planted link in the home's place is moved, never followed
    try:
        home.parent.mkdir(parents=True, exist_ok=True)
        home.mkdir(mode=0o700)
        if old is not None and stat.S_ISDIR(os.lstat(old).st_mode):  # a link or file there holds nothing of ours
            for folder in carried:
                _carry(old, home, folder)
    finally:
        if old is not None:
            remove_tree(old)


def _carry(old: Path, home: Path, folder: Path) -> None:
    """Copy the regular files directly in ``old/folder`` to ``home/folder`` (links, FIFOs, devices and sub-folders
    are left behind)."""
    what = f"keep {folder} in the continued agent's home"
    try:
        with refused_as(ErrorKind.CONTINUATION, what):
            _copy_regular_files(old, home, folder)
    except OSError as exc:
        raise ReplayError(ErrorKind.CONTINUATION, f"{what}: {exc}") from None


def _copy_regular_files(old: Path, home: Path, folder: Path) -> None:
    info = lstat_strict(old, folder)
    if info is not None and stat.S_ISLNK(info.st_mode):
        raise PlantedLinkError(f"{folder} is a symbolic link; not followed")
    if info is None or not stat.S_ISDIR(info.st_mode):
        return
    with os.scandir(old / folder) as entries:  # names only (bounded); each is opened strictly below
        names = [entry.name for entry in itertools.islice(entries, MAX_CARRIED_FILES)]
    for name in names:
        source = folder / name
        entry = lstat_strict(old, source)
        if entry is None or not stat.S_ISREG(entry.st_mode):
            continue
        fd = open_regular_strict(old, source)
        try:
            copy_fd_strict(fd, home, source, max_bytes=os.fstat(fd).st_size, mode=0o644)
        finally:
            os.close(fd)


# -- helpers the hooks share ------------------------------------------------------------------------------------------


def loopback_no_proxy(env: dict[str, str]) -> None:
    """Keep the agent's requests to the bridge off any proxy (``NO_PROXY``/``no_proxy`` gain the loopback names)."""
    hosts = [part for part in env.get("NO_PROXY", env.get("no_proxy", "")).split(",") if part]
    hosts += [host for host in ("127.0.0.1", "localhost", "::1") if host not in hosts]
    env["NO_PROXY"] = env["no_proxy"] = ",".join(hosts)


def next_action_at(actions: Sequence[ActionSignature | None], after_step: int) -> ActionSignature | None:
    """The first live action after the boundary batch, if the continuation made one."""
    return actions[after_step] if after_step < len(actions) else None


def write_home_file(home: Path, path: Path, data: bytes, what: str | None = None) -> None:
    """Write into the agent's HOME, which replayed commands could write: no link planted there is followed."""
    with refused_as(ErrorKind.CONTINUATION, f"write {what + ' to ' if what else ''}{path}"):
        write_file_strict(home, path.relative_to(home), data)


def read_home_file(home: Path, path: Path, what: str) -> bytes:
    """Read what the agent wrote in its HOME, without following a planted link."""
    try:
        with refused_as(ErrorKind.CONTINUATION, f"read {what} {path}"):
            return read_file_strict(home, path.relative_to(home))
    except OSError as exc:
        raise ReplayError(ErrorKind.CONTINUATION, f"read {what} {path}: {exc}") from None


def reparse_error(what: str, error: ReplayError) -> ReplayError:
    return ReplayError(ErrorKind.CONTINUATION, f"the continued {what} does not parse: {error.message}")
