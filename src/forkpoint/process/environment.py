"""The environment a supervised child gets: credentials stripped for everything a replay runs.

Kept apart from the supervisor because launchers and tool executors build environments long before (and
without) running anything, and the rule is a policy, not process mechanics.
"""

from __future__ import annotations

from collections.abc import Mapping

from forkpoint.process import childenv

_ALWAYS_DROPPED = frozenset({"PYTHONHOME", "PYTHONPATH", "VIRTUAL_ENV"})


def sanitized_env(base: Mapping[str, str], *, strip_credentials: bool) -> dict[str, str]:
    """The environment of a child: with ``strip_credentials`` (every replayed command, agent and tool runner),
    only ``base``'s allowlisted names plus the run's ``--env`` values (``process.childenv``); without it (forkpoint's
    own git/cp on the user's behalf), ``base`` minus what would redirect Python."""
    if strip_credentials:
        return {**childenv.allowlisted(base), **childenv.passed()}
    return {name: value for name, value in base.items() if name not in _ALWAYS_DROPPED}
