"""Bounded capture and the size-capped private log of a supervised command's output."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.process.capture import Capture, Log


def test_a_capture_keeps_the_head_and_counts_the_rest() -> None:
    capture = Capture(5)
    capture.feed(b"abc")
    assert not capture.truncated
    capture.feed(b"defg")
    assert (bytes(capture.data), capture.total, capture.truncated) == (b"abcde", 7, True)


def test_the_log_stops_at_its_limit_and_is_private(tmp_path: Path) -> None:
    path = tmp_path / "out.log"
    path.write_bytes(b"older and longer content")
    path.chmod(0o644)
    log = Log(path, 4)
    log.write(b"abc")
    assert not log.truncated
    log.write(b"def")
    log.close()
    assert (path.read_bytes(), log.truncated, log.written) == (b"abcd", True, 4)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_the_log_never_follows_a_link(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("keep")
    (tmp_path / "out.log").symlink_to(target)
    with pytest.raises(ReplayError) as caught:
        Log(tmp_path / "out.log", 10)
    assert caught.value.kind is ErrorKind.EXECUTOR
    assert target.read_text() == "keep"
