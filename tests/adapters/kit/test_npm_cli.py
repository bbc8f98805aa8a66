"""The shared environment and settings of the npm CLIs forkpoint drives with their own tools (Gemini CLI, Qwen
Code): no credentials or agent variables leak in, proxies point at a closed port, a planted link is not followed."""

from __future__ import annotations

from pathlib import Path

import pytest

from forkpoint.adapters.kit.npm_cli import PROXY_SINK, installed_entrypoint, isolated_env, write_settings
from forkpoint.core.errors import ErrorKind, ReplayError


def test_the_env_keeps_no_credentials_nor_the_agents_own_variables(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    monkeypatch.setenv("AGENTX_BASE_URL", "https://example.com")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("no_proxy", "*")
    env = isolated_env(tmp_path, ("AGENTX_",), {"AGENTX_KEY": "dummy"})
    assert "AGENTX_BASE_URL" not in env and "AWS_SECRET_ACCESS_KEY" not in env and env["AGENTX_KEY"] == "dummy"
    assert env["HOME"] == str(tmp_path) and env["HTTPS_PROXY"] == env["http_proxy"] == PROXY_SINK
    assert env["no_proxy"] == "127.0.0.1,localhost,::1"


def test_a_link_planted_where_the_settings_go_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    (home / ".agentx").symlink_to(outside)
    with pytest.raises(ReplayError) as caught:
        write_settings(home, ".agentx/settings.json", {"a": 1}, ErrorKind.EXECUTOR)
    assert caught.value.kind is ErrorKind.EXECUTOR and not (outside / "settings.json").exists()


def test_a_missing_runtime_names_the_install_command() -> None:
    with pytest.raises(ReplayError, match=r"forkpoint agents install gemini-cli@0\.0\.1"):
        installed_entrypoint("gemini-cli", "0.0.1", "Gemini CLI")
