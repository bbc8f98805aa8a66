"""Inside a network-less sandbox: listen on 127.0.0.1:PORT, relay every connection to a Unix socket, run a command.

Run as ``python -I -S forward_inside.py FOLDER SOCKET_NAME PORT -- ARGV...`` by ``forkpoint.sandbox.forward``
(stdlib only: it runs with the interpreter forkpoint runs on, bound read-only into the sandbox). The sandbox has its own
network namespace with only a loopback interface, so the agent's ``http://127.0.0.1:PORT/...`` bridge URL reaches
this listener, and through the Unix socket (bound into the sandbox) forkpoint's relay on the host, which connects
to the bridge. Nothing else on the host or beyond is reachable. The process exits with the command's status once
the command ends (a signal ``N`` as ``128 + N``, as a shell reports it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading

_CHUNK = 65536


def _pump(source: socket.socket, target: socket.socket) -> None:
    try:
        while True:
            data = source.recv(_CHUNK)
            if not data:
                break
            target.sendall(data)
    except OSError:
        pass
    finally:
        for end, how in ((target, socket.SHUT_WR), (source, socket.SHUT_RD)):
            with contextlib.suppress(OSError):
                end.shutdown(how)


def _serve(client: socket.socket, path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)  # /proc/self/fd/<folder fd>/<name>: a Unix socket path is limited to 108 bytes
    except OSError:
        client.close()
        upstream.close()
        return
    back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
    back.start()
    _pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


def _accept(server: socket.socket, path: str) -> None:
    while True:
        try:
            client, _ = server.accept()
        except OSError:
            return
        threading.Thread(target=_serve, args=(client, path), daemon=True).start()


def main(argv: list[str]) -> int:
    if len(argv) < 5 or argv[3] != "--":
        print("usage: forward_inside.py FOLDER SOCKET_NAME PORT -- ARGV...", file=sys.stderr)
        return 2
    folder_fd = os.open(argv[0], os.O_RDONLY | os.O_DIRECTORY)  # kept open (not inherited) while this runs
    path, port, command = f"/proc/self/fd/{folder_fd}/{argv[1]}", int(argv[2]), argv[4:]
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen(64)
    threading.Thread(target=_accept, args=(server, path), daemon=True).start()
    child = subprocess.Popen(command)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda number, _frame: child.send_signal(number))
    code = child.wait()
    server.close()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.stdout.flush()
    os._exit(main(sys.argv[1:]))
