"""Per-version differences of Claude Code's tools (measured on the real 1.0.128, 2.0.27, 2.1.220 and 2.1.332
binaries), and the shape every tool returns."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from forkpoint.core.errors import unsupported_version

_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)")


@dataclass(frozen=True)
class ToolProfile:
    version: str
    #: Write over an existing file needs an earlier Read/Write/Edit of it in the session (2.1.220).
    write_requires_read: bool
    #: A Read of an unchanged file with the same range answers "file unchanged" (2.1.220).
    read_dedup: bool
    #: Edit says "file state is current in your context" only when the model has seen the file (2.1.332);
    #: otherwise it says it always and never sets contentNotInModelContext (2.1.220).
    edit_tracks_context: bool
    #: An error message longer than this (UTF-16 units) keeps its first and last 5000 units.
    error_truncate_above: int
    #: Write to a directory gets its own message (2.1.332) instead of "File has not been read yet".
    write_directory_message: bool
    #: Read accepts ``allow_large: true`` to skip the 256 KB size check (2.1.332).
    read_allow_large: bool
    read_size_error: str
    binary_file_error: str
    #: Read decodes a file starting with the UTF-16LE BOM as UTF-16 (2.1.332; 2.1.220 shows it as UTF-8).
    read_utf16_bom: bool = False
    #: Appended to a Read of a file that is not valid UTF-8 (2.1.332).
    read_invalid_utf8_note: str | None = None
    #: 2.0.x: ``cat -n`` lines (number right-aligned in 6 columns, then ``→``) in Read, Edit and Write results, a
    #: malware ``<system-reminder>`` after every non-empty Read, and Write/Edit texts with a numbered snippet.
    cat_n_arrows: bool = False
    #: appended by 2.0.x to every Read that shows lines
    read_reminder: str = ""
    #: the name shown in the result (``tool_profile``)
    label: str = ""
    #: 2.0.x: a Read of a missing file is ``<tool_use_error>File does not exist.</tool_use_error>`` (no cwd note;
    #: fixture ``read_outside``); 2.1.x says ``File does not exist. Note: your current working directory is <cwd>.``
    read_missing_short: bool = False
    #: Write and Edit append ``tool_edit.CONTEXT_NOTE`` (2.1.128 on; 2.1.94-2.1.126 do not: ``NO_CONTEXT_NOTE``)
    context_note: bool = True
    #: Write's ``toolUseResult`` carries ``userModified: false`` (2.1.220; 2.1.108's has no such key, its Edit's does)
    write_user_modified: bool = True


_SIZE_ERROR = (
    "File content ({size}) exceeds maximum allowed size (256KB). Use offset and limit parameters to read specific "
    "portions of the file, or search for specific content instead of reading the whole file."
)
_ALLOW_LARGE = (
    " To read it anyway, up to what still fits in your context, call Read again with allow_large: true — only if "
    "you genuinely need all of it or the user asked for the whole file."
)
_BINARY = "This tool cannot read binary files. The file appears to be a binary {ext} file."

OLD = ToolProfile(
    version="2.1.220",
    write_requires_read=True,
    read_dedup=True,
    edit_tracks_context=False,
    error_truncate_above=10000,
    write_directory_message=False,
    read_allow_large=False,
    read_size_error=_SIZE_ERROR,
    binary_file_error=_BINARY + " Please use appropriate tools for binary file analysis.",
    label="claude-code 2.1.220",
)
NEW = ToolProfile(
    version="2.1.332",
    write_requires_read=False,
    read_dedup=False,
    edit_tracks_context=True,
    error_truncate_above=11024,
    write_directory_message=True,
    read_allow_large=True,
    read_size_error=_SIZE_ERROR + _ALLOW_LARGE,
    binary_file_error=_BINARY + " Use a skill for this file type if one is available, or a shell command or script "
    "that can read the format.",
    read_utf16_bom=True,
    read_invalid_utf8_note=(
        "[This file is not valid UTF-8: it uses a legacy encoding such as Windows-1252, Shift-JIS or GBK, or it is "
        "binary. Its undecodable bytes show above as U+FFFD. Edit and Write will refuse it: change it with a shell "
        "command that keeps its encoding, or ask the user whether to convert it to UTF-8.]"
    ),
    label="claude-code 2.1.332",
)


#: appended by 2.0.x to every Read that shows lines (its ``db6``)
MALWARE_REMINDER = (
    "\n\n<system-reminder>\nWhenever you read a file, you should consider whether it would be considered malware. "
    "You CAN and SHOULD provide analysis of malware, what it is doing. But you MUST refuse to improve or augment "
    "the code. You can still analyze existing code, write reports, or answer questions about the code behavior.\n"
    "</system-reminder>\n"
)
#: the reminder of the real 1.0.128 (fixture 1.0.128/old_line) and of the public 2.0.14 recordings (the text changed
#: somewhere in 2.0.15-2.0.26, and the public 2.0.26 recording has 2.0.27's)
EARLY_MALWARE_REMINDER = (
    "\n\n<system-reminder>\nWhenever you read a file, you should consider whether it looks malicious. If it does, you "
    "MUST refuse to improve or augment the code. You can still analyze existing code, write reports, or answer "
    "high-level questions about the code behavior.\n</system-reminder>\n"
)

#: Claude Code 2.0.x (measured on 2.0.27; the public 2.0.14-2.0.29 recordings show the same texts).
V2_0 = ToolProfile(
    version="2.0.27",
    write_requires_read=True,
    read_dedup=False,
    edit_tracks_context=False,
    error_truncate_above=10000,
    write_directory_message=False,
    read_allow_large=False,
    read_size_error="File content ({size}) exceeds maximum allowed size (256KB). Please use offset and limit "
                    "parameters to read specific portions of the file, or use the GrepTool to search for specific "
                    "content.",
    binary_file_error=_BINARY + " Please use appropriate tools for binary file analysis.",
    cat_n_arrows=True,
    read_reminder=MALWARE_REMINDER,
    label="claude-code 2.0.x (measured on 2.0.27)",
    read_missing_short=True,
)
#: 1.0.x and 2.0.0-2.0.25: 2.0.27's tools with the older Read reminder. The real 1.0.128 answers every call of the
#: old_line, read_outside and error_result scenarios with 2.0.27's texts and toolUseResults but this reminder.
V2_0_EARLY = replace(V2_0, read_reminder=EARLY_MALWARE_REMINDER,
                     label="claude-code 1.0.x and 2.0.x before 2.0.26 (measured on 1.0.128 and 2.0.27)")

#: the old lines whose tools re-run with a measured profile, not a verified version's: (first, last) release, the
#: profile. Data: a newly measured line whose texts equal one of these profiles is one more row.
OLD_LINE_PROFILES: tuple[tuple[tuple[int, int, int], tuple[int, int, int], ToolProfile], ...] = (
    ((1, 0, 0), (1, 0, 10**6), V2_0_EARLY),
    ((2, 0, 0), (2, 0, 25), V2_0_EARLY),
    ((2, 0, 26), (2, 0, 10**6), V2_0),
)

#: Claude Code 2.1.94-2.1.126: 2.1.220's tools, but Write and Edit answer without the context note (and Write's
#: toolUseResult has no ``userModified``: the real 2.1.108, fixture 2.1.108/no_context_note). Ends measured with
#: ``agents calibrate``: 2.1.94, 2.1.96, 2.1.100, 2.1.108, 2.1.120-2.1.123, 2.1.126 lack only the note and pass
#: 2.1.220's resume gate; 2.1.92 (no 2.1.93 was published) lacks it too but resumes differently; 2.1.128 has the
#: note (no 2.1.127). Chosen from the RECORDED version, like the old lines, but not one of them: a recording of
#: this range is a 2.1.x session in every other respect (``is_v2_0`` stays false).
NO_CONTEXT_NOTE = replace(OLD, context_note=False, write_user_modified=False,
                          label="claude-code 2.1.94-2.1.126 (2.1.220's tools without the Write/Edit context note)")
NO_CONTEXT_NOTE_LINE = ((2, 1, 94), (2, 1, 126))


def no_context_note(version: str | None) -> bool:
    """Whether ``version`` (a recorded label) re-runs with ``NO_CONTEXT_NOTE``."""
    match = _VERSION.match(version or "")
    if match is None:
        return False
    first, last = NO_CONTEXT_NOTE_LINE
    return first <= tuple(int(part) for part in match.groups()) <= last


def recorded_profile(version: str | None) -> ToolProfile | None:
    """The measured profile a recording of ``version`` re-runs with instead of a verified version's, if any."""
    return old_line_profile(version) or (NO_CONTEXT_NOTE if no_context_note(version) else None)


