"""Regenerate src/forkpoint/cli/help/<python>/: `forkpoint --help` and every `forkpoint COMMAND --help` as
argparse prints them at 80 columns under this Python, so the CLI answers `--help` without importing argparse.

Run after changing any option or help text: `PYTHONPATH=src python3 scripts/regen_cli_help.py` (tests/test_cli.py
fails until the stored texts equal argparse's). Under another Python it adds that Python's texts.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def main() -> None:
    os.environ["COLUMNS"] = "80"  # the stored width, whatever terminal this runs in
    from forkpoint.cli import stored_help
    from forkpoint.cli.parser import build_parser, every_help

    python = (sys.version_info[0], sys.version_info[1])
    texts = {Path(stored_help(command.split(), python)): text for command, text in every_help(build_parser()).items()}
    folder = next(iter(texts)).parent
    folder.mkdir(parents=True, exist_ok=True)
    for stale in set(folder.glob("*.txt")) - set(texts):
        stale.unlink()
    for path, text in texts.items():
        path.write_text(text, encoding="utf-8")
    print(f"wrote {len(texts)} help texts to {folder}")


if __name__ == "__main__":
    main()
