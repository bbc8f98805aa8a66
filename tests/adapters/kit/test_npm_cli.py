"""The shared environment and settings of the npm CLIs forkpoint drives with their own tools (Gemini CLI, Qwen
Code): no credentials or agent variables leak in, proxies point at a closed port, a planted link is not followed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from forkpoint.adapters.kit.npm_cli import (
    PROXY_SINK,
    install_jsonl,
    installed_entrypoint,
    isolated_env,
    usable_model,
    write_settings,
)
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


def test_a_recorded_model_that_is_not_a_plain_name_is_refused() -> None:
    allowed = re.compile(r"[A-Za-z0-9._-]{1,128}")
    assert usable_model("gemini-2.5-pro", allowed, "no model") == "gemini-2.5-pro"
    for bad in (None, "--yolo x", "a" * 129, ""):
        with pytest.raises(ReplayError, match="no model") as caught:
            usable_model(bad, allowed, "no model")
        assert caught.value.kind is ErrorKind.TRAJECTORY


def test_the_prefix_is_installed_in_home_without_following_a_planted_link(tmp_path: Path) -> None:
    prefix = tmp_path / "prefix.jsonl"
    prefix.write_bytes(b'{"a": 1}\n\n{"b": 2}\n')
    home = tmp_path / "home"
    (home / "chats").mkdir(parents=True)
    data, records = install_jsonl(prefix, home, home / "chats" / "s.jsonl")
    assert (home / "chats" / "s.jsonl").read_bytes() == data == prefix.read_bytes()
    assert records == [{"a": 1}, {"b": 2}]
    outside = tmp_path / "outside.jsonl"
    (home / "chats" / "t.jsonl").symlink_to(outside)
    with pytest.raises(ReplayError):
        install_jsonl(prefix, home, home / "chats" / "t.jsonl")
    assert not outside.exists()
