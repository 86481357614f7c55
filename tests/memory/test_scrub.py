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


# ----------------------------------------------------------------------------- red-team classes
# Each list holds (raw text, exact scrubbed text); LOOKALIKES holds texts of the same shapes
# that hold no credential. The examples are this file's own, not a red-team corpus.

# Passwords as positional arguments in commands, code, SQL and config files.
POSITIONAL_PASSWORDS = [
    (
        "htpasswd -bc /srv/auth/users alice Wint3r!Sun",
        "htpasswd -bc /srv/auth/users alice [REDACTED:password]",
    ),
    (
        "htpasswd -nbB ops N0rth#Star",
        "htpasswd -nbB ops [REDACTED:password]",
    ),
    (
        'htpasswd -Bbc .htpasswd admin "Qu0ted Pass!"',
        'htpasswd -Bbc .htpasswd admin "[REDACTED:password]"',
    ),
    (
        'conn = DriverManager.getConnection(jdbcUrl, "report", "R3port#Db9");',
        'conn = DriverManager.getConnection(jdbcUrl, "report", "[REDACTED:password]");',
    ),
    (
        'server.login(sender, "Gm4il-App-Pw9")',
        'server.login(sender, "[REDACTED:password]")',
    ),
    (
        'client = TwilioRestClient("AC0a1b2c3d4e5f60718293a4b5c6d7e8f9", "9f8e7d6c5b4a392817'
        '16151413121110")',
        'client = TwilioRestClient("[REDACTED:api_key]", "[REDACTED:token]")',
    ),
    (
        "client = Client(account_sid, 'f4c3b00c9d2e4a1b8c7d6e5f4a3b2c1d')",
        "client = Client(account_sid, '[REDACTED:token]')",
    ),
    (
        'cred = NetworkCredential("svc_backup", "B4ckup!Svc")',
        'cred = NetworkCredential("svc_backup", "[REDACTED:password]")',
    ),
    (
        "net use Z: \\\\nas01\\backup Sp4ce!Rock /user:CORP\\svc_backup",
        "net use Z: \\\\nas01\\backup [REDACTED:password] /user:CORP\\svc_backup",
    ),
    (
        'net use \\\\srv\\share /user:bob "Pa55 w0rd!"',
        'net use \\\\srv\\share /user:bob "[REDACTED:password]"',
    ),
    (
        "keytool -genkeypair -keystore app.p12 -storepass K3yst0re! -keypass K3yst0re!",
        "keytool -genkeypair -keystore app.p12 -storepass [REDACTED:password] -keypass [REDA"
        "CTED:password]",
    ),
    (
        "pscp -pw Putty#Pw77 report.pdf ops@10.0.0.7:/tmp",
        "pscp -pw [REDACTED:password] report.pdf ops@10.0.0.7:/tmp",
    ),
    (
        "CREATE USER 'etl'@'%' IDENTIFIED BY 'Etl#Load2024';",
        "CREATE USER 'etl'@'%' IDENTIFIED BY '[REDACTED:password]';",
    ),
    (
        "ALTER USER reporting IDENTIFIED BY R3port1ng_99;",
        "ALTER USER reporting IDENTIFIED BY [REDACTED:password];",
    ),
    (
        "SET PASSWORD FOR 'bob'@'%' = 'S3t!Pw99';",
        "SET PASSWORD FOR 'bob'@'%' = '[REDACTED:password]';",
    ),
    (
        "define('SMTP_PASSWORD', 'M4il!Relay');",
        "define('SMTP_PASSWORD', '[REDACTED:password]');",
    ),
    (
        "define( 'SECURE_AUTH_KEY', 'k$9Lm#2xQ!vB8zR4' );",
        "define( 'SECURE_AUTH_KEY', '[REDACTED:token]' );",
    ),
    (
        "smtp_pw = os.getenv('SMTP_PASS', 'Sm7p!Default')",
        "smtp_pw = os.getenv('SMTP_PASS', '[REDACTED:password]')",
    ),
    (
        'const pw = process.env.REDIS_PASSWORD || "R3dis#Fallback";',
        'const pw = process.env.REDIS_PASSWORD || "[REDACTED:password]";',
    ),
    (
        "SMTP_PASS ?? 'Sm7p#Fb22'",
        "SMTP_PASS ?? '[REDACTED:password]'",
    ),
    (
        'pw = DB_PASSWORD ?? "Fb#Pass99"',
        'pw = DB_PASSWORD ?? "[REDACTED:password]"',
    ),
    (
        "token = os.environ.get('CI_TOKEN') or 'ci9f8e7d6c5b4a3928aa'",
        "token = os.environ.get('CI_TOKEN') or '[REDACTED:token]'",
    ),
    (
        'curl -H "X-Token: ${API_TOKEN:-tok9f8e7d6c5b4a3928aa}" https://x',
        'curl -H "X-Token: ${API_TOKEN:[REDACTED:token]}" https://x',
    ),
    (
        'echo "Hub#Push2024" | docker login ghcr.io -u bot --password-stdin',
        'echo "[REDACTED:password]" | docker login ghcr.io -u bot --password-stdin',
    ),
    (
        "printf '%s' 'Pr1ntf#Pw' | podman login -u me --password-stdin quay.io",
        "printf '%s' '[REDACTED:password]' | podman login -u me --password-stdin quay.io",
    ),
    (
        "echo 'Adm1n!Sudo' | sudo -S systemctl restart nginx",
        "echo '[REDACTED:password]' | sudo -S systemctl restart nginx",
    ),
    (
        "echo 'deploy:Ch4ngeMe!' | chpasswd",
        "echo 'deploy:[REDACTED:password]' | chpasswd",
    ),
    (
        "pg.internal.example:6432:analytics:reader:Re4der!pg",
        "pg.internal.example:6432:analytics:reader:[REDACTED:password]",
    ),
    (
        "*:*:*:replicator:Repl1cate#Now",
        "*:*:*:replicator:[REDACTED:password]",
    ),
    (
        '$sec = ConvertTo-SecureString -String "Sv3Acct!Pw" -AsPlainText -Force',
        '$sec = ConvertTo-SecureString -String "[REDACTED:password]" -AsPlainText -Force',
    ),
    (
        "$cred = ConvertTo-SecureString 'Ps!Plain42' -AsPlainText -Force",
        "$cred = ConvertTo-SecureString '[REDACTED:password]' -AsPlainText -Force",
    ),
]

# Passwords named in other languages: linking verbs, qualifiers, inflected names, dashes.
FOREIGN = [
    (
        "La password del router è Gatto!Nero7",
        "La password del router è [REDACTED:password]",
    ),
    (
        "Mi password es Tango#Sur8",
        "Mi password es [REDACTED:password]",
    ),
    (
        "Het wachtwoord van de wifi is Tulp#2023",
        "Het wachtwoord van de wifi is [REDACTED:password]",
    ),
    (
        "Hasło do poczty: Sl0neczko!",
        "Hasło do poczty: [REDACTED:password]",
    ),
    (
        "Nowe hasło to Wisla#2025",
        "Nowe hasło to [REDACTED:password]",
    ),
    (
        "Wi-Fi şifresi: Kahve2024!",
        "Wi-Fi şifresi: [REDACTED:password]",
    ),
    (
        "şifrem Ankara06!",
        "şifrem [REDACTED:password]",
    ),
    (
        "Lösenordet till routern är Sommar#2024",
        "Lösenordet till routern är [REDACTED:password]",
    ),
    (
        "Ο κωδικός πρόσβασης είναι Thalassa7!",
        "Ο κωδικός πρόσβασης είναι [REDACTED:password]",
    ),
    (
        "كلمة السر: Najma2025!",
        "كلمة السر: [REDACTED:password]",
    ),
    (
        "Kata sandi wifi adalah Merdeka45!",
        "Kata sandi wifi adalah [REDACTED:password]",
    ),
    (
        "Mật khẩu wifi là Pho2024!",
        "Mật khẩu wifi là [REDACTED:password]",
    ),
    (
        "口令\uff1aTiger#2024",
        "口令\uff1a[REDACTED:password]",
    ),
    (
        "路由器密码为Xiong8899!",
        "路由器密码为[REDACTED:password]",
    ),
    (
        "와이파이 비밀번호는 Bada2024! 입니다",
        "와이파이 비밀번호는 [REDACTED:password] 입니다",
    ),
    (
        "A palavra-passe é Lisboa#99",
        "A palavra-passe é [REDACTED:password]",
    ),
    (
        "Das Kennwort für den Server lautet Berg!Tal42",
        "Das Kennwort für den Server lautet [REDACTED:password]",
    ),
    (
        "Die Änderung des Passworts: Regen#2025",
        "Die Änderung des Passworts: [REDACTED:password]",
    ),
    (
        "mdp du wifi : Fromage#42",
        "mdp du wifi : [REDACTED:password]",
    ),
    (
        "Mon mot de passe c'est Soleil#75",
        "Mon mot de passe c'est [REDACTED:password]",
    ),
    (
        "Le mot de passe de la box est Bretagne!29",
        "Le mot de passe de la box est [REDACTED:password]",
    ),
    (
        "Contraseña de la red: Playa#2024",
        "Contraseña de la red: [REDACTED:password]",
    ),
    (
        "La clave del portátil es Luna#Llena7",
        "La clave del portátil es [REDACTED:password]",
    ),
    (
        "пароль от почты — Zima2024!",
        "пароль от почты — [REDACTED:password]",
    ),
    (
        "heslo k wifi je Praha#2024",
        "heslo k wifi je [REDACTED:password]",
    ),
    (
        "La clé wifi est 8812-4471-9930-2215",
        "La clé wifi est [REDACTED:password]",
    ),
    (
        "Пароль — это Qwerty#1x",
        "Пароль — это [REDACTED:password]",
    ),
]

