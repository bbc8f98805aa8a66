"""Which siblings an npm release is installed with (forkpoint.runtimes.npm.lockstep_siblings): a pure choice over
the release's ``dependencies`` and the versions the registry publishes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from forkpoint.adapters.spec import NpmPackage
from forkpoint.core.errors import ReplayError
from forkpoint.runtimes import npm

#: @earendil-works/pi-coding-agent 1.0.3's dependencies (abridged), as the registry gives them
PI_103 = {"@earendil-works/chord": "^1.0.3", "@earendil-works/pi-agent-core": "^1.0.3",
          "@earendil-works/pi-ai": "^1.0.3", "@earendil-works/pi-codemode": "^1.0.3",
          "@earendil-works/pi-tui": "~1.0.3", "@earendil-works/pi-schema": "^1.0.0", "chalk": "6.0.0",
          "@other-scope/pi-ai": "^1.0.3", "@earendil-works/pi-mcp": "1.0.3", "@earendil-works/odd": ["^1.0.3"]}
PUBLISHED = {"@earendil-works/chord": ["0.99.1", "1.5.0"], "@earendil-works/pi-agent-core": ["1.0.3", "1.6.0"],
             "@earendil-works/pi-ai": ["1.0.3", "1.6.0"], "@earendil-works/pi-codemode": ["1.0.3", "1.6.0"],
             "@earendil-works/pi-tui": ["1.0.3"], "@earendil-works/pi-schema": ["1.0.0", "1.5.0"],
             "@earendil-works/pi-mcp": ["1.0.3"], "@other-scope/pi-ai": ["1.0.3"], "@earendil-works/odd": ["1.0.3"]}


def test_a_release_is_installed_with_its_scopes_siblings_at_its_own_version() -> None:
    asked: list[str] = []

    def published(name: str) -> list[str]:
        asked.append(name)
        return PUBLISHED[name]

    pins = npm.lockstep_siblings("@earendil-works/pi-coding-agent", "1.0.3", PI_103, published)
    # chord has no 1.0.3 (left to its range); pi-schema asks for another version; chalk and another scope's
    # package are not siblings; a malformed range is ignored
    assert pins == ["@earendil-works/pi-agent-core@1.0.3", "@earendil-works/pi-ai@1.0.3",
                    "@earendil-works/pi-codemode@1.0.3", "@earendil-works/pi-mcp@1.0.3",
                    "@earendil-works/pi-tui@1.0.3"]
    assert "@other-scope/pi-ai" not in asked and "chalk" not in asked


def test_an_unscoped_package_has_no_siblings() -> None:
    assert npm.lockstep_siblings("opencode-ai", "1.18.30", {"opencode-linux-x64": "1.18.30"},
                                 lambda name: ["1.18.30"]) == []


def test_an_undeclared_sibling_is_pinned_only_where_its_own_version_is_published() -> None:
    """Pi 0.85.0's SDK imports @earendil-works/pi-server without declaring it (0.85.1 declares ``^0.85.1``): it is
    installed at 0.85.0 with it; a release whose version it never had (0.84.4) gets none, a declared one once."""
    servers = {"@earendil-works/pi-server": ["0.85.0", "0.85.1"], "@earendil-works/pi-ai": ["0.84.4", "0.85.0",
                                                                                           "0.85.1"]}
    pin = lambda version, dependencies: npm.lockstep_siblings(  # noqa: E731
        "@earendil-works/pi-coding-agent", version, dependencies, servers.__getitem__,
        ("@earendil-works/pi-server", "other-scope-server"))
    assert pin("0.85.0", {"@earendil-works/pi-ai": "^0.85.0"}) == [
        "@earendil-works/pi-ai@0.85.0", "@earendil-works/pi-server@0.85.0"]
    assert pin("0.85.1", {"@earendil-works/pi-ai": "^0.85.1", "@earendil-works/pi-server": "^0.85.1"}) == [
        "@earendil-works/pi-ai@0.85.1", "@earendil-works/pi-server@0.85.1"]
    assert pin("0.84.4", {"@earendil-works/pi-ai": "^0.84.4"}) == ["@earendil-works/pi-ai@0.84.4"]


def _linked_opencode(staging: Path, target: Path | None = None) -> Path:
    """An OpenCode 1.1.16-style install: its postinstall replaced ``bin/opencode`` with an ABSOLUTE link to the
    platform binary in the (staging) prefix."""
    package = staging / "node_modules" / "opencode-ai"
    (package / "bin").mkdir(parents=True)
    (package / "package.json").write_text(json.dumps({"name": "opencode-ai", "version": "1.1.16",
                                                      "bin": {"opencode": "bin/opencode"}}))
    native = staging / "node_modules" / "opencode-linux-x64" / "bin" / "opencode"
    native.parent.mkdir(parents=True)
    native.write_bytes(b"\x7fELF" + b"\0" * 60)
    (package / "bin" / "opencode").symlink_to(target or native.absolute())
    return native


def test_a_bin_linked_into_the_staging_prefix_is_copied_in_so_it_survives_the_rename(tmp_path: Path) -> None:
    """1.0.162 and 1.1.16 were 'not valid' after their install: the link dangled once the prefix was renamed."""
    from forkpoint.adapters.opencode.spec import SPEC

    assert isinstance(SPEC.runtime, NpmPackage)
    staging, final = tmp_path / ".1.1.16.staging", tmp_path / "1.1.16"
    native = _linked_opencode(staging)
    entry = npm.entrypoint(staging, SPEC.runtime)
    relative = entry.relative_to(staging)
    staging.rename(final)
    installed = final / relative
    assert relative.as_posix() == "node_modules/opencode-ai/bin/opencode"
    assert not installed.is_symlink() and installed.is_file() and os.access(installed, os.X_OK)
    assert installed.read_bytes() == (final / native.relative_to(staging)).read_bytes()


def test_a_bin_linked_outside_the_prefix_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    from forkpoint.adapters.opencode.spec import SPEC

    assert isinstance(SPEC.runtime, NpmPackage)
    outside = tmp_path / "outside"
    outside.write_bytes(b"\x7fELF" + b"\0" * 60)
    outside.chmod(0o600)
    staging = tmp_path / "staging"
    _linked_opencode(staging, target=outside)
    with pytest.raises(ReplayError, match="not a native executable inside the install"):
        npm.entrypoint(staging, SPEC.runtime)
    assert outside.stat().st_mode & 0o777 == 0o600
