"""Parser fuzzing: random bytes, truncated real recordings, mutated lines, huge lines, cycles, mixed agents.

Only ``ReplayError`` may escape the parsers and the request loaders (with a line number where one exists),
never another exception and never a hang (a hard SIGALRM deadline per example).
"""

from __future__ import annotations

import json
import signal
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from forkpoint.adapters.claude_code.parse import parse_session
from forkpoint.adapters.codex.parse import parse_rollout
from forkpoint.adapters.detect import guess_agent
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.run.request import build_request, load_json_request, load_toml

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CLAUDE_FILES = sorted((FIXTURES / "claude_code").glob("*/*/session.jsonl"))
CODEX_FILES = sorted((FIXTURES / "codex").glob("*/*/rollout.jsonl"))
CLAUDE_BYTES = [p.read_bytes() for p in CLAUDE_FILES]
CODEX_BYTES = [p.read_bytes() for p in CODEX_FILES]
DEADLINE_S = 10.0


class Hang(BaseException):
    """Raised inside the code under test when it exceeds its deadline (BaseException: never swallowed)."""


@contextmanager
def hard_deadline(seconds: float = DEADLINE_S) -> Iterator[None]:
    def _fire(signum: int, frame: FrameType | None) -> None:
        raise Hang(f"no result within {seconds} s")

    previous = signal.signal(signal.SIGALRM, _fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


Parser = Callable[[Path], Any]
PARSERS: dict[str, Parser] = {"claude": parse_session, "codex": parse_rollout}


def _only_typed_errors(parser: Parser, data: bytes, *, suffix: str = ".jsonl") -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"input{suffix}"
        path.write_bytes(data)
        try:
            with hard_deadline():
                parser(path)
        except ReplayError as exc:
            assert isinstance(exc.kind, ErrorKind)
            assert exc.message
            if exc.line is not None:
                assert 1 <= exc.line <= data.count(b"\n") + 1, (exc.line, exc.message)


# --- JSON-ish values for mutations -------------------------------------------------------------------------
JSON_LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**63), max_value=2**63), st.floats(allow_nan=False),
    st.text(max_size=20), st.sampled_from(["", "user", "assistant", "tool_use", "tool_result", "session_meta",
                                          "response_item", "function_call", "function_call_output", "message"]),
)
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)


