"""flake8 for SWE-agent's linting edit bundles, installed from PyPI into forkpoint's runtime cache.

SWE-agent's ``windowed_edit_replace`` / ``windowed_edit_linting`` install scripts run ``pip install flake8`` in the
agent's container (unpinned), and their ``edit``/``insert`` run ``flake8 --isolated --select=...`` before and after
an edit. forkpoint pins the release that ``pip`` picked when SWE-agent 1.1.0 was published (2025-05-22: flake8
7.2.0, pyflakes 3.3, pycodestyle 2.13) and installs it once, like the agent runtimes: a venv on the Python running
forkpoint at ``<cache_root>/.tools/flake8-<version>``, filled by ``uv`` in a staging dir renamed into place (a
partial install never looks complete; a concurrent installer's finished copy is kept).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.runtimes.base import PROBE_TIMEOUT_S, cache_root, run_probe, stage_into

FLAKE8_VERSION = "7.2.0"


def flake8_venv(version: str = FLAKE8_VERSION) -> Path:
    return cache_root() / ".tools" / f"flake8-{version}"


def _usable(venv: Path, version: str) -> bool:
    executable = venv / "bin" / "flake8"
    if not executable.is_file():
        return False
    try:
        done = run_probe([str(executable), "--version"], PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and done.stdout.startswith(version)


def ensure_flake8(version: str = FLAKE8_VERSION) -> Path:
    """The venv holding flake8 ``version`` (installed on first use); its ``bin/flake8`` runs it."""
    from forkpoint.runtimes.python import _run, ensure_uv, uv_env

    venv = flake8_venv(version)
    if _usable(venv, version):
        return venv
    uv, env = ensure_uv(), uv_env()

    def fill(staging: Path) -> None:
        _run([str(uv), "venv", "--quiet", "--relocatable", "--allow-existing", "--python", sys.executable,
              str(staging)], "uv venv (flake8)", env)
        _run([str(uv), "pip", "install", "--quiet", "--python", str(staging / "bin" / "python"),
              f"flake8=={version}"], f"uv pip install flake8=={version}", env)

    # another process that finished first keeps its copy
    stage_into(venv, f".flake8-{version}.staging-", fill, done=lambda: _usable(venv, version))
    if not _usable(venv, version):
        raise ReplayError(ErrorKind.CONFIGURATION, f"flake8 {version} installed in {venv} does not run")
    return venv
