"""``--sandbox bwrap --image``: a mini-swe-agent recording whose command needs a tool only the recording's image has
replays with the same observations as the recording (REAL bwrap, REAL mini-swe-agent 2.4.6, an OCI image this test
writes from Debian's busybox package in apt's cache — or the host's /bin/sh — and caches between runs)."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path
from typing import Any

import pytest

from forkpoint import runtimes
from forkpoint.run.engine import execute
from forkpoint.run.request import build_request
from forkpoint.sandbox.image import CACHE_ENV
from forkpoint.testing.held_out import HeldOut
from forkpoint.testing.images import busybox_root, entry, layer, oci_tarball, tree_layer

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is missing")]

FIXTURE = Path(__file__).parents[1] / "fixtures" / "mini_swe_agent" / "2.4.6" / "basic"
TOOL = "#!/bin/sh\n# only in the image: the recording's environment had it\nexec cat \"$@\"\n"


@pytest.fixture(scope="module")
def image(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test image (two layers: busybox + libraries, then /usr/local/bin/only-in-image and a whiteout), kept
    in pytest's cache folder: the same bytes every run, so its unpacked root is reused by digest."""
    store = getattr(pytestconfig, "cache", None)
    cache = Path(store.mkdir("forkpoint-test-images")) if store is not None else tmp_path_factory.mktemp("images")
    path = cache / "busybox-only-in-image-2.oci.tar"  # -2: setsid and nc applets (the held-out checks)
    if not path.is_file():
        build = tmp_path_factory.mktemp("image-build")
        busybox_root(build / "root")
        (build / "root" / "etc").mkdir()
        (build / "root" / "etc" / "removed-by-layer-2").write_text("lower\n")
        upper = layer([entry("usr/local/bin/only-in-image", data=TOOL.encode(), mode=0o755),
                       entry("etc/.wh.removed-by-layer-2"), entry("tmp/", kind=tarfile.DIRTYPE, mode=0o1777)])
        oci_tarball(path.with_suffix(".part"), [tree_layer(build / "root"), upper]).rename(path)
        shutil.rmtree(build)
    return path


def at_testbed(tmp_path: Path, command: str = "only-in-image calc.py") -> Path:
    """The real recording, made in /testbed, its first command the image's own tool (same output as ``cat``)."""
    text = (FIXTURE / "trajectory.traj.json").read_text().replace("cat calc.py", json.dumps(command)[1:-1])
    data = json.loads(text)
    data["info"]["config"]["environment"]["cwd"] = "/testbed"
    path = tmp_path / "image.traj.json"
    path.write_text(json.dumps(data))
    return path


def replay(tmp_path: Path, run_id: str, trajectory: Path | None = None, **values: Any) -> list[dict[str, Any]]:
    workspace = tmp_path / run_id / "ws"
    shutil.copytree(FIXTURE / "workspace-initial", workspace)
    result = execute(build_request({
        "agent": "mini-swe-agent", "trajectory": str(trajectory or at_testbed(tmp_path)), "after_step": 1,
        "workspace": str(workspace), "state_dir": str(tmp_path / "state"), "output_dir": str(tmp_path / "out"),
        "run_id": run_id, "sandbox": "bwrap", "replay_only": True, **values}, source="test"))
    assert result.failure is None, result.failure
    rows: list[dict[str, Any]] = json.loads((Path(result.output_dir or "") / "observations.json").read_text())[
        "observations"]
    return rows


def test_a_tool_only_the_image_has_gives_the_recorded_observations(
        image: Path, tmp_path: Path, pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch) -> None:
    if runtimes.find("mini-swe-agent", "2.4.6") is None:
        pytest.skip("mini-swe-agent 2.4.6 is not installed")
    monkeypatch.setenv(CACHE_ENV, str(image.parent / "unpacked"))
    in_image = replay(tmp_path, "image", image=str(image))
    assert [row["exact"] for row in in_image] == [True], in_image
    unpacked = next((image.parent / "unpacked").glob("sha256-*")) / "rootfs"
    assert not (unpacked / "etc" / "removed-by-layer-2").exists()  # the upper layer's whiteout
    assert [row["exact"] for row in replay(tmp_path, "rootfs", rootfs=str(unpacked))] == [True]  # --rootfs DIR
    on_host = replay(tmp_path, "host")  # the host's root: no such tool
    assert [row["exact"] for row in on_host] == [False]
    assert "only-in-image" in json.dumps(on_host[0]) and "not found" in json.dumps(on_host[0])


