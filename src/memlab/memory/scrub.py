"""Credential scrubbing, run on every string before it is hashed, stored, embedded or echoed.

The reference system's ``scrub.js`` (design §D0.11) removes API keys, passwords, tokens, connection
strings with credentials and bearer tokens on every store path. This module does the same in
three layers, all of which report *spans* of the input that are then merged and replaced in
one pass:

1. memlab's own rules (:data:`DEFAULT_PATTERNS`): precompiled regular expressions for what a
   line-based detector misses or gets wrong in prose: PEM/PGP private-key blocks, credentials
   in URLs, ``Authorization`` headers, vendor token shapes (OpenAI/Anthropic, Stripe incl.
   ``whsec_``, AWS, GitHub, GitLab, Slack tokens and webhooks, Google, Twilio, SendGrid, npm,
   Hugging Face, Shopify, Telegram, Docker, PyPI, Azure client secrets and SAS signatures),
   ``key = value`` assignments whose key names a credential (``PGPASSWORD=``, ``"auth": …``,
   ``AccountKey=``, ``psk="…"``, ``secret_key_base``), command-line passwords (``mysql
   -pXXX``, ``--password X``, ``curl -u user:pass``, ``keytool -storepass X``, ``pscp -pw X``,
   positional ones: ``htpasswd -b FILE USER PASS``, ``net use \\\\host\\share PASS``,
   ``echo X | docker login --password-stdin`` / ``sudo -S`` / ``chpasswd``,
   ``ConvertTo-SecureString "X"``), passwords in code and SQL (``IDENTIFIED BY X``, ``SET
   PASSWORD … = 'X'``, ``define('DB_PASSWORD', 'X')``, ``os.getenv('DB_PASS', 'X')``,
   ``process.env.DB_PASS || 'X'``, ``${DB_PASSWORD:-X}``, ``getConnection(url, "sa", "X")``,
   ``client.login(user, "X")``, an SDK client made from an id and a secret:
   ``Client('AC…', '<32 hex>')``), ``.pgpass`` lines, passwords stated in prose ("the wifi
   password is …", multi-word passphrases up to the end of the clause, "password—X", "the
   admin password? It's X", "'X' as her password", "my Gmail password (X)", "same password
   everywhere: X", "the pass is X", numeric passcodes), credentials named in prose in other
   ways ("API key: …" and "passphrase for the gpg key: …", "changed the root password to …",
   a quoted value right after "password", a long random value right after "access key", a
   user/password pair after "credentials" or "login", a 12–24-word recovery phrase after
   "mnemonic", "seed phrase" or "recovery phrase is:", also quoted, after a qualifier
   ("mnemonic for the test wallet: …") or as a numbered list, backup and recovery codes, one
   per line too, and recovery keys, base32 TOTP seeds after "2FA secret" / "MFA seed" or
   given to ``pyotp.TOTP('…')``, "log in as root with Kx9#mPq2", "admin / Kx9#mPq2"),
   numeric codes (PINs, PUKs, door / gate / alarm / keypad /
   unlock / access codes, safe combinations ``12-34-56``, "code du portail", "Türcode"),
   payment card numbers (13–19 digits in the usual groupings, Luhn-checked, with a card
   network's prefix and length) and CVV/CVC/CID codes, passwords named in other languages
   ("Passwort: …", "Das WLAN-Passwort lautet …", "Contraseña del router: …", "la password
   è …", "hasło to …", "şifrem …", "lösenordet är …", "κωδικός: …", "كلمة المرور هي …",
   "kata sandi adalah …", "mật khẩu là …", "密码是…", "口令：…", "비밀번호는 …", "mdp : …"),
   credentials in structured text (XML elements, ``key="ApiKey" value="…"`` pairs, Markdown
   table rows, a Markdown table column under a header that names a credential, HTML
   ``<td>password</td><td>…</td>`` cells, names set off by Markdown or HTML (``**password:**
   X``, ``<b>Password:</b> X``), ``auth=(user, pass)`` tuples, escaped JSON quotes, Wi-Fi
   QR codes ``WIFI:…;P:…;;``, ``<property name="…password">X</property>``), session cookies,
   product keys (``HVP37-6BF4M-…``), tokens named by their service ("PagerDuty = …"), and long
   high-entropy tokens. In prose the
   value's shape decides: "reset the password to access the server" is prose, "… to Kx9#mPq2"
   a password. Code that only refers to a secret is kept (``process.env.STRIPE_KEY``,
   ``getpass.getpass(…)``, ``vault.read(…)[…]``, ``$PASS``, ``${DB_PASSWORD}``, ``<token>``,
   ``password: str``, ``password != confirm_password``), and so is a pointer to where a
   secret is kept ("Password: see the 1Password vault"). Public material is never redacted:
   certificate and public-key PEM blocks, OpenSSH public keys (type and blob), age recipients,
   Stripe publishable keys (``pk_live_…``) and the base64 payload of an image, audio, video
   or font ``data:`` URI.
2. detect-secrets' vendor plugins (:data:`DETECT_SECRETS_PLUGINS`), run only on short windows
   around a cheap literal trigger, so their regexes never see more than a few hundred
   characters at once (several of them backtrack on long lines). detect-secrets'
   ``KeywordDetector`` is not used: it is super-linear on long lines and needs code syntax;
   rule family 1 covers assignments and prose instead.
3. The same detection on normalised copies of the text, whose spans are mapped back onto the
   original text: percent-decoded (``%2F`` → ``/``); with line breaks inside a token removed
   (``ghp_abc…\\ndef…``; a line that starts a new key or a plain word is no continuation);
   as a reader sees it: Unicode format characters (category Cf: zero-width space and
   joiners, soft hyphen, word joiner, BOM) removed, fullwidth and mathematical letters in
   their NFKC form, Cyrillic and Greek look-alikes folded to Latin in words that mix scripts,
   and obfuscated names spelt plainly (``p a s s w o r d``, ``pass-word``, ``p4ssw0rd``), so
   that ``pass\\u200bword: X`` is found and a token with invisible characters inside is
   redacted whole; and a token written with a space between every character, joined (only a
   vendor token shape counts there).

Every rule is linear in the input: no nested unbounded quantifiers, every repetition that can
backtrack is bounded, rules that start on a character class refuse to start inside a run of
that class, and private-key blocks are paired with their END marker by position, not by a
lazy scan. ``bench/bench_scrub.py`` measures detection, false positives and throughput.

Every secret is replaced by a typed placeholder such as ``[REDACTED:api_key]``; the context
(key names, user names, hosts) survives: ``password=hunter2`` becomes
``password=[REDACTED:password]`` and ``postgres://app:s3cret@db:5432/x`` becomes
``postgres://app:[REDACTED:password]@db:5432/x``. Scrubbing is idempotent:
``scrub(scrub(t)[0]) == (scrub(t)[0], 0)``.

Public entry points: :func:`scrub_text` (alias :func:`scrub`) for one string and
:func:`scrub_value` for nested JSON-like values (dict keys and values, lists, tuples; a string
or an integer under a key that names a credential, also in another language or as a numeric
code, is redacted whole: ``{"pin": 4821}``, ``{"door_code": "4821"}``, ``{"passwort": …}``,
and so is the value of a named pair: ``{"name": "DB_PASSWORD", "value": …}``).

Example:
    >>> scrub_text("export OPENAI_API_KEY=sk-proj-Ab12Cd34Ef56Gh78Ij90")
    ('export OPENAI_API_KEY=[REDACTED:api_key]', 1)
"""

from __future__ import annotations

import base64
import binascii
import bisect
import inspect
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

__all__ = [
    "DEFAULT_PATTERNS",
    "DETECT_SECRETS_PLUGINS",
    "Rule",
    "Scrubber",
    "keyed_secret",
    "same_scrubber",
    "scrub",
    "scrub_message",
    "scrub_text",
    "scrub_value",
]

_PLACEHOLDER = "[REDACTED:{}]"
_NOT_PLACEHOLDER = r"(?!\[REDACTED:)"
_PLACEHOLDER_RE = re.compile(r"\[REDACTED:[a-z0-9_]{1,40}\]")

Span = tuple[int, int, str]
"""``(start, end, kind)`` of one secret in a text."""

Check = Callable[
    [re.Match[str], str],
    "tuple[int, int] | tuple[int, int, str] | list[tuple[int, int, str]] | int | None",
]
"""A rule's acceptance test: given the match and the whole (original) text, the span to
redact, optionally with its kind, or a list of ``(start, end, kind)`` spans (every cell of a
table column), or ``None`` to reject the match (the search goes on behind it), or an ``int``
to reject it and go on from that position."""

# ----------------------------------------------------------------------------- word lists
# First words that make "the password is <word>" prose *about* a password, not a password.
_STOPWORDS = frozenset(
    """
    a an the this that these those it its is are was were be been being not no never now
    still also just only too very so quite really always usually often already yet again
    here there in on at of to for from by with without into onto as like than then and or
    but if when where which who whom whose what why how all any each every some none one
    my your our their his her our same different new old current previous default
    strong weak short long secure insecure safe unsafe valid invalid wrong right correct
    incorrect good bad fine ok okay simple complex easy hard hashed encrypted salted stored
    saved kept required optional mandatory needed necessary missing empty blank unknown
    unset set expired expiring rotated changed reset revoked leaked compromised shared
    reused temporary permanent sensitive confidential private public hidden visible secret
    case random unique generated managed handled checked verified validated protected
    important enough less more most least longer shorter stronger weaker out up down off
    over under about above below available unavailable active inactive disabled enabled
    sent given known unchanged something anything nothing everything whatever whichever
    inside outside included attached written printed shown displayed logged masked redacted
    because since until unless while although though however therefore typically generally
    easy-to-guess hard-to-guess guessable unguessable predictable unpredictable
    """.split()
)

_WORDISH_SUFFIXES = ("ed", "ing", "ly", "able", "ible", "ful", "ous", "ive", "less", "ment")

# Normalised key names (lower case, separators removed) whose value is a credential.
_SECRET_KEY_ENDINGS = (
    "password",
    "passwd",
    "passphrase",
    "passcode",
    "passkey",
    "pwd",
    "pw",
    "secret",
    "token",
    "apikey",
    "accesskey",
    "secretkey",
    "privatekey",
    "accountkey",
    "storagekey",
    "authkey",
    "masterkey",
    "signingkey",
    "encryptionkey",
    "subscriptionkey",
    "licensekey",
    "clientkey",
    "appkey",
    "consumerkey",
    "servicekey",
    "webhookkey",
    "dbkey",
    "databasekey",
    "credential",
    "credentials",
    "psk",  # wpa_supplicant psk="…", hostapd wpa_psk=…
    "keybase",  # Rails secret_key_base
)
_FOREIGN_PASSWORD_KEYS = (
    "passwort", "kennwort", "contraseña", "contrasena", "motdepasse", "mdp", "senha",
    "wachtwoord", "hasło", "haslo", "lösenord", "losenord", "adgangskode", "passord",
    "salasana", "heslo", "jelszó", "jelszo", "şifre", "sifre", "пароль", "パスワード", "密码",
    "密碼", "비밀번호",
)  # fmt: skip
"""Normalised key names of a password in other languages (``{"passwort": …}``)."""
_SECRET_KEY_ENDINGS += _FOREIGN_PASSWORD_KEYS
_CODE_KEY_ENDINGS = (
    "doorcode", "gatecode", "alarmcode", "accesscode", "entrycode", "keypadcode", "lockcode",
    "unlockcode", "safecode", "garagecode", "lockboxcode", "buildingcode", "puk", "pukcode",
    "combination", "cvv", "cvc", "cvv2", "cvc2", "securitycode", "cardcode",
)  # fmt: skip
"""Normalised key names of a numeric code (``{"door_code": "4821"}``, ``{"cvv": "382"}``)."""
_SESSION_KEY_ENDINGS = ("session", "sess", "sessionid", "sessid", "sessionkey", "sesskey", "sid")
"""Normalised key names of a session id (a cookie that stands for a login)."""
_PASSWORD_KEY_ENDINGS = (
    "password", "passwd", "passphrase", "passcode", "passkey", "pwd", "pw", "pass", "psk",
    *_FOREIGN_PASSWORD_KEYS,
)  # fmt: skip
_API_KEY_ENDINGS = ("apikey", "apisecret")
_NON_SECRET_VALUES = frozenset(
    "none null nil undefined true false yes no on off required optional empty n/a na tbd "
    "redacted hidden masked changeme".split()
    # type names: "password: str", "-> bool", {"password": {"type": "string"}}
    + "str string bool boolean int integer float bytes number any object void char varchar "
    "securestring".split()
)
_POINTER_WORDS = frozenset(
    "see ask check refer look find contact use stored kept saved via from in inside at on "
    "available provided shared sent".split()
)
"""First words of a value that points to where a credential is kept ("Password: see the
1Password vault 'Infra'", "token: ask ops"), not the credential."""
_VAULT_WORDS = re.compile(
    r"(?i)vault|1password|bitwarden|keepass|lastpass|keychain|dashlane|secrets? manager"
    r"|password manager"
)
"""Where credentials are kept: a value that names one points there."""
_HASH_WORDS = re.compile(
    r"(?i)(?:sha-?\d{1,3}|md5|argon2\w{0,4}|pbkdf2\w{0,12}|bcrypt|scrypt|2fa|mfa|otp|"
    r"v?\d{1,6}(?:\.\d{1,6}){0,3}|[a-z]{1,20})"
)


_DIGIT = re.compile(r"[0-9]")
_UPPER = re.compile(r"[A-Z]")
_LOWER = re.compile(r"[a-z]")
_ALNUM = re.compile(r"[A-Za-z0-9]")
_SYMBOL = re.compile(r"[^A-Za-z0-9]")
_KEY_SEPARATORS = str.maketrans("", "", "_.-")


def _norm_key(key: str) -> str:
    return key.lower().translate(_KEY_SEPARATORS)


def _is_mask(value: str) -> bool:
    """``****``, ``xxxx``, ``...``: already masked by the writer."""
    return len(set(value.lower()) - set("*x.•#-_ ")) == 0


def _has_alnum(value: str) -> bool:
    return _ALNUM.search(value) is not None


def _looks_random(value: str, *, min_len: int = 8) -> bool:
    """A token-like value: long enough and not a plain word (has a digit, or mixed case)."""
    if len(value) < min_len:
        return False
    has_digit = _DIGIT.search(value) is not None
    has_upper = _UPPER.search(value) is not None
    has_lower = _LOWER.search(value) is not None
    has_symbol = _SYMBOL.search(value) is not None
    if has_digit and (has_upper or has_lower):
        return True
    return has_upper and has_lower and (has_symbol or len(value) >= 12)


def _wordish(word: str) -> bool:
    """An ordinary English word that prose uses *about* a password."""
    w = word.lower().strip(".,;:!?")
    if w in _STOPWORDS:
        return True
    return w.isalpha() and len(w) > 4 and w.endswith(_WORDISH_SUFFIXES)


def _password_like(word: str) -> bool:
    """A single word that can plausibly be a password (after "password is" / "password:")."""
    if not _has_alnum(word) or _is_mask(word):
        return False
    if word.lower().strip(".,;:!?'\"") in _NON_SECRET_VALUES:
        return False
    if any(c.isdigit() for c in word) or any(not c.isalnum() for c in word.rstrip(".,;:!?")):
        return not _HASH_WORDS.fullmatch(word.rstrip(".,;:!?")) or len(word) >= 8
    if any(c.isupper() for c in word[1:]):
        return True
    return not _wordish(word) and len(word) >= 4


# ----------------------------------------------------------------------------- entropy
def shannon_entropy(value: str) -> float:
    """Shannon entropy of ``value`` in bits per character (0 for an empty string)."""
    if not value:
        return 0.0
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values())


# ----------------------------------------------------------------------------- rule checks
_EXTEND = re.compile(
    r"(?:[ \t]{1,3}(?!(?:and|but|or|then|which|so|because|for|on|in|to|with|from|at|if|"
    r"when|until|while|please|pls|thanks|thx|via|by)\b)[^\s,;!?:=\"'`()\[\]{}<>]{1,64}){0,8}",
    re.IGNORECASE,
)


def _extend_clause(text: str, end: int) -> int:
    """End of the clause that starts at ``end`` (more words of a multi-word password)."""
    m = _EXTEND.match(text, end)
    if m is None or m.end() == end:
        return end
    words = text[end : m.end()].split()
    # Stop before a word that prose uses about the password ("…, which is stored hashed").
    keep = end
    pos = end
    for w in words:
        start = text.index(w, pos)
        if _wordish(w) and w.lower() not in ("a", "the"):
            break
        keep = start + len(w)
        pos = keep
        if w.endswith((".", "!", "?")) and len(w) > 1:
            return keep - 1  # the sentence ends here
    return keep


def _password_end(text: str, start: int, end: int) -> int | None:
    """End of an unquoted password stated in prose that starts with ``text[start:end]``.

    A password-like first word runs on to the end of the clause; a passphrase of plain words
    needs four of them with at most one that prose uses *about* passwords. ``None``: this is
    prose about a password, not one.
    """
    value = text[start:end]
    like = _password_like(value)
    if not like and (not value.isalpha() or text[end : end + 1] != " "):
        return None
    ext = _extend_clause(text, end)
    if ext > end and (value.lower() in _POINTER_WORDS or _VAULT_WORDS.search(text, start, ext)):
        return None  # "Password: see the 1Password vault 'Infra'", "token: ask ops"
    if like:
        return ext
    words = text[start:ext].split()
    if len(words) >= 4 and sum(_wordish(w) for w in words) <= 1:
        return ext
    return None


def _strip_sentence_end(text: str, start: int, end: int) -> int:
    """Drop a trailing sentence period from a bare value (``hunter2.`` → ``hunter2``)."""
    n = len(text)
    while end > start + 1 and text[end - 1] in ".," and (end == n or text[end] in " \t\r\n"):
        end -= 1
    return end


_KEY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")


def _key_before(text: str, keyword_start: int, keyword_end: int) -> str:
    """The whole key name whose last part is the keyword at ``keyword_start``."""
    i = keyword_start
    lo = max(0, keyword_start - 40)
    while i > lo and text[i - 1] in _KEY_CHARS:
        i -= 1
    return text[i:keyword_end]


def _inside_placeholder(text: str, pos: int) -> bool:
    """``pos`` is inside the kind of a placeholder (``[REDACTED:pass|word]``)."""
    j = text.rfind("[REDACTED:", max(0, pos - 50), pos)
    return j >= 0 and "]" not in text[j:pos]


def _check_assignment(m: re.Match[str], text: str) -> tuple[int, int, str] | int | None:
    """``key = value`` where the key names a credential; a value that is not a secret is
    skipped (the search goes on behind it)."""
    if "]" in m.group("close") and _inside_placeholder(text, m.start()):
        return m.end()  # "[REDACTED:password]:19700:…": the name of a placeholder
    key = _norm_key(_key_before(text, m.start(), m.start("close")))
    session = key.endswith(_SESSION_KEY_ENDINGS)
    if not _names_credential(key) and not session:
        return None
    # The value is read only once the key names a credential: a match that reached past a
    # key like "otpauth:" would hide the "secret=…" behind it.
    v = _VALUE_RE.match(text, m.end())
    if v is None:
        return m.end()
    quoted = v.group("qv") is not None
    group = "qv" if quoted else "bv"
    start, end = v.span(group)
    value = text[start:end]
    if not quoted:
        end = _strip_sentence_end(text, start, end)
        value = text[start:end]
    if _stated_non_value(value):
        return v.end()
    sep = m.group("sep")
    if quoted and sep[:1].isspace() and sep.endswith(":") and _SNAKE_NAME.fullmatch(value):
        return v.end()  # "ALTER USER app PASSWORD :'new_password'": a psql variable
    if not quoted and (
        _code_reference(text, start, end)
        or (sep.strip() == "==" and _IDENT_PATH.fullmatch(value) is not None)
        or ("\n" in sep and not _rest_of_line_blank(text, v.end()))
    ):
        # "password = getpass.getpass(…)", "password == confirm_password", "password:\n
        # raise ValueError(…)": code that refers to a secret, not one; "auth:\n
        # postgresPassword: X" opens a block whose first key is searched again
        return start if "\n" in sep else v.end()
    if session and not key.endswith(_SECRET_KEY_ENDINGS):
        # "session=prod" names a setting; a session id is a long random value
        return (start, end, "token") if _looks_random(value, min_len=16) else v.end()
    spaced = sep != sep.rstrip()
    is_password = _password_key(key)
    if key.endswith(("sig", "signature")) and not _looks_random(value, min_len=16):
        return v.end()
    if not quoted and spaced:
        # Prose-like "token: the model reads…": a plain word is not a token.
        if is_password:
            got = _password_end(text, start, end)
            if got is None:
                return v.end()
            end = got
        elif not _looks_random(value, min_len=6) and not (value.isdigit() and len(value) >= 6):
            return v.end()
    elif not quoted and not is_password and value.isdigit() and len(value) < 6:
        return v.end()
    return start, end, _kind_of_key(key)


def keyed_secret(key: str, value: str) -> str | None:
    """The placeholder kind when ``value``, stored under the name ``key`` (a JSON field, a
    form field), is a credential, else ``None``: the key names one (as in ``key = value``
    assignments) and the value is not empty, masked, a placeholder, a template or a stated
    non-value (``none``, ``changeme``). Under a password key (also in another language:
    ``passwort``, ``contraseña``) the value must be password-like (one word, four digits or
    more, or a passphrase of plain words); under a PIN or a code's key (``door_code``,
    ``puk``, ``cvv``) it must be a numeric code; under any other key it must look random
    (:func:`_looks_random`, or six digits or more): ``{"contains_secret": "api-key"}`` is a
    label.

    Example:
        >>> keyed_secret("db_password", "hunter2"), keyed_secret("password_policy", "90 days")
        ('password', None)
    """
    k = _norm_key(key.strip().strip("\"'"))
    v = value.strip()
    if k == "pin" or k.endswith(("pincode", "pinnumber")):
        return "password" if _is_pin(v) else None
    if k.endswith(_CODE_KEY_ENDINGS):
        if k.endswith(("cvv", "cvc", "cvv2", "cvc2", "cardcode", "securitycode")):
            return "password" if v.isdigit() and 3 <= len(v) <= 4 else None
        return "password" if _NUMERIC_CODE.fullmatch(v) else None
    named = _names_credential(k)
    if not named and not k.endswith(_SESSION_KEY_ENDINGS):
        return None
    if not v or _PLACEHOLDER_RE.search(v) or _stated_non_value(v):
        return None
    if not named or k.endswith(("sig", "signature")):
        return "token" if _looks_random(v, min_len=16) else None
    if _password_key(k):
        if v.isdigit() and 4 <= len(v) <= 64:
            return "password"  # {"password": 12345678}, {"passcode": "4821"}
        return "password" if _quoted_password(v) else None
    # a token must look like one: {"contains_secret": "api-key"} is a label, and so is a
    # class name ({"auth": "ChainMapProxy"})
    ok = (_looks_random(v) and not _CAMEL_WORDS.fullmatch(v)) or (v.isdigit() and len(v) >= 6)
    return _kind_of_key(k) if ok else None


_CAMEL_WORDS = re.compile(r"(?:[A-Z][a-z]{2,}){2,}")
"""A name made of capitalised words (``ChainMapProxy``): a class, not a token."""
_NUMERIC_CODE = re.compile(r"\d{4,12}[A-Za-z#*]?|\d{1,3}(?:[-–. ]\d{1,3}){2,5}")
"""A code for a door, a keypad, a safe or a SIM: 4–12 digits (one letter or ``#`` may
follow: ``4512B``), or a combination of 2–6 groups of 1–3 digits (``12-34-56``)."""


def _pass_key(key: str) -> bool:
    return key.endswith("pass") and not key.endswith(("bypass", "compass", "surpass", "trespass"))


def _auth_key(key: str) -> bool:
    return key in ("auth", "basicauth", "httpauth", "proxyauth", "dockerauth", "authstring")


def _password_key(key: str) -> bool:
    """A normalised key name whose value is a password."""
    return key.endswith(_PASSWORD_KEY_ENDINGS) or _pass_key(key)


def _names_credential(key: str) -> bool:
    """A normalised key name whose value is a credential (``db_password``, ``apiKey``,
    ``auth``, ``sig``)."""
    return (
        key.endswith(_SECRET_KEY_ENDINGS)
        or _pass_key(key)
        or _auth_key(key)
        or key.endswith(("sig", "signature"))
    )


