"""AgentSpec: every fact about one agent that code outside its folder needs, declared once in ``<agent>/spec.py``.

Detection (its order), export (the converter), ``agents list/install``, request validation, CLI help, the engine's
upstream and sandbox checks and the adapter's own ``verified_versions`` are all derived from the specs (see
forkpoint.adapters for the registry).
A spec module imports only this module, so reading a spec costs no parser, runtime or bridge import.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

#: the wire protocol an agent's own model client speaks (the bridge validates that traffic)
WireProtocol = Literal["anthropic-messages", "openai-responses", "openai-chat"]


@dataclass(frozen=True)
class Upstream:
    """Where validated model requests go; the key and base URL are read from forkpoint's OWN environment."""

    name: str
    key_env: str | None = None
    url_env: str | None = None


ANTHROPIC = Upstream("anthropic", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")
OPENAI_RESPONSES = Upstream("openai-responses", "OPENAI_API_KEY", "OPENAI_BASE_URL")
OPENAI_CHAT = Upstream("openai-chat", "OPENAI_API_KEY", "OPENAI_BASE_URL")
#: the bridge answers itself: a zero-cost check that the real agent accepted the rebuilt session
STUB = Upstream("stub")
#: every upstream forkpoint knows, in the order messages list them
UPSTREAMS: Mapping[str, Upstream] = {u.name: u for u in (ANTHROPIC, OPENAI_RESPONSES, OPENAI_CHAT, STUB)}
#: the real upstream that speaks each protocol
PROTOCOL_UPSTREAM: Mapping[WireProtocol, Upstream] = {
    "anthropic-messages": ANTHROPIC, "openai-responses": OPENAI_RESPONSES, "openai-chat": OPENAI_CHAT}


@dataclass(frozen=True)
class NpmPackage:
    """How one agent ships on npm: its package, the bin to run, and the per-platform native package (if any).

    ``run_native``: the package's bin is only a JS launcher for the native binary (Codex's ``bin/codex.js``), so
    the entrypoint is the native binary itself: no node needed, and signals reach the agent directly. The native
    package is whichever of the package's ``optionalDependencies`` npm installed (the one for this platform), and
    ``native_binary`` is a glob inside it that must match exactly one file.
    """

    package: str
    bin_name: str
    native_package_prefix: str | None = None  # e.g. "@anthropic-ai/claude-code-" + "linux-x64"
    native_binary: str | None = None  # file (glob when run_native) inside the native package
    run_native: bool = False
    #: more npm packages installed into the same prefix (e.g. a Node runtime the agent needs)
    extra_packages: tuple[str, ...] = ()
    #: the agent's bin runs on this node binary (relative to the prefix) through a generated wrapper script
    node_binary: str | None = None

    kind: Literal["npm"] = "npm"


@dataclass(frozen=True)
class PythonPackage:
    """How one agent ships on PyPI: its distribution and the Python each verified version needs."""

    package: str
    python: str  # default "X.Y"
    python_for: Mapping[str, str] | None = None  # version -> "X.Y" where it differs
    extra_packages: tuple[str, ...] = ()

    kind: Literal["python"] = "python"

    def python_version(self, version: str) -> str:
        return (self.python_for or {}).get(version, self.python)


AgentPackage = NpmPackage | PythonPackage


@dataclass(frozen=True)
class AgentSpec:
    """One agent, declared in its folder's ``spec.py`` as ``SPEC``."""

    #: the agent's name on the command line and in every output document
    name: str
    #: its name in prose (messages)
    title: str
    #: ``"module:Class"`` of the adapter (imported only when the agent is used)
    adapter: str
    #: verified agent version -> profile id (how that version's session is rebuilt and resumed)
    versions: Mapping[str, str]
    #: how forkpoint installs the verified versions (``agents install``); None: not installable by forkpoint
    runtime: AgentPackage | None
    #: format string of the native prefix file forkpoint writes (``<name>/...``)
    native_format: str
    #: the wire protocol of the agent's own model client
    protocol: WireProtocol
    #: True when a JSON value (one line of a JSONL file, or a whole document) looks like this agent's trajectory
    sniff: Callable[[object], bool]
    #: where its sniff stands when a trajectory's agent is detected (lower first; unique): a format whose keys another
    #: format shares is asked before it (forkpoint.adapters.detect)
    detection_priority: int
    #: ``"module:function"`` turning its native session bytes into a chat Conversation (``forkpoint export`` and
    #: ``report``), imported only when a run of this agent is exported
    exporter: str
    #: where its validated model requests may go besides its protocol's real upstream and the stub (``upstreams``)
    more_upstreams: tuple[Upstream, ...] = ()
    #: sandboxes its tools and continuation run through, plus "path_map" when it rewrites recorded paths
    sandbox_features: frozenset[str] = frozenset({"local"})
    #: where a recording names the agent version (what the unverified-version refusal says when it is missing)
    version_field: str = "version"
    #: it re-runs the prefix's tools (``--replay-only``) and starts the real agent (the default mode)
    replays: bool = True
    continues: bool = True
    #: recorded version -> the other verified versions proven (e2e) to continue its recordings (``--agent-version``)
    cross_versions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def upstreams(self) -> tuple[Upstream, ...]:
        """Its protocol's real upstream (the default), the stub, then ``more_upstreams``."""
        return (*upstreams_for(self.protocol), *self.more_upstreams)

    @property
    def default_upstream(self) -> Upstream:
        return self.upstreams[0]

    def upstream(self, name: str | None) -> Upstream | None:
        """The named upstream (None: the default) when this agent can use it."""
        wanted = name or self.default_upstream.name
        return next((u for u in self.upstreams if u.name == wanted), None)

    def cross_version_pairs(self) -> tuple[str, ...]:
        """The verified cross-version pairs as ``A -> B`` (what a refusal lists)."""
        return tuple(f"{old} -> {new}" for old, news in self.cross_versions.items() for new in news)


def upstreams_for(protocol: WireProtocol) -> tuple[Upstream, ...]:
    """The usual choice: the real upstream of the agent's protocol (the default), or the stub."""
    return (PROTOCOL_UPSTREAM[protocol], STUB)
