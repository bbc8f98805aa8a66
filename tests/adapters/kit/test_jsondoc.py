"""adapters.kit.jsondoc: one JSON document read within the trajectory bound, with typed errors and tolerant access."""

from __future__ import annotations

import hashlib
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from forkpoint.adapters.kit.jsondoc import HUGE_RECORD_BYTES, as_object, as_text, load_json_document, loads_record
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


def _peak_of(work: Callable[[], object]) -> int:
    """The most Python memory ``work`` held at once (tracemalloc sees orjson's and the stdlib's allocations)."""
    tracemalloc.start()
    try:
        result = work()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    del result
    return peak


def test_a_huge_record_is_parsed_in_about_twice_its_size() -> None:
    """orjson 3.13 held ~13x a 20 MB string while parsing it (260 MB): a huge answer's line in a continued
    session cost a quarter of a GB to re-parse. Now ~2x (the decoded text and the result)."""
    size = 16 << 20
    line = b'{"type":"message","text":"' + b"abcde " * (size // 6) + b'"}'
    assert _peak_of(lambda: loads_record(memoryview(line))) < 4 * size
    assert loads_record(line)["text"].startswith("abcde ") and size > HUGE_RECORD_BYTES


@pytest.mark.parametrize("bad", [b'{"a":NaN}', b'{"a":"\xff"}', b"[" * 100_000 + b"]" * 100_000, b'{"a":'])
@pytest.mark.parametrize("padding", [0, HUGE_RECORD_BYTES])
def test_a_huge_record_is_refused_where_orjson_refuses_it(bad: bytes, padding: int) -> None:
    record = b" " * padding + bad
    with pytest.raises(orjson.JSONDecodeError):
        loads_record(record)