# Payment card numbers (Luhn, a network's prefix and length, the usual groups) and CVVs.
CARDS = [
    (
        "Card on file: 4242 4242 4242 4242 exp 12/28 CVC 123",
        "Card on file: [REDACTED:card_number] exp 12/28 CVC [REDACTED:password]",
    ),
    (
        "amex 3714 496353 98431, cid 5521",
        "amex [REDACTED:card_number], cid [REDACTED:password]",
    ),
    (
        "Discover 6011-1111-1111-1117",
        "Discover [REDACTED:card_number]",
    ),
    (
        "visa 4012888888881881 expires 03/27",
        "visa [REDACTED:card_number] expires 03/27",
    ),
    (
        "JCB 3530111333300000, CVV2: 417",
        "JCB [REDACTED:card_number], CVV2: [REDACTED:password]",
    ),
    (
        "card security code: 907",
        "card security code: [REDACTED:password]",
    ),
]

# Format characters inside a token, and a token spelt with a space between its characters:
# the whole token goes, invisible characters included.
INVISIBLE = [
    (
        "token xoxb-2048\u200b-1234567890-AbCdEfGhIjKlMnOpQrStUvWx ok",
        "token [REDACTED:api_key] ok",
    ),
    (
        "key AKIA\u2060IOSFODNN7EXAMPLE end",
        "key [REDACTED:api_key] end",
    ),
    (
        "hf_Ab\u00adCdEfGhIjKlMnOpQrStUvWxYz012345",
        "[REDACTED:api_key]",
    ),
    (
        "sk-proj-Ab12\ufeffCd34Ef56Gh78Ij90Kl12",
        "[REDACTED:api_key]",
    ),
    (
        "pat: g h p _ a B 3 d E 5 g H 7 j K 9 m N 1 p Q 3 s T 5 v W 7 y Z 9 b C 1 d E f G h "
        "I",
        "pat: [REDACTED:api_key]",
    ),
    (
        "A K I A I O S F O D N N 7 E X A M P L E",
        "[REDACTED:api_key]",
    ),
]

# English prose shapes: the value first, a dash, a question, parentheses, an adverb.
ENGLISH = [
    (
        "I used 'Blue#Heron88' as the password for the NAS",
        "I used '[REDACTED:password]' as the password for the NAS",
    ),
    (
        "Xylo!Phone42 is the password",
        "[REDACTED:password] is the password",
    ),
    (
        "password–Ember#19",
        "password–[REDACTED:password]",
    ),
    (
        "the new passcode is 551902",
        "the new passcode is [REDACTED:password]",
    ),
    (
        "my bank password (Quartz!2024) expires soon",
        "my bank password ([REDACTED:password]) expires soon",
    ),
    (
        "The guest wifi password? It's Lemon#Tree9.",
        "The guest wifi password? It's [REDACTED:password].",
    ),
    (
        "Same password everywhere: Falcon#77",
        "Same password everywhere: [REDACTED:password]",
    ),
    (
        "the pass is Mango#Tango5",
        "the pass is [REDACTED:password]",
    ),
]

# A credential's name set off by Markdown or HTML, HTML cells, a Markdown table column.
MARKUP = [
    (
        "**Passphrase:** Rusty-Anchor-42",
        "**Passphrase:** [REDACTED:password]",
    ),
    (
        "***Password***: Tr1ple#Star",
        "***Password***: [REDACTED:password]",
    ),
    (
        "__Token__ - tok9f8e7d6c5b4a3928",
        "__Token__ - [REDACTED:token]",
    ),
    (
        "`password`: Vault!Door9",
        "`password`: [REDACTED:password]",
    ),
    (
        "**API key:** `3f6b2a9c8d7e4f1a0b5c6d7e8f9a0b1c`",
        "**API key:** `[REDACTED:token]`",
    ),
    (
        "<strong>Password</strong>: Sunrise#12",
        "<strong>Password</strong>: [REDACTED:password]",
    ),
    (
        "<b>Password:</b> Gl4cier!",
        "<b>Password:</b> [REDACTED:password]",
    ),
    (
        "<th>API key</th><td>3f6b2a9c8d7e4f1a0b5c6d7e8f9a0b1c</td>",
        "<th>API key</th><td>[REDACTED:api_key]</td>",
    ),
    (
        "<dt>Password</dt>\n<dd>Harbor#Lights3</dd>",
        "<dt>Password</dt>\n<dd>[REDACTED:password]</dd>",
    ),
    (
        "| host | login | pass |\n|:---|:---|---:|\n| ftp1 | bob | Ftp!One1 |\n| ftp2 | amy "
        "| Ftp!Two2 |",
        "| host | login | pass |\n|:---|:---|---:|\n| ftp1 | bob | [REDACTED:password] |\n| "
        "ftp2 | amy | [REDACTED:password] |",
    ),
    (
        "service | password\n--- | ---\ncache | `Redis#Pw5`",
        "service | password\n--- | ---\ncache | `[REDACTED:password]`",
    ),
]

# Recovery codes (one per line too), TOTP seeds (grouped in fours too).
CODES_2FA = [
    (
        "Recovery codes:\n- 8f2k1-a9d3m\n- 4n7p2-x1c8v\n- 2b9q4-k7w3z\nKeep them safe.",
        "Recovery codes:\n- [REDACTED:password]\nKeep them safe.",
    ),
    (
        "backup codes: 1234 5678\n9012 3456",
        "backup codes: [REDACTED:password]",
    ),
    (
        "Backup codes (GitHub): 1234-5678 9012-3456",
        "Backup codes (GitHub): [REDACTED:password]",
    ),
    (
        "TOTP seed: KRSX G5CT MNXW S3TU",
        "TOTP seed: [REDACTED:token]",
    ),
    (
        "authenticator key = JBSWY3DPEHPK3PXP",
        "authenticator key = [REDACTED:token]",
    ),
    (
        "TOTP secret (base32): KRSXG5CTMNXWS3TUPQ4A",
        "TOTP secret (base32): [REDACTED:token]",
    ),
    (
        "recovery code: a1b2-c3d4-e5f6-g7h8",
        "recovery code: [REDACTED:password]",
    ),
]

