"""Which of the options every Copilot CLI run passes a release accepts: a release without one exits 1 on it
(1.0.82: ``error: unknown option '--disable-client-telemetry'``, the release sweep's unnamed failure), so a
calibration drops the options another setting of the run also gives (``COPILOT_OFFLINE=true``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from forkpoint.adapters.copilot_cli.runtime import REDUNDANT_OPTIONS, redundant_options
from forkpoint.adapters.copilot_cli.spec import VERSION
from forkpoint.adapters.kit.cli_options import known_options

#: the real ``copilot --help`` of each release (COPILOT_AUTO_UPDATE=false, COPILOT_OFFLINE=true, NO_COLOR=1)
HELP = Path(__file__).parents[2] / "fixtures" / "copilot_cli" / "help"


def test_a_release_without_disable_client_telemetry_runs_without_it_and_keeps_the_rest() -> None:
    assert known_options((HELP / "1.0.82.txt").read_text("utf-8"), REDUNDANT_OPTIONS) \
        == ["--no-auto-update", "--disable-builtin-mcps"]
    assert known_options((HELP / f"{VERSION}.txt").read_text("utf-8"), REDUNDANT_OPTIONS) == list(REDUNDANT_OPTIONS)


def test_an_option_counts_only_as_a_whole_word() -> None:
    assert known_options("  --disable-client-telemetry-v2   x\n  --no-auto-updates\n", REDUNDANT_OPTIONS) == []
    assert known_options("--no-auto-update, --disable-builtin-mcps", REDUNDANT_OPTIONS) \
        == ["--no-auto-update", "--disable-builtin-mcps"]


def test_the_verified_runtime_gets_every_option() -> None:
    from forkpoint.runtimes import find

    runtime = find("copilot-cli", VERSION)
    if runtime is None:
        pytest.skip(f"copilot-cli {VERSION} is not installed")
    assert redundant_options(runtime.entrypoint) == list(REDUNDANT_OPTIONS)
