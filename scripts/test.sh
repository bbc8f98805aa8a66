#!/usr/bin/env bash
# The README's test command. On a fresh clone it does its own set-up, then runs the whole suite:
#   1. forkpoint with its test extras (pip, editable);
#   2. Debian packages the tests drive: bubblewrap (--sandbox bwrap), ripgrep (OpenCode's grep/glob tools),
#      chromium (the report tests open reports in it through Playwright);
#   3. the verified agent runtimes (npm prefixes and uv venvs, cached under ~/.cache/forkpoint/runtimes:
#      a second run only checks them; pi's also brings the fd >= 9 Pi's find runs: forkpoint.runtimes.fd), and
#      the flake8 SWE-agent's edit bundles lint with (cached there too);
#   4. ruff, mypy (--strict on src, checked but not strict on tests/: pyproject.toml), then pytest (extra arguments
#      go to pytest: scripts/test.sh tests/run/test_plan.py -q).
# FORKPOINT_TEST_SKIP_SETUP=1 skips steps 1-3 (a machine that has run them already), FORKPOINT_TEST_SKIP_LINT=1
# skips ruff and mypy.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${FORKPOINT_TEST_SKIP_SETUP:-0}" != 1 ]; then
    python3 -m pip install --quiet --disable-pip-version-check -e ".[test]"

    missing=()
    command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
    command -v rg >/dev/null 2>&1 || missing+=(ripgrep)
    command -v chromium >/dev/null 2>&1 || missing+=(chromium)   # `forkpoint report` tests, through Playwright
    if [ ${#missing[@]} -gt 0 ]; then
        sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
        $sudo apt-get update -qq && $sudo apt-get install -y -qq "${missing[@]}"
    fi

    # Real agent runtimes at their verified versions.
    for agent in claude-code@2.1.220 claude-code@2.1.332 codex@0.149.0 codex@0.171.0 \
                 opencode@1.17.11 opencode@1.18.33 pi@0.83.0 pi@1.6.0 \
                 mini-swe-agent@1.17.5 mini-swe-agent@2.4.6 openhands@0.62.0 gemini-cli@0.61.0 \
                 copilot-cli@1.0.102 qwen-code@0.24.4 \
                 openhands-sdk@1.58.2; do
        python3 -m forkpoint.cli agents install "$agent"
    done
    # Unverified releases: OpenCode 1.2.6 is the binary of the 1.2 tool profile (its fixture and continuation
    # tests); the others are the releases tests/e2e/test_calibrate.py calibrates (installed here, cached, so the
    # tests' wall time is the calibrations', not npm's or uv's)
    python3 -c "import sys; from forkpoint import runtimes; [runtimes.install_release(*r.split('@')) for r in sys.argv[1:]]" \
        opencode@1.2.6 opencode@1.18.32 claude-code@2.1.331 codex@0.169.1 codex@0.40.0 codex@0.145.0 pi@0.84.0 \
        qwen-code@0.24.3 gemini-cli@0.60.0 gemini-cli@0.51.0 copilot-cli@1.0.92 copilot-cli@1.0.82 mini-swe-agent@2.3.1 \
        claude-code@2.1.318 pi@0.82.0 qwen-code@0.24.2
    # flake8 for SWE-agent's linting edit bundles (pinned, cached next to the runtimes: forkpoint.runtimes.flake8)
    python3 -c "from forkpoint.runtimes.flake8 import ensure_flake8; ensure_flake8()"
fi
if [ "${FORKPOINT_TEST_SKIP_LINT:-0}" != 1 ]; then
    python3 -m ruff check src tests scripts benchmarks
    python3 -m mypy
fi

exec python3 -m pytest "$@"