def test_replay_and_continue_inside_the_image(image: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The continued mini-swe-agent (a host venv on the host's loader, behind the bridge relay) runs the
    recording's next turns in the image: its sed and the image's own tool work there."""
    from forkpoint.testing import ScriptedModel

    if runtimes.find("mini-swe-agent", "2.4.6") is None:
        pytest.skip("mini-swe-agent 2.4.6 is not installed")
    monkeypatch.setenv(CACHE_ENV, str(image.parent / "unpacked"))
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-upstream-key")
    script = json.loads((FIXTURE / "script.json").read_text())
    model = ScriptedModel(script["turns"][3:], seed=script["seed"], step_mode="counter", model="scripted",
                          tools_required=script["tools_required"])
    workspace = tmp_path / "ws"
    shutil.copytree(FIXTURE / "workspace-initial", workspace)
    trajectory = at_testbed(tmp_path)
    with model.serve() as url:
        result = execute(build_request({
            "agent": "mini-swe-agent", "trajectory": str(trajectory), "after_step": 3, "workspace": str(workspace),
            "state_dir": str(tmp_path / "state"), "output_dir": str(tmp_path / "out"), "run_id": "run",
            "sandbox": "bwrap", "image": str(image), "upstream": "openai-chat", "upstream_url": f"{url}/v1"},
            source="test"))
    assert result.failure is None, result.failure
    assert (result.phase, result.agent_status) == ("continued", "completed")
    assert result.metadata["sandbox"]["root"]["digest"].startswith("sha256:")
    assert result.metadata["model_bridge"]["validated"] >= 1
    assert (workspace / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"  # the continued sed ran


def test_a_replayed_command_cannot_get_out_of_the_image(image: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The held-out checks under ``--image``: the recording's command (busybox's sh, nc, setsid inside the image)
    cannot write outside the workspace, read a canary in the host HOME, reach the host's loopback or non-loopback
    address, or leave a process behind."""
    if runtimes.find("mini-swe-agent", "2.4.6") is None:
        pytest.skip("mini-swe-agent 2.4.6 is not installed")
    monkeypatch.setenv(CACHE_ENV, str(image.parent / "unpacked"))
    with HeldOut(tmp_path) as bait:
        trajectory = at_testbed(tmp_path, "; ".join(bait.commands()))
        rows = replay(tmp_path, "held-out", trajectory, image=str(image))
        fresh = json.dumps(rows[0])
        if "nc: not found" in fresh:
            pytest.skip("the test image has no busybox (no .deb in apt's cache): only sh, nothing to probe with")
        for outcome in ("outside-refused", "home-refused", "canary-hidden", "loopback-unreachable", "started"):
            assert outcome in fresh, fresh
        assert bait.address is None or "address-unreachable" in fresh
        assert bait.violations([fresh]) == []


def test_one_sandbox_serves_a_replays_commands_in_the_image(image: Path, tmp_path: Path) -> None:
    """The shared executor's supervisor (forkpoint's host interpreter, on the host's loader) runs inside an image
    root: the image's own tool and environment, one PID namespace and one /tmp for the replay's commands."""
    from forkpoint.sandbox import open_sandbox

    workspace = tmp_path / "ws"
    workspace.mkdir()
    executor = open_sandbox("bwrap", workspace, "/testbed", image=str(image)).executor()
    try:
        # PPID 2: started by the supervisor, bwrap's init's child (with a bwrap per command the shell is pid 2 itself)
        first = executor.run(["/bin/sh", "-c", "echo from-image > /tmp/plant; only-in-image /tmp/plant; echo $PPID"],
                             cwd="/testbed", env={"PATH": "/nowhere"}, timeout_s=60)
        second = executor.run(["/bin/sh", "-c", "cat /tmp/plant; echo $PPID"], cwd="/testbed",
                              env={"PATH": "/nowhere"}, timeout_s=60)
    finally:
        executor.close()
    assert first.returncode == 0 and second.returncode == 0, (first, second)
    assert first.stdout == second.stdout == b"from-image\n2\n", (first, second)


NODE_CLIS = [("gemini-cli", "gemini_cli/0.61.0", 2), ("qwen-code", "qwen_code/0.24.4", 2),
             ("copilot-cli", "copilot_cli/1.0.102", 1)]


@pytest.mark.parametrize(("agent", "fixture", "after"), NODE_CLIS, ids=[agent for agent, _, _ in NODE_CLIS])
def test_the_node_clis_rerun_their_tools_in_an_image_root(agent: str, fixture: str, after: int,
                                                         tmp_path: Path) -> None:
    """In a root of the image's own programs (bash and coreutils, no ``env``, no ``node``, no CA bundle) Gemini
    CLI and Qwen Code start as the host's node on their script (the shebang's ``env node`` is not there: they did
    not start before) without relaunching themselves (node's execPath is the host's loader there), and Copilot
    CLI finds the host's CA bundle (it refused to start without trust roots); the recorded calls, a shell command
    in the image's bash among them, give the recorded observations."""
    from forkpoint.testing.images import host_programs_root
    from forkpoint.testing.recordings import replay_recording

    agent_fixture = Path(__file__).parents[1] / "fixtures" / fixture / "tools"
    meta = json.loads((agent_fixture / "meta.json").read_text())
    if runtimes.find(agent, meta["version"]) is None:
        pytest.skip(f"{agent} {meta['version']} is not installed")
    root = tmp_path / "root"
    host_programs_root(root, ["/bin/bash", "/bin/sh", "/bin/ls", "/bin/cat", "/bin/pwd", "/bin/echo"])
    result = replay_recording(agent_fixture, tmp_path, agent=agent, trajectory="session.jsonl", after=after,
                              sandbox="bwrap", rootfs=str(root), replay_only=True)
    assert result.failure is None, result.failure
    rows = json.loads((Path(result.output_dir or "") / "observations.json").read_text())["observations"]
    assert rows and [row["exact"] for row in rows] == [True] * len(rows), rows
