"""Tests for memlab.memory.scrub (credential scrubbing, docs/design.md §D0.11)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from memlab.memory.scrub import (
    DEFAULT_PATTERNS,
    Rule,
    Scrubber,
    default_scrubber,
    scrub,
    scrub_message,
    scrub_text,
    scrub_value,
)

# (raw text, secret that must vanish, expected scrubbed text)
CASES = [
    # API keys: vendor shapes
    (
        "key sk-abcdefghijklmnop1234 here",
        "sk-abcdefghijklmnop1234",
        "key [REDACTED:api_key] here",
    ),
    (
        "OPENAI_KEY sk-proj-Ab12Cd34Ef56Gh78Ij90",
        "sk-proj-Ab12Cd34Ef56Gh78Ij90",
        "OPENAI_KEY [REDACTED:api_key]",
    ),
    ("aws AKIAIOSFODNN7EXAMPLE ok", "AKIAIOSFODNN7EXAMPLE", "aws [REDACTED:api_key] ok"),
    (
        "gh ghp_abcdefghijklmnopqrstuvwxyz0123456789",
        "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
        "gh [REDACTED:api_key]",
    ),
    (
        "oauth gho_16C7e42F292c6912E7710c838347Ae178B4a",
        "gho_16C7e42F292c6912E7710c838347Ae178B4a",
        "oauth [REDACTED:api_key]",
    ),
    (
        "pat github_pat_11ABCDEFG0123456789_abcdefghijklmnop",
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnop",
        "pat [REDACTED:api_key]",
    ),
    (
        "slack xoxb-1234567890-abcdefghij and xoxp-99887766554433",
        "xoxb-1234567890-abcdefghij",
        "slack [REDACTED:api_key] and [REDACTED:api_key]",
    ),
    (
        "maps AIzaSyA1234567890abcdefghijklmnopqrstu.",
        "AIzaSyA1234567890abcdefghijklmnopqrstu",
        "maps [REDACTED:api_key].",
    ),
    # API keys: generic assignments
    ("api_key=abc123def456", "abc123def456", "api_key=[REDACTED:api_key]"),
    ("apikey: 'zz top 99'", "zz top 99", "apikey: '[REDACTED:api_key]'"),
    ('{"api_key": "k-998877"}', "k-998877", '{"api_key": "[REDACTED:api_key]"}'),
    ("STRIPE_API_KEY=rk9x8y7", "rk9x8y7", "STRIPE_API_KEY=[REDACTED:api_key]"),
    # Passwords
    ("password=hunter2", "hunter2", "password=[REDACTED:password]"),
    ("login with pwd: Tr0ub4dor", "Tr0ub4dor", "login with pwd: [REDACTED:password]"),
    ("passwd = 'correct horse'", "correct horse", "passwd = '[REDACTED:password]'"),
    ("DB_PASSWORD=s3cret! then", "s3cret!", "DB_PASSWORD=[REDACTED:password] then"),
    # Tokens and secrets
    ("token=abc123", "abc123", "token=[REDACTED:token]"),
    ("secret=xyz789", "xyz789", "secret=[REDACTED:token]"),
    ("access_token: ya29.a0AfH6SM", "ya29.a0AfH6SM", "access_token: [REDACTED:token]"),
    (
        "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG",
        "wJalrXUtnFEMI/K7MDENG",
        "AWS_SECRET_ACCESS_KEY=[REDACTED:token]",
    ),
    (
        "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.dozjgNryP4J3jVmNHl0w5N end",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.dozjgNryP4J3jVmNHl0w5N",
        "jwt [REDACTED:jwt] end",
    ),
    # Bearer tokens
    (
        "Authorization: Bearer abc.def-ghi",
        "abc.def-ghi",
        "Authorization: Bearer [REDACTED:bearer_token]",
    ),
    (
        "curl -H 'Authorization: Basic dXNlcjpwYXNz'",
        "dXNlcjpwYXNz",
        "curl -H 'Authorization: Basic [REDACTED:bearer_token]'",
    ),
    ("use Bearer 1234abcd5678 now", "1234abcd5678", "use Bearer [REDACTED:bearer_token] now"),
    # Connection strings: keep scheme, user and host
    (
        "postgres://app:s3cret@db:5432/x",
        "s3cret",
        "postgres://app:[REDACTED:password]@db:5432/x",
    ),
    (
        "mysql://root:p@ss@localhost/db",
        "p@ss",
        "mysql://root:[REDACTED:password]@localhost/db",
    ),
    (
        "mongodb+srv://u:pw9@cluster0.x.net/db",
        "pw9",
        "mongodb+srv://u:[REDACTED:password]@cluster0.x.net/db",
    ),
    ("redis://:hunter2@cache:6379", "hunter2", "redis://:[REDACTED:password]@cache:6379"),
    (
        "amqp://guest:guestpw@rabbit:5672//",
        "guestpw",
        "amqp://guest:[REDACTED:password]@rabbit:5672//",
    ),
    (
        "sftp://deploy:Zx9!q@files.example.com/in",
        "Zx9!q",
        "sftp://deploy:[REDACTED:password]@files.example.com/in",
    ),
    # PEM private keys
    (
        "key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7\n"
        "-----END RSA PRIVATE KEY-----\nok",
        "MIIEpAIBAAKCAQEA7",
        "key:\n[REDACTED:private_key]\nok",
    ),
    (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk",
        "b3BlbnNzaC1rZXk",
        "[REDACTED:private_key]",
    ),
]


@pytest.mark.parametrize(("raw", "secret", "expected"), CASES)
def test_each_secret_class_is_redacted(raw: str, secret: str, expected: str) -> None:
    out, n = scrub(raw)
    assert out == expected
    assert secret not in out
    assert n == expected.count("[REDACTED:")


@pytest.mark.parametrize(("raw", "secret", "expected"), CASES)
def test_scrubbing_is_idempotent(raw: str, secret: str, expected: str) -> None:
    once, _ = scrub(raw)
    assert scrub(once) == (once, 0)


def test_mixed_text_counts_every_redaction() -> None:
    raw = (
        "deploy with DATABASE_URL=postgres://app:pw1@db/x and token=t0k "
        "then call with Authorization: Bearer zzz999"
    )
    out, n = scrub(raw)
    assert out == (
        "deploy with DATABASE_URL=postgres://app:[REDACTED:password]@db/x and "
        "token=[REDACTED:token] then call with Authorization: Bearer [REDACTED:bearer_token]"
    )
    assert n == 3
    assert scrub(out) == (out, 0)


@pytest.mark.parametrize(
    "text",
    [
        "token bucket algorithm",
        "password reset flow was redesigned",
        "the bearer of bad news",
        "secret sauce of the campaign",
        "the api key rotation policy",
        "max_tokens=1000 and token_count: 5",
        "see https://example.com:8080/path?email=a@b.com",
        "Skills like task-management are ranked by sk score",
        "",
    ],
)
def test_ordinary_text_is_untouched(text: str) -> None:
    assert scrub(text) == (text, 0)


def test_custom_patterns_replace_whole_match_or_secret_group() -> None:
    scrubber = Scrubber(
        patterns=(
            ("pin", re.compile(r"PIN (?P<secret>\d{4})")),
            ("card", re.compile(r"\b\d{4}-\d{4}-\d{4}-\d{4}\b")),
        )
    )
    assert scrubber.scrub("PIN 1234, card 4111-1111-1111-1111") == (
        "PIN [REDACTED:pin], card [REDACTED:card]",
        2,
    )


def test_a_rule_with_triggers_runs_only_on_texts_that_hold_one() -> None:
    rule = Rule("pin", re.compile(r"pin (?P<secret>\d{4})"), lower=True, triggers=("pin",))
    scrubber = Scrubber(patterns=(rule,), plugins=(), entropy=False)
    assert scrubber.scrub("PIN 1234") == ("PIN [REDACTED:pin]", 1)
    other = Scrubber(patterns=(rule._replace(triggers=("card",)),), plugins=(), entropy=False)
    assert other.scrub("PIN 1234") == ("PIN 1234", 0)


def test_a_check_can_reject_a_match_and_say_where_to_search_again() -> None:
    # The first match "ab ab" is rejected with "search again at 3": the second "ab" is then
    # found inside it; rejected without a position, the search would go on behind "ab ab".
    def check(m: re.Match[str], text: str) -> int | None:
        return 3 if m.start() == 0 else (m.start(), m.start() + 2)

    pattern = re.compile(r"ab(?: ab)?")
    scrubber = Scrubber(patterns=(Rule("x", pattern, check),), plugins=(), entropy=False)
    assert scrubber.scrub("ab ab") == ("ab [REDACTED:x]", 1)
    skip = Scrubber(patterns=(Rule("x", pattern, lambda m, t: None if m.start() == 0 else
                                   (m.start(), m.end())),), plugins=(), entropy=False)
    assert skip.scrub("ab ab") == ("ab ab", 0)


def test_default_scrubber_uses_default_patterns() -> None:
    assert Scrubber().patterns is DEFAULT_PATTERNS
    raw = "password=x1 sk-abcdefghijklmnop1234"
    assert Scrubber().scrub(raw) == scrub(raw)


def test_non_string_text_raises_type_error() -> None:
    with pytest.raises(TypeError, match="field 'text'"):
        scrub(b"password=x")  # type: ignore[arg-type]


def test_bad_patterns_raise() -> None:
    with pytest.raises(TypeError, match=r"patterns\[0\]"):
        Scrubber(patterns=(("x", r"abc"),)).scrub("abc")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"patterns\[0\]"):
        Scrubber(patterns=(("Bad Name", re.compile("abc")),)).scrub("abc")


# ----------------------------------------------------------------------------- corpora

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "secrets"
POSITIVES = [json.loads(line) for line in (CORPUS / "positives.jsonl").read_text().splitlines()]
BENIGN = [json.loads(line) for line in (CORPUS / "benign.jsonl").read_text().splitlines()]


def leaked_parts(out: str, secret: str) -> list[str]:
    """Parts of ``secret`` (4+ characters, raw or percent-decoded) still present in ``out``."""
    parts = [p for p in secret.replace("\\\n", " ").split() if len(p) >= 4]
    return [p for p in parts + [unquote(p) for p in parts] if p in out]


@pytest.mark.parametrize(
    "row", POSITIVES, ids=[f"{i}-{r['kind']}" for i, r in enumerate(POSITIVES)]
)
def test_positive_corpus_is_scrubbed(row: dict) -> None:
    out, n = scrub_text(row["text"])
    assert leaked_parts(out, row["secret"]) == []
    assert n >= 1
    assert scrub_text(out) == (out, 0)


@pytest.mark.parametrize("row", BENIGN, ids=[f"{i}-{r['kind']}" for i, r in enumerate(BENIGN)])
def test_benign_corpus_survives(row: dict) -> None:
    assert scrub_text(row["text"]) == (row["text"], 0)


def test_own_rules_alone_cover_the_corpus() -> None:
    """The detect-secrets plugins are a cross-check: the budget never opens a gap."""
    own = Scrubber(plugins=())
    missed = [r["kind"] for r in POSITIVES if leaked_parts(own.scrub(r["text"])[0], r["secret"])]
    assert missed == []


def test_detect_secrets_plugins_find_what_they_know() -> None:
    # A 40-character quoted AWS secret next to "aws ... key": detect-secrets' AWSKeyDetector.
    secret = "Zq3" + "x9Lm" * 9 + "W"
    only_plugins = Scrubber(patterns=(), entropy=False)
    out, n = only_plugins.scrub(f"aws_key = '{secret}'")
    assert out == "aws_key = '[REDACTED:api_key]'"
    assert n == 1


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # multi-word passwords run to the end of the clause
        (
            "password: correct horse battery staple",
            "password: [REDACTED:password]",
        ),
        (
            "The passphrase is granite velvet tundra cobalt. Keep it.",
            "The passphrase is [REDACTED:password]. Keep it.",
        ),
        (
            "my wifi password is Summer2024 and the SSID is Home",
            "my wifi password is [REDACTED:password] and the SSID is Home",
        ),
        # command lines
        ("mysql -u root -pS3cretPass db", "mysql -u root -p[REDACTED:password] db"),
        ("PGPASSWORD=Xy9pass psql -h db", "PGPASSWORD=[REDACTED:password] psql -h db"),
        ("deploy --db-password=Zz9yy8 now", "deploy --db-password=[REDACTED:password] now"),
        ("curl -u admin:pa55word https://x", "curl -u admin:[REDACTED:password] https://x"),
        # a token split by a line break, and a URL-encoded one
        (
            "token ghp_" + "aB3dE5gH7jK9" + "\n" + "mN1pQ3sT5vW7yZ9bC1dE",
            "token [REDACTED:api_key]",
        ),
        ("x?password%3DS3cr3tPass%21 end", "x?password%3D[REDACTED:password] end"),
        # Azure SAS signature and a Slack webhook keep their URL
        (
            "https://a.blob.core.windows.net/c?sv=2022&sig=AbCdEf0123456789%2BxYz%3D",
            "https://a.blob.core.windows.net/c?sv=2022&sig=[REDACTED:signature]",
        ),
        (
            "https://hooks.slack.com/services/T0000AAAA/B0000BBBB/abcdEFGHijklMNOPqrstUVWX",
            "https://hooks.slack.com/services/[REDACTED:webhook]",
        ),
        # PGP private key block without an END marker: redacted to the end
        (
            "key:\n-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQdGBF4abc\n",
            "key:\n[REDACTED:private_key]",
        ),
    ],
)
def test_classes_from_the_issue(raw: str, expected: str) -> None:
    out, _ = scrub_text(raw)
    assert out == expected
    assert scrub_text(out) == (out, 0)


# A credential named in prose: a multi-word name before a colon, a qualifier before it, a verb
# that sets it ("… to X"), a quoted value right after the name, a name then a long random value,
# a user/password pair, a recovery phrase, and the short key ``pw``.
PROSE_CREDENTIALS = [
    ("API key: 3f6b2a9c8d7e4f1a0b5c6d7e8f9a0b1c", "API key: [REDACTED:token]"),
    (
        "my API key for OpenWeather: 3f6b2a9c8d7e4f1a0b5c6d7e8f9a0b1c",
        "my API key for OpenWeather: [REDACTED:token]",
    ),
    ("the secret key: 9f8e7d6c5b4a3928ab", "the secret key: [REDACTED:token]"),
    ("PIN: 4821, pin code: 993311", "PIN: [REDACTED:password], pin code: [REDACTED:password]"),
    (
        "passphrase for the gpg key: blue elephant dances",
        "passphrase for the gpg key: [REDACTED:password]",
    ),
    ("the token is now 7f3a9c2e1b8d4f6a", "the token is now [REDACTED:token]"),
    (
        "changed the root password to Kx9#mPq2 yesterday",
        "changed the root password to [REDACTED:password] yesterday",
    ),
    (
        "Set the secret_key to '9f8e7d6c5b4a3928' please",
        "Set the secret_key to '[REDACTED:token]' please",
    ),
    (
        "we rotated the DB_PASSWORD to 'N3w-Pa55'",
        "we rotated the DB_PASSWORD to '[REDACTED:password]'",
    ),
    ("He set the wifi PIN to 48213390", "He set the wifi PIN to [REDACTED:password]"),
    (
        "login as bob with password 'letmein123'",
        "login as bob with password '[REDACTED:password]'",
    ),
    (
        "private key 0x4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318",
        "private key [REDACTED:token]",
    ),
    ("Access key 9f8e7d6c5b4a39281716abcd (rotated)", "Access key [REDACTED:token] (rotated)"),
    ("credentials: admin / Adm1n!Pass", "credentials: admin / [REDACTED:password]"),
    (
        "My Netflix login is jane@example.com / Summer2024!",
        "My Netflix login is jane@example.com / [REDACTED:password]",
    ),
    ("admin login deploy:Xy7!kP2q", "admin login deploy:[REDACTED:password]"),
    (
        "mnemonic: abandon ability able about above absent absorb abstract absurd abuse access "
        "accident",
        "mnemonic: [REDACTED:seed_phrase]",
    ),
    (
        "ssh into 10.0.0.5 as root with Tr0ub4dor&3",
        "ssh into 10.0.0.5 as root with [REDACTED:password]",
    ),
    ("logged in as bob using Xy7kP2qz9", "logged in as bob using [REDACTED:password]"),
    (
        "Wi-Fi: SSID Office5G / WPA2 key: Sunflower-Garden-88",
        "Wi-Fi: SSID Office5G / WPA2 key: [REDACTED:token]",
    ),
    ("the vault unseal key is 7f3a9c2e1b8d4f6a", "the vault unseal key is [REDACTED:token]"),
    ("Windows product key: VK7JG-NPHTM-C97JM", "Windows product key: [REDACTED:token]"),
    ("license key ABCD-1234-EFGH-5678", "license key [REDACTED:token]"),
    ("password is: Sunflower-Garden-88", "password is: [REDACTED:password]"),
    ("The door code is 4821#", "The door code is [REDACTED:password]"),
    ("2FA backup codes: 1234-5678, 9012-3456", "2FA backup codes: [REDACTED:password]"),
    (
        "API token (read-only): 3f6b2a9c8d7e4f1a0b5c6d7e8f9a0b1c",
        "API token (read-only): [REDACTED:token]",
    ),
    (
        "new password (expires Friday): Autumn#2024",
        "new password (expires Friday): [REDACTED:password]",
    ),
    (
        "Here's the passphrase again: correct horse battery staple",
        "Here's the passphrase again: [REDACTED:password]",
    ),
    (
        "Credentials for the FTP: ftpuser / Ftp#Pass99",
        "Credentials for the FTP: ftpuser / [REDACTED:password]",
    ),
    ("root:Tr0ub4dor&3 on the NAS", "root:[REDACTED:password] on the NAS"),
    ("SIP password 7734 for extension 201", "SIP password [REDACTED:password] for extension 201"),
    ("enter 4821 as the PIN", "enter [REDACTED:password] as the PIN"),
    (
        "the gpg passphrase, in case you need it, is 'orange tiger lamp'",
        "the gpg passphrase, in case you need it, is '[REDACTED:password]'",
    ),
    ("the secret is 'blue-horse-battery'", "the secret is '[REDACTED:token]'"),
    ("pw: Correct-Horse-Battery-9", "pw: [REDACTED:password]"),
    ("root_pw=Tr0ub4dor", "root_pw=[REDACTED:password]"),
    ("my pin number is 4821", "my pin number is [REDACTED:password]"),
    ("security answer: fluffy the cat", "security answer: [REDACTED:password]"),
    # in other languages
    ("Passwort: Geheim123!", "Passwort: [REDACTED:password]"),
    ("le mot de passe est Soleil2024!", "le mot de passe est [REDACTED:password]"),
    ("contraseña: 'mi clave secreta'", "contraseña: '[REDACTED:password]'"),
    ("ПАРОЛЬ: Qwerty2024", "ПАРОЛЬ: [REDACTED:password]"),
    ("パスワード：abc12345", "パスワード：[REDACTED:password]"),
    # a key that is not a credential must not hide the one behind it
    (
        "otpauth://totp/ACME:alice?secret=JBSWY3DPEHPK3PXP&issuer=ACME",
        "otpauth://totp/ACME:alice?secret=[REDACTED:token]&issuer=ACME",
    ),
    ("monkey: x?password=Secret123", "monkey: x?password=[REDACTED:password]"),
    # session cookies, and a URL whose user part is the key
    (
        "Cookie: sessionid=8f7e6d5c4b3a29181716151413121110abcdef; path=/",
        "Cookie: sessionid=[REDACTED:token]; path=/",
    ),
    ("PHPSESSID=9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d", "PHPSESSID=[REDACTED:token]"),
    (
        "dsn https://0123456789abcdef0123456789abcdef@o123456.ingest.sentry.io/4504",
        "dsn https://[REDACTED:token]@o123456.ingest.sentry.io/4504",
    ),
]

# Credentials in structured text: escaped JSON, XML, .NET settings, Markdown tables, an auth
# tuple, configuration lines (a password ends at its line; the next key stays).
STRUCTURED_CREDENTIALS = [
    (
        'config: {\\"password\\": \\"hunter2\\"}',
        'config: {\\"password\\": \\"[REDACTED:password]\\"}',
    ),
    ("<password>hunter2</password>", "<password>[REDACTED:password]</password>"),
    (
        '<add key="ApiKey" value="3f6b2a9c8d7e4f1a0b5c6d7e8f9a0b1c"/>',
        '<add key="ApiKey" value="[REDACTED:api_key]"/>',
    ),
    (
        "| user | bob |\n| password | hunter2 |",
        "| user | bob |\n| password | [REDACTED:password] |",
    ),
    (
        "requests.get(url, auth=('bob', 'hunter2!'))",
        "requests.get(url, auth=('bob', '[REDACTED:password]'))",
    ),
    ('client.login("bob", "Hunter2!x")', 'client.login("bob", "[REDACTED:password]")'),
    (
        "ENV SECRET_KEY_BASE 8f7e6d5c4b3a29181716151413121110abcdef",
        "ENV SECRET_KEY_BASE [REDACTED:token]",
    ),
    (
        "db:\n  password: hunter2\n  user: app",
        "db:\n  password: [REDACTED:password]\n  user: app",
    ),
    ("PASSWORD=hunter2\nDB_USER=app", "PASSWORD=[REDACTED:password]\nDB_USER=app"),
    ("Password - hunter2", "Password - [REDACTED:password]"),
    ("password → hunter2", "password → [REDACTED:password]"),
    ("password -> hunter2", "password -> [REDACTED:password]"),
    ("token -> 3f6b2a9c8d7e4f1a0b5c", "token -> [REDACTED:token]"),
]

# Vendor token shapes (prefix + random body).
VENDOR_TOKENS = [
    "key-3ax6xnjp29jd6fds4gc373sgvjxteol0",  # Mailgun
    "NRAK-ABCDEFGHIJKLMNOPQRSTUVWXYZ1",  # New Relic
    "PMAK-629e1b2c3d4e5f6a7b8c9d0e-1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e",  # Postman
    "pul-0123456789abcdef0123456789abcdef01234567",  # Pulumi
    "ATATT3xFfGF0T5JhZx9kqLmNoPqRsTuVwXyZ012345678ABCDEFGHIJ=A1B2C3D4",  # Atlassian
    "dp.st.prd.AbCdEfGhIjKlMnOpQrStUvWxYz0123456789AbCd",  # Doppler
    "gsk_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789AbCdEfGh",  # Groq
    "CFPAT-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789AbCdEfG",  # Contentful
    "figd_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",  # Figma
    "xai-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789AbCdEfGhIjKl",  # xAI
    "r8_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",  # Replicate
    "fo1_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",  # Fly.io
    "rnd_AbCdEfGhIjKlMnOpQrStUvWxYz01",  # Render
    "sntryu_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",  # Sentry
    "xkeysib-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef-AbCdEfGhIjKlMnOp",
    "LTAI5tAbCdEfGhIjKlMnOpQr",  # Alibaba Cloud
    "glc_eyJvIjoiMTIzNDU2IiwibiI6InN0YWNrIn0=",  # Grafana Cloud
]

# Prose about credentials, with the same words and shapes: nothing is a secret.
PROSE_ABOUT_CREDENTIALS = [
    "reset the password to access the server",
    "I sent the token to Alice yesterday",
    "we changed the api key to the new format",
    "set the token to expire after 30 minutes",
    "set the password to expire in 90 days",
    "switched the auth token to a JWT-based scheme",
    "Set the token to TOKEN_FROM_ENV in the CI settings",
    "the private key rotation is due next week",
    "a mnemonic is a memory device that helps you remember things",
    "mnemonic: Please Excuse My Dear Aunt Sally",
    "the seed phrase is stored offline in a safe",
    "login: alice / see the wiki",
    "credentials: ask ops / use the vault",
    "login via SSO / Okta",
    "password 'must be at least 12 characters'",
    "enter your password 'here'",
    "API key rotation policy v2",
    "the API key: see the vault",
    "access token: expires in 3600 seconds",
    "PIN: required",
    "the token is now valid for 24 hours",
    "token usage: 1200 input / 300 output",
    "token sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "The api key is documented in docs/api/keys.md",
    "security answer: see the vault",
    "la contraseña es obligatoria",
    "le mot de passe est requis",
    "Passwort vergessen?",
    "session=prod",
    "session: morning standup",
    "the key-value store",
    "key-based routing with key-1 and key-2",
    "ssh://deploy-user-production@host",
    "the pin number is on the back of the card",
    "the password - which we rotate - is in the vault",
    "<title>Password reset</title>",
    "<secret>true</secret>",
    "| token | count |\n| input | 1200 |",
    "| Password | required |",
    "auth=('bob', None)",
    "signed in as alice with SSO",
    "logged in as bob with MFA-enabled account",
    "ssh in as root with ed25519 keys",
    "connected as bob using oauth2.0 tokens",
    "the key is in the drawer",
    "primary key: id",
    "cache key: user:123:profile",
    "the key is 3x faster",
    "the key to success is practice",
    "the door code is on the sticky note",
    "error code is 4042",
    "backup codes are stored in 1Password",
    "backup codes: data mirror 2024",
    "redis.Redis(host='cache', password=os.environ['REDIS_PASSWORD'])",
    "token: ${{ secrets.GITHUB_TOKEN }}",
    "with open('key.txt') as f: api_key = f.read()",
    "ssh -i ~/.ssh/id_ed25519 deploy@10.0.0.5",
    'client.login(user, password)',
    "root:x:0:0:root:/root:/bin/bash",
    "admin: 10:30 standup",
    "postgres:5432",
    "pi: 3.14159265",
    "the password (see vault) is required",
    "API token (read-only) is stored in Vault",
    "the token now expires hourly",
    "password (optional): none",
    "password 2024 policy",
    "pin 4 digits",
    "password 12 characters",
    "set 1000 as the password length",
    "the password, which is stored hashed, is never logged",
    "the token, once issued, is valid for 24 hours",
    "the secret is 'practice'",
    "the secret is 'hard-work'",
]


@pytest.mark.parametrize(("raw", "expected"), PROSE_CREDENTIALS)
def test_credentials_named_in_prose_are_redacted(raw: str, expected: str) -> None:
    out, n = scrub_text(raw)
    assert out == expected
    assert n == expected.count("[REDACTED:")
    assert scrub_text(out) == (out, 0)


@pytest.mark.parametrize(("raw", "expected"), STRUCTURED_CREDENTIALS)
def test_credentials_in_structured_text_are_redacted(raw: str, expected: str) -> None:
    assert scrub_text(raw) == (expected, 1)
    assert scrub_text(expected) == (expected, 0)


@pytest.mark.parametrize(
    "name", ["password", "my wifi password", "the root password for db1", "API key",
             "DB_PASSWORD", "the token for prod", "client_secret", "pin code"],
)
@pytest.mark.parametrize(
    "joint", [" is ", ": ", " : ", " = ", " -> ", " => ", " is now ", " is still ",
              " changed to ", " is: ", " was "],
)
def test_every_name_and_joint_redacts_the_value(name: str, joint: str) -> None:
    value = "482913" if name == "pin code" else "Tr0ub4dor&3"
    out, n = scrub_text(f"{name}{joint}{value} ok")
    assert n == 1
    assert value not in out
    assert out.startswith(f"{name}{joint}[REDACTED:") and out.endswith("] ok")


@pytest.mark.parametrize("token", VENDOR_TOKENS)
def test_vendor_token_shapes_are_redacted(token: str) -> None:
    assert scrub_text(f"the key {token} is live") == ("the key [REDACTED:api_key] is live", 1)


@pytest.mark.parametrize("text", PROSE_ABOUT_CREDENTIALS)
def test_prose_about_credentials_is_untouched(text: str) -> None:
    assert scrub_text(text) == (text, 0)


def test_scrub_value_walks_keys_lists_and_tuples() -> None:
    value = {
        "note": "token=abc123XYZ",
        "nested": [{"password=hunter22": 1}, ("ok", "api_key=k99887766")],
        "n": 3,
        "flag": True,
        "none": None,
    }
    out, n = scrub_value(value)
    assert out == {
        "note": "token=[REDACTED:token]",
        "nested": [{"password=[REDACTED:password]": 1}, ("ok", "api_key=[REDACTED:api_key]")],
        "n": 3,
        "flag": True,
        "none": None,
    }
    assert n == 3


def test_a_field_named_for_a_credential_is_redacted_whole() -> None:
    value = {
        "password": "hunter2",
        "api_key": "3f6b2a9c8d7e4f1a0b5c6d7e8f9a0b1c",
        "nested": {"db_pass": "Tr0ub4dor&3", "pin": "4821", "PHPSESSID": "9a8b7c6d5e4f3a2b1c0d"},
        "passphrase": "correct horse battery staple",
        "user": "bob",
        "token_count": "5",
        "password_policy": "rotate every 90 days",
        "secret": "none",
        "refresh_token": "${API_TOKEN}",
        "sessionid": "abc",
        "session": "prod",
        "api_key_hint": "the model reads tokens",
        "auth": "the model reads tokens",
        "contains_secret": "api-key",
        "token": "abc",
    }
    out, n = scrub_value(value)
    assert out == {
        **value,
        "password": "[REDACTED:password]",
        "api_key": "[REDACTED:api_key]",
        "nested": {
            "db_pass": "[REDACTED:password]",
            "pin": "[REDACTED:password]",
            "PHPSESSID": "[REDACTED:token]",
        },
        "passphrase": "[REDACTED:password]",
    }
    assert n == 6
    assert scrub_value(out) == (out, 0)


def test_scrub_value_depth_is_bounded() -> None:
    deep: list = []
    cur = deep
    for _ in range(5):
        nxt: list = []
        cur.append(nxt)
        cur = nxt
    assert Scrubber(max_depth=6).scrub_value(deep) == (deep, 0)
    with pytest.raises(ValueError, match="nests deeper than 3 levels"):
        Scrubber(max_depth=3).scrub_value(deep, field="metadata")


def test_scrub_message_scrubs_any_object() -> None:
    assert scrub_message(ValueError("bad value 'password=hunter22'")) == (
        "bad value 'password=[REDACTED:password]'"
    )


def test_bad_scrubber_parameters_raise() -> None:
    with pytest.raises(ValueError, match="'window'"):
        Scrubber(window=0).scrub("x")
    with pytest.raises(ValueError, match="'plugin_budget'"):
        Scrubber(plugin_budget=-1).scrub("x")
    with pytest.raises(ValueError, match="no plugin 'Nope'"):
        Scrubber(plugins=(("Nope", "x", "api_key"),)).scrub("x")


@pytest.mark.parametrize(
    "unit",
    [
        "a",
        "=",
        "password ",
        "password=x ",
        "sk-",
        "AKIA",
        "ab\n",
        "%41",
        "mysql -u ",
        "-----BEGIN ",
        "pw: ",
        "password - ",
        "set the password to ",
        "<password>",
        "| a | b |",
        "log in as a with ",
    ],
)
def test_adversarial_inputs_finish_and_keep_their_shape(unit: str) -> None:
    # Linear-time rules: a 200 kB pathological input is scanned (timing lives in
    # bench/bench_scrub.py); the result must not depend on where the input is cut.
    text = (unit * (200_000 // len(unit) + 1))[:200_000]
    out, n = scrub_text(text)
    assert scrub_text(out)[1] == 0
    assert n <= len(text)


def test_spans_are_remembered_and_forgotten_when_a_parameter_changes() -> None:
    text = "token ghp_abcdefghijklmnopqrstuvwxyz0123456789 and AKIAIOSFODNN7EXAMPLE"
    s = Scrubber()
    first = s.spans(text)
    first.append((0, 1, "mutated"))  # the caller's list is a copy
    assert s.spans(text) == first[:-1]
    assert s.scrub(text)[1] == 2
    # Reassigning a parameter drops what was remembered: a pattern list without the GitHub
    # and AWS rules finds nothing in that text.
    s.patterns = ()
    s.plugins = ()
    s.entropy = False
    del s.patterns_
    assert s.spans(text) == []


def test_stores_without_a_scrubber_share_the_default() -> None:
    from memlab.memory.store import MemoryStore

    a, b = MemoryStore(), MemoryStore()
    assert a.scrubber is b.scrubber is default_scrubber()
