"""SWE-agent's observation templates, rendered without Jinja (pure).

SWE-agent 1.1.0 renders its observation messages with ``jinja2.Template(t).render(...)``: ``{{name}}``
substitutions, and the default truncated-observation template slices (``{{observation[:max_observation_length]}}``).
Jinja drops ONE trailing newline of a template (``keep_trailing_newline`` is off). This module implements exactly
that subset; a template using anything else (``{% ... %}``, filters, attribute access, unknown names) is refused
when the trajectory is parsed, never rendered approximately. Templates of SWE-agent's 1.0 development
trajectories use ``str.format`` (``{observation}``); they are translated into that subset (from_format_style).
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_EXPR = re.compile(r"\{\{-?\s*(.*?)\s*-?\}\}", re.DOTALL)
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_SIMPLE = re.compile(rf"^({_NAME})$")
_SLICE = re.compile(rf"^({_NAME})\[\s*:\s*({_NAME}|\d+)\s*\]$")
#: forkpoint's own spelling of str.format's ``{name!r}`` (from_format_style); Jinja has no such filter
_REPR = re.compile(rf"^({_NAME})\|pyrepr$")

#: SWE-agent 1.1.0 TemplateConfig defaults (sweagent/agent/agents.py)
DEFAULT_NEXT_STEP = "Observation: {{observation}}"
DEFAULT_TRUNCATED = (
    "Observation: {{observation[:max_observation_length]}}<response clipped>"
    "<NOTE>Observations should not exceeded {{max_observation_length}} characters. "
    "{{elided_chars}} characters were elided. Please try a different command that produces less output "
    "or use head/tail/grep/redirect the output to a file. Do not use interactive pagers.</NOTE>"
)
DEFAULT_MAX_OBSERVATION_LENGTH = 100_000
DEFAULT_TIMEOUT_TEMPLATE = (
    "The command '{{command}}' was cancelled because it took more than {{timeout}} seconds. "
    "Please try a different command that completes more quickly. "
    "Note: A common source of this error is if the command is interactive or requires user input "
    "(it is impossible to receive user input in the current environment, so the command will never complete)."
)


_OBSERVATION_TEMPLATES = frozenset({"next_step_template", "next_step_no_output_template",
                                    "next_step_truncated_observation_template", "command_cancelled_timeout_template"})


class TemplateError(ValueError):
    """A template outside the supported subset, or a name the replay cannot provide."""


def names(template: str) -> set[str]:
    """Every variable a template reads; raises TemplateError for unsupported syntax."""
    if "{%" in template or "{#" in template:
        raise TemplateError("it uses Jinja statements or comments ({% %} / {# #})")
    found: set[str] = set()
    for expression in _EXPR.findall(template):
        simple, sliced = _SIMPLE.match(expression) or _REPR.match(expression), _SLICE.match(expression)
        if simple:
            found.add(simple.group(1))
        elif sliced:
            found.add(sliced.group(1))
            if not sliced.group(2).isdigit():
                found.add(sliced.group(2))
        else:
            raise TemplateError(f"it uses the expression {{{{{expression}}}}}, which forkpoint does not render")
    return found


def render(template: str, values: Mapping[str, Any]) -> str:
    """Render like ``jinja2.Template(template).render(**values)`` for the supported subset."""
    missing = names(template) - set(values)
    if missing:
        raise TemplateError(f"it needs {', '.join(sorted(missing))}, which the replay cannot provide")

    def substitute(match: re.Match[str]) -> str:
        expression = match.group(1)
        sliced = _SLICE.match(expression)
        if sliced:
            bound = sliced.group(2)
            end = int(bound) if bound.isdigit() else int(values[bound])
            return _text(values[sliced.group(1)])[:end]
        quoted = _REPR.match(expression)
        if quoted:
            return repr(values[quoted.group(1)])
        return _text(values[expression])

    text = _EXPR.sub(substitute, template)
    return text[:-1] if text.endswith("\n") and template.endswith("\n") else text


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


@dataclass(frozen=True)
class ObservationTemplates:
    """The templates and limits one recording used (``replay_config.agent.templates``)."""

    next_step: str
    no_output: str
    truncated: str
    max_observation_length: int
    timeout: str
    #: str.format templates: a SWE-agent 1.0 development trajectory, whose SWE-ReX (before its 2025-05-20
    #: "Remove strip behavior" change) stripped a session's output and kept the terminal's CRLF
    format_style: bool = False

    @classmethod
    def from_config(cls, templates: Mapping[str, Any]) -> ObservationTemplates:
        format_style = is_format_style(templates.get("next_step_template"))
        if format_style:
            templates = {key: from_format_style(value) if isinstance(value, str) and key in _OBSERVATION_TEMPLATES
                         and "{{" not in value else value for key, value in templates.items()}
        next_step = _string(templates, "next_step_template", DEFAULT_NEXT_STEP)
        no_output = templates.get("next_step_no_output_template")
        limit = templates.get("max_observation_length", DEFAULT_MAX_OBSERVATION_LENGTH)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
            raise TemplateError("max_observation_length is not a non-negative integer")
        return cls(
            next_step=next_step,
            no_output=no_output if isinstance(no_output, str) else next_step,
            truncated=_string(templates, "next_step_truncated_observation_template", DEFAULT_TRUNCATED),
            max_observation_length=limit,
            timeout=_string(templates, "command_cancelled_timeout_template", DEFAULT_TIMEOUT_TEMPLATE),
            format_style=format_style,
        )

    def check(self, available: set[str]) -> None:
        """Refuse templates the replay could not render (``available``: names besides the observation ones)."""
        provided = available | {"observation", "elided_chars", "max_observation_length"}
        for label, template in (("next_step_template", self.next_step),
                                ("next_step_no_output_template", self.no_output),
                                ("next_step_truncated_observation_template", self.truncated)):
            try:
                missing = names(template) - provided
            except TemplateError as error:
                raise TemplateError(f"{label}: {error}") from None
            if missing:
                raise TemplateError(f"{label} needs {', '.join(sorted(missing))}, which the replay cannot provide")
        try:
            missing = names(self.timeout) - available - {"command", "timeout"}
        except TemplateError as error:
            raise TemplateError(f"command_cancelled_timeout_template: {error}") from None
        if missing:
            raise TemplateError(f"command_cancelled_timeout_template needs {', '.join(sorted(missing))}")

    def observation_message(self, observation: str, context: Mapping[str, Any]) -> str:
        """The history message SWE-agent adds after a step (``DefaultAgent.add_step_to_history``)."""
        elided = 0
        if observation.strip() == "":
            template = self.no_output
        elif len(observation) > self.max_observation_length:
            template = self.truncated
            elided = len(observation) - self.max_observation_length
        else:
            template = self.next_step
        values = {**context, "observation": observation, "elided_chars": elided,
                  "max_observation_length": self.max_observation_length}
        return render(template, values)


def is_format_style(template: Any) -> bool:
    """SWE-agent's 1.0 development trajectories (and 0.x) rendered templates with ``str.format``:
    ``{observation}``, never ``{{observation}}``. Told apart by the observation template itself."""
    return isinstance(template, str) and "{{" not in template and "{observation}" in template


def from_format_style(template: str) -> str:
    """A ``str.format`` template as the Jinja subset rendering the same text: ``{name}`` -> ``{{name}}``, and a
    trailing newline doubled (str.format keeps it, the Jinja rendering drops one)."""
    out: list[str] = []
    try:
        fields = list(string.Formatter().parse(template))
    except ValueError as error:
        raise TemplateError(f"its str.format syntax is broken: {error}") from None
    for literal, name, spec, conversion in fields:
        out.append(literal)
        if name is None:
            continue
        if not _SIMPLE.match(name) or spec or conversion not in (None, "r"):
            raise TemplateError(f"it uses the str.format field {{{name}}}, which forkpoint does not render")
        out.append("{{" + name + ("|pyrepr" if conversion == "r" else "") + "}}")
    text = "".join(out)
    return text + "\n" if text.endswith("\n") else text


def _string(mapping: Mapping[str, Any], key: str, default: str) -> str:
    value = mapping.get(key)
    return value if isinstance(value, str) else default