# Obfuscated names: zero-width characters, homoglyphs, fullwidth letters, spaced, split or
# leetspeak spellings.
OBFUSCATED = [
    (
        "pas\u200bsword=Inv1sible!",
        "pas\u200bsword=[REDACTED:password]",
    ),
    (
        "PASS WORD: Tr1ck!y99",
        "PASS WORD: [REDACTED:password]",
    ),
    (
        "p@ssw0rd: Le3tSp34k!",
        "p@ssw0rd: [REDACTED:password]",
    ),
    (
        "p.a.s.s.w.o.r.d = Dotty#Pw1",
        "p.a.s.s.w.o.r.d = [REDACTED:password]",
    ),
    (
        "p\u0430sscode: 7391",
        "p\u0430sscode: [REDACTED:password]",
    ),
    (
        "\u0440\u0430\u0455\u0455\u051d\u043e\u0433\u0501: Abc123!x",
        "\u0440\u0430\u0455\u0455\u051d\u043e\u0433\u0501: [REDACTED:password]",
    ),
    (
        "\uff30\uff21\uff33\uff33\uff37\uff2f\uff32\uff24\uff1d\uff37\uff49\uff44\uff45"
        "\uff19\uff19\uff01",
        "\uff30\uff21\uff33\uff33\uff37\uff2f\uff32\uff24\uff1d[REDACTED:password]",
    ),
    (
        "pwd\u200b=\u200bZw1dth!Val",
        "pwd\u200b=\u200b[REDACTED:password]",
    ),
]

# PUKs, door / gate / alarm / keypad / access codes, safe combinations, numeric Wi-Fi keys.
NUMERIC_CODES = [
    (
        "SIM PUK: 40917263",
        "SIM PUK: [REDACTED:password]",
    ),
    (
        "garage door code is 4321",
        "garage door code is [REDACTED:password]",
    ),
    (
        "the safe combo is 08-15-42",
        "the safe combo is [REDACTED:password]",
    ),
    (
        "the combination to the safe is 36-24-36",
        "the combination to the safe is [REDACTED:password]",
    ),
    (
        "alarm code: 9 8 7 6",
        "alarm code: [REDACTED:password]",
    ),
    (
        "gate code #4417",
        "gate code #[REDACTED:password]",
    ),
    (
        "code d'accès : 4417",
        "code d'accès : [REDACTED:password]",
    ),
    (
        "Le code de la porte est 1984A",
        "Le code de la porte est [REDACTED:password]",
    ),
    (
        "Türcode: 4821",
        "Türcode: [REDACTED:password]",
    ),
    (
        "código de acceso: 7788",
        "código de acceso: [REDACTED:password]",
    ),
    (
        "access code for the gym: 552903",
        "access code for the gym: [REDACTED:password]",
    ),
    (
        "WPA key: 1234-5678-9012-3456",
        "WPA key: [REDACTED:token]",
    ),
]

# Recovery phrases after "is:" or an aside, numbered word lists, a split "pass phrase".
SEED_PHRASES = [
    (
        "backup phrase: apple river cloud stone table green music ocean tiger lemon paper gl"
        "ass",
        "backup phrase: [REDACTED:seed_phrase]",
    ),
    (
        "seed phrase (12 words): apple river cloud stone table green music ocean tiger lemon"
        " paper glass",
        "seed phrase (12 words): [REDACTED:seed_phrase]",
    ),
    (
        "My recovery phrase is: orbit maple crane velvet dune ember frost grape harbor ivory"
        " jungle koala",
        "My recovery phrase is: [REDACTED:seed_phrase]",
    ),
    (
        "seed words:\n1) orbit\n2) maple\n3) crane\n4) velvet\n5) dune\n6) ember\n7) frost\n"
        "8) grape\n9) harbor\n10) ivory\n11) jungle\n12) koala",
        "seed words:\n[REDACTED:seed_phrase]",
    ),
    (
        "pass-phrase: amber river cloud stone",
        "pass-phrase: [REDACTED:password]",
    ),
]

# wpa_supplicant psk and Wi-Fi QR codes.
WIFI = [
    (
        'network={\n    ssid="Home"\n    psk="Garden#Gnome7"\n}',
        'network={\n    ssid="Home"\n    psk="[REDACTED:password]"\n}',
    ),
    (
        "WIFI:S:Office;T:WPA;P:Desk\\;Lamp42;;",
        "WIFI:S:Office;T:WPA;P:[REDACTED:password];;",
    ),
    (
        'WIFI:S:"My Net";T:WPA;P:"Pa;ss#99";;',
        'WIFI:S:"My Net";T:WPA;P:"[REDACTED:password]";;',
    ),
    (
        "wpa_psk=9f8e7d6c5b4a39281716151413121110",
        "wpa_psk=[REDACTED:password]",
    ),
]

# Rails secret_key_base and other *_key_base / *_secret_key names.
KEY_BASE = [
    (
        "secret_key_base: 8f7e6d5c4b3a29181716151413121110abcdef0123456789",
        "secret_key_base: [REDACTED:token]",
    ),
    (
        "export RAILS_SECRET_KEY_BASE=8f7e6d5c4b3a29181716151413121110abcdef",
        "export RAILS_SECRET_KEY_BASE=[REDACTED:token]",
    ),
    (
        "devise_secret_key = 'a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4'",
        "devise_secret_key = '[REDACTED:token]'",
    ),
]

# A redaction covers the secret only: the next line's key and text stay.
NEXT_LINE = [
    (
        "db.password=Pg#Prop1\ndb.user=app\ndb.pool=10",
        "db.password=[REDACTED:password]\ndb.user=app\ndb.pool=10",
    ),
    (
        "nexusPassword=Nx#Upload9\nnexusUsername=ci",
        "nexusPassword=[REDACTED:password]\nnexusUsername=ci",
    ),
    (
        "[prod]\naws_secret_access_key = Zq3x9Lmx9Lmx9Lmx9Lmx9Lmx9Lmx9Lmx9Lmx9LmW\noutput = "
        "json",
        "[prod]\naws_secret_access_key = [REDACTED:token]\noutput = json",
    ),
    (
        "my token: ghp_aB3dE5gH7jK9mN1pQ3sT\nuT5vW7yZ9bC1dE3fG5hI\nthat is all",
        "my token: [REDACTED:api_key]\nthat is all",
    ),
    (
        "--api-token\nHost: https://example.org",
        "--api-token\nHost: https://example.org",
    ),
    (
        '<add key="BillingApiKey" value="3f6b2a9c8d7e4f1a0b5c6d7e8f9a0b1c" />',
        '<add key="BillingApiKey" value="[REDACTED:api_key]" />',
    ),
]

