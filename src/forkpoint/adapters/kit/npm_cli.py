"""What the npm agent CLIs that forkpoint drives with their own tools share (Gemini CLI, Qwen Code; Copilot CLI the
recorded model check and the prefix install): the verified runtime's entrypoint, a settings file in the isolated
HOME, the rebuilt JSONL prefix installed there, the recorded model check, and the environment they run in (no
credentials, the model at a loopback URL, every proxy at a closed port)."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from forkpoint.adapters.kit.continuation import write_home_file
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.fs import refused_as, write_file_strict
from forkpoint.core.model import JsonObject
from forkpoint.process import sanitized_env
from forkpoint.sandbox import home_environment, runtime_paths

if TYPE_CHECKING:
    from forkpoint.sandbox.base import Sandbox

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


#: where the host keeps its CA bundle (Debian, Fedora, Alpine/macOS), after ``SSL_CERT_FILE``
_CA_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem")


@dataclass(frozen=True)
class NodeStart:
    """How a Node CLI starts in an image root, where the host's node runs through the host's loader and so cannot
    start itself again (its ``process.execPath`` is the loader, which refuses node's flags): the variable that
    stops its self-relaunch, and what the relaunch would have given it (node flags; the bundle ``script`` the bin
    wrapper would have spawned, relative to the bin script's folder)."""

    no_relaunch: str
    node_args: tuple[str, ...] = ()
    script: str | None = None


@dataclass(frozen=True)
class NodeCommand:
    argv: list[str]  # the head: node, its flags, the script
    readable: tuple[Path, ...]
    env: dict[str, str]  # what the CLI's environment gets on top (empty outside an image root)


def ca_bundle_env(sandbox: Sandbox) -> dict[str, str]:
    """In an image root, the host's CA bundle (bound read-only apart, ``Sandbox.host_file``) as
    ``SSL_CERT_FILE`` and ``NODE_EXTRA_CA_CERTS``: Copilot CLI refuses to start without trust roots (it talks only
    to the loopback model, but loads them at start), and the host's values name files the image may lack."""
    candidates = (os.environ.get("SSL_CERT_FILE") or "", *_CA_BUNDLES)
    bundle = next((path for path in candidates if os.path.isabs(path) and os.path.isfile(path)), None)
    if bundle is None:
        return {}
    bound = sandbox.host_file(bundle)
    if bound == bundle:
        return {}
    return {"SSL_CERT_FILE": bound, "NODE_EXTRA_CA_CERTS": bound, "SSL_CERT_DIR": os.path.dirname(bound)}


def node_command(sandbox: Sandbox, entrypoint: Path, start: NodeStart) -> NodeCommand:
    """How the CLI starts in ``sandbox``: a ``#!/usr/bin/env node`` bin script as ``<node> <script>`` on the node
    its shebang finds for forkpoint (PATH's: the one it was installed with), never through the shebang (an image
    root has neither the host's ``env`` nor its ``node``: ``Sandbox.host_file`` binds it there, and
    ``host_command`` gives it the host's loader, so ``start`` says how it runs without relaunching itself).
    Anything else (a native binary, another interpreter's script) starts as it is."""
    readable = runtime_paths(entrypoint)
    try:
        with entrypoint.open("rb") as handle:
            first = handle.readline(256)
    except OSError:
        return NodeCommand([str(entrypoint)], readable, {})
    words = first[2:].split() if first.startswith(b"#!") else []
    if not words or b"node" not in (os.path.basename(words[0]), words[-1]):
        return NodeCommand([str(entrypoint)], readable, {})
    found = shutil.which("node")
    if found is None:
        raise ReplayError(ErrorKind.CONFIGURATION, f"{entrypoint} runs on Node.js, and no `node` is on PATH")
    node = os.path.realpath(found)
    # a node outside the system folders (nvm's, under a hidden HOME) is bound in with the runtime
    readable = (*readable, *(() if node.startswith(("/usr/", "/bin/")) else (Path(node).parent,)))
    inside = sandbox.host_file(node)
    if sandbox.host_command([inside]) == [inside]:  # node starts itself again as usual
        return NodeCommand([inside, str(entrypoint)], readable, {})
    script = entrypoint.parent / start.script if start.script else entrypoint
    heap = f"--max-old-space-size={os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') // 2 ** 21}"
    return NodeCommand([inside, *start.node_args, heap, str(script)], readable,
                       {start.no_relaunch: "true", **ca_bundle_env(sandbox)})


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
