"""Runtime cache: manifests, verified-version refusal, version parsing, and (e2e) a real install + probe."""

from __future__ import annotations

import json
import stat
import tempfile
from pathlib import Path
from typing import Any

import pytest

from forkpoint import runtimes
from forkpoint.adapters.spec import NpmPackage
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.runtimes import npm
from forkpoint.runtimes.base import package_of, record_probe, stage_into


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
    ("codex-cli 0.149.0\n", "0.149.0"),
    ("WARNING: proceeding, even though we could not create PATH aliases\ncodex-cli 0.171.0\n", "0.171.0"),
    ("GitHub Copilot CLI 1.0.102.\nRun 'copilot update' to check for updates.\n", "1.0.102"),
])
def test_parse_version_output(output: str, expected: str) -> None:
    assert npm.parse_version_output(output) == expected


def test_parse_version_output_rejects_garbage() -> None:
    with pytest.raises(ValueError):
        npm.parse_version_output("Claude Code\n")


def test_codex_is_verified() -> None:
    for version in ("0.149.0", "0.171.0"):
        runtimes.check_verified("codex", version)
    with pytest.raises(ReplayError) as caught:
        runtimes.check_verified("codex", "0.169.0")
    assert caught.value.kind is ErrorKind.UNSUPPORTED_VERSION


def fake_codex_prefix(prefix: Path, *, native: bytes = b"\x7fELF fake", platforms: tuple[str, ...] = ("linux-x64",),
                      binaries: int = 1) -> Path:
    """The npm layout of @openai/codex: a JS launcher plus the installed per-platform alias package."""
    package = prefix / "node_modules" / "@openai" / "codex"
    (package / "bin").mkdir(parents=True)
    (package / "bin" / "codex.js").write_text("#!/usr/bin/env node\n")
    optional = {f"@openai/codex-{p}": f"npm:@openai/codex@0.149.0-{p}"
                for p in ("linux-x64", "linux-arm64", "darwin-arm64")}
    (package / "package.json").write_text(json.dumps({"name": "@openai/codex", "version": "0.149.0",
                                                      "bin": {"codex": "bin/codex.js"},
                                                      "optionalDependencies": optional}))
    for name in platforms:
        native_dir = prefix / "node_modules" / "@openai" / f"codex-{name}"
        native_dir.mkdir(parents=True)
        (native_dir / "package.json").write_text("{}")
        for index in range(binaries):
            binary = native_dir / "vendor" / f"triple-{index}" / "bin" / "codex"
            binary.parent.mkdir(parents=True)
            binary.write_bytes(native)
    return prefix


def test_codex_entrypoint_is_the_native_binary(tmp_path: Path) -> None:
    prefix = fake_codex_prefix(tmp_path)
    entry = npm.entrypoint(prefix, _codex())
    assert entry.relative_to(prefix).as_posix() == "node_modules/@openai/codex-linux-x64/vendor/triple-0/bin/codex"
    assert entry.stat().st_mode & stat.S_IXUSR


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"platforms": ()}, "expected one installed native package"),
    ({"platforms": ("linux-x64", "linux-arm64")}, "expected one installed native package"),
    ({"binaries": 0}, "expected one native binary"),
    ({"binaries": 2}, "expected one native binary"),
    ({"native": b"#!/bin/sh\n"}, "not a native executable"),
])
def test_codex_entrypoint_layout_errors(tmp_path: Path, kwargs: dict[str, Any], message: str) -> None:
    prefix = fake_codex_prefix(tmp_path, **kwargs)
    with pytest.raises(ReplayError) as caught:
        npm.entrypoint(prefix, _codex())
    assert caught.value.kind is ErrorKind.INTERNAL and message in caught.value.message


