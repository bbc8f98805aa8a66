"""The workspace inventory hash and --workspace-from (directory, tarball, git), with real files, cp, tar and git."""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.results import ReplayResult
from forkpoint.run.engine import execute
from forkpoint.run.request import build_request
from forkpoint.workspace import create, inventory, parse_source

FIXTURE = Path(__file__).parents[1] / "fixtures" / "claude_code" / "2.1.332" / "single_bash"
RECORDED = "/tmp/forkpoint-rec/single_bash"


def _tree(root: Path) -> Path:
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("print('hi')\n")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    (root / "empty").mkdir()
    os.symlink("src/app.py", root / "link")
    return root


# ------------------------------------------------------------------------------------------------ inventory


def test_inventory_is_deterministic_and_counts_everything(tmp_path: Path) -> None:
    a = _tree(tmp_path / "a")
    b = tmp_path / "b"
    shutil.copytree(a, b, symlinks=True)
    first, second = inventory(a), inventory(b)
    assert first.sha256 == second.sha256
    assert (first.files, first.entries, first.unreadable) == (2, 5, ())
    git = a / ".git"
    git.mkdir()
    (git / "HEAD").write_text("ref\n")
    assert inventory(a).sha256 != first.sha256  # nothing is skipped, not even .git


def _retarget(link: Path, target: str) -> None:
    os.remove(link)
    os.symlink(target, link)


@pytest.mark.parametrize(
    "change",
    [
        lambda root: (root / "src" / "app.py").write_text("print('hi!')\n"),  # same path, other content
        lambda root: (root / "empty" / "new").write_text(""),  # a new empty file
        lambda root: (root / "empty").rmdir(),  # an empty directory gone
        lambda root: (root / "run.sh").chmod(0o644),  # the executable bit
        lambda root: _retarget(root / "link", "run.sh"),  # a symlink target
        lambda root: os.mkfifo(root / "pipe"),  # a special file (listed, never opened)
    ],
)
def test_inventory_sees_every_kind_of_change(tmp_path: Path, change: Any) -> None:
    root = _tree(tmp_path / "ws")
    before = inventory(root).sha256
    change(root)
    assert inventory(root).sha256 != before


def test_inventory_of_odd_names(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / os.fsdecode(b"bad-\xff-name")).write_text("x")
    (root / "tab\tnew\nline").write_text("y")
    assert inventory(root).files == 2


# ------------------------------------------------------------------------------------------------ --workspace-from


def test_from_a_directory_copies_everything(tmp_path: Path) -> None:
    source = _tree(tmp_path / "source")
    workspace = tmp_path / "ws"
    facts = create(parse_source(str(source)), workspace)
    assert facts == {"kind": "dir", "source": str(source), "rev": None}
    assert inventory(workspace).sha256 == inventory(source).sha256
    assert os.readlink(workspace / "link") == "src/app.py"


def test_an_existing_empty_workspace_keeps_its_mode(tmp_path: Path) -> None:
    """`cp -a SRC/. WS/` gave a private 0700 workspace the source's 0755."""
    source = _tree(tmp_path / "source")
    os.chmod(source, 0o755)
    workspace = tmp_path / "ws"
    workspace.mkdir(mode=0o700)
    os.chmod(workspace, 0o700)
    create(parse_source(str(source)), workspace)
    assert stat.S_IMODE(os.stat(workspace).st_mode) == 0o700
    assert inventory(workspace).sha256 == inventory(source).sha256


def test_a_non_empty_workspace_is_refused(tmp_path: Path) -> None:
    source = _tree(tmp_path / "source")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "left-over").write_text("x")
    with pytest.raises(ReplayError) as caught:
        create(parse_source(str(source)), workspace)
    assert caught.value.kind is ErrorKind.WORKSPACE and "non-empty" in caught.value.message
    with pytest.raises(ReplayError):
        create(parse_source(str(source)), source / "inside")  # the copy would contain itself


def _tarball(path: Path, members: list[tuple[str, bytes]], *, extra: tuple[tarfile.TarInfo, ...] = ()) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for info in extra:
            tar.addfile(info)
    return path


def test_from_a_tarball(tmp_path: Path) -> None:
    archive = _tarball(tmp_path / "ws.tar.gz", [("notes.txt", b"hello\n"), ("src/app.py", b"x\n")])
    workspace = tmp_path / "ws"
    facts = create(parse_source(str(archive)), workspace)
    assert facts["kind"] == "tarball" and facts["members"] == 2
    assert (workspace / "src" / "app.py").read_bytes() == b"x\n"