# Look-alikes of every class above: code that refers to a secret, public keys, pointers to
# a vault, prose about codes and cards, other languages' prose without a password.
LOOKALIKES = [
    "htpasswd -c /etc/apache2/.htpasswd alice",
    "htpasswd -B -C 12 -c users.htpasswd bob",
    "conn = DriverManager.getConnection(url, user, password);",
    'db.connect("reports", "readonly")',
    'p = Point("north", "south")',
    'h = hashlib.new("sha256", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852'
    'b855")',
    "net use Z: \\\\nas01\\backup /user:CORP\\svc_backup *",
    "net use Z: /delete",
    "keytool -list -keystore app.jks -storepass:env KS_PASS",
    "use the -password option to pass it",
    "openssl pkcs12 -export -in a.pem -passout env:P12_PASS",
    "CREATE USER app IDENTIFIED BY :new_password",
    "CREATE USER ops IDENTIFIED EXTERNALLY;",
    "The user is identified by email",
    "A task attempt is identified by (task_id bytes, attempt number).",
    "rows are identified by `row_id`",
    "revision identified by '%s'",
    "the file is identified by 'name'",
    '# (e.g. "a/../../etc/passwd" or "a/../file.txt") is rejected',
    "code_obj = compile('pass', 'tests/dummy_module.py', 'exec')",
    "password = DEFAULT_PASSWORD",
    '"Cryptography_HAS_PSK": cryptography_has_psk,',
    '__all__ = ("BasicAuth", "ChainMapProxy", "ETag", "reify")',
    'PASSWORD_VARIABLES = ("MYSQL_PASSWORD", "MYSQL_PWD")',
    'return extract_field_from_www_auth(response, "resource_metadata")',
    ".. _`RFC6749#Token`: https://tools.ietf.org/html/rfc6749#section-3.2",
    "define('DB_NAME', 'wordpress');",
    "define('DB_PASSWORD', getenv('DB_PASSWORD'));",
    "label('password', 'Password:')",
    "t('password', 'Mot de passe')",
    "const port = process.env.PORT || '3000'",
    "host=${DB_HOST:-localhost}",
    "echo $CR_PAT | docker login ghcr.io -u bot --password-stdin",
    'echo "hello world" | wc -c',
    "fe80:0:0:0:1",
    "backup.example.com:22:/srv:rsync:daily",
    "ConvertTo-SecureString $plain -AsPlainText -Force",
    'mysql --password "$DB_PASSWORD" -h db',
    "mysql -u root -p$MYSQL_PWD",
    "Das Passwort ist seit gestern ungültig.",
    "La password è troppo corta.",
    "Le mot de passe du wifi est affiché sur la box.",
    "Le code wifi est affiché sous la box",
    "Şifre: gerekli",
    "Mật khẩu là bắt buộc.",
    "Het wachtwoord is te kort",
    "Passwort 2024 ändern",
    "kennwort vergessen",
    "La clave del éxito es la constancia",
    "Our password manager is 1Password",
    "change your password on GitHub2 today",
    "The password policy is v2",
    "order 4242 4242 4242 4241",
    "IBAN DE89 3704 0044 0532 0130 00",
    "Mon IBAN : FR14 2004 1010 0505 0001 3M02 606",
    "phone 4155550132",
    "timestamp 1710512525123",
    "seeds = [576033618403180168, 308115465002673650]",
    "g = 4828147466240000*t**12",
    "rng = np.random.default_rng(6763691329830218206)",
    "mpf((1, 2386907802506363, -51, 52))",
    "Sendungsnummer 4200 1234 5678 9012 3456 78",
    "CVV codes are 3 digits long",
    "Luhn test: 79927398713",
    "a b c d e f g h i j k l m n o p q r s t",
    "\U0001f469\u200d\U0001f4bb deployed the app",
    "Donau\u00addampf\u00adschiff\u00adfahrt",
    "\uff54\uff48\uff45\u3000\uff45\uff4e\uff44",
    "Пароль должен быть длиннее двенадцати символов.",
    "What's the admin password? Ask IT.",
    "use SSO as the password alternative",
    "the pass is closed for winter",
    "the mountain pass is Route 66",
    "password—see the wiki",
    "the passcode is 4 digits",
    "this is my password manager",
    "Password (optional)",
    "check_password (user_input)",
    "**Password:** required",
    "<b>Password:</b> see the wiki",
    "<td>Password</td><td>Min. 12 characters</td>",
    "| service | password |\n|---|---|\n| db | (in vault) |",
    "| name | token count |\n|---|---|\n| run1 | 1200 |",
    "Recovery codes are stored in Bitwarden",
    "2FA secret: stored in the vault",
    "TOTP key rotation is quarterly",
    "backup codes: none",
    "pass word lists around the team",
    "p4ss the ball",
    "the code is on GitHub",
    "combination of 3 factors",
    "combo 1-2-3 knocks him out",
    "the access code 2024 campaign",
    "access code expires in 30 minutes",
    "PUK required after 3 wrong PINs",
    "Pin it to version 2024.1",
    "HTTP status code 500",
    "Meeting at 14:00, code review after",
    "recovery phrase is stored offline",
    "seed words are 12 to 24 words long",
    "WIFI:S:Guest;T:nopass;;",
    "psk_mode=auto",
    'secret_key_base: <%= ENV["SECRET_KEY_BASE"] %>',
    "secret_key_base = Rails.application.credentials.secret_key_base",
    'config.secret_key_base = ENV["SECRET_KEY_BASE"]',
    "const secret = config.jwtSecret;",
    "token = request.headers['X-Token']",
    'password: "{{ vault_db_password }}"',
    "PASSWORD=$(cat /run/secrets/db)",
    'password=os.getenv("DB_PASSWORD")',
    "api_key = settings.OPENAI_API_KEY",
    '"password": req.body.password',
    "if token == expected_token:",
    "def login(password: Optional[str] = None):",
    "password: boolean",
    "curl -u $API_USER:$API_PASS https://api.example.org",
    "https://deploy:${DEPLOY_TOKEN}@git.example.org/repo.git",
    "Authorization: Bearer ${ACCESS_TOKEN}",
    "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBEmKSENjQEezOmx"
    "kZMy7opKgwFB9nkt5YRrYMjNuG5N87uRgg6CLrbo5wAdT/y6v0mKV0U2w0WZ2YB/++Tpockg= root@host",
    "github.com ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABgQC7vbqajDhA9pLLmQ3Gs0fJk2M6ZJ3kqP4S7Yc1"
    "mWn9u2xH",
    "recipient: age1lggyhqrw2nlhcxprm67z43rta597azn8gknawjehu9d9dl0jq3yqqvfafg",
    "STRIPE_PUBLISHABLE_KEY=pk_test_TYooMQauvdEDq54NiTphI7jx",
    "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE"
    "=\n-----END PUBLIC KEY-----",
    "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ3lJ6gHcAqP2oRk8zD0x5tYwWQ8wCgYIKoZIzj"
    "0EAwIw\nEjEQMA4GA1UEAwwHdGVzdC1jYTAeFw0yNDAxMDEwMDAwMDBaFw0zNDAxMDEwMDAw\n-----END CERT"
    "IFICATE-----",
    "Password: see the Bitwarden entry 'Prod DB'",
    "Password: stored in 1Password under 'Prod DB'",
    "token: in the vault",
    "API key: ask ops, it's in the vault",
]


@pytest.mark.parametrize(
    ("raw", "expected"),
    POSITIONAL_PASSWORDS
    + FOREIGN
    + CARDS
    + INVISIBLE
    + ENGLISH
    + MARKUP
    + CODES_2FA
    + OBFUSCATED
    + NUMERIC_CODES
    + SEED_PHRASES
    + WIFI
    + KEY_BASE
    + NEXT_LINE,
)
def test_red_team_classes_are_redacted_exactly(raw: str, expected: str) -> None:
    out, n = scrub_text(raw)
    assert out == expected
    assert n == expected.count("[REDACTED:")
    assert scrub_text(out) == (out, 0)


@pytest.mark.parametrize("text", LOOKALIKES)
def test_red_team_lookalikes_are_untouched(text: str) -> None:
    assert scrub_text(text) == (text, 0)


def test_card_numbers_need_luhn_and_a_card_layout() -> None:
    valid = "4242 4242 4242 4242"
    assert scrub_text(f"card {valid}") == ("card [REDACTED:card_number]", 1)
    assert scrub_text("card 4242 4242 4242 4241") == ("card 4242 4242 4242 4241", 0)  # Luhn
    assert scrub_text("card 42424 24242 42424 242") == ("card 42424 24242 42424 242", 0)
    assert scrub_text("card 4242-4242 4242-4242") == ("card 4242-4242 4242-4242", 0)
    assert scrub_text("id 1242424242424242") == ("id 1242424242424242", 0)  # no network


def test_an_invisible_character_inside_a_token_is_redacted_with_it() -> None:
    token = "ghp_" + "aB3dE5gH7jK9mN1pQ3sT" + "\u200b" + "uT5vW7yZ9bC1dE3fG5hI"
    out, n = scrub_text(f"use {token} now")
    assert (out, n) == ("use [REDACTED:api_key] now", 1)
    assert "\u200b" not in out


def test_public_material_is_kept() -> None:
    key = "AAAAC3NzaC1lZDI1NTE5AAAAIGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE"
    for text in (
        f"ssh-ed25519 {key} dana@workstation",
        f"deploy.example.org ssh-ed25519 {key}",
        "pk_live_51Nq8Y2AbCdEfGhIjKlMnOpQrSt is our publishable key",
        "age1lggyhqrw2nlhcxprm67z43rta597azn8gknawjehu9d9dl0jq3yqqvfafg",
    ):
        assert scrub_text(text) == (text, 0)
    # a private key next to a public one still goes
    secret = "AGE-SECRET-KEY-1QQPQGQNJQW3XN4FPHMGNZ6FC5QUUZZ8AYWA2GQ2HNV7EWZ6Y2K5SJV9N5D"
    text = f"ssh-ed25519 {key}\nprivate: {secret}"
    assert scrub_text(text) == (f"ssh-ed25519 {key}\nprivate: [REDACTED:api_key]", 1)


