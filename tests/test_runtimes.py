"""Runtime cache: manifests, verified-version refusal, version parsing, and (e2e) a real install + probe."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from forkpoint import runtimes
from forkpoint.errors import ErrorKind, ReplayError


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FORKPOINT_RUNTIMES", str(tmp_path / "rt"))
    return tmp_path / "rt"


def fake_runtime(cache: Path, agent: str = "claude-code", version: str = "2.1.220") -> runtimes.Runtime:
    root = cache / agent / version
    entry = root / "node_modules" / ".bin" / "claude"
    entry.parent.mkdir(parents=True)
    entry.write_text("#!/bin/sh\necho '9.8.7 (Claude Code)'\n")
    entry.chmod(entry.stat().st_mode | stat.S_IXUSR)
    runtime = runtimes.Runtime(agent, version, root, entry, "2026-01-01T00:00:00Z")
    (root / runtimes.MANIFEST_NAME).write_text(json.dumps(runtime.manifest()))
    return runtime


def test_cache_root_env(cache: Path) -> None:
    assert runtimes.cache_root() == cache


def test_manifest_round_trip(cache: Path) -> None:
    runtime = fake_runtime(cache)
    manifest = runtime.manifest()
    assert manifest == {"schema_version": "forkpoint.runtime/v1", "agent": "claude-code", "version": "2.1.220",
                        "entrypoint": "node_modules/.bin/claude", "installed_at": "2026-01-01T00:00:00Z"}
    assert runtimes.Runtime.from_manifest(runtime.root, manifest) == runtime
    assert runtimes.find("claude-code", "2.1.220") == runtime
    assert runtimes.find("claude-code", "2.1.332") is None
    assert runtimes.list_installed() == [runtime]
    assert runtimes.install("claude-code", "2.1.220") == runtime  # idempotent: no npm call
    assert runtimes.probe_version(runtime) == "9.8.7"


@pytest.mark.parametrize("bad", [
    {}, {"schema_version": "other/v1"},
    {"schema_version": "forkpoint.runtime/v1", "agent": "claude-code", "version": "1", "installed_at": "x"},
    {"schema_version": "forkpoint.runtime/v1", "agent": "a", "version": "1", "installed_at": "x",
     "entrypoint": "../escape"},
])
def test_invalid_manifest_rejected(bad: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        runtimes.Runtime.from_manifest(Path("/x"), bad)


def test_broken_install_not_listed(cache: Path) -> None:
    runtime = fake_runtime(cache)
    runtime.entrypoint.unlink()
    assert runtimes.find("claude-code", "2.1.220") is None
    assert runtimes.list_installed() == []


def test_unverified_version_refused(cache: Path) -> None:
    with pytest.raises(ReplayError) as caught:
        runtimes.install("claude-code", "2.1.110")
    assert caught.value.kind is ErrorKind.UNSUPPORTED_VERSION
    assert "2.1.220" in caught.value.message and "2.1.332" in caught.value.message
    assert not cache.exists()


def test_unknown_agent_refused(cache: Path) -> None:
    with pytest.raises(ReplayError) as caught:
        runtimes.install("no-such-agent", "1.0.0")
    assert caught.value.kind is ErrorKind.UNSUPPORTED_AGENT


@pytest.mark.parametrize(("output", "expected"), [
    ("2.1.220 (Claude Code)\n", "2.1.220"),
    ("2.1.332 (Claude Code)", "2.1.332"),
    ("warning: something\n0.149.0\n", "0.149.0"),
    ("v1.2.3-beta.1\n", "1.2.3-beta.1"),
])
def test_parse_version_output(output: str, expected: str) -> None:
    assert runtimes.parse_version_output(output) == expected


def test_parse_version_output_rejects_garbage() -> None:
    with pytest.raises(ValueError):
        runtimes.parse_version_output("Claude Code\n")


def test_probe_failure_is_typed(cache: Path) -> None:
    runtime = fake_runtime(cache)
    runtime.entrypoint.write_text("#!/bin/sh\nexit 3\n")
    with pytest.raises(ReplayError) as caught:
        runtimes.probe_version(runtime)
    assert caught.value.kind is ErrorKind.CONFIGURATION


@pytest.mark.e2e
def test_install_and_probe_real_claude_code() -> None:
    runtime = runtimes.install("claude-code", "2.1.220")  # returns at once when already installed
    assert runtime.entrypoint.is_file()
    expected = "node_modules/@anthropic-ai/claude-code/bin/claude.exe"
    assert runtime.entrypoint.relative_to(runtime.root).as_posix() == expected
    assert runtimes.probe_version(runtime) == "2.1.220"
    assert runtimes.find("claude-code", "2.1.220") == runtime
