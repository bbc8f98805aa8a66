"""The Sandbox base class: where replayed tools and the continued agent run, and how recorded paths map to real ones.

Every tool executor and agent launch goes through one ``Sandbox`` per run:

- ``run(argv, cwd=..., env=..., timeout_s=..., network=..., writable=..., readable=...)`` starts a command through
  ``forkpoint.process.run_supervised`` (deadline, output caps, no surviving descendants), inside the sandbox:
  each backend only says how (``confine``: the command line and the host directory it starts in).
  ``cwd`` is a path *as the tools see it*; ``network=False`` is the tool-replay default (a backend that cannot
  isolate the network says so in ``describe()``); ``writable`` / ``readable`` are host paths the command needs
  besides the workspace (the agent's HOME, a scratch dir, the agent's runtime), visible at the same path.
- ``cwd`` is where the agent starts (the recorded cwd under ``bwrap``); ``roots`` every spelling of the
  workspace the tools may use (``roots[0]`` is what ``pwd -P`` prints there); ``host_path(p)`` turns a path the
  tools see into the host path forkpoint itself opens (in-process file tools).
- ``path_map`` (``--path-map OLD=NEW``, local only): recorded paths in tool *inputs* are rewritten OLD -> NEW for
  execution, and NEW -> OLD in outputs, by ``rewrite_arguments`` / ``restore_paths`` below; both record what they
  changed in ``path_rewrites`` / ``path_restores`` (result metadata).

Path-map text rules (the same both ways): a prefix matches only as a whole path — not preceded by a letter,
digit, ``_``, ``.``, ``-`` or ``/``, and not followed by a letter, digit, ``_``, ``-``, or a ``.`` that continues
a name (``.`` then one of those characters or ``.``) — so ``/work`` matches in ``/work/a``, ``cd /work;`` and
``... is /work.`` but never inside ``/home/work``, ``/work-2`` or ``/work.txt``. Entries apply longest first,
in one pass (a replacement is never rewritten again).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forkpoint.core.errors import ErrorKind, ReplayError, configuration
from forkpoint.core.model import FreshObservation
from forkpoint.process import ProcessResult, run_supervised

if TYPE_CHECKING:
    from forkpoint.sandbox.executor import CommandExecutor

_NAME_CHARS = r"\w.\-"


def _normal(path: str) -> str:
    return os.path.normpath(path) if path != "/" else path


@dataclass(frozen=True)
class PathMap:
    """``(recorded, real)`` absolute path prefixes, from ``--path-map RECORDED=REAL`` entries."""

    entries: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, specs: Sequence[str]) -> PathMap:
        entries: list[tuple[str, str]] = []
        for spec in specs:
            old, sep, new = spec.partition("=")
            if not sep or not old or not new:
                raise configuration(f"path_map entry {spec!r} must look like OLD=NEW (two absolute paths)")
            if not (os.path.isabs(old) and os.path.isabs(new)):
                raise configuration(f"path_map entry {spec!r}: both paths must be absolute")
            old, new = _normal(old), _normal(new)
            if "/" in (old, new):
                raise configuration(f"path_map entry {spec!r}: the file system root cannot be mapped")
            if old == new:
                raise configuration(f"path_map entry {spec!r} maps a path to itself")
            if any(old == known for known, _ in entries):
                raise configuration(f"path_map maps {old} twice")
            entries.append((old, new))
        return cls(tuple(entries))

    def __bool__(self) -> bool:
        return bool(self.entries)

    def to_real(self, text: str) -> tuple[str, int]:
        """Recorded -> real in free text; the number of replacements."""
        return _substitute(text, {old: new for old, new in self.entries})

    def to_recorded(self, text: str) -> tuple[str, int]:
        """Real -> recorded in free text (the inverse rule, for outputs)."""
        return _substitute(text, {new: old for old, new in self.entries})

    def map_path(self, path: str) -> str:
        """One whole path through the map (recorded -> real)."""
        return self.to_real(_normal(path))[0]

    def to_json(self) -> list[dict[str, str]]:
        return [{"recorded": old, "real": new} for old, new in self.entries]


def _substitute(text: str, table: Mapping[str, str]) -> tuple[str, int]:
    if not table or not text:
        return text, 0
    keys = sorted(table, key=len, reverse=True)
    pattern = re.compile(
        rf"(?<![{_NAME_CHARS}/])(?:{'|'.join(re.escape(key) for key in keys)})(?![\w-]|\.[{_NAME_CHARS}])"
    )
    count = 0

    def replace(match: re.Match[str]) -> str:
        nonlocal count
        count += 1
        return table[match.group(0)]

    return pattern.sub(replace, text), count


class Sandbox:
    """Where one run's tools and agent execute (see the module docstring); a backend implements ``host_path``,
    ``confine`` and ``describe``."""

    name: str
    workspace: Path  # the real workspace on the host (absolute)
    cwd: str  # where the agent and its tools start, as they see it
    roots: tuple[str, ...]  # every spelling of the workspace the tools may use; roots[0] = physical
    path_map: PathMap
    path_rewrites: list[dict[str, Any]]
    path_restores: list[dict[str, Any]]
    #: the backend gives a command its own network namespace: the continued agent then reaches only the bridge,
    #: through ``forkpoint.sandbox.forward`` (False: the host's network is shared, nothing to forward)
    private_network: bool = False

    def host_path(self, path: str) -> str:
        """The host path of a path the tools see (identity outside the workspace mount)."""
        raise NotImplementedError

    def confine(
        self, argv: Sequence[str], cwd: str, *, network: bool, writable: Sequence[Path], readable: Sequence[Path]
    ) -> tuple[list[str], Path]:
        """The command line that runs ``argv`` inside the sandbox, and the host directory it starts in."""
        raise NotImplementedError

    def host_command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` of a host program, as a command started *inside* the sandbox by another one (the bridge relay)
        runs it: unchanged, except in an image root, where a host program needs the host's loader."""
        return list(argv)

    def host_file(self, path: str) -> str:
        """Where the host's file ``path`` (absolute: a program for ``host_command``, a CA bundle) is seen inside the
        sandbox: at its own path, except in an image root, where a path in the system folders names the image's
        file (the host's is bound apart there, read-only)."""
        return path

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str],
        timeout_s: float,
        network: bool = False,
        writable: Sequence[Path] = (),
        readable: Sequence[Path] = (),
        **options: Any,
    ) -> ProcessResult:
        """Run a command to completion inside the sandbox (``options`` go to ``run_supervised``)."""
        command, host_cwd = self.confine(argv, cwd, network=network, writable=writable, readable=readable)
        return run_supervised(command, cwd=host_cwd, env=env, timeout_s=timeout_s, **options)

    def executor(self) -> CommandExecutor:
        """What runs one replay's commands (``close`` it at the end of the replay): here each command in a sandbox of
        its own (``run``); bwrap keeps one sandbox for them all (``forkpoint.sandbox.executor``)."""
        from forkpoint.sandbox.executor import CommandExecutor

        return CommandExecutor(self)

    def describe(self) -> dict[str, Any]:
        """What the sandbox did, for result metadata."""
        raise NotImplementedError


