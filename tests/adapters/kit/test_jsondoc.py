"""adapters.kit.jsondoc: one JSON document read within the trajectory bound, with typed errors and tolerant access."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from forkpoint.adapters.kit.jsondoc import as_object, as_text, load_json_document
from forkpoint.core.errors import ErrorKind, ReplayError


def test_a_document_comes_back_parsed_with_the_digest_of_its_bytes(tmp_path: Path) -> None:
    path = tmp_path / "run.traj"
    raw = b'{"history": [1, 2], "info": {"x": "y"}}'
    path.write_bytes(raw)
    data, digest = load_json_document(path, "trajectory")
    assert data == {"history": [1, 2], "info": {"x": "y"}}
    assert digest == hashlib.sha256(raw).hexdigest()


@pytest.mark.parametrize(("content", "expected"), [
    (None, "cannot read the event list"),
    (b"{not json", "is not valid JSON"),
    (b"[" * 10 + b"]" * 10 + b" " * 100, "over the trajectory size bound of 64 bytes"),
])
def test_unreadable_documents_are_trajectory_errors(tmp_path: Path, content: bytes | None, expected: str) -> None:
    path = tmp_path / "events.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ReplayError) as caught:
        load_json_document(path, "event list", max_bytes=64)
    assert caught.value.kind is ErrorKind.TRAJECTORY
    assert expected in caught.value.message


def test_tolerant_accessors_fall_back_on_other_types() -> None:
    assert as_object({"a": 1}) == {"a": 1}
    assert as_object([("a", 1)]) == {}
    assert as_text("text") == "text"
    assert as_text(3) == ""
    assert as_text(None, "default") == "default"
