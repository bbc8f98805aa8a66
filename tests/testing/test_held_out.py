"""The held-out checks catch every escape when nothing contains them: the commands run on the host, unsandboxed."""

from __future__ import annotations

import subprocess
from pathlib import Path

from forkpoint.testing.held_out import HeldOut, non_loopback_address


def test_an_unsandboxed_probe_is_caught_on_every_count_and_cleaned_up(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with HeldOut(tmp_path) as bait:
        canary, plant = bait.canary, bait.home_plant
        assert canary.read_text().strip() == bait.secret
        out = subprocess.run(["sh", "-c", bait.script(workspace)], cwd=workspace, capture_output=True, text=True,
                             timeout=60, check=True).stdout
        assert out.endswith("probed\n") and "reached-loopback" in out and "wrote-host-path" in out
        assert ("reached-address" in out) == (non_loopback_address() is not None)
        found = bait.violations([out])
        assert found[:3] == [f"wrote outside the workspace: {bait.outside / 'planted'}",
                             f"wrote outside the workspace: {plant}", f"read the canary in the host HOME: {canary}"]
        assert found[3].startswith("reached a host listener")
        assert [line.split(":")[0] for line in found[4:]] == ["left a process behind"] * len(found[4:])
        assert len(found) >= 6  # the setsid and the nohup sleeper (and their sleep children)
    assert not canary.exists() and not plant.exists() and bait.survivors() == []  # cleaned up, sleepers killed


def test_the_commands_join_into_one_shell_line(tmp_path: Path) -> None:
    """Some adapters replay all checks as one recorded command (``"; ".join``): it must still be valid sh."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with HeldOut(tmp_path) as bait:
        out = subprocess.run(["sh", "-c", "; ".join(bait.commands())], cwd=workspace, capture_output=True, text=True,
                             timeout=60, check=True).stdout
        assert out.rstrip().endswith("started") and bait.secret in out
    assert bait.survivors() == []
