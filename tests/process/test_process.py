"""forkpoint.process: its re-exports load on first use, so a light submodule does not load the supervisor."""

from __future__ import annotations

import subprocess
import sys

import pytest

import forkpoint.process as process


def test_every_re_export_resolves_to_its_home() -> None:
    from forkpoint.process import environment, supervise, tree

    assert process.run_supervised is supervise.run_supervised
    assert process.ProcessResult is supervise.ProcessResult
    assert process.sanitized_env is environment.sanitized_env
    assert process.SUPERVISION_ENV == tree.SUPERVISION_ENV
    assert sorted(process.__all__) == sorted(process._HOMES)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        process.nothing_here  # noqa: B018


def test_importing_childenv_does_not_load_the_supervisor() -> None:
    code = ("import sys, forkpoint.process.childenv; "
            "print(sorted(m for m in sys.modules if m.startswith('forkpoint.process')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "forkpoint.process.childenv" in loaded and "forkpoint.process.supervise" not in loaded
