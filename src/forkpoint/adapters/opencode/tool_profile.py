"""Per-line OpenCode tool profiles: which REAL binary re-runs a recording's tool calls (issue 28).

OpenCode's tools live inside its Bun binary and forkpoint never re-implements them (toolhost). A recording of a
verified version's format re-runs its calls with the verified binary it is read as (1.17.11 / 1.18.33). A release
line whose tool texts differ from every verified version's gets a row in ``LINES``: its calls re-run with that
line's OWN binary, so the fresh observations are its own texts, not a translation of another version's. The row
names the release whose binary was measured (calibrated, and a real-binary fixture recorded with it); a recording
of another release of the line re-runs with that release's binary when it is installed, else with the measured one.

1.2 (measured on 1.2.6 against 1.17.11, by its bundled tool code and the calibration probe; ``DIFFERENCES``):
the texts of read (line layout and splitting, its continuation notes, line truncation), grep's last line and
every error text (``Error: `` first) differ; bash, write, edit and glob outputs are the same (the probe's).
1.3 (measured on 1.3.2 by the calibration probe): read's ``<content>`` layout and grep's last line as 1.2; its
error texts and events are 1.17's. 1.14.41's tools are all 1.17's (where 1.4-1.13 change is not measured).
With no binary of the line installed the calls re-run with the verified binary as before, and the result says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from forkpoint.core.releases import number

AGENT = "opencode"


@dataclass(frozen=True)
class ToolLine:
    """Releases ``oldest``..``newest`` (inclusive) re-run their tools with their own line's binary."""

    oldest: tuple[int, int, int]
    newest: tuple[int, int, int]
    #: the release whose binary was measured (calibrated, fixture recorded): the line's binary by default
    measured: str
    label: str
    #: what differs from the verified versions' tools (shown in docs and the calibration's detail)
    differences: tuple[str, ...]
    #: ``run --format=json`` prints a ``tool_use`` event for a failed call too (1.2 prints completed ones only)
    error_events: bool = True

    def covers(self, version: tuple[int, int, int]) -> bool:
        return self.oldest <= version <= self.newest


#: measured on the real 1.2.6 (``forkpoint agents calibrate opencode@1.2.6``; tests/fixtures/opencode/1.2.6)
LINE_1_2 = ToolLine(
    (1, 2, 0), (1, 2, 999_999_999), "1.2.6", "opencode 1.2 (measured on 1.2.6)",
    ("read: `<content>` is followed by the first line on the same line; the file is split on every newline, so a "
     "final newline shows one more, empty line and counts in `(End of file - total N lines)`",
     "read: `(File has more lines. Use 'offset' parameter to read beyond line N)` and `(Output truncated at 51200 "
     "bytes. ...)` instead of 1.17's `(Showing lines A-B of N. Use offset=N+1 to continue.)` / `(Output capped at "
     "50 KB. ...)`; a long line ends with `...`, not `... (line truncated to 2000 chars)`",
     "grep: no newline after the last match line",
     "every tool error (an `error` part) starts with `Error: ` (the thrown Error's string), which 1.17 drops: "
     "`Error: File not found: PATH`, `Error: Could not find oldString in the file. ...`"),
    error_events=False,
)
#: measured on the real 1.3.2 by the release sweep's older window (``forkpoint agents calibrate opencode@1.3.2``
#: against 1.17.11: 7 of 10 exact); its error texts and events are 1.17's (1.14.41's tools are all 1.17's)
LINE_1_3 = ToolLine(
    (1, 3, 0), (1, 3, 999_999_999), "1.3.2", "opencode 1.3 (measured on 1.3.2)",
    ("read: `<content>` is followed by the first line on the same line (both reads of the probe)",
     "grep: no newline after the last match line"),
)
LINES: tuple[ToolLine, ...] = (LINE_1_2, LINE_1_3)


def line_for(recorded: str | None) -> ToolLine | None:
    """The tool line of a recorded version label (None: the verified binary it is read as runs its tools)."""
    value = number(recorded)
    return next((line for line in LINES if value is not None and line.covers(value)), None)


def _plain(recorded: str | None) -> str | None:
    """``major.minor.patch`` rebuilt from the label's numbers: the only form that ever becomes a cache path."""
    value = number(recorded)
    return ".".join(map(str, value)) if value is not None and recorded == ".".join(map(str, value)) else None


def installed_release(line: ToolLine, recorded: str | None) -> str | None:
    """The release whose binary re-runs the line's tools: the recorded release when it is installed, else the
    measured one when it is; None when neither is (manifests only: no probe, for prepare-time notes)."""
    from forkpoint import runtimes

    for release in dict.fromkeys(v for v in (_plain(recorded), line.measured) if v is not None):
        if line.covers(number(release) or (0, 0, 0)) and runtimes.find(AGENT, release) is not None:
            return release
    return None


def line_binary(line: ToolLine, recorded: str | None) -> Path | None:
    """The entrypoint of ``installed_release``, which must report that version when probed (refused otherwise,
    as a verified runtime would be); None when no binary of the line is installed."""
    from forkpoint import runtimes
    from forkpoint.core.errors import unsupported_version

    release = installed_release(line, recorded)
    runtime = runtimes.find(AGENT, release) if release is not None else None
    if runtime is None:
        return None
    probed = runtimes.probe_version(runtime)
    if probed != release:
        raise unsupported_version(f"the installed {AGENT} runtime reports {probed}, expected {release}; reinstall it")
    return runtime.entrypoint
