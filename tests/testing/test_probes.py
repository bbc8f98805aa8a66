"""The held-out probes catch every escape when nothing contains them: the script run on the host, unsandboxed."""

from __future__ import annotations

import subprocess
from pathlib import Path

from forkpoint.testing.probes import HostProbes, non_loopback_address


def test_an_unsandboxed_probe_is_caught_on_every_count_and_cleaned_up(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with HostProbes(tmp_path / "outside") as probes:
        canary = probes.canary
        assert canary.read_text().strip() == probes.canary_text
        out = subprocess.run(["sh", "-c", probes.script(workspace)], cwd=workspace, capture_output=True, text=True,
                             timeout=60, check=True).stdout
        assert out.endswith("probed\n") and "reached-loopback" in out
        assert ("reached-address" in out) == (non_loopback_address() is not None)
        escapes = probes.escapes(out)
        assert escapes[:3] == ["wrote outside the workspace", "read the canary in the host HOME",
                               "reached a host listener"]
        assert escapes[3].startswith("left processes")
    assert not canary.exists() and probes.survivors() == []  # the canary removed, the detached sleeps killed
