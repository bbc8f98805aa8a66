"""Calibrated versions: the user's own proof that an unshipped release behaves like a verified one (issue 28).

``forkpoint agents calibrate AGENT@VERSION`` (``forkpoint.adapters.calibrate``) records the release against
ScriptedModel and checks it against a verified profile; on success it writes ``<version>.json`` here, the profile
:func:`forkpoint.adapters.versions.resolve` then reads (status ``calibrated``, tools and continuation as the
profile it maps to). A failed calibration writes only ``<version>.failed.json`` (the reason, for ``agents list``)
and its report; an earlier successful profile is left as it was.

Layout: ``$FORKPOINT_CALIBRATIONS`` or ``~/.cache/forkpoint/calibrations``, then ``<agent>/<version>.json``. The
version string is validated (:func:`check_target`) before it becomes a path; profiles are read bounded, never
through a link, and ignored unless every field is consistent with the agent's spec.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from forkpoint.adapters.spec import AgentSpec
from forkpoint.core.errors import configuration

SCHEMA = "forkpoint.calibration/v1"
#: a release number, optionally with a pre-release tag: nothing a path or an option could be made of
_VERSION = re.compile(r"^\d{1,9}\.\d{1,9}\.\d{1,9}(?:-[0-9A-Za-z]{1,32}(?:\.[0-9A-Za-z]{1,32}){0,3})?$")
_AGENT = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
MAX_TARGET_CHARS = 100
MAX_PROFILE_BYTES = 256 * 1024


def root() -> Path:
    env = os.environ.get("FORKPOINT_CALIBRATIONS")
    return Path(env) if env else Path.home() / ".cache" / "forkpoint" / "calibrations"


def valid_version(version: str) -> bool:
    return len(version) <= 64 and _VERSION.fullmatch(version) is not None


def check_target(target: str) -> tuple[str, str]:
    """``AGENT@VERSION`` split and validated: a known agent forkpoint installs and a plain release number.
    Refused (configuration) before anything is installed or any path is built."""
    if len(target) > MAX_TARGET_CHARS:
        raise configuration(f"expected AGENT@VERSION, got {len(target)} characters")
    agent, at, version = target.partition("@")
    shown = target.encode("unicode_escape").decode("ascii")
    if not at or not _AGENT.fullmatch(agent):
        raise configuration(f"expected AGENT@VERSION, got {shown!r}")
    if not valid_version(version):
        raise configuration(f"{shown!r}: the version must be a release number like 2.1.331 "
                            "(digits and dots, an optional -tag)")
    return agent, version


def profile_path(agent: str, version: str) -> Path:
    if not _AGENT.fullmatch(agent) or not valid_version(version):
        raise configuration("invalid calibration target")
    return root() / agent / f"{version}.json"


def failed_path(agent: str, version: str) -> Path:
    return profile_path(agent, version).with_name(f"{version}.failed.json")


def report_path(agent: str, version: str) -> Path:
    return profile_path(agent, version).with_name(f"{version}.report.md")


@dataclass(frozen=True)
class Calibration:
    """One calibrated version: the verified version whose tool semantics and envelope it was proven to share."""

    agent: str
    version: str
    maps_to: str
    format_family: str
    checked: tuple[str, ...]
    calibrated_at: str
    #: the release line's own tool profile its tools re-run with (OpenCode 1.2), when not ``maps_to``'s
    tool_profile: str | None = None


@dataclass
class Check:
    """One check: its name, the candidate it ran against (None: version independent), pass/fail and detail."""

    check: str
    ok: bool
    detail: str
    against: str | None = None

    def to_json(self) -> dict[str, object]:
        return {"check": self.check, "against": self.against, "ok": self.ok, "detail": self.detail}


@dataclass
class Outcome:
    agent: str
    version: str
    family: str | None = None
    maps_to: str | None = None
    checks: list[Check] = field(default_factory=list)
    reason: str | None = None
    #: what the probe recorded, kept with the calibration: file name -> bytes (the native session, the requests)
    evidence: dict[str, bytes] = field(default_factory=dict)
    #: the tool profile of the release's own line its calls re-ran with, when not the candidate's (OpenCode 1.2)
    tool_profile: str | None = None

    @property
    def ok(self) -> bool:
        return self.maps_to is not None and self.reason is None

    def report(self) -> str:
        head = (f"calibrated: {self.agent} {self.version} maps to {self.maps_to}" if self.ok
                else f"FAILED: {self.agent} {self.version}: {self.reason}")
        tools = [f"tool profile: {self.tool_profile}", ""] if self.tool_profile else []
        lines = [f"# forkpoint calibration of {self.agent} {self.version}", "", head, "",
                 f"format family: {self.family or '(not read)'}", "", *tools, "| check | against | result | detail |",
                 "|---|---|---|---|"]
        for check in self.checks:
            detail = check.detail.replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {check.check} | {check.against or '-'} | {'ok' if check.ok else 'DIFFERS'} | {detail} |")
        return "\n".join(lines) + "\n"


def _read_bounded(path: Path) -> Any:
    """The JSON document at ``path``; None when it is missing, a link, not a regular file, too big or not JSON."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb") as handle:
            fd = -1
            data = handle.read(MAX_PROFILE_BYTES + 1)
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > MAX_PROFILE_BYTES:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return None