def within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def inside_roots(path: str, cwd: str, roots: Iterable[str], refusal: str) -> str:
    """``path`` made absolute against ``cwd`` (as the tools see them); refused before any effect when it lies
    outside every spelling of the workspace (``refusal`` says which tool and why)."""
    absolute = os.path.normpath(os.path.join(cwd, path))
    if not any(within(absolute, root) for root in roots):
        raise ReplayError(ErrorKind.EXECUTOR, refusal, before_effect=True)
    return absolute


def rewrite_arguments(sandbox: Sandbox, call_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Tool input with recorded paths rewritten for execution (every string value); logged per top-level field."""
    if not sandbox.path_map:
        return arguments
    rewritten: dict[str, Any] = {}
    for name, value in arguments.items():
        new, count = _map_strings(value, sandbox.path_map.to_real)
        rewritten[name] = new
        if count:
            sandbox.path_rewrites.append({"call_id": call_id, "field": name, "count": count})
    return rewritten


def restore_paths(sandbox: Sandbox, call_id: str, where: str, value: Any) -> Any:
    """Output with the real paths mapped back to the recorded ones (every string inside ``value``)."""
    if not sandbox.path_map:
        return value
    new, count = _map_strings(value, sandbox.path_map.to_recorded)
    if count:
        sandbox.path_restores.append({"call_id": call_id, "where": where, "count": count})
    return new


def fresh_observation(sandbox: Sandbox, call_id: str, started: float, *, content: Any, native: Any, is_error: bool,
                      truncated: bool, return_code: int | None) -> FreshObservation:
    """One re-run call's observation, timed from ``started`` (``time.monotonic``), with the real paths in its
    content and native copy mapped back to the recorded ones (``--path-map``)."""
    return FreshObservation(
        call_id=call_id,
        content=restore_paths(sandbox, call_id, "content", content),
        is_error=is_error,
        truncated=truncated,
        return_code=return_code,
        duration_ms=int((time.monotonic() - started) * 1000),
        native=restore_paths(sandbox, call_id, "native", native),
    )


def _map_strings(value: Any, function: Callable[[str], tuple[str, int]]) -> tuple[Any, int]:
    if isinstance(value, str):
        return function(value)
    if isinstance(value, list):
        total = 0
        items = []
        for item in value:
            mapped, count = _map_strings(item, function)
            items.append(mapped)
            total += count
        return items, total
    if isinstance(value, dict):
        total = 0
        mapping = {}
        for key, item in value.items():
            mapped, count = _map_strings(item, function)
            mapping[key] = mapped
            total += count
        return mapping, total
    return value, 0
