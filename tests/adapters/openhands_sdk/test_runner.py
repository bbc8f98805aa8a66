"""The SDK companion runner's LLM set-up (adapters/openhands_sdk/runner.py), run INSIDE a real older SDK release's
venv: 1.0.0, whose ``LLM`` has no ``api_mode``. Skipped when that release is not in the runtime cache (the
calibration e2e and ``benchmarks/versions.py --sweep`` install it)."""

from __future__ import annotations

import json
import subprocess

import pytest

from forkpoint import runtimes
from forkpoint.adapters.openhands_sdk import runner

OLD = "1.0.0"  # the first 1.x: no api_mode on its LLM

#: loads the runner file under its own name (not its folder on sys.path) and prints, per model, what ``_llm`` made
#: or raised (one process: importing the SDK takes 30 s on a loaded machine)
PROBE = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("fp_sdk_runner", sys.argv[1])
module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
for model in sys.argv[2:]:
    try:
        llm = module._llm({"llm": {"model": model, "base_url": "http://127.0.0.1:9/v1", "api_key_env": "NONE"}})
        print(json.dumps({"model": llm.model, "responses": llm.uses_responses_api()}))
    except Exception as error:
        print(json.dumps({"error": f"{type(error).__name__}: {error}"}))
"""


def test_a_release_without_api_mode_gets_chat_completions_or_a_refusal_naming_why() -> None:
    runtime = runtimes.find("openhands-sdk", OLD)
    if runtime is None:
        pytest.skip(f"openhands-sdk {OLD} is not installed")
    done = subprocess.run([str(runtime.entrypoint), "-I", "-c", PROBE, runner.__file__, "openai/scripted",
                           "openai/gpt-5"], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    chat, responses = (json.loads(line) for line in done.stdout.splitlines()[-2:])
    # before: ValidationError (api_mode: Extra inputs are not permitted) for every model, so no release before
    # api_mode could be calibrated or continued at all
    assert chat == {"model": "openai/scripted", "responses": False}
    # a model this release sends to the Responses API (which the bridge does not speak) is refused, not sent there
    assert str(responses.get("error", "")).startswith(
        "RuntimeError: this SDK's LLM has no api_mode and sends 'openai/gpt-5' to the Responses API"), responses