_ENV_REFERENCE = re.compile(r"(?:os\.)?(?:environ|getenv|env|process\.env|settings|config)\b.*")
_IDENT_PATH = re.compile(r"[A-Za-z_$][\w$]{0,64}(?:(?:\.|::|->)[A-Za-z_$][\w$]{0,64}){0,8}")
_REF_ROOTS = frozenset(
    "process os env environ settings config conf cfg secrets secret vault self this request "
    "req ctx context app params args options opts props values data system environment import "
    "window document credentials creds session getpass keyring var vars local locals module "
    "data each inputs parameters".split()
)
"""First parts of a dotted path that reads a secret from somewhere (``process.env.KEY``)."""
_CONSTANT_NAME = re.compile(
    r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*_(?:PASSWORD|PASSWD|PASS|PWD|SECRET|TOKEN|KEY|AUTH"
    r"|CREDENTIALS?)(?:_[A-Z0-9]+)*"
)
"""A constant or an environment variable that names a credential (``DB_PASSWORD``)."""
_SNAKE_NAME = re.compile(r"[a-z][a-z]*(?:_[a-z]+)+")
"""A variable's name in snake case (``user_password``), letters only."""
_CMDLET = re.compile(r"[A-Z][A-Za-z]{1,20}-[A-Z][A-Za-z]{1,40}")


def _code_reference(text: str, start: int, end: int) -> bool:
    """``text[start:end]`` is code that refers to a secret, not a secret: a call or an index
    (``getpass.getpass(…)``, ``vault.read(…)[…]``), a dotted path from a known source
    (``process.env.STRIPE_KEY``, ``settings.SECRET_KEY``) or a PowerShell cmdlet with its
    arguments (``ConvertTo-SecureString "…"``)."""
    value = text[start:end]
    nxt = text[end : end + 1]
    if nxt not in ("(", "[") and "." not in value and "::" not in value and "-" not in value:
        if "_" not in value:
            return False
        # password = DB_PASSWORD, "psk": cryptography_has_psk: a name for the secret
        return _CONSTANT_NAME.fullmatch(value) is not None or (
            _SNAKE_NAME.fullmatch(value) is not None and _names_credential(_norm_key(value))
        )
    if _CMDLET.fullmatch(value) and re.match(r"[ \t]{1,5}[\"'$-]", text[end : end + 6]):
        return True
    if _CONSTANT_NAME.fullmatch(value):
        return True  # password = DB_PASSWORD: another name for the secret, not the secret
    if _IDENT_PATH.fullmatch(value) is None:
        return False
    if text[end : end + 1] in ("(", "["):
        return True
    parts = re.split(r"\.|::|->", value)
    if len(parts) >= 3 and not any(c.isdigit() for c in value):
        return True  # Rails.application.credentials.secret_key_base
    if len(parts) == 2 and "_" in parts[1] and _SNAKE_NAME.fullmatch(parts[1]):
        if _names_credential(_norm_key(parts[1])):
            return True  # "password = cfg.db_password": a field named as the credential
    return len(parts) >= 2 and parts[0].lower().lstrip("$") in _REF_ROOTS


def _rest_of_line_blank(text: str, pos: int) -> bool:
    """Nothing but blanks from ``pos`` to the end of its line."""
    nl = text.find("\n", pos, pos + 4096)
    rest = text[pos : nl if nl >= 0 else pos + 4096]
    return not rest.strip()


def _stated_non_value(value: str) -> bool:
    """A value that stands for no credential: no letter or digit, masked (``****``), a stated
    non-value (``none``, ``changeme``), a template (``${TOKEN}``, ``{{ secret }}``, ``<key>``)
    or a reference to the environment or the settings (``os.environ["KEY"]``)."""
    if not _has_alnum(value) or _is_mask(value) or value.lower() in _NON_SECRET_VALUES:
        return True
    if _masked_body(value):
        return True  # "sk_live_xxxxxxxxxxxxxxxx": a vendor's prefix and a mask
    if _elided_or_fill_in(value):
        return True  # "sk_live_...", "ghp_…": a prefix cut short; "your-key-us6": a fill-in
    if value.startswith(("$", "%(", "{{", "<", "${")) or (value[0] in "{<" and value[-1] in "}>"):
        return True
    if value[0] == "[" and _TEMPLATE_VALUE.fullmatch(value):
        return True  # "[REDACTED]", "[hidden]": the writer's own marker
    return _ENV_REFERENCE.fullmatch(value) is not None


_MASKED_BODY = re.compile(
    r"[A-Za-z0-9]{1,12}(?:[_\-.][A-Za-z0-9]{1,12}){0,3}[_\-.](?:[xX]{6,}|[*•]{3,})"
)
"""A vendor's prefix followed by a mask: ``sk_live_xxxxxxxx``, ``ghp_XXXXXXXX``, ``SG.****``."""


_ELIDED_VALUE = re.compile(
    r"[A-Za-z0-9]{1,12}(?:[_\-.][A-Za-z0-9]{1,12}){0,3}[_\-](?:\.{2,}|…)"
)
"""A vendor's prefix and an ellipsis: ``sk_live_...``, ``ghp_…`` (the value left out)."""
_FILL_IN_VALUE = re.compile(
    r"(?i)(?:your|insert|enter|replace|put)[_\-](?:[a-z0-9]{1,20}[_\-]){0,4}[a-z0-9]{1,20}"
)
"""A value that asks the reader to fill it in: ``your-key-us6``, ``YOUR_API_TOKEN``,
``insert_token_here``."""


_FILL_IN_STARTS = ("your", "insert", "enter", "replace", "put")


def _elided_or_fill_in(value: str) -> bool:
    """:data:`_ELIDED_VALUE` or :data:`_FILL_IN_VALUE` (cheap tests first)."""
    if value.endswith((".", "…")) and _ELIDED_VALUE.fullmatch(value):
        return True
    return value[:7].lower().startswith(_FILL_IN_STARTS) and bool(_FILL_IN_VALUE.fullmatch(value))


def _masked_body(value: str) -> bool:
    """:data:`_MASKED_BODY` (a cheap substring test first: most values hold no mask)."""
    if "xxx" not in value and "XXX" not in value and "*" not in value and "•" not in value:
        return False
    return _MASKED_BODY.fullmatch(value) is not None


def _is_pin(value: str) -> bool:
    """Four to twelve digits: a PIN."""
    return value.isdigit() and 4 <= len(value) <= 12


def _kind_of_key(key: str) -> str:
    if _password_key(key):
        return "password"
    if key.endswith(_API_KEY_ENDINGS):
        return "api_key"
    if key.endswith(("sig", "signature")):
        return "signature"
    return "token"


def _check_prose(m: re.Match[str], text: str) -> tuple[int, int, str] | None:
    """ "the staging password is hunter2" / "my passphrase was correct horse battery staple"."""
    keyword = m.group("key").lower()
    quoted = m.group("qv") is not None
    start, end = m.span("qv" if quoted else "bv")
    joint = text[m.end("key") : start]
    if keyword == "pass" and not _DETERMINER_BEFORE.search(text, max(0, m.start() - 12), m.start()):
        return None  # "the pass is Marmalade!7", not "the mountain pass is closed"
    return _prose_value(keyword, text, start, end, quoted=quoted, joint=joint)


_DETERMINER_BEFORE = re.compile(
    r"(?i)(?:^|\s)(?:the|my|your|our|his|her|their|its|wifi|wi-fi|admin|root|login|user)\s+$"
)
_TEMPLATE_VALUE = re.compile(
    r"\$(?:\{[^{}\n]{1,64}\}|[A-Za-z_]\w{0,64}|\([^()\n]{1,128}\))|%[A-Za-z_]\w{0,64}%"
    r"|\$env:\w{1,64}|<[^<>\n]{1,64}>|\{\{[^{}\n]{0,128}\}\}|\{[A-Za-z_]?\w{0,64}\}"
    r"|%(?:\([^()\n]{1,64}\))?[sdr]|\[[A-Za-z][A-Za-z _\-]{0,40}\]"
)
"""A placeholder that a program or a template fills in, or that a writer left where a value
was or will be: ``$PASS``, ``${DB_PASSWORD}``, ``$(cat pw.txt)``, ``%TOKEN%``, ``<token>``,
``{{ secret }}``, ``{password}``, ``%s``, ``[REDACTED]``, ``[your token]``."""
_COUNT_WORDS = ("char", "digit", "letter", "day", "symbol", "number", "time", "minute", "hour")


def _prose_value(
    keyword: str, text: str, start: int, end: int, *, quoted: bool, joint: str = ""
) -> tuple[int, int, str] | None:
    """The span and kind of the value ``text[start:end]`` named by ``keyword`` (lower case:
    "password", "api key", "door code", …) in prose, or ``None`` when it is no credential.

    ``joint`` is what stands between the name and the value (``" is "``, ``": "``, ``"? "``):
    after a dash or a question mark only a value with a password's shape counts ("the password
    - which we rotate - is …", "the password? Ask Bob")."""
    value = text[start:end]
    if not quoted:
        end = _strip_sentence_end(text, start, end)
        value = text[start:end]
    if not _has_alnum(value) or _is_mask(value) or value.lower() in _NON_SECRET_VALUES:
        return None
    if _elided_or_fill_in(value):
        return None  # "API key: your-key-us6", "token: ghp_…"
    if not quoted:
        if (value[0] in "$%<{" and _TEMPLATE_VALUE.fullmatch(value)) or _code_reference(
            text, start, end
        ):
            return None  # "key = process.env.STRIPE_KEY", "password: ${DB_PASSWORD}"
        if "\n" in joint and "?" not in joint and not _rest_of_line_blank(text, end):
            return None  # "confirm_password:\n    raise ValueError(…)": a block, not a value
        if value.endswith(":") or "://" in value:
            return None  # "password: str) -> bool:", "token: https://…": a key, a link
    if keyword.startswith(("pin", "puk")):
        return (start, end, "password") if _is_pin(value) else None
    if keyword.endswith("code") and not keyword.startswith("pass"):  # "the door code is 4821#"
        digits = sum(c.isdigit() for c in value)
        ok = digits >= 4 and len(value) <= 12 and all(c.isdigit() or c in "*#" for c in value)
        return (start, end, "password") if ok else None
    if keyword.startswith(("pass", "pw", "security", "secret answer")):
        if quoted:
            return start, end, "password"
        after = text[end : end + 12].lstrip().lower()
        if value.isdigit() and not after.startswith(_COUNT_WORDS):
            # "the passcode is 883104", "password: 20481632" (not "password 8 characters")
            short = 4 if keyword.startswith(("passcode", "pass code")) else 6
            return (start, end, "password") if short <= len(value) <= 16 else None
        if (
            keyword == "pass"
            or "?" in joint
            or joint.lstrip()[:1] in (";", ",")
            or joint.rstrip().endswith(("-", "–", "—"))
        ):
            # a dash may open an aside ("the password - which we rotate - is …")
            return (start, end, "password") if _shaped_password(value) else None
        got = _password_end(text, start, end)
        return None if got is None else (start, got, "password")
    if keyword == "key" and any(c in value for c in ":/"):
        return None  # "cache key: user:123", "the key is in ~/keys/"
    if keyword == "key" and _data_key_before(text, start):
        return None  # "cache key: node-modules-9b2f…", "idempotency key: 7f3a…": no credential
    if keyword == "key" and re.match(r"[\"']?\s{1,5}value\s{0,3}=", text[end : end + 16]):
        return None  # <add key="PaymentApiKey" value="…"/>: the name of the value
    if quoted and re.fullmatch(r"[A-Za-z]{3,}(?:[-_.][A-Za-z0-9]{3,}){2,}", value):
        return start, end, "token"  # "the secret is 'blue-horse-battery'"
    if _DIGIT_GROUPS.fullmatch(value):
        return start, end, "token"  # "WPA2 key: 8812-4471-9930-2215"
    # secret / token / api key / "the wifi key": a random-looking single value.
    return (start, end, "token") if _looks_random(value) else None


_DATA_KEY_WORDS = frozenset(
    "cache idempotency partition primary sort foreign composite dedup dedupe deduplication "
    "lookup shard row hash map dict dictionary object s3 storage i18n translation react list "
    "index sorting grouping".split()
)
"""Words before "key" that make it the name of data, not of a credential."""


def _data_key_before(text: str, start: int) -> bool:
    """The value at ``start`` follows a key that names data ("cache key: node-modules-9b2f…",
    "primary key = 7f3a…", "S3 object key: …"): the last "key" in the 48 characters before
    it, on its line, comes right after one of :data:`_DATA_KEY_WORDS`."""
    lo = max(0, start - 48)
    window = text[lo:start].lower()
    i = window.rfind("key")
    if i < 2 or "\n" in window[i:] or window[i - 1] not in " \t_-":
        return False
    j = i - 1
    while j > 0 and window[j - 1].isalnum():
        j -= 1
    return window[j : i - 1] in _DATA_KEY_WORDS
_DIGIT_GROUPS = re.compile(r"\d{4,8}(?:[-\s]\d{4,8}){2,7}")
"""Three or more groups of four or more digits: a numeric key ("8812-4471-9930-2215")."""


def _check_password_word(m: re.Match[str], text: str) -> tuple[int, int] | None:
    """ "log in with password Hunter22" (no verb): a mixed letter-digit word after it."""
    start, end = m.span("secret")
    end = _strip_sentence_end(text, start, end)
    value = text[start:end]
    if _HASH_WORDS.fullmatch(value) or value.lower() in _NON_SECRET_VALUES:
        return None
    if "://" in value:
        return None  # "wget --ask-password https://…/tool-2.1.tgz": a link after the flag
    return start, end


def _check_token_shape(m: re.Match[str], text: str) -> tuple[int, int] | None:
    """Vendor prefix + body: the body must look random (``sk-learn-compatible`` is a word)."""
    start, end = m.span("secret") if "secret" in m.re.groupindex else m.span()
    end = _strip_sentence_end(text, start, end)
    body = text[m.start("body") : end] if "body" in m.re.groupindex else text[start:end]
    if _is_mask(body):
        return None  # "sk_live_xxxxxxxxxxxxxxxxxxxxxxxx": a placeholder
    parts = re.split(r"[-_.]", body)
    if not any(_looks_random(p, min_len=10) for p in parts) and not _looks_random(
        body.replace("-", "").replace("_", ""), min_len=16
    ):
        return None
    return start, end


_URL_LOOKBACK = 2048
_SRI_PREFIX = re.compile(r"(?i)(?:sha(?:1|224|256|384|512)|md5)[-:=]")


def _check_entropy(m: re.Match[str], text: str) -> tuple[int, int] | None:
    """A long base64/base62 run that looks random (cloud secret keys in prose)."""
    start, end = m.span()
    while start < end and text[start] in "/.+~-_":
        start += 1
    while end > start and text[end - 1] in "/.+~-_":
        end -= 1
    if end - start < 32:
        return None
    value = text[start:end]
    if not (_DIGIT.search(value) and _UPPER.search(value) and _LOWER.search(value)):
        return None
    n = min(len(value), 64)
    if shannon_entropy(value) < min(4.5, 0.86 * math.log2(n)):
        return None
    if _SRI_PREFIX.match(value):
        return None
    if _readable_base64(value):
        return None  # base64 of a sentence or a JSON object: data, not a key
    parts = re.split(r"[/_.-]", value)
    if sum(1 for p in parts if len(p) >= 3 and p.isalpha() and (p.islower() or p.istitle())) >= 2:
        return None  # a path or an identifier made of words
    # Part of a URL (content hashes, document ids) or an SRI hash: not a credential.
    lo = max(0, start - _URL_LOOKBACK)
    ws = max(text.rfind(c, lo, start) for c in " \t\r\n\"'<>(")
    token_head = text[max(ws + 1, lo) : start]
    if "://" in token_head or "www." in token_head:
        return None
    if re.search(r"(?i)(?:sha(?:1|224|256|384|512)|md5)[-:=]$", token_head):
        return None
    return start, end


_KEY_NAME_WORDS = (
    "secret|private|api|access|auth|bot|signing|encryption|master|admin|root|server|service"
    "|deploy|write|management|live|session|refresh|client|consumer|app|webhook|integration"
)
"""Words before "key" or "token" that make it a credential's name (regex alternation): "API
key", "admin key", "write key", "refresh token" (not "cache key", "primary key")."""
_PROSE_KEYWORDS = (
    r"password|passphrase|passcode|pwd|pw|pin\s+code|pin\s+number|pin"
    r"|security\s+answer|secret\s+answer"
    r"|(?:" + _KEY_NAME_WORDS + r")[\s_\-]?(?:key|token)"
    r"|(?:door|gate|alarm|garage|entry|lock|safe|building)\s+code"
    r"|secret|token|key"
)
"""Names of a credential in prose (regex alternation, lower case): "the API key is …"."""
_PROSE_PUNCT = r"\s{0,5}(?:=|:|->)\s{0,5}"
_PROSE_VERBS = (
    r"\s{1,5}(?:is\s+now|now\s+is|is\s+still|(?:is\s+|was\s+)?(?:set|changed|reset)\s+to"
    r"|is|was|are|became|becomes|reads|->|=>|-|–|—|→):?\s{1,5}"
)
"""What joins a credential's name to its value in prose: a punctuation mark, or a verb (the
longer verbs first: "is now" before "is")."""
_PROSE_ASIDE_JOINTS = (
    r"[ \t]{0,5}[—–][ \t]{0,5}"
    r"|\?(?:[ \t]{1,3}|[ \t]{0,3}\r?\n[ \t]{0,3}(?:[A-Za-z][\w.\-]{0,20}[ \t]{0,2}:[ \t]{1,3})?)"
    r"(?:(?:it['’]?s|it[ \t]+is|it[ \t]+was|that['’]?s)[ \t]{1,3})?"
    r"|[;,][ \t]{1,3}(?:it['’]?s|it[ \t]+is|it[ \t]+was)[ \t]{1,3}"
)
"""An unspaced dash ("password—MoonLight77"), a question, also answered on the next line
("The admin password? It's …", "password for the drive?\nA: it's …"), or "; it's": only a
value with a password's shape counts after these."""
_ASIDE_WORDS = ("again", "now", "below", "here", "too", "also", "today", "everywhere")
"""Words between a credential's name and its separator: "the passphrase again: …"."""


def _strong_password(word: str) -> bool:
    """A single word that is a password by its shape, not a plain word: it has a digit, a
    symbol inside it, or a capital after its first letter (``Kx9#mPq2``, ``Adm1n!Pass``), and
    is not a version or a hash name (``v2``, ``sha256``)."""
    word = word.rstrip(".,;:!?")
    if len(word) < 4 or not _has_alnum(word) or _is_mask(word):
        return False
    if word.lower() in _NON_SECRET_VALUES or _HASH_WORDS.fullmatch(word):
        return False
    return (
        any(c.isdigit() for c in word)
        or any(not c.isalnum() for c in word)
        or any(c.isupper() for c in word[1:])
    )


def _shaped_password(word: str) -> bool:
    """A bare word that is a password by its shape even in prose: :func:`_strong_password`
    with a digit next to letters, a symbol other than ``-_.``, or a capital inside
    (``Or4cl3Sys``, ``Tr0ub4dor&3``; not ``box-drawing``)."""
    if not _strong_password(word):
        return False
    letters = any(c.isalpha() for c in word)
    return (
        (letters and any(c.isdigit() for c in word))
        or any(not c.isalnum() and c not in "-_." for c in word)
        or (any(c.isupper() for c in word[1:]) and any(c.islower() for c in word))
    )


def _quoted_password(value: str) -> bool:
    """A quoted value that is a password: one password-like word, or a passphrase of two or
    more words with at most one word that prose uses about passwords."""
    if not _has_alnum(value) or _is_mask(value) or value.lower() in _NON_SECRET_VALUES:
        return False
    words = value.split()
    if len(words) == 1:
        return _password_like(words[0])
    return sum(_wordish(w) for w in words) <= 1


def _check_set_to(
    m: re.Match[str], text: str
) -> tuple[int, int, str] | list[tuple[int, int, str]] | None:
    """ "changed the root password to Kx9#mPq2": the value's shape decides (a plain word after
    "to" is prose: "reset the password to access the server")."""
    if not _word_start(m, text):
        return None
    keyword = _norm_key(m.group("key"))
    quoted = m.group("qv") is not None
    start, end = m.span("qv" if quoted else "bv")
    if not quoted:
        end = _strip_sentence_end(text, start, end)
    value = text[start:end]
    if keyword.endswith(("pin", "pincode")):
        return (start, end, "password") if _is_pin(value) else None
    if keyword.endswith("login"):
        # a login is often the user's name: only a password's shape, no e-mail address
        ok = "@" not in value and _shaped_password(value) and _DIGIT.search(value) is not None
        return (start, end, "password") if ok and (quoted or _strong_password(value)) else None
    is_password = _password_key(keyword)
    old = m.group("old") if "old" in m.re.groupindex else None
    if old is not None and is_password and _shaped_password(text[slice(*m.span("old"))]):
        # "… from Summer2023! to Kx9#mPq2": the old password is one too
        got = _check_set_to_value(text, start, end, quoted=quoted, is_password=True)
        spans = [(*m.span("old"), "password")]
        return [*spans, got] if got is not None else spans
    return _check_set_to_value(text, start, end, quoted=quoted, is_password=is_password)


def _check_set_to_value(
    text: str, start: int, end: int, *, quoted: bool, is_password: bool
) -> tuple[int, int, str] | None:
    """The value after "to" in :func:`_check_set_to`, judged by its shape."""
    value = text[start:end]
    kind = "password" if is_password else "token"
    if quoted:
        ok = _quoted_password(value) if is_password else _looks_random(value, min_len=6)
        return (start, end, kind) if ok else None
    if is_password:
        return (start, end, kind) if _strong_password(value) else None
    return (start, end, kind) if _looks_random(value) else None


_FOREIGN_KEYWORDS = (
    r"passwort(?:e?s)?|kennw(?:ort(?:e?s)?)|(?:wlan|netzwerk|wpa)-?schlüssel"
    r"|contraseñas?|contrasenas?|clave(?:[ \t]+de[ \t]+acceso)?"
    r"|mots?[ \t]+de[ \t]+passe|mdp|cl[ée][ \t]+(?:wifi|wi-fi|wpa2?|de[ \t]+s[ée]curit[ée])"
    r"|code[ \t]+(?:du[ \t]+)?(?:wifi|wi-fi|wlan)"
    r"|senhas?|palavra[- ]passe|parola[ \t]+d['’]ordine|wachtwoord(?:en)?"
    r"|has[łl](?:o|a|em|u)|haśle|[şs]ifre(?:m|si|niz|n)?|parola(?:m|sı|si)?"
    r"|l[öo]senord(?:et)?|adgangskoden?|passord(?:et)?|kodeord(?:et)?|salasana(?:ni|si|n)?"
    r"|hesl[oa]|jelsz(?:ó|o|ava|avam)|κωδικός(?:[ \t]+πρόσβασης)?|συνθηματικό"
    r"|[пП]ароль|пароля|паролем|ПАРОЛЬ|كلمة[ \t]+(?:المرور|السر)|kata[ \t]+(?:sandi|laluan)(?:nya)?"
    r"|m[ậa]t[ \t]+kh[ẩa]u|パスワード|暗証番号|密码|密碼|口令|비밀번호|패스워드"
)
"""A password's name in other languages, with its inflected forms ("des Passworts", "hasła",
"şifrem", "lösenordet", "sandinya")."""
_BORROWED_LINKS = (
    r"ist|lautet|war|es|era|est|était|é|è|e|er|var|är|oli|jest|je|adalah|ialah|là|هي|είναι|это"
)
"""Linking verbs of the languages that borrow the English word ("la password è …", "mi
password es …", "het password is" is English to a regex and left to the English rules)."""
_BORROWED_PREPS = (
    r"de[ \t]+l['’]|dell['’]|dall['’]|all['’]|nell['’]|sull['’]|d['’]"
    r"|de[ \t]+la|del|de|du|des|do|da|dos|das|di|della|dello|van[ \t]+de|van|von|vom"
    r"|der|für|zum|zur|od|dla|till|för|på|til|af|için|al|au|pour|para|untuk|dari|của|cho"
)
"""Prepositions after the borrowed word "password" (an elided one, ``dell'``, ``de l'``,
first: the word after it follows with no blank)."""
_FOREIGN_PREPS = (
    r"de[ \t]+l['’]|dell['’]|dall['’]|all['’]|nell['’]|sull['’]|d['’]"
    r"|de[ \t]+la|del|de|du|des|do|da|dos|das|di|della|dello|van[ \t]+de"
    r"|van|voor|von|vom|der|für|fürs|zum|zur|zu|od|от|для|к|dla|till|för|på|til|af|for|için"
    r"|na|per|al|au|aux|pour|para|pro|ke|k|untuk|dari|của|cho|του|της|για|من"
)
"""Prepositions that open a short qualifier after a password's name ("Contraseña del
router", "le mot de passe du wifi", "пароль от вайфая", "hasło do wifi")."""
_FOREIGN_LINKS = (
    r"ist|lautet|lauten|lautete|war|es|era|c['’]est|est|était|é|è|e|er|var|är|on|oli|jest|je"
    r"|to|is|was"
    r"|adalah|ialah|yaitu|là|هي|είναι|это"
)
"""Linking verbs between a password's name and its value, in the languages above."""
_FOREIGN_JOINT = (
    r"[ \t]{0,5}(?:=|:|：|->|→|是|为|為|は|는|은|이|가)[ \t]{0,5}"
    r"|[ \t]{1,5}(?:" + _FOREIGN_LINKS + r")(?:[ \t]{0,3}:)?[ \t]{1,5}"
    r"|[ \t]{0,3}[—–](?:[ \t]{1,3}(?:это|c['’]est|es|ist|is))?[ \t]{0,3}|[ \t]{1,3}-[ \t]{1,3}"
)
_CJK_START = "\u3000"


def _check_foreign_password(m: re.Match[str], text: str) -> tuple[int, int, str] | None:
    """A password named in another language: quoted, or a value that is a password by its
    shape (:func:`_strong_password`; the plain words that prose uses about passwords are
    known in English only: "la contraseña es obligatoria"). With no linking word or mark
    ("şifrem Istanbul34!", "пароль Moskva777") the value needs letters and digits or a
    symbol. Plain ``password`` counts here only with a linking verb of another language
    ("la password è …"); in English the prose rules decide."""
    key = m.group("key").lower()
    if key[0] < _CJK_START and not _word_start(m, text):
        return None  # CJK and Korean keywords stand inside words: "我的密码是", "wifi密码："
    link = (m.group("link") or m.group("link2") or "").strip()
    if m.group("qv") is not None:
        start, end = m.span("qv")
        return (start, end, "password") if _quoted_password(text[start:end]) else None
    start, end = m.span("bv")
    end = _strip_sentence_end(text, start, end)
    value = text[start:end]
    punct = link in ("=", ":", "：", "->", "→") and not m.group("qual")
    if _DIGIT_GROUPS.fullmatch(value):
        return start, end, "password"  # "la clé wifi est 8812-4471-9930-2215"
    if not (_strong_password if punct else _shaped_password)(value):
        return None  # "la clave es auto-generada"
    if _code_reference(text, start, end):
        return None
    if not link and not (
        len(value) >= 6 and any(c.isalpha() for c in value) and not value.isalpha()
    ):
        return None  # "Passwort 2024 ändern", "пароль от" …: no linking word, no shape
    return start, end, "password"


def _check_keyed_field(m: re.Match[str], text: str) -> tuple[int, int, str] | None:
    """A value stored under a name (an XML element, a key/value attribute pair, a table row):
    a secret when :func:`keyed_secret` says so."""
    for k, v in (("k1", "v1"), ("k2", "v2"), ("k3", "v3")):
        if m.group(k) is not None:
            kind = keyed_secret(m.group(k), m.group(v))
            return None if kind is None else (*m.span(v), kind)
    return None


_KEY_TYPES = frozenset(
    "ed25519 ed448 x25519 rsa1024 rsa2048 rsa3072 rsa4096 p256 p384 p521".split()
)


def _check_unnamed_password(m: re.Match[str], text: str) -> tuple[int, int] | None:
    """ "log in as root with Tr0ub4dor&3": with no name before it, only a value with letters,
    digits and mixed case or a symbol is a password ("as bob with key-based auth", "with
    ed25519 keys", "using oauth2.0" are not)."""
    if not _word_start(m, text):
        return None
    start, end = m.span("secret")
    end = _strip_sentence_end(text, start, end)
    value = text[start:end]
    if not (_DIGIT.search(value) and (_LOWER.search(value) or _UPPER.search(value))):
        return None
    if value.lower().rstrip(".,;:!?") in _KEY_TYPES or _HASH_WORDS.fullmatch(value):
        return None
    mixed = _UPPER.search(value) is not None and _LOWER.search(value) is not None
    symbol = any(not c.isalnum() and c not in ".-_/" for c in value)
    return (start, end) if (mixed or symbol) and _strong_password(value) else None


def _check_word_start_digits(m: re.Match[str], text: str) -> tuple[int, int] | None:
    """A number named as a password or PIN; not a year (``password 2024 policy``) or a count
    (``password 12 characters``, ``pin 4 digits``)."""
    if not _word_start(m, text):
        return None
    start, end = _secret_span(m)
    value = text[start:end]
    if len(value) == 4 and value[:2] in ("19", "20"):
        return None  # "password 2024 policy"
    if text[end : end + 12].lstrip().lower().startswith(("char", "digit", "letter", "day")):
        return None  # "password 8 characters", "pin 4 digits"
    return start, end


def _check_quoted_password(m: re.Match[str], text: str) -> tuple[int, int] | None:
    """ "with password 'letmein123'": a quoted password right after the word (not
    ``--password "$DB_PASSWORD"``, which the shell fills in)."""
    value = m.group("secret")
    if not _word_start(m, text) or not _quoted_password(value) or _TEMPLATE_VALUE.fullmatch(value):
        return None
    return m.span("secret")


_KEY_PREFIX = re.compile(r"[A-Za-z_][\w.\-]{0,40}[:=]")


def _check_keyed_value(m: re.Match[str], text: str) -> tuple[int, int] | None:
    """ "API key 3f6b2a9c…": a long random-looking value right after a credential's name."""
    if not _word_start(m, text):
        return None
    start, end = m.span("secret")
    end = _strip_sentence_end(text, start, end)
    value = text[start:end]
    if not _looks_random(value, min_len=16) or "://" in value or value.count("/") > 1:
        return None
    if _KEY_PREFIX.match(value):
        return None  # "secret token=…": an assignment, the assignment rule's
    if _SRI_PREFIX.match(value):
        return None
    return start, end


def _check_credential_pair(m: re.Match[str], text: str) -> tuple[int, int] | None:
    """ "credentials: admin / Adm1n!Pass": the second half of a user/password pair."""
    if not _word_start(m, text):
        return None
    start, end = m.span("secret")
    end = _strip_sentence_end(text, start, end)
    if text[start : start + 1] in "/\\":
        return None  # "npm login --registry=https://…": a URL, not a user and a password
    user = text[m.start() : start].split()[-1] if text[m.start() : start].split() else ""
    if user.startswith("-") or "=" in user:
        return None  # "login --registry=https:…": an option
    return (start, end) if _strong_password(text[start:end]) else None


_ARG = re.compile(r"\"(?P<d>[^\"\n]*)\"|'(?P<s>[^'\n]*)'|\S+")
_ARGS = r"(?:[ \t]{1,5}(?:\"[^\"\n]{0,256}+\"|'[^'\n]{0,256}+'|[^\s|;&\"']{1,256}+)){1,8}+"
"""Up to eight arguments of a command (counted, not measured, so that a redacted argument
leaves the next command where it was: scrubbing stays idempotent)."""


def _command_args(rest: str, base: int) -> list[tuple[int, int]]:
    """Positions (offset by ``base``) of the arguments in ``rest``: whitespace-separated,
    a quoted one without its quotes."""
    out = []
    for a in _ARG.finditer(rest):
        g = "d" if a.group("d") is not None else "s" if a.group("s") is not None else 0
        out.append((base + a.start(g), base + a.end(g)))
    return out


def _check_htpasswd(m: re.Match[str], text: str) -> tuple[int, int] | None:
    """``htpasswd -b[c] FILE USER PASS`` / ``htpasswd -nb USER PASS``: the password is a
    positional argument in batch mode (``-b``)."""
    if not _word_start(m, text):
        return None
    flags = ""
    positional: list[tuple[int, int]] = []
    args = _command_args(m.group("rest"), m.start("rest"))
    i = 0
    while i < len(args):
        s, e = args[i]
        arg = text[s:e]
        if arg.startswith("-") and not positional:
            flags += arg[1:]
            i += 2 if arg == "-C" else 1  # -C takes the bcrypt cost
            continue
        positional.append((s, e))
        i += 1
    if "b" not in flags:
        return None
    want = 1 if "n" in flags else 2
    if len(positional) <= want:
        return None
    s, e = positional[want]
    return None if _TEMPLATE_VALUE.fullmatch(text[s:e]) else (s, e)


def _check_net_use(m: re.Match[str], text: str) -> tuple[int, int] | None:
    r"""``net use \\host\share PASS /user:DOMAIN\user`` (in either order): the one argument
    after the share that is no ``/option`` and no ``*`` (which asks for the password);
    ``net user NAME PASS /add``: the argument after the account's name."""
    if not _word_start(m, text):
        return None
    args = _command_args(m.group("rest"), m.start("rest"))
    if m.group("user") is not None:
        # net user NAME PASS [/add]: the second argument, unless it is an option or "*"
        if len(args) < 2:
            return None
        s, e = args[1]
        arg = text[s:e]
        if arg.startswith(("/", "*")) or _TEMPLATE_VALUE.fullmatch(arg) or arg.startswith("$"):
            return None
        return s, e
    seen_share = False
    for s, e in args:
        arg = text[s:e]
        if arg.startswith("\\\\"):
            seen_share = True
        elif seen_share and not arg.startswith(("/", "*")) and not _TEMPLATE_VALUE.fullmatch(arg):
            return s, e
    return None


_OPTION_WORDS = frozenset("flag option options argument parameter switch prompt is".split())


def _check_dash_option(m: re.Match[str], text: str) -> tuple[int, int] | None:
    """``keytool -storepass X``, ``pscp -pw X``, ``openssl … -pass pass:X``: the option's
    value; not ``-storepass:env VAR`` / ``-pass env:VAR`` (a reference) nor prose about the
    option ("the -password flag")."""
    i = m.start()
    if i > 0 and not text[i - 1].isspace():
        return None
    start, end = _secret_span(m)
    value = text[start:end]
    low = value.lower()
    if low.startswith("pass:"):
        start += 5
    elif low.startswith(("env:", "file:", "fd:", "stdin")) or low in _OPTION_WORDS:
        return None
    if start >= end or _TEMPLATE_VALUE.fullmatch(text[start:end]):
        return None
    return start, end


_SQL_ACCOUNT = re.compile(r"(?i)\b(?:user|role|login|grant|account)\b")


def _check_sql_password(m: re.Match[str], text: str) -> tuple[int, int] | None:
    """``IDENTIFIED BY Or4cl3Sys`` / ``IDENTIFIED WITH … BY '…'`` / ``SET PASSWORD FOR u =
    '…'``: not ``BY VALUES '…'`` (a hash) nor a bind variable (``:pw``, ``?``, ``@pw``); a
    bare value must have a password's shape ("identified by email" is prose)."""
    if not _word_start(m, text):
        return None
    start, end = _secret_span(m)
    end = _strip_sentence_end(text, start, end)
    value = text[start:end]
    if text[m.start() : m.start() + 3].lower() != "set":
        lo = max(0, m.start() - 200)
        lo = max(lo, text.rfind("\n", lo, m.start()) + 1)
        sql = _SQL_ACCOUNT.search(text, lo, m.start()) is not None or text.startswith(
            "IDENTIFIED", m.start()
        )
        if not (sql or (m.group("q") in ("'", '"') and _shaped_password(value))):
            return None  # "a task is identified by (task_id, …)": prose, not SQL
    if value.lower() in ("values", "externally", "globally") or value[0] in ":?@":
        return None
    if m.group("bare") is not None and not _shaped_password(value):
        return None
    if m.group("q") == "`" and not _shaped_password(value):
        return None  # "identified by `row_id`"
    return None if _TEMPLATE_VALUE.fullmatch(value) else (start, end)


def _check_pgpass(m: re.Match[str], text: str) -> tuple[int, int] | None:
    """A ``~/.pgpass`` line ``host:port:db:user:password``: the host is a host name, an
    address, ``localhost``, a socket path or ``*`` (not ``fe80:0:0:0:1`` nor a time)."""
    host = m.group("host")
    if not ("." in host or host in ("localhost", "*") or host.startswith("/")):
        return None
    start, end = m.span("secret")
    value = text[start:end]
    if _stated_non_value(value) or not _password_like(value):
        return None
    return start, end


_STDIN_COMMANDS = re.compile(
    r"--password-stdin|--pass-stdin|sudo\s+(?:-\w+\s+)*-s\b|chpasswd|passwd\s+--stdin"
    r"|--stdin\b|login\s+--password-stdin"
    r"|--passphrase-fd[=\s]+0\b|--passphrase-file[=\s]+/dev/stdin|-pass(?:in)?\s+stdin\b"
    r"|--(?:key|password)-file[=\s]+(?:-|/dev/stdin)(?![\w/])"
)


def _check_echo_pipe(m: re.Match[str], text: str) -> tuple[int, int] | None:
    """``echo "X" | docker login --password-stdin``, ``echo X | sudo -S …``,
    ``echo 'bob:X' | chpasswd``: the echoed value is a password fed to a command."""
    if not _word_start(m, text):
        return None
    cmd = m.group("cmd").lower()
    if _STDIN_COMMANDS.search(cmd) is None:
        return None
    for g in ("d", "s", "b"):
        if m.group(g) is not None:
            start, end = m.span(g)
            break
    value = text[start:end]
    if _TEMPLATE_VALUE.fullmatch(value) or value.startswith("$"):
        return None
    if "chpasswd" in cmd and ":" in value:
        start += value.index(":") + 1  # user:password
    return (start, end) if end > start else None


_SETTER_PREFIX = re.compile(r"(?:set|with)[A-Za-z0-9_]{0,24}")


def _check_setter(m: re.Match[str], text: str) -> tuple[int, int, str] | None:
    """``ds.setPassword("…")``, ``builder.password("…")``, ``client.with_api_key('…')``: a
    literal handed to a setter or a builder method named after a credential; not a check
    (``check_password("…")``, ``reset_token('…')``)."""
    i = m.start()
    lo = max(0, i - 25)
    while i > lo and (text[i - 1].isalnum() or text[i - 1] == "_"):
        i -= 1
    prefix = text[i : m.start()]
    if prefix:
        if _SETTER_PREFIX.fullmatch(prefix.lower()) is None:
            return None
    elif i == 0 or text[i - 1] != ".":
        return None
    start, end = m.span("secret")
    value = text[start:end]
    if _TEMPLATE_VALUE.fullmatch(value) or _stated_non_value(value) or _placeholder_word(value):
        return None
    if _password_key(_norm_key(m.group("key"))):
        return (start, end, "password") if _quoted_password(value) else None
    return (start, end, "token") if _looks_random(value) else None


_DSN_STOP = frozenset(" \t\n\"'`(=,;")


def _check_go_dsn(m: re.Match[str], text: str) -> tuple[int, int] | None:
    """Go's MySQL DSN ``user:pass@tcp(host:3306)/db`` (also ``@unix(…)``): the password
    between the first colon and the ``@``."""
    end = m.start()
    i = end
    lo = max(0, end - 512)
    while i > lo and text[i - 1] not in _DSN_STOP:
        i -= 1
    seg = text[i:end]
    if "://" in seg:
        i += seg.index("://") + 3
        seg = text[i:end]
    colon = seg.find(":")
    if colon <= 0:
        return None
    start = i + colon + 1
    value = text[start:end]
    if not value or _TEMPLATE_VALUE.fullmatch(value) or _stated_non_value(value):
        return None
    return start, end


_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.")


def _run_start(text: str, end: int, chars: frozenset[str], limit: int) -> int:
    """Where the run of ``chars`` that ends at ``end`` starts (at most ``limit`` long): a
    scan backwards, so a check costs no more than the run (a regex searched with ``…$`` in
    a window would try every start in it)."""
    i = end
    lo = max(0, end - limit)
    while i > lo and text[i - 1] in chars:
        i -= 1
    return i


def _name_before(text: str, pos: int) -> str | None:
    """The identifier (``os.environ.get``) right before ``pos``, blanks skipped."""
    j = pos
    while j > max(0, pos - 3) and text[j - 1] in " \t":
        j -= 1
    name = text[_run_start(text, j, _NAME_CHARS, 81) : j]
    return name if name and (name[0].isalpha() or name[0] == "_") else None


_CLIENT_CALL = re.compile(r"(?i)(?:client|api|oauth\d?|oauthhandler|session|service|sdk|bot|rest)$")
_LOGIN_CALL = re.compile(r"(?i)(?:credentials?|auth|basicauth|login|signin|connection)$")


def _check_call_pair(m: re.Match[str], text: str) -> tuple[int, int, str] | None:
    """Two quoted arguments of a call: ``define('DB_PASSWORD', '…')``, ``os.getenv('DB_PASS',
    '…')`` (the first names a credential, the second is its value), or an SDK client made
    from an id and a secret: ``Client('AC…', '<32 hex>')``."""
    start, end = m.span("v")
    value = text[start:end]
    call = m.start() > 0 and (text[m.start() - 1].isalnum() or text[m.start() - 1] == "_")
    if m.group("k") is not None and (call or not _CAMEL_WORDS.fullmatch(m.group("k"))):
        kind = _named_literal(m.group("k"), value)
        if kind is not None:
            return start, end, kind
    called = _name_before(text, m.start())
    if called is None or _TEMPLATE_VALUE.fullmatch(value):
        return None
    name = called.split(".")[-1]
    if _CLIENT_CALL.search(name) and _looks_random(value, min_len=16):
        return (start, end, "token") if not _KEY_PREFIX.match(value) else None
    if _LOGIN_CALL.search(name) and _shaped_password(value) and " " not in value:
        return start, end, "password"  # NetworkCredential("svc", "…"), HTTPBasicAuth(…)
    return None


_PATH_LIKE = re.compile(r"^(?:~?/|\.{1,2}/|[a-z][a-z0-9+.\-]{1,20}://)|/[^/\s]{1,64}\.[A-Za-z]{1,5}$")
"""A file path or a URL (``tests/module.py``, ``./bin``, ``https://…``), not a password."""


def _named_literal(key: str, value: str) -> str | None:
    """The kind when a literal ``value`` in code is stored under ``key`` (a constant, an
    environment variable): a password must have a password's shape (``label('password',
    'Password:')``, ``t('password', 'Mot de passe')`` are labels)."""
    kind = keyed_secret(key, value)
    if kind is None or _PATH_LIKE.search(value) or _CONSTANT_NAME.fullmatch(value):
        return None  # a path, or the name of another variable: ("MYSQL_PASSWORD", "MYSQL_PWD")
    letters = re.sub(r"[^a-z]", "", value.lower())
    if letters and (letters in _FOLD_KEYWORDS or letters == _norm_key(key)):
        return None
    if kind == "password" and (not _shaped_password(value) or any(c.isspace() for c in value)):
        return None
    return kind


_KEY_NAME_CHARS = _NAME_CHARS | {"-"}


def _variable_before(text: str, pos: int) -> str | None:
    """The variable before a fallback at ``pos``: ``process.env.DB_PASS``,
    ``os.environ.get('PW')``, ``ENV["X"]`` (not the end of a string literal: ``"a/../etc/passwd"
    or …``)."""
    i = pos
    while i > max(0, pos - 3) and text[i - 1] in " \t":
        i -= 1
    j = i
    while j > max(0, i - 2) and text[j - 1] in ")]":
        j -= 1
    quoted = j > 0 and text[j - 1] in "\"'"
    if quoted:
        if j == i:
            return None  # "…" or "…": a string literal, not an argument
        j -= 1
    k = _run_start(text, j, _KEY_NAME_CHARS, 81)
    name = text[k:j]
    if not name or not (name[0].isalpha() or name[0] == "_"):
        return None
    before = text[k - 1] if k > 0 else " "
    if quoted != (before in "\"'") or before == "/":
        return None
    return name


def _check_fallback(m: re.Match[str], text: str) -> tuple[int, int, str] | None:
    """A literal fallback after a credential's variable: ``process.env.DB_PASS || '…'``,
    ``os.environ.get('PW') or '…'``, ``$PW ?? '…'``."""
    key = _variable_before(text, m.start())
    if key is None:
        return None
    start, end = m.span("v")
    kind = _named_literal(key, text[start:end])
    return None if kind is None else (start, end, kind)


def _check_shell_default(m: re.Match[str], text: str) -> tuple[int, int, str] | None:
    """``${DB_PASSWORD:-fallback}``: the default of a credential's variable."""
    start, end = m.span("v")
    kind = _named_literal(m.group("k"), text[start:end])
    return None if kind is None else (start, end, kind)


_BRAND_LENGTHS = (
    (("4",), (13, 16, 19)),
    (tuple(str(i) for i in range(51, 56)), (16,)),
    (("34", "37"), (15,)),
    (("6011", "65", "644", "645", "646", "647", "648", "649"), (16, 17, 18, 19)),
    (("35",), (16, 17, 18, 19)),
    (("30", "36", "38", "39"), (14, 15, 16)),
    (("62",), (16, 17, 18, 19)),
    (("50", "56", "57", "58", "63", "67"), (13, 14, 15, 16, 17, 18, 19)),
)
_CARD_LAYOUTS = frozenset(
    ((4, 4, 4, 4), (4, 4, 4, 4, 1), (4, 4, 4, 4, 2), (4, 4, 4, 4, 3), (4, 6, 5), (4, 6, 4),
     (4, 4, 4, 1), (4, 4, 4, 3), (4, 4, 5))
)  # fmt: skip
"""How card numbers are grouped when written with spaces or dashes."""


_CONTIGUOUS_CARD = {
    13: ("4",), 14: ("30", "36", "38", "39"), 15: ("34", "37"), 17: ("0",), 18: ("0",),
    19: ("4", "6", "35", "62"),
}  # fmt: skip
"""Unbroken card numbers of other lengths than 16: the networks that issue them (``"0"``: no
network; 17 and 18 digits are read as an id)."""


_CARD_CONTEXT = re.compile(
    r"(?i)card|visa|master|amex|american express|discover|jcb|diners|maestro|unionpay|credit"
    r"|debit|\bcc\b|\bpay|\bpaid\b|\bcharged\b|\bpurchas|\bexp(?:ires?|iry|\b)|cvv|cvc|\bcid\b"
    r"|\bpan\b|billing|checkout"
)
"""Words that name a payment card near an unbroken number."""


_TEST_CARDS = frozenset(
    "4242424242424242 4111111111111111 4012888888881881 4000056655665556 5555555555554444 "
    "5105105105105100 5200828282828210 2223003122003222 378282246310005 371449635398431 "
    "6011111111111117 6011000990139424 3056930009020004 36227206271667 3566002020360505 "
    "6200000000000005 4000000000000002 4000000000009995 4000002500003155".split()
)
"""Card numbers that the payment networks and processors publish for testing."""
_TEST_CONTEXT = re.compile(
    r"(?i)\b(?:test(?:ing)?|sandbox|docs?|documentation|examples?|dummy|fake)\b"
)


def _luhn(digits: str) -> bool:
    total = 0
    for i, c in enumerate(reversed(digits)):
        d = ord(c) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _card_brand_ok(digits: str) -> bool:
    """The number's first digits name a card network whose numbers have its length."""
    n = len(digits)
    if 2221 <= int(digits[:4]) <= 2720:
        return n == 16  # Mastercard 2-series
    return any(digits.startswith(p) and n in lengths for p, lengths in _BRAND_LENGTHS)


def _check_card(m: re.Match[str], text: str) -> tuple[int, int] | None:
    """A payment card number: 13–19 digits, contiguous or in the usual groups with one kind of
    separator, the first digits of a card network, and a valid Luhn check digit. Not part of
    a longer grouped number (an IBAN ``FR76 3000 6000 …``, a tracking number); an unbroken
    number needs a word that names a card nearby ("visa", "pay with", "exp", "CVV")."""
    start, end = m.span()
    before = text[max(0, start - 6) : start]
    if re.search(r"[A-Za-z]{0,2}\d{1,6}[ \-]$", before):
        return None  # "FR76 3000 6000 0112 3456 …": inside an IBAN or a longer number
    sep = m.group("sep")
    if sep is not None and re.match(re.escape(sep) + r"\d", text[end : end + 2]):
        return None
    raw = m.group()
    digits = raw.replace(" ", "").replace("-", "")
    if not 13 <= len(digits) <= 19 or not _luhn(digits) or not _card_brand_ok(digits):
        return None
    if digits in _TEST_CARDS and _TEST_CONTEXT.search(text, max(0, start - 80), end + 80):
        return None  # "Stripe's test card 4242 4242 4242 4242": published, cited as a test
    if sep is not None:
        groups = tuple(len(g) for g in raw.split(sep))
        if groups not in _CARD_LAYOUTS or len(set(raw) - set("0123456789" + sep)) > 0:
            return None
    else:
        # unbroken: the common lengths only, and named as a card nearby (a seed or a
        # mantissa in code is sixteen digits too: "default_rng(6763691329830218206)")
        if _CONTIGUOUS_CARD.get(len(digits), ()) and not digits.startswith(
            _CONTIGUOUS_CARD[len(digits)]
        ):
            return None
        lo, hi = max(0, start - 48), min(len(text), end + 48)
        if _CARD_CONTEXT.search(text, lo, hi) is None:
            return None
    return start, end


def _check_numeric_code(m: re.Match[str], text: str) -> tuple[int, int] | None:
    """A code named as one: a PUK, a door / gate / alarm / keypad / unlock / access code, a
    one-time code (verification, SMS, 2FA, login code; OTP), a safe's combination, a card's
    CVV. Digits only (``7 3 9 1``, ``12-34-56``, ``4512B``), not
    a count ("code 4 digits") nor a year after a name that needs no digits."""
    if not _word_start(m, text):
        return None
    key = m.group("key").lower()
    start, end = m.span("v")
    value = text[start:end]
    if text[end : end + 12].lstrip().lower().startswith(_COUNT_WORDS):
        return None
    digits = sum(c.isdigit() for c in value)
    groups = re.split(r"[ .\-–]", value)
    if key.startswith(("cvv", "cvc", "cid", "csc", "cvn", "card", "security")):
        return (start, end) if value.isdigit() and 3 <= len(value) <= 4 else None
    if "combination" in key or key.startswith("combo"):
        plain = key in ("combination", "combo")  # "combo 2" is a menu, "safe combo" a lock
        if plain:
            ok = len(groups) >= 3 and digits >= 5 and all(g.isdigit() for g in groups)
        else:
            ok = all(g.isdigit() for g in groups) and (len(groups) >= 2 or 3 <= digits <= 8)
        return (start, end) if ok else None
    if not 4 <= digits <= 12:
        return None
    if key.startswith("pin") and m.end("key") < m.start("link") and not m.group("link").strip():
        return None  # "pin it to version 2024.1": a verb; "PIN von Oma: 205304" has its colon
    if not m.group("link").strip() and re.fullmatch(r"(?:19|20)\d\d", value):
        return None  # "the access code 2024 campaign": a year, not a code
    if len(groups) > 1 and not all(len(g) <= 4 for g in groups):
        return None
    return start, end


def _check_totp_seed(m: re.Match[str], text: str) -> tuple[int, int, str] | None:
    """A TOTP seed after "2FA secret", "MFA seed", "TOTP key": 16+ characters of one case,
    contiguous or in groups of one length (``JBSW Y3DP EHPK 3PXP``, the last may be shorter);
    a group in the other case or of another length is prose."""
    if not _word_start(m, text):
        return None
    start = m.start("secret")
    groups = [g.group() for g in re.finditer(r"\S+", text[start : m.end("secret")])]
    lettered = [g for g in groups if any(c.isalpha() for c in g)]
    if not lettered:
        return None
    upper = lettered[0].upper() == lettered[0]
    if not upper and lettered[0].lower() != lettered[0]:
        return None
    end = start
    chars = 0
    for i, word in enumerate(groups):
        if any(c.isalpha() for c in word) and (word.upper() == word) != upper:
            break
        if len(groups) > 1 and len(word) != len(groups[0]):
            nxt = groups[i + 1] if i + 1 < len(groups) else ""
            other_case = any(c.isalpha() for c in nxt) and (nxt.upper() == nxt) != upper
            last = (not nxt or other_case) and len(word) < len(groups[0])
            if not last or not (upper or any(c.isdigit() for c in word)):
                break
        end = text.index(word, end) + len(word)
        chars += len(word)
    return (start, end, "token") if chars >= 16 else None


def _check_strong_in_parens(m: re.Match[str], text: str) -> tuple[int, int] | None:
    """ "my Gmail password (Snowfall2023)": a value in parentheses right after the name, with a
    password's shape (letters and digits, eight or more; or a symbol) and not code
    (``hash_password (x)``)."""
    i = m.start()
    if i > 0 and (text[i - 1].isalnum() or text[i - 1] in "_."):
        return None
    start, end = m.span("secret")
    value = text[start:end]
    if _HASH_WORDS.fullmatch(value) or not any(c.isalpha() for c in value):
        return None
    has_digit = any(c.isdigit() for c in value)
    symbol = any(c in "!@#$%^&*+=?~" for c in value)
    return (start, end) if (has_digit and len(value) >= 8) or (symbol and len(value) >= 6) else None


_QUOTES = "\"'“”‘’`"


def _check_value_as_password(m: re.Match[str], text: str) -> tuple[int, int] | None:
    """ "she typed in 'iloveyou123' as her password", "MoonLight77 is my password": the value
    stands before the name; quoted, or with a password's shape."""
    j = m.start()
    while j > max(0, m.start() - 3) and text[j - 1] in " \t":
        j -= 1
    if j > 0 and text[j - 1] in _QUOTES:
        lo = max(0, j - 130)
        opening = max(text.rfind(c, lo, j - 1) for c in _QUOTES + "\n")
        if opening < 0 or text[opening] == "\n" or j - 1 - opening < 2:
            return None
        start, end = opening + 1, j - 1
        return (start, end) if _quoted_password(text[start:end]) else None
    start, end, lo = j, j, max(0, j - 128)
    while start > lo and not text[start - 1].isspace() and text[start - 1] not in _QUOTES:
        start -= 1
    if end - start < 4 or (start > 0 and not text[start - 1].isspace()):
        return None
    while end > start and text[end - 1] in ",;:!?)":
        end -= 1
    value = text[start:end]
    if not _strong_password(value) or _wordish(value) or value[0] in "([{<":
        return None
    if not any(c.isdigit() for c in value) and not any(c in "!@#$%^&*+=?~" for c in value):
        return None  # "OAuth as the password", "MFA is the password"
    return start, end


def _check_markup_key(m: re.Match[str], text: str) -> tuple[int, int, str] | None:
    """``**password:** X``, ``__Password__ - X``, ``<b>Password:</b> X``, ``password</b>: X``:
    a credential's name set off by Markdown or HTML, then its value (judged as in prose)."""
    if m.group("c1") is None and m.group("c2") is None:
        return None
    start, end = m.span("bv")
    joint = text[m.end("key") : start]
    return _prose_value(
        re.sub(r"[\s_\-]+", " ", m.group("key").lower()), text, start, end, quoted=False,
        joint=joint,
    )


def _check_cell_pair(m: re.Match[str], text: str) -> tuple[int, int, str] | None:
    """``<td>password</td><td>X</td>``, ``<dt>API key</dt><dd>X</dd>``: a value in the cell
    after one that names a credential."""
    key = text[m.start("k") : m.end("k")].strip().rstrip(":").strip()
    kind = _cell_secret(re.sub(r"\s+", "_", key), text[m.start("v") : m.end("v")])
    return None if kind is None else (*m.span("v"), kind)


def _cell_secret(name: str, value: str) -> str | None:
    """:func:`keyed_secret` for a table cell, which may point elsewhere instead ("(in
    vault)", "see 1Password", "ask ops")."""
    v = value.strip()
    if not v or not _has_alnum(v) or v[0] in "([{<" or v.split()[0].lower() in _POINTER_WORDS:
        return None
    words = v.split()
    if len(words) > 1 and (
        _VAULT_WORDS.search(v)
        or len(words) < 3
        or not all(w.isalpha() for w in words)
        or sum(_wordish(w) for w in words) > 1
    ):
        return None  # "Min. 12 characters", "(in vault)": a note, not a passphrase
    return keyed_secret(name, v)


def _table_cells(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """The cells of the Markdown table row ``text[start:end]`` (spans without blanks)."""
    line = text[start:end]
    bars = [i for i, c in enumerate(line) if c == "|" and (i == 0 or line[i - 1] != "\\")]
    bounds = [-1, *bars, len(line)]
    cells = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        s, e = a + 1, b
        while s < e and line[s] in " \t`*":
            s += 1
        while e > s and line[e - 1] in " \t`*":
            e -= 1
        cells.append((start + s, start + e))
    if line.lstrip().startswith("|"):
        cells = cells[1:]
    if line.rstrip().endswith("|"):
        cells = cells[:-1]
    return cells


_PLACE_HEADER = re.compile(
    r"(?i)\b(?:doors?|gates?|alarms?|locks?|lockers?|keypads?|entrances?|entry|garages?"
    r"|safes?)\b"
)
"""A table header that names doors or locks: a "Code" column beside it holds their codes."""


def _check_table_column(m: re.Match[str], text: str) -> list[tuple[int, int, str]] | None:
    """A Markdown table whose header names a credential (``| service | user | password |``):
    the cells under that header in the rows that follow."""
    hs, he = m.span("head")
    if text[hs:he].lstrip().startswith("||"):
        # a wiki header marks its cells with "||" ("|| Service || Password ||")
        wiki = text[hs:he].replace("||", "| ")
        head = [(hs + s, hs + e) for s, e in _table_cells(wiki, 0, he - hs)]
    else:
        head = _table_cells(text, hs, he)
    columns = {}
    for j, (s, e) in enumerate(head):
        name = re.sub(r"\s+", "_", text[s:e].strip())
        k = _norm_key(name)
        if name and (_names_credential(k) or k == "pin" or k.endswith(_CODE_KEY_ENDINGS)):
            columns[j] = name
    if not columns and any(_PLACE_HEADER.search(text[s:e]) for s, e in head):
        for j, (s, e) in enumerate(head):
            if _norm_key(text[s:e].strip()) in ("code", "codes", "pin", "combination"):
                columns[j] = "door_code"  # | Door | Code |: the codes of doors and alarms
    if not columns:
        return None
    out: list[tuple[int, int, str]] = []
    pos, stop = m.start("rows"), m.end("rows")
    while pos < stop:
        pos += 1  # past the line break
        nl = text.find("\n", pos, stop)
        le = stop if nl < 0 else nl
        cells = _table_cells(text, pos, le)
        for j, name in columns.items():
            if j < len(cells):
                s, e = cells[j]
                cell = text[s:e]
                if cell.lower() == name.lower():
                    continue  # the header again
                kind = _cell_secret(name, cell)
                if kind is not None:
                    out.append((s, e, kind))
        pos = le
    return out or None


def _check_wifi_qr(m: re.Match[str], text: str) -> tuple[int, int] | None:
    """``WIFI:T:WPA;S:Cafe;P:secret;;``: the ``P:`` field of a Wi-Fi QR code."""
    start, end = m.span("q" if m.group("q") is not None else "secret")
    return None if _stated_non_value(text[start:end]) else (start, end)


def _check_otp_call(m: re.Match[str], text: str) -> tuple[int, int] | None:
    """A base32 seed given to a TOTP / HOTP constructor: in one case, and a lower-case one
    with a digit (``TOTP('thisisnotaseedatall')`` is a word)."""
    start, end = m.span("secret")
    value = text[start:end].rstrip("=")
    if value.isupper() or (value.islower() and any(c.isdigit() for c in value)):
        return start, end
    return None


def _check_url_password(m: re.Match[str], text: str) -> tuple[int, int] | None:
    """``scheme://user:PASSWORD@host`` (the user may be an unescaped e-mail address:
    ``imaps://me@acme.io:PASSWORD@imap.host``), not ``user:${DB_PASSWORD}@`` (a template).
    A password may hold an unescaped ``?`` or ``#`` (``mongodb://admin:pa?ss#1@db``), but a port
    with a query or a fragment behind it is no password (``http://host:8080?to=bob@example.org``).
    """
    start, end = m.span("secret")
    value = text[start:end]
    if _TEMPLATE_VALUE.fullmatch(value):
        return None
    if m.group("mail") is not None and (value.isdigit() or "." not in m.group("mail")):
        return None  # "ssh://git@host:22@…": a port; the user part must be an e-mail address
    if "?" in value or "#" in value:
        head = re.split(r"[?#]", value, maxsplit=1)[0]
        if not head or head.isdigit() or _QUERY_PARAM.search(value):
            return None  # "host:8080?to=bob@…": a port and a query, not "pa&ss?@" nor "p#==@"
    if _placeholder_word(value):
        return None  # "postgres://USER:PASSWORD@HOST/DB": a template's words
    return start, end


_QUERY_PARAM = re.compile(r"[?&#;][A-Za-z_][\w.\-]{0,64}=")
"""A query parameter (``?to=``, ``&page=``) inside what would be a URL's password."""
_PLACEHOLDER_WORDS = frozenset(
    "password passwd pass pwd pw secret token apikey key passphrase changeme "
    "yourpassword mypassword userpassword dbpassword yoursecret yourtoken yourapikey "
    "xxx xxxx xxxxx".split()
)


def _placeholder_word(value: str) -> bool:
    """A value that only names what belongs there (``PASSWORD``, ``your_password``,
    ``<db-pass>``), as documentation and templates write it."""
    letters = re.sub(r"[^a-z]", "", value.lower())
    return (
        letters in _PLACEHOLDER_WORDS
        and not any(c.isdigit() for c in value)
        and (value.isupper() or value.islower() or value.istitle() or value[0] in "<{[")
    )


def _check_named_element(m: re.Match[str], text: str) -> tuple[int, int, str] | None:
    """``<property name="hibernate.connection.password">X</property>``, ``<entry
    key="api.token">X</entry>``: an element's text under the name its attribute gives,
    judged as by :func:`keyed_secret`."""
    kind = keyed_secret(m.group("k"), m.group("v"))
    return None if kind is None else (*m.span("v"), kind)


def _check_named_pair(m: re.Match[str], text: str) -> tuple[int, int, str] | None:
    """``- name: DB_PASSWORD`` / ``value: X`` (a Kubernetes or ECS environment entry,
    ``{"name": "API_TOKEN", "value": "X"}``): the value of a pair whose name names a
    credential, judged as by :func:`keyed_secret`."""
    if not _word_start(m, text):
        return None
    g = "q" if m.group("q") is not None else "b"
    start, end = m.span(g)
    kind = keyed_secret(text[m.start("k") : m.end("k")], text[start:end])
    return None if kind is None else (start, end, kind)


_SPOKEN_WORDS = (
    r"zero|oh|one|two|three|four|five|six|seven|eight|nine|niner"
    # digits in German, French, Spanish and Italian, by first letter (one branch each)
    r"|(?=[acdefhnoqstuvz])(?:acht|c(?:ero|uatro|inco|inq(?:ue)?)|d(?:rei|eux|os|ue)|eins"
    r"|f(?:ü|ue)nf|huit|n(?:ull|eun|euf|ueve|ove)|o(?:cho|tto)|quat(?:re|tro)"
    r"|s(?:echs|ieben|ept|eis|iete|ette|ei)|t(?:rois|res?)|uno|vier|z(?:wei|éro))"
    r"|alfa|alpha|bravo|charlie|delta|echo|foxtrot|golf|hotel|india|juliett?|kilo|lima|mike"
    r"|november|oscar|papa|quebec|romeo|sierra|tango|uniform|victor|whiske?y|x-?ray|yankee|zulu"
    r"|hash(?:tag)?|pound(?:[ \t]sign)?|at[ \t](?:sign|symbol)|dollar(?:[ \t]sign)?"
    r"|exclamation(?:[ \t](?:mark|point))?|bang|star|asterisk|dash|hyphen|minus|underscore"
    r"|dot|period|plus|equals(?:[ \t]sign)?|percent(?:[ \t]sign)?|ampersand|caret|tilde"
    r"|(?:back)?slash|question[ \t]mark|colon|semicolon|space"
)
_SPOKEN_CHAR = (
    r"(?:(?:capital|uppercase|upper[ \t]case|upper|lowercase|lower[ \t]case|lower|small|big|cap)"
    r"[ \t]{1,3}[a-z](?:[ \t]{1,3}as[ \t]{1,3}in[ \t]{1,3}[a-z]{2,12})?"
    r"|(?:" + _SPOKEN_WORDS + r")|[a-z](?:[ \t]{1,3}as[ \t]{1,3}in[ \t]{1,3}[a-z]{2,12})?|\d)"
    r"(?![\w\-])"
)
"""One character of a password read out: "capital K", "x", "nine", "hash", "kilo", "P as
in Peter" (regex, lower case)."""


def _check_dictated(m: re.Match[str], text: str) -> tuple[int, int, str] | None:
    """ "the password is capital K, x, nine, hash, …", "Die PIN ist vier sieben null drei",
    "she spelled it: P as in Peter, 4, …": four or more characters read out one by one after
    a password's or a PIN's name, or right after "spelled it"."""
    if not _word_start(m, text):
        return None
    start, end = m.span("secret")
    if m.group("key").startswith("spel") and text[m.end("key") : start].strip() not in (":", "="):
        return None  # "spelled her surname: K, O, …" names what was spelled: not a password
    n = 1 + len(re.findall(r"(?:[ \t]{0,3}[,;][ \t]{0,3}|[ \t]{1,3})(?:(?:then|and)[ \t]{1,3})?",
                           text[start:end].lower()))
    words = re.findall(_SPOKEN_CHAR, text[start:end].lower())
    return (start, end, "password") if n >= 4 and len(words) >= 4 else None


_SECURITY_CONTEXT = re.compile(
    r"(?i)security|question|answer|memorable|verification|secret|recovery|bank"
)
"""Words that say a question's answer is a login's security answer."""


def _check_security_answer(m: re.Match[str], text: str) -> tuple[int, int, str] | None:
    """ "security question: mother's maiden name = Kowalska", "first pet: Biscuit": the answer
    to a security question, when the text nearby speaks of security questions or answers
    ("my first car was a Volvo" is a story)."""
    if not _word_start(m, text):
        return None
    if _SECURITY_CONTEXT.search(text, max(0, m.start() - 200), m.start()) is None:
        return None
    start, end = m.span("v")
    value = text[start:end]
    if _stated_non_value(value) or _wordish(value) or value.lower() in _POINTER_WORDS:
        return None
    return start, end, "password"


def _check_license_key(m: re.Match[str], text: str) -> tuple[int, int, str] | None:
    """ "Photoshop serial number 1330-1004-…", "license code: 4F7K-…": a key of four or more
    dash-separated groups named as a license, a product key or a software serial; a device's
    serial number (one group) is no secret."""
    if not _word_start(m, text):
        return None
    start, end = m.span("secret")
    value = text[start:end]
    return (start, end, "token") if _DIGIT.search(value) else None


_QUALIFIER_STOP = re.compile(
    r"(?i)id|ids|name|names|fingerprint|hash|type|length|size|format|path|file|location"
    r"|expir\w*|policy|rotation|version|count|prefix|suffix|usage|scope|header|field|ref|url"
    r"|endpoint|issuer|algorithm|alg|is|was|are|were|and|or|the|a|an|to|for|of|in|on|with"
)


def _check_qualified_name(m: re.Match[str], text: str) -> tuple[int, int, str] | None:
    """ "api key part 1: kglsc5AWF6nfyaJTaYVm", "password prod db: Kx9#mPq2": a credential's
    name, one or two short words, a colon and a value; with the words in between only a value
    with a password's or a token's shape counts ("password reset: tomorrow", "key fingerprint:
    SHA256:…", "token type: bearer" are not)."""
    if not _word_start(m, text):
        return None
    if any(_QUALIFIER_STOP.fullmatch(w) for w in text[m.start("qual") : m.end("qual")].split()):
        return None
    start, end = m.span("bv")
    end = _strip_sentence_end(text, start, end)
    value = text[start:end]
    if _stated_non_value(value) or ":" in value or _SRI_PREFIX.match(value):
        return None
    key = _norm_key(m.group("key"))
    if _password_key(key):
        return (start, end, "password") if _shaped_password(value) else None
    min_len = 20 if key in ("key", "token", "secret") else 16
    return (start, end, "token") if _looks_random(value, min_len=min_len) else None


def _check_product_key(m: re.Match[str], text: str) -> tuple[int, int] | None:
    """A product key or a license line: upper-case groups of one length (five groups of five,
    four to eight of four) with digits and letters mixed in two groups or more and a letter
    that is no hex digit (hex groups are ids and hashes)."""
    value = m.group()
    groups = value.split("-")
    mixed = sum(1 for g in groups if re.search(r"[A-Z]", g) and re.search(r"\d", g))
    if mixed < 2 or not re.search(r"[G-Z]", value):
        return None
    return m.span()


_SERVICE_NAMES = (
    r"pagerduty|datadog|new[ \t]?relic|heroku|circleci|travis|netlify|vercel|cloudflare"
    r"|digitalocean|linode|mapbox|algolia|asana|airtable|notion|trello|okta|auth0|mailgun"
    r"|mailjet|postmark|mandrill|bugsnag|rollbar|pusher|mixpanel|amplitude|intercom|zendesk"
    r"|freshdesk|hubspot|contentful|pinecone|cohere|replicate|elevenlabs|deepl|openweather"
    r"|weatherapi|browserstack|saucelabs|snyk|sonarcloud|sonarqube|codecov|coveralls"
)
"""Services whose API tokens have no prefix of their own (regex alternation, lower case)."""
_SERVICE_TRIGGERS = (
    "pagerduty", "datadog", "relic", "heroku", "circleci", "travis", "netlify", "vercel",
    "cloudflare", "digitalocean", "linode", "mapbox", "algolia", "asana", "airtable", "notion",
    "trello", "okta", "auth0", "mailgun", "mailjet", "postmark", "mandrill", "bugsnag",
    "rollbar", "pusher", "mixpanel", "amplitude", "intercom", "zendesk", "freshdesk", "hubspot",
    "contentful", "pinecone", "cohere", "replicate", "elevenlabs", "deepl", "openweather",
    "weatherapi", "browserstack", "saucelabs", "snyk", "sonar", "codecov", "coveralls",
)  # fmt: skip


def _check_service_token(m: re.Match[str], text: str) -> tuple[int, int] | None:
    """A random-looking value right after a service's name ("Datadog: 3f6b…", "PagerDuty =
    u+8Va…"): that service's token; not a URL, a path or an id made of words."""
    if not _word_start(m, text):
        return None
    start, end = m.span("secret")
    end = _strip_sentence_end(text, start, end)
    value = text[start:end]
    if not _looks_random(value, min_len=16) or "/" in value or "." in value.strip("."):
        return None
    if _stated_non_value(value):
        return None
    return start, end


_HEX_CREDENTIAL = re.compile(
    r"(?i)(?<![a-z])(?:api[ _\-]?keys?|secrets?|credentials?|tokens?|passwords?|passwd"
    r"|(?:global|account|auth|access|private|signing|master|admin|license|licence|integration"
    r"|service|app|client|write|ingest|routing|webhook)[ _\-]keys?"
    r"|priv(?:ate)?keys?|priv[ _\-]keys?|(?:ethers\.|new[ \t]{1,3})wallet)(?![a-z])"
)
_HEX_NOT_CREDENTIAL = re.compile(
    r"(?i)(?<![a-z])(?:sha\w{0,6}|md5|hash(?:es|ed)?|digest|checksum|commit(?:s|ted)?|etag"
    r"|fingerprint|rev(?:ision)?|build|trace|span|request|correlation|uuid|merged?|bisect"
    r"|object|blob|tree|fixed|cid|ipfs|nonce|salt)(?![a-z])"
)


def _named_hex_spans(text: str, runs: Sequence[re.Match[str]]) -> list[tuple[int, int]]:
    """Runs of 32–128 hex digits in a line that names a credential (an API key, a secret, a
    token: "`dbc980e0…` is the Cloudflare global key") and no hash, commit or id within 80
    characters (hex runs are mostly digests: "commit 3f6b…", "sha256: …", "trace id …").
    The names are found once per text and looked up per run."""
    hexes = [
        m.span()
        for m in runs
        if 32 <= m.end() - m.start() <= 128 and _HEX_RUN.fullmatch(text, m.start(), m.end())
    ]
    if not hexes:
        return []
    named = [m.start() for m in _HEX_CREDENTIAL.finditer(text)]
    if not named:
        return []
    other = [m.start() for m in _HEX_NOT_CREDENTIAL.finditer(text)]
    out = []
    for start, end in hexes:
        lo = max(0, start - 80)
        lo = max(lo, text.rfind("\n", lo, start) + 1)
        nl = text.find("\n", end, end + 80)
        hi = nl if nl >= 0 else min(len(text), end + 80)
        i = bisect.bisect_left(named, lo)
        if i == len(named) or named[i] >= hi:
            continue
        j = bisect.bisect_left(other, lo)
        if j < len(other) and other[j] < hi:
            continue
        out.append((start, end))
    return out


_HEX_RUN = re.compile(r"[0-9a-f]{32,128}|[0-9A-F]{32,128}")


def _readable_base64(value: str) -> bool:
    """``value`` is base64 (standard or URL-safe) of readable text with no credential's name
    in it: a sentence or a JSON object (``eyJldmVudCI6…`` → ``{"event": …}``), data rather
    than a key. ``user:password`` pairs and texts that name a secret do not count."""
    raw = value.rstrip("=")
    if len(raw) % 4 == 1:
        return False
    try:
        data = base64.b64decode(
            raw + "=" * (-len(raw) % 4),
            altchars=b"-_" if "-" in raw or "_" in raw else None,
            validate=True,
        ).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return False
    if not data.isprintable() or _READABLE_SECRET.search(data):
        return False
    structured = data.startswith(("{", "[")) or data.count(" ") >= 2
    return structured and len(re.findall(r"[A-Za-z]{3,}", data)) >= 2


_READABLE_SECRET = re.compile(
    r"(?i)pass|pwd|secret|token|auth|api.?key|\bkey\b|cred|\bsig\b|signature|session|cookie"
)


# ----------------------------------------------------------------------------- rules
class Rule(NamedTuple):
    """One detection rule.

    Attributes:
        kind: Placeholder type (``[REDACTED:<kind>]``); a ``check`` may name another.
        pattern: Compiled regex.
        check: ``check(match, text)`` → span to redact (optionally with its kind), a list
            of ``(start, end, kind)`` spans, ``None`` to reject the match, or an ``int``:
            reject it and search again from there (see :data:`Check`). ``text`` is always
            the original text (``match`` may come from the lower-cased copy, or ``text`` be
            the normalised copy of layer 3). Without a check the named group ``secret`` (or
            ``bare``) is redacted if it took part, else the whole match.
        lower: Match against an ASCII-lower-cased copy (same positions): the regex is
            written in lower case and matches any case.
        anchors: With ``at_tokens``: the literals the regex starts with.
        at_tokens: Try the regex (``match``) only at the start of each run of 10 or more token
            characters (``[A-Za-z0-9_-+/.~]``) that begins with one of ``anchors``, instead of
            ``finditer`` over the whole text; for vendor token shapes, which the one scan for
            runs then serves together. Every other rule should start with a literal (or an
            alternation of literals) so that the regex engine skips ahead quickly.
        triggers: Run the rule only on texts that hold one of these substrings (in the
            lower-cased copy with ``lower``): a substring test is much cheaper than a regex
            that starts at every common letter.
    """

    kind: str
    pattern: re.Pattern[str]
    check: Check | None = None
    lower: bool = False
    anchors: tuple[str, ...] = ()
    at_tokens: bool = False
    triggers: tuple[str, ...] = ()


def _bounded(text: str, start: int) -> bool:
    """``start`` begins a token (no token character right before it)."""
    return start == 0 or text[start - 1] not in _TOKEN_CHAR_SET


def _word_start(m: re.Match[str], text: str) -> bool:
    return m.start() == 0 or not text[m.start() - 1].isalnum()


def _secret_span(m: re.Match[str]) -> tuple[int, int]:
    if "secret" in m.re.groupindex and m.group("secret") is not None:
        return m.span("secret")
    if "bare" in m.re.groupindex and m.group("bare") is not None:
        return m.span("bare")
    return m.span()


def _check_word_start(m: re.Match[str], text: str) -> tuple[int, int] | None:
    return _secret_span(m) if _word_start(m, text) else None


def _check_option_value(m: re.Match[str], text: str) -> tuple[int, int] | None:
    """A command's password option (``mysql -pX``, ``sshpass -p X``), not a variable that the
    shell fills in (``-p$MYSQL_PWD``)."""
    if not _word_start(m, text):
        return None
    start, end = _secret_span(m)
    return None if _TEMPLATE_VALUE.fullmatch(text[start:end]) else (start, end)


def _check_bounded(m: re.Match[str], text: str) -> tuple[int, int] | None:
    return _secret_span(m) if _bounded(text, m.start()) else None


def _check_bounded_shape(m: re.Match[str], text: str) -> tuple[int, int] | None:
    return _check_token_shape(m, text) if _bounded(text, m.start()) else None


def _check_mailchimp(m: re.Match[str], text: str) -> tuple[int, int] | None:
    start = m.start() - 32
    return (start, m.end()) if start >= 0 and _bounded(text, start) else None


def _check_azure_client_secret(m: re.Match[str], text: str) -> tuple[int, int] | None:
    start = m.start() - 4
    return (start, m.end()) if start >= 0 and _bounded(text, start) else None


def _check_telegram(m: re.Match[str], text: str) -> tuple[int, int] | None:
    """``123456789:AA…`` as a word, or glued to the ``bot`` of a Bot API URL
    (``https://api.telegram.org/bot123456789:AA…/sendMessage``)."""
    start = m.start()
    lo = max(0, start - 10)
    while start > lo and text[start - 1].isdigit():
        start -= 1
    if m.start() - start < 8:
        return None
    if start > 0 and text[start - 1].isalnum():
        glued = text[max(0, start - 3) : start].lower() == "bot"
        if not glued or (start > 3 and text[start - 4].isalnum()):
            return None
    return start, m.end()


def _check_cmdline_option(m: re.Match[str], text: str) -> tuple[int, int] | None:
    """``--password X`` / ``--db-password=X``: the option starts a word."""
    i = m.start()
    if i > 0 and not text[i - 1].isspace() and text[i - 1] not in "\"'":
        return None
    start, end = _secret_span(m)
    value = text[start:end]
    if _TEMPLATE_VALUE.fullmatch(value) or (value.endswith(":") and m.group("bare")):
        return None  # "--password $DB_PASSWORD", "--token\nHost: …"
    return start, end


def _check_prose_start(m: re.Match[str], text: str) -> tuple[int, int, str] | None:
    return _check_prose(m, text) if _word_start(m, text) else None


def _check_password_word_start(m: re.Match[str], text: str) -> tuple[int, int] | None:
    return _check_password_word(m, text) if _word_start(m, text) else None


_AUTH_SCHEMES = frozenset("bearer basic token digest apikey sso-key negotiate ntlm".split())
"""HTTP authentication schemes: the name of one is no credential."""


def _check_header(m: re.Match[str], text: str) -> tuple[int, int] | None:
    i = m.start()
    if i > 0 and (text[i - 1].isalnum() or text[i - 1] == "-"):
        if not text[max(0, i - 6) : i].lower().endswith("proxy-"):
            return None
    value = m.group("secret")
    if _TEMPLATE_VALUE.fullmatch(value):
        return None  # "Authorization: Bearer $TOKEN", "… Bearer <token>"
    if value.lower() in _AUTH_SCHEMES:
        return None  # "Authorization: Basic" names the scheme; no credential follows
    return m.span("secret")


def _check_signature(m: re.Match[str], text: str) -> tuple[int, int] | None:
    i = m.start()
    if i > 0 and (text[i - 1] in "?&;" or text[max(0, i - 6) : i].lower() in ("x-amz-", "x-goog")):
        return m.span("secret")
    return None


_VALUE = (  # a quote may be escaped (JSON inside a string: {\\"password\\": \\"…\\"})
    r"(?:\\?(?P<q>[\"'`])(?P<qv>(?:[^\"'`\n\\]|\\(?![\"'`])){1,512}+)\\?(?P=q)"
    r"|(?P<bv>(?:[^\s\"'`,;&<>()\[\]{}]|&(?![A-Za-z_][\w.\-]{0,30}=)){1,512}+))"
)
_VALUE_RE = re.compile(_VALUE)
_OPT_VALUE = (
    r"(?:(?P<q>[\"'])(?P<secret>[^\"'\n]{1,256}+)(?P=q)"
    r"|(?![\"'])(?P<bare>[^\s\"'\-][^\s\"']{0,255}+))"
)
_TOKEN_CHARS = r"A-Za-z0-9_\-+/=.~"
_TOKEN_CHAR_SET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_TOKEN_RUN = re.compile(r"[A-Za-z0-9_\-+/.~]{10,}+={0,2}")

_VENDOR_PREFIXES = (
    "hf_", "api_org_", "sk_live_", "sk_test_", "rk_live_", "rk_test_", "whsec_", "shpat_",
    "shpca_", "shppa_", "shpss_", "npm_", "dckr_pat_", "glpat-", "gldt-", "glft-", "glsoat-",
    "glrt-", "glcbt-", "glimt-", "glptt-", "gloas-", "glagent-", "glffct-",
    "GR1348941", "pypi-", "dop_v1_", "doo_v1_", "dor_v1_", "lin_api_", "lin_oauth_",
    "lin_wh_", "xoxe.xoxb-",
    "xoxe.xoxp-", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "SG.", "sq0csp-",
    "sq0atp-", "GOCSPX-", "ya29.", "AIza", "dapi", "glsa_", "sntrys_", "rubygems_",
    "pscale_tkn_", "pscale_pw_", "AGE-SECRET-KEY-1", "NRAK-", "NRJS-", "NRII-", "NRRA-", "NRAA-",
    "PMAK-", "pul-", "ATATT3", "ATCTT3", "key-", "dp.st.", "dp.pt.", "dp.sa.", "dp.ct.", "glc_",
    "CFPAT-", "figd_", "gsk_", "xai-", "r8_", "fo1_", "rnd_", "sntryu_", "xkeysib-", "LTAI",
)  # fmt: skip
_SLACK_PREFIXES = ("xoxa-", "xoxb-", "xoxp-", "xoxo-", "xoxs-", "xoxr-", "xoxe-", "xapp-")
_AWS_PREFIXES = (
    "AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ANPA", "ABIA", "ACCA", "AIPA", "ANVA", "APKA",
    "A3T",
)  # fmt: skip


def _alt(literals: Sequence[str]) -> str:
    return "(?:" + "|".join(re.escape(x) for x in literals) + ")"


DEFAULT_PATTERNS: tuple[Rule, ...] = (
    Rule(
        "password",  # credentials in a URL: scheme://user:PASSWORD@host (also "pa?ss#w@host")
        re.compile(
            r"://[^\s:/@\[\]\"'<>]{0,256}+(?P<mail>@[^\s:/@\[\]\"'<>]{1,256}+)?:"
            + _NOT_PLACEHOLDER
            + r"(?P<secret>[^\s/\[\]\"'<>]{1,256})@"
        ),
        _check_url_password,
    ),
    Rule(
        "bearer_token",  # Authorization: Bearer …, Proxy-Authorization: Basic …
        re.compile(
            r"authorization[\"']?\s{0,5}[:=]\s{0,5}[\"']?"
            r"(?:(?:bearer|basic|token|digest|apikey|sso-key|negotiate)\s{1,5})?+"
            + _NOT_PLACEHOLDER
            + r"(?P<secret>[^\s\"',;]{1,4096}+)"
        ),
        _check_header,
        lower=True,
    ),
    Rule(
        "bearer_token",  # "use Bearer 1234abcd5678"
        re.compile(
            r"bearer\s{1,5}"
            + _NOT_PLACEHOLDER
            + r"(?P<secret>(?:(?=[\w\-.~+/]{0,4096}\d)[\w\-.~+/]{8,4096}+"
            r"|[\w\-.~+/]{20,4096}+)=*)"
        ),
        _check_word_start,
        lower=True,
    ),
    Rule(
        "jwt",
        re.compile(r"eyJ[A-Za-z0-9_\-]{4,8192}+\.[A-Za-z0-9_\-]{4,8192}+\.[A-Za-z0-9_\-]{0,8192}+"),
        _check_bounded,
        anchors=("eyJ",),
        at_tokens=True,
    ),
    Rule(
        "api_key",  # OpenAI / Anthropic style: sk-…, checked for a random-looking body
        re.compile(r"(?P<secret>sk-(?P<body>[A-Za-z0-9_\-]{20,256}+))(?![A-Za-z0-9_\-])"),
        _check_bounded_shape,
        anchors=("sk-",),
        at_tokens=True,
    ),
    Rule(
        "api_key",  # Hugging Face, Stripe, Shopify, npm, Docker, GitLab, GitHub, … (prefix+body)
        re.compile(
            r"(?P<secret>" + _alt(_VENDOR_PREFIXES) + r"(?P<body>[A-Za-z0-9_\-.+/=]{16,512}+))"
        ),
        _check_bounded_shape,
        anchors=_VENDOR_PREFIXES,
        at_tokens=True,
    ),
    Rule(
        "api_key",  # Slack bot / user / app tokens: xoxb-<digits>-<digits>-<alnum>
        re.compile(
            _alt(_SLACK_PREFIXES) + r"(?=[A-Za-z\-]{0,8}\d)[A-Za-z0-9\-]{10,255}+(?![A-Za-z0-9_])"
        ),
        _check_bounded,
        anchors=_SLACK_PREFIXES,
        at_tokens=True,
    ),
    Rule(
        "api_key",  # AWS access key ids
        re.compile(_alt(_AWS_PREFIXES) + r"[A-Z0-9]{16,17}+(?![A-Za-z0-9])"),
        _check_bounded,
        anchors=_AWS_PREFIXES,
        at_tokens=True,
    ),
    Rule(
        "api_key",  # Twilio API key / account SIDs
        re.compile(r"(?:AC|SK)[0-9a-fA-F]{32}+(?![A-Za-z0-9])"),
        _check_bounded,
        anchors=("AC", "SK"),
        at_tokens=True,
    ),
    Rule(
        "api_key",  # Airtable personal access token: pat<14>.<64 hex>
        re.compile(r"pat[A-Za-z0-9]{14}\.[0-9a-f]{64}(?![A-Za-z0-9])"),
        _check_bounded,
        anchors=("pat",),
        at_tokens=True,
    ),
    Rule(
        "api_key",  # Braintree: access_token$production$<16>$<32 hex>
        re.compile(r"access_token\$(?:production|sandbox)\$[a-z0-9]{16}\$[0-9a-f]{32}(?![A-Za-z0-9])"),
        _check_bounded,
        triggers=("access_token$",),
    ),
    Rule(
        "api_key",  # Asana personal access token: 1/<id>:<32 hex>, 2/<id>/<id>:<32 hex>
        re.compile(r"(?<![\w/])[12]/\d{10,20}(?:/\d{10,20})?:[0-9a-f]{32}(?![A-Za-z0-9])"),
        triggers=("1/", "2/"),
    ),
    Rule(
        "api_key",  # Mailchimp: <32 hex>-us<dc>
        re.compile(r"-us\d{1,2}+(?<=[0-9a-f]{32}-us\d)(?![A-Za-z0-9])"),
        _check_mailchimp,
    ),
    Rule(
        "api_key",  # Telegram bot tokens 123456789:AA…
        re.compile(r":AA[A-Za-z0-9_\-]{33}+(?![A-Za-z0-9_\-])"),
        _check_telegram,
    ),
    Rule(
        "api_key",  # Azure AD client secrets: xxx8Q~…
        re.compile(r"Q~(?<=[A-Za-z0-9_~.\-]{3}\dQ~)[A-Za-z0-9_~.\-]{31,34}+(?![A-Za-z0-9_~.\-])"),
        _check_azure_client_secret,
    ),
    Rule(
        "webhook",  # Slack / Discord / Teams incoming webhooks: the path is the secret
        re.compile(
            r"(?:hooks\.slack\.com/(?:services|workflows|triggers)/"
            r"|discord\.com/api/webhooks/|discordapp\.com/api/webhooks/"
            r"|webhook\.office\.com/webhookb2/)"
            r"(?P<secret>[A-Za-z0-9_@/\-]{16,512}+)"
        ),
        lower=True,
    ),
    Rule(
        "webhook",  # Zapier / IFTTT / Make hooks: the last part of the path is the secret
        re.compile(
            r"(?:hooks\.zapier\.com/hooks/catch/\d{1,12}/"
            r"|maker\.ifttt\.com/trigger/[\w\-]{1,64}/(?:json/)?with/key/"
            r"|hook\.(?:[a-z]{2}\d\.)?(?:make|integromat)\.com/)"
            r"(?P<secret>[A-Za-z0-9_\-]{6,128}+)"
        ),
        triggers=("hooks.zapier", "maker.ifttt", "hook."),
    ),
    Rule(
        "signature",  # Azure SAS and other signed URLs: ?…&sig=…
        re.compile(
            r"(?:sig|signature)=" + _NOT_PLACEHOLDER + r"(?P<secret>[A-Za-z0-9%+/=_\-]{16,1024}+)"
        ),
        _check_signature,
        lower=True,
    ),
    Rule(
        "password",  # mysql -pSECRET, mysql -p'SECRET'
        re.compile(
            r"(?:mysql|mariadb)(?:dump|admin|import|check|show|sh|pump|-dump)?(?![\w\-])"
            r"[^\n|;&]{0,200}?(?<=\s)-p" + _NOT_PLACEHOLDER + _OPT_VALUE
        ),
        _check_option_value,
        lower=True,
    ),
    Rule(
        "password",  # sqlcmd -S sql01 -U sa -P X, bcp … -P X, mongosh -u admin -p X
        re.compile(
            r"(?:sqlcmd|bcp|osql|isql|mongo|mongosh|mongodump|mongorestore|mongoexport"
            # the gap skips no placeholder: "-P [REDACTED:…] -P x" stays as it is
            r"|mongoimport)(?![\w\-])[^\n|;&\[]{0,200}?\s-[pP]\s{1,5}" + _NOT_PLACEHOLDER
            + _OPT_VALUE
        ),
        _check_option_value,
        triggers=("sql", "bcp", "mongo"),
    ),
    Rule(
        "password",  # redis.conf / redis-server: requirepass X, masterauth X
        re.compile(
            r"(?:requirepass|masterauth)[ \t]{1,5}" + _NOT_PLACEHOLDER + _OPT_VALUE
        ),
        _check_option_value,
        lower=True,
        triggers=("requirepass", "masterauth"),
    ),
    Rule(
        "password",  # sshpass -p X, docker login -p X, redis-cli -a X, openssl enc -k X
        re.compile(
            r"(?:(?:sshpass|(?:docker|podman|buildah|nerdctl|registry)\s{1,5}login)"
            r"(?![\w\-])[^\n|;&]{0,200}?\s-p"
            # redis-cli's -p is the port, openssl's -k the passphrase
            r"|(?:redis-cli|keydb-cli)(?![\w\-])[^\n|;&]{0,200}?\s-a"
            r"|openssl(?![\w\-])[^\n|;&]{0,200}?\s-k)"
            r"\s{1,5}" + _NOT_PLACEHOLDER + _OPT_VALUE
        ),
        _check_option_value,
        lower=True,
    ),
    Rule(
        "password",  # --password X, --db-password=X, --token X, --api-key X
        re.compile(
            r"--(?!(?:ask|prompt|no|read|interactive|require|request)-)(?:[a-z0-9]{1,20}-){0,3}"
            r"(?:password|passwd|pass|pwd|passphrase|token|secret|api-key|apikey)"
            r"(?:=|[ \t]{1,5})" + _NOT_PLACEHOLDER + _OPT_VALUE
        ),
        _check_cmdline_option,
        lower=True,
    ),
    Rule(
        "password",  # curl -u user:pass, --user user:pass
        re.compile(
            r"(?:-u|--user)\s{1,5}[\"']?[^\s:\"'@]{1,128}+:"
            + _NOT_PLACEHOLDER
            + r"(?P<secret>[^\s\"']{1,256}+)"
        ),
        lambda m, t: _secret_span(m)
        if (m.start() == 0 or t[m.start() - 1].isspace())
        and not _TEMPLATE_VALUE.fullmatch(m.group("secret"))
        else None,
    ),
    Rule(
        "token",  # key = value, key: value, "key": "value" where the key names a secret
        re.compile(
            r"(?:pass(?:word|wd|phrase|code|key)?|pwd|pw|psk|secret|token|auth|credentials?"
            r"|base(?<=key_base)|base(?<=keybase)"  # Rails secret_key_base
            # a key ending in "key" names a credential only with a prefix (api_key, AccountKey)
            r"|key(?<=[a-z0-9_.\-]key)|sess(?:ion)?(?:[_\-.]?(?:id|key))?|sid(?<=[_.\-]sid)"
            r"|sig(?:nature)?)"
            r"(?P<close>(?:\\?[\"'\]]){0,2})(?P<sep>\s{0,5}(?::=|=>|==|::|[:=])"
            r"(?:[ \t]{0,5}(?:\r?\n[ \t]{0,12}){1,3}|\s{0,5}))"
            + _NOT_PLACEHOLDER  # the value: _VALUE_RE, read by the check
        ),
        _check_assignment,
        lower=True,
    ),
    Rule(
        "password",  # "the password for the staging db is hunter2", "API key: 3f6b…"
        re.compile(
            r"(?P<key>" + _PROSE_KEYWORDS + r"|pass)"
            # an aside before the value: "API token (read-only): …", "passphrase again: …",
            # "the passphrase, in case you need it, is …"
            r"(?:[ \t]{0,3}\([^()\n]{1,40}+\)|,[ \t]{1,3}[^,;:\n]{1,40}+,"
            r"|[ \t]{1,3}(?:" + "|".join(_ASIDE_WORDS) + "))?"
            r"(?:\s+(?:for|of|to|on|at)(?:\s+(?:[\w@./'\-]|:(?!\s)){1,40}+){1,4}?"
            r"(?:" + _PROSE_PUNCT + "|" + _PROSE_VERBS + "|" + _PROSE_ASIDE_JOINTS + r")"
            # a punctuation mark right after a one-word name is the assignment rule's
            r"|(?:(?<=[\s_\-]key)|(?<=[\s_\-]token)|(?<=pin)|(?<=code)|(?<=number)|(?<=answer)"
            r"|(?<=\))|" + "|".join(f"(?<={w})" for w in _ASIDE_WORDS) + ")"
            + _PROSE_PUNCT
            + "|" + _PROSE_VERBS + "|" + _PROSE_ASIDE_JOINTS + ")"
            + _NOT_PLACEHOLDER
            + r"(?:[\"'“‘`](?P<qv>[^\"'”’`\n]{1,256}+)[\"'”’`]"
            r"|(?P<bv>[^\s\"'“”‘’`,;()\[\]{}<>]{1,256}+))"
        ),
        _check_prose_start,
        lower=True,
        triggers=("pass", "pw", "pin", "secret", "key", "token", "answer", "code"),
    ),
    Rule(
        "password",  # "changed the root password to Kx9#mPq2", "set the secret_key to '…'"
        re.compile(
            r"(?:set|sets|setting|change|changed|changes|changing|reset|resets|resetting"
            r"|update|updated|updates|updating|rotate|rotated|rotates|rotating"
            r"|switch|switched|switches|switching)"
            r"\s{1,5}(?:(?:the|my|our|your|his|her|their|its|a|an)\s{1,5})?"
            r"(?:[\w\-]{1,30}\s{1,5}){0,2}?"
            r"(?P<key>(?:[\w\-]{0,30}[_\-])?(?:" + _PROSE_KEYWORDS + r"|pass|login))"
            # "… password from the default to X", "… from Summer2023 to X"
            r"(?:\s{1,5}from(?:\s{1,5}(?P<old>[^\s]{1,64}+)){1,2}?)?"
            r"\s{1,5}to\s{1,5}"
            + _NOT_PLACEHOLDER
            + r"(?:[\"'“‘`](?P<qv>[^\"'”’`\n]{1,256}+)[\"'”’`]"
            r"|(?P<bv>[^\s\"'“”‘’`,;()\[\]{}<>]{1,256}+))"
        ),
        _check_set_to,
        lower=True,
        triggers=(" to ", " to\t", " to\n"),
    ),
    Rule(
        "password",  # "the laptop login was changed to Kx9#mPq2" (the passive form)
        re.compile(
            r"(?P<key>password|passphrase|passcode|pass|pwd|pw|pin|login)"
            r"[ \t]{1,3}(?:(?:was|has[ \t]{1,3}been|had[ \t]{1,3}been|got|is[ \t]{1,3}now|is)"
            r"[ \t]{1,3})?(?:changed|set|reset|updated|switched|rotated)[ \t]{1,3}"
            r"(?:to|->|→|=>)[ \t]{1,3}"
            + _NOT_PLACEHOLDER
            + r"(?:[\"'“‘`](?P<qv>[^\"'”’`\n]{1,256}+)[\"'”’`]"
            r"|(?P<bv>[^\s\"'“”‘’`,;()\[\]{}<>]{1,256}+))"
        ),
        _check_set_to,
        lower=True,
        triggers=(" to ", "->", "→", "=>"),
    ),
    Rule(
        "password",  # "Passwort: Geheim123!", "le mot de passe est Soleil2024" (other languages)
        re.compile(
            r"(?P<key>" + _FOREIGN_KEYWORDS + r")"
            # a qualifier: "Contraseña del router", "пароль от вайфая", "mật khẩu wifi",
            # "a senha do banco de dados de homologação"
            r"(?:(?P<qual>(?:[ \t]{1,3}"
            r"(?!(?:" + _FOREIGN_LINKS + r"|" + _FOREIGN_PREPS + r")[ \t:])"
            r"[^\s:=：,;.!?\"'“”«»—–\d]{2,24}+)?[ \t]{1,3}(?P<prep>" + _FOREIGN_PREPS + r")"
            r"(?:(?:[ \t]{1,3}|(?<=['’]))[^\s:=：,;.!?\"'“”«»—–]{1,24}+){1,6}?"
            r"|(?:[ \t]{1,3}(?!(?:" + _FOREIGN_LINKS + r")[ \t:])[^\s:=：,;.!?\"'“”«»—–\d]{2,24}+)"
            r"{1,2}?)(?P<link>" + _FOREIGN_JOINT + r")"
            # with no qualifier the value may follow the name directly: "şifrem Istanbul34!"
            r"|(?P<link2>" + _FOREIGN_JOINT + r"|[ \t]{1,3}))"
            + _NOT_PLACEHOLDER
            + r"(?:[\"'“‘`«「](?P<qv>[^\"'”’`»」\n]{1,256}+)[\"'”’`»」]"
            r"|(?P<bv>[^\s\"'“”‘’`«»「」,;()\[\]{}<>。，；！？]{1,256}+))"
        ),
        _check_foreign_password,
        lower=True,  # an ASCII-lower-cased copy when lower() changes the length: hence ПАРОЛЬ
        triggers=(
            "passwort", "kennw", "schlüssel", "contras", "clave", "de passe", "a-passe",
            "a passe", "mdp", "clé", "cle wi", "cle wpa", "cle de", "code wifi", "code wi-fi",
            "code wlan", "code du wifi",
            "senha", "parola", "wacht", "ароль", "АРОЛЬ", "пароля", "hasł", "hasl", "haśle",
            "lösen", "losen", "adgang", "passord", "kodeord", "salas", "hesl", "jelsz", "ifre",
            "κωδικ", "συνθηματικό", "كلمة", "kata", "khẩu", "khau", "パスワード", "暗証番号",
            "密码", "密碼", "口令", "비밀번호", "패스워드",
        ),  # fmt: skip
    ),
    Rule(
        "password",  # "la password del router è …", "mi password es …" (the borrowed word)
        re.compile(
            r"(?P<key>password)(?P<qual>[ \t]{1,3}(?P<prep>" + _BORROWED_PREPS + r")"
            r"(?:(?:[ \t]{1,3}|(?<=['’]))[^\s:=,;.!?\"'“”«»—–]{1,24}+){1,3}?)?"
            r"(?P<link>[ \t]{1,5}(?:" + _BORROWED_LINKS + r")(?:[ \t]{0,3}:)?[ \t]{1,5})"
            + _NOT_PLACEHOLDER
            + r"(?:[\"'“‘`«](?P<qv>[^\"'”’`»\n]{1,256}+)[\"'”’`»]"
            r"|(?P<bv>[^\s\"'“”‘’`«»,;()\[\]{}<>]{1,256}+))"
        ),
        _check_foreign_password,
        lower=True,
        triggers=("password",),
    ),
    Rule(
        "password",  # <password>…</password>, <add key="ApiKey" value="…"/>, | password | … |
        re.compile(
            r"<(?P<k1>[\w:.\-]{1,64})>(?P<v1>[^<>\n]{1,512}+)</(?P=k1)>"
            r"|(?:key|name)\s{0,3}=\s{0,3}\"(?P<k2>[^\"\n]{1,64}+)\"\s{1,5}value\s{0,3}=\s{0,3}"
            r"\"(?P<v2>[^\"\n]{1,512}+)\""
            r"|\|[ \t]{0,5}(?P<k3>[^|\n]{1,64}?)[ \t]{0,5}\|[ \t]{0,5}(?P<v3>[^|\n \t]{1,256}+)"
            r"[ \t]{0,5}\|"
        ),
        _check_keyed_field,
        triggers=("pass", "pw", "secret", "token", "key", "auth", "cred", "sess", "pin"),
    ),
    Rule(
        "password",  # <property name="hibernate.connection.password">X</property>
        re.compile(
            r"<(?P<t>[\w:.\-]{1,64}+)[ \t]{1,5}"
            r"(?:[\w:.\-]{1,32}+[ \t]{0,3}=[ \t]{0,3}\"[^\"\n]{0,128}+\"[ \t]{1,5}){0,3}"
            r"(?:name|key|id)[ \t]{0,3}=[ \t]{0,3}[\"'](?P<k>[^\"'\n]{1,128}+)[\"']"
            r"[^<>\n]{0,256}+>" + _NOT_PLACEHOLDER + r"(?P<v>[^<>\n]{1,512}+)</(?P=t)>"
        ),
        _check_named_element,
        triggers=("name=", "key=", "id=", "name =", "key =", "id ="),
    ),
    Rule(
        "password",  # requests.get(url, auth=("bob", "hunter2!")), client.login("bob", "…")
        re.compile(
            r"(?:auth\s{0,3}=\s{0,3}[(\[]|(?:login|log_in|signin|sign_in|authenticate"
            r"|basic_auth|httpbasicauth)\s{0,3}\()\s{0,3}(?P<q1>[\"'])[^\"'\n]{1,128}+(?P=q1)\s{0,3},\s{0,3}"
            r"(?P<q2>[\"'])(?P<secret>[^\"'\n]{1,256}+)(?P=q2)"
        ),
        lambda m, t: None if _TEMPLATE_VALUE.fullmatch(m.group("secret")) else m.span("secret"),
        lower=True,
        triggers=("auth", "login", "log_in", "signin", "sign_in"),
    ),
    Rule(
        "password",  # DriverManager.getConnection(url, "sa", "…"), smtp.login(sender, "…")
        re.compile(
            r"(?:(?:get|create|open)_?connection|connect|login|log_in|signin|sign_in|pdo)\s{0,3}\("
            r"\s{0,3}(?:[^,()\n]{1,256}+,\s{0,3}(?P<q1>[\"'])[^\"'\n]{1,128}+(?P=q1)"
            r"|[a-z_][\w.]{0,64}+)\s{0,3},\s{0,3}"
            r"(?P<q2>[\"'])" + _NOT_PLACEHOLDER + r"(?P<secret>[^\"'\n]{1,256}+)(?P=q2)\s{0,3}[,)]"
        ),
        lambda m, t: m.span("secret") if _strong_password(m.group("secret"))
        and " " not in m.group("secret") and not _TEMPLATE_VALUE.fullmatch(m.group("secret"))
        else None,
        lower=True,
        triggers=("connect", "login", "log_in", "signin", "sign_in", "pdo"),
    ),
    Rule(
        "password",  # ds.setPassword("…"), builder.password("…"), with_api_key('…')
        re.compile(
            r"(?P<key>password|passwd|passphrase|pwd|secret|api_?key|token|credentials?)"
            r"[ \t]{0,3}\([ \t]{0,3}(?P<q>[\"'])" + _NOT_PLACEHOLDER
            + r"(?P<secret>[^\"'\n]{1,256}+)(?P=q)[ \t]{0,3}\)"
        ),
        _check_setter,
        lower=True,
        triggers=("(\"", "('", "( \"", "( '"),
    ),
    Rule(
        "password",  # Go's MySQL DSN: user:pass@tcp(host:3306)/db
        re.compile(r"@(?:tcp|unix|udp)\("),
        _check_go_dsn,
        triggers=("@tcp(", "@unix(", "@udp("),
    ),
    Rule(
        "password",  # "ssh into 10.0.0.5 as root with Tr0ub4dor&3": a password with no name
        re.compile(
            r"(?:log(?:ged|s)?[ \t-]?(?:in|on)|sign(?:ed|s)?[ \t-]?in"
            r"|ssh(?:ed)?(?:[ \t]+in(?:to)?)?|connect(?:ed|s)?|authenticate[ds]?)"
            r"(?:[ \t]+(?:to|into|on)[ \t]+[^\s,;]{1,128}+)?"
            r"[ \t]+as[ \t]+[\w.@\-]{1,64}+[ \t]+(?:with|using|and|/)[ \t]+"
            + _NOT_PLACEHOLDER
            + r"(?P<secret>[^\s\"'`,;()\[\]{}<>]{6,128}+)"
        ),
        _check_unnamed_password,
        lower=True,
        triggers=(" as ",),
    ),
    Rule(
        "password",  # "2FA backup codes: 1234-5678, 9012-3456", "recovery key: 4F7K-9QXM-…"
        re.compile(
            r"(?:(?:backup|recovery|2fa|mfa|one-time|one\s+time)\s{1,3}codes?"
            r"|(?:recovery|rescue)\s{1,3}keys?)"
            r"(?:[ \t]{0,3}\([^()\n]{1,40}+\))?"  # "backup codes (GitHub): …"
            # "backup codes for Google: …" (a colon or a verb must follow the qualifier)
            r"(?:[ \t]{1,3}(?:for|of|on|to)(?:[ \t]{1,3}[\w@.'’\-]{1,30}+){1,3}?"
            r"(?=[ \t]{0,3}[:=]|[ \t]{1,3}(?:are|is|were|was)\b))?"
            r"(?:\s{0,5}[:=]|\s{1,5}(?:are|is|were|was):?)?\s{1,5}"
            + _NOT_PLACEHOLDER
            + r"(?:[-*•][ \t]{1,3}|\d{1,2}[.)][ \t]{1,3})?"  # a list: one code per line
            # every code holds a digit: "backup codes are stored in 1Password" names none
            r"(?P<secret>(?=[a-z\-]{0,100}\d)[a-z0-9]{4,12}+(?:-[a-z0-9]{4,12}+){0,7}+"
            r"(?:(?:[ \t]{0,3}[,;]?[ \t]{1,3}|[ \t]{0,3}[,;]?[ \t]{0,3}\r?\n[ \t]{0,8}"
            r"(?:[-*•][ \t]{1,3}|\d{1,2}[.)][ \t]{1,3})?)(?=[a-z\-]{0,100}\d)"
            r"[a-z0-9]{4,12}+(?:-[a-z0-9]{4,12}+){0,7}+){0,23}+)(?![\w\-])"
        ),
        _check_word_start,
        lower=True,
        triggers=("code", "key"),
    ),
    Rule(
        "password",  # "root:Tr0ub4dor&3 on the NAS", "admin / Tr0ub4dor&3": a well-known
        # account and its password (a slash only with blanks around it: "admin/Users2" is a path)
        re.compile(
            r"(?:root|admin|administrator|sa|postgres|ubuntu|pi|deploy|ec2-user|oracle|sysadmin)"
            r"(?:[ \t]{0,2}:[ \t]{0,2}|[ \t]{1,2}/[ \t]{1,2})"
            + _NOT_PLACEHOLDER
            + r"(?P<secret>[^\s\"'`,;:()\[\]{}<>/]{6,64}+)(?![:/])"
        ),
        _check_unnamed_password,
        lower=True,
        triggers=(
            "root", "admin", "sa:", "sa :", "postgres", "ubuntu", "pi:", "pi :", "deploy",
            "ec2-user", "oracle", "sysadmin",
        ),  # fmt: skip
    ),
    Rule(
        "token",  # a URL whose user part is a key: https://<32 hex>@o1.ingest.sentry.io/2
        re.compile(r"://(?P<secret>[A-Za-z0-9_\-]{16,128}+)@"),
        lambda m, t: m.span("secret") if _looks_random(m.group("secret"), min_len=16) else None,
    ),
    Rule(
        "password",  # "log in as bob with password 'letmein123'" (a quoted value, no verb)
        re.compile(
            r"(?:password|passphrase|passcode|pwd)\s{1,5}"
            + _NOT_PLACEHOLDER
            + r"[\"'“‘`](?P<secret>[^\"'”’`\n]{1,256}+)[\"'”’`]"
        ),
        _check_quoted_password,
        lower=True,
        triggers=("pass", "pwd"),
    ),
    Rule(
        "token",  # "API key 3f6b2a9c8d7e4f1a0b5c6d7e8f9a0b1c" (a long random value, no verb)
        re.compile(
            r"(?:(?:" + _KEY_NAME_WORDS + r"|license|licence|product|activation|wifi|wi-fi|wpa2?"
            r"|unseal)[\s_\-]?(?:key|token)|token|secret)"
            r"(?:_[a-z0-9]{1,12})?\s{1,5}"  # ENV SECRET_KEY_BASE 8f7e…
            + _NOT_PLACEHOLDER
            + r"(?P<secret>[^\s\"'`,;()\[\]{}<>]{16,512}+)"
        ),
        _check_keyed_value,
        lower=True,
        triggers=("key", "token", "secret"),
    ),
    Rule(
        "password",  # "credentials: admin / Adm1n!Pass", "login bob:S3cret!"
        re.compile(
            r"(?:credentials?|creds|login|log-in|user\s{0,3}/\s{0,3}pass(?:word)?)"
            r"(?:\s{1,3}(?:for|of|to|on|at)(?:\s{1,3}[\w@.\-]{1,40}+){1,4}?"
            r"(?:\s{0,5}[:=]|\s{1,5}(?:is|are|was|were))"
            r"|\s{0,5}[:=]|\s{1,5}(?:is|are|was|were))?\s{1,5}"
            r"[^\s/:\"'`]{1,64}+\s{0,3}[/:]\s{0,3}"
            + _NOT_PLACEHOLDER
            + r"(?P<secret>[^\s\"'`,;()\[\]{}<>]{1,128}+)"
        ),
        _check_credential_pair,
        lower=True,
        triggers=("cred", "login", "log-in", "pass"),
    ),
    Rule(
        "seed_phrase",  # BIP-39 style recovery phrases: 12 to 24 short words after the name
        re.compile(
            r"(?:mnemonic|seed\s{1,3}(?:phrase|words)|recovery\s{1,3}(?:phrase|words)"
            r"|secret\s{1,3}recovery\s{1,3}phrase|backup\s{1,3}phrase|wallet\s{1,3}(?:seed|words))"
            r"(?:[ \t]{0,3}\([^()\n]{1,40}+\))?"  # "seed phrase (12 words): …"
            # "mnemonic for the test wallet: …"
            r"(?:[ \t]{1,3}(?:for|of|on|to|from)(?:[ \t]{1,3}[\w@.'’\-]{1,40}+){1,4}?)?"
            r"(?:\s{0,5}[:=]|\s{1,5}(?:is|was|are|were):?|\s{0,5}[-–—])?\s{1,5}"
            r"[\"'“‘`]?"  # a quoted phrase: "… is \"ribbon glance …\""
            r"(?P<secret>[a-z]{3,8}(?:(?:[ \t]{1,3}|[ \t]{0,3}[,\n][ \t]{0,3})[a-z]{3,8}){11,23}"
            # a numbered list: "1. ribbon 2. glance … 12. tunnel"
            r"|1[.)][ \t]{0,3}[a-z]{3,8}"
            r"(?:[ \t,;]{0,3}\n?[ \t]{0,3}\d{1,2}[.)][ \t]{0,3}[a-z]{3,8}){11,23})(?![a-z])"
        ),
        _check_word_start,
        lower=True,
        triggers=("mnemonic", "seed", "recovery", "backup", "wallet"),
    ),
    Rule(
        "password",  # "log in with password Hunter22" (mixed letters and digits, no verb)
        re.compile(
            r"(?:password|passphrase|passwd|pwd|pw)\s{1,5}"
            + _NOT_PLACEHOLDER
            + r"(?P<secret>(?=[^\s]{0,64}\d)(?=[^\s]{0,64}[a-z])[^\s\"',;()\[\]]{6,64}+)"
        ),
        _check_password_word_start,
        lower=True,
    ),
    Rule(
        "password",  # "SIP password 7734 for extension 201", "enter 4821 as the PIN"
        re.compile(
            r"(?:password|passcode|pin)\s{1,5}" + _NOT_PLACEHOLDER
            + r"(?P<secret>\d{4,12}+)(?![\d.,:/\-]\d)"
            r"|(?P<bare>\d{4,12}+)\s{1,3}as\s{1,3}(?:(?:the|your|my|a)\s{1,3})?"
            r"(?:password|passcode|pin)\b"
            # not "as the password length": a noun after it says what the number is
            r"(?![ \t]{1,3}(?!(?:for|on|to|of|at|and|in|from|with|when)\b)[a-z])"
        ),
        _check_word_start_digits,
        lower=True,
        triggers=("pass", "pin"),
    ),
    Rule(
        "password",  # htpasswd -b -c /etc/nginx/.htpasswd USER PASS (case matters: -B is bcrypt)
        re.compile(r"htpasswd(?P<rest>" + _ARGS + ")"),
        _check_htpasswd,
        triggers=("htpasswd",),
    ),
    Rule(
        "password",  # net use \\host\share PASS /user:DOMAIN\user, net user NAME PASS /add
        re.compile(r"net[ \t]{1,5}use(?P<user>r)?(?P<rest>" + _ARGS + ")"),
        _check_net_use,
        lower=True,
        triggers=("net",),
    ),
    Rule(
        "password",  # keytool -storepass X, jarsigner -keypass X, pscp -pw X, -pass pass:X
        re.compile(
            r"-(?:(?:src|dest|new)?(?:store|key)pass|password|passwd|pwd|pw|passphrase|pass"
            r"|passin|passout)[ \t]{1,5}" + _NOT_PLACEHOLDER + _OPT_VALUE
        ),
        _check_dash_option,
        lower=True,
        triggers=("pass", "-pw"),
    ),
    Rule(
        "password",  # ALTER USER system IDENTIFIED BY Or4cl3Sys, … IDENTIFIED WITH x BY '…'
        re.compile(
            r"(?:identified[ \t]{1,5}(?:with[ \t]{1,5}[\w$]{1,64}+[ \t]{1,5})?by[ \t]{1,5}"
            r"(?:password[ \t]{1,5})?"
            r"|set[ \t]{1,5}password(?:[ \t]{1,5}for[ \t]{1,5}[^\s=]{1,128}+)?[ \t]{0,5}=[ \t]{0,5}"
            r"(?:password[ \t]{0,3}\([ \t]{0,3})?)" + _NOT_PLACEHOLDER
            + r"(?:(?P<q>[\"'`])(?P<secret>[^\"'`\n]{1,256}+)(?P=q)|(?P<bare>[^\s;\"'`]{1,256}+))"
        ),
        _check_sql_password,
        lower=True,
        triggers=("identified", "password"),
    ),
    Rule(
        "password",  # ConvertTo-SecureString "X" -AsPlainText, … -String 'X'
        re.compile(
            r"convertto-securestring(?:[ \t]{1,5}-string)?[ \t]{1,5}" + _NOT_PLACEHOLDER
            + r"(?:(?P<q>[\"'])(?P<secret>[^\"'\n]{1,256}+)(?P=q)"
            r"|(?P<bare>[^\s\"'$(\-][^\s\"']{0,255}+))"
        ),
        lambda m, t: None if _TEMPLATE_VALUE.fullmatch(t[slice(*_secret_span(m))])
        else _secret_span(m),
        lower=True,
        triggers=("securestring",),
    ),
    Rule(
        "password",  # echo "X" | docker login --password-stdin, echo X | sudo -S …
        re.compile(
            r"(?:echo(?:[ \t]{1,3}-[ne]{1,2})?"
            r"|printf(?:[ \t]{1,3}(?:'%s(?:\\n)?'|\"%s(?:\\n)?\"))?)"
            r"[ \t]{1,5}" + _NOT_PLACEHOLDER
            + r"(?:\"(?P<d>[^\"\n]{1,256}+)\"|'(?P<s>[^'\n]{1,256}+)'"
            r"|(?P<b>[^\s\"'|;&$][^\s\"'|;&]{0,255}+))"
            r"[ \t]{0,5}\|[ \t]{0,5}(?P<cmd>[^\n|;&]{1,256}+)"
        ),
        _check_echo_pipe,
        lower=True,
        triggers=("echo", "printf"),
    ),
    Rule(
        "password",  # ~/.pgpass: host:port:database:user:password
        re.compile(
            r"(?m)^[ \t]{0,8}(?P<host>[A-Za-z0-9_.\-\[\]*/]{1,253}+):(?:\d{1,5}|\*):[^\s:]{1,128}+"
            r":[^\s:]{1,128}+:" + _NOT_PLACEHOLDER
            + r"(?P<secret>(?:[^\s:\\]|\\.){1,256}+)[ \t]*$"
        ),
        _check_pgpass,
        triggers=(":",),
    ),
    Rule(
        "password",  # define('DB_PASSWORD', '…'), os.getenv('API_KEY', '…'), Client('AC…', '…')
        re.compile(
            r"\(\s{0,3}(?:(?P<q1>[\"'])(?P<k>[^\"'\n]{1,64}+)(?P=q1)|[A-Za-z_][\w.]{0,64}+)"
            r"\s{0,3},\s{0,3}"
            r"(?P<q2>[\"'])" + _NOT_PLACEHOLDER + r"(?P<v>[^\"'\n]{1,256}+)(?P=q2)"
        ),
        _check_call_pair,
        triggers=("(",),
    ),
    Rule(
        "password",  # process.env.DB_PASS || 'F4llb4ckPw!', os.environ.get('PW') or '…'
        re.compile(
            r"(?:\|\||\?\?|[ \t]or)[ \t]{1,3}(?P<q>[\"'`])" + _NOT_PLACEHOLDER
            + r"(?P<v>[^\"'`\n]{1,256}+)(?P=q)"
        ),
        _check_fallback,
        triggers=("||", "??", " or "),
    ),
    Rule(
        "password",  # ${DB_PASSWORD:-fallback}
        re.compile(
            r"\$\{(?P<k>[A-Za-z_]\w{0,64}+):?[-=]" + _NOT_PLACEHOLDER + r"(?P<v>[^}\s]{1,256}+)\}"
        ),
        _check_shell_default,
        triggers=("${",),
    ),
    Rule(
        "card_number",  # 4111 1111 1111 1111, 3782 822463 10005, 5555-5555-5555-4444
        re.compile(
            r"(?<![\w.,/+\-*^])(?:[2-6]\d{3}(?P<sep>[ \-])\d{1,6}+(?:(?P=sep)\d{1,6}+){1,4}+"
            r"|[2-6]\d{12,18}+)(?![\w\-*^]|[.,/]\d)"
        ),
        _check_card,
    ),
    Rule(
        "password",  # PUK 84736251, keypad code: 7 3 9 1, safe combination is 12-34-56, CVV 382
        re.compile(
            r"(?P<key>puk(?:[ \t]?(?:code|number))?"
            r"|(?:sim|phone|screen|unlock|door|gate|alarm|garage|entry|entrance|lock|lockbox"
            r"|padlock|locker|safe|building|keypad|access|bike[ \t]lock)[ \t\-]?"
            r"(?:(?:disarm|arming|arm|master|user|panel|system|keypad|entry|door|front|back|side"
            r"|main|security)[ \t\-])?(?:code|pin|combination|combo)"
            r"|(?:unlock|lock|screen|lock[ \t]screen)[ \t\-]?pattern|pattern[ \t\-]?lock"
            r"|pin(?:[ \t\-]?(?:code|nummer|number|nr))?"
            r"|(?:safe|lock|locker|padlock|vault)[ \t]?combination|combination|combo|keypad"
            r"|digicode"
            r"|code[ \t](?:(?:du|de[ \t]la|de|d['’])[ \t]?)?(?:portail|porte|acc[eè]s|entr[ée]e"
            r"|immeuble|alarme|garage|cadenas|bo[iî]te)"
            r"|t[üu]r-?code|zugangscode|torcode|alarmcode|tresorcode|zahlenschloss"
            r"|c[óo]digo[ \t]de[ \t](?:acceso|la[ \t]puerta|entrada|alarma|seguridad"
            r"|la[ \t](?:alarma|caja[ \t]fuerte|cerradura|verja|reja))"
            r"|c[óo]digo[ \t]del[ \t](?:port[óo]n|portal|garaje|candado|edificio|timbre"
            r"|portero|interfono|trastero)"
            r"|codice[ \t](?:di[ \t]accesso|del[ \t]cancello|della[ \t]porta|d['’]accesso"
            r"|dell['’]allarme|del[ \t]portone|del[ \t]garage|della[ \t]cassaforte"
            r"|del[ \t]lucchetto|del[ \t]citofono|del[ \t]portoncino)"
            r"|deurcode|poortcode|toegangscode|kluiscode|garagecode|alarmcode"
            r"|kod[ \t](?:do[ \t](?:domofonu|drzwi|bramy|furtki|sejfu|garażu|klatki|kłódki)"
            r"|alarmu|dostępu|bramy|drzwi|sejfu)"
            r"|(?:verification|confirmation|one[ \t\-]time|otp|sms|text|2fa|mfa|two[ \t\-]factor"
            r"|authentication|auth|login|sign[ \t\-]?in|activation|reset)[ \t\-]?(?:code|pin)|otp"
            r"|cvv2?|cvc2?|cid|csc|cvn|card[ \t]security[ \t]code|security[ \t]code)"
            r"(?:[ \t]{1,3}(?:for|of|at|on|to|in|du|de|des|da|del|zum|zur|für|von|vom|der|pour"
            r"|para|per|di|dla|do|od)"
            r"(?:[ \t]{1,3}[^\s:=#,;.!?]{1,30}+){1,4}?|(?:[ \t]{1,3}[a-zà-ÿ'’]{2,20}+){1,3}?)?"
            r"(?P<link>[ \t]{0,3}(?:[:=#]|->|→|[—–])[ \t]{0,3}"
            r"|[ \t]{1,3}(?:(?:is|was|are|est|es|ist|é|è|lautet)(?:[ \t]{0,2}:)?[ \t]{1,3})?)"
            + _NOT_PLACEHOLDER
            + r"(?P<v>\d{1,12}+(?:[ .\-–]\d{1,4}+){0,5}+[a-z#*]?)(?![\w\-@]|[.,/:]\d)"
        ),
        _check_numeric_code,
        lower=True,
        triggers=("puk", "code", "combination", "combo", "keypad", "cvv", "cvc", "cid", "csc",
                  "cvn", "digo", "codice", "schloss", "otp", "pattern", "pin", "kod "),
    ),
    Rule(
        "password",  # "she typed in 'iloveyou123' as her password", "MoonLight77 is my password"
        re.compile(
            r"[ \t](?:as|is|was)[ \t]{1,3}(?:(?:the|my|her|his|our|your|their|a|an|new|old"
            r"|current|admin|root|wifi|wi-fi|login|account|master|default)[ \t]{1,3}){0,2}"
            r"(?:password|passcode|passphrase|pwd)(?![\w\-])"
            r"(?![ \t]{1,3}(?!(?:for|on|to|of|at|and|in|from|with|when|but|so|because)\b)[a-z])"
        ),
        _check_value_as_password,
        lower=True,
        triggers=("pass", "pwd"),
    ),
    Rule(
        "password",  # "my Gmail password (Snowfall2023)"
        re.compile(
            r"(?:password|passcode|passphrase|pwd|pw)(?:[ \t]{1,3}(?:is|was))?[ \t]{1,3}\("
            + _NOT_PLACEHOLDER + r"(?P<secret>[^()\s]{4,64}+)\)"
        ),
        _check_strong_in_parens,
        lower=True,
        triggers=("pass", "pw"),
    ),
    Rule(
        "password",  # **password:** X, __Password__ - X, <b>Password:</b> X, `token`: X
        re.compile(
            r"(?<![a-z0-9])(?P<key>password|passwd|passphrase|passcode|pwd|pw|pin|secret|token"
            r"|(?:api|access|auth|secret|private|client)[ _\-]?(?:key|token|secret))"
            r"(?P<c1>[ \t]{0,2}[:=])?"
            r"(?:\*{1,3}|_{1,2}|`|</(?:b|strong|em|i|u|code|kbd|span|label|th|dt|mark)>)"
            r"(?P<c2>[ \t]{0,3}(?:[:=]|-{1,2}|–|—|->|→))?[ \t]{0,3}(?:`|<code>|<kbd>|\*\*|__)?"
            + _NOT_PLACEHOLDER + r"(?P<bv>[^\s`<>\"'*]{1,256}+)"
        ),
        _check_markup_key,
        lower=True,
        triggers=("*", "`", "</", "__", "_:", "_ :", "_=", "_ -", "_ –", "_ —"),
    ),
    Rule(
        "password",  # <td>password</td><td>X</td>, <dt>API key</dt><dd>X</dd>
        re.compile(
            r"<(?P<t>t[dh]|dt)\b[^<>\n]{0,128}+>[ \t]{0,3}(?:<(?:b|strong|em|span|label)\b[^<>\n]"
            r"{0,64}+>)?(?P<k>[^<>\n]{1,64}+)(?:</(?:b|strong|em|span|label)>)?[ \t]{0,3}"
            r"</(?P=t)>\s{0,16}<(?:td|dd)\b[^<>\n]{0,128}+>[ \t]{0,3}(?:<(?:code|kbd|span)\b"
            r"[^<>\n]{0,64}+>)?" + _NOT_PLACEHOLDER + r"(?P<v>[^<>\n]{1,256}+)"
        ),
        _check_cell_pair,
        lower=True,
        triggers=("<td", "<th", "<dt"),
    ),
    Rule(
        "password",  # | service | user | password |\n|---|---|---|\n| db | app | X |
        re.compile(
            r"(?m)^(?P<head>[ \t]{0,3}\|?[^\n|]{0,256}+(?:\|[^\n|]{0,256}+){1,31}+)\n"
            r"(?P<sep>[ \t]{0,3}\|?[ \t]{0,3}:?-{2,64}+:?[ \t]{0,3}(?:\|[ \t]{0,3}:?-{2,64}+:?"
            r"[ \t]{0,3}){0,31}+\|?[ \t]{0,3})$"
            r"(?P<rows>(?:\n[^\n|]{0,256}+\|[^\n]{0,2048}+){0,256}+)"
        ),
        _check_table_column,
        triggers=("--",),
    ),
    Rule(
        "password",  # || service || user || password ||\n| db | app | X | (a wiki table)
        re.compile(
            r"(?m)^(?P<head>[ \t]{0,3}\|\|[^\n]{1,2048}?\|\|)[ \t]{0,16}"
            r"(?P<rows>(?:\n[ \t]{0,3}\|(?!\|)[^\n]{0,2048}+){1,256}+)"
        ),
        _check_table_column,
        triggers=("||",),
    ),
    Rule(
        "token",  # 2FA secret: JBSW Y3DP EHPK 3PXP, MFA seed for the root account: 3S73…
        re.compile(
            r"(?:2fa|mfa|totp|otp|authenticator|two[ \-]factor|2-step)[ \t_\-]{0,3}"
            r"(?:secret|seed|key|setup[ \t]key)(?:[ \t]{0,3}\([^()\n]{1,40}+\))?"
            r"(?:[ \t]{1,3}(?:for|of|on)(?:[ \t]{1,3}[\w@.\-]{1,40}+){1,5}?"
            r"(?:[ \t]{0,3}[:=][ \t]{0,3}|[ \t]{1,3}(?:is|was):?[ \t]{1,3})"
            r"|[ \t]{0,3}[:=][ \t]{0,3}|[ \t]{1,3}(?:(?:is|was):?[ \t]{1,3})?)" + _NOT_PLACEHOLDER
            + r"(?P<secret>[a-z0-9]{4,8}+(?:[ \t][a-z0-9]{2,8}+){1,15}+|[a-z0-9]{16,128}+=*)"
            r"(?![\w])"
        ),
        _check_totp_seed,
        lower=True,
        triggers=("2fa", "mfa", "totp", "otp", "authenticator", "factor", "2-step"),
    ),
    Rule(
        "token",  # pyotp.TOTP('JBSWY3DPEHPK3PXP…'), OTPAuth.Secret.fromBase32("…")
        re.compile(
            r"(?:totp|hotp|frombase32)[ \t]{0,3}\([ \t]{0,3}(?P<q>[\"'])" + _NOT_PLACEHOLDER
            + r"(?P<secret>[a-z2-7]{16,128}+=*)(?P=q)"
        ),
        _check_otp_call,
        lower=True,
        triggers=("otp", "frombase32"),
    ),
    Rule(
        "password",  # WIFI:T:WPA;S:CafeGuest;P:secret;; (a Wi-Fi QR code)
        re.compile(
            r"wifi:(?:(?!p:)[a-z]{1,3}:(?:\"[^\"\n]{0,128}+\"|(?:[^;\\\n]|\\.){0,128}+);){0,8}+p:"
            + _NOT_PLACEHOLDER
            + r"(?:\"(?P<q>[^\"\n]{1,128}+)\"|(?P<secret>(?:[^;\\\n]|\\.){1,128}+))"
        ),
        _check_wifi_qr,
        lower=True,
        triggers=("wifi:",),
    ),
    Rule(
        "password",  # - name: DB_PASSWORD\n  value: "…", {"name": "API_TOKEN", "value": "…"}
        re.compile(
            r"name[\"']?[ \t]{0,3}[:=][ \t]{0,3}[\"']?(?P<k>[a-z_][\w.\-]{0,64}+)[\"']?[ \t]{0,3}"
            r"(?:,[ \t]{0,3}|\r?\n[ \t]{0,16}(?:-[ \t]{1,3})?)"
            r"[\"']?value[\"']?[ \t]{0,3}[:=][ \t]{0,3}"
            + _NOT_PLACEHOLDER
            + r"(?:(?P<qq>[\"'])(?P<q>[^\"'\n]{1,512}+)(?P=qq)|(?P<b>[^\s\"',}\]]{1,512}+))"
        ),
        _check_named_pair,
        lower=True,
        triggers=("value",),
    ),
    Rule(
        "password",  # "the password is capital K, x, nine, hash, …" (read out one by one)
        re.compile(
            r"(?P<key>password|passcode|passphrase|pass[ \t]word|pin(?:[ \t]code)?|pw|passwort"
            r"|kennwort|geheimzahl|spel(?:led|t)(?:[ \t]{1,3}(?:it|that|them)(?:[ \t]{1,3}out)?)?)"
            r"[^\n:=]{0,30}?(?:[ \t]{1,3}(?:is|was|reads|ist|lautet|war|est|es|era|è)"
            r"(?:[ \t]{0,3}:)?|[ \t]{0,3}[:=])"
            r"[ \t]{1,3}" + _NOT_PLACEHOLDER
            + r"(?P<secret>" + _SPOKEN_CHAR
            + r"(?:(?:[ \t]{0,3}[,;][ \t]{0,3}|[ \t]{1,3})(?:(?:then|and)[ \t]{1,3})?"
            + _SPOKEN_CHAR + r"){3,40}+)"
        ),
        _check_dictated,
        lower=True,
        triggers=("pass", "pin", "pw", "wort", "geheim", "spel"),
    ),
    Rule(
        "password",  # security question "first pet" = Biscuit, mother's maiden name: Kowalska
        re.compile(
            r"(?:(?:(?:mother|mom|mum)['’]?s[ \t]{1,3})?maiden[ \t]{1,3}name"
            r"|(?:name[ \t]{1,3}of[ \t]{1,3}(?:your|my|the)[ \t]{1,3})?first[ \t]{1,3}"
            r"(?:pet|car|school|teacher|boss|concert|employer)(?:['’]s[ \t]{1,3}name)?"
            r"|(?:city|town|place)[ \t]{1,3}of[ \t]{1,3}birth|birth[ \t]{0,3}(?:city|place|town)"
            r"|(?:city|town)[ \t]{1,3}(?:you|i)[ \t]{1,3}(?:were|was)[ \t]{1,3}born[ \t]{1,3}in"
            r"|favou?rite[ \t]{1,3}(?:teacher|food|movie|book|colou?r|band|sports[ \t]{1,3}team)"
            r"|childhood[ \t]{1,3}(?:best[ \t]{1,3})?(?:friend|nickname|hero)"
            r"|street[ \t]{1,3}(?:you|i)[ \t]{1,3}grew[ \t]{1,3}up[ \t]{1,3}on"
            r"|high[ \t]{1,3}school[ \t]{1,3}mascot)"
            r"(?:[\"'’”]?[ \t]{0,3}(?:=|:|->|→|[—–])[ \t]{0,3}"
            r"|[\"'’”]?[ \t]{1,3}(?:is|was|-)[ \t]{1,3})"
            + _NOT_PLACEHOLDER
            + r"[\"'“‘]?(?P<v>[^\s,;.!?\"'“”‘’()\[\]{}<>]{2,40}+)"
        ),
        _check_security_answer,
        lower=True,
        triggers=("maiden", "first", "birth", "born", "favo", "childhood", "grew", "mascot"),
    ),
    Rule(
        "token",  # Photoshop serial number 1330-1004-…, license code: 4F7K-9QXM-…
        re.compile(
            r"(?:serial|license|licence|product|activation|registration|cd|install(?:ation)?)"
            r"[ \t\-]?(?:number|no\.?|#|key|code|serial)"
            r"(?:[ \t]{1,3}(?:for|of)(?:[ \t]{1,3}[\w.\-]{1,30}+){1,3}?)?"
            r"(?:[ \t]{0,3}[:=#][ \t]{0,3}|[ \t]{1,3}(?:is|was)[ \t]{1,3}|[ \t]{1,3})"
            + _NOT_PLACEHOLDER
            + r"(?P<secret>[a-z0-9]{4,12}+(?:-[a-z0-9]{4,12}+){3,7}+)(?![\w\-])"
        ),
        _check_license_key,
        lower=True,
        triggers=("serial", "licen", "product", "activation", "registration", "cd", "install"),
    ),
    Rule(
        "token",  # product keys: HVP37-6BF4M-4J7BG-PB7VP-P73PG, license lines M8DD-XWDF-8HYX-D84G
        re.compile(
            r"(?<![\w\-])(?:[A-Z0-9]{5}+(?:-[A-Z0-9]{5}+){4,5}+|[A-Z0-9]{4}+(?:-[A-Z0-9]{4}+){3,7}+)"
            r"(?![\w\-])"
        ),
        _check_product_key,
        triggers=("-",),
    ),
    Rule(
        "api_key",  # "PagerDuty = 8Va-7IRKRQDIo6Lh3Rzu": a token named by its service
        re.compile(
            r"(?P<name>" + _SERVICE_NAMES + r")(?:[ \t]{1,3}(?:api[ \t]?)?(?:key|token))?"
            r"(?:[ \t]{0,3}[:=][ \t]{0,3}|[ \t]{1,3}(?:is|was)[ \t]{1,3})" + _NOT_PLACEHOLDER
            + r"(?P<secret>[A-Za-z0-9_\-+/.=]{16,128}+)(?![^\s,;)\]}\"'`])"
        ),
        _check_service_token,
        lower=True,
        triggers=_SERVICE_TRIGGERS,
    ),
    Rule(
        "password",  # "api key part 1: kglsc5AWF6nfyaJTaYVm", "password prod db: Kx9#mPq2"
        re.compile(
            r"(?P<key>" + _PROSE_KEYWORDS + r")"
            r"(?P<qual>(?:[ \t]{1,3}[a-z0-9][\w.\-]{0,19}+){1,2}?)[ \t]{0,3}:[ \t]{1,5}"
            + _NOT_PLACEHOLDER
            + r"(?P<bv>[^\s\"'`,;()\[\]{}<>]{1,256}+)"
        ),
        _check_qualified_name,
        lower=True,
        triggers=("pass", "pw", "pin", "secret", "key", "token"),
    ),
)
"""memlab's own rules (:class:`Rule`), in priority order: when spans overlap, the earlier
rule names the kind. Private-key blocks (``private_keys=True``) come first, long random runs
(``entropy=True``) and detect-secrets plugins last.
"""

_PEM_BEGIN = re.compile(
    r"BEGIN[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?[ ]{0,2}-{3,5}|PuTTY-User-Key-File-\d:"
)
_PEM_END = re.compile(
    r"END[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?[ ]{0,2}-{3,5}|Private-MAC: [0-9a-f]{20,128}"
)

_KEY_BODY = re.compile(r"\s{0,4}(?:[A-Za-z0-9+/=]{8}|[A-Za-z][\w\-]{0,30}:[ \t])")
"""What follows a BEGIN marker in a key: base64, or a header line (``Proc-Type: …``)."""

_PUBLIC_BEGIN = re.compile(
    r"-----BEGIN (?:CERTIFICATE|TRUSTED CERTIFICATE|(?:NEW )?CERTIFICATE REQUEST|X509 CRL"
    r"|(?:RSA |EC |DSA |SSH2 )?PUBLIC KEY|PGP PUBLIC KEY BLOCK|PGP SIGNATURE)-----"
)
_PUBLIC_END = re.compile(
    r"-----END (?:CERTIFICATE|TRUSTED CERTIFICATE|(?:NEW )?CERTIFICATE REQUEST|X509 CRL"
    r"|(?:RSA |EC |DSA |SSH2 )?PUBLIC KEY|PGP PUBLIC KEY BLOCK|PGP SIGNATURE)-----"
)
_PUBLIC_TOKEN = re.compile(
    # an OpenSSH public key (authorized_keys, known_hosts): the base64 blob after its type
    r"(?:ssh-(?:rsa|dss|ed25519|ed448)|ecdsa-sha2-nistp(?:256|384|521)"
    r"|sk-(?:ssh-ed25519|ecdsa-sha2-nistp256)@openssh\.com)[ \t]{1,5}"
    r"(?P<blob>AAAA[A-Za-z0-9+/]{16,16384}+={0,3})"
    # an age recipient (public key), a Stripe publishable key
    r"|(?<![A-Za-z0-9])(?P<age>age1[02-9ac-hj-np-z]{58})(?![A-Za-z0-9])"
    r"|(?<![A-Za-z0-9_])(?P<pk>pk_(?:live|test)_[A-Za-z0-9]{10,256}+)"
    # the payload of a media data: URI (an inline image, a font)
    r"|data:(?:image|audio|video|font)/[\w.+\-]{1,64}+(?:;[\w.+\-]{1,64}+=[\w.+\-]{1,64}+){0,4}+"
    r";base64,(?P<data>[A-Za-z0-9+/]{16,}+={0,2})"
)
"""Public material that looks like a secret but is published by design."""

_MASKED_TOKEN = re.compile(
    r"(?:(?<=[\s\"'`=:(\[{<,;|>])|^)[A-Za-z0-9_\-]{0,16}+"
    r"(?:[*•●]{3,}+|(?<=[A-Za-z0-9_\-])(?:\.{3,8}+|…)(?=[A-Za-z0-9]))"
    r"[A-Za-z0-9_\-]{0,8}+(?![A-Za-z0-9_\-*•●])"
)
"""A value the writer masked, with a few characters left visible: ``ghp_****Xk2Q``,
``sk-...abcd``, ``AKIA************``."""
_DOCS_WORD = re.compile(r"(?i)\b(?:examples?|docs|documentation|sample)\b")
_JWK_PUBLIC = re.compile(r"\"(?:n|e|x|y)\"[ \t]{0,3}:[ \t]{0,3}\"(?P<v>[A-Za-z0-9_\-]{1,8192}+)\"")
"""The public members of a JSON Web Key (RSA modulus and exponent, EC coordinates); its
private members (``d``, ``p``, ``q``, ``k``, …) are secrets."""


def _public_ranges(text: str) -> list[tuple[int, int]]:
    """Sorted ``(start, end)`` ranges of public material in ``text``: certificate and
    public-key PEM blocks (BEGIN to its END), OpenSSH public keys (their type name too, so
    that "public key: ssh-ed25519 AAAA…" keeps it), age recipients, Stripe publishable keys
    and media ``data:`` URI payloads; the public members of a JSON Web Key; values the
    writer masked (``ghp_****Xk2Q``); and vendors' documented example keys, cited as such
    (``AKIAIOSFODNN7EXAMPLE`` in a text that speaks of examples or docs). No secret is
    redacted inside them."""
    out: list[tuple[int, int]] = []
    if "-----BEGIN " in text:
        ends = [m.end() for m in _PUBLIC_END.finditer(text)]
        covered = -1
        for m in _PUBLIC_BEGIN.finditer(text):
            if m.start() < covered:
                continue
            i = bisect.bisect_left(ends, m.end())
            if i < len(ends):
                out.append((m.start(), ends[i]))
                covered = ends[i]
    if "AAAA" in text or "age1" in text or "pk_" in text or ";base64," in text:
        for m in _PUBLIC_TOKEN.finditer(text):
            if m.group("blob"):
                out.append(m.span())
            else:
                out.append(m.span("age" if m.group("age") else "pk" if m.group("pk") else "data"))
    if '"kty"' in text:
        out.extend(m.span("v") for m in _JWK_PUBLIC.finditer(text))
    if "***" in text or "•••" in text or "●●●" in text or "..." in text or "…" in text:
        out.extend(m.span() for m in _MASKED_TOKEN.finditer(text) if m.end() > m.start())
    if "EXAMPLE" in text and _DOCS_WORD.search(text):
        out.extend(m.span() for m in _TOKEN_RUN.finditer(text) if "EXAMPLE" in m.group())
    out.sort()
    return out


def _outside(spans: list[Span], ranges: list[tuple[int, int]], text: str) -> list[Span]:
    """``spans`` with the parts inside ``ranges`` cut out (a piece left with no letter or
    digit is dropped); a private key is redacted whole."""
    starts = [r[0] for r in ranges]
    out: list[Span] = []
    for s, e, k in spans:
        if k == "private_key":
            out.append((s, e, k))
            continue
        i = max(0, bisect.bisect_right(starts, s) - 1)
        pieces = []
        cur = s
        while i < len(ranges) and ranges[i][0] < e:
            ps, pe = ranges[i]
            if pe > cur:
                if ps > cur:
                    pieces.append((cur, ps))
                cur = max(cur, pe)
            i += 1
        if cur < e:
            pieces.append((cur, e))
        out.extend((a, b, k) for a, b in pieces if _has_alnum(text[a:b]))
    return out


# ----------------------------------------------------------------------------- detect-secrets
DETECT_SECRETS_PLUGINS: tuple[tuple[str, str, str], ...] = (
    ("AWSKeyDetector", r"A3T|ABIA|ACCA|AKIA|ASIA|aws|AWS|Aws", "api_key"),
    ("AzureStorageKeyDetector", r"AccountKey=", "api_key"),
    ("BasicAuthDetector", r"://", "password"),
    ("DiscordBotTokenDetector", r"[MNO][A-Za-z\d_\-]{23,25}\.", "api_key"),
    ("GitHubTokenDetector", r"gh[pousr]_", "api_key"),
    ("GitLabTokenDetector", r"gl(?:pat|dt|ft|soat|rt|cbt|imt)-|GR1348941", "api_key"),
    ("JwtTokenDetector", r"eyJ", "jwt"),
    ("MailchimpDetector", r"-us\d", "api_key"),
    ("NpmDetector", r"_authToken=", "token"),
    ("OpenAIDetector", r"T3BlbkFJ", "api_key"),
    ("PypiTokenDetector", r"pypi-AgE", "api_key"),
    ("SendGridDetector", r"SG\.", "api_key"),
    ("SlackDetector", r"xox[abposr]-|hooks\.slack\.com", "api_key"),
    ("SquareOAuthDetector", r"sq0csp-", "api_key"),
    ("StripeDetector", r"[rs]k_live_", "api_key"),
    ("TelegramBotTokenDetector", r"\d{8,10}:", "api_key"),
    ("TwilioKeyDetector", r"AC[a-z0-9]{32}|SK[a-z0-9]{32}", "api_key"),
)
"""``(detect-secrets plugin class, trigger regex, kind)``.

Plugins see only windows of :attr:`Scrubber.window` characters around runs of 16 or more
token characters (every secret these plugins know is such a run, or a URL password that the
own URL rule finds), clipped to the line, merged, cut into pieces of at most 1,024 characters,
and only the windows where their trigger occurs; at most ``plugin_budget`` characters per
text go through them. Their regexes then cost a bounded amount per window, whatever the input.
Every shape these plugins know is also an own rule, so the budget never opens a gap (the
tests check this on the corpus).
"""

_DS_WINDOW_CHUNK = 1024
_ASCII_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}


def _load_plugins(names: Sequence[tuple[str, str, str]]) -> list[tuple[Any, re.Pattern[str], str]]:
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    classes = {cls.__name__: cls for cls in get_mapping_from_secret_type_to_class().values()}
    out = []
    for i, item in enumerate(names):
        if not (
            isinstance(item, tuple) and len(item) == 3 and all(isinstance(x, str) for x in item)
        ):
            raise TypeError(
                f"scrub.py: Scrubber field 'plugins[{i}]' must be a (class name, trigger, kind) "
                f"triple of strings, got {item!r}"
            )
        name, trigger, kind = item
        if name not in classes:
            raise ValueError(
                f"scrub.py: Scrubber field 'plugins[{i}]': detect-secrets has no plugin {name!r}"
            )
        out.append((classes[name](), re.compile(trigger), kind))
    return out


def _ds_templated(secret: str) -> bool:
    from detect_secrets.filters.heuristic import is_prefixed_with_dollar_sign, is_templated_secret

    return is_templated_secret(secret) or is_prefixed_with_dollar_sign(secret)


# ----------------------------------------------------------------------------- normalised views
class _View:
    """A rewritten copy of a text with a map from its positions back to the original."""

    def __init__(self, text: str, pieces: Iterable[tuple[int, int, str]]):
        parts: list[str] = []
        # (view_start, view_end, orig_start, orig_end) of every rewritten piece
        self.pieces: list[tuple[int, int, int, int]] = []
        last = 0
        vpos = 0
        for s, e, r in pieces:
            parts.append(text[last:s])
            vpos += s - last
            parts.append(r)
            self.pieces.append((vpos, vpos + len(r), s, e))
            vpos += len(r)
            last = e
        parts.append(text[last:])
        self.text = "".join(parts)
        self.starts = [p[0] for p in self.pieces]

    def _to_orig(self, pos: int, *, end: bool) -> int:
        # An end maps through the pieces that start before it, a start through those that
        # start at or before it: a removed line break is then outside a span that stops
        # right before it and outside one that starts right after it.
        i = (bisect.bisect_left if end else bisect.bisect_right)(self.starts, pos) - 1
        if i < 0:
            return pos
        vs, ve, os_, oe = self.pieces[i]
        if pos < ve or (end and pos == ve):
            return oe if end else os_
        return pos - ve + oe

    def crosses(self, start: int, end: int) -> bool:
        """Whether the view span holds a rewritten piece (else the original has it as is)."""
        i = bisect.bisect_left(self.starts, start)
        while i < len(self.pieces) and self.starts[i] < end:
            vs, ve, _, _ = self.pieces[i]
            if (ve > vs and ve <= end) or (ve == vs and vs > start):
                return True
            i += 1
        return False

    def span_to_orig(self, start: int, end: int) -> tuple[int, int]:
        return self._to_orig(start, end=False), self._to_orig(end, end=True)


_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}")
_BREAK_IN_TOKEN = re.compile(rf"\n[ \t>]{{0,8}}(?=[{_TOKEN_CHARS}])")
_KEY_LINE = re.compile(
    r"[A-Za-z_][\w.\-]{0,40}:(?:[ \t]|$)|[A-Z][A-Z0-9]*_[A-Z0-9_]*="
    r"|[A-Za-z_][\w.\-]{0,40}[ \t]{0,3}=[ \t]{0,3}[^=\s]|[-*+][ \t]|\d{1,3}[.)][ \t]",
    re.M,
)
"""The start of a line that begins a new entry (``user: app``, ``DB_USER=app``, ``region =
eu-west-1``, ``ossrhPassword=…``, a list item), not the rest of a token."""
_BEFORE_BREAK = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-+/=.~")
_CONTINUATION = re.compile(rf"[{_TOKEN_CHARS}]{{1,64}}")


