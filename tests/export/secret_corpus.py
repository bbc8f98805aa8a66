"""A corpus of real-looking FAKE secrets per class, in the contexts agents' transcripts hold them (env dumps, .env
files, JSON, YAML, shell commands, logs, code), and of look-alikes that must survive (hashes, UUIDs, git SHAs,
base64 images, counts, prose). Generated from a seeded RNG at test time: no real secret, and no secret-shaped
literal in the repository for scanners to trip on.

``python tests/export/secret_corpus.py`` prints the recall/precision table docs/export.md quotes.
"""

from __future__ import annotations

import base64
import hashlib
import random
import string
import uuid
from collections.abc import Callable
from dataclasses import dataclass

ALNUM = string.ascii_letters + string.digits
UPPER_DIGITS = string.ascii_uppercase + string.digits
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "-_"
PER_CLASS = 12


@dataclass(frozen=True)
class Sample:
    kind: str
    text: str
    secret: str  # the part that must not survive redaction ("" for a look-alike)


def _s(rng: random.Random, alphabet: str, size: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(size))


def _mixed(rng: random.Random, alphabet: str, size: int) -> str:
    """A random string of ``alphabet`` with at least one upper, one lower and one digit (as real keys have)."""
    while True:
        value = _s(rng, alphabet, size)
        if any(c.isupper() for c in value) and any(c.islower() for c in value) and any(c.isdigit() for c in value):
            return value


def _password(rng: random.Random) -> str:
    return _s(rng, ALNUM + "!#%&*+-=?^_~", rng.randint(10, 20))


def _context(rng: random.Random, secret: str) -> str:
    """The secret where an agent's transcript would show it."""
    return rng.choice([
        "{s}", "export X={s}", "Found {s} in the config", '{{"value": "{s}"}}', "  token: {s}\n", "$ echo {s}\n{s}",
        "curl -s https://api.example.com -d key={s}", "# {s}", "'{s}'", "value=({s})",
    ]).format(s=secret)


def _shape(make: Callable[[random.Random], str]) -> Callable[[random.Random], Sample]:
    def sample(rng: random.Random) -> Sample:
        secret = make(rng)
        return Sample("", _context(rng, secret), secret)
    return sample


def _pem(rng: random.Random, label: str) -> Sample:
    body = "\n".join(_s(rng, B64, 64) for _ in range(rng.randint(3, 8)))
    block = f"-----BEGIN {label}-----\n{body}\n-----END {label}-----"
    return Sample("", f"$ cat ~/.ssh/id\n{block}\n$ ls", block)


def _assignment(names: list[str], forms: list[str], value: Callable[[random.Random], str]
                ) -> Callable[[random.Random], Sample]:
    def sample(rng: random.Random) -> Sample:
        secret = value(rng)
        return Sample("", rng.choice(forms).format(n=rng.choice(names), v=secret), secret)
    return sample


def _spaced(rng: random.Random) -> str:
    return " ".join(_s(rng, string.ascii_lowercase, rng.randint(4, 8)) for _ in range(rng.randint(3, 5)))


def _semicolon(rng: random.Random) -> str:
    return f"{_s(rng, ALNUM, 6)};{_s(rng, ALNUM, 6)};{_s(rng, ALNUM, 4)}"


def _url(rng: random.Random, scheme: str) -> Sample:
    secret = _password(rng).replace("#", "").replace("?", "")
    user = rng.choice(["admin", "app", "deploy", "postgres", "u"])
    host = rng.choice(["db.internal:5432/app", "localhost/x", "10.0.0.4:6379/0", "example.com/repo.git"])
    return Sample("", rng.choice(["{u}", "DATABASE_URL={u}", "git clone {u}", "connecting to {u} ..."]).format(
        u=f"{scheme}://{user}:{secret}@{host}"), secret)


def _header(rng: random.Random, scheme: str) -> Sample:
    if scheme == "Basic":
        secret = base64.b64encode(f"{_s(rng, string.ascii_lowercase, 6)}:{_password(rng)}".encode()).decode()
    else:
        secret = _mixed(rng, URLSAFE + ".", rng.randint(24, 60))
    form = rng.choice(["curl -H 'Authorization: {h} {s}' https://x", "Authorization: {h} {s}",
                       '{{"headers": {{"Authorization": "{h} {s}"}}}}', "> {h} {s}"])
    return Sample("", form.format(h=scheme, s=secret), secret)


def _flag(rng: random.Random) -> Sample:
    secret = _password(rng)
    form = rng.choice(["mysql --password={s} -u root", "psql --password {s}", "tool login --token={s}",
                       "cli --api-key {s} run", "vault --secret={s}"])
    return Sample("", form.format(s=secret), secret)


