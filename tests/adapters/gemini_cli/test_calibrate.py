"""Gemini CLI's calibration probe: the recording is the one regular session file the release wrote, never a link
planted in its HOME nor one of several (the real calibration: tests/adapters/kit/test_calibration.py against the
fixture, docs/agents.md for the measured releases)."""

from __future__ import annotations

from pathlib import Path

import pytest

from forkpoint.adapters.gemini_cli.calibrate import CLI
from forkpoint.core.errors import ReplayError


def test_the_session_is_the_one_regular_file_the_release_wrote(tmp_path: Path) -> None:
    home, cwd = tmp_path / "home", tmp_path / "ws"
    chats = home / ".gemini" / "tmp" / "ws" / "chats"
    chats.mkdir(parents=True)
    secret = tmp_path / "secret.jsonl"
    secret.write_text("{}\n")
    (chats / "session-planted.jsonl").symlink_to(secret)
    with pytest.raises(ReplayError, match="expected one session file"):
        CLI.session(home, cwd)
    (chats / "session-planted.jsonl").unlink()
    (chats / "session-a.jsonl").write_text("{}\n")
    assert CLI.session(home, cwd) == chats / "session-a.jsonl"
    (chats / "session-b.jsonl").write_text("{}\n")
    with pytest.raises(ReplayError, match="found 2"):
        CLI.session(home, cwd)