def _break_pieces(text: str) -> Iterable[tuple[int, int, str]]:
    """Line breaks inside a token (``abc\\\\\\n  def``, ``abc-\\ndef``): ``(start, end, "")``.

    A line that starts with a key (``user: app``, ``DB_USER=app``, ``region = eu-west-1``)
    starts a new entry of a configuration, not the rest of a token: ``password: hunter2``
    above it ends at the line break. Without a ``\\`` before the break, the line must end in
    a run of eight or more token characters and the next one start with the rest of a token
    (a digit, a capital after its first letter, ``+/=``, or sixteen characters): a plain word
    on the next line ("…ccui\\nthanks") is prose, not the end of the token above it."""
    for m in _BREAK_IN_TOKEN.finditer(text):
        if _KEY_LINE.match(text, m.end()):
            continue
        s = m.start()
        lo = max(0, s - 10)
        if s > lo and text[s - 1] == "\r":
            s -= 1
        escaped = s > lo and text[s - 1] == "\\"
        if escaped:
            s -= 1
        while s > lo and text[s - 1] in " \t":
            s -= 1
        if s == 0 or text[s - 1] not in _BEFORE_BREAK:
            continue
        if not escaped:
            run = 0
            while run < 8 and s - run > 0 and text[s - run - 1] in _BEFORE_BREAK:
                run += 1
            cont = _CONTINUATION.match(text, m.end())
            tail = cont.group() if cont is not None else ""
            tokenish = (
                len(tail) >= 16
                or any(c.isdigit() or c in "+/=" for c in tail)
                or any(c.isupper() for c in tail[1:])
            )
            if run < 8 or not tokenish:
                continue
        yield s, m.end(), ""


