"""The pure parts of the OpenCode continuation: argv, config, environment, recorded model, export output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forkpoint.adapters.kit import cli_options
from forkpoint.adapters.opencode.launch import (
    IDLE_ENV,
    RUN_OPTIONS,
    argv,
    export_json,
    idle_limit,
    recorded_model,
    run_options,
)
from forkpoint.adapters.opencode.toolhost import PROXY_SINK, opencode_env, provider_config
from forkpoint.core.errors import ReplayError
from forkpoint.core.hashing import make_nonce

FIXTURES = Path(__file__).parents[2] / "fixtures" / "opencode"


def test_the_nonce_is_the_last_argv_word_and_the_model_is_pinned() -> None:
    nonce = make_nonce()
    words = argv(Path("/rt/opencode"), "ses_1", "scripted", "scripted-model", nonce)
    assert words[-1] == nonce and " " not in nonce and '"' not in nonce
    assert words[words.index("--session") + 1] == "ses_1"
    assert words[words.index("--model") + 1] == "scripted/scripted-model"
    assert "--format=json" in words and "--print-logs" in words


def test_config_has_no_step_limit_and_allows_every_tool() -> None:
    config = provider_config("scripted", "m", "http://127.0.0.1:1/t/v1", "key")
    assert "agent" not in config and config["autoupdate"] is False and config["share"] == "disabled"
    assert config["model"] == config["small_model"] == "scripted/m"
    provider = config["provider"]["scripted"]
    assert provider["npm"] == "@ai-sdk/openai-compatible" and provider["options"]["baseURL"].endswith("/v1")
    assert set(config["permission"].values()) == {"allow"}


def test_environment_is_private_and_offline(tmp_path: Path) -> None:
    base = {"PATH": "/usr/bin", "HOME": "/root", "PWD": "/elsewhere", "OPENAI_API_KEY": "sk-secret",
            "XDG_DATA_HOME": "/root/.local/share", "OPENCODE_CONFIG": "/x.json", "https_proxy": "http://corp:3128"}
    env = opencode_env(tmp_path / "home", tmp_path / "ws", base)
    assert env["HOME"] == str(tmp_path / "home") and env["PWD"] == str(tmp_path / "ws")
    assert env["XDG_DATA_HOME"].startswith(str(tmp_path / "home")) and "OPENCODE_CONFIG" not in env
    assert "OPENAI_API_KEY" not in env and env["https_proxy"] == env["HTTPS_PROXY"] == PROXY_SINK
    assert env["OPENCODE_DISABLE_MODELS_FETCH"] == "1" and "127.0.0.1" in env["NO_PROXY"]
    assert env["OPENCODE_DISABLE_DEFAULT_PLUGINS"] == "1"  # 1.0.162 would install one from npm and exit 1 offline


def test_the_shell_comes_from_the_recording_never_from_the_caller(tmp_path: Path) -> None:
    """Issue 22.7: forkpoint's own SHELL=/bin/bash made a replayed error line say /bin/bash, not /usr/bin/bash."""
    base = {"PATH": "/usr/bin", "SHELL": "/bin/bash"}
    assert opencode_env(tmp_path / "h", tmp_path / "ws", base, shell="/usr/bin/bash")["SHELL"] == "/usr/bin/bash"
    assert "SHELL" not in opencode_env(tmp_path / "h", tmp_path / "ws", base)  # unknown: OpenCode's own fallback
    planted = tmp_path / "ws" / "bin" / "bash"  # a shell a replayed write could have planted
    planted.parent.mkdir(parents=True)
    planted.write_text("#!/bin/sh\n")
    planted.chmod(0o755)
    for shell in (str(planted), "/nonexistent/bin/zsh", "bin/bash"):
        assert "SHELL" not in opencode_env(tmp_path / "h", tmp_path / "ws", base, shell=shell), shell


def test_recorded_model_comes_from_the_last_assistant_message() -> None:
    export = json.loads((FIXTURES / "1.18.33" / "files" / "export.json").read_text())
    assert recorded_model(export) == ("scripted", "scripted-model")
    no_assistant = {"info": {"model": {"providerID": "p", "id": "m"}}, "messages": []}
    assert recorded_model(no_assistant) == ("p", "m")
    with pytest.raises(ReplayError):
        recorded_model({"info": {}, "messages": []})


def test_export_output_may_start_with_a_status_line() -> None:
    document = {"info": {"id": "ses_1"}, "messages": []}
    assert export_json(b"Exporting session: ses_1\n" + json.dumps(document).encode()) == document
    with pytest.raises(ReplayError):
        export_json(b"Error: session not found\n")


def test_idle_limit_is_configurable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(IDLE_ENV, raising=False)
    assert idle_limit() == 600.0
    monkeypatch.setenv(IDLE_ENV, "2.5")
    assert idle_limit() == 2.5
    monkeypatch.setenv(IDLE_ENV, "soon")
    with pytest.raises(ReplayError):
        idle_limit()


def test_thinking_is_passed_only_to_a_release_whose_run_help_lists_it(tmp_path: Path) -> None:
    """1.1.16 has no ``run --thinking`` (yargs prints the usage and exits 1: the calibration failed unnamed); the
    release here is an executable printing that release's real ``run --help``."""
    for version, thinking in (("1.1.16", False), ("1.17.11", True)):
        binary = tmp_path / version / "opencode"
        binary.parent.mkdir()
        binary.write_text(f'#!/bin/sh\ncat "{FIXTURES / "help" / f"run-{version}.txt"}"\n')
        binary.chmod(0o755)
        words = argv(binary, "ses_1", "scripted", "scripted-model", make_nonce())
        assert ("--thinking" in words) is thinking
        assert words[:3] == [str(binary), "run", "--format=json"] and "--print-logs" in words


def test_a_verified_runtime_gets_thinking_without_reading_its_help() -> None:
    from forkpoint.adapters.opencode.spec import SPEC
    from forkpoint.runtimes import find

    runtimes = [r for r in (find("opencode", v) for v in SPEC.versions) if r is not None]
    if not runtimes:
        pytest.skip("no verified OpenCode runtime is installed")
    for runtime in runtimes:
        assert run_options(runtime.entrypoint) == list(RUN_OPTIONS)
    read = {key[0] for key in cli_options._READ}  # no help was read: the verified ones are known without a process
    assert not read & {str(runtime.entrypoint.resolve()) for runtime in runtimes}
