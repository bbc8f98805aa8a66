"""Which siblings an npm release is installed with (forkpoint.runtimes.npm.lockstep_siblings): a pure choice over
the release's ``dependencies`` and the versions the registry publishes."""

from __future__ import annotations

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