_CF = (
    "\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f"
    "\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
    "\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001"
    "\U000e0020-\U000e007f"
)
"""The Unicode format characters (category Cf: zero-width space and joiners, soft hyphen,
word joiner, byte-order mark, bidi controls, tags), as a regex class body."""
_CONFUSABLES = {
    **dict(
        zip("аеорсухѕіјԁԛԝһӏкгАВЕКМНОРСТХУЅІЈԚԜ", "aeopcyxsijdqwhlkrABEKMHOPCTXYSIJQW", strict=True)
    ),
    **dict(zip("αορνικυχΑΒΕΖΗΙΚΜΝΟΡΤΥΧıɑ", "aopvikuxABEZHIKMNOPTYXia", strict=True)),
}
"""Cyrillic and Greek letters that look like Latin ones (a small confusables fold)."""
_WIDE = {c: chr(c - 0xFEE0) for c in range(0xFF01, 0xFF5F)}
_WIDE.update(
    (c, n)
    for c in range(0x1D400, 0x1D800)
    if len(n := unicodedata.normalize("NFKC", chr(c))) == 1 and n.isascii()
)
_WIDE_TABLE = str.maketrans(_WIDE)
"""Fullwidth forms (``ｐａｓｓ``) and mathematical letters (``𝐩𝐚𝐬𝐬``) → their NFKC (ASCII)
form: one character for one, so positions stay."""
_WIDE_RE = re.compile("[\uff01-\uff5e\U0001d400-\U0001d7ff]")
_CONFUSABLE_TABLE = str.maketrans(_CONFUSABLES)
_HAS_CONFUSABLE = re.compile("[" + "".join(_CONFUSABLES) + "]")
_WORD_WITH_CF = re.compile(f"(?:[^\\W\\d_]|[{_CF}])+")
_CF_RUN = re.compile(f"[{_CF}]+")
_CF_RE = re.compile(f"[{_CF}]")
_ASCII_LETTER = re.compile("[A-Za-z]")
_FOLD_KEYWORDS = frozenset(
    "password passwd passphrase passcode pass pwd pw pin secret token key apikey login".split()
)


