"""AgentSpec: every fact about one agent that code outside its folder needs, declared once in ``<agent>/spec.py``.

Detection (its order), export (the converter), ``agents list/install``, request validation, CLI help, the engine's
upstream and sandbox checks and the adapter's own ``verified_versions`` are all derived from the specs (see
forkpoint.adapters for the registry).
A spec module imports only this module (and the light protocol registry, ``forkpoint.core.protocols``), so reading
a spec costs no parser, runtime or bridge import.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from forkpoint.core.protocols import PROTOCOLS, STUB_CHOICE, UPSTREAMS, UpstreamChoice

#: an agent's wire protocol: a key of ``forkpoint.core.protocols.PROTOCOLS`` (a test checks every spec's)
WireProtocol = str


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
    #: globs tried, in order, when ``native_binary`` matches nothing: older releases' layouts (Codex 0.4x-0.99:
    #: ``vendor/<triple>/codex/codex``, in the native package from 0.99, in the main package before)
    older_native_binaries: tuple[str, ...] = ()
    run_native: bool = False
    #: more npm packages installed into the same prefix (e.g. a Node runtime the agent needs)
    extra_packages: tuple[str, ...] = ()
    #: the agent's bin runs on this node binary (relative to the prefix) through a generated wrapper script
    node_binary: str | None = None
    #: set for the ``--version`` probe (Copilot CLI's loader otherwise runs the newest package unpacked in the
    #: user's ``~/.cache/copilot/pkg``: a 1.0.92 install reported 1.0.102)
    probe_env: tuple[tuple[str, str], ...] = ()
    #: same-scope packages a release may import without declaring them, installed at the release's own version
    #: with its lockstep siblings when published (``runtimes.npm.lockstep_siblings``)
    undeclared_siblings: tuple[str, ...] = ()

    kind: Literal["npm"] = "npm"


@dataclass(frozen=True)
class PythonPackage:
    """How one agent ships on PyPI: its distribution and the Python each verified version needs."""

    package: str
    python: str  # default "X.Y"
    python_for: Mapping[str, str] | None = None  # version -> "X.Y" where it differs
    #: further requirements installed beside it; ``{version}`` is the release being installed (a companion
    #: distribution released in lockstep, e.g. openhands-tools with openhands-sdk)
    extra_packages: tuple[str, ...] = ()

    kind: Literal["python"] = "python"

    def python_version(self, version: str) -> str:
        return (self.python_for or {}).get(version, self.python)

    def extras(self, version: str) -> list[str]:
        """The extra requirements for ``version`` (a validated release number) of the package."""
        return [extra.replace("{version}", version) for extra in self.extra_packages]


AgentPackage = NpmPackage | PythonPackage


@dataclass(frozen=True)
class FormatFamily:
    """One native format of an agent, recognised by structure (the parser reads it), and the range of released
    versions it is known to cover. A recording of any version in a family forkpoint reads is prepared and replayed;
    its tools are re-run with the semantics of the family's nearest verified version."""

    name: str
    #: the oldest and newest released versions known to write this format (None: no known bound)
    oldest: str | None
    newest: str | None

    def covers(self) -> str:
        """The known range as text (``1.1.0 - 1.17.x``)."""
        return f"{self.oldest or '?'} - {self.newest or 'current'}"


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
    #: the protocols whose real upstreams its validated model requests may also go to (a translating upstream)
    more_upstreams: tuple[WireProtocol, ...] = ()
    #: sandboxes its tools and continuation run through, plus "path_map" when it rewrites recorded paths
    sandbox_features: frozenset[str] = frozenset({"local"})
    #: where a recording names the agent version (what the unverified-version refusal says when it is missing)
    version_field: str = "version"
    #: it re-runs the prefix's tools (``--replay-only``) and starts the real agent (the default mode)
    replays: bool = True
    continues: bool = True
    #: recorded version -> the other verified versions proven (e2e) to continue its recordings (``--agent-version``)
    cross_versions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: ``"A -> B"`` -> the measured envelope difference that keeps that pair unproven (said in its refusal)
    refused_pairs: Mapping[str, str] = field(default_factory=dict)
    #: the native formats it reads, by structure (the first is the default family); every verified version
    #: belongs to the family whose range covers it (``forkpoint.adapters.versions``)
    formats: tuple[FormatFamily, ...] = ()
    #: host programs its own tools run that forkpoint installs with it (``agents install``; forkpoint.runtimes.
    #: install_tool): ``"fd"``. An install that fails is a warning: the tools that need it are then refused
    host_tools: tuple[str, ...] = ()

    @property
    def upstreams(self) -> tuple[UpstreamChoice, ...]:
        """Its protocol's real upstream (the default), the stub, then ``more_upstreams``."""
        return (*upstreams_for(self.protocol),
                *(UPSTREAMS[PROTOCOLS[name].upstream] for name in self.more_upstreams))

    @property
    def default_upstream(self) -> UpstreamChoice:
        return self.upstreams[0]

    def upstream(self, name: str | None) -> UpstreamChoice | None:
        """The named upstream (None: the default) when this agent can use it."""
        wanted = name or self.default_upstream.name
        return next((u for u in self.upstreams if u.name == wanted), None)

    def cross_version_pairs(self) -> tuple[str, ...]:
        """The verified cross-version pairs as ``A -> B`` (what a refusal lists)."""
        return tuple(f"{old} -> {new}" for old, news in self.cross_versions.items() for new in news)


def upstreams_for(protocol: WireProtocol) -> tuple[UpstreamChoice, ...]:
    """The usual choice: the real upstream of the agent's protocol (the default), or the stub."""
    return (UPSTREAMS[PROTOCOLS[protocol].upstream], STUB_CHOICE)
