"""What the npm agent CLIs that forkpoint drives with their own tools share (Gemini CLI, Qwen Code; Copilot CLI the
recorded model check and the prefix install): the verified runtime's entrypoint, a settings file in the isolated
HOME, the rebuilt JSONL prefix installed there, the recorded model check, and the environment they run in (no
credentials, the model at a loopback URL, every proxy at a closed port)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

import orjson

from forkpoint.adapters.kit.continuation import write_home_file
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.fs import refused_as, write_file_strict
from forkpoint.core.model import JsonObject
from forkpoint.process import sanitized_env
from forkpoint.sandbox import home_environment

#: the key the agent sends (the bridge and the tool host ignore it; the real upstream key never reaches the agent)
AGENT_KEY = "forkpoint-bridge"
PROXY_SINK = "http://127.0.0.1:9"  # nothing listens there: a background fetch fails at once
_LOOPBACK = "127.0.0.1,localhost,::1"


def installed_entrypoint(agent: str, version: str, title: str) -> Path:
    """The verified runtime's entrypoint (tool replay needs the CLI's own tools even without a continuation)."""
    from forkpoint.runtimes import find

    runtime = find(agent, version)
    if runtime is None:
        raise ReplayError(ErrorKind.CONFIGURATION, f"{title} {version} is not installed; run `forkpoint agents "
                                                   f"install {agent}@{version}` (its own tools re-run the calls)")
    return runtime.entrypoint


def write_settings(home: Path, relative: str, settings: JsonObject, kind: ErrorKind) -> None:
    """A settings file in the isolated HOME, which replayed tools can write: no planted link followed."""
    home.mkdir(parents=True, exist_ok=True)
    with refused_as(kind, f"write {home / relative}"):
        write_file_strict(home, relative, orjson.dumps(settings))


def isolated_env(home: Path, drop_prefixes: tuple[str, ...], values: Mapping[str, str]) -> dict[str, str]:
    """No credentials (and none of the agent's own ``drop_prefixes`` variables), the isolated HOME, every proxy at
    a closed loopback port, loopback exempt, no colour; then ``values`` (the model's URL and the dummy key)."""
    env = home_environment(sanitized_env(os.environ, strip_credentials=True), home)
    for name in list(env):
        if name.startswith(drop_prefixes) or name.lower() in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
            del env[name]
    env.update({"HTTP_PROXY": PROXY_SINK, "HTTPS_PROXY": PROXY_SINK, "http_proxy": PROXY_SINK,
                "https_proxy": PROXY_SINK, "NO_PROXY": _LOOPBACK, "no_proxy": _LOOPBACK, "NO_COLOR": "1", **values})
    return env


def usable_model(model: str | None, allowed: re.Pattern[str], refusal: str) -> str:
    """The recorded model the continuation asks for (it becomes an argv or settings value): refused with
    ``refusal`` unless the recording names one that ``allowed`` matches whole."""
    if model is None or not allowed.fullmatch(model):
        raise ReplayError(ErrorKind.TRAJECTORY, f"{refusal} (the continuation asks for the recorded model)")
    return model


def install_jsonl(prefix: Path, home: Path, target: Path) -> tuple[bytes, list[JsonObject]]:
    """Put the rebuilt JSONL prefix where the CLI resumes it from, in the isolated HOME (replayed tools could write
    the HOME: no link planted there is followed); returns its bytes and its records."""
    data = prefix.read_bytes()
    records = [orjson.loads(line) for line in data.splitlines() if line.strip()]
    write_home_file(home, target, data)
    return data, records
