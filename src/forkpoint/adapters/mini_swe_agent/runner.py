"""forkpoint's side of the companion runner (companion.py): a supervised process in the agent's venv, one socket.

The companion runs under ``forkpoint.process.run_supervised`` in a background thread (own process group,
deadline, every descendant reaped when it ends, output to a log), and talks JSON lines over a Unix socket in a
private temp dir: forkpoint listens, the companion connects and says hello with its pid. A request that gets no
reply within its deadline kills the companion's process group; supervision then reaps what is left.

The socket's folder is in the run's state dir (``socket_dir``), so even a killed forkpoint leaves nothing in the
system temp dir; only a state dir too long for AF_UNIX's 108 bytes falls back to a short temp folder.

The companion runs in the run's sandbox (``sandbox.run``): under bwrap in its own mount, PID and network namespace
with the socket's folder bound in (a Unix socket needs no network). Its hello pid is then a namespace pid, so a
stuck companion is killed through supervision (a watch that ends the command's process group), never by that pid.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from forkpoint.adapters.kit.continuation import BRIDGE_KEY
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.process import ProcessResult, sanitized_env
from forkpoint.process.supervise import WATCH_TERMINATE
from forkpoint.sandbox import local_sandbox

if TYPE_CHECKING:
    from forkpoint.sandbox.base import Sandbox

COMPANION = Path(__file__).with_name("companion.py")
CONNECT_TIMEOUT_S = 120.0
CLOSE_TIMEOUT_S = 10.0
#: AF_UNIX socket paths hold at most 107 bytes (108 with the terminating NUL)
SOCKET_PATH_MAX = 107
_SOCKET_PREFIX = "fp-mini-"
_SOCKET_TAIL = len(_SOCKET_PREFIX) + 8 + len("//s")  # mkdtemp's 8 random characters, two separators, the name
#: what the companion (and the commands it re-runs) may not inherit from forkpoint's environment
_DROPPED_PREFIXES = ("MSWEA_", "LITELLM_", "OPENAI_", "ANTHROPIC_")


def companion_env(base: Mapping[str, str], home: Path) -> dict[str, str]:
    """Credentials and agent settings stripped; an isolated HOME and config dir; offline litellm; no retries.

    ``OPENAI_API_KEY`` is a dummy only the bridge ever sees (the real key stays in forkpoint's process).
    """
    env = {k: v for k, v in sanitized_env(base, strip_credentials=True).items() if not k.startswith(_DROPPED_PREFIXES)}
    no_proxy = [p for p in env.get("NO_PROXY", env.get("no_proxy", "")).split(",") if p]
    no_proxy += [h for h in ("127.0.0.1", "localhost", "::1") if h not in no_proxy]
    env.update({"HOME": str(home), "MSWEA_CONFIGURED": "true", "MSWEA_SILENT_STARTUP": "1",
                "MSWEA_GLOBAL_CONFIG_DIR": str(home / ".config" / "mini-swe-agent"),
                "MSWEA_COST_TRACKING": "ignore_errors", "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "1",
                "LITELLM_LOCAL_MODEL_COST_MAP": "True", "OPENAI_API_KEY": BRIDGE_KEY,
                "NO_PROXY": ",".join(no_proxy), "no_proxy": ",".join(no_proxy)})
    return env


def socket_dir(parent: Path | None) -> Path:
    """A new private (0700) folder for the socket: under ``parent`` (the run's state dir, kept across a killed
    forkpoint as the run's own record) when the socket path fits, else a short one in the temp dir."""
    if parent is not None and len(os.fsencode(parent)) + _SOCKET_TAIL <= SOCKET_PATH_MAX:
        parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=_SOCKET_PREFIX, dir=parent))
    return Path(tempfile.mkdtemp(prefix=_SOCKET_PREFIX))


class _KillSwitch:
    """A supervision watch that ends the companion's process group once ``pull`` is called (its pid inside a
    sandbox's PID namespace names nothing on the host)."""

    def __init__(self) -> None:
        self.pulled = False

    def pull(self) -> None:
        self.pulled = True

    def output(self, stream: str, chunk: bytes) -> None:
        del stream, chunk

    def action(self, now: float) -> int | None:
        del now
        return WATCH_TERMINATE if self.pulled else None


@dataclass(frozen=True)
class Confinement:
    """Where the companion runs: the run's sandbox (``cwd`` as it sees it), the host paths it needs besides the
    workspace, whether it may use the network, and an argv wrapper (the bridge relay of a network-less sandbox)."""

    sandbox: Sandbox
    cwd: str
    writable: Sequence[Path] = ()
    readable: Sequence[Path] = ()
    network: bool = False
    wrap: Callable[[list[str]], list[str]] | None = None


