"""What of forkpoint's environment a replayed command or the continued agent may see: an allowlist.

A credential's name says nothing reliable (``DB_PASS``, ``SSH_PRIVATE_KEY``, ``DATABASE_URL=postgres://u:pw@h``,
``HTTPS_PROXY=http://user:pass@proxy``), and replayed commands come from strangers' trajectories. So children
get only the names below from the host, whatever their values:

- where programs are and how text looks: ``PATH``, ``HOME`` (adapters replace it with the agent's isolated
  home under the state dir), ``LANG``, ``LANGUAGE``, ``LC_*``, ``TERM``, ``TZ``, ``TMPDIR``, ``USER``,
  ``LOGNAME``, ``SHELL`` (Claude Code picks its Bash tool's shell from it), ``NO_PROXY``;
- trust-store file paths (``SSL_CERT_FILE``, ``NODE_EXTRA_CA_CERTS``, ...), so tools behind a TLS-inspecting
  gateway still verify certificates;
- toolchain locations that a replayed ``cargo test`` / ``go test`` / ``nvm`` shell needs once HOME is
  isolated (``CARGO_HOME``, ``RUSTUP_HOME``, ``GOPATH``, ``JAVA_HOME``, ``PYENV_ROOT``, ...): paths, not secrets.

Everything else is dropped. Each adapter then adds the variables its agent needs (in the adapter's own
folder: ``CLAUDE_CONFIG_DIR``, the bridge URL and a dummy key, ``MSWEA_*``, ...), and SWE-agent's tools
export what the recording itself set (``agent.tools.env_variables``). The user passes more with
``--env NAME`` (the host's value) or ``--env NAME=VALUE`` (repeatable; ``env`` in a request file): those are
applied by ``sanitized_env`` for the duration of the run (``passing``), after the allowlist, before the
adapter's own variables (an adapter's bridge URL or key always wins). Result metadata lists the names only.

``TMPDIR`` of every child of a run is the run's own folder (``passing(..., temp_dir=)``: ``<state dir>/tmp``,
removed when the run ends), not the host's temp dir: agents and tools leave files there (Bun's extracted native
addons, OpenHands' editor history, Claude Code's shell snapshots) and nothing a run starts may outlive it.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from forkpoint.core.errors import configuration

BASE_NAMES = frozenset({
    "PATH", "HOME", "LANG", "LANGUAGE", "TERM", "TZ", "TMPDIR", "USER", "LOGNAME", "SHELL", "NO_PROXY", "no_proxy",
})
BASE_PREFIXES = ("LC_",)
TRUST_STORE_NAMES = frozenset({
    "SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO",
    "PIP_CERT",
})
TOOLCHAIN_NAMES = frozenset({
    "CARGO_HOME", "RUSTUP_HOME", "RUSTUP_TOOLCHAIN", "GOROOT", "GOPATH", "GOBIN", "JAVA_HOME", "PYENV_ROOT",
    "PYENV_VERSION", "NVM_DIR", "NVM_BIN", "VOLTA_HOME", "PNPM_HOME", "BUN_INSTALL", "GEM_HOME", "GEM_PATH",
})
ALLOWED_NAMES = BASE_NAMES | TRUST_STORE_NAMES | TOOLCHAIN_NAMES

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def allowed(name: str) -> bool:
    return name in ALLOWED_NAMES or name.startswith(BASE_PREFIXES)


def allowlisted(base: Mapping[str, str]) -> dict[str, str]:
    """The allowlisted part of ``base`` (see the module docstring)."""
    return {name: value for name, value in base.items() if allowed(name)}


@dataclass(frozen=True)
class PassedEnv:
    """``--env`` entries resolved against the host: what is passed, and the names asked for but not set."""

    values: dict[str, str] = field(default_factory=dict)
    missing: tuple[str, ...] = ()

    def metadata(self) -> dict[str, list[str]]:
        """Names only: a value never reaches result metadata, the journal or the CLI output."""
        return {"passed": sorted(self.values), "missing": list(self.missing)}


def check_specs(specs: Sequence[str]) -> None:
    """Refuse a malformed ``--env`` entry (a request-time check; values are not looked at beyond NUL)."""
    for spec in specs:
        name, sep, value = spec.partition("=")
        if not _NAME.fullmatch(name):
            raise configuration(f"env entry {name[:80]!r}: expected NAME or NAME=VALUE (NAME: letters, digits, _)")
        if sep and "\0" in value:
            raise configuration(f"env entry {name}: the value contains a NUL byte")


def resolve(specs: Sequence[str], host: Mapping[str, str]) -> PassedEnv:
    """``NAME`` takes the host's value (listed as missing when unset), ``NAME=VALUE`` the given one."""
    check_specs(specs)
    values: dict[str, str] = {}
    missing: list[str] = []
    given = dict(spec.partition("=")[::2] for spec in specs if "=" in spec)  # a given value wins over the host's
    for spec in specs:
        if "=" in spec or spec in given:
            continue
        if spec in host:
            values[spec] = host[spec]
        elif spec not in missing:
            missing.append(spec)
    values.update(given)
    return PassedEnv(values, tuple(missing))


_lock = threading.Lock()
_passed: dict[str, str] = {}


def passed() -> dict[str, str]:
    """The ``--env`` values of the run in progress (a copy)."""
    with _lock:
        return dict(_passed)


@contextlib.contextmanager
def passing(values: Mapping[str, str], *, temp_dir: Path | None = None) -> Iterator[None]:
    """Make ``values`` part of every sanitized child environment while a run is in progress (one run at a time:
    the CLI runs one; the previous values come back afterwards). ``temp_dir`` (a new folder in an existing one)
    becomes the children's ``TMPDIR``, removed with all it holds at the end."""
    if temp_dir is not None:
        if os.path.lexists(temp_dir):  # left by a run that was killed
            remove_tree(temp_dir)
        temp_dir.mkdir(mode=0o700)
        values = {**values, "TMPDIR": str(temp_dir)}
    with _lock:
        before = dict(_passed)
        _passed.clear()
        _passed.update(values)
    try:
        yield
    finally:
        with _lock:
            _passed.clear()
            _passed.update(before)
        if temp_dir is not None:
            remove_tree(temp_dir)


@contextlib.contextmanager
def private_temp_dir(prefix: str) -> Iterator[Path]:
    """A new 0700 folder in the host's temp dir for a short-lived child outside any run (a version probe), removed
    with all it holds afterwards: what the child leaves in its ``TMPDIR`` goes with it."""
    import tempfile  # with shutil, imported where used: a prepare-only (no child) loads neither

    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        remove_tree(path)


def remove_tree(path: Path) -> None:
    """Remove a folder that children wrote, links not followed (``shutil.rmtree`` works on fds; a link in its
    place is unlinked); what they made unwritable or unreadable is opened up and removed on a second pass."""

    def grant(_function: object, failed: str, _error: object) -> None:
        for folder in (os.path.dirname(failed), failed):
            if os.path.isdir(folder) and not os.path.islink(folder):
                with contextlib.suppress(OSError):
                    os.chmod(folder, 0o700)

    for _attempt in range(3):
        if not os.path.isdir(path) or os.path.islink(path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            return
        with contextlib.suppress(OSError):  # empty (no child ran, as in a prepare-only): one rmdir does it
            os.rmdir(path)
            return
        import shutil

        shutil.rmtree(path, onerror=grant)