def _unicode_view(text: str) -> _View | None:
    """A copy of ``text`` as a reader sees it, or ``None`` when it reads the same: format
    characters removed (zero-width space and joiners, soft hyphen, word joiner, BOM), fullwidth
    and mathematical letters in their NFKC form (``ｐａｓｓ`` → ``pass``), and Cyrillic or
    Greek look-alikes folded to Latin in a word that mixes them with Latin letters or that
    spells a credential's name with them (``pаssword`` with a Cyrillic ``а``). Folding keeps
    positions; the removed runs are the view's pieces."""
    if text.isascii():
        return None
    out = text.translate(_WIDE_TABLE) if _WIDE_RE.search(text) else text
    if _HAS_CONFUSABLE.search(out):
        parts: list[str] = []
        last = 0
        for w in _WORD_WITH_CF.finditer(out):
            word = w.group()
            if word.isascii() or _HAS_CONFUSABLE.search(word) is None:
                continue
            folded = word.translate(_CONFUSABLE_TABLE)
            plain = _CF_RE.sub("", folded)
            if _ASCII_LETTER.search(_CF_RE.sub("", word)) or (
                plain.isascii() and plain.lower() in _FOLD_KEYWORDS
            ):
                parts.append(out[last : w.start()])
                parts.append(folded)
                last = w.end()
        if parts:
            parts.append(out[last:])
            out = "".join(parts)
    view = _View(out, ((m.start(), m.end(), "") for m in _CF_RUN.finditer(out)))
    return None if view.text == text else view


