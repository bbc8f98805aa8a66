"""adapters.kit.ids: which trajectory ids may become a file name or an argument, and derived names for the rest."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forkpoint.adapters.kit.ids import (
    MAX_ID_LENGTH,
    OPENCODE_SESSION,
    UUID,
    check_id,
    component_problem,
    is_safe,
    safe_file_stem,
)
from forkpoint.core.errors import ErrorKind, ReplayError

REAL_IDS = [
    "63f30ef9-b664-4969-acda-8944edff5a64",  # Claude Code session
    "01a22df0-23f0-7890-8ba5-0321d7db1969",  # Codex thread (uuid v7)
    "ses_dd1919192ffemh16DgMtGpp4kN",  # OpenCode session
    "msg_22e6e6ed8001jYQEax7NvgTDBW",
    "prt_b1",
    "2026-11-30T21-47-50-465Z",  # Pi header timestamp, as its file name uses it
    "toy__shell_state-1",  # SWE-agent instance id
    "django__django-11099",
    "session-1",
    "a" * MAX_ID_LENGTH,
]


@pytest.mark.parametrize("value", REAL_IDS)
def test_real_ids_are_safe(value: str) -> None:
    assert component_problem(value) is None and check_id(value, "id") == value


@pytest.mark.parametrize(("value", "reason"), [
    ("../../x", "path separator"),
    ("/tmp/x", "path separator"),
    ("a\\b", "path separator"),
    ("..", "starts with '.'"),
    (".", "starts with '.'"),
    (".hidden", "starts with '.'"),
    ("-rf", "starts with '-'"),
    ("--resume", "starts with '-'"),
    ("a\x00b", "NUL"),
    ("a" * (MAX_ID_LENGTH + 1), "characters long"),
    ("", "empty"),
    ("a b", "only letters"),
    ("a\nb", "only letters"),
    ("é", "only letters"),
    (None, "not a string"),
    (7, "not a string"),
])
def test_unsafe_values_are_refused_as_trajectory_errors_naming_the_field(value: object, reason: str) -> None:
    problem = component_problem(value)
    assert problem is not None and reason in problem
    with pytest.raises(ReplayError) as caught:
        check_id(value, "session_meta.id")
    assert caught.value.kind is ErrorKind.TRAJECTORY and caught.value.kind.exit_code == 10
    assert caught.value.message.startswith("session_meta.id ") and reason in caught.value.message


def test_the_shown_value_stays_short_and_escaped() -> None:
    with pytest.raises(ReplayError) as caught:
        check_id("\x1b[31m" + "a" * 5000, "sessionId")
    assert len(caught.value.message) < 300 and "\x1b" not in caught.value.message


def test_shapes() -> None:
    assert check_id(REAL_IDS[1], "id", shape=UUID) == REAL_IDS[1]
    with pytest.raises(ReplayError, match="not a UUID"):
        check_id("session-1", "id", shape=UUID, shape_name="a UUID")
    assert OPENCODE_SESSION.fullmatch("ses_1") and not OPENCODE_SESSION.fullmatch("sess_1")
    with pytest.raises(ReplayError, match="path separator"):  # the component rule comes first
        check_id("ses_/x", "id", shape=OPENCODE_SESSION)


def test_safe_file_stem_keeps_safe_ids_and_derives_the_rest() -> None:
    assert safe_file_stem("toy__shell_state-1") == "toy__shell_state-1"
    derived = safe_file_stem("/home/u/tasks/issue 7.md")
    assert derived.startswith("issue_7.md-") and len(derived) == len("issue_7.md-") + 8
    assert safe_file_stem("/home/u/tasks/issue 7.md") == derived  # stable
    assert safe_file_stem("/other/issue 7.md") != derived  # the hash tells same-named files apart
    assert safe_file_stem("..").startswith("id-") and safe_file_stem("-rf").startswith("rf-")
    assert safe_file_stem("a\x00b") .startswith("a_b-")


@given(st.text(max_size=300))
def test_safe_file_stem_is_always_one_safe_component(value: str) -> None:
    derived = safe_file_stem(value)
    assert is_safe(derived)
    assert derived == value or derived.endswith(tuple("0123456789abcdef"))
