"""Which SWE-agent bundle tools a recording had, and whether one recorded call of them can be re-run (pure).

SWE-agent 1.1.0's default configuration loads the bundles ``registry`` (state only), ``edit_anthropic``
(``str_replace_editor``) and ``review_on_submit_m`` (``submit`` with review stages); ``tools/submit`` is the plain
``submit``. Older and "classic" configurations load ``windowed`` (``defaults`` before SWE-agent renamed it) and
``search``, with one of the linting edit bundles (``windowed_edit_replace``: ``edit <search> <replace>``,
``insert``; ``windowed_edit_linting``: ``edit <start>:<end>``; ``edit_replace``/``edit_linting`` before #1147),
which run flake8 around an edit. forkpoint re-implements those commands (bundle_tools.py); every other bundle
command (``filemap``, ``windowed_edit_rewrite``, ...) stays refused.
A bundle is recognised by the last component of its recorded ``path`` (SWE-agent uploads it as
``/root/tools/<that name>``).
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from typing import Any

from forkpoint.adapters.kit.jsondoc import as_object
from forkpoint.core.model import CallPolicy, JsonObject

#: bundle directory name -> the commands forkpoint re-implements from it
_WINDOWED = ("open", "goto", "scroll_up", "scroll_down", "create")
REIMPLEMENTED = {"edit_anthropic": ("str_replace_editor",), "review_on_submit_m": ("submit",),
                 "windowed": _WINDOWED, "defaults": _WINDOWED,
                 "search": ("find_file", "search_dir", "search_file"),
                 "windowed_edit_replace": ("edit", "insert"), "edit_replace": ("edit", "insert"),
                 "windowed_edit_linting": ("edit",), "edit_linting": ("edit",)}
#: bundle -> {command: the bundle_tools.py tool running it} where the two differ (two bundles call theirs ``edit``)
_TOOL_OF = {"windowed_edit_replace": {"edit": "edit_replace"}, "edit_replace": {"edit": "edit_replace"},
            "windowed_edit_linting": {"edit": "edit_lines"}, "edit_linting": {"edit": "edit_lines"}}
#: bundles whose commands run flake8 (``pip install flake8`` in their install.sh)
LINTING_BUNDLES = frozenset(_TOOL_OF)
#: commands typed with a heredoc body (``end_name`` in the bundle's config.yaml) -> their end marker
_MULTILINE = {"windowed_edit_linting": {"edit": "end_of_edit"}, "edit_linting": {"edit": "end_of_edit"}}
#: bundles whose state command (``_state``) also records ``open_file`` (the registry's CURRENT_FILE)
WINDOWED_BUNDLES = frozenset({"windowed", "defaults"})
#: what tools/windowed/install.sh writes into the registry (``${WINDOW:-100}`` etc. from the environment)
WINDOWED_REGISTRY_DEFAULTS = {"WINDOW": "100", "OVERLAP": "2", "FIRST_LINE": "0", "CURRENT_FILE": ""}
PLAIN_SUBMIT_BUNDLE = "submit"
SUBMISSION_MARKER = "<<SWE_AGENT_SUBMISSION>>"
_TRACEBACK = "Traceback (most recent call last):"
#: observations SWE-agent 1.1.0 puts on the step that ends a run after an error (no command produced them)
AGENT_WRITTEN_ENDINGS = frozenset({"Exited (autosubmitted)", "Environment died unexpectedly. Exited (autosubmitted)"})
_FILEMAP = "<NOTE>This file is too large to display entirely. Showing abbreviated version."


@dataclass(frozen=True)
class BundleSetup:
    """The bundle side of one recording's tool configuration."""

    commands: frozenset[str]  # commands forkpoint provides for this recording
    bundles: tuple[str, ...]  # bundle names in the recorded order
    registry_variables: dict[str, Any]
    tools: dict[str, str] = field(default_factory=dict)  # command -> bundle_tools.py tool, where they differ
    multiline: dict[str, str] = field(default_factory=dict)  # command -> heredoc end marker

    @property
    def lints(self) -> bool:
        """Do the recording's edit commands run flake8 (so the replay needs it)?"""
        return any(name in LINTING_BUNDLES for name in self.bundles)

    def tool(self, command: str) -> str:
        return self.tools.get(command, command)

    @property
    def windowed(self) -> bool:
        return any(name in WINDOWED_BUNDLES for name in self.bundles)

    @property
    def state_keys(self) -> frozenset[str]:
        """The step ``state`` keys forkpoint recomputes: the shell's cwd, and the open file of the windowed
        bundle's ``_state``."""
        return frozenset({"working_dir", "open_file"} if self.windowed else {"working_dir"})

    def initial_registry(self, env_variables: dict[str, str]) -> dict[str, Any]:
        """The registry after the bundles' install scripts: the windowed defaults (taken from the exported
        variables like install.sh does), then ``registry_variables``."""
        seeded: dict[str, Any] = {}
        if self.windowed:
            seeded = {key: env_variables.get(key) or default for key, default in WINDOWED_REGISTRY_DEFAULTS.items()}
        if self.lints:  # the edit bundles' install.sh: CURRENT_FILE, CURRENT_LINE and WINDOW again
            seeded = {**seeded, "CURRENT_FILE": env_variables.get("CURRENT_FILE") or "",
                      "CURRENT_LINE": env_variables.get("CURRENT_LINE") or "0",
                      "WINDOW": str(env_variables.get("WINDOW", ""))}
        return {**seeded, **self.registry_variables}

    def registry_flag(self, key: str) -> bool:
        return str(self.registry_variables.get(key, "false")).lower() == "true"