def test_probe_runs_sanitized_in_a_private_tmpdir(cache: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe sees the allowlisted environment only, and what it leaves in its TMPDIR is removed with it."""
    host_tmp = tmp_path / "host-tmp"
    host_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(host_tmp))
    monkeypatch.setenv("FP_PROBE_SECRET", "hunter2")
    seen = tmp_path / "seen"
    runtime = fake_runtime(cache)
    runtime.entrypoint.write_text(f"#!/bin/sh\nmkdir \"$TMPDIR/opencode\"\n"
                                  f"echo \"$TMPDIR|$FP_PROBE_SECRET\" > {seen}\necho 9.8.7\n")
    assert runtimes.probe_version(runtime) == "9.8.7"
    temp_dir, secret = seen.read_text().strip().split("|")
    assert Path(temp_dir).parent == host_tmp and secret == ""
    assert list(host_tmp.iterdir()) == []


def test_a_release_printing_its_version_on_stderr_is_probed_there_only_when_stdout_is_silent(cache: Path) -> None:
    """Pi 0.75.5's ``--version`` writes ``0.75.5`` to stderr and nothing to stdout (it was "not installed")."""
    runtime = fake_runtime(cache)
    runtime.entrypoint.write_text("#!/bin/sh\necho 0.75.5 >&2\n")
    assert runtimes.probe_version(runtime) == "0.75.5"
    runtime.entrypoint.write_text("#!/bin/sh\necho 'warning 1.2.3' >&2\necho 9.8.7\n")
    assert runtimes.probe_version(runtime) == "9.8.7"


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


@pytest.mark.e2e
@pytest.mark.parametrize("version", ["0.149.0", "0.171.0"])
def test_install_and_probe_real_codex(version: str) -> None:
    runtime = runtimes.install("codex", version)  # returns at once when already installed
    rel = runtime.entrypoint.relative_to(runtime.root).as_posix()
    assert rel.startswith("node_modules/@openai/codex-") and rel.endswith("/bin/codex") and "/vendor/" in rel
    with runtime.entrypoint.open("rb") as handle:
        assert handle.read(4) == b"\x7fELF"
    assert runtimes.probe_version(runtime) == version


def _codex() -> NpmPackage:
    package = package_of("codex")
    assert isinstance(package, NpmPackage)
    return package


def test_a_probe_is_answered_from_the_manifest_until_the_binary_changes(cache: Path, tmp_path: Path) -> None:
    """No process at all while the entrypoint and the package's package.json are the probed files; a changed
    binary or package is probed again."""
    runs = tmp_path / "runs"
    runtime = fake_runtime(cache)
    package_json = runtime.root / "node_modules" / "@anthropic-ai" / "claude-code" / "package.json"
    package_json.parent.mkdir(parents=True)
    package_json.write_text('{"version": "2.1.220"}')
    runtime.entrypoint.write_text(f"#!/bin/sh\necho probed >> {runs}\necho '2.1.220 (Claude Code)'\n")
    assert [runtimes.probe_version(runtime) for _ in range(3)] == ["2.1.220"] * 3
    assert runs.read_text().splitlines() == ["probed"]  # once; then from the manifest
    assert runtimes.find("claude-code", "2.1.220") is not None  # the manifest stays valid
    assert runtimes.resolve_entrypoint("claude-code", "2.1.220", None).version == "2.1.220"
    assert runs.read_text().splitlines() == ["probed"]
    runtime.entrypoint.write_text(f"#!/bin/sh\necho probed >> {runs}\necho '2.1.221 (Claude Code)'\n")
    assert runtimes.probe_version(runtime) == "2.1.221"
    package_json.write_text('{"version": "2.1.222"}')
    assert runtimes.probe_version(runtime) == "2.1.221"
    assert runs.read_text().splitlines() == ["probed"] * 3


def test_a_slow_probe_on_a_loaded_machine_is_not_a_configuration_error(tmp_path: Path) -> None:
    """An explicit --agent-entrypoint whose --version takes 11 s (node loading a bundle on a busy 2-core host took
    over 10 s): the probe waits for it, the launch target is resolved."""
    slow = tmp_path / "bin" / "pi"
    slow.parent.mkdir()
    slow.write_text("#!/bin/sh\nsleep 11\necho 0.83.0\n")
    slow.chmod(0o755)
    target = runtimes.resolve_entrypoint("pi", "0.83.0", slow)
    assert (target.entrypoint, target.version) == (slow, "0.83.0")


def test_a_release_on_trial_stands_in_for_its_verified_version_only_within_the_block(cache: Path,
                                                                                     tmp_path: Path) -> None:
    """forkpoint agents calibrate resumes with the release in a verified version's place; outside the block (and
    for any other agent or version) the verified runtime is required as before."""
    release = tmp_path / "claude-2.1.331"
    release.write_text("#!/bin/sh\necho '2.1.331 (Claude Code)'\n")
    release.chmod(0o755)
    with runtimes.trial("claude-code", "2.1.332", release, "2.1.331"):
        target = runtimes.resolve_entrypoint("claude-code", "2.1.332", None)
        assert (target.entrypoint, target.version) == (release, "2.1.332")
        assert runtimes.trial_release("claude-code", release) == "2.1.331"
        assert runtimes.trial_release("codex", release) is None
        with pytest.raises(ReplayError, match="not installed"):
            runtimes.resolve_entrypoint("claude-code", "2.1.220", None)
    assert runtimes.trial_release("claude-code", release) is None
    with pytest.raises(ReplayError, match="not installed"):
        runtimes.resolve_entrypoint("claude-code", "2.1.332", None)
    with pytest.raises(ReplayError) as caught, runtimes.trial("claude-code", "2.1.331", release, "2.1.331"):
        pass  # only a verified version can be stood in for
    assert caught.value.kind is ErrorKind.UNSUPPORTED_VERSION


def test_a_pypi_release_is_installed_on_the_python_of_its_major_line() -> None:
    assert runtimes.release_python("mini-swe-agent", "2.4.5") == "3.12"
    assert runtimes.release_python("mini-swe-agent", "1.15.0") == "3.11"


def test_an_older_codex_bundling_every_platform_runs_this_platforms_binary(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Codex 0.40.0 has no optionalDependencies: bin/ holds a binary per target triple (and a shell script named
    like another platform's must not be picked)."""
    monkeypatch.setattr(npm, "_platform_key", lambda: "linux-x64")
    package = tmp_path / "node_modules" / "@openai" / "codex"
    (package / "bin").mkdir(parents=True)
    (package / "package.json").write_text(json.dumps({"name": "@openai/codex", "version": "0.40.0",
                                                      "bin": {"codex": "bin/codex.js"}}))
    (package / "bin" / "codex.js").write_text("#!/usr/bin/env node\n")
    (package / "bin" / "codex-aarch64-unknown-linux-musl").write_bytes(b"\x7fELF arm")
    with pytest.raises(ReplayError, match="no bundled bin/codex-x86_64-unknown-linux-musl"):
        npm.entrypoint(tmp_path, _codex())
    (package / "bin" / "codex-x86_64-unknown-linux-musl").write_bytes(b"\x7fELF x64")
    entry = npm.entrypoint(tmp_path, _codex())
    assert entry == package / "bin" / "codex-x86_64-unknown-linux-musl" and entry.stat().st_mode & stat.S_IXUSR


def test_codex_0_4x_to_0_99_vendor_layouts_run_this_platforms_binary(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Codex 0.42-0.98 bundle every platform as ``vendor/<triple>/codex/codex`` in the main package; 0.99 has the
    per-platform package with that layout inside (not ``vendor/<triple>/bin/codex``): both install (the bisect of
    the shell -> exec_command change ran them)."""
    monkeypatch.setattr(npm, "_platform_key", lambda: "linux-x64")
    package = tmp_path / "node_modules" / "@openai" / "codex"
    (package / "bin").mkdir(parents=True)
    (package / "package.json").write_text(json.dumps({"name": "@openai/codex", "version": "0.95.0",
                                                      "bin": {"codex": "bin/codex.js"}}))
    for triple in ("aarch64-unknown-linux-musl", "x86_64-unknown-linux-musl"):
        (package / "vendor" / triple / "codex").mkdir(parents=True)
        (package / "vendor" / triple / "codex" / "codex").write_bytes(b"\x7fELF " + triple.encode())
    assert npm.entrypoint(tmp_path, _codex()) == package / "vendor" / "x86_64-unknown-linux-musl" / "codex" / "codex"

    native = tmp_path / "new" / "node_modules" / "@openai" / "codex-linux-x64" / "vendor" / "x86_64-unknown-linux-musl"
    (native / "codex").mkdir(parents=True)
    (native.parents[1] / "package.json").write_text("{}")
    (native / "codex" / "codex").write_bytes(b"\x7fELF x64")
    main = tmp_path / "new" / "node_modules" / "@openai" / "codex"
    main.mkdir(parents=True)
    (main / "package.json").write_text(json.dumps({"name": "@openai/codex", "version": "0.99.0", "bin": {
        "codex": "bin/codex.js"}, "optionalDependencies": {"@openai/codex-linux-x64": "npm:@openai/codex@0.99.0"}}))
    entry = npm.entrypoint(tmp_path / "new", _codex())
    assert entry == native / "codex" / "codex" and entry.stat().st_mode & stat.S_IXUSR


def test_a_runtime_of_an_agent_this_forkpoint_does_not_know_is_not_listed(cache: Path) -> None:
    """A cache shared with another forkpoint can hold a runtime of an agent it added: `agents list --json`
    crashed on it (unsupported agent) instead of listing the others."""
    import subprocess
    import sys

    fake_runtime(cache)
    fake_runtime(cache, agent="a-later-agent", version="0.9.0")
    assert [(r.agent, r.version) for r in runtimes.list_installed()] == [("claude-code", "2.1.220")]
    done = subprocess.run([sys.executable, "-m", "forkpoint.cli", "agents", "list", "--json"], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert [row["agent"] for row in json.loads(done.stdout)] == ["claude-code"]


def test_copilots_probe_reports_its_own_release_not_the_newest_unpacked_package(cache: Path) -> None:
    """Copilot CLI's loader runs the newest package in ~/.cache/copilot/pkg unless auto-update is off (measured: a
    1.0.92 install reported 1.0.102): the probe turns it off, and an answer cached by an earlier probe that does
    not match the install is probed again."""
    runtime = fake_runtime(cache, "copilot-cli", "1.0.92")
    runtime.entrypoint.write_text("#!/bin/sh\nif [ \"$COPILOT_AUTO_UPDATE\" = false ]; then "
                                  "echo 'GitHub Copilot CLI 1.0.92.'; else echo 'GitHub Copilot CLI 1.0.102.'; fi\n")
    record_probe(runtime, [runtime.entrypoint, runtime.root / "node_modules" / "@github/copilot" /
                               "package.json"], "1.0.102")
    assert runtimes.probe_version(runtime) == "1.0.92"


def test_a_staged_install_replaces_an_incomplete_one_keeps_a_concurrent_one_and_leaves_no_staging(
        tmp_path: Path) -> None:
    """stage_into (agent runtimes, uv, flake8, fd): what appears at the target is only ever a finished fill."""
    target = tmp_path / "tools" / "tool"
    target.mkdir(parents=True)
    (target / "partial").write_text("left by a killed install")

    def fill(staging: Path) -> None:
        (staging / "bin").mkdir()
        (staging / "bin" / "tool").write_text("new")

    stage_into(target, ".tool.staging-", fill)
    assert sorted(p.relative_to(target).as_posix() for p in target.rglob("*")) == ["bin", "bin/tool"]
    stage_into(target, ".tool.staging-", lambda staging: (staging / "other").write_text("x"), done=lambda: True)
    assert (target / "bin" / "tool").read_text() == "new" and not (target / "other").exists()

    def failing(staging: Path) -> None:
        (staging / "half").write_text("x")
        raise ReplayError(ErrorKind.CONFIGURATION, "the download failed")

    with pytest.raises(ReplayError, match="download failed"):
        stage_into(target, ".tool.staging-", failing)
    assert [p.name for p in target.parent.iterdir()] == ["tool"] and (target / "bin" / "tool").read_text() == "new"
