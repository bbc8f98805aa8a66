"""Re-running Copilot CLI calls through the REAL 1.0.102 binary (its own tools), in the recording's workspace."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from forkpoint import runtimes
from forkpoint.adapters.copilot_cli.parse import parse_copilot
from forkpoint.adapters.copilot_cli.runtime import copilot_env
from forkpoint.adapters.copilot_cli.tools import CopilotToolExecutor, ToolHost, normalize_volatile
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.model import RunContext, ToolCall
from forkpoint.testing.recordings import restored_workspace

FIXTURE = Path(__file__).parents[2] / "fixtures" / "copilot_cli" / "1.0.102" / "tools"
needs_binary = pytest.mark.skipif(runtimes.find("copilot-cli", "1.0.102") is None,
                                  reason="copilot-cli 1.0.102 is not installed (forkpoint agents install)")


def test_the_cli_env_has_no_credentials_and_points_only_at_loopback(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    for name, value in (("GH_TOKEN", "gho_real"), ("GITHUB_TOKEN", "ghp_real"), ("COPILOT_GITHUB_TOKEN", "real"),
                        ("COPILOT_PROVIDER_BASE_URL", "https://api.example.com"), ("COPILOT_HOME", "/home/u/.copilot"),
                        ("HTTPS_PROXY", "http://proxy.example:8080")):
        monkeypatch.setenv(name, value)
    env = copilot_env(tmp_path, "http://127.0.0.1:1/token/v1", "gpt-4.1", tmp_path / "bin" / "copilot")
    assert env["COPILOT_PROVIDER_BASE_URL"] == "http://127.0.0.1:1/token/v1" and env["COPILOT_OFFLINE"] == "true"
    assert env["COPILOT_PROVIDER_API_KEY"] == "forkpoint-bridge" and env["COPILOT_MODEL"] == "gpt-4.1"
    assert not {"GH_TOKEN", "GITHUB_TOKEN", "COPILOT_GITHUB_TOKEN"} & set(env)
    assert env["HOME"] == str(tmp_path) and env["COPILOT_HOME"] == str(tmp_path / ".copilot")
    assert env["HTTPS_PROXY"].startswith("http://127.0.0.1:") and "real" not in json.dumps(env)


def test_only_the_shell_id_is_volatile() -> None:
    assert normalize_volatile("a\n<shellId: 12 completed with exit code 3>") == \
        "a\n<shellId: <id> completed with exit code 3>"
    assert normalize_volatile("shellId: 12") == "shellId: 12"


@needs_binary
def test_fresh_equals_historical_for_the_recorded_calls(tmp_path: Path) -> None:
    """Calls of the recording re-run by the real binary give the recorded observations (at the recorded cwd):
    failures (their ``error.message``) and a bash call after one that ran ``cd`` (each call its own process). The
    e2e tests replay batches 1-4 (exact there), so this samples batches 6-8 to keep the suite short."""
    batches = parse_copilot(FIXTURE / "session.jsonl").batches
    calls = [c for n in (6, 7, 8) for c in batches[n - 1].calls]
    with restored_workspace(FIXTURE) as workspace:
        executor = CopilotToolExecutor(RunContext(workspace, tmp_path / "state", tmp_path / "out"))
        try:
            for call in calls:
                fresh = executor.run(call)
                assert call.historical is not None
                assert normalize_volatile(fresh.content) == normalize_volatile(call.historical.content), call.name
                assert fresh.is_error == call.historical.is_error, call.name
        finally:
            executor.close()
        assert (workspace / "greet.py").read_text() == "print('helo world')\n"  # the failed edit changed nothing
        assert fresh.return_code == 0 and fresh.content.startswith(f"{workspace}\n<shellId: ")


def test_the_tool_host_answers_only_under_its_secret_path() -> None:
    """A forged request from another local process (no token) never reaches the host's call."""
    host = ToolHost()
    try:
        url = host.start()
        host.arm(ToolCall("c1", "bash", {"command": "rm -rf ~"}, None))
        body = {"tools": [{}], "messages": [{"role": "user", "content": "x"}]}
        base = url.rsplit("/", 2)[0]
        forged = urllib.request.Request(f"{base}/v1/chat/completions", json.dumps(body).encode(),
                                        {"content-type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(forged, timeout=10)
        assert caught.value.code == 404 and not host.handed
        request = urllib.request.Request(f"{url}/chat/completions", json.dumps(body).encode(),
                                         {"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as reply:
            answer = json.loads(reply.read())
        assert host.handed and answer["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "bash"
    finally:
        host.close()


def test_a_cli_that_dies_before_answering_is_an_executor_failure(tmp_path: Path) -> None:
    fake = tmp_path / "bin" / "copilot"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho broken >&2\nexit 3\n")
    fake.chmod(0o755)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    executor = CopilotToolExecutor(RunContext(workspace, tmp_path / "state", tmp_path / "out"), fake)
    try:
        with pytest.raises(ReplayError) as caught:
            executor.run(ToolCall("c1", "create", {"path": str(workspace / "x"), "file_text": "y"}, None))
    finally:
        executor.close()
    assert caught.value.kind is ErrorKind.EXECUTOR and "never handed over" in caught.value.message
    assert caught.value.before_effect and not (workspace / "x").exists()