_OBFUSCATED_KEYWORD = re.compile(
    r"(?<![A-Za-z0-9])(?:p(?P<s>[ .\-_*]?)[a@4](?P=s)[s5$](?P=s)[s5$](?P=s)"
    r"(?:w(?P=s)[o0](?P=s)r(?P=s)d|w(?P=s)d|p(?P=s)h(?P=s)r(?P=s)[a@4](?P=s)[s5$](?P=s)[e3]"
    r"|c(?P=s)[o0](?P=s)d(?P=s)[e3])"
    r"|p[a@4][s5$][s5$][ .\-_]{1,2}(?:w[o0]rd|phr[a@4][s5$][e3]|c[o0]d[e3]))(?![A-Za-z0-9])",
    re.IGNORECASE,
)
"""A password's name written to dodge a search: spaced (``p a s s w o r d``), split
(``pass-word``, ``pass phrase``) or in leetspeak (``p4ssw0rd``, ``p@$$word``)."""
_UNLEET = str.maketrans("4@5$03", "aassoe", " .-_*")


def _keyword_pieces(text: str) -> Iterable[tuple[int, int, str]]:
    """An obfuscated password name (:data:`_OBFUSCATED_KEYWORD`) → its plain spelling."""
    for m in _OBFUSCATED_KEYWORD.finditer(text):
        word = m.group()
        plain = word.lower().translate(_UNLEET)
        if plain != word.lower():
            yield m.start(), m.end(), plain


