"""A full disk under the output dir (a real, small tmpfs): the right category, exit code, phase and message.

The output root is a tmpfs of a few pages; a replay-only run of the committed Claude Code ``large_output`` fixture
(``seq 1 9000``, persisted output) re-runs its tool, then cannot write its rebuilt session there. The result must say
``output_error`` (exit 21), phase ``replayed`` (the tool ran: the workspace is no longer fresh), and name the file it
could not write — not ``internal_error`` in phase ``prepared``. Needs ``mount`` (root, or a user namespace that
allows it); skipped with the reason elsewhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "claude_code" / "2.1.332" / "large_output"

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="tmpfs mounts are Linux")


@pytest.fixture()
def small_tmpfs(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """Mount tmpfs file systems of a given size under tmp_path; all are unmounted at teardown."""
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        target = tmp_path / f"tmpfs-{len(mounted)}"
        target.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(target)],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            pytest.skip(f"mounting a tmpfs is not permitted here: {done.stderr.strip() or done.returncode}")
        mounted.append(target)
        return target

    yield mount
    for target in reversed(mounted):
        subprocess.run(["umount", str(target)], check=True)


def _fill(root: Path) -> None:
    filler = os.open(root / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with pytest.raises(OSError, match="No space left"):  # nothing fits any more
            for _ in range(1000):
                os.write(filler, b"x" * 4096)
    finally:
        os.close(filler)


def _argv(tmp_path: Path, output_root: Path, run_id: str = "full") -> list[str]:
    recorded = json.loads((FIXTURE / "meta.json").read_text())["cwd"]
    workspace = tmp_path / f"ws-{run_id}"
    return [sys.executable, "-m", "forkpoint.cli", "replay", "--agent", "claude-code", "--trajectory",
            str(FIXTURE / "session.jsonl"), "--after-step", "1", "--replay-only", "--workspace", str(workspace),
            "--workspace-from", str(FIXTURE / "workspace-initial"), "--path-map", f"{recorded}={workspace}",
            "--state-dir", str(tmp_path / "state"), "--output-dir", str(output_root), "--run-id", run_id]


def _replay(tmp_path: Path, output_root: Path) -> tuple[int, dict[str, object]]:
    done = subprocess.run([*_argv(tmp_path, output_root), "--json"], capture_output=True, text=True, timeout=120,
                          check=False)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def test_a_full_output_disk_after_the_tools_ran_is_an_output_error_in_phase_replayed(
    tmp_path: Path, small_tmpfs: Callable[[str], Path]
) -> None:
    output_root = small_tmpfs("64k")  # the manifest fits; the ~150 KB rebuilt session does not
    code, result = _replay(tmp_path, output_root)
    failure = result["failure"]
    assert isinstance(failure, dict)
    assert (code, failure["category"], failure["retryable"]) == (21, "output_error", False), result
    assert result["phase"] == "replayed" and result["replayed_tool_calls"] == 1, result
    message = str(failure["message"])
    prefix = output_root / "full" / "native" / "prefix" / "60347578-c7e9-4433-ac3e-7fbb4adfd973.jsonl"
    assert message.startswith(f"no space left on device writing {prefix}"), message
    assert "fresh workspace" in message  # the tool ran: the same workspace must not be replayed into again
    assert "internal" not in message
    written = json.loads((output_root / "full" / "result.json").read_text())  # the small result still fits
    assert written["failure"] == failure and written["phase"] == "replayed"
    assert not list(output_root.rglob(".*.tmp"))  # the failed write left no temp file behind


def test_an_output_disk_too_full_for_the_result_still_reports_before_any_tool_ran(
    tmp_path: Path, small_tmpfs: Callable[[str], Path]
) -> None:
    output_root = small_tmpfs("64k")
    _fill(output_root)
    code, result = _replay(tmp_path, output_root)
    failure = result["failure"]
    assert isinstance(failure, dict)
    assert (code, failure["category"]) == (21, "output_error"), result
    assert result["phase"] == "prepared" and result["replayed_tool_calls"] == 0, result
    message = str(failure["message"])
    assert message.startswith(f"no space left on device writing {output_root / 'full' / 'manifest.json'}"), message
    assert "fresh workspace" not in message
    assert "result.json was not written either: no space left on device" in message
    assert not (output_root / "full" / "result.json").exists()
    shown = subprocess.run(_argv(tmp_path, output_root, "plain"), capture_output=True, text=True, timeout=120,
                           check=False)  # the human form says the same, and points at no result.json
    assert shown.returncode == 21 and "Traceback" not in shown.stderr, shown.stderr
    assert "forkpoint: output_error: no space left on device writing" in shown.stderr
    assert "result.json was not written either" in shown.stderr and "  result: " not in shown.stderr


def test_a_full_state_dir_is_an_output_error_before_anything_runs(
    tmp_path: Path, small_tmpfs: Callable[[str], Path]
) -> None:
    state_root = small_tmpfs("64k")
    _fill(state_root)
    argv = [*_argv(tmp_path, tmp_path / "out"), "--json"]
    argv[argv.index("--state-dir") + 1] = str(state_root)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert "Traceback" not in done.stderr, done.stderr
    result = json.loads(done.stdout)
    assert (done.returncode, result["failure"]["category"], result["phase"]) == (21, "output_error", None), result
    assert result["failure"]["message"].startswith(f"no space left on device writing {state_root / 'full'}")
    assert not (tmp_path / "out" / "full").exists()  # refused before the output dir was allocated
