"""EnterPlanMode: re-run as its constant text (proven on the real SDK-mode fixtures in ``test_fixture_fidelity``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from forkpoint.core.errors import ReplayError

from .conftest import Run

NEW = "2.1.332"


def test_enter_plan_mode_is_its_constant_text_and_takes_no_input(make: Callable[[str], Run]) -> None:
    run = make(NEW)
    result = run("EnterPlanMode")
    assert result.content.startswith("Entered plan mode. You should now focus") and not result.is_error
    assert result.native == {"message": "Entered plan mode. You should now focus on exploring the codebase and "
                                        "designing an implementation approach."}
    with pytest.raises(ReplayError) as error:
        run("EnterPlanMode", mode="plan")
    assert error.value.before_effect
