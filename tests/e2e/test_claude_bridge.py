"""The real Claude Code binaries resumed through the bridge (ScriptedModel behind it as the anthropic upstream).

Skipped for a version that is not installed (``forkpoint agents install claude-code@<version>``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from forkpoint import runtimes
from forkpoint.adapters.claude_code.envelope import expected_prefix, project
from forkpoint.adapters.claude_code.gate import ClaudeGate
from forkpoint.bridge.protocols.anthropic import AnthropicStubUpstream, AnthropicUpstream
from forkpoint.bridge.server import Bridge
from forkpoint.core.hashing import make_nonce
from forkpoint.testing import ScriptedModel, text, tool_use

pytestmark = pytest.mark.e2e

REQUESTS = Path(__file__).parents[1] / "fixtures" / "claude_code" / "requests"
VERSIONS = ("2.1.220", "2.1.332")


def _runtime(version: str) -> runtimes.Runtime:
    runtime = runtimes.find("claude-code", version)
    if runtime is None:
        pytest.skip(f"claude-code {version} is not installed")
    return runtime


def _resume(version: str, case: str, tmp_path: Path, upstream_for: Any, *, tamper: bool = False,
            prompt: str | None = None) -> tuple[subprocess.CompletedProcess[str], Bridge, list[str]]:
    runtime = _runtime(version)
    source = REQUESTS / version / case
    meta = json.loads((source / "meta.json").read_text("utf-8"))
    lines = (source / "session.jsonl").read_text("utf-8").splitlines()
    nonce = make_nonce()
    expected = expected_prefix([json.loads(line) for line in lines], nonce, version)
    if tamper:  # the agent gets a session whose last observation differs from the manifest's
        last = json.loads(lines[-1])
        last["message"]["content"][0]["content"] = "tampered observation"
        lines[-1] = json.dumps(last)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    home = tmp_path / "home"
    project_dir = home / ".claude" / "projects" / re.sub(r"[^A-Za-z0-9]", "-", str(workspace))
    project_dir.mkdir(parents=True)
    (project_dir / f"{meta['session_id']}.jsonl").write_text("\n".join(lines) + "\n", "utf-8")
    bridge = Bridge(ClaudeGate(expected, prompt), upstream_for())
    scratch = tmp_path / "tmp"  # claude's own temp files (claude-<uid>/, cc-socks-<uid>/): never the system /tmp
    scratch.mkdir()
    with bridge:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "TMPDIR": str(scratch),
               "ANTHROPIC_BASE_URL": bridge.base_url, "ANTHROPIC_API_KEY": "dummy",
               "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "IS_SANDBOX": "1"}
        done = subprocess.run(
            [str(runtime.entrypoint), "--resume", meta["session_id"], "-p", nonce, "--output-format", "stream-json",
             "--verbose", "--dangerously-skip-permissions", "--max-turns", "3"],
            cwd=workspace, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, check=False)
        bridge.finish()
    return done, bridge, [nonce]


@pytest.mark.parametrize("version", VERSIONS)
def test_real_agent_continues_through_the_bridge(version: str, tmp_path: Path) -> None:
    model = ScriptedModel([[text("One more."), tool_use("Bash", {"command": "echo four", "description": "x"})]],
                          step_mode="counter", final_text="Finished.")
    with model.serve() as model_url:
        done, bridge, secrets = _resume(version, "parallel_after_2", tmp_path,
                                        lambda: AnthropicUpstream(model_url, "upstream-key"), prompt="Go on.")
    assert done.returncode == 0, done.stderr[-2000:]
    summary = bridge.summary()
    assert summary.error() is None and summary.validated == 2 and summary.forwarded == 2
    main = [r for r in model.requests if r.get("kind") == "main"]
    assert len(main) == 2
    first = main[0]["body"]["messages"]
    assert first[-1]["content"] == [{"type": "text", "text": "Go on.", "cache_control": {"type": "ephemeral"}}]
    assert [b["type"] for b in project(first)[-2]["content"]] == ["tool_result", "tool_result"]
    assert all(secrets[0] not in json.dumps(r["body"]) for r in model.requests)
    assert json.loads(done.stdout.splitlines()[-1])["result"] == "Finished."


@pytest.mark.parametrize("version", VERSIONS)
def test_real_agent_with_a_tampered_session_is_refused(version: str, tmp_path: Path) -> None:
    model = ScriptedModel([], final_text="must never be reached")
    with model.serve() as model_url:
        done, bridge, _ = _resume(version, "parallel_after_1", tmp_path,
                                  lambda: AnthropicUpstream(model_url, "upstream-key"), tamper=True)
    summary = bridge.summary()
    assert summary.failed and summary.forwarded == 0
    assert summary.first_failure is not None and "the observation of toolu_" in summary.first_failure
    assert model.requests == []
    result = json.loads(done.stdout.splitlines()[-1]) if done.stdout.strip() else {}
    assert done.returncode != 0 or result.get("is_error") is True


@pytest.mark.parametrize("version", VERSIONS)
def test_real_agent_against_the_stub_upstream(version: str, tmp_path: Path) -> None:
    done, bridge, _ = _resume(version, "cd_after_2", tmp_path, lambda: AnthropicStubUpstream("stub answer"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert bridge.summary().validated == 1 and bridge.summary().error() is None
    assert json.loads(done.stdout.splitlines()[-1])["result"] == "stub answer"
