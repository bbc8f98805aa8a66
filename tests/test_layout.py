"""Tests mirror src at module level: ``forkpoint/a/b.py`` is tested by ``tests/a/test_b.py`` and a package's
``forkpoint/a/__init__.py`` by ``tests/a/test_a.py``, for every module with logic (a function or a method).

The exceptions below say where such a module is tested instead; the list only shrinks: an entry whose module gained
its mirror (or is gone) fails the test too, so it is removed when the test is moved or written.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[1]
SRC = ROOT / "src" / "forkpoint"
TESTS = ROOT / "tests"

_ADAPTER_INIT = "the Adapter wiring; its tests are the folder's test_parse/test_session/test_fixture_fidelity and e2e"
_TOOL_PART = "a part of the adapter's tools, tested through them in the folder's test_tools.py"
_SPEC = "checked for every registered agent by tests/adapters/test_spec.py (self-consistency) and test_detect.py"
_TRANSLATE_PART = "a part of the stream translators, tested through tests/bridge/translate/test_*_answer.py"
_CLI = "tests/test_cli.py drives the parser and every command through main()"
_EXPORT_PART = "a stage of `forkpoint export`, tested end to end in tests/export/test_export.py"
#: module (relative to src/forkpoint) -> where it is tested instead, or why it has no test of its own
EXCEPTIONS = {
    "__init__.py": "the public API's curated, lazily loaded names: tests/test_api.py",
    "adapters/claude_code/spec.py": _SPEC,
    "adapters/codex/spec.py": _SPEC,
    "adapters/mini_swe_agent/spec.py": _SPEC,
    "adapters/opencode/spec.py": _SPEC,
    "adapters/openhands/spec.py": _SPEC,
    "adapters/pi/spec.py": _SPEC,
    "adapters/gemini_cli/spec.py": _SPEC,
    "adapters/gemini_cli/__init__.py": _ADAPTER_INIT,
    "adapters/gemini_cli/runtime.py": "tests/adapters/gemini_cli/test_tools.py (the HOME and env the real CLI runs in)",
    "adapters/gemini_cli/launch.py": "starts the real CLI: tests/e2e/test_gemini_cli_continue.py",
    "adapters/copilot_cli/spec.py": _SPEC,
    "adapters/copilot_cli/__init__.py": _ADAPTER_INIT,
    "adapters/copilot_cli/launch.py": "starts the real CLI: tests/e2e/test_copilot_cli_continue.py",
    "adapters/qwen_code/spec.py": _SPEC,
    "adapters/qwen_code/__init__.py": _ADAPTER_INIT,
    "adapters/qwen_code/runtime.py": "the HOME and env the real CLI runs in: tests/e2e/test_qwen_code_continue.py",
    "testing/scripted_gemini.py": "tests/bridge/protocols/test_gemini.py (ScriptedModel behind the bridge) and e2e",
    "adapters/swe_agent/spec.py": _SPEC,
    "adapters/codex/calibrate.py": "runs the real release: tests/e2e/test_calibrate.py",
    "adapters/mini_swe_agent/calibrate.py": "runs the real release: tests/e2e/test_calibrate.py",
    "adapters/opencode/calibrate.py": "runs the real release: benchmarks/versions.py (~50 s, too slow for CI)",
    "adapters/pi/calibrate.py": "runs the real release: tests/e2e/test_calibrate.py",
    "adapters/pi/launch.py": "tests/adapters/pi/test_runtime.py and tests/e2e/test_pi_continue.py",
    "bridge/protocols/openai.py": "what both OpenAI protocols share: tests/bridge/protocols/test_openai_chat.py, "
                                  "test_openai_responses.py",
    "bridge/translate/chat_stream.py": _TRANSLATE_PART,
    "bridge/translate/common.py": _TRANSLATE_PART,
    "bridge/translate/sequencer.py": _TRANSLATE_PART,
    "cli/__init__.py": _CLI,
    "cli/batch.py": "tests/test_cli.py and tests/batch/test_batch.py (the batch commands end to end)",
    "cli/commands.py": _CLI,
    "cli/output.py": _CLI,
    "cli/parser.py": _CLI,
    "run/documents.py": "the documents a run writes: tests/run/test_engine.py and tests/core/test_results.py",
    "runtimes/base.py": "tests/runtimes/test_runtimes.py (manifest, cache, find, the install tail)",
    "sandbox/forward_inside.py": "runs inside the bwrap sandbox; tests/sandbox/test_forward.py",
    "sandbox/executor_inside.py": "runs inside the bwrap sandbox (stdlib only); tests/sandbox/test_executor.py",
    "adapters/openhands_sdk/calibrate.py": "the probe of a real SDK release: tests/e2e/test_calibrate_openhands.py "
                                          "(FORKPOINT_SLOW_CALIBRATIONS=1); its shared steps: "
                                          "tests/adapters/kit/test_calibration.py",
    "testing/script.py": "ScriptedModel's shared core: tests/testing/test_scripted_model.py",
    "testing/images.py": "the test image builder, exercised by tests/sandbox/test_rootfs.py and test_image.py",
    "testing/sandbox_e2e.py": "the bwrap e2e skeleton, exercised by tests/e2e/test_{opencode,pi,gemini_cli}_sandbox.py",
    "testing/processes.py": "liveness waits used by tests/process/test_session.py and the codex session tests",
    "testing/scripted_anthropic.py": "tests/testing/test_scripted_model.py (the Anthropic answers)",
    "adapters/__init__.py": "the adapter registry; tests/adapters/test_prepare_purity.py and every adapter's tests",
    "adapters/base.py": "the Adapter protocol and RunContext: declarations, exercised by every adapter test",
    "adapters/source.py": "the bounded trajectory read; tests/reliability/test_parser_fuzz.py (oversized inputs)",
    "adapters/claude_code/__init__.py": _ADAPTER_INIT,
    "adapters/claude_code/jstext.py": _TOOL_PART,
    "adapters/claude_code/policy.py": "tests/adapters/claude_code/test_parse.py (the policy rules)",
    "adapters/claude_code/tool_bash.py": _TOOL_PART,
    "adapters/claude_code/tool_profile.py": _TOOL_PART,
    "adapters/codex/__init__.py": _ADAPTER_INIT,
    "adapters/codex/tool_args.py": _TOOL_PART,
    "adapters/codex/tool_exec.py": _TOOL_PART,
    "adapters/codex/tool_policy.py": _TOOL_PART,
    "adapters/codex/tool_text.py": _TOOL_PART,
    "adapters/mini_swe_agent/__init__.py": _ADAPTER_INIT,
    "adapters/mini_swe_agent/companion.py": "inside the agent's venv; tests/adapters/mini_swe_agent/test_runner.py",
    "adapters/opencode/__init__.py": _ADAPTER_INIT,
    "adapters/opencode/envelope.py": "tests/adapters/opencode/test_gate.py (being restructured into the bridge)",
    "adapters/opencode/session.py": "tests/adapters/opencode/test_tools.py and test_gate.py (the rebuilt session)",
    "adapters/kit/python_runner.py": "starts an agent runtime's Python (OpenHands V0, V1 SDK); "
                                     "tests/adapters/openhands*/ and tests/e2e/test_openhands*_continue.py",
    "adapters/kit/tool_host.py": "the npm CLIs' tool hosts; "
                                 "tests/adapters/{gemini_cli,qwen_code,copilot_cli}/test_tools.py",
    "adapters/openhands/__init__.py": _ADAPTER_INIT,
    "adapters/openhands/envelope.py": "tests/adapters/openhands/test_gate.py",
    "adapters/openhands/format.py": "tests/adapters/openhands/test_session.py and test_messages.py",
    "adapters/openhands/launch.py": "starts the runtime's Python; tests/e2e/test_openhands_continue.py",
    "adapters/openhands/runner.py": "runs inside the OpenHands venv; tests/e2e/test_openhands_continue.py",
    "adapters/openhands/tools.py": "tests/adapters/openhands/test_session.py and tests/e2e/test_openhands_continue.py",
    "adapters/openhands_sdk/spec.py": _SPEC,
    "adapters/openhands_sdk/__init__.py": _ADAPTER_INIT,
    "adapters/openhands_sdk/envelope.py": "tests/adapters/openhands_sdk/test_gate.py",
    "adapters/openhands_sdk/launch.py": "starts the SDK's Python; tests/e2e/test_openhands_sdk_continue.py",
    "adapters/openhands_sdk/tools.py": "tests/adapters/openhands_sdk/test_session.py and "
                                       "tests/e2e/test_openhands_sdk_continue.py",
    "adapters/pi/__init__.py": _ADAPTER_INIT,
    "adapters/pi/tools.py": "tests/adapters/pi/test_fixture_fidelity.py",
    "adapters/swe_agent/__init__.py": _ADAPTER_INIT,
    "adapters/swe_agent/bundles.py": "tests/adapters/swe_agent/test_bundle_tools.py and test_replay.py",
    "adapters/swe_agent/session.py": "tests/adapters/swe_agent/test_replay.py (the rebuilt .traj prefixes)",
    "adapters/swe_agent/tools.py": "tests/adapters/swe_agent/test_replay.py (fresh == historical at every boundary)",
    "batch/expand.py": "tests/batch/test_jobs.py (a jobs file expanded to requests)",
    "branches/branching.py": "tests/e2e/test_branching.py and tests/branches/test_resume.py",
    "bridge/limits.py": "tests/reliability/test_bridge_flood.py",
    "examples/__init__.py": "UNTESTED: paths of the shipped examples; nothing in src or tests uses it",
    "export/atif.py": _EXPORT_PART,
    "export/rows.py": _EXPORT_PART,
    "export/runs.py": _EXPORT_PART,
    "export/writers.py": _EXPORT_PART,
    "run/inspection.py": "tests/test_cli.py (`forkpoint inspect`), tests/adapters/swe_agent/test_parse.py",
    "core/model.py": "the shared data types; every adapter and engine test",
    "run/replay.py": "tests/run/test_engine.py and tests/run/test_journal.py (the replay loop and its receipts)",
    "report/__init__.py": "tests/report/test_render.py and test_browser.py",
    "report/collect.py": "tests/report/test_render.py",
    "testing/__init__.py": "re-exports of the test kit",
    "testing/claude_sessions.py": "test kit; used by most tests, tests/testing/test_claude_fixtures.py",
    "testing/codex_rollouts.py": "test kit; tests/adapters/codex/test_parse.py and test_session.py",
    "testing/mcp_server.py": "a real MCP server for tests; exercised by tests/process/test_mcp.py and "
                             "tests/adapters/claude_code/test_tool_mcp.py",
}


def has_logic(module: Path) -> bool:
    tree = ast.parse(module.read_text("utf-8"))
    return any(isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) for node in ast.walk(tree))


def mirror(relative: Path) -> Path:
    """The test module of a src module (``relative`` to src/forkpoint)."""
    name = relative.parent.name if relative.name == "__init__.py" else relative.stem
    return TESTS / relative.parent / f"test_{name}.py"


def unmirrored() -> list[str]:
    """Modules with logic and no test module of the same name, as paths relative to src/forkpoint."""
    return sorted(str(path.relative_to(SRC)) for path in SRC.rglob("*.py")
                  if has_logic(path) and not mirror(path.relative_to(SRC)).exists())


def test_the_mirror_rule_is_what_this_test_checks() -> None:
    assert mirror(Path("sandbox/base.py")) == TESTS / "sandbox" / "test_base.py"
    assert mirror(Path("batch/__init__.py")) == TESTS / "batch" / "test_batch.py"
    assert mirror(Path("run/plan.py")) == TESTS / "run" / "test_plan.py"
    assert has_logic(SRC / "run/plan.py") and not has_logic(SRC / "core" / "__init__.py")


def test_every_module_with_logic_has_its_test_module_or_a_reason() -> None:
    missing = [module for module in unmirrored() if module not in EXCEPTIONS]
    assert not missing, f"src modules without tests/<same path>/test_<name>.py (write one, or move its test): {missing}"


def test_the_exceptions_are_all_still_needed() -> None:
    stale = sorted(set(EXCEPTIONS) - set(unmirrored()))
    assert not stale, f"these now have their mirrored test module (or are gone): remove them from EXCEPTIONS: {stale}"
