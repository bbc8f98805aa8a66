"""Confinement under attack: the replayed file tools while another process swaps path components.

A separate process (true parallelism, no GIL) keeps exchanging a workspace directory with a symlink to a
directory outside the workspace, and a workspace file with a symlink to a file outside, while Claude Code's
Read / Write / Edit and Codex's apply_patch run through their executors. Outside, canary files hold unique
content: no observation, native result or error may ever contain it, and the outside tree must stay exactly as
it was (same entries, inodes, sizes, mtimes, bytes). Two attackers: an atomic ``renameat2(RENAME_EXCHANGE)``
(the path is never missing) and a rename + symlink flipper (with gaps in which a Write may create the name).
Each runs with the local sandbox and with bwrap's view (the recorded cwd is an alias of the workspace in the
confined walk; a decoy host directory at that path, full of canaries, must stay untouched).

Special files as inputs (a FIFO without writer, /dev/zero, /proc files, a directory, a unix socket): a tool
error or a refusal before any effect, under a hard SIGALRM deadline (so a hang fails instead of blocking).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from forkpoint.adapters.claude_code.tools import ClaudeToolExecutor
from forkpoint.adapters.codex.tools import CodexToolExecutor
from forkpoint.core.errors import ReplayError
from forkpoint.core.model import FreshObservation, RunContext, ToolCall
from forkpoint.sandbox import open_sandbox

SLOW = os.environ.get("HYPOTHESIS_PROFILE") == "slow"
ATTEMPTS = 10_000 if SLOW else 500
MAX_ATTEMPTS = 8 * ATTEMPTS
DEADLINE_S = 10.0

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="dir-fd walk, renameat2 and /proc are Linux")

#: The attacker. "exchange": renameat2(RENAME_EXCHANGE) of each (name, swap) pair; "rename": rename the real
#: entry away, put a symlink in its place, then put it back (errors ignored: a Write may recreate the name).
FLIPPER = r"""
import ctypes, errno, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
mode, pairs = sys.argv[1], list(zip(sys.argv[2::3], sys.argv[3::3], sys.argv[4::3]))
stop = False
def _stop(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, _stop)
flips = 0
print("ready", flush=True)
while not stop:
    for name, swap, target in pairs:
        if mode == "exchange":
            if libc.renameat2(-100, name.encode(), -100, swap.encode(), 2) != 0:
                if ctypes.get_errno() in (errno.EINVAL, errno.ENOSYS):
                    sys.exit(3)
                continue
        else:
            try:
                os.rename(name, swap)
                os.symlink(target, name)
                os.unlink(name)
                os.rename(swap, name)
            except OSError:
                continue
        flips += 1
