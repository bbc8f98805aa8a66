"""A tiny REAL MCP server (the official ``mcp`` SDK's ``MCPServer``) for fixtures and tests of MCP tool replay.

    python -m forkpoint.testing.mcp_server                  # stdio
    python -m forkpoint.testing.mcp_server http PORT_FILE   # Streamable HTTP on 127.0.0.1, a free port written to
                                                            # PORT_FILE once it listens

Tools: ``echo`` (structured result), ``plain`` and ``two`` (text blocks only), ``fail`` (an error result), ``count``
(appends to ``count.txt`` in its cwd and answers the line count: an effect on the workspace), ``env`` (one of
its environment variables), ``hang`` (never
answers; with ``spawn`` it first starts a child in its process group that would outlive it), ``flood`` (writes an
endless line to stdout: a server flooding its client).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer

app = MCPServer("tiny")


@app.tool()
def echo(text: str) -> str:
    """Echo the text."""
    return f"echo: {text}"


@app.tool(structured_output=False)
def plain(text: str) -> str:
    """The text, as one text block."""
    return f"plain: {text}"


@app.tool(structured_output=False)
def two(text: str) -> list[str]:
    """Two text blocks."""
    return [f"one {text}", f"two {text}"]


@app.tool()
def fail(reason: str) -> str:
    """Always fails."""
    raise ValueError(f"failed because {reason}")


@app.tool(structured_output=False)
def count(label: str) -> str:
    """Append the label to count.txt (in the server's cwd) and answer how many lines it has."""
    with open("count.txt", "a") as handle:
        handle.write(label + "\n")
    return f"{label}: {len(Path('count.txt').read_text().splitlines())}"


@app.tool(structured_output=False)
def env(name: str) -> str:
    """The server's own environment variable (or ``<unset>``)."""
    return os.environ.get(name, "<unset>")


@app.tool(structured_output=False)
def hang(spawn: bool = False) -> str:
    """Never answers (``spawn``: first starts a sleeping child in the server's process group)."""
    if spawn:
        child = subprocess.Popen(["sleep", "300"])
        Path(os.environ.get("MCP_CHILD_PID_FILE", "child.pid")).write_text(str(child.pid))
    while True:
        time.sleep(3600)


#: (st_dev, st_ino) of the stdout the client reads: the SDK moves it off fd 1 while serving (fd 1 -> stderr)
_PROTOCOL_OUT: tuple[int, int] | None = None


@app.tool(structured_output=False)
def flood() -> str:
    """Writes an endless line to the protocol's stdout (found by its inode: the SDK serves on a dup of fd 1)."""
    chunk = b"x" * 65536
    target = next(fd for fd in range(3, 256) if _same(fd))
    while True:
        os.write(target, chunk)


def _same(fd: int) -> bool:
    try:
        st = os.fstat(fd)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == _PROTOCOL_OUT


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "http":
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        Path(sys.argv[2]).write_text(str(port))  # the client waits until it accepts connections
        app.run("streamable-http", host="127.0.0.1", port=port)
    else:
        global _PROTOCOL_OUT
        st = os.fstat(1)
        _PROTOCOL_OUT = (st.st_dev, st.st_ino)
        app.run("stdio")


if __name__ == "__main__":
    main()