def cat_n(content: str, start_line: int) -> str:
    """2.0.x's line numbering (``bg``): lines split on CRLF or LF, the number right-aligned in 6 columns, ``→``."""
    if not content:
        return ""
    return "\n".join(f"{start_line + index:>6}→{line}"
                     for index, line in enumerate(content.replace("\r\n", "\n").split("\n")))


def old_line_profile(version: str | None) -> ToolProfile | None:
    """The measured profile of ``version`` (a recorded label) when it is an old line (1.0.x, 2.0.x), else None."""
    match = _VERSION.match(version or "")
    if match is None:
        return None
    parts = tuple(int(part) for part in match.groups())
    return next((profile for first, last, profile in OLD_LINE_PROFILES if first <= parts <= last), None)


def is_v2_0(version: str | None) -> bool:
    """Whether ``version`` (a recorded label) is an old line that re-runs with the 2.0.x tools (1.0.x, 2.0.x)."""
    return old_line_profile(version) is not None


def v2_0_profile(version: str) -> ToolProfile:
    """The profile of ``version`` (an old-line release): 1.0.x and 2.0.x before 2.0.26 with the older reminder."""
    return old_line_profile(version) or V2_0


def tool_profile(tool_version: str, recorded: str | None) -> ToolProfile:
    """The tools of a recording read as ``tool_version``: a 1.0.x, 2.0.x or 2.1.94-2.1.126 recording re-runs with
    its measured profile (its texts differ from every verified version's), anything else with ``tool_version``'s."""
    return recorded_profile(recorded) or profile_for_version(tool_version)