print(flips, flush=True)
"""


class Hang(BaseException):
    """Raised inside the code under test at its deadline (BaseException: never swallowed)."""


@contextmanager
def hard_deadline(seconds: float = DEADLINE_S) -> Iterator[None]:
    def _fire(signum: int, frame: FrameType | None) -> None:
        raise Hang(f"no result within {seconds} s")

    previous = signal.signal(signal.SIGALRM, _fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def snapshot(root: Path) -> dict[str, tuple[Any, ...]]:
    """Every entry under ``root`` (not following symlinks): type, inode, size, mtime and content hash."""
    table: dict[str, tuple[Any, ...]] = {".": (os.lstat(root).st_ino,)}
    for path in sorted(root.rglob("*")):
        st = os.lstat(path)
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if stat.S_ISREG(st.st_mode) else ""
        table[str(path.relative_to(root))] = (stat.S_IFMT(st.st_mode), st.st_ino, st.st_size, st.st_mtime_ns, digest)
    return table


class Attack:
    """The workspace, the canaries outside it, and the flipper process swapping components."""

    def __init__(self, tmp: Path, mode: str, sandbox: str) -> None:
        self.canary = f"CANARY-{uuid.uuid4().hex}"
        self.mode = mode
        self.sandbox = sandbox
        self.ws = tmp / "ws"
        self.outside = tmp / "outside"
        (self.ws / "d" / "sub").mkdir(parents=True)
        (self.outside / "sub").mkdir(parents=True)
        for relative in ("d/secret.txt", "d/sub/x.txt", "g.txt"):
            (self.ws / relative).write_text("line inside\n")
        # The outside files match what the tools look for inside (so an escaped Edit / Update WOULD apply),
        # and victim.txt exists only outside (so an escaped Delete would succeed where the inside one fails).
        for relative in ("secret.txt", "sub/x.txt", "g.txt", "victim.txt"):
            (self.outside / relative).write_text(f"line inside\n{self.canary}\n")
        self.pairs = [
            (self.ws / "d", self.ws / "d.swap", str(self.outside)),  # absolute target
            (self.ws / "g.txt", self.ws / "g.swap", "../outside/g.txt"),  # relative target
        ]
        if mode == "exchange":
            for _, swap, target in self.pairs:
                os.symlink(target, swap)
        # Under bwrap the tools see the workspace at the recorded cwd (an alias in the confined walk). A decoy
        # HOST directory at that path holds canaries under the workspace's names: it must never be touched.
        self.recorded: Path | None = None
        if sandbox == "bwrap":
            self.recorded = Path(tempfile.mkdtemp(prefix="forkpoint-rec-reliability-"))
            (self.recorded / "d" / "sub").mkdir(parents=True)
            for relative in ("d/secret.txt", "d/sub/x.txt", "g.txt", "d/victim.txt"):
                (self.recorded / relative).write_text(f"line inside\n{self.canary}\n")
        self.before = snapshot(self.outside)
        self.before_recorded = snapshot(self.recorded) if self.recorded is not None else None
        self.tmp_entries = sorted(os.listdir(tmp))
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = [sys.executable, "-c", FLIPPER, self.mode]
        for name, swap, target in self.pairs:
            argv += [str(name), str(swap), target]
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE)
        assert self.process.stdout is not None
        assert self.process.stdout.readline() == b"ready\n"

    def stop(self) -> int:
        process = self.process
        if process is None:
            return 0
        self.process = None
        process.send_signal(signal.SIGTERM)
        try:
            out, _ = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise
        if process.returncode == 3:
            pytest.skip("renameat2(RENAME_EXCHANGE) is not supported on this file system")
        assert process.returncode == 0, process.returncode
        return int(out.split()[-1])

    def check_text(self, value: Any) -> None:
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        assert self.canary not in text, f"content from outside the workspace leaked: {text[:500]}"

    @property
    def shown(self) -> Path:
        """The workspace as the tools see it (under bwrap: the recorded cwd)."""
        return self.recorded if self.recorded is not None else self.ws

    def context(self, tmp: Path, session_id: str | None = None) -> RunContext:
        sandbox = open_sandbox("bwrap", self.ws, str(self.recorded)) if self.recorded is not None else None
        return RunContext(self.ws, tmp / "state", tmp / "out", session_id, sandbox)

    def check_outside(self, tmp: Path) -> None:
        assert snapshot(self.outside) == self.before, "a file outside the workspace was written, created or removed"
        if self.recorded is not None:
            assert snapshot(self.recorded) == self.before_recorded, "the host directory at the recorded cwd changed"
        new = set(os.listdir(tmp)) - set(self.tmp_entries) - {"state", "out"}
        assert not new, f"entries appeared outside the workspace: {sorted(new)}"


@pytest.fixture(params=["exchange-local", "rename-local", "exchange-bwrap", "rename-bwrap"])
def attack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Attack]:
    mode, sandbox = str(request.param).split("-")
    if sandbox == "bwrap":
        try:
            open_sandbox("bwrap", tmp_path, str(tmp_path / "probe"))
        except ReplayError as error:
            pytest.skip(f"bwrap cannot run here: {error}")
    current = Attack(tmp_path, mode, sandbox)
    yield current
    if current.process is not None:
        current.process.kill()
        current.process.wait()
    if current.recorded is not None:
        shutil.rmtree(current.recorded, ignore_errors=True)


def _hammer(attack: Attack, tmp: Path, call: Callable[[int], FreshObservation]) -> Counter[str]:
    """Run ``ATTEMPTS`` calls under the flipper; every outcome is checked for leaked canary content. On a loaded
    machine the flipper may get too little CPU to hit a call in ``ATTEMPTS``: the hammering goes on (up to
    ``MAX_ATTEMPTS``) until both sides of the race were seen, a call that worked and one refused at a symlink."""
    outcomes: Counter[str] = Counter()
    attack.start()
    try:
        attempt = -1
        while (attempt := attempt + 1) < ATTEMPTS or (
                attempt < MAX_ATTEMPTS and not (outcomes["ok"] and outcomes["refused"])):
            try:
                with hard_deadline():
                    observation = call(attempt)
            except ReplayError as error:
                attack.check_text(str(error))
                outcomes["refused"] += 1
                continue
            attack.check_text(observation.content)
            attack.check_text(observation.native)
            outcomes["error" if observation.is_error or observation.return_code not in (None, 0) else "ok"] += 1
    finally:
        flips = attack.stop()
    attack.check_outside(tmp)
    assert flips > 0, "the attacker never swapped anything"
    return outcomes


def _claude(tmp: Path, workspace: Path, context: RunContext | None = None) -> ClaudeToolExecutor:
    context = context or RunContext(workspace, tmp / "state", tmp / "out")
    return ClaudeToolExecutor(context, "2.1.332", "11111111-2222-3333-4444-555555555555", tmp / "state" / ".claude")


@pytest.mark.slow
def test_claude_file_tools_never_leave_the_workspace_under_swaps(attack: Attack, tmp_path: Path) -> None:
    executor = _claude(tmp_path, attack.ws, attack.context(tmp_path))
    rng = random.Random(f"claude-{attack.mode}-{attack.sandbox}")
    ws = attack.shown
    calls: list[Callable[[int], tuple[str, dict[str, Any]]]] = [
        lambda i: ("Read", {"file_path": "d/secret.txt"}),
        lambda i: ("Read", {"file_path": f"{ws}/d/sub/x.txt"}),
        lambda i: ("Read", {"file_path": "d/../d/sub/../secret.txt"}),
        lambda i: ("Read", {"file_path": "g.txt", "offset": 1, "limit": 1 + i % 3}),
        lambda i: ("Write", {"file_path": "d/secret.txt", "content": f"line inside {i}\n"}),
        lambda i: ("Write", {"file_path": f"d/new-{i}/n.txt", "content": "new\n"}),
        lambda i: ("Write", {"file_path": f"{ws}/g.txt", "content": "line inside\n"}),
        lambda i: ("Edit", {"file_path": "d/sub/x.txt", "old_string": "line", "new_string": f"line{i % 10}"}),
        lambda i: ("Edit", {"file_path": "g.txt", "old_string": "inside", "new_string": "inside!",
                            "replace_all": True}),
        lambda i: ("Edit", {"file_path": "d/victim.txt", "old_string": "line", "new_string": "gone"}),
    ]

    def call(attempt: int) -> FreshObservation:
        name, arguments = rng.choice(calls)(attempt)
        return executor.run(ToolCall(f"toolu_{attempt}", name, arguments, None))

    try:
        outcomes = _hammer(attack, tmp_path, call)
    finally:
        executor.close()
    # both sides of the race were exercised: calls that worked inside, and calls refused at a symlink
    assert outcomes["ok"] > 0 and outcomes["refused"] > 0, outcomes


def _patch(body: str) -> str:
    return f"*** Begin Patch\n{body}*** End Patch\n"


@pytest.mark.slow
def test_codex_apply_patch_never_leaves_the_workspace_under_swaps(attack: Attack, tmp_path: Path) -> None:
    executor = CodexToolExecutor(attack.context(tmp_path, "thread-1"), "0.171.0")
    rng = random.Random(f"codex-{attack.mode}-{attack.sandbox}")
    ws = attack.shown
    patches: list[Callable[[int], str]] = [
        lambda i: _patch("*** Update File: d/secret.txt\n@@\n-line inside\n+line inside\n"),
        lambda i: _patch(f"*** Update File: {ws}/d/sub/x.txt\n@@\n-line inside\n+line inside\n"),
        lambda i: _patch("*** Update File: g.txt\n@@\n-line inside\n+line inside\n"),
        lambda i: _patch(f"*** Add File: d/new-{i}/a.txt\n+new\n"),
        lambda i: _patch("*** Add File: d/sub/x.txt\n+line inside\n*** Add File: g.txt\n+line inside\n"),
        lambda i: _patch("*** Delete File: d/victim.txt\n"),
        lambda i: _patch(f"*** Update File: d/secret.txt\n*** Move to: d/sub/moved-{i}.txt\n@@\n-line inside\n"
                         "+line inside\n*** Add File: d/secret.txt\n+line inside\n"),
        lambda i: _patch("*** Update File: d/../d/secret.txt\n@@\n-line inside\n+line inside\n"),
    ]

    def call(attempt: int) -> FreshObservation:
        return executor.run(ToolCall(f"call_{attempt}", "apply_patch", {"input": rng.choice(patches)(attempt)}, None))

    try:
        outcomes = _hammer(attack, tmp_path, call)
    finally:
        executor.close()
    assert outcomes["ok"] > 0 and outcomes["refused"] > 0, outcomes


# ------------------------------------------------------------------------------------------ special files


@pytest.fixture
def special(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, str]]:
    """A workspace full of things that are not regular files; our environ carries a canary (/proc/self/environ)."""
    canary = f"CANARY-{uuid.uuid4().hex}"
    monkeypatch.setenv("FORKPOINT_TEST_CANARY", canary)
    ws = tmp_path / "ws"
    ws.mkdir()
    os.mkfifo(ws / "pipe")
    (ws / "dir").mkdir()
    for name, target in (("zero", "/dev/zero"), ("null", "/dev/null"), ("environ", "/proc/self/environ"),
                         ("status", "/proc/self/status"), ("procdir", "/proc/self")):
        os.symlink(target, ws / name)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(str(ws / "sock"))
    except OSError as exc:  # a path too long for sun_path
        server.close()
        pytest.skip(f"cannot bind a unix socket in the workspace: {exc}")
    server.listen(1)
    try:
        yield ws, canary
    finally:
        server.close()


SPECIAL_NAMES = ("pipe", "dir", "zero", "null", "environ", "status", "procdir", "sock")
SPECIAL_PATHS = (*SPECIAL_NAMES, "procdir/environ", "/proc/self/environ", "/dev/zero")


def _tool_error_or_refusal(run: Callable[[ToolCall], FreshObservation], call: ToolCall, canary: str) -> str:
    try:
        with hard_deadline(5.0):
            observation = run(call)
    except ReplayError as error:
        assert error.before_effect, error
        assert canary not in str(error)
        return "refused"
    text = json.dumps([observation.content, observation.native], default=str)
    assert canary not in text
    failed = observation.is_error or observation.return_code not in (None, 0) or "verification failed" in text
    assert failed, f"a special file was handled like a regular one: {text[:300]}"
    return "error"


def _special_unchanged(ws: Path) -> None:
    assert stat.S_ISFIFO(os.lstat(ws / "pipe").st_mode) and stat.S_ISSOCK(os.lstat(ws / "sock").st_mode)
    assert (ws / "dir").is_dir() and not any((ws / "dir").iterdir())
    assert os.readlink(ws / "zero") == "/dev/zero" and os.readlink(ws / "environ") == "/proc/self/environ"


def test_claude_file_tools_on_special_files_fail_fast(special: tuple[Path, str], tmp_path: Path) -> None:
    ws, canary = special
    executor = _claude(tmp_path, ws)
    outcomes: Counter[str] = Counter()
    try:
        for index, path in enumerate(SPECIAL_PATHS):
            for name, arguments in (
                ("Read", {"file_path": path}),
                ("Read", {"file_path": path, "limit": 1}),
                ("Write", {"file_path": path, "content": "x\n"}),
                ("Edit", {"file_path": path, "old_string": "", "new_string": "x"}),
                ("Edit", {"file_path": path, "old_string": "a", "new_string": "b"}),
            ):
                call = ToolCall(f"toolu_{index}_{name}", name, arguments, None)
                outcomes[_tool_error_or_refusal(executor.run, call, canary)] += 1
    finally:
        executor.close()
    _special_unchanged(ws)
    assert outcomes["error"] > 0 and outcomes["refused"] > 0, outcomes


def test_codex_apply_patch_on_special_files_fails_fast(special: tuple[Path, str], tmp_path: Path) -> None:
    ws, canary = special
    executor = CodexToolExecutor(RunContext(ws, tmp_path / "state", tmp_path / "out", "thread-1"), "0.171.0")
    outcomes: Counter[str] = Counter()
    try:
        for index, path in enumerate(SPECIAL_PATHS):
            for body in (
                f"*** Update File: {path}\n@@\n-a\n+b\n",
                f"*** Delete File: {path}\n",
                f"*** Add File: {path}\n+x\n",
                f"*** Update File: {path}\n*** Move to: moved-{index}.txt\n@@\n-a\n+b\n",
            ):
                call = ToolCall(f"call_{index}_{len(body)}", "apply_patch", {"input": _patch(body)}, None)
                outcomes[_tool_error_or_refusal(executor.run, call, canary)] += 1
    finally:
        executor.close()
    _special_unchanged(ws)
    assert not list(ws.glob("moved-*")), "a move from a special file created its destination"
    assert outcomes["error"] > 0 and outcomes["refused"] > 0, outcomes
