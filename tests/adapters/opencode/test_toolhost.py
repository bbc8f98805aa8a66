"""The tool host runs OpenCode's built-in tools only: a project's own OpenCode configuration never loads (issue 29).

A real project (dark-factory, replayed from its public 1.2.5 recording) names an npm plugin and MCP servers in its
``opencode.jsonc``: the old tool host made OpenCode install the plugin (and start the servers), the install failed
offline and every call failed. Observed on the real binary: no plugin runs (canary), no local MCP server starts
(canary), no remote MCP server is reached (a loopback listener), nothing is written into the workspace or installed
into the cache, and the tools' texts are the exact ones OpenCode gives (a project skill is still found, as the
original found it). A release that loads a project's plugins whatever the flags say refuses the call instead.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from forkpoint import runtimes
from forkpoint.adapters.opencode.tools import PROJECT_PLUGIN, OpenCodeToolExecutor, project_plugins
from forkpoint.core.errors import ReplayError
from forkpoint.core.model import RunContext, ToolCall
from forkpoint.core.releases import number
from forkpoint.process import childenv


class Listener:
    """A loopback listener that records the first line of every request it gets, then closes the connection."""

    def __init__(self) -> None:
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(16)
        self.requests: list[str] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.getsockname()[1]}"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            conn.settimeout(2)
            with contextlib.suppress(OSError):
                self.requests.append(conn.recv(4096).split(b"\r\n")[0].decode("latin-1"))
            conn.close()

    def close(self) -> None:
        self.server.shutdown(socket.SHUT_RDWR)
        self.server.close()
        self.thread.join(5)


@pytest.fixture()
def listener() -> Iterator[Listener]:
    served = Listener()
    try:
        yield served
    finally:
        served.close()


def project(workspace: Path, canaries: Path, listener: Listener, *, plugins: bool) -> None:
    """A project configured the way users configure theirs: MCP servers, an npm plugin and a local plugin file."""
    (workspace / ".opencode").mkdir()
    if plugins:
        plugin = (f"import {{ writeFileSync }} from 'node:fs';\nwriteFileSync('{canaries}/plugin-ran-' + process.pid, "
                  "'');\nexport const Planted = async () => ({});\n")
        (workspace / ".opencode" / "plugins").mkdir()
        (workspace / ".opencode" / "plugins" / "planted.js").write_text(plugin)
        (workspace / "opencode.jsonc").write_text(
            '// the project\'s own configuration\n{\n  "$schema": "https://opencode.ai/config.json",\n'
            '  "plugin": ["opencode-pty", "./.opencode/plugins/planted.js"],  // OpenCode installs it from npm\n}\n')
    mcp = {"mcp": {"local": {"type": "local", "command": ["touch", str(canaries / "mcp-ran")]},
                   "remote": {"type": "remote", "url": f"{listener.url}/mcp", "enabled": True, "oauth": False}}}
    (workspace / ".opencode" / "opencode.json").write_text(json.dumps(mcp))
    skill = workspace / ".opencode" / "skills" / "release-notes"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: release-notes\ndescription: Write release notes\n---\nWrite them.\n")
    (workspace / "notes.txt").write_text("alpha\n")


def tree(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


def setup(tmp_path: Path, listener: Listener, version: str, plugins: bool) -> tuple[Path, Path, OpenCodeToolExecutor]:
    runtime = runtimes.find("opencode", version)
    if runtime is None:
        pytest.skip(f"opencode {version} is not installed")
    workspace, canaries = tmp_path / "ws", tmp_path / "canaries"
    workspace.mkdir()
    canaries.mkdir()
    project(workspace, canaries, listener, plugins=plugins)
    executor = OpenCodeToolExecutor(RunContext(workspace, tmp_path / "state", tmp_path / "out"), runtime.entrypoint,
                                    error_events=not version.startswith("1.2."), version=number(version))
    return workspace, canaries, executor


def call(call_id: str, tool: str, **arguments: Any) -> ToolCall:
    return ToolCall(call_id, tool, arguments, None, native={"callID": call_id})


READ_TEXT = {"1.18.33": "<content>\n1: alpha\n\n(End of file - total 1 lines)\n</content>",
             "1.2.6": "<content>1: alpha\n2: \n\n(End of file - total 2 lines)\n</content>"}


@pytest.mark.parametrize(("version", "plugins"), [("1.2.6", True), ("1.18.33", False)])
def test_a_projects_plugins_and_mcp_servers_never_load_in_the_tool_host(version: str, plugins: bool, tmp_path: Path,
                                                                         listener: Listener) -> None:
    """1.2.6 (the line of the real dark-factory recording) with plugins and MCP servers; 1.18.33 with MCP servers
    (its plugins: the next test). The old tool host died installing the plugin (1.2.6), or started the servers."""
    workspace, canaries, executor = setup(tmp_path, listener, version, plugins)
    before = tree(workspace)
    try:
        with childenv.passing({}, temp_dir=tmp_path / "run-tmp"):
            read = executor.run(call("c1", "read", filePath=str(workspace / "notes.txt")))
            printed = executor.run(call("c2", "bash", command="printf 'ok\\n'", description="ok"))
            skill = executor.run(call("c3", "skill", name="release-notes"))
    finally:
        executor.close()
    assert read.content == f"<path>{workspace / 'notes.txt'}</path>\n<type>file</type>\n{READ_TEXT[version]}"
    assert (printed.content, printed.return_code, printed.is_error) == ("ok\n", 0, False)
    folder = workspace / ".opencode" / "skills" / "release-notes"
    base = f"file://{folder}" if version.startswith("1.2.") else str(folder)  # as the original found it
    assert not skill.is_error and str(skill.content).startswith(
        '<skill_content name="release-notes">\n# Skill: release-notes\n\nWrite them.\n\n'
        f"Base directory for this skill: {base}\n"), skill.content
    assert sorted(path.name for path in canaries.iterdir()) == []  # no plugin ran, no MCP server started
    assert listener.requests == []  # no remote MCP server reached
    assert tree(workspace) == before  # no .gitignore, package.json or node_modules put into the project
    # the plugin was not installed into the tool host's cache (OpenCode's own package.json there names nothing else)
    state = tmp_path / "state"
    assert [path for path in state.rglob("*") if path.name == "node_modules" or "opencode-pty" in path.name] == []
    assert [path for path in state.rglob("package.json") if b"opencode-pty" in path.read_bytes()] == []


def test_a_release_that_loads_project_plugins_anyway_refuses_before_any_effect(tmp_path: Path,
                                                                                 listener: Listener) -> None:
    """1.18's newer config service loads a project's plugins whatever the flags say (measured on 1.18.33): each call
    is a stale fallback naming them, and no OpenCode starts."""
    workspace, canaries, executor = setup(tmp_path, listener, "1.18.33", True)
    try:
        with pytest.raises(ReplayError) as caught:
            executor.run(call("c1", "bash", command="touch made.txt", description="x"))
    finally:
        executor.close()
    assert caught.value.stale_fallback and caught.value.before_effect
    assert caught.value.message.startswith(f"{PROJECT_PLUGIN}: OpenCode 1.18.33 would load the project's plugins")
    assert "opencode.jsonc (its plugin list), .opencode/plugins/planted.js" in caught.value.message
    assert executor.hosts == {}  # no tool host was made
    assert not (workspace / "made.txt").exists() and list(canaries.iterdir()) == []


def test_plugin_sources_are_found_without_following_links(tmp_path: Path) -> None:
    (tmp_path / ".opencode").mkdir()
    assert project_plugins(tmp_path) == []
    (tmp_path / "opencode.json").write_text('{"mcp": {}}')
    (tmp_path / ".opencode" / "plugin").mkdir()
    (tmp_path / ".opencode" / "plugin" / "a.ts").write_text("")
    (tmp_path / ".opencode" / "opencode.jsonc").symlink_to(tmp_path / "opencode.json")
    (tmp_path / "opencode.json").write_text('{"\\u0070lugin": ["x"]}')  # an escape spells the key
    assert project_plugins(tmp_path)[0] == "opencode.json (its plugin list)"
    (tmp_path / "opencode.json").write_text('{"mcp": {}}')
    (tmp_path / "opencode.jsonc").write_bytes(b"{}" + b" " * (4 * 1024 * 1024))
    assert project_plugins(tmp_path) == ["opencode.jsonc (its plugin list)",  # too large to read: counts
                                         ".opencode/opencode.jsonc (not a plain file or folder)",
                                         ".opencode/plugin/a.ts"]
