"""Which of the options a run passes an agent release accepts, read from the release's own ``--help``.

A calibration runs releases other than the verified ones, and an older release exits on an option it does not
know (Copilot CLI 1.0.82 on ``--disable-client-telemetry``, OpenCode 1.1.16 on ``run --thinking``): such a run
passes only the options the release's help lists. The verified runtimes get every option without a process; another
release's help is read once per entrypoint (bounded, under a deadline, as a runtime's version probe).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable
from contextlib import nullcontext
from pathlib import Path

HELP_TIMEOUT_S = 60.0
_XDG = ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME")

#: (resolved entrypoint, help argv, options) -> the options that help listed
_READ: dict[tuple[str, tuple[str, ...], tuple[str, ...]], list[str]] = {}


def known_options(help_text: str, options: tuple[str, ...]) -> list[str]:
    """The ``options`` a help text lists (as whole words: ``--no-ask-user`` is not ``--no-ask``)."""
    return [option for option in options if re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", help_text)]


def offered_options(agent: str, verified: Iterable[str], entrypoint: Path, options: tuple[str, ...],
                    help_args: tuple[str, ...], marker: str, env: tuple[tuple[str, str], ...] = (),
                    timeout_s: float = HELP_TIMEOUT_S, private_home: bool = False) -> list[str]:
    """``options`` the binary at ``entrypoint`` accepts: all of them for a ``verified`` version's runtime of
    ``agent`` (no process); for another release those its ``<entrypoint> <help_args>`` lists, read once per
    entrypoint, from stdout and stderr (OpenCode 1.17 prints ``run --help`` on stderr, 1.1 on stdout).
    ``private_home``: HOME and the XDG folders in a folder removed afterwards (OpenCode writes its cache, config and
    log folders there even for a help). A help that cannot be read, or does not show ``marker`` (an option every
    release has: the text is that command's help), yields all of them (not cached), so the run fails as before and
    its stderr says why."""
    from forkpoint.runtimes import find

    resolved = entrypoint.resolve()
    for version in verified:
        runtime = find(agent, version)
        if runtime is not None and runtime.entrypoint.resolve() == resolved:
            return list(options)
    key = (str(resolved), help_args, options)
    if key in _READ:
        return list(_READ[key])
    try:
        text = _read_help([str(entrypoint), *help_args], timeout_s, env, private_home)
    except (OSError, subprocess.TimeoutExpired):
        return list(options)
    if text is None or not known_options(text, (marker,)):
        return list(options)
    _READ[key] = known_options(text, options)
    return list(_READ[key])


def _read_help(argv: list[str], timeout_s: float, env: tuple[tuple[str, str], ...], private_home: bool) -> str | None:
    """A help's stdout and stderr (None when it exits non-zero), run as a version probe."""
    from forkpoint.process.childenv import private_temp_dir
    from forkpoint.runtimes.base import run_probe

    with private_temp_dir("fp-help-home-") if private_home else nullcontext(None) as home:
        homes = () if home is None else (("HOME", str(home)), *((name, str(home / name.lower()))
                                                               for name in _XDG))
        done = run_probe(argv, timeout_s, (*env, *homes))
    return done.stdout + "\n" + done.stderr if done.returncode == 0 else None