def bundle_setup(tools: JsonObject) -> BundleSetup:
    names: list[str] = []
    raw = tools.get("bundles")
    for bundle in raw if isinstance(raw, list) else []:
        path = as_object(bundle).get("path")
        if isinstance(path, str) and path.strip("/"):
            names.append(os.path.basename(os.path.normpath(path)))
    commands = {command for name in names for command in REIMPLEMENTED.get(name, ())}
    variables = tools.get("registry_variables")
    implementations = {command: tool for name in names for command, tool in _TOOL_OF.get(name, {}).items()}
    multiline = {command: end for name in names for command, end in _MULTILINE.get(name, {}).items()}
    return BundleSetup(frozenset(commands), tuple(names), dict(variables) if isinstance(variables, dict) else {},
                       implementations, multiline)


def ends_the_run(command: str, index: int, last: int, observation: Any, info: JsonObject) -> bool:
    """Did step ``index`` end the run? ``submit`` only when SWE-agent found the submission marker: the last step,
    exit status ``submitted``, and the observation replaced by the patch (a review stage prints a message instead
    and the run goes on). ``exit``-like commands always count, and so does a last step whose observation is one
    SWE-agent writes itself when it stops the run (``attempt_autosubmission_after_error``)."""
    if index == last and observation in AGENT_WRITTEN_ENDINGS:
        return True
    if command != "submit":
        return command in ("exit", "exit_forfeit", "forfeit")
    status = info.get("exit_status")
    submission = info.get("submission")
    return (index == last and isinstance(status, str) and status.startswith("submitted")
            and observation == (submission if isinstance(submission, str) else ""))


def classify_bundle_call(setup: BundleSetup, name: str, command: str, action: str,
                         observation: Any) -> tuple[CallPolicy, str | None] | None:
    """The policy of a call to a re-implemented bundle command; None when ``command`` is not one of them."""
    if command not in setup.commands:
        return None
    if name not in ("bash", command):
        return CallPolicy.REFUSED, f"the tool {name!r} ran the action {command!r}, which SWE-agent never does"
    recorded = observation if isinstance(observation, str) else ""
    if _TRACEBACK in recorded:
        return CallPolicy.STALE, (f"{command} crashed in the original run; its Python traceback names SWE-agent's "
                                  "install paths")
    if command == "str_replace_editor":
        if recorded.startswith(_FILEMAP):
            return CallPolicy.STALE, ("the recorded view is SWE-agent's tree-sitter filemap of a large Python file "
                                      "(USE_FILEMAP), which forkpoint does not reproduce")
        if setup.registry_flag("USE_LINTER") and _subcommand(action) == "str_replace":
            return CallPolicy.STALE, ("USE_LINTER runs flake8 from SWE-agent's container after the edit; forkpoint "
                                      "does not reproduce its report")
    return CallPolicy.FRESH, None


def _subcommand(action: str) -> str:
    try:
        words = shlex.split(action.strip().splitlines()[0]) if action.strip() else []
    except ValueError:
        words = action.split()
    return words[1] if len(words) > 1 else ""
