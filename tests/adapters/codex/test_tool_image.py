"""Codex's view_image re-run: the measured output (fixtures ``view_image`` of 0.149.0 / 0.171.0) and hostile files.

The exact outputs for the recorded files are proven against the real rollouts by ``test_fixture_fidelity``; here
the executor meets what a replayed command could plant (links out, FIFOs, huge or damaged files) and the shapes
forkpoint refuses because Codex would re-encode them.
"""

from __future__ import annotations

import base64
import json
import os
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from forkpoint.adapters.codex.tool_image import MAX_IMAGE_BYTES, sniff
from forkpoint.adapters.codex.tools import CodexToolExecutor
from forkpoint.core.errors import ReplayError
from forkpoint.core.model import RunContext, ToolCall
from forkpoint.testing.recordings import replay_recording

RECORDED = Path(__file__).parents[2] / "fixtures" / "codex" / "0.171.0" / "view_image" / "workspace-initial"


def png(width: int, height: int) -> bytes:
    rows = b"".join(b"\x00" + bytes(width * 3) for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


class Images:
    def __init__(self, workspace: Path, version: str, state: Path) -> None:
        self.workspace = workspace
        self.version = version
        self.executor = CodexToolExecutor(RunContext(workspace, state / "state", state / "out", "t"), version)

    def view(self, path: str) -> Any:
        return self.executor.run(ToolCall("call_1", "view_image", {"path": path}, None)).content


@pytest.fixture(params=["0.149.0", "0.171.0"])
def images(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Images]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    for name in ("small.png", "photo.jpg", "notes.txt"):
        (workspace / name).write_bytes((RECORDED / name).read_bytes())
    (workspace / "pics").mkdir()
    current = Images(workspace, str(request.param), tmp_path)
    yield current
    current.executor.close()


def _refused(images: Images, path: str, reason: str) -> None:
    with pytest.raises(ReplayError) as error:
        images.view(path)
    assert error.value.before_effect and reason in str(error.value)


def test_images_are_sent_byte_for_byte_with_the_versions_detail(images: Images) -> None:
    detail = {"0.149.0": "high", "0.171.0": "original"}[images.version]
    for path, mime in (("small.png", "image/png"), (str(images.workspace / "photo.jpg"), "image/jpeg")):
        content = images.view(path)
        data = base64.b64encode((RECORDED / Path(path).name).read_bytes()).decode()
        assert content == [{"type": "input_image", "image_url": f"data:{mime};base64,{data}", "detail": detail}]


def test_codex_error_texts(images: Images) -> None:
    root = images.workspace
    assert images.view("missing.png") == (f"unable to locate image at `{root}/missing.png`: No such file or "
                                          "directory (os error 2)")
    assert images.view("pics") == f"image path `{root}/pics` is not a file"
    assert images.view("notes.txt") == "unable to process image: invalid or unsupported image data"


def test_a_link_out_of_the_workspace_is_never_read(images: Images, tmp_path: Path) -> None:
    secret = tmp_path / "secret.png"
    secret.write_bytes(png(2, 2))
    (images.workspace / "leak.png").symlink_to(secret)
    (images.workspace / "dir").symlink_to(tmp_path)
    _refused(images, "leak.png", "outside the workspace")
    _refused(images, "dir/secret.png", "outside the workspace")
    _refused(images, str(secret), "outside the workspace")
    (images.workspace / "inside.png").symlink_to(images.workspace / "small.png")  # Codex follows a link: so do we
    assert images.view("inside.png")[0]["image_url"].startswith("data:image/png;base64,")


def test_a_fifo_is_not_opened(images: Images) -> None:
    os.mkfifo(images.workspace / "pipe.png")  # opening it for reading would block without a writer
    assert images.view("pipe.png") == f"image path `{images.workspace}/pipe.png` is not a file"


def test_what_codex_would_re_encode_or_cannot_be_checked_stays_stale(images: Images) -> None:
    workspace = images.workspace
    (workspace / "wide.png").write_bytes(png(2049, 1))
    (workspace / "tall.png").write_bytes(png(1, 769))
    (workspace / "png.jpg").write_bytes(png(2, 2))
    (workspace / "cut.png").write_bytes(png(4, 4)[:-20])
    (workspace / "anim.gif").write_bytes(b"GIF89a" + bytes(20))
    with (workspace / "huge.png").open("wb") as handle:  # sparse: cheap to make, and only the bound is read
        handle.write(png(2, 2))
        handle.truncate(MAX_IMAGE_BYTES + 1)
    _refused(images, "wide.png", "Codex may resize and re-encode it")
    _refused(images, "tall.png", "Codex may resize and re-encode it")
    _refused(images, "png.jpg", "does not match")
    _refused(images, "cut.png", "damaged PNG")
    _refused(images, "anim.gif", "other than PNG/JPEG")
    _refused(images, "huge.png", f"over {MAX_IMAGE_BYTES} bytes")
    assert images.view("small.png")[0]["type"] == "input_image"  # the largest measured size still passes
    (workspace / "edge.png").write_bytes(png(2048, 768))
    assert images.view("edge.png")[0]["image_url"].startswith("data:image/png;base64,")


def test_sniff_rejects_damaged_pixel_data() -> None:
    good = png(3, 3)
    assert sniff(good, "a.png") is not None
    short = png(3, 2)  # IHDR says 3 rows below: the inflated rows do not fit
    header = struct.pack(">IIBBBBB", 3, 3, 8, 2, 0, 0, 0)
    patched = short[:12] + b"IHDR" + header + struct.pack(">I", zlib.crc32(b"IHDR" + header)) + short[33:]
    with pytest.raises(Exception, match="wrong size"):
        sniff(patched, "a.png")


def test_an_image_codex_would_re_encode_is_reused_only_when_allowed(tmp_path: Path) -> None:
    """The real rollout's last call views a 2100x40 PNG (over the size Codex sends unchanged on every version):
    without --allow-stale-observations the replay stops before it; with it the recorded image is reused."""
    fixture = RECORDED.parent
    refused = replay_recording(fixture, tmp_path / "a", agent="codex", trajectory="rollout.jsonl", after=6,
                               replay_only=True)
    assert refused.failure is not None and "--allow-stale-observations" in refused.failure.message
    assert "Codex may resize and re-encode it" in refused.failure.message
    allowed = replay_recording(fixture, tmp_path / "b", agent="codex", trajectory="rollout.jsonl", after=6,
                               replay_only=True, allow_stale_observations=True)
    assert allowed.failure is None, allowed.failure
    rows = json.loads((Path(allowed.output_dir or "") / "observations.json").read_text())["observations"]
    assert [row["exact"] for row in rows[:5]] == [True] * 5
    assert rows[5]["stale_reused"] is True



FIXTURE_040 = Path(__file__).resolve().parents[2] / "fixtures" / "codex" / "0.40.0" / "view_image_040"


def test_codex_040_sends_the_image_in_a_separate_message_which_is_the_observation() -> None:
    """The real 0.40.0 (fixture view_image_040): every output is the constant 'attached local image path' and the
    image follows in its own user message (extension's MIME type, file bytes unchanged; nothing when unreadable).
    The parse makes that message the call's observation (fresh), and ends the batch after it."""
    from forkpoint.adapters.codex.parse import parse_rollout
    from forkpoint.core.model import CallPolicy

    rows = [json.loads(line)["payload"] for line in (FIXTURE_040 / "rollout.jsonl").read_text().splitlines()]
    outputs = [row["output"] for row in rows if row.get("type") == "function_call_output"]
    initial = FIXTURE_040 / "workspace-initial"
    expected_mime = {"small.png": "image/png", "photo.jpg": "image/jpeg", "notes.txt": "text/plain",
                     "big.png": "image/png"}
    parsed = parse_rollout(FIXTURE_040 / "rollout.jsonl")
    calls = [call for batch in parsed.batches for call in batch.calls]
    assert len(calls) == 6 and outputs == ["attached local image path"] * 6
    for call in calls:
        assert call.policy is CallPolicy.FRESH and call.historical is not None
        name = Path(call.arguments["path"]).name
        if name in expected_mime:
            data = base64.b64encode((initial / name).read_bytes()).decode()
            assert call.historical.content == [{"type": "input_image",
                                                "image_url": f"data:{expected_mime[name]};base64,{data}"}]
        else:  # missing.png, the directory pics
            assert call.historical.content == []
    for end in parsed.native.batch_end:  # each batch ends with its image message
        assert parsed.native.lines[end].payload.get("role") == "user"


@pytest.mark.skipif(__import__("shutil").which("bwrap") is None, reason="bwrap is not installed")
def test_codex_040_replay_writes_the_fresh_image_into_the_rebuilt_rollout(tmp_path: Path) -> None:
    """Replay-only of the fixture with small.png changed in the workspace: that call differs, the others are exact,
    and the rebuilt rollout's image message carries the NEW bytes after the unchanged constant output."""
    import shutil

    from forkpoint.run.engine import execute
    from forkpoint.run.request import build_request

    workspace = tmp_path / "ws"
    shutil.copytree(FIXTURE_040 / "workspace-initial", workspace)
    changed = png(5, 4)
    (workspace / "small.png").write_bytes(changed)
    result = execute(build_request({
        "agent": "codex", "trajectory": str(FIXTURE_040 / "rollout.jsonl"), "after_step": 6, "replay_only": True,
        "workspace": str(workspace), "sandbox": "bwrap", "state_dir": str(tmp_path / "state"),
        "output_dir": str(tmp_path / "out"), "run_id": "r", "on_divergence": "ignore"}, source="test")).to_json()
    assert result["failure"] is None, result["failure"]
    assert "stale_observations" not in result["quality_reasons"]
    assert result["observations_match"] != "exact"  # small.png changed: that call differs
    rebuilt = next((tmp_path / "out" / "r" / "native").rglob("rollout-*.jsonl")).read_text()
    payloads = [json.loads(line)["payload"] for line in rebuilt.splitlines()]
    messages = [p for p in payloads if p.get("type") == "message" and p.get("role") == "user"][2:]
    url = f"data:image/png;base64,{base64.b64encode(changed).decode()}"
    assert messages[0]["content"] == [{"type": "input_image", "image_url": url}]
    assert [p["output"] for p in payloads if p.get("type") == "function_call_output"] == \
        ["attached local image path"] * 6


def test_codex_040_never_reads_a_link_out_or_a_fifo(tmp_path: Path) -> None:
    """0.40's form reads the file too: a link leading out of the workspace and a FIFO are refused (stale fallback)
    before anything is read; a directory and a missing file send nothing, as 0.40 does."""
    from forkpoint.adapters.codex.tool_image import view_image_040

    workspace = tmp_path / "ws"
    (workspace / "dir").mkdir(parents=True)
    secret = tmp_path / "secret.png"
    secret.write_bytes(png(2, 2))
    (workspace / "link.png").symlink_to(secret)
    os.mkfifo(workspace / "pipe.png")
    cwd = str(workspace)
    for name in ("link.png", "pipe.png", "noext"):
        if name == "noext":
            (workspace / name).write_bytes(b"x")
        with pytest.raises(ReplayError) as caught:
            view_image_040({"path": name}, cwd, workspace, (), lambda path: path)
        assert caught.value.stale_fallback and caught.value.before_effect
    assert view_image_040({"path": "dir"}, cwd, workspace, (), lambda path: path) == []
    assert view_image_040({"path": "missing.png"}, cwd, workspace, (), lambda path: path) == []