def test_metadata_numbers_codes_and_named_values_are_redacted() -> None:
    value = {
        "PIN": 1234,
        "wifi_password": 20240101,
        "gate_code": "7391#",
        "cvv": 907,
        "kennwort": "Berg!Tal42",
        "contraseña": "Playa#2024",
        "env": [
            {"Name": "DB_PASSWORD", "Value": "S3cure!Db"},
            {"name": "timeout", "value": "30"},
            {"name": "password", "value": ""},
        ],
        "stack": [{"ParameterKey": "MasterUserPassword", "ParameterValue": "Rds#Master9"}],
        "pin_length": 4,
        "max_tokens": 2048,
        "passcode_required": True,
        "password_policy": {"min_length": 12},
    }
    out, n = scrub_value(value)
    assert out == {
        **value,
        "PIN": "[REDACTED:password]",
        "wifi_password": "[REDACTED:password]",
        "gate_code": "[REDACTED:password]",
        "cvv": "[REDACTED:password]",
        "kennwort": "[REDACTED:password]",
        "contraseña": "[REDACTED:password]",
        "env": [
            {"Name": "DB_PASSWORD", "Value": "[REDACTED:password]"},
            {"name": "timeout", "value": "30"},
            {"name": "password", "value": ""},
        ],
        "stack": [
            {"ParameterKey": "MasterUserPassword", "ParameterValue": "[REDACTED:password]"}
        ],
    }
    assert n == 8
    assert scrub_value(out) == (out, 0)