def _lines(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every key/index path inside a parsed JSON value (the mutation sites)."""
    if isinstance(value, dict):
        for key, child in value.items():
            yield (*prefix, key)
            yield from _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield (*prefix, index)
            yield from _paths(child, (*prefix, index))


@st.composite
def mutated_recording(draw: st.DrawFn, corpus: list[bytes]) -> bytes:
    """A real recording with 1-3 lines mutated: a field dropped, retyped, or an extra field added."""
    lines = _lines(draw(st.sampled_from(corpus)))
    for _ in range(draw(st.integers(1, 3))):
        index = draw(st.integers(0, len(lines) - 1))
        obj = orjson.loads(lines[index])
        sites = list(_paths(obj))
        action = draw(st.sampled_from(["drop", "retype", "extra"]))
        if action == "extra" or not sites:
            target = obj
            if sites:
                site = draw(st.sampled_from(sites))
                parent = obj
                for step in site[:-1]:
                    parent = parent[step]
                child = parent[site[-1]]
                target = child if isinstance(child, dict) else obj
            if isinstance(target, dict):
                target[draw(st.text(max_size=8))] = draw(JSON_VALUES)
        else:
            site = draw(st.sampled_from(sites))
            parent = obj
            for step in site[:-1]:
                parent = parent[step]
            if action == "drop":
                del parent[site[-1]]
            else:
                parent[site[-1]] = draw(JSON_VALUES)
        lines[index] = orjson.dumps(obj) + b"\n"
    return b"".join(lines)


# --- Claude Code / Codex parsers -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(PARSERS))
@given(data=st.binary(max_size=2048))
def test_random_bytes(name: str, data: bytes) -> None:
    _only_typed_errors(PARSERS[name], data)


@pytest.mark.parametrize("name", sorted(PARSERS))
@given(lines=st.lists(st.binary(max_size=200).map(lambda b: b.replace(b"\n", b"")), min_size=1, max_size=8))
def test_random_lines(name: str, lines: list[bytes]) -> None:
    _only_typed_errors(PARSERS[name], b"\n".join(lines) + b"\n")


@pytest.mark.parametrize("name", sorted(PARSERS))
@given(data=st.data())
def test_truncated_real_recordings(name: str, data: st.DataObject) -> None:
    corpus = CLAUDE_BYTES if name == "claude" else CODEX_BYTES
    whole = data.draw(st.sampled_from(corpus))
    cut = data.draw(st.integers(0, len(whole)))
    _only_typed_errors(PARSERS[name], whole[:cut])


@pytest.mark.parametrize("name", sorted(PARSERS))
@given(data=st.data())
def test_mutated_real_lines(name: str, data: st.DataObject) -> None:
    corpus = CLAUDE_BYTES if name == "claude" else CODEX_BYTES
    _only_typed_errors(PARSERS[name], data.draw(mutated_recording(corpus)))


@pytest.mark.parametrize("name", sorted(PARSERS))
@given(data=st.data())
def test_mixed_agents(name: str, data: st.DataObject) -> None:
    """A Claude session given to the Codex parser and vice versa, whole, cut or spliced together."""
    other = CODEX_BYTES if name == "claude" else CLAUDE_BYTES
    own = CLAUDE_BYTES if name == "claude" else CODEX_BYTES
    foreign = _lines(data.draw(st.sampled_from(other)))
    mine = _lines(data.draw(st.sampled_from(own)))
    mix = data.draw(st.permutations(foreign + mine[: data.draw(st.integers(0, len(mine)))]))
    _only_typed_errors(PARSERS[name], b"".join(mix[: data.draw(st.integers(1, len(mix)))]))


def test_whole_foreign_recording_is_refused_with_a_guess() -> None:
    for path in CODEX_FILES[:2]:
        with pytest.raises(ReplayError) as caught:
            parse_session(path)
        assert caught.value.kind is ErrorKind.TRAJECTORY
    for path in CLAUDE_FILES[:2]:
        with pytest.raises(ReplayError) as caught:
            parse_rollout(path)
        assert caught.value.kind is ErrorKind.TRAJECTORY


@pytest.mark.parametrize("name", sorted(PARSERS))
@pytest.mark.parametrize("shape", ["string", "nested", "keys", "no_newline"])
def test_huge_lines(name: str, shape: str) -> None:
    big = 8 * 1024 * 1024
    if shape == "string":
        line = b'{"type":"user","uuid":"u","payload":{},"timestamp":"t","x":"' + b"a" * big + b'"}\n'
    elif shape == "nested":
        line = b"[" * 200_000 + b"]" * 200_000 + b"\n"
    elif shape == "keys":
        line = b"{" + b",".join(b'"k%d":%d' % (i, i) for i in range(300_000)) + b"}\n"
    else:
        line = b"{" * 1_000_000
    corpus = CLAUDE_BYTES if name == "claude" else CODEX_BYTES
    _only_typed_errors(PARSERS[name], corpus[0] + line)
    _only_typed_errors(PARSERS[name], line)


def _claude_chain(parents: list[int | None], leaf: int) -> bytes:
    out = []
    for index, parent in enumerate(parents):
        record = {
            "type": "user" if index % 2 == 0 else "assistant",
            "uuid": f"u{index}",
            "parentUuid": None if parent is None else f"u{parent}",
            "sessionId": "s",
            "message": {"role": "user", "content": "hi"} if index % 2 == 0
            else {"role": "assistant", "id": f"m{index}", "content": [
                {"type": "tool_use", "id": f"t{index}", "name": "Bash", "input": {"command": "true"}}]},
        }
        out.append(orjson.dumps(record))
    out.append(orjson.dumps({"type": "last-prompt", "leafUuid": f"u{leaf}"}))
    return b"\n".join(out) + b"\n"


@given(data=st.data())
def test_claude_parent_chains_with_cycles(data: st.DataObject) -> None:
    count = data.draw(st.integers(1, 30))
    parents = [data.draw(st.none() | st.integers(0, count - 1)) for _ in range(count)]
    _only_typed_errors(parse_session, _claude_chain(parents, data.draw(st.integers(0, count - 1))))


def test_claude_long_cycle_is_refused() -> None:
    count = 50_000
    parents: list[int | None] = [(i - 1) % count for i in range(count)]  # one big ring
    with pytest.raises(ReplayError, match="cycle"), tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ring.jsonl"
        path.write_bytes(_claude_chain(parents, count - 1))
        with hard_deadline(30):
            parse_session(path)


# --- agent detection ---------------------------------------------------------------------------------------------
@given(data=st.binary(max_size=1024) | st.sampled_from(CLAUDE_BYTES + CODEX_BYTES))
def test_guess_agent_never_raises_untyped(data: bytes) -> None:
    _only_typed_errors(guess_agent, data)


# --- request / config loading ------------------------------------------------------------------------------------
REQUEST_KEYS = ["agent", "trajectory", "after_step", "workspace", "state_dir", "output_dir", "run_id", "max_steps",
                "prepare_only", "replay_only", "allow_stale_observations", "boundary_user_prompt", "upstream",
                "upstream_url", "agent_entrypoint", "sandbox", "path_map", "workspace_from", "max_trajectory_bytes",
                "mode"]
VALID = {"agent": "claude-code", "trajectory": "s.jsonl", "after_step": 1}


@st.composite
def request_values(draw: st.DrawFn) -> dict[str, Any]:
    values: dict[str, Any] = dict(VALID) if draw(st.booleans()) else {}
    for key in draw(st.lists(st.sampled_from([*REQUEST_KEYS, "bogus"]), max_size=6)):
        values[key] = draw(JSON_VALUES | st.sampled_from(["/abs/x", "a=b", "/a=/b", "/a=", "=/b", "x\x00y", "local",
                                                          "bwrap", "stub", "codex", "http://x", 0, -1, True]))
    if draw(st.booleans()) and values:
        del values[draw(st.sampled_from(sorted(values)))]
    return values


@given(values=request_values())
def test_build_request(values: dict[str, Any]) -> None:
    try:
        with hard_deadline():
            build_request(values, source="fuzz")
    except ReplayError as exc:
        assert exc.kind is ErrorKind.CONFIGURATION


@given(data=st.one_of(
    st.binary(max_size=1024),
    request_values().map(lambda v: json.dumps({"schema_version": "forkpoint.request/v1", **v}, default=str).encode()),
    st.sampled_from([b"[" * 100_000, b'{"a":' * 100_000, b"\xff\xfe", b"null", b"1e999999", b'"\\ud800"']),
))
def test_load_json_request(data: bytes) -> None:
    _only_typed_errors(load_json_request, data, suffix=".json")


def _toml_value(value: Any) -> str:
    return json.dumps(value, default=str) if not isinstance(value, bool) else str(value).lower()


@given(data=st.one_of(
    st.binary(max_size=1024),
    request_values().map(lambda v: ("[replay]\n" + "".join(
        f"{k} = {_toml_value(x)}\n" for k, x in v.items() if not isinstance(x, dict | list | type(None)))).encode()),
    st.sampled_from([b"a = " + b"[" * 100_000, b"a = " + b"{b = " * 50_000, b"[replay]\n" + b"[" * 100_000,
                     b"[replay]\nafter_step = 1979-05-27T07:32:00Z\n", b"[[replay]]\n", b"replay = 1\n"]),
))
def test_load_toml(data: bytes) -> None:
    _only_typed_errors(load_toml, data, suffix=".toml")
