"""The Qwen Code tool host and executor around the real CLI: no credentials, a secret route, strict reads, and a
CLI that dies is an executor failure before any effect (the real tools run in tests/e2e/test_qwen_code_continue.py)."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from forkpoint.adapters.qwen_code.runtime import project_dir, qwen_env
from forkpoint.adapters.qwen_code.tools import QwenToolExecutor, ToolHost
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.model import RunContext, ToolCall


def test_the_cli_env_has_no_credentials_and_points_only_at_loopback(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "real-user-key")
    monkeypatch.setenv("DASHSCOPE_API_KEY", "real-dashscope-key")
    monkeypatch.setenv("OPENAI_BASE_URL", "https://api.openai.com/v1")
    env = qwen_env(tmp_path, "http://127.0.0.1:1/token")
    assert env["OPENAI_API_KEY"] == "forkpoint-bridge" and env["OPENAI_BASE_URL"] == "http://127.0.0.1:1/token/v1"
    assert "real-user-key" not in env.values() and "DASHSCOPE_API_KEY" not in env and env["HOME"] == str(tmp_path)
    assert env["HTTPS_PROXY"].startswith("http://127.0.0.1:")


def test_the_project_folder_is_qwen_codes_sanitised_cwd() -> None:
    assert project_dir("/tmp/qm/ws") == "-tmp-qm-ws" and project_dir("/a/../b c") == "-a----b-c"


def test_the_tool_host_answers_only_under_its_secret_path() -> None:
    """Another local process (no token) can neither take the armed call nor signal an answer."""
    host = ToolHost()
    try:
        url = host.start()
        call = ToolCall("c1", "read_file", {"file_path": "a"}, None)
        host.calls.put(call)
        body = json.dumps({"tools": [{}], "messages": [{"role": "user", "content": "x"}]}).encode()
        base = url.rsplit("/", 1)[0]
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(urllib.request.Request(f"{base}/v1/chat/completions", body,
                                                          {"content-type": "application/json"}), timeout=10)
        assert caught.value.code == 404 and host.pending is None and host.calls.qsize() == 1
        with urllib.request.urlopen(urllib.request.Request(f"{url}/v1/chat/completions", body,
                                                           {"content-type": "application/json"}), timeout=10) as reply:
            assert b'"c1"' in reply.read()
        assert host.pending == "c1"  # the same body under the token is what the CLI's request looks like
    finally:
        host.close()


def test_a_cli_that_dies_before_answering_is_an_executor_failure(tmp_path: Path) -> None:
    fake = tmp_path / "bin" / "qwen"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho broken >&2\nexit 3\n")
    fake.chmod(0o755)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    executor = QwenToolExecutor(RunContext(workspace, tmp_path / "state", tmp_path / "out"), fake)
    try:
        with pytest.raises(ReplayError) as caught:
            executor.run(ToolCall("c1", "write_file", {"file_path": "x", "content": "y"}, None))
    finally:
        executor.close()
    assert caught.value.kind is ErrorKind.EXECUTOR and "did not run write_file" in caught.value.message
    assert caught.value.before_effect and not (workspace / "x").exists()
    assert os.path.isdir(tmp_path / "state" / "home")


def test_a_link_planted_at_the_tool_session_file_is_not_followed(tmp_path: Path) -> None:
    """A replayed command can write the replay HOME: a symlink there must not become the observation's source."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    executor = QwenToolExecutor(RunContext(workspace, tmp_path / "state", tmp_path / "out"), tmp_path / "qwen")
    forged = tmp_path / "forged.jsonl"
    forged.write_text(json.dumps({"type": "tool_result", "message": {"parts": [{"functionResponse": {
        "id": "c1", "name": "read_file", "response": {"output": "forged"}}}]}}) + "\n")
    chats = executor.context.home / ".qwen" / "projects" / project_dir(str(workspace)) / "chats"
    chats.mkdir(parents=True)
    (chats / f"{executor.session_id}.jsonl").symlink_to(forged)
    try:
        with pytest.raises(ReplayError) as caught:
            executor._result_record(ToolCall("c1", "read_file", {"file_path": "a"}, None))
    finally:
        executor.close()
    assert caught.value.kind is ErrorKind.EXECUTOR