def load(spec: AgentSpec, version: str | None) -> Calibration | None:
    """The calibration of ``version`` of this agent, when a consistent one exists (anything else: None)."""
    if version is None or not valid_version(version) or version in spec.versions:
        return None
    data = _read_bounded(profile_path(spec.name, version))
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or data.get("status") != "calibrated":
        return None
    maps_to, family = data.get("maps_to"), data.get("format_family")
    if data.get("agent") != spec.name or data.get("version") != version or maps_to not in spec.versions:
        return None
    if family not in {f.name for f in spec.formats}:
        return None
    checked = data.get("checked")
    names = tuple(str(c.get("check")) for c in checked if isinstance(c, dict)) if isinstance(checked, list) else ()
    tools = data.get("tool_profile")
    return Calibration(spec.name, version, str(maps_to), str(family), names, str(data.get("calibrated_at")),
                       tools[:200] if isinstance(tools, str) else None)


def failure(spec: AgentSpec, version: str) -> str | None:
    """Why the last calibration of ``version`` failed (bounded), when it did."""
    if not valid_version(version):
        return None
    data = _read_bounded(failed_path(spec.name, version))
    reason = data.get("reason") if isinstance(data, dict) else None
    return reason[:300] if isinstance(reason, str) else None


def listed(spec: AgentSpec) -> list[tuple[str, str, str]]:
    """``(version, "calibrated" | "failed", detail)`` for every calibration of this agent in the cache."""
    folder = root() / spec.name
    try:
        names = sorted(os.listdir(folder))[:1000]
    except OSError:
        return []
    rows = []
    for name in names:
        if name.endswith(".json") and not name.endswith(".failed.json") \
                and valid_version(version := name[:-len(".json")]) and (found := load(spec, version)) is not None:
            why = failure(spec, version)
            tools = f", tools as {found.tool_profile}" if found.tool_profile else ""
            rows.append((version, "calibrated", f"as {found.maps_to}{tools}" + (f"; the last re-run failed: {why}"
                                                                                 if why else "")))
        elif name.endswith(".failed.json") and valid_version(version := name[:-len(".failed.json")]) \
                and load(spec, version) is None and (why := failure(spec, version)) is not None:
            rows.append((version, "failed", why))
    return rows


def evidence_path(agent: str, version: str, ok: bool) -> Path:
    return profile_path(agent, version).with_name(f"{version}.probe" if ok else f"{version}.failed-probe")


def compact_requests(requests: list[dict[str, Any]]) -> bytes:
    """The model requests a probe received, one JSON line each, the big constant parts (system prompt, tools,
    instructions) replaced by their SHA-256."""
    import hashlib

    lines = []
    for entry in requests:
        body = entry.get("body")
        if isinstance(body, dict):
            body = {key: ({"sha256": hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()}
                          if key in ("system", "tools", "instructions") else value) for key, value in body.items()}
        lines.append(json.dumps({"kind": entry.get("kind"), "path": entry.get("path"), "body": body},
                                ensure_ascii=False))
    return ("\n".join(lines) + "\n").encode("utf-8")


def write_folder(path: Path, files: dict[str, bytes]) -> None:
    """Replace the folder ``path`` by one holding ``files`` (written beside it, then renamed into place)."""
    import shutil
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        for name, data in files.items():
            (staging / name).write_bytes(data)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        staging.rename(path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed over it: a reader sees the old or the new."""
    import tempfile  # only calibrate writes; a replay reading profiles loads no temp-file module

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