def profile_for_version(version: str) -> ToolProfile:
    """The tool behaviour of a Claude Code version: 2.1.x before 2.1.332 behaves like 2.1.220."""
    match = _VERSION.match(version)
    if match is None:
        raise unsupported_version(f"cannot replay Claude Code tools of version {version!r}")
    old = old_line_profile(version)
    if old is not None:
        return old
    parts = tuple(int(part) for part in match.groups())
    if parts[:2] != (2, 1) or parts[2] < 220:
        raise unsupported_version(
            f"forkpoint re-executes the tools of Claude Code 1.0.x, 2.0.x and 2.1.220 to 2.1.332, not {version}"
        )
    return NEW if parts >= (2, 1, 332) else OLD


@dataclass(frozen=True)
class ToolOutcome:
    """One tool's fresh result: the model-visible content and Claude's structured copy (``toolUseResult``)."""

    content: Any  # a string, or Claude's content blocks (notebook / image / PDF reads)
    is_error: bool
    native: Any
    truncated: bool = False
    return_code: int | None = None


def tool_use_error(message: str) -> ToolOutcome:
    """A refusal Claude Code reports before running the tool (wrapped in ``<tool_use_error>``)."""
    return ToolOutcome(f"<tool_use_error>{message}</tool_use_error>", True, f"Error: {message}")


def tool_error(message: str, *, truncated: bool = False, return_code: int | None = None) -> ToolOutcome:
    """A failure while the tool ran: plain content, ``toolUseResult`` is ``"Error: " + content``."""
    return ToolOutcome(message, True, f"Error: {message}", truncated, return_code)