#: class -> generator; the first block is what the redactor promised before, the second what it adds
SECRETS: dict[str, Callable[[random.Random], Sample]] = {
    "pem_private_key": lambda rng: _pem(rng, rng.choice(["RSA PRIVATE KEY", "OPENSSH PRIVATE KEY",
                                                          "EC PRIVATE KEY", "PRIVATE KEY"])),
    "jwt": _shape(lambda rng: "eyJ" + _s(rng, URLSAFE, 30) + ".eyJ" + _s(rng, URLSAFE, 60) + "."
                  + _s(rng, URLSAFE, 43)),
    "anthropic_key": _shape(lambda rng: "sk-ant-api03-" + _s(rng, URLSAFE, 93) + "AA"),
    "openai_key": _shape(lambda rng: rng.choice(["sk-proj-", "sk-", "sk-svcacct-"]) + _s(rng, URLSAFE, 48)),
    "github_token": _shape(lambda rng: rng.choice(["ghp_", "gho_", "ghs_"]) + _s(rng, ALNUM, 36)
                           if rng.random() < 0.6 else "github_pat_" + _s(rng, ALNUM + "_", 82)),
    "aws_access_key_id": _shape(lambda rng: rng.choice(["AKIA", "ASIA"]) + _s(rng, UPPER_DIGITS, 16)),
    "slack_token": _shape(lambda rng: f"xox{rng.choice('bpa')}-{_s(rng, string.digits, 12)}-"
                          f"{_s(rng, string.digits, 12)}-{_s(rng, ALNUM, 24)}"),
    "env_secret_name": _assignment(["DB_PASSWORD", "STRIPE_SECRET", "GITHUB_TOKEN", "OPENAI_API_KEY", "apiKey",
                                    "client_secret", "AUTH_TOKEN"],
                                   ["{n}={v}", "export {n}={v}", "{n}: {v}", '"{n}": "{v}"'], _password),
    "bare_password": _assignment(["PASSWORD", "password", "Password", "passwd"],
                                 ["{n}={v}", "{n}: {v}", "export {n}={v}"], _password),
    "bare_token_secret": _assignment(["TOKEN", "SECRET", "token", "secret"], ["{n}={v}", "{n}: {v}"], _password),
    "json_password": _assignment(["password", "secret", "token"], ['{{"user": "a", "{n}": "{v}"}}',
                                                                   "{{'{n}': '{v}'}}"], _password),
    "quoted_with_spaces": _assignment(["PASSWORD", "DB_PASSWORD", "passphrase"],
                                      ['{n}="{v}"', "{n}='{v}'", 'export {n}="{v}"'], _spaced),
    "value_with_semicolon": _assignment(["PASSWORD", "API_SECRET"], ["{n}={v}", "{n}={v}\nNEXT=1"], _semicolon),
    "pgp_private_key": lambda rng: _pem(rng, "PGP PRIVATE KEY BLOCK"),
    "url_credentials_db": lambda rng: _url(rng, rng.choice(["postgres", "postgresql", "mysql", "redis",
                                                            "mongodb+srv", "amqp"])),
    "url_credentials_https": lambda rng: _url(rng, rng.choice(["https", "http"])),
    # not promised before, common in agent transcripts
    "huggingface_token": _shape(lambda rng: "hf_" + _s(rng, ALNUM, 34)),
    "google_api_key": _shape(lambda rng: "AIza" + _s(rng, URLSAFE, 35)),
    "gitlab_token": _shape(lambda rng: "glpat-" + _s(rng, URLSAFE, 20)),
    "npm_token": _shape(lambda rng: "npm_" + _s(rng, ALNUM, 36)),
    "stripe_key": _shape(lambda rng: rng.choice(["sk_live_", "rk_live_", "sk_test_"]) + _s(rng, ALNUM, 24)),
    "sendgrid_key": _shape(lambda rng: "SG." + _s(rng, URLSAFE, 22) + "." + _s(rng, URLSAFE, 43)),
    "bearer_header": lambda rng: _header(rng, "Bearer"),
    "basic_header": lambda rng: _header(rng, "Basic"),
    "slack_webhook": _shape(lambda rng: "https://hooks.slack.com/services/T" + _s(rng, UPPER_DIGITS, 8) + "/B"
                            + _s(rng, UPPER_DIGITS, 8) + "/" + _s(rng, ALNUM, 24)),
    "password_flag": _flag,
    "aws_secret_access_key": _shape(lambda rng: _mixed(rng, B64, 40)),
}


def _b64_image(rng: random.Random) -> str:
    data = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(rng.getrandbits(8) for _ in range(300))).decode()
    return rng.choice([f"![plot](data:image/png;base64,{data})", data[:76] + "\n" + data[76:152]])