_SPACED_RUN = re.compile(r"(?<!\S)\S(?!\S)(?: \S(?!\S)){15,}+")
"""Sixteen or more single characters with a space between each: ``g h p _ A V t n …``."""


def _percent_pieces(text: str) -> Iterable[tuple[int, int, str]]:
    for m in _PERCENT.finditer(text):
        c = int(m.group(0)[1:], 16)
        if 0x20 < c < 0x7F:
            yield m.start(), m.end(), chr(c)


# ----------------------------------------------------------------------------- the scrubber
_MEMO_MAX_TEXTS = 65_536
"""Most texts whose spans a :class:`Scrubber` remembers (the oldest is dropped first)."""
_MEMO_MAX_CHARS = 4_096
"""Longest text whose spans are remembered."""


class Scrubber:
    """Replace credentials in text with typed placeholders.

    Args:
        patterns: Ordered rules (:class:`Rule`, or plain ``(kind, compiled regex)`` pairs);
            see :data:`DEFAULT_PATTERNS`. A match is replaced by ``[REDACTED:<kind>]``; if the
            regex has a named group ``secret`` only that group is replaced.
        plugins: detect-secrets plugins to run, ``(class name, trigger regex, kind)`` (see
            :data:`DETECT_SECRETS_PLUGINS`); ``()`` for none.
        plugin_budget: Most characters per text that go through the plugins.
        window: Characters of context on each side of a token run that the plugins see.
        entropy: Redact runs of 32+ token characters that look random (upper and lower case
            and digits, Shannon entropy ≥ ``min(4.5, 0.86·log2(length))``) outside URLs.
        normalize: Also scan a percent-decoded copy, a copy with line breaks inside tokens
            removed and tokens spelt with spaces joined, and read the text as a reader sees
            it (format characters removed, fullwidth letters and look-alike letters folded,
            obfuscated names spelt plainly), mapping what they find back onto the text.
        private_keys: Redact PEM / PGP / PuTTY private-key blocks (BEGIN to END, or to the end
            of the text when the END marker is missing).
        max_depth: Deepest nesting :meth:`scrub_value` accepts.

    Attributes:
        patterns_: The validated rules (set on first use).
        plugins_: The instantiated detect-secrets plugins with their compiled triggers.
    """

    def __init__(
        self,
        *,
        patterns: Sequence[tuple[Any, ...]] = DEFAULT_PATTERNS,
        plugins: Sequence[tuple[str, str, str]] = DETECT_SECRETS_PLUGINS,
        plugin_budget: int = 65_536,
        window: int = 64,
        entropy: bool = True,
        normalize: bool = True,
        private_keys: bool = True,
        max_depth: int = 32,
    ) -> None:
        self.patterns = patterns
        self.plugins = plugins
        self.plugin_budget = plugin_budget
        self.window = window
        self.entropy = entropy
        self.normalize = normalize
        self.private_keys = private_keys
        self.max_depth = max_depth

    # -------------------------------------------------------------- validation
    def _checked(self) -> tuple[Rule, ...]:
        checked = getattr(self, "patterns_", None)
        if checked is not None:
            return checked
        if isinstance(self.patterns, (str, bytes)) or not isinstance(self.patterns, Sequence):
            raise TypeError(
                "scrub.py: Scrubber field 'patterns' must be a sequence of (name, re.Pattern) "
                f"pairs, got {type(self.patterns).__name__}"
            )
        out: list[Rule] = []
        for i, rule in enumerate(self.patterns):
            if (
                not isinstance(rule, tuple)
                or not 2 <= len(rule) <= 7
                or not isinstance(rule[0], str)
                or not isinstance(rule[1], re.Pattern)
                or (len(rule) >= 3 and rule[2] is not None and not callable(rule[2]))
            ):
                raise TypeError(
                    f"scrub.py: Scrubber field 'patterns[{i}]' must be a (str, re.Pattern) pair "
                    f"or a Rule, got {rule!r}"
                )
            if not rule[0] or not re.fullmatch(r"[a-z0-9_]+", rule[0]):
                raise ValueError(
                    f"scrub.py: Scrubber field 'patterns[{i}]' name must match [a-z0-9_]+, "
                    f"got {rule[0]!r}"
                )
            out.append(Rule(*rule))
        for name in ("window", "max_depth"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"scrub.py: Scrubber field '{name}' must be a positive int, got {value!r}"
                )
        budget = self.plugin_budget
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
            raise ValueError(
                "scrub.py: Scrubber field 'plugin_budget' must be a non-negative int, "
                f"got {budget!r}"
            )
        if isinstance(self.plugins, (str, bytes)) or not isinstance(self.plugins, Sequence):
            raise TypeError(
                "scrub.py: Scrubber field 'plugins' must be a sequence of "
                f"(class name, trigger, kind) triples, got {type(self.plugins).__name__}"
            )
        self.plugins_ = _load_plugins(self.plugins)
        # Rules tried at token-run starts, indexed by the first two characters of an anchor.
        by_head: dict[str, list[int]] = {}
        for i, rule in enumerate(out):
            if rule.at_tokens:
                for a in rule.anchors:
                    lst = by_head.setdefault(a[:2], [])
                    if i not in lst:
                        lst.append(i)
        self._token_rules = by_head
        self.patterns_ = tuple(out)
        return self.patterns_

    # -------------------------------------------------------------- detection
    def _rule_spans(self, text: str) -> list[tuple[int, int, int, str]]:
        """``(start, end, priority, kind)`` of every secret found by the rules and plugins."""
        rules = self._checked()
        spans: list[tuple[int, int, int, str]] = []
        if self.private_keys:
            spans.extend((s, e, 0, "private_key") for s, e in self._pem_spans(text))
        low: str | None = None
        for prio, rule in enumerate(rules, start=1):
            if rule.at_tokens:
                continue
            target = text
            if rule.lower:
                if low is None:
                    low = text.lower()
                    if len(low) != len(text):
                        low = text.translate(_ASCII_LOWER)
                target = low
            if rule.triggers and not any(t in target for t in rule.triggers):
                continue
            search, pos = rule.pattern.search, 0
            while (m := search(target, pos)) is not None:
                pos = max(self._accept(rule, prio, m, text, spans), m.start() + 1)
        runs = list(_TOKEN_RUN.finditer(text))
        if self._token_rules:
            self._token_spans(rules, runs, text, spans)
        prio = len(rules) + 1
        spans.extend((s, e, prio, "token") for s, e in _named_hex_spans(text, runs))
        if self.entropy:
            for m in runs:
                if m.end() - m.start() >= 32:
                    got = _check_entropy(m, text)
                    if got is not None:
                        spans.append((got[0], got[1], prio, "high_entropy"))
        if self.plugins_ and self.plugin_budget:
            spans.extend(self._plugin_spans(text, runs, len(rules) + 2))
        return spans

    @staticmethod
    def _accept(
        rule: Rule,
        prio: int,
        m: re.Match[str],
        text: str,
        spans: list[tuple[int, int, int, str]],
    ) -> int:
        """Add the span ``rule`` finds in match ``m`` to ``spans``; where the search for the
        next match goes on: behind the span or the match, or where a check that rejected the
        match says."""
        kind = rule.kind
        if rule.check is not None:
            got = rule.check(m, text)
            if got is None:
                return m.end()
            if isinstance(got, int):
                return got
            if isinstance(got, list):
                last = m.end()
                for s, e, k in got:
                    if e > s:
                        spans.append((s, e, prio, k))
                        last = max(last, e)
                return last
            s, e = got[0], got[1]
            if len(got) == 3:
                kind = got[2]  # type: ignore[misc]
        else:
            s, e = _secret_span(m)
        if e > s:
            spans.append((s, e, prio, kind))
            return max(e, m.end())
        return m.end()

    def _token_spans(
        self,
        rules: tuple[Rule, ...],
        runs: list[re.Match[str]],
        text: str,
        spans: list[tuple[int, int, int, str]],
    ) -> None:
        index = self._token_rules
        for run in runs:
            start = run.start()
            # A token may sit behind a path, a URL or a dot ("//ghp_…@", ".sk-…").
            inner = start
            while inner < start + 3 and text[inner] in "/.+~":
                inner += 1
            for s in (start, inner) if inner > start else (start,):
                for i in index.get(text[s : s + 2], ()):
                    rule = rules[i]
                    m = rule.pattern.match(text, s)
                    if m is not None:
                        self._accept(rule, i + 1, m, text, spans)

    @staticmethod
    def _pem_spans(text: str) -> list[tuple[int, int]]:
        ends = [m.end() for m in _PEM_END.finditer(text)]
        out: list[tuple[int, int]] = []
        covered = -1
        for m in _PEM_BEGIN.finditer(text):
            start = m.start()
            if start < covered:
                continue
            lo = max(0, start - 7)
            while start > lo and text[start - 1] in "- ":
                start -= 1
            i = bisect.bisect_left(ends, m.end())
            if i == len(ends) and not _KEY_BODY.match(text, m.end()):
                continue  # "a PEM key begins with -----BEGIN PRIVATE KEY-----.": no key
            end = ends[i] if i < len(ends) else len(text)
            out.append((start, end))
            covered = end
        return out

    def _plugin_spans(
        self, text: str, runs: list[re.Match[str]], prio: int
    ) -> list[tuple[int, int, int, str]]:
        w = self.window
        n = len(text)
        windows: list[list[int]] = []
        for run in runs:
            if run.end() - run.start() < 16:
                continue
            lo = max(0, run.start() - w)
            nl = text.rfind("\n", lo, run.start())
            lo = nl + 1 if nl >= 0 else lo
            hi = min(n, run.end() + w)
            nl = text.find("\n", run.end(), hi)
            hi = nl if nl >= 0 else hi
            if windows and lo <= windows[-1][1]:
                windows[-1][1] = max(windows[-1][1], hi)
            else:
                windows.append([lo, hi])
        spans: list[tuple[int, int, int, str]] = []
        budget = self.plugin_budget
        step = _DS_WINDOW_CHUNK - w
        for lo, hi in windows:
            for a in range(lo, hi, step):
                b = min(hi, a + _DS_WINDOW_CHUNK)
                if budget <= 0:
                    return spans
                budget -= b - a
                chunk = text[a:b]
                for plugin, trigger, kind in self.plugins_:
                    if trigger.search(chunk) is None:
                        continue
                    for secret in set(plugin.analyze_string(chunk)):
                        if not secret or _ds_templated(secret) or "[REDACTED:" in secret:
                            continue
                        if _masked_body(secret):
                            continue  # "sk_live_xxxxxxxx": a placeholder
                        # Keep a URL's scheme and host: only the path is the secret.
                        cut = secret.find("/services/")
                        if cut >= 0:
                            cut += len("/services/")
                        elif "://" in secret:
                            cut = secret.find("/", secret.index("://") + 3) + 1
                        cut = max(cut, 0)
                        pos = chunk.find(secret)
                        while pos >= 0:
                            s, e = a + pos, a + pos + len(secret)
                            # Only whole tokens: not a slice of a longer run of letters.
                            if _bounded(text, s) and (e == n or text[e] not in _TOKEN_CHAR_SET):
                                spans.append((s + cut, e, prio, kind))
                            pos = chunk.find(secret, pos + len(secret))
                if b >= hi:
                    break
        return spans

    def _spaced_spans(self, text: str) -> list[tuple[int, int, int, str]]:
        """Vendor tokens written with a space between every character (``g h p _ A V …``):
        each run of 16+ single characters is joined and searched with the token rules only."""
        if not self._token_rules:
            return []
        rules = self._checked()
        out: list[tuple[int, int, int, str]] = []
        for m in _SPACED_RUN.finditer(text):
            joined = m.group()[::2]
            found: list[tuple[int, int, int, str]] = []
            self._token_spans(rules, list(_TOKEN_RUN.finditer(joined)), joined, found)
            base = m.start()
            out.extend((base + 2 * s, base + 2 * e - 1, p, k) for s, e, p, k in found if e > s)
        return out

    def spans(self, text: str) -> list[Span]:
        """The merged ``(start, end, kind)`` spans that :meth:`scrub` replaces, in order.

        Args:
            text: Raw text.

        Returns:
            Non-overlapping spans sorted by start.

        Raises:
            TypeError: If ``text`` is not a string.
        """
        if not isinstance(text, str):
            raise TypeError(f"scrub.py: field 'text' must be a str, got {type(text).__name__}")
        # Spans are a pure function of the text and the parameters: memoised per instance
        # (replays scrub the same texts again), dropped when a parameter is reassigned.
        config = (self.patterns, self.plugins, self.plugin_budget, self.window, self.entropy,
                  self.normalize, self.private_keys)
        memo = self.__dict__.get("_spans_memo")
        if memo is None or memo[0] != config:
            memo = (config, {})
            self._spans_memo = memo
        cached = memo[1].get(text)
        if cached is not None:
            return list(cached)
        found = self._merged_spans(text)
        if len(text) <= _MEMO_MAX_CHARS:
            table = memo[1]
            if len(table) >= _MEMO_MAX_TEXTS:
                del table[next(iter(table))]
            table[text] = tuple(found)
        return found

    def _merged_spans(self, text: str) -> list[Span]:
        """:meth:`spans` computed (no memo)."""
        # Invisible characters, look-alike letters and obfuscated names: the rules read the text
        # as a reader sees it (a copy that differs only where it was rewritten; it finds all
        # the text itself holds), and what they find is mapped back so that it covers the
        # invisible characters inside it.
        uni = _unicode_view(text) if self.normalize else None
        base = text if uni is None else uni.text
        named = _View(base, _keyword_pieces(base) if self.normalize else ())
        if uni is None and not named.pieces:
            raw = self._rule_spans(text)
        else:
            raw = []
            for s, e, p, kind in self._rule_spans(named.text):
                s, e = named.span_to_orig(s, e)
                if uni is not None:
                    s, e = uni.span_to_orig(s, e)
                if e > s:
                    raw.append((s, e, p, kind))
        if self.normalize:
            for pieces in (_percent_pieces, _break_pieces):
                view = _View(text, pieces(text))
                if not view.pieces:
                    continue
                for s, e, p, kind in self._rule_spans(view.text):
                    if view.crosses(s, e):
                        os_, oe = view.span_to_orig(s, e)
                        raw.append((os_, oe, p, kind))
            raw.extend(self._spaced_spans(text))
        if not raw:
            return []
        # Never redact inside (or across) an existing placeholder: scrubbing is idempotent.
        holders = [m.span() for m in _PLACEHOLDER_RE.finditer(text)]
        if holders:
            hstarts = [h[0] for h in holders]
            kept = []
            for s, e, p, k in raw:
                i = bisect.bisect_right(hstarts, e - 1) - 1
                if i >= 0 and holders[i][1] > s:
                    continue
                kept.append((s, e, p, k))
            raw = kept
        raw.sort(key=lambda t: (t[0], -t[1]))
        merged: list[list[Any]] = []
        for s, e, p, k in raw:
            if merged and s < merged[-1][1]:
                cur = merged[-1]
                cur[1] = max(cur[1], e)
                if p < cur[2]:
                    cur[2], cur[3] = p, k
            else:
                merged.append([s, e, p, k])
        found = [(s, e, k) for s, e, _, k in merged]
        public = _public_ranges(text)
        return _outside(found, public, text) if public else found

    def scrub(self, text: str) -> tuple[str, int]:
        """Scrub one text.

        Args:
            text: Raw text.

        Returns:
            The scrubbed text and the number of redactions made.

        Raises:
            TypeError: If ``text`` is not a string.
        """
        found = self.spans(text)
        if not found:
            return text, 0
        out: list[str] = []
        last = 0
        for s, e, kind in found:
            out.append(text[last:s])
            out.append(_PLACEHOLDER.format(kind))
            last = e
        out.append(text[last:])
        return "".join(out), len(found)

    def scrub_parts(self, parts: Sequence[str]) -> tuple[list[str], int]:
        """Scrub the text that ``parts`` make when joined, and return each part as that text
        redacts it: a secret recognised only in the context of its neighbours (a password
        after "the db password ... Rationale:") is redacted in the part that holds it as in
        the whole. A caller that keeps the parts apart as well as joined (a decision's
        rationale in its text and in its metadata) redacts both alike.

        Args:
            parts: Pieces of one text, in order (labels between fields are parts too).

        Returns:
            The parts redacted, and the number of redactions in the joined text (a secret
            that crosses two parts is redacted in each, under its kind).
        """
        text = "".join(parts)
        found = self.spans(text)
        if not found:
            return list(parts), 0
        out: list[str] = []
        start = 0
        for part in parts:
            end = start + len(part)
            pieces: list[str] = []
            last = start
            for s, e, kind in found:
                if e <= start or s >= end:
                    continue
                s, e = max(s, start), min(e, end)
                pieces.append(text[last:s])
                pieces.append(_PLACEHOLDER.format(kind))
                last = e
            pieces.append(text[last:end])
            out.append("".join(pieces))
            start = end
        return out, len(found)

    def scrub_value(
        self,
        value: Any,
        *,
        field: str = "value",
        known: Mapping[str, tuple[str, int]] | None = None,
    ) -> tuple[Any, int]:
        """Scrub every string inside a JSON-like value: dict keys and values, list items.

        A string or an integer stored under a key that names a credential
        (``{"db_password": "hunter2"}``, ``{"pin": 4821}``) is redacted whole, as the string
        placeholder, when it has a credential's shape (:func:`keyed_secret`): on its own,
        ``hunter2`` says nothing. So is the value of a named pair whose name is a
        credential's (``{"name": "DB_PASSWORD", "value": "…"}``).

        Args:
            value: A string, number, bool, ``None``, or a dict / list / tuple of those.
            field: Name used in error messages.
            known: Strings already scrubbed by this scrubber (string → :meth:`scrub`'s
                result), taken instead of scrubbing them again (a replay scrubs each distinct
                string of its log once, in the process that prepares it).

        Returns:
            A scrubbed copy (dicts, lists and tuples are rebuilt; other values are returned
            as they are) and the number of redactions made.

        Raises:
            ValueError: If the value nests deeper than ``max_depth``.
        """
        self._checked()
        return self._scrub_value(value, field, 0, known or {})

    def _scrub_string(self, value: str, known: Mapping[str, tuple[str, int]]) -> tuple[str, int]:
        done = known.get(value)
        return done if done is not None else self.scrub(value)

    def _scrub_value(
        self, value: Any, path: str, depth: int, known: Mapping[str, tuple[str, int]]
    ) -> tuple[Any, int]:
        if isinstance(value, str):
            return self._scrub_string(value, known)
        if not isinstance(value, (dict, list, tuple)):
            return value, 0
        if depth >= self.max_depth:
            raise ValueError(f"field '{path}' nests deeper than {self.max_depth} levels")
        total = 0
        if isinstance(value, dict):
            out: dict[Any, Any] = {}
            named = _named_value(value)  # {"name": "password", "value": "…"}
            for k, v in value.items():
                ck, n1 = self._scrub_string(k, known) if isinstance(k, str) else (k, 0)
                kind = None
                if isinstance(k, str) and _scalar(v):
                    kind = keyed_secret(k, str(v))
                    if kind is None and named is not None and k == named[0]:
                        kind = named[1]
                if kind is not None:  # {"db_password": "hunter2"}: the key says what it is
                    out[ck] = _PLACEHOLDER.format(kind)
                    total += n1 + 1
                    continue
                cv, n2 = self._scrub_value(v, f"{path}.{ck}", depth + 1, known)
                out[ck] = cv
                total += n1 + n2
            return out, total
        items = []
        for i, v in enumerate(value):
            cv, n = self._scrub_value(v, f"{path}[{i}]", depth + 1, known)
            items.append(cv)
            total += n
        return (tuple(items) if isinstance(value, tuple) else items), total


