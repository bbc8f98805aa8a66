"""Credentials by any name stay out of children: replayed commands and the continued agent see an allowlist.

The real ``forkpoint replay`` runs with canary values under names a name rule would not catch (and some it
would): ``AWS_ACCESS_KEY_ID``, ``SSH_PRIVATE_KEY``, ``DB_PASSWORD``, ``HTTPS_PROXY`` with a user and password,
``DATABASE_URL`` with a password, a random ``FOO_CANARY``. A replayed command writes its environment to a file;
/proc is polled for every process of the run (its environment names the run's tmp dir). No canary may reach a
child, under ``--sandbox local`` and ``bwrap``; ``--env FOO_CANARY`` and ``--env BAR_CANARY=value`` pass exactly
those, result metadata names them, and their values appear nowhere but where the command itself wrote them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from forkpoint import runtimes
from forkpoint.testing import ScriptedModel
from forkpoint.testing.claude_sessions import ClaudeSessionBuilder, text, tool_use
from forkpoint.testing.scripted_model import tool_use as scripted_tool_use

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="/proc is Linux")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SANDBOXES = ["local", pytest.param("bwrap", marks=pytest.mark.skipif(shutil.which("bwrap") is None,
                                                                     reason="bubblewrap is not installed"))]
#: the command writes its environment to a file only (nothing of it reaches the observation), and lingers long
#: enough for the /proc poll to see it
DUMP = "cat /proc/$$/environ | tr '\\0' '\\n' > env-dump.txt; sleep 0.3"


def canaries() -> dict[str, str]:
    token = uuid.uuid4().hex
    return {
        "AWS_ACCESS_KEY_ID": f"AKIACANARY{token[:12]}",
        "SSH_PRIVATE_KEY": f"ssh-canary-{token}",
        "DB_PASSWORD": f"db-canary-{token}",
        "HTTPS_PROXY": f"http://user:proxycanary{token}@proxy.invalid:3128",
        "DATABASE_URL": f"postgres://app:dburlcanary{token}@db.invalid/app",
        "FOO_CANARY": f"foo-canary-{token}",
    }


class Watcher:
    """Polls /proc while a run goes on: processes whose environment names ``marker`` must hold no canary value."""

    def __init__(self, marker: str, values: dict[str, str]) -> None:
        self.marker = marker.encode()
        self.values = {name: value.encode() for name, value in values.items()}
        self.seen: dict[int, bytes] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for entry in os.listdir("/proc"):
                if entry.isdigit() and int(entry) != os.getpid():
                    try:
                        with open(f"/proc/{entry}/environ", "rb") as handle:
                            environ = handle.read()
                    except OSError:
                        continue
                    if self.marker in environ:
                        self.seen[int(entry)] = environ
            time.sleep(0.01)

    def leaks(self, allowed: tuple[str, ...] = ()) -> list[str]:
        return sorted(f"{name} in pid {pid}" for pid, environ in self.seen.items()
                      for name, value in self.values.items() if value in environ and name not in allowed)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _replay(tmp: Path, env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "forkpoint.cli", "replay", *argv, "--state-dir", str(tmp / "state"),
                           "--output-dir", str(tmp / "out"), "--run-id", "envrun", "--json"],
                          env=env, capture_output=True, timeout=300, check=False)


def _where(tmp: Path, done: subprocess.CompletedProcess[bytes], value: str) -> list[str]:
    """Every file under ``tmp`` and CLI stream holding ``value``."""
    needle = value.encode()
    found = [stream for stream, data in (("stdout", done.stdout), ("stderr", done.stderr)) if needle in data]
    for path in tmp.rglob("*"):
        if path.is_file() and not path.is_symlink() and needle in path.read_bytes():
            found.append(str(path.relative_to(tmp)))
    return found


def _session(tmp: Path, workspace: Path) -> Path:
    builder = ClaudeSessionBuilder(cwd=str(workspace))
    builder.user_prompt("Dump the environment.")
    builder.assistant([text("Dumping."), tool_use("toolu_env", "Bash", {"command": DUMP})])
    builder.results({"toolu_env": ""})
    builder.assistant([text("Done.")])
    return builder.write(tmp / "session.jsonl")


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_replayed_commands_get_no_canary(tmp_path: Path, sandbox: str) -> None:
    secrets = canaries()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    session = _session(tmp_path, workspace)
    with Watcher(str(tmp_path), secrets) as watcher:
        done = _replay(tmp_path, {**os.environ, **secrets, "LC_ALL": "C.UTF-8"}, "--agent", "claude-code",
                       "--trajectory", str(session), "--after-step", "1", "--replay-only", "--workspace",
                       str(workspace), "--sandbox", sandbox)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    dump = (workspace / "env-dump.txt").read_text().splitlines()
    assert any(line.startswith("PATH=") for line in dump) and "LC_ALL=C.UTF-8" in dump  # allowlisted: kept
    assert watcher.seen, "no process of the run was observed"
    assert watcher.leaks() == []
    for name, value in secrets.items():
        assert _where(tmp_path, done, value) == [], name
    result = json.loads(done.stdout)
    assert result["metadata"]["child_environment"] == {"policy": "allowlist", "passed": [], "missing": []}


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_env_passes_exactly_the_named_variables(tmp_path: Path, sandbox: str) -> None:
    secrets = canaries()
    given = f"bar-canary-{uuid.uuid4().hex}"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    session = _session(tmp_path, workspace)
    with Watcher(str(tmp_path), {**secrets, "BAR_CANARY": given}) as watcher:
        done = _replay(tmp_path, {**os.environ, **secrets}, "--agent", "claude-code", "--trajectory", str(session),
                       "--after-step", "1", "--replay-only", "--workspace", str(workspace), "--sandbox", sandbox,
                       "--env", "FOO_CANARY", "--env", f"BAR_CANARY={given}", "--env", "UNSET_CANARY_NAME")
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    dump = (workspace / "env-dump.txt").read_text().splitlines()
    assert f"FOO_CANARY={secrets['FOO_CANARY']}" in dump and f"BAR_CANARY={given}" in dump
    assert watcher.leaks(allowed=("FOO_CANARY", "BAR_CANARY")) == []
    result = json.loads(done.stdout)
    assert result["metadata"]["child_environment"] == {
        "policy": "allowlist", "passed": ["BAR_CANARY", "FOO_CANARY"], "missing": ["UNSET_CANARY_NAME"]}
    # the values: only in the file the command wrote (the value given on the command line is not ours to hide
    # from ps, but forkpoint writes it nowhere)
    for value in (secrets["FOO_CANARY"], given):
        found = _where(tmp_path, done, value)  # the workspace file, and its copy in a boundary snapshot if kept
        assert "ws/env-dump.txt" in found and all(path.endswith("/env-dump.txt") for path in found), found


def test_a_malformed_env_entry_is_refused(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    session = _session(tmp_path, workspace)
    done = _replay(tmp_path, dict(os.environ), "--agent", "claude-code", "--trajectory", str(session),
                   "--after-step", "1", "--replay-only", "--workspace", str(workspace), "--env", "BAD-NAME=1")
    assert done.returncode == 2, done.stderr[-2000:]
    assert b"BAD-NAME" in done.stdout + done.stderr
    assert not (workspace / "env-dump.txt").exists()


@pytest.mark.e2e
def test_the_continued_agent_gets_no_canary(tmp_path: Path) -> None:
    """The real claude, continued (its own Bash call dumps its tool environment): only --env names get through."""
    version = "2.1.332"
    if runtimes.find("claude-code", version) is None:
        pytest.skip(f"claude-code {version} is not installed")
    secrets = canaries()
    fixture = FIXTURES / "claude_code" / version / "single_bash"
    recorded_cwd = json.loads((fixture / "meta.json").read_text())["cwd"]
    workspace = tmp_path / "ws"
    shutil.copytree(fixture / "workspace-initial", workspace)
    # the continuation's first request holds one assistant turn (the replayed one): it is answered by turn 1
    model = ScriptedModel([[text("(recorded)")], [scripted_tool_use("Bash", {"command": DUMP})], [text("Done.")]])
    with model.serve() as url, Watcher(str(tmp_path), secrets) as watcher:
        env = {**os.environ, **secrets, "ANTHROPIC_API_KEY": "scripted-upstream-key"}
        done = _replay(tmp_path, env, "--agent", "claude-code", "--trajectory", str(fixture / "session.jsonl"),
                       "--after-step", "1", "--workspace", str(workspace), "--path-map", f"{recorded_cwd}={workspace}",
                       "--upstream", "anthropic", "--upstream-url", url, "--env", "FOO_CANARY")
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    agents = [environ for environ in watcher.seen.values() if b"CLAUDE_CONFIG_DIR=" in environ]
    assert agents, "the agent was not observed"
    assert watcher.leaks(allowed=("FOO_CANARY",)) == []
    assert all(secrets["FOO_CANARY"].encode() in environ for environ in agents)
    dump = (workspace / "env-dump.txt").read_text().splitlines()
    assert f"FOO_CANARY={secrets['FOO_CANARY']}" in dump
    assert not [line for line in dump if line.startswith(("AWS_", "SSH_", "DB_", "HTTPS_PROXY", "DATABASE_"))]
