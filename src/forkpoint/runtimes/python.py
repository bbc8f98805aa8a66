"""Install and probe verified Python agents (PyPI packages) as venvs in forkpoint's runtime cache.

Same layout and manifest as the npm runtimes (forkpoint.runtimes.base): ``<cache_root>/<agent>/<version>/`` is a
venv holding the package, with a ``forkpoint-runtime.json`` whose entrypoint is the venv's ``bin/python`` (the
companion runners run on it; forkpoint never imports an agent into its own process). The venv is created with
the Python the version needs (pyenv's ``~/.pyenv/versions/X.Y.*``, else ``pythonX.Y`` on PATH) and filled by
``uv`` (much faster than pip for large dependency trees; installed from PyPI into ``<cache_root>/.tools/uv``
when it is not on PATH), in a staging dir renamed into place, so a partial install never looks complete.
The installed version is probed with ``importlib.metadata`` inside the venv.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from forkpoint.adapters.spec import PythonPackage
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.process.reaper import die_with_parent_hook
from forkpoint.runtimes.base import PROBE_TIMEOUT_S, Runtime, cache_root, now, run_probe, stage_into

UV_VERSION = "0.13.8"
INSTALL_TIMEOUT_S = 1800.0
ENTRYPOINT = "bin/python"


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", name))


def find_python(minor: str, pyenv_root: Path | None = None) -> Path:
    """The newest ``X.Y.*`` interpreter: pyenv's versions first, then ``pythonX.Y`` on PATH (checked by running it)."""
    root = pyenv_root or Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    candidates = sorted((p for p in (root / "versions").glob(f"{minor}.*") if re.fullmatch(rf"{re.escape(minor)}\.\d+",
                                                                                          p.name)),
                        key=lambda p: _version_key(p.name), reverse=True)
    paths = [p / "bin" / f"python{minor}" for p in candidates]
    on_path = shutil.which(f"python{minor}")
    if on_path:
        paths.append(Path(on_path))
    for path in paths:
        if path.is_file() and _reports_minor(path, minor):
            return path
    raise ReplayError(ErrorKind.CONFIGURATION,
                      f"no Python {minor} found (looked in {root / 'versions'} and for python{minor} on PATH); "
                      f"install Python {minor} (e.g. `pyenv install {minor}`)")


def _reports_minor(python: Path, minor: str) -> bool:
    try:
        done = subprocess.run([str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                              capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False,
                              stdin=subprocess.DEVNULL,
                              preexec_fn=die_with_parent_hook())
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and done.stdout.strip() == minor


def _run(argv: Sequence[str], what: str, env: Mapping[str, str] | None = None) -> str:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False,
                              env=dict(env) if env is not None else None, stdin=subprocess.DEVNULL,
                              preexec_fn=die_with_parent_hook())
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ReplayError(ErrorKind.CONFIGURATION, f"{what} failed: {error}") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip()[-2000:]
        raise ReplayError(ErrorKind.CONFIGURATION, f"{what} exited {done.returncode}: {tail}")
    return done.stdout


def ensure_uv() -> Path:
    """``uv`` on PATH, else forkpoint's own ``<cache_root>/.tools/uv`` venv (created from PyPI on first use)."""
    on_path = shutil.which("uv")
    if on_path:
        return Path(on_path)
    tools = cache_root() / ".tools"
    uv = tools / "uv" / "bin" / "uv"
    if uv.is_file() and os.access(uv, os.X_OK):
        return uv

    def fill(staging: Path) -> None:
        _run([sys.executable, "-m", "venv", str(staging)], "creating the uv tools venv")
        _run([str(staging / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
              f"uv=={UV_VERSION}"], f"pip install uv=={UV_VERSION}")

    stage_into(tools / "uv", ".uv.staging-", fill)
    return uv


def uv_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """uv must never download interpreters (offline machines; the pinned Python is passed explicitly)."""
    env = dict(os.environ if base is None else base)
    env.pop("VIRTUAL_ENV", None)
    env["UV_PYTHON_DOWNLOADS"] = "never"
    return env


def prerequisites(spec: PythonPackage, version: str) -> tuple[Path, Path]:
    """The interpreter the version needs and uv, found (or uv installed) before anything is staged."""
    return find_python(spec.python_version(version)), ensure_uv()


def install(agent: str, version: str, spec: PythonPackage, staging: Path, python: Path, uv: Path) -> dict[str, str]:
    """A relocatable venv on ``python`` in ``staging`` filled by ``uv``; the manifest of the result. uv's temp
    files (the build locks it keeps after building an sdist, ``uv-setuptools-*.lock``) go to a folder of their
    own, removed afterwards: nothing of an install outlives it in the user's TMPDIR."""
    requirement = f"{spec.package}=={version}"
    with tempfile.TemporaryDirectory(prefix="fp-uv-") as scratch:
        env = {**uv_env(), "TMPDIR": scratch}
        _run([str(uv), "venv", "--quiet", "--relocatable", "--allow-existing", "--python", str(python),
              str(staging)], f"uv venv ({python})", env)
        _run([str(uv), "pip", "install", "--quiet", "--python", str(staging / ENTRYPOINT), requirement,
              *spec.extras(version)], f"uv pip install {requirement}", env)
    staged = Runtime(agent, version, staging, staging / ENTRYPOINT, now())
    probed = probe_version(staged, spec)
    if probed != version:
        raise ReplayError(ErrorKind.CONFIGURATION, f"uv installed {spec.package} {probed}, not {version}")
    return {**staged.manifest(), "kind": "python-venv", "package": spec.package,
            "python": spec.python_version(version)}


_PROBE = "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))"


def probe_version(runtime: Runtime, spec: PythonPackage) -> str:
    """The agent distribution's version as the venv's own Python sees it (``importlib.metadata``)."""
    package = spec.package
    try:
        done = run_probe([str(runtime.entrypoint), "-I", "-c", _PROBE, package], PROBE_TIMEOUT_S)
        if done.returncode != 0:
            raise ValueError(f"exit {done.returncode}: {done.stderr.strip()[-500:]}")
        version = done.stdout.strip()
        if not re.fullmatch(r"\d+(\.\d+)*([-+.]?[0-9A-Za-z.]+)?", version):
            raise ValueError(f"unexpected version output {version[:200]!r}")
        return version
    except (OSError, subprocess.TimeoutExpired, ValueError) as error:
        message = f"{runtime.agent} {runtime.version}: probing {package} in {runtime.entrypoint} failed: {error}"
        raise ReplayError(ErrorKind.CONFIGURATION, message) from None