def _scalar(value: Any) -> bool:
    """A string or an integer (not a bool): what a credential's field can hold."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


_NAME_FIELDS = frozenset(
    "name key field label id parameter parameterkey paramkey param variable var setting option "
    "attribute property".split()
)
_VALUE_FIELDS = frozenset("value val parametervalue paramvalue".split())


def _named_value(obj: dict[Any, Any]) -> tuple[str, str] | None:
    """``(value field, kind)`` when ``obj`` stores one named value whose name is a
    credential's (``{"name": "DB_PASSWORD", "value": "…"}``, ``{"key": "api_key", "value":
    …}``, ``{"ParameterKey": "DbPassword", "ParameterValue": …}``), else ``None``."""
    if len(obj) > 8:
        return None
    name = field = None
    for k, v in obj.items():
        if not isinstance(k, str):
            continue
        nk = _norm_key(k)
        if nk in _NAME_FIELDS and isinstance(v, str) and len(v) <= 64:
            name = v
        elif nk in _VALUE_FIELDS and _scalar(obj[k]):
            field = k
    if name is None or field is None:
        return None
    kind = keyed_secret(name.replace(" ", "_"), str(obj[field]))
    return None if kind is None else (field, kind)


_DEFAULT_SCRUBBER = Scrubber()


_SCRUBBER_PARAMS = tuple(inspect.signature(Scrubber.__init__).parameters)[1:]  # past self


def same_scrubber(a: Any, b: Any) -> bool:
    """Whether scrubbers ``a`` and ``b`` scrub alike: the same object, or two of the same class
    (exactly :class:`Scrubber`) with equal parameters (a copy made by pickling is one)."""
    if a is b:
        return True
    if type(a) is not Scrubber or type(b) is not Scrubber:
        return False
    try:
        return all(bool(getattr(a, k) == getattr(b, k)) for k in _SCRUBBER_PARAMS)
    except Exception:  # noqa: BLE001 - parameters that cannot be compared are not the same
        return False


def default_scrubber() -> Scrubber:
    """The shared scrubber with default parameters (stores without their own use it, so the
    spans of a text scrubbed once are remembered for every store in the process)."""
    return _DEFAULT_SCRUBBER


def scrub_text(text: str) -> tuple[str, int]:
    """Scrub ``text`` with the default scrubber.

    Args:
        text: Raw text.

    Returns:
        The scrubbed text and the number of redactions made.
    """
    return _DEFAULT_SCRUBBER.scrub(text)


scrub = scrub_text
"""Alias of :func:`scrub_text` (the original name)."""


def scrub_value(value: Any, *, field: str = "value") -> tuple[Any, int]:
    """Scrub every string inside a JSON-like value with the default scrubber.

    See :meth:`Scrubber.scrub_value`.
    """
    return _DEFAULT_SCRUBBER.scrub_value(value, field=field)


def scrub_message(message: object) -> str:
    """``str(message)`` with credentials scrubbed (for error messages that echo input)."""
    return scrub_text(str(message))[0]
