"""The prefix-fidelity samples (benchmarks/_samples.py) and their audit, for the one-document formats.

The samples must say the truth about themselves (forkpoint's own parser finds exactly the calls, arguments and
historical observations the generator claims, in 2 complete batches), a faithful prefix must pass the audit, and
every kind of corrupted prefix must fail it: an audit that cannot fail proves nothing.
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from forkpoint.adapters import get_adapter
from forkpoint.core.model import Mode
from forkpoint.run import plan as planning

BENCHMARKS = Path(__file__).parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
try:
    import _samples as samples  # type: ignore[import-not-found]
finally:
    sys.path.remove(str(BENCHMARKS))

NEW = ("mini-swe-agent", "opencode", "swe-agent")
#: enough samples to cover every variant of each generator (versions, parallel batches, errors, templates)
INDICES = range(20)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("samples")


def prepared(sample: Any, out: Path) -> Path:
    """The adapter's prepare-only prefix after batch 1 (what ``forkpoint replay --prepare-only`` writes)."""
    adapter = get_adapter(sample.adapter)
    parsed = adapter.parse(sample.trajectory)
    plan = planning.select_boundary(parsed, 1, Mode.PREPARE_ONLY, adapter.profile_for(parsed))
    path: Path = adapter.write_prepared_prefix(plan, out).path
    return path


def test_every_adapter_has_a_sample_generator() -> None:
    from forkpoint.adapters import AGENT_NAMES

    assert set(samples.ADAPTERS) | set(samples.NOT_SAMPLED) == set(AGENT_NAMES)
    assert not set(samples.ADAPTERS) & set(samples.NOT_SAMPLED)
    assert all(reason for reason in samples.NOT_SAMPLED.values())  # a left-out agent says why


@pytest.mark.parametrize("adapter", NEW)
def test_samples_are_what_they_claim(adapter: str, root: Path) -> None:
    versions = set()
    for index in INDICES:
        sample = samples.make(adapter, index, root / "claims")
        parsed = get_adapter(adapter).parse(sample.trajectory)
        versions.add(parsed.version)
        assert [batch.complete for batch in parsed.batches] == [True, True]
        assert parsed.cwd == str(sample.workspace)
        for batch, claimed in zip(parsed.batches, (sample.first, sample.second), strict=True):
            found = [(c.call_id, c.arguments, c.historical.content if c.historical else None,
                      c.historical.is_error if c.historical else None, c.policy.value) for c in batch.calls]
            assert found == [(c.call_id, c.arguments, c.output, c.is_error, "fresh") for c in claimed], index
        assert len(sample.markers) == len(sample.first) + len(sample.second) - sum(
            c.name == "read" for c in sample.first)
    assert versions == set(samples.VERSIONS[adapter])


@pytest.mark.parametrize("adapter", (*NEW, "openhands"))
def test_a_faithful_prefix_passes(adapter: str, root: Path) -> None:
    for index in INDICES:
        sample = samples.make(adapter, index, root / "faithful")
        assert samples.audit_prefix(sample, prepared(sample, root / "faithful-out" / f"{adapter}-{index}")) == []


def _first_observation(adapter: str, document: Any) -> Iterator[tuple[Any, str]]:
    """(container, key) of the first batch's first historical observation in a prefix document."""
    if adapter == "mini-swe-agent":
        yield document["messages"][3], "content"
    elif adapter == "opencode":
        yield next(p for p in document["messages"][1]["parts"] if p["type"] == "tool")["state"], "output"
    elif adapter == "swe-agent":
        yield document["history"][3], "content"


def _change_observation(adapter: str) -> Callable[[Any, Any], Any]:
    def change(document: Any, _source: Any) -> Any:
        for container, key in _first_observation(adapter, document):
            value = container[key]
            container[key] = value + " " if isinstance(value, str) else [{**value[0], "text": value[0]["text"] + " "}]
        return document
    return change