def _symlink(name: str, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.SYMTYPE
    info.linkname = target
    return info


def _hardlink(name: str, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.LNKTYPE
    info.linkname = target
    return info


@pytest.mark.parametrize(
    ("members", "extra", "words"),
    [
        ([("ok.txt", b"ok"), ("../escape.txt", b"boom")], (), "'../escape.txt' would be written outside"),
        ([("a/../../escape.txt", b"boom")], (), "outside the workspace"),
        ([("/tmp/absolute-escape.txt", b"boom")], (), "outside the workspace"),
        ([], (_hardlink("h", "../../etc/passwd"),), "hard link"),
    ],
)
def test_a_tarball_that_escapes_is_refused_before_anything_is_written(
    tmp_path: Path, members: list[tuple[str, bytes]], extra: tuple[tarfile.TarInfo, ...], words: str
) -> None:
    archive = _tarball(tmp_path / "evil.tar.gz", members, extra=extra)
    workspace = tmp_path / "deep" / "ws"
    with pytest.raises(ReplayError) as caught:
        create(parse_source(str(archive)), workspace)
    assert caught.value.kind is ErrorKind.WORKSPACE and words in caught.value.message
    assert not (tmp_path / "deep").exists()
    assert not (tmp_path / "escape.txt").exists() and not Path("/tmp/absolute-escape.txt").exists()


def test_a_tarball_writing_through_its_own_symlink_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    archive = tmp_path / "evil.tar"
    with tarfile.open(archive, "w") as tar:  # first the symlink, then a file "inside" it
        tar.addfile(_symlink("link", str(outside)))
        info = tarfile.TarInfo("link/planted.txt")
        info.size = 4
        tar.addfile(info, io.BytesIO(b"boom"))
    with pytest.raises(ReplayError) as caught:
        create(parse_source(str(archive)), tmp_path / "ws")
    assert caught.value.kind is ErrorKind.WORKSPACE
    assert list(outside.iterdir()) == []


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e"}
    done = subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def _repo(tmp_path: Path) -> tuple[Path, str, str]:
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURE / "workspace-initial", repo)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "initial")
    first = _git(repo, "rev-parse", "HEAD")
    (repo / "notes.txt").write_text("changed later\n")
    _git(repo, "commit", "-qam", "later")
    return repo, first, _git(repo, "rev-parse", "HEAD")


def test_from_a_local_git_repository_at_a_revision(tmp_path: Path) -> None:
    repo, first, _ = _repo(tmp_path)
    workspace = tmp_path / "ws"
    facts = create(parse_source(f"{repo}@{first[:10]}"), workspace)
    assert facts["kind"] == "git" and facts["commit"] == first and facts["rev"] == first[:10]
    assert (workspace / "notes.txt").read_text() == (FIXTURE / "workspace-initial" / "notes.txt").read_text()


@pytest.mark.parametrize("spec", ["/does/not/exist", "/does/not/exist@main", "git@host:repo.git"])
def test_bad_sources_are_configuration_errors(spec: str) -> None:
    with pytest.raises(ReplayError) as caught:
        parse_source(spec)
    assert caught.value.kind is ErrorKind.CONFIGURATION


# ------------------------------------------------------------------------------------------------ through the engine


def _replay(tmp_path: Path, source: str, workspace: Path, **extra: Any) -> ReplayResult:
    values: dict[str, Any] = {
        "agent": "claude-code", "trajectory": str(FIXTURE / "session.jsonl"), "after_step": 2,
        "workspace": str(workspace), "workspace_from": source, "replay_only": True,
        "path_map": [f"{RECORDED}={workspace}"], "state_dir": str(tmp_path / "state"),
        "output_dir": str(tmp_path / "out"), "run_id": "run",
    }
    values.update(extra)
    return execute(build_request(values, source="test"))


@pytest.mark.parametrize("kind", ["dir", "tarball", "git"])
def test_replay_in_a_workspace_created_from(kind: str, tmp_path: Path) -> None:
    if kind == "dir":
        source = str(FIXTURE / "workspace-initial")
    elif kind == "tarball":
        archive = tmp_path / "initial.tar.gz"
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(FIXTURE / "workspace-initial", arcname=".")
        source = str(archive)
    else:
        repo, first, _ = _repo(tmp_path)
        source = f"{repo}@{first}"
    workspace = tmp_path / "new" / "ws"
    result = _replay(tmp_path, source, workspace)
    assert result.failure is None, result.failure
    assert result.metadata["workspace_from"]["kind"] == kind
    rows = json.loads((Path(result.output_dir or "") / "observations.json").read_text())["observations"]
    assert rows and all(row["exact"] for row in rows)
    expected = inventory(FIXTURE / "workspace-initial")
    if kind != "git":  # a clone also holds .git
        assert result.metadata["workspace_inventory_sha256"] == expected.sha256


def test_engine_refuses_before_allocating(tmp_path: Path) -> None:
    archive = _tarball(tmp_path / "evil.tar.gz", [("../escape.txt", b"boom")])
    refused = _replay(tmp_path, str(archive), tmp_path / "ws")
    assert refused.failure is not None and refused.exit_code == 20 and refused.phase is None
    assert not (tmp_path / "out" / "run").exists() and not (tmp_path / "ws").exists()
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("x")
    refused = _replay(tmp_path, str(FIXTURE / "workspace-initial"), busy)
    assert refused.failure is not None and "non-empty" in refused.failure.message and refused.phase is None
    prepare = _replay(tmp_path, str(FIXTURE / "workspace-initial"), tmp_path / "ws", replay_only=None,
                      prepare_only=True)
    assert prepare.failure is not None and prepare.failure.category == "configuration_error"
