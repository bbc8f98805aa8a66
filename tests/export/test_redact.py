"""Redaction of exported text: each well-known secret shape is replaced and counted, ordinary text is not."""

from __future__ import annotations

import pytest
from tests.export.secret_corpus import LOOKALIKES, SECRETS, score, table

from forkpoint.export.redact import Redactor

CANARIES = {
    "openai_key": "sk-proj-Zq8rT2vLmN4pXc7bWd9kHs3J",
    "anthropic_key": "sk-ant-api03-Q2w3E4r5T6y7U8i9O0pAsDfGh",
    "github_token": "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
    "aws_access_key_id": "AKIAZ7QXW3RTV5YU2KLM",
    "slack_token": "xoxb-2048-4096-QwErTyUiOp",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJjYW5hcnkifQ.c2lnbmF0dXJlLWNhbmFyeQ",
}


@pytest.mark.parametrize("kind", sorted(CANARIES))
def test_each_shape_is_redacted_and_counted(kind: str) -> None:
    redactor = Redactor()
    out = redactor.text(f"before {CANARIES[kind]} after")
    assert CANARIES[kind] not in out
    assert out == f"before [REDACTED:{kind}] after"
    assert redactor.counts == {kind: 1}


def test_pem_private_key_block_is_redacted_whole() -> None:
    block = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----"
    redactor = Redactor()
    assert redactor.text(f"key:\n{block}\nrest") == "key:\n[REDACTED:private_key]\nrest"


@pytest.mark.parametrize("line", [
    "DB_PASSWORD=hunter2222", "export STRIPE_SECRET='rk_live_canary'", 'AWS_SECRET_ACCESS_KEY: "abcd/efgh+ijkl"',
    '{"api_key": "plain-canary-value"}',
])
def test_secret_named_assignments_keep_the_name_and_lose_the_value(line: str) -> None:
    redactor = Redactor()
    out = redactor.text(line)
    assert "[REDACTED:secret_assignment]" in out
    for secret in ("hunter2222", "rk_live_canary", "abcd/efgh+ijkl", "plain-canary-value"):
        assert secret not in out
    assert redactor.counts["secret_assignment"] == 1


def test_home_path_becomes_tilde_only_as_a_whole_component() -> None:
    redactor = Redactor(home="/home/alice")
    assert redactor.text("/home/alice/src and /home/alice and /home/alicex") == "~/src and ~ and /home/alicex"
    assert redactor.counts["home_path"] == 2


@pytest.mark.parametrize("text", [
    "sha256 3f79bb7b435b05321651daefd374cdc681dc06faa65e374e38337b88ca046dea",
    "git commit 1a2b3c4d, task-key: short, tokens=12", "skip the sk- prefix", "the KEY is short",
])
def test_ordinary_text_is_untouched(text: str) -> None:
    redactor = Redactor(home="/home/alice")
    assert redactor.text(text) == text
    assert not redactor.counts


def _redact(text: str) -> tuple[str, int]:
    redactor = Redactor()
    out = redactor.text(text)
    return out, redactor.pending()


def test_recall_and_precision_on_the_secret_corpus() -> None:
    """Every class of the corpus (tests/export/secret_corpus.py: generated fakes in transcript contexts) is caught,
    and every look-alike (hashes, UUIDs, git SHAs, base64 images, counts, prose) survives; the table is printed
    (``pytest -rP``) and quoted in docs/export.md."""
    result = score(_redact)
    print(table(result))
    assert set(result.recall) == set(SECRETS) and set(result.survived) == set(LOOKALIKES)
    missed = {kind: share for kind, share in result.recall.items() if share < 1.0}
    touched = {kind: share for kind, share in result.survived.items() if share < 1.0}
    assert not missed and not touched and result.precision == 1.0, (missed, touched, table(result))


@pytest.mark.parametrize("seed", [1, 2])
def test_other_draws_of_the_corpus_score_the_same(seed: int) -> None:
    """The patterns are not fitted to one draw of random values."""
    result = score(_redact, seed=seed)
    assert min(result.recall.values()) == 1.0 and min(result.survived.values()) == 1.0, table(result)


@pytest.mark.parametrize(("line", "kept"), [
    ('DB_PASSWORD="correct horse battery staple"', 'DB_PASSWORD="[REDACTED:secret_assignment]"'),
    ("PASSWORD=abc;def;ghi", "PASSWORD=[REDACTED:secret_assignment]"),
    ("postgres://app:s3cr3t@db:5432/x", "postgres://app:[REDACTED:url_credentials]@db:5432/x"),
    ("Authorization: Bearer abc123def456ghi789", "Authorization: Bearer [REDACTED:auth_header]"),
    ("mysql --password=s3cr3t -u root", "mysql --password=[REDACTED:secret_flag] -u root"),
    ('{"password": "hunter2222", "user": "a"}', '{"password": "[REDACTED:secret_assignment]", "user": "a"}'),
])
def test_only_the_secret_part_is_replaced(line: str, kept: str) -> None:
    assert Redactor().text(line) == kept