class RunnerSession:
    """``with RunnerSession(python, cwd, env, log) as runner: runner.request({...})``."""

    def __init__(self, python: Path, cwd: Path, env: Mapping[str, str], log_path: Path,
                 deadline_s: float = 24 * 3600.0, *, script: Path = COMPANION,
                 label: str = "the mini-swe-agent companion", socket_parent: Path | None = None,
                 confinement: Confinement | None = None) -> None:
        """``script``/``label``: any companion speaking this transport (hello line with its pid, JSON lines);
        ``socket_parent``: where the socket's folder goes (see ``socket_dir``); ``confinement``: the sandbox it
        runs in (default: local at ``cwd``, the host's network)."""
        self.python, self.cwd, self.env, self.log_path, self.deadline_s = python, cwd, dict(env), log_path, deadline_s
        self.script, self.label, self.socket_parent = script, label, socket_parent
        self.confinement = confinement or Confinement(local_sandbox(cwd), str(cwd), network=True)
        self._switch = _KillSwitch()
        self.pid: int | None = None
        self.result: ProcessResult | None = None
        self._dir: Path | None = None
        self._server: socket.socket | None = None
        self._conn: socket.socket | None = None
        self._reader: IO[str] | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        #: what the companion replays differently from the recording (its ``open`` reply)
        self.degradations: list[str] = []

    def __enter__(self) -> RunnerSession:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        self._dir = socket_dir(self.socket_parent)
        path = self._dir / "s"
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(path))
        self._server.listen(1)
        self._server.settimeout(1.0)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = [str(self.python), "-I", str(self.script), str(path)]
        if self.confinement.wrap is not None:
            argv = self.confinement.wrap(argv)
        self._thread = threading.Thread(target=self._supervise, args=(argv,), name="mini-companion", daemon=True)
        self._thread.start()
        waited = 0.0
        while self._conn is None:
            try:
                self._conn, _ = self._server.accept()
            except TimeoutError:
                waited += 1.0
                if not self._thread.is_alive() or waited >= CONNECT_TIMEOUT_S:
                    self.close()
                    raise ReplayError(ErrorKind.EXECUTOR, f"{self.label} did not connect "
                                                          f"({self._exit_detail()}); see {self.log_path}") from None
        self._reader = self._conn.makefile("r", encoding="utf-8")
        hello = self._read(CONNECT_TIMEOUT_S)
        self.pid = int(hello["pid"])

    def _supervise(self, argv: list[str]) -> None:
        try:
            where = self.confinement
            assert self._dir is not None
            self.result = where.sandbox.run(
                argv, cwd=where.cwd, env=self.env, timeout_s=self.deadline_s, network=where.network,
                writable=tuple(where.writable), grace_s=2.0, merge_stderr=True, log_path=self.log_path,
                readable=(*where.readable, self._dir, self.script.parent), max_output_bytes=64 * 1024,
                die_with_parent=True, watch=self._switch)
        except BaseException as error:  # reported by request()/close()
            self._error = error

    def _exit_detail(self) -> str:
        if self._error is not None:
            return f"supervision failed: {self._error}"
        if self.result is not None:
            return f"exited with {self.result.returncode}"
        return "still running"

    def _read(self, timeout_s: float) -> dict[str, Any]:
        assert self._conn is not None and self._reader is not None
        self._conn.settimeout(timeout_s)
        try:
            line = self._reader.readline()
        except (TimeoutError, OSError) as error:
            self.kill()
            raise ReplayError(ErrorKind.EXECUTOR, f"{self.label} did not answer within "
                                                  f"{timeout_s:.0f} s ({error}); see {self.log_path}") from None
        if not line:
            self._join(CLOSE_TIMEOUT_S)
            raise ReplayError(ErrorKind.EXECUTOR, f"{self.label} ended unexpectedly "
                                                  f"({self._exit_detail()}); see {self.log_path}")
        reply = json.loads(line)
        if not isinstance(reply, dict):
            raise ReplayError(ErrorKind.EXECUTOR, f"{self.label} sent a malformed reply")
        return reply

    def request(self, payload: Mapping[str, Any], timeout_s: float) -> dict[str, Any]:
        """Send one request and return its reply; ``ok: false`` replies are returned, not raised."""
        if self._conn is None:
            raise ReplayError(ErrorKind.INTERNAL, f"{self.label} is not running")
        try:
            self._conn.sendall((json.dumps(payload, ensure_ascii=False) + "\n").encode("utf-8"))
        except OSError as error:
            raise ReplayError(ErrorKind.EXECUTOR, f"{self.label} is gone ({error}, "
                                                  f"{self._exit_detail()}); see {self.log_path}") from None
        return self._read(timeout_s)

    @property
    def alive(self) -> bool:
        """Connected, and the companion has not exited."""
        return self._conn is not None and self._thread is not None and self._thread.is_alive()

    def kill(self) -> None:
        """End the companion and everything it started (supervision terminates its process group at the next
        poll: SIGTERM, grace, SIGKILL, then reaps the rest)."""
        self._switch.pull()

    def _join(self, timeout_s: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                self.kill()
                self._thread.join(timeout_s)

    def close(self) -> None:
        """Ask the companion to exit, then make sure it did; idempotent."""
        if self._conn is not None:
            with contextlib.suppress(OSError, ReplayError, ValueError):
                self.request({"op": "close"}, CLOSE_TIMEOUT_S)
            with contextlib.suppress(OSError):
                self._conn.close()
            self._conn = None
        if self._server is not None:
            self._server.close()
            self._server = None
        self._join(CLOSE_TIMEOUT_S)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
