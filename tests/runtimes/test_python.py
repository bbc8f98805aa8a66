"""Python agent runtimes: the spec table, interpreter discovery, refusals, staging, and (e2e) the real venvs."""

from __future__ import annotations

import json
import stat
import tempfile
from pathlib import Path

import pytest

from forkpoint import runtimes
from forkpoint.adapters import agent_spec
from forkpoint.adapters.spec import PythonPackage
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.runtimes import python as runtimes_python
from forkpoint.runtimes.base import package_of


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FORKPOINT_RUNTIMES", str(tmp_path / "rt"))
    return tmp_path / "rt"


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_spec_table_and_python_per_version() -> None:
    mini = package_of("mini-swe-agent")
    assert isinstance(mini, PythonPackage)
    assert (mini.package, mini.python_version("1.17.5"), mini.python_version("2.4.6")) == ("mini-swe-agent", "3.11",
                                                                                         "3.12")
    openhands = package_of("openhands")
    assert isinstance(openhands, PythonPackage) and openhands.python_version("0.62.0") == "3.12"
    python_agents = {name for name in ("claude-code", "codex", "opencode", "pi", "mini-swe-agent", "openhands")
                     if isinstance(package_of(name), PythonPackage)}
    assert python_agents == {"mini-swe-agent", "openhands"}
    assert tuple(agent_spec("mini-swe-agent").versions) == ("1.17.5", "2.4.6")
    assert tuple(agent_spec("openhands").versions) == ("0.62.0",)
    with pytest.raises(ReplayError) as caught:
        package_of("swe-agent")  # not on PyPI: forkpoint cannot install it
    assert caught.value.kind is ErrorKind.UNSUPPORTED_AGENT


def test_unverified_version_is_refused_before_anything_is_installed(cache: Path) -> None:
    with pytest.raises(ReplayError) as caught:
        runtimes.install("mini-swe-agent", "1.1.0")
    assert caught.value.kind is ErrorKind.UNSUPPORTED_VERSION and caught.value.kind.exit_code == 11
    assert not cache.exists()


def test_find_python_prefers_the_newest_pyenv_version(tmp_path: Path) -> None:
    for version, minor in (("3.12.1", "3.12"), ("3.12.10", "3.12"), ("3.11.7", "3.11"), ("3.12.2-dev", "3.12")):
        _script(tmp_path / "versions" / version / "bin" / f"python{minor}", f"echo {minor}")
    found = runtimes_python.find_python("3.12", pyenv_root=tmp_path)
    assert found == tmp_path / "versions" / "3.12.10" / "bin" / "python3.12"
    _script(tmp_path / "versions" / "3.12.10" / "bin" / "python3.12", "echo 3.9")  # lies about its version
    assert runtimes_python.find_python("3.12", pyenv_root=tmp_path) == tmp_path / "versions/3.12.1/bin/python3.12"


def test_find_python_missing_is_a_configuration_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ReplayError) as caught:
        runtimes_python.find_python("3.99", pyenv_root=tmp_path)
    assert caught.value.kind is ErrorKind.CONFIGURATION and "3.99" in caught.value.message


