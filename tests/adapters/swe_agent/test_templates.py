"""The Jinja subset SWE-agent's observation templates use, rendered exactly (and everything else refused)."""

from __future__ import annotations

import pytest

from forkpoint.adapters.swe_agent.templates import (
    DEFAULT_TRUNCATED,
    ObservationTemplates,
    TemplateError,
    names,
    render,
)
from forkpoint.adapters.swe_agent.tools import clean_terminal_output


def test_render_substitutes_names_and_slices() -> None:
    assert render("OBSERVATION:\n{{observation}}", {"observation": "x\n"}) == "OBSERVATION:\nx\n"
    assert render("{{ observation[:n] }}|{{n}}", {"observation": "abcdef", "n": 3}) == "abc|3"
    assert render("{{observation[:2]}}", {"observation": "abcdef"}) == "ab"


def test_render_drops_exactly_one_trailing_template_newline_like_jinja() -> None:
    assert render("a {{x}}\n", {"x": "1"}) == "a 1"
    assert render("a {{x}}\n\n", {"x": "1"}) == "a 1\n"
    # a newline coming from the VALUE is kept (only the template's own trailing newline is dropped)
    assert render("{{x}}", {"x": "1\n"}) == "1\n"


@pytest.mark.parametrize("template", ["{% if x %}y{% endif %}", "{# c #}", "{{ x | upper }}", "{{ x.y }}"])
def test_unsupported_syntax_is_refused(template: str) -> None:
    with pytest.raises(TemplateError):
        names(template)


def test_unknown_names_are_refused_not_rendered_empty() -> None:
    with pytest.raises(TemplateError, match="open_file"):
        render("{{observation}} ({{open_file}})", {"observation": "x"})


def test_observation_message_picks_the_template_like_add_step_to_history() -> None:
    templates = ObservationTemplates.from_config({"next_step_template": "OBS: {{observation}}",
                                                  "next_step_no_output_template": "nothing",
                                                  "max_observation_length": 5})
    assert templates.observation_message("abc", {}) == "OBS: abc"
    assert templates.observation_message("  \n", {}) == "nothing"
    clipped = templates.observation_message("abcdefgh", {})
    assert clipped.startswith("Observation: abcde<response clipped>")
    assert "3 characters were elided" in clipped
    assert DEFAULT_TRUNCATED.startswith("Observation: {{observation[:max_observation_length]}}")


def test_no_output_template_defaults_to_next_step_template() -> None:
    templates = ObservationTemplates.from_config({})
    assert templates.observation_message("", {}) == "Observation: "


def test_check_names_what_is_missing() -> None:
    templates = ObservationTemplates.from_config({"next_step_template": "{{observation}} in {{working_dir}}"})
    templates.check({"working_dir"})
    with pytest.raises(TemplateError, match="working_dir"):
        templates.check(set())


def test_str_format_templates_of_swe_agent_1_0_development_trajectories() -> None:
    """Shaped like SWE-agent's 1.0-dev trajectories (``{observation}``, ``{command!r}``): rendered like
    ``str.format``, never left as literal braces for the model."""
    templates = ObservationTemplates.from_config({
        "next_step_template": "{observation}\n(Open file: {open_file})\n(Current directory: {working_dir})\nbash-$",
        "next_step_no_output_template": "Your command ran successfully and did not produce any output.\n"
                                        "(Open file: {open_file})\n",
        "command_cancelled_timeout_template": "The command {command!r} was cancelled after {timeout} seconds."})
    assert templates.format_style
    values = {"open_file": "n/a", "working_dir": "/repo"}
    assert templates.observation_message("a\r\nb", values) == \
        "a\r\nb\n(Open file: n/a)\n(Current directory: /repo)\nbash-$"
    assert templates.observation_message("", values) == ("Your command ran successfully and did not produce any "
                                                         "output.\n(Open file: n/a)\n")
    assert render(templates.timeout, {"command": "sleep 'x'", "timeout": 30}) == \
        "The command \"sleep 'x'\" was cancelled after 30 seconds."
    assert not ObservationTemplates.from_config({"next_step_template": "OBSERVATION:\n{{observation}}"}).format_style
    with pytest.raises(TemplateError, match=r"str\.format field"):
        ObservationTemplates.from_config({"next_step_template": "{observation}\n{working_dir:>10}"})


def test_legacy_terminal_output_keeps_crlf_and_is_stripped() -> None:
    """SWE-ReX before 2025-05-20 stripped a session's output and kept the terminal's CRLF."""
    assert clean_terminal_output(b"\r\nFound 1\r\n/x\r\n") == "\nFound 1\n/x\n"
    assert clean_terminal_output(b"\r\nFound 1\r\n/x\r\n", legacy=True) == "Found 1\r\n/x"
