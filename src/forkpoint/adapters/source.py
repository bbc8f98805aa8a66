"""Read a trajectory whole, within the one size bound every parser honours (``--max-trajectory-bytes``).

The bound is checked on the opened file's size before anything is read, so an oversized (or sparse) file is
refused without its bytes ever reaching memory, and a file that grows while it is read is refused too.
"""

from __future__ import annotations

import os
from pathlib import Path

from forkpoint.core.errors import trajectory
from forkpoint.core.fs import (
    DEFAULT_MAX_INPUT_BYTES,
    InputChangedError,
    InputTooLargeError,
    NotRegularFileError,
    read_bounded_input,
)


def too_large_message(path: Path, size: int | None, max_bytes: int, what: str = "trajectory") -> str:
    actual = f"is {size} bytes" if size is not None else "grew"
    return (f"the {what} {path} {actual}, over the trajectory size bound of {max_bytes} bytes "
            f"({max_bytes / 1024 / 1024:.1f} MiB); if the file is trusted, raise the bound with "
            "--max-trajectory-bytes N (max_trajectory_bytes in a --config / --request file)")


def read_trajectory(path: Path, max_bytes: int = DEFAULT_MAX_INPUT_BYTES, what: str = "trajectory") -> bytes:
    """The file's bytes; a trajectory error when it is too large, not a regular file, or changes while read.

    Other ``OSError``s propagate: each parser words an unreadable file as before.
    """
    try:
        return read_bounded_input(path, max_bytes)
    except InputTooLargeError:
        try:
            size: int | None = os.stat(path).st_size
        except OSError:
            size = None
        raise trajectory(too_large_message(path, size, max_bytes, what)) from None
    except (InputChangedError, NotRegularFileError) as error:
        raise trajectory(f"cannot read the {what} {path}: {error}") from None
