"""Upstream failures (429, 5xx, connection reset) map to the retryable model categories (exit 40)."""

from __future__ import annotations

import pytest

from forkpoint.core.errors import ErrorKind, classify_continuation_output

CASES = [
    ("API Error: 429 Too Many Requests", ErrorKind.MODEL_RATE_LIMIT),
    ("request failed with status 429", ErrorKind.MODEL_RATE_LIMIT),
    ("Rate limit reached for requests", ErrorKind.MODEL_RATE_LIMIT),
    ("API Error: 500 Internal Server Error", ErrorKind.MODEL_INTERNAL),
    ("unexpected status 502 Bad Gateway", ErrorKind.MODEL_INTERNAL),
    ("unexpected status 503 Service Unavailable", ErrorKind.MODEL_INTERNAL),
    ('{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}', ErrorKind.MODEL_INTERNAL),
    ("Error: read ECONNRESET", ErrorKind.MODEL_CONNECTION),
    ("stream error: connection reset by peer", ErrorKind.MODEL_CONNECTION),
    ("connect ECONNREFUSED 127.0.0.1:9", ErrorKind.MODEL_CONNECTION),
    ("Connection refused (os error 111)", ErrorKind.MODEL_CONNECTION),
    ("the gate refused the first request", ErrorKind.CONTINUATION),
    ("", ErrorKind.CONTINUATION),
]


@pytest.mark.parametrize(("output", "kind"), CASES)
def test_upstream_error_categories(output: str, kind: ErrorKind) -> None:
    got = classify_continuation_output(output)
    assert got is kind
    assert got.exit_code == 40
    assert got.retryable is (kind is not ErrorKind.CONTINUATION)