#: look-alike -> generator of text that must come out unchanged
LOOKALIKES: dict[str, Callable[[random.Random], str]] = {
    "sha256": lambda rng: f"sha256 {hashlib.sha256(rng.randbytes(8)).hexdigest()}  file.tar.gz",
    "git_sha": lambda rng: rng.choice(["commit {h}", "git checkout {h}", "{h} refs/heads/main", "Merge {h7} into"])
    .format(h=hashlib.sha1(rng.randbytes(8)).hexdigest(), h7=hashlib.sha1(rng.randbytes(8)).hexdigest()[:7]),
    "uuid": lambda rng: f"session {uuid.UUID(int=rng.getrandbits(128))} started",
    "docker_digest": lambda rng: f"image@sha256:{hashlib.sha256(rng.randbytes(8)).hexdigest()}",
    "npm_integrity": lambda rng: '"integrity": "sha512-' + base64.b64encode(hashlib.sha512(rng.randbytes(8))
                                                                            .digest()).decode() + '"',
    "base64_image": _b64_image,
    "token_counts": lambda rng: rng.choice(["max_tokens: {n}", "input_tokens={n}", '"output_tokens": {n}',
                                            "tokenizer: gpt2", "num_tokens = {n}"]).format(n=rng.randint(1, 99999)),
    "data_keys": lambda rng: rng.choice(["primary_key: id", "sort_key = 'created_at'", "cache_key: user:42",
                                         "partition_key=tenant", "task-key: short", "the key is short"]),
    "env_references": lambda rng: rng.choice(["API_KEY=$OPENAI_API_KEY", 'export TOKEN="${GITHUB_TOKEN}"',
                                              "password = os.environ['DB_PASSWORD']",
                                              "token = get_token()", "secret: null", "api_key: str"]),
    "urls": lambda rng: rng.choice(["https://user@example.com/x", "git@github.com:org/repo.git",
                                    "ssh://git@host:22/repo", "http://localhost:8080/path?a=b",
                                    "postgres://db.internal:5432/app"]),
    "prose": lambda rng: rng.choice(["Bearer authentication is used by the API.", "The password policy needs 12 "
                                     "characters.", "Rotate the secret every 90 days.", "skip the sk- prefix",
                                     "Use a Basic auth header.", "tokens were counted"]),
    "paths_and_ids": lambda rng: rng.choice(["/usr/lib/python3.11/site-packages/aiohttp/client.py",
                                             f"run-{hashlib.md5(rng.randbytes(4)).hexdigest()}",
                                             f"toolu_{_s(rng, ALNUM, 24)}", f"call_{_s(rng, ALNUM, 24)}"]),
}


def corpus(seed: int = 27, per_class: int = PER_CLASS) -> tuple[list[Sample], list[Sample]]:
    """(secret samples, look-alike samples), the same for a seed."""
    rng = random.Random(seed)
    secrets = [Sample(kind, sample.text, sample.secret) for kind, make in SECRETS.items()
               for sample in (make(rng) for _ in range(per_class))]
    lookalikes = [Sample(kind, make(rng), "") for kind, make in LOOKALIKES.items() for _ in range(per_class)]
    return secrets, lookalikes


@dataclass(frozen=True)
class Score:
    recall: dict[str, float]  # secret class -> share of samples whose secret is gone
    survived: dict[str, float]  # look-alike kind -> share of samples left unchanged
    precision: float  # replacements that hit a secret / all replacements made on the corpus


def score(redact: Callable[[str], tuple[str, int]], seed: int = 27) -> Score:
    """Measure a redactor (text -> (redacted text, replacements made)) on the corpus."""
    secrets, lookalikes = corpus(seed)
    recall: dict[str, list[bool]] = {}
    true_hits = false_hits = 0
    for sample in secrets:
        out, count = redact(sample.text)
        caught = sample.secret not in out
        recall.setdefault(sample.kind, []).append(caught)
        true_hits += count
    survived: dict[str, list[bool]] = {}
    for sample in lookalikes:
        out, count = redact(sample.text)
        survived.setdefault(sample.kind, []).append(out == sample.text)
        false_hits += count
    share = {kind: sum(values) / len(values) for kind, values in recall.items()}
    kept = {kind: sum(values) / len(values) for kind, values in survived.items()}
    return Score(share, kept, true_hits / max(1, true_hits + false_hits))


def table(result: Score) -> str:
    lines = ["| secret class | recall |", "|---|---|"]
    lines += [f"| {kind} | {value:.0%} |" for kind, value in result.recall.items()]
    lines += ["", "| look-alike | left unchanged |", "|---|---|"]
    lines += [f"| {kind} | {value:.0%} |" for kind, value in result.survived.items()]
    lines += ["", f"precision (replacements that hit a secret): {result.precision:.1%}"]
    return "\n".join(lines)


if __name__ == "__main__":
    from forkpoint.export.redact import Redactor

    def redact(text: str) -> tuple[str, int]:
        redactor = Redactor()
        out = redactor.text(text)
        return out, redactor.pending()

    print(table(score(redact)))
