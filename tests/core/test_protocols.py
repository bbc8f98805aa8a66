"""The wire-protocol registry: one set of names, and a protocol is added with one module and one registry line
(nothing else in forkpoint names it). Each registered spec's own consistency: tests/bridge/protocols/test_spec.py."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from forkpoint.adapters import all_specs
from forkpoint.bridge.protocols import make_upstream, translations
from forkpoint.bridge.translate.sampling import SamplingPins, apply_pins
from forkpoint.bridge.upstream import LocalStub
from forkpoint.core import protocols
from forkpoint.core.errors import ReplayError
from forkpoint.core.protocols import PROTOCOLS, STUB, UPSTREAMS, WireProtocol, by_upstream, load, outgoing_protocol

SRC = Path(__file__).resolve().parents[2] / "src" / "forkpoint"
#: the modules that once switched on protocol names: now they only look protocols up
NO_NAMES = ("run/request.py", "adapters/kit/continuation.py", "bridge/translate/pipeline.py",
            "bridge/translate/sampling.py", "bridge/tool_schemas.py", "bridge/protocols/translating.py",
            "bridge/protocols/__init__.py")
KEY = "sk-registry-consistency-0001"


def test_names_are_unique_and_every_agent_speaks_a_registered_protocol() -> None:
    assert all(isinstance(p, WireProtocol) and p.name == name for name, p in PROTOCOLS.items())
    upstream_names = [p.upstream for p in PROTOCOLS.values()]
    assert len(set(upstream_names)) == len(upstream_names) and STUB not in upstream_names
    assert not set(upstream_names) & (set(PROTOCOLS) - {p.name for p in PROTOCOLS.values() if not p.upstream_alias})
    assert list(UPSTREAMS) == [*upstream_names, STUB]
    assert all(by_upstream(p.upstream) is p for p in PROTOCOLS.values()) and by_upstream(STUB) is None
    prefixes = [chat.id_prefix for name in PROTOCOLS if (chat := load(name).chat) is not None]
    assert len(set(prefixes)) == len(prefixes)
    for agent in all_specs():
        assert agent.protocol in PROTOCOLS, agent.name
        assert all(name in PROTOCOLS for name in agent.more_upstreams), agent.name
    # the --upstream values and the translation record kept their strings
    assert (PROTOCOLS["anthropic-messages"].upstream, translations()[0]) == ("anthropic",
                                                                           ("anthropic-messages", "openai-chat"))


def test_outgoing_protocol_is_the_upstreams_unless_the_stub() -> None:
    assert outgoing_protocol("anthropic-messages", "stub") == "anthropic-messages"
    assert outgoing_protocol("anthropic-messages", None) == "anthropic-messages"
    assert outgoing_protocol("anthropic-messages", "openai-chat") == "openai-chat"
    assert outgoing_protocol("openai-chat", "anthropic") == "anthropic-messages"


def _name_literals(path: Path) -> list[tuple[int, str]]:
    names = set(PROTOCOLS) | {p.upstream for p in PROTOCOLS.values()}
    return [(node.lineno, node.value) for node in ast.walk(ast.parse(path.read_text("utf-8")))
            if isinstance(node, ast.Constant) and node.value in names]


@pytest.mark.parametrize("module", NO_NAMES)
def test_no_protocol_name_outside_the_registry(module: str) -> None:
    """A protocol is known by the registry and its own module only: these modules look it up, never name it."""
    assert _name_literals(SRC / module) == [], module


def test_a_new_protocol_is_one_module_and_one_registry_line(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """What docs/architecture.md's "Adding a protocol" says: a module exporting SPEC plus one PROTOCOLS line, and
    the upstream choice, the stub, the pins and the tool schemas work for it (here a Chat dialect)."""
    (tmp_path / "example_dialect.py").write_text(
        "import dataclasses\n"
        "from forkpoint.bridge.protocols.openai_chat import SPEC as CHAT\n"
        "SPEC = dataclasses.replace(CHAT, name='example-dialect', translating=None)\n", "utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(PROTOCOLS, "example-dialect", WireProtocol(
        "example-dialect", "example_dialect:SPEC", "example", "EXAMPLE_API_KEY", None, "http://127.0.0.1:9/v1"))
    monkeypatch.setitem(UPSTREAMS, "example", protocols.UpstreamChoice("example", "EXAMPLE_API_KEY", None,
                                                                       "example-dialect"))
    try:
        assert isinstance(make_upstream("example-dialect", STUB, None, None), LocalStub)
        real = make_upstream("example-dialect", "example", None, KEY)
        assert real.url == "http://127.0.0.1:9/v1/chat/completions"  # type: ignore[attr-defined]
        assert outgoing_protocol("openai-chat", "example") == "example-dialect"
        assert apply_pins("example-dialect", {"model": "m"}, SamplingPins(seed=3))[0]["seed"] == 3
        with pytest.raises(ReplayError, match="translates only"):
            make_upstream("anthropic-messages", "example", None, KEY)
    finally:
        protocols._loaded.pop("example-dialect", None)
        sys.modules.pop("example_dialect", None)