def _change_argument(adapter: str) -> Callable[[Any, Any], Any]:
    def change(document: Any, _source: Any) -> Any:
        if adapter == "mini-swe-agent":
            message = document["messages"][2]
            if "extra" in message and "actions" in message["extra"]:
                message["extra"]["actions"][0]["command"] += " "
            else:
                message["content"] = message["content"].replace("```bash\n", "```bash\necho changed && ")
        elif adapter == "opencode":
            tool = next(p for p in document["messages"][1]["parts"] if p["type"] == "tool")
            tool["state"]["input"]["command"] += " "
        else:
            document["trajectory"][0]["action"] += " "
        return document
    return change


def _whole_source(document: Any, source: Any) -> Any:
    return source  # the second action and its observation leak into the "prefix"


def _without_first_observation(adapter: str) -> Callable[[Any, Any], Any]:
    def change(document: Any, _source: Any) -> Any:
        if adapter == "mini-swe-agent":
            document["messages"] = document["messages"][:3]
        elif adapter == "opencode":
            document["messages"] = document["messages"][:1]
        else:
            document["history"] = document["history"][:3]
        return document
    return change


def _changed_session(adapter: str) -> Callable[[Any, Any], Any]:
    def change(document: Any, source: Any) -> Any:
        if adapter == "opencode":
            document["info"]["title"] = "another session"
        else:
            document["info"] = copy.deepcopy(source["info"])  # still says how the whole run ended
        return document
    return change


CORRUPTIONS = {
    "observation": _change_observation,
    "argument": _change_argument,
    "leak": lambda adapter: _whole_source,
    "cut short": _without_first_observation,
    "session": _changed_session,
}
#: the audit must name one of these problems for each corruption
EXPECTED = {"observation": ("historical observation differs",), "argument": ("arguments differ",),
            "leak": ("leaked",), "cut short": ("tool calls in the prefix", "historical observation differs"),
            "session": ("info",)}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
@pytest.mark.parametrize("adapter", NEW)
def test_a_corrupted_prefix_fails(adapter: str, corruption: str, root: Path) -> None:
    for index in (0, 1, 3):  # both versions, a parallel batch (2.x / OpenCode), both SWE-agent parsers
        sample = samples.make(adapter, index, root / "corrupt")
        prefix = prepared(sample, root / "corrupt-out" / f"{adapter}-{corruption}-{index}")
        source = json.loads(sample.trajectory.read_bytes())
        document = CORRUPTIONS[corruption](adapter)(json.loads(prefix.read_bytes()), source)
        prefix.write_text(json.dumps(document, indent=2), "utf-8")
        problems = samples.audit_prefix(sample, prefix)
        assert any(expected in problem for problem in problems for expected in EXPECTED[corruption]), (
            adapter, corruption, index, problems)


def test_an_unreadable_prefix_is_a_problem_not_a_crash(root: Path) -> None:
    sample = samples.make("swe-agent", 0, root / "unreadable")
    prefix = prepared(sample, root / "unreadable-out")
    prefix.write_text(json.dumps({"trajectory": []}), "utf-8")
    problems = samples.audit_prefix(sample, prefix)
    assert problems and "cannot be read" in problems[0]


@pytest.mark.parametrize("version", samples.VERSIONS["mini-swe-agent"])
def test_mini_observations_render_like_the_recordings_template(version: str) -> None:
    """The hand renderers equal mini-swe-agent's own jinja template of that version's recording."""
    jinja2 = pytest.importorskip("jinja2")
    recording = json.loads((samples.FIXTURES / "mini_swe_agent" / version / "basic" / "trajectory.traj.json")
                           .read_text("utf-8"))
    config = recording["info"]["config"]
    v2 = version.startswith("2.")
    source = config["model"]["observation_template"] if v2 else config["agent"]["action_observation_template"]
    template = jinja2.Template(source, undefined=jinja2.StrictUndefined)
    render = samples.mini_observation_v2 if v2 else samples.mini_observation_v1
    for code, output in ((0, "a <b> & 'c' ✓ naïve\nline 2\n"), (1, ""), (2, "no newline")):
        expected = template.render(output={"output": output, "returncode": code, "exception_info": ""})
        assert render(code, output) == expected