def test_format_character_class_is_unicode_category_cf() -> None:
    import sys
    import unicodedata

    from memlab.memory.scrub import _CF_RE

    cf = [chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf"]
    assert [c for c in cf if not _CF_RE.match(c)] == []
    assert _CF_RE.match("a") is None and _CF_RE.match(" ") is None


@pytest.mark.parametrize(
    "unit",
    [
        "htpasswd -b a b c ",
        "net use \\\\a\\b x ",
        "-storepass ",
        "identified by x ",
        "echo x | sudo -S ",
        "a.b:1:c:d:e\n",
        "('password', 'x",
        "|| 'x' ",
        "4111 ",
        "door code ",
        "x as the password ",
        "password (x",
        "**password:** ",
        "| password |\n|---|\n",
        "2fa secret: ABCD ",
        "wifi:t:wpa;",
        "passwort für ",
        "пароль от ",
        "p a s s ",
        "p4ssw0rd ",
        "\u200b",
        "p\u0430ss",
        "\uff50",
        "a ",
        "recovery codes: ab12\n",
        "seed words - 1. abc ",
        "ssh-rsa AAAA",
        "-----BEGIN CERTIFICATE-----",
        "key_base = ",
    ],
)
def test_new_triggers_finish_and_stay_idempotent(unit: str) -> None:
    # Linear-time rules (timing: bench/bench_scrub.py): a 200 kB input of each new trigger
    # is scanned and scrubbing it again changes nothing.
    text = (unit * (200_000 // len(unit) + 1))[:200_000]
    out, n = scrub_text(text)
    assert scrub_text(out)[1] == 0
    assert n <= len(text)


# Written forms of credentials outside the shapes above: a token glued to its API path, URL
# passwords with "?" or "#", "account / password" pairs, elided prepositions after a
# password's name, recovery keys, quoted or qualified seed phrases, TOTP seeds in code and
# more names of a key ("admin key", "write key").
WRITTEN_FORMS = [
    (
        "GET https://api.telegram.org/bot7712345678:AAHf3kLmNpQrStUvWxYz0123456789abcde"
        "/getUpdates",
        "GET https://api.telegram.org/bot[REDACTED:api_key]/getUpdates",
    ),
    (
        "mongodb+srv://admin:pa?ss#W0rd!@db.example.net/app",
        "mongodb+srv://admin:[REDACTED:password]@db.example.net/app",
    ),
    (
        "DATABASE_URL=postgresql+psycopg2://etl:Qm%7x?Lp2@warehouse/dw",
        "DATABASE_URL=postgresql+psycopg2://etl:[REDACTED:password]@warehouse/dw",
    ),
    ("Router admin: admin / Qz7rLmx2Vb", "Router admin: admin / [REDACTED:password]"),
    (
        "NAS: root / Tr0ub4dor&3 (ssh on port 22)",
        "NAS: root / [REDACTED:password] (ssh on port 22)",
    ),
    (
        "La password dell'account admin è Viola2024!",
        "La password dell'account admin è [REDACTED:password]",
    ),
    (
        "la password d’accesso è Mare7Blu",
        "la password d’accesso è [REDACTED:password]",
    ),
    (
        "Le mot de passe de l'administrateur est Soleil#77",
        "Le mot de passe de l'administrateur est [REDACTED:password]",
    ),
    (
        "iCloud recovery key 4F7K-9QXM-2B8T-ZR6W-H3JD-PV5N-8CEA",
        "iCloud recovery key [REDACTED:password]",
    ),
    (
        "recovery key ZP4Q-7M2K-XW9T-3BRN-HV6C-D8LF for the laptop",
        "recovery key [REDACTED:password] for the laptop",
    ),
    (
        'My secret recovery phrase is "ocean maple rocket timber velvet anchor silver quartz'
        ' harbor meadow violet candle"',
        'My secret recovery phrase is "[REDACTED:seed_phrase]"',
    ),
    (
        "mnemonic for the staging wallet:\nocean maple rocket timber velvet anchor silver"
        " quartz harbor meadow violet candle",
        "mnemonic for the staging wallet:\n[REDACTED:seed_phrase]",
    ),
    (
        "totp = pyotp.TOTP('JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP')",
        "totp = pyotp.TOTP('[REDACTED:token]')",
    ),
    (
        'code = pyotp.HOTP("GEZDGNBVGY3TQOJQ").at(0)',
        'code = pyotp.HOTP("[REDACTED:token]").at(0)',
    ),
    (
        "new OTPAuth.TOTP({ secret: OTPAuth.Secret.fromBase32('KRSXG5CTMVRXEZLU') })",
        "new OTPAuth.TOTP({ secret: OTPAuth.Secret.fromBase32('[REDACTED:token]') })",
    ),
    (
        "Algolia admin key 9f3b2c1d8e7a6f5b4c3d2e1f0a9b8c7d",
        "Algolia admin key [REDACTED:token]",
    ),
    ("Segment write key Xy7KpQ2mNv8RtL4sWz9B", "Segment write key [REDACTED:token]"),
    (
        "Meilisearch root key 6f2Kx9Qm4TzR8vLp3NwB7yHc, search only",
        "Meilisearch root key [REDACTED:token], search only",
    ),
]

WRITTEN_FALSE_POSITIVES = [
    # a writer's own redaction marker, an inline image or font, an OpenSSH public key's type
    "Authorization: Bearer [REDACTED]",
    "mysql --password [hidden] -u root",
    "curl -u admin:[removed] https://ci.example.org/api/json",
    "avatar: data:image/png;base64,iVBORw0KGgpzpY83SfpMKnwww9E6J3lqn5otL5doNWBQZ41G0pq7qoibS0gd"
    "xM2AO6N0IptVlIOQtmYu0Ryco3XP+CQ=",
    "@font-face { src: url(data:font/woff2;charset=utf-8;base64,d09GMgABAAAAAAJ8qT5xR2mKz9Lp"
    "W3vB7nQ4cY1sE8hJ6uD0fG2kA5tXoM9rZwC3bV7yN1eH4jP8gL) }",
    "public key: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE"
    " dana@workstation",
    "host key: ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBEmKSENjQE"
    "zOmxkZMy7opKgwFB9nkt5YRrYMjNuG5N87uRgg6CLrbo5wAdT/y6v0mKV0U2w0WZ2YB/++Tpockg= root@host",
]

# Near misses of the forms above, which the rules for them must leave alone.
WRITTEN_LOOKALIKES = [
    "see http://intranet:8080?user=bob@example.org",
    "http://wiki:8090#top@anchor",
    "open admin/Users2 in the console",
    "admin / settings / users",
    "La password dell'utente è obbligatoria.",
    "Le mot de passe de l'utilisateur est expiré.",
    "The recovery key is stored in Intune.",
    "recovery keys are printed in the emergency kit",
    "mnemonic for the planets: My Very Educated Mother Just Served Us Nachos",
    "pyotp.TOTP(secret).now()",
    "totp('thisisaverylongword')",
    "cache key 3f9a2c1b7e4d5a6b8c9d0e1f2a3b4c5d",
    "the admin key rotation is quarterly",
]


@pytest.mark.parametrize(("raw", "expected"), WRITTEN_FORMS)
def test_written_forms_are_redacted_exactly(raw: str, expected: str) -> None:
    out, n = scrub_text(raw)
    assert out == expected
    assert n == expected.count("[REDACTED:")
    assert scrub_text(out) == (out, 0)


@pytest.mark.parametrize("text", WRITTEN_FALSE_POSITIVES + WRITTEN_LOOKALIKES)
def test_written_lookalikes_are_untouched(text: str) -> None:
    assert scrub_text(text) == (text, 0)


def test_a_secret_next_to_a_data_uri_is_still_redacted() -> None:
    image = (
        "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QD"
        "wADhgGAWjR9awAAAABJRU5ErkJggg=="
    )
    raw = f"icon {image} token ghp_Xk2mP9vR4tY8wZ3bN6cD1eF5gH7jK9mN1pQ3"
    assert scrub_text(raw) == (f"icon {image} token [REDACTED:api_key]", 1)


@pytest.mark.parametrize(
    "unit",
    [
        "bot1234567890:aa",
        "://a:b?c#",
        "admin / ",
        "recovery key ab12-",
        "mnemonic for a ",
        "totp('abcdefghijklmnop",
        "data:image/png;base64,",
        "[redacted] ",
        "password dell'a ",
        "admin key ",
    ],
)
def test_written_form_triggers_finish_and_stay_idempotent(unit: str) -> None:
    text = (unit * (200_000 // len(unit) + 1))[:200_000]
    out, n = scrub_text(text)
    assert scrub_text(out)[1] == 0
    assert n <= len(text)


# Forms of credential that other rules let through: a YAML block under a key that names a
# credential, Kubernetes/ECS name/value entries, an e-mail address as a URL's user, a
# password read out character by character, security answers, one-time codes, software
# serials, "net user NAME PASS", long qualifiers in other languages, a name with a short
# qualifier before its colon, hex keys named in their line, Linear OAuth tokens.
NAMED_FORMS = [
    (
        "postgresql:\n  auth:\n    postgresPassword: 22-&hrm64ZU%%4\n    database: app",
        "postgresql:\n  auth:\n    postgresPassword: [REDACTED:password]\n    database: app",
    ),
    (
        '        env:\n        - name: DB_PASSWORD\n          value: "sm8+Vj-9O&7qU"',
        '        env:\n        - name: DB_PASSWORD\n          value: "[REDACTED:password]"',
    ),
    (
        '{"name": "API_TOKEN", "value": "Zq81kLmN0pQr7sTu"}',
        '{"name": "API_TOKEN", "value": "[REDACTED:token]"}',
    ),
    (
        "imaps://support@acme.io:H96MPCR0J4aMe8@imap.gmail.com:993/INBOX",
        "imaps://support@acme.io:[REDACTED:password]@imap.gmail.com:993/INBOX",
    ),
    (
        "Caller read the password out: capital K, x, nine, hash, lowercase m, seven.",
        "Caller read the password out: [REDACTED:password].",
    ),
    (
        "Pin for the door: four, eight, two, nine, one, six.",
        "Pin for the door: [REDACTED:password].",
    ),
    (
        "Bank security answers: first pet = Biscuitbones, city of birth = Szczecinek",
        "Bank security answers: first pet = [REDACTED:password], city of birth = "
        "[REDACTED:password]",
    ),
    (
        "> customer: my verification code is 265206, can you finish the reset?",
        "> customer: my verification code is [REDACTED:password], can you finish the reset?",
    ),
    (
        "Photoshop serial number 9533-9569-3499-7946-7984-7482",
        "Photoshop serial number [REDACTED:token]",
    ),
    ("net user backupadmin IR1DShClUL!@ /add", "net user backupadmin [REDACTED:password] /add"),
    (
        "a senha do banco de dados de homologação é cwxGbZ+7j36w",
        "a senha do banco de dados de homologação é [REDACTED:password]",
    ),
    (
        "api key part 1: kglsc5AWF6nfyaJTaYVm\napi key part 2: HGjWGmKFTuHhyHkspkr3",
        "api key part 1: [REDACTED:token]\napi key part 2: [REDACTED:token]",
    ),
    (
        "`dbc980e0140ef329179d67cff7c5e4263ad3f` is the Cloudflare global key credential",
        "`[REDACTED:token]` is the Cloudflare global key credential",
    ),
    (
        "Linear: lin_oauth_7a9bed83ff7d6995bc9c1118c19cd9a62e70194514c3b180f34d42feabef7c9b",
        "Linear: [REDACTED:api_key]",
    ),
    (
        '{"kty":"OKP","crv":"Ed25519","d":"nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A",'
        '"x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}',
        '{"kty":"OKP","crv":"Ed25519","d":"[REDACTED:high_entropy]",'
        '"x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}',
    ),
]


@pytest.mark.parametrize(("raw", "expected"), NAMED_FORMS)
def test_named_forms_are_redacted(raw: str, expected: str) -> None:
    out, n = scrub_text(raw)
    assert out == expected
    assert n == expected.count("[REDACTED:")
    assert scrub_text(out) == (out, 0)


# Look-alikes: a header naming only its scheme, values the writer masked, the public members
# of a JSON Web Key, vendors' documented example keys cited as examples, base64 of ordinary
# data.
NAMED_FORM_LOOKALIKES = [
    "Authorization: Basic",
    "token: ghp_****************************Xk2Q (masked)",
    '{"kty":"RSA","e":"AQAB","use":"sig","kid":"k1","n":"0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2'
    'aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5J'
    'sGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZ'
    'Hzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqb'
    'w0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw"}',
    "The AWS docs use AKIAIOSFODNN7EXAMPLE and wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY as "
    "example credentials.",
    "payload was eyJldmVudCI6InNpZ251cCIsInBsYW4iOiJwcm8iLCJzZWF0cyI6MTJ9",
    "decoded SGVsbG8gZnJvbSB0aGUgbmlnaHRseSBqb2IsIGFsbCAxNCB0YXNrcyBvaw== from the queue",

]

# Prose near the new forms that holds no credential, masked values without a key name, and
# base64 that names a credential (which stays redacted).
NEAR_NEW_FORMS = [
    "key ends in sk-...abcd, rotate it if you see it in logs",
    "AWS key AKIA****************, owner: data team",
    "my first car was a Volvo, my first pet was a cat",
    "serial number C02XK1ABJGH5 on the laptop sticker",
    "net user kiosk * /add",
    "commit 3f6b2a9c8d7e4f1a0b5c6d7e8f9a0b1c2d3e4f5a fixed the api key rotation",
    "ssh key fingerprint: SHA256:nThbg6kXUpJWGl7E1IGOCspRomTxdCARLviKw6E5SY8",
    "password reset: tomorrow",
    "the password is one of the three I gave you",
    "- name: LOG_LEVEL\n  value: debug",
    "error code 502 from the gateway",
]


@pytest.mark.parametrize("text", NAMED_FORM_LOOKALIKES + NEAR_NEW_FORMS)
def test_named_form_lookalikes_are_untouched(text: str) -> None:
    assert scrub_text(text) == (text, 0)


def test_base64_that_names_a_credential_stays_redacted() -> None:
    raw = "blob eyJ1c2VyIjogImNpIiwgImF1dGgiOiAiWTJrNlMzZzVJMjFRY1RKNFZ3PT0ifQ=="
    assert scrub_text(raw) == ("blob [REDACTED:high_entropy]", 1)


# Further written forms: URL passwords holding "&", "?" or "#", answers after "; it's" or on
# the line after a question, database clients' short password options and redis directives,
# vendor shapes without a common prefix (Airtable, Braintree, Asana), webhook URLs of
# automation services, qualified backup codes, a card "paid with", codes with a word before
# "code", unlock patterns, PINs qualified in other languages, a "Code" column beside doors,
# digits dictated in other languages or spelled out, product keys, passive "was changed to",
# "pw X", foreign names with an adjective, a value alone under its label, XML elements named
# by an attribute, and tokens named by their service.
MORE_FORMS = [
    (
        "amqp://guest:jc&Dd9TXmaM_dtF?@rabbit.internal:5672/%2F is the broker URL",
        "amqp://guest:[REDACTED:password]@rabbit.internal:5672/%2F is the broker URL",
    ),
    (
        'mustConnect({"amqp://orders:0T_9obHRp#==-N@rabbit.prod:5672/orders"})',
        'mustConnect({"amqp://orders:[REDACTED:password]@rabbit.prod:5672/orders"})',
    ),
    (
        "ssh-add asked for the passphrase; it's PZ&WPI4viQrxdUI_",
        "ssh-add asked for the passphrase; it's [REDACTED:password]",
    ),
    (
        "Q: what's the password for the shared finance drive?\nA: it's Cobalt44!orbit (new)",
        "Q: what's the password for the shared finance drive?\nA: it's [REDACTED:password] (new)",
    ),
    (
        'sqlcmd -S sql01 -U sa -P NcwxGbZ+7j36wn -Q "select 1"',
        'sqlcmd -S sql01 -U sa -P [REDACTED:password] -Q "select 1"',
    ),
    (
        "command: redis-server --requirepass ^2JC0C7^spTd^",
        "command: redis-server --requirepass [REDACTED:password]",
    ),
    ("masterauth Zq8mLp2Wx41", "masterauth [REDACTED:password]"),
    (
        "Airtable PAT: patq94uC2OA19saHl.7947bfb42ebc9bc846c94b73d3c2c95a325b51700f7288718021f2b64"
        "a5ba844",
        "Airtable PAT: [REDACTED:api_key]",
    ),
    (
        "`access_token$production$frh5iayvuvfzeqah$a3149aac7ffd49d935c169fa6d6cd92a` is the "
        "Braintree credential",
        "`[REDACTED:api_key]` is the Braintree credential",
    ),
    (
        "Asana key (prod) is 2/2664836586510440/4099244919980721:ff4e3375399e2723a11256e0f8ecc32d",
        "Asana key (prod) is [REDACTED:api_key]",
    ),
    (
        "Zapier catch hook https://hooks.zapier.com/hooks/catch/6556947/ji8a621/",
        "Zapier catch hook https://hooks.zapier.com/hooks/catch/6556947/[REDACTED:webhook]/",
    ),
    (
        "2FA backup codes for Google: 5429 6725 6977 2251 7562 4126",
        "2FA backup codes for Google: [REDACTED:password]",
    ),
    ("Paid with 6011903293491493", "Paid with [REDACTED:card_number]"),
    (
        "- Building: Alte Schmiede\n- Alarm disarm code: 4087\n- Key safe behind the bins",
        "- Building: Alte Schmiede\n- Alarm disarm code: [REDACTED:password]\n- Key safe behind "
        "the bins",
    ),
    (
        "unlock pattern for the test tablet: 1-4-7-8-9 (L shape)",
        "unlock pattern for the test tablet: [REDACTED:password] (L shape)",
    ),
    ("Handy-PIN von Oma: 205304", "Handy-PIN von Oma: [REDACTED:password]"),
    (
        "| Door | Code |\n|---|---|\n| server room | 214654 |\n| lobby | open 8-18 |",
        "| Door | Code |\n|---|---|\n| server room | [REDACTED:password] |\n| lobby | open 8-18 |",
    ),
    (
        "she spelled it: P as in Peter, 4, W as in Whiskey, lowercase r, 9, at sign, Z",
        "she spelled it: [REDACTED:password]",
    ),
    (
        "Die PIN ist vier sieben null drei, hat er am Telefon gesagt.",
        "Die PIN ist [REDACTED:password], hat er am Telefon gesagt.",
    ),
    (
        "Office 2021 key HVP37-6BF4M-4J7BG-PB7VP-P73PG (activated)",
        "Office 2021 key [REDACTED:token] (activated)",
    ),
    (
        "Lizenzschlüssel für das CAD-Programm: VTT2H-77HT7-7R3PY-RY9FF-BKR97-YGBG9",
        "Lizenzschlüssel für das CAD-Programm: [REDACTED:token]",
    ),
    (
        "----- BEGIN LICENSE -----\nAcme GmbH\nM8DD-XWDF-8HYX-D84G\n----- END LICENSE -----",
        "----- BEGIN LICENSE -----\nAcme GmbH\n[REDACTED:token]\n----- END LICENSE -----",
    ),
    (
        "The shared laptop login was changed to Tangerine85#lantern on Friday.",
        "The shared laptop login was changed to [REDACTED:password] on Friday.",
    ),
    (
        "I set the router admin pass to maple95%river, same as the guest one.",
        "I set the router admin pass to [REDACTED:password], same as the guest one.",
    ),
    (
        "FYI creds for staging: user qa-bot, pw Cobalt81#nimbus",
        "FYI creds for staging: user qa-bot, pw [REDACTED:password]",
    ),
    (
        "Contraseña nueva del correo: D-19ytdez%0 (la cambié ayer)",
        "Contraseña nueva del correo: [REDACTED:password] (la cambié ayer)",
    ),
    (
        "Password:\n\n    M3Z7qtnyuI-G\n\n(case sensitive)",
        "Password:\n\n    [REDACTED:password]\n\n(case sensitive)",
    ),
    (
        '<property name="hibernate.connection.password">Ysqv?%Dz1?UjNsp</property>',
        '<property name="hibernate.connection.password">[REDACTED:password]</property>',
    ),
    (
        "note to self: PagerDuty = 8Va-7IRKRQDIo6Lh3Rzu",
        "note to self: PagerDuty = [REDACTED:api_key]",
    ),
]


@pytest.mark.parametrize(("raw", "expected"), MORE_FORMS)
def test_more_forms_are_redacted_exactly(raw: str, expected: str) -> None:
    out, n = scrub_text(raw)
    assert out == expected
    assert n == expected.count("[REDACTED:")
    assert scrub_text(out) == (out, 0)


# Look-alikes of the forms above: templates' placeholder words in URLs, prose about the PEM
# format, an option of "npm login", published test cards cited as such, a vendor prefix with
# a mask, Terraform references, a spelled name, hex ids in groups, an error table, an e-mail
# address as a login, a service named with no token, and questions with no answer.
MORE_FORM_LOOKALIKES = [
    "DATABASE_URL=postgres://USER:PASSWORD@HOST:5432/DB",
    "psql postgresql://user:password@localhost:5432/db",
    "A PEM private key begins with -----BEGIN PRIVATE KEY-----.",
    "npm login --registry=https://npm.acme.io",
    "Stripe's docs show test card 4242 4242 4242 4242 for successful payments.",
    "Use the test number 4111 1111 1111 1111 in the sandbox.",
    "STRIPE_SECRET_KEY=sk_live_xxxxxxxxxxxxxxxxxxxxxxxx",
    "password = var.db_password",
    "password = cfg.db_password",
    "the caller spelled her surname: K as in Kilo, O, W, A, L",
    "uuid 123E4567-E89B-12D3-A456-426614174000",
    "part 1A2B-3C4D-5E6F-7A8B",
    "| Error | Code |\n|---|---|\n| timeout | 504 |",
    "the login was changed to bob@example.com",
    "set the login to jsmith",
    "Datadog: 3 monitors fired",
    "Heroku app is acme-web-production-2024",
    "what is the password?\nBob: no idea, ask Anna",
    "the password; it's fine",
    "Password:\n\nPlease reset it soon.",
    "backup codes for the team are in the vault",
    "Use GPIO pin 18 for the LED strip",
    "http://host:8080?to=bob@example.org",
    '<property name="hibernate.connection.username">admin</property>',
]


@pytest.mark.parametrize("text", MORE_FORM_LOOKALIKES)
def test_more_form_lookalikes_are_untouched(text: str) -> None:
    assert scrub_text(text) == (text, 0)


@pytest.mark.parametrize(
    "unit",
    [
        "--requirepass ",
        "sqlcmd -P ",
        "hooks.zapier.com/hooks/catch/1/",
        "pagerduty = ",
        '<p name="password">',
        "ABCD-",
        "2/1234567890:",
        "spelled it: a ",
        "| door | code |\n|---|---|\n",
        "login was changed to ",
        "pin von ",
        "password?\n",
    ],
)
def test_more_form_triggers_finish_and_stay_idempotent(unit: str) -> None:
    # Linear-time rules (timing: bench/bench_scrub.py): a 200 kB input of each new trigger
    # is scanned and scrubbing it again changes nothing.
    text = (unit * (200_000 // len(unit) + 1))[:200_000]
    out, n = scrub_text(text)
    assert scrub_text(out)[1] == 0
    assert n <= len(text)


# Command options, setters, Go DSNs, wiki tables, old and new passwords, door codes in
# four more languages, *.sid cookies, wallet keys; elided and fill-in values, data keys,
# psql variables and boolean password flags stay untouched.
FOURTH_FORMS = [
    (
        'redis-cli -h cache1 -p 6379 -a Vq7rT2xLm9Kp ping',
        'redis-cli -h cache1 -p 6379 -a [REDACTED:password] ping',
    ),
    (
        'openssl enc -aes-256-cbc -pbkdf2 -in notes.txt -out notes.enc -k Hq3ZbN8wYt2M',
        'openssl enc -aes-256-cbc -pbkdf2 -in notes.txt -out notes.enc -k [REDACTED:password]',
    ),
    (
        "echo 'amber lotus quill maple' | gpg --batch --passphrase-fd 0 -d vault.gpg",
        "echo '[REDACTED:password]' | gpg --batch --passphrase-fd 0 -d vault.gpg",
    ),
    (
        "echo 'Qz8!mKw2Lp' | openssl enc -d -pass stdin -in a.enc",
        "echo '[REDACTED:password]' | openssl enc -d -pass stdin -in a.enc",
    ),
    (
        'ds.setPassword("Zr4%Tq9wLm2!");',
        'ds.setPassword("[REDACTED:password]");',
    ),
    (
        "client.set_api_key('Xk29LmQp7Tz4Rw8Nv3Hs')",
        "client.set_api_key('[REDACTED:token]')",
    ),
    (
        'DataSource.builder().username("app").password("Wn5$Pk8rBx2q").build()',
        'DataSource.builder().username("app").password("[REDACTED:password]").build()',
    ),
    (
        'db, err := sql.Open("mysql", "svc:Lp9?Vx2Kq7@tcp(db1:3306)/shop")',
        'db, err := sql.Open("mysql", "svc:[REDACTED:password]@tcp(db1:3306)/shop")',
    ),
    (
        "$pdo = new PDO('mysql:host=localhost;dbname=wp', 'wpuser', 'Hn4Gx8TqLw2Z');",
        "$pdo = new PDO('mysql:host=localhost;dbname=wp', 'wpuser', '[REDACTED:password]');",
    ),
    (
        '|| Service || User || Password ||\n| Grafana | admin | Tb7?Kw3%Xq9Z |',
        '|| Service || User || Password ||\n| Grafana | admin | [REDACTED:password] |',
    ),
    (
        'changed the router admin password from the default to Rk_482%TmQy',
        'changed the router admin password from the default to [REDACTED:password]',
    ),
    (
        'changed the wifi password from Spring2023! to Kx9#mPq2Lw',
        'changed the wifi password from [REDACTED:password] to [REDACTED:password]',
    ),
    (
        'printer admin pw updated -> 7tRk29qLx0Mz',
        'printer admin pw updated -> [REDACTED:password]',
    ),
    (
        'el código del portón es 8154',
        'el código del portón es [REDACTED:password]',
    ),
    (
        "Il codice dell'allarme è 06448",
        "Il codice dell'allarme è [REDACTED:password]",
    ),
    (
        'De deurcode is 9945',
        'De deurcode is [REDACTED:password]',
    ),
    (
        'Kod do domofonu: 8091',
        'Kod do domofonu: [REDACTED:password]',
    ),
    (
        'cookie: connect.sid=s%3A0f26f72f3959e5a9b54ea26dda38f15d',
        'cookie: connect.sid=[REDACTED:token]',
    ),
    (
        'wallet privkey deeee91c76fbd8962b927af5eb8d430721965a39449aa98d3fe4dd27598a6872 for tests',
        'wallet privkey [REDACTED:token] for tests',
    ),
    (
        'const signer = new '
        "ethers.Wallet('0d7abd0e1cbc4340cbaa507051a69a17566d3b7680261bd83bd51afd4853c88c', p);",
        "const signer = new ethers.Wallet('[REDACTED:token]', p);",
    ),
]

FOURTH_FORM_LOOKALIKES = [
    'wget --user=bob --ask-password https://repo.acme.io/releases/tool-2.1.tgz',
    'Using cache key: node-modules-linux-9b2f6c1e0a4d7f3b8c5e2a1d6f9b0c3e7a4d1f8b',
    "ALTER USER app PASSWORD :'new_password';",
    'STRIPE_SECRET_KEY=sk_live_... (see vault)',
    'MAILCHIMP_API_KEY=your-key-us6',
    'GITHUB_TOKEN=ghp_…',
    'redis-cli -h cache1 -p 6379 ping',
    "echo 'hello' | gpg --clearsign",
    "user.check_password('Zr4%Tq9wLm2!')",
    'ds.setPassword(System.getenv("DB_PASSWORD"));',
    'builder.password("${DB_PASSWORD}")',
    'db, err := sql.Open("mysql", os.Getenv("DSN") + "@tcp(db1:3306)/shop")',
    '|| Service || Owner ||\n| Grafana | ops-team |',
    'changed the password from the default to something longer',
    'password updated -> see vault',
    'el código postal es 28001',
    'De deurcode is veranderd',
    'primary key: 3f6b2a9c8d7e4f1a0b5c6d7e8f9a0b1c',
    'wallet address 0x52908400098527886E0F7030069857D2E4169EE7',
]


@pytest.mark.parametrize(("raw", "expected"), FOURTH_FORMS)
def test_fourth_forms_are_redacted_exactly(raw: str, expected: str) -> None:
    assert scrub_text(raw)[0] == expected
    assert scrub_text(expected) == (expected, 0)


@pytest.mark.parametrize("text", FOURTH_FORM_LOOKALIKES)
def test_fourth_form_lookalikes_are_untouched(text: str) -> None:
    assert scrub_text(text) == (text, 0)


@pytest.mark.parametrize(
    "unit",
    [
        "setPassword('x' ",
        "a:b@tcp(",
        "|| a ||\n| b |\n",
        "password from x ",
        "pw updated -> ",
        "kod do ",
        "connect.sid=",
        "cache key: ",
        "redis-cli -a ",
    ],
)
def test_fourth_form_triggers_finish_and_stay_idempotent(unit: str) -> None:
    text = (unit * (200_000 // len(unit) + 1))[:200_000]
    out, n = scrub_text(text)
    assert scrub_text(out)[1] == 0
    assert n <= len(text)


def test_scrub_parts_redacts_each_part_as_the_joined_text() -> None:
    scrubber = Scrubber()
    parts = ["The db password", " Rationale: ", "Tr0ub4dor&3", "."]
    assert scrubber.scrub("Tr0ub4dor&3") == ("Tr0ub4dor&3", 0)  # no context: no credential
    redacted, n = scrubber.scrub_parts(parts)
    assert redacted == ["The db password", " Rationale: ", "[REDACTED:password]", "."]
    assert n == 1
    assert "".join(redacted) == scrubber.scrub("".join(parts))[0]
    assert scrubber.scrub_parts(["no", " secret"]) == (["no", " secret"], 0)
