"""Claude Code's calibration probe: which file of the scratch HOME is the release's session."""

from __future__ import annotations

from pathlib import Path

import pytest

from forkpoint.adapters.claude_code.calibrate import _session_file
from forkpoint.adapters.claude_code.launch import config_dir, project_dir_name
from forkpoint.core.errors import ReplayError


def test_the_session_is_found_beside_the_sidechain_transcripts_of_warm_up_subagents(tmp_path: Path) -> None:
    """2.0.59-2.0.76 write ``agent-<id>.jsonl`` files beside the session: the probe found 3 files and failed."""
    home, cwd = tmp_path / "home", tmp_path / "work"
    folder = config_dir(home) / "projects" / project_dir_name(cwd)
    folder.mkdir(parents=True)
    session = folder / "0b6c3f4e-1111-4222-8333-944445555666.jsonl"
    session.write_text('{"type":"user"}\n', "utf-8")
    for agent in ("agent-1a2b3c4d", "agent-5e6f7a8b"):
        (folder / f"{agent}.jsonl").write_text('{"isSidechain":true}\n', "utf-8")
    assert _session_file(home, cwd) == session
    (folder / "second-session.jsonl").write_text("{}\n", "utf-8")
    with pytest.raises(ReplayError, match="found 2"):  # two sessions are still not one
        _session_file(home, cwd)