def test_failed_install_leaves_no_runtime_behind(cache: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """uv fails after creating files in the staging dir: nothing that looks installed may remain."""
    fake_uv = _script(tmp_path / "bin" / "uv",
                      'for a; do last="$a"; done\n'
                      'if [ "$1" = venv ]; then mkdir -p "$last/bin" && '
                      'ln -s "$(command -v python3)" "$last/bin/python"; exit 0; fi\n'
                      'echo "resolution failed" >&2; exit 1')
    monkeypatch.setattr(runtimes_python, "ensure_uv", lambda: fake_uv)
    with pytest.raises(ReplayError) as caught:
        runtimes.install("mini-swe-agent", "1.17.5")
    assert caught.value.kind is ErrorKind.CONFIGURATION and "resolution failed" in caught.value.message
    assert runtimes.find("mini-swe-agent", "1.17.5") is None
    assert [p.name for p in (cache / "mini-swe-agent").iterdir()] == []


def test_probe_reports_the_distribution_version(cache: Path) -> None:
    python = _script(cache / "mini-swe-agent" / "2.4.6" / "bin" / "python", 'echo "2.4.6"')
    runtime = runtimes.Runtime("mini-swe-agent", "2.4.6", python.parents[1], python, "2026-01-01T00:00:00Z")
    (runtime.root / runtimes.MANIFEST_NAME).write_text(json.dumps(runtime.manifest()))
    assert runtimes.find("mini-swe-agent", "2.4.6") == runtime
    assert runtimes.probe_version(runtime) == "2.4.6"  # dispatched to importlib.metadata probing
    assert runtimes.install("mini-swe-agent", "2.4.6") == runtime  # idempotent: nothing is run
    _script(python, "echo 'Traceback: no module' >&2; exit 1")
    with pytest.raises(ReplayError) as caught:
        runtimes.probe_version(runtime)
    assert caught.value.kind is ErrorKind.CONFIGURATION and "no module" in caught.value.message


@pytest.mark.e2e
@pytest.mark.parametrize(("version", "minor"), [("1.17.5", "3.11"), ("2.4.6", "3.12")])
def test_installed_mini_runtimes_are_real_venvs(version: str, minor: str) -> None:
    runtime = runtimes.find("mini-swe-agent", version)
    if runtime is None:
        pytest.skip(f"mini-swe-agent {version} is not installed (forkpoint agents install mini-swe-agent@{version})")
    assert runtime.entrypoint == runtime.root / "bin" / "python"
    assert runtimes.probe_version(runtime) == version
    manifest = json.loads((runtime.root / runtimes.MANIFEST_NAME).read_text())
    assert manifest["kind"] == "python-venv" and manifest["python"] == minor
    assert (runtime.root / "pyvenv.cfg").read_text().count(f"version_info = {minor}.") == 1
    target = runtimes.resolve_entrypoint("mini-swe-agent", version, None)
    assert (target.entrypoint, target.version) == (runtime.entrypoint, version)
    other = "2.4.6" if version == "1.17.5" else "1.17.5"
    other_runtime = runtimes.find("mini-swe-agent", other)
    if other_runtime is not None:
        with pytest.raises(ReplayError) as caught:
            runtimes.resolve_entrypoint("mini-swe-agent", version, other_runtime.entrypoint)
        assert caught.value.kind.exit_code == 11


def test_a_release_is_installed_on_its_major_lines_python_and_a_verified_version_on_its_own(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """install and install_release share one install path; only the release gets its major line's interpreter
    pinned (runtimes.release_python): the venv uv is asked for names it."""
    log = tmp_path / "uv.log"
    fake_uv = _script(tmp_path / "bin" / "uv", f'echo "$*" >> {log}\necho "stopped here" >&2; exit 1')
    monkeypatch.setattr(runtimes_python, "ensure_uv", lambda: fake_uv)
    for install, version in ((runtimes.install_release, "2.3.0"), (runtimes.install, "1.17.5")):
        with pytest.raises(ReplayError, match="stopped here"):
            install("mini-swe-agent", version)
    release, verified = log.read_text().splitlines()
    assert f"--python {runtimes_python.find_python('3.12')} " in release
    assert f"--python {runtimes_python.find_python('3.11')} " in verified
    assert [p.name for p in (cache / "mini-swe-agent").iterdir()] == []


def test_uvs_temp_files_do_not_outlive_the_install(cache: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """uv keeps a build lock in its TMPDIR after building an sdist (``uv-setuptools-<hash>.lock``: installing
    openhands-sdk 1.5.0 left two in the test session's TMPDIR); an install gives uv a temp folder of its own."""
    fake_uv = _script(tmp_path / "bin" / "uv", 'touch "${TMPDIR:-/tmp}/uv-setuptools-0123456789abcdef.lock"\n'
                                               'echo "stopped here" >&2; exit 1')
    monkeypatch.setattr(runtimes_python, "ensure_uv", lambda: fake_uv)
    with pytest.raises(ReplayError, match="stopped here"):
        runtimes.install("mini-swe-agent", "1.17.5")
    assert not list(Path(tempfile.gettempdir()).glob("uv-setuptools-*.lock"))
