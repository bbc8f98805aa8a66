"""flake8 for SWE-agent's linting edit bundles: installed once from PyPI (real uv, real PyPI or uv's cache) into a
runtime cache, reused, and a broken copy replaced — never a partial install left looking complete."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from forkpoint.runtimes import flake8 as lint
from forkpoint.runtimes.base import cache_root


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cached_uv = cache_root() / ".tools" / "uv" / "bin" / "uv"  # the machine's uv, not a new install per test
    if cached_uv.is_file():
        (tmp_path / "uvbin").mkdir()
        (tmp_path / "uvbin" / "uv").symlink_to(cached_uv)
        monkeypatch.setenv("PATH", f"{tmp_path / 'uvbin'}:{os.environ['PATH']}")
    monkeypatch.setenv("FORKPOINT_RUNTIMES", str(tmp_path / "rt"))
    return tmp_path / "rt"


def _version(venv: Path) -> str:
    return subprocess.run([str(venv / "bin" / "flake8"), "--version"], capture_output=True, text=True,
                          check=True, timeout=120).stdout


def test_a_broken_copy_is_replaced_by_the_pinned_flake8_which_is_then_reused(cache: Path) -> None:
    venv = cache / ".tools" / f"flake8-{lint.FLAKE8_VERSION}"
    fake = venv / "bin" / "flake8"
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\necho 0.0.1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    assert lint.ensure_flake8() == venv
    assert _version(venv).startswith(f"{lint.FLAKE8_VERSION} ")
    before = fake.stat().st_ino
    assert lint.ensure_flake8() == venv and fake.stat().st_ino == before  # reused, not reinstalled
    assert [p.name for p in venv.parent.iterdir() if "staging" in p.name] == []
