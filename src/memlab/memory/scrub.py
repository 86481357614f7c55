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
   ``AccountKey=``), command-line passwords (``mysql -pXXX``, ``--password X``,
   ``curl -u user:pass``), passwords stated in prose ("the wifi password is …", multi-word
   passphrases up to the end of the clause), credentials named in prose in other ways ("API
   key: …" and "passphrase for the gpg key: …", "changed the root password to …", a quoted
   value right after "password", a long random value right after "access key", a
   user/password pair after "credentials" or "login", a 12–24-word recovery phrase after
   "mnemonic" or "seed phrase", backup codes, door codes, "log in as root with Kx9#mPq2"),
   passwords named in other languages ("Passwort: …"), credentials in structured text (XML
   elements, ``key="ApiKey" value="…"`` pairs, Markdown table rows, ``auth=(user, pass)``
   tuples, escaped JSON quotes), session cookies, and long high-entropy tokens. In prose the
   value's shape decides: "reset the password to access the server" is prose, "… to Kx9#mPq2"
   a password.
2. detect-secrets' vendor plugins (:data:`DETECT_SECRETS_PLUGINS`), run only on short windows
   around a cheap literal trigger, so their regexes never see more than a few hundred
   characters at once (several of them backtrack on long lines). detect-secrets'
   ``KeywordDetector`` is not used: it is super-linear on long lines and needs code syntax;
   rule family 1 covers assignments and prose instead.
3. The same detection on normalised copies of the text: percent-decoded (``%2F`` → ``/``)
   and with line breaks inside a token removed (``ghp_abc…\\ndef…``); their spans are mapped
   back onto the original text.

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
:func:`scrub_value` for nested JSON-like values (dict keys and values, lists, tuples).

Example:
    >>> scrub_text("export OPENAI_API_KEY=sk-proj-Ab12Cd34Ef56Gh78Ij90")
    ('export OPENAI_API_KEY=[REDACTED:api_key]', 1)
"""

from __future__ import annotations

import bisect
import inspect
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
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

Check = Callable[[re.Match[str], str], "tuple[int, int] | tuple[int, int, str] | int | None"]
"""A rule's acceptance test: given the match and the whole (original) text, the span to
redact, optionally with its kind, or ``None`` to reject the match (the search goes on behind
it), or an ``int`` to reject it and go on from that position."""

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
)
_SESSION_KEY_ENDINGS = ("session", "sess", "sessionid", "sessid", "sessionkey", "sesskey")
"""Normalised key names of a session id (a cookie that stands for a login)."""
_PASSWORD_KEY_ENDINGS = (
    "password", "passwd", "passphrase", "passcode", "passkey", "pwd", "pw", "pass",
)  # fmt: skip
_API_KEY_ENDINGS = ("apikey", "apisecret")
_NON_SECRET_VALUES = frozenset(
    "none null nil undefined true false yes no on off required optional empty n/a na tbd "
    "redacted hidden masked changeme".split()
)
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
    if _password_like(value):
        return _extend_clause(text, end)
    if not value.isalpha() or text[end : end + 1] != " ":
        return None
    ext = _extend_clause(text, end)
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


def _check_assignment(m: re.Match[str], text: str) -> tuple[int, int, str] | int | None:
    """``key = value`` where the key names a credential; a value that is not a secret is
    skipped (the search goes on behind it)."""
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
    if session and not key.endswith(_SECRET_KEY_ENDINGS):
        # "session=prod" names a setting; a session id is a long random value
        return (start, end, "token") if _looks_random(value, min_len=16) else v.end()
    sep = m.group("sep")
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
    non-value (``none``, ``changeme``). Under a password key the value must be password-like
    (one word, or a passphrase of plain words); under any other key it must look random
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
    named = _names_credential(k)
    if not named and not k.endswith(_SESSION_KEY_ENDINGS):
        return None
    if not v or _PLACEHOLDER_RE.search(v) or _stated_non_value(v):
        return None
    if not named or k.endswith(("sig", "signature")):
        return "token" if _looks_random(v, min_len=16) else None
    if _password_key(k):
        return "password" if _quoted_password(v) else None
    # a token must look like one: {"contains_secret": "api-key"} is a label
    ok = _looks_random(v) or (v.isdigit() and len(v) >= 6)
    return _kind_of_key(k) if ok else None


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


def _stated_non_value(value: str) -> bool:
    """A value that stands for no credential: no letter or digit, masked (``****``), a stated
    non-value (``none``, ``changeme``), a template (``${TOKEN}``, ``{{ secret }}``, ``<key>``)
    or a reference to the environment or the settings (``os.environ["KEY"]``)."""
    if not _has_alnum(value) or _is_mask(value) or value.lower() in _NON_SECRET_VALUES:
        return True
    if value.startswith(("$", "%(", "{{", "<", "${")) or (value[0] in "{<" and value[-1] in "}>"):
        return True
    return _ENV_REFERENCE.fullmatch(value) is not None


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
    value = text[start:end]
    if not quoted:
        end = _strip_sentence_end(text, start, end)
        value = text[start:end]
    if not _has_alnum(value) or _is_mask(value) or value.lower() in _NON_SECRET_VALUES:
        return None
    if keyword.startswith("pin"):
        return (start, end, "password") if _is_pin(value) else None
    if keyword.endswith("code") and not keyword.startswith("pass"):  # "the door code is 4821#"
        digits = sum(c.isdigit() for c in value)
        ok = digits >= 4 and len(value) <= 12 and all(c.isdigit() or c in "*#" for c in value)
        return (start, end, "password") if ok else None
    if keyword.startswith(("pass", "pw", "security", "secret answer")):
        if quoted:
            return start, end, "password"
        if text[max(0, start - 8) : start].rstrip().endswith(("-", "–", "—")):
            # a dash may open an aside ("the password - which we rotate - is …")
            return (start, end, "password") if _strong_password(value) else None
        got = _password_end(text, start, end)
        return None if got is None else (start, got, "password")
    if keyword == "key" and any(c in value for c in ":/"):
        return None  # "cache key: user:123", "the key is in ~/keys/"
    if quoted and re.fullmatch(r"[A-Za-z]{3,}(?:[-_.][A-Za-z0-9]{3,}){2,}", value):
        return start, end, "token"  # "the secret is 'blue-horse-battery'"
    # secret / token / api key / "the wifi key": a random-looking single value.
    return (start, end, "token") if _looks_random(value) else None


def _check_password_word(m: re.Match[str], text: str) -> tuple[int, int] | None:
    """ "log in with password Hunter22" (no verb): a mixed letter-digit word after it."""
    start, end = m.span("secret")
    end = _strip_sentence_end(text, start, end)
    value = text[start:end]
    if _HASH_WORDS.fullmatch(value) or value.lower() in _NON_SECRET_VALUES:
        return None
    return start, end


def _check_token_shape(m: re.Match[str], text: str) -> tuple[int, int] | None:
    """Vendor prefix + body: the body must look random (``sk-learn-compatible`` is a word)."""
    start, end = m.span("secret") if "secret" in m.re.groupindex else m.span()
    end = _strip_sentence_end(text, start, end)
    body = text[m.start("body") : end] if "body" in m.re.groupindex else text[start:end]
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


_KEY_NAME_WORDS = "secret|private|api|access|auth|bot|signing|encryption|master"
"""Words before "key" or "token" that make it a credential's name (regex alternation)."""
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
_ASIDE_WORDS = ("again", "now", "below", "here", "too", "also", "today")
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


def _quoted_password(value: str) -> bool:
    """A quoted value that is a password: one password-like word, or a passphrase of two or
    more words with at most one word that prose uses about passwords."""
    if not _has_alnum(value) or _is_mask(value) or value.lower() in _NON_SECRET_VALUES:
        return False
    words = value.split()
    if len(words) == 1:
        return _password_like(words[0])
    return sum(_wordish(w) for w in words) <= 1


def _check_set_to(m: re.Match[str], text: str) -> tuple[int, int, str] | None:
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
    is_password = _password_key(keyword)
    kind = "password" if is_password else "token"
    if quoted:
        ok = _quoted_password(value) if is_password else _looks_random(value, min_len=6)
        return (start, end, kind) if ok else None
    if is_password:
        return (start, end, kind) if _strong_password(value) else None
    return (start, end, kind) if _looks_random(value) else None


def _check_foreign_password(m: re.Match[str], text: str) -> tuple[int, int, str] | None:
    """A password named in another language: quoted, or a value that is a password by its
    shape (:func:`_strong_password`; the plain words that prose uses about passwords are
    known in English only: "la contraseña es obligatoria")."""
    if not _word_start(m, text):
        return None
    if m.group("qv") is not None:
        start, end = m.span("qv")
        return (start, end, "password") if _quoted_password(text[start:end]) else None
    start, end = m.span("bv")
    end = _strip_sentence_end(text, start, end)
    return (start, end, "password") if _strong_password(text[start:end]) else None


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


def _check_codes(m: re.Match[str], text: str) -> tuple[int, int] | None:
    """ "backup codes: 1234-5678, 9012-3456": every code has a digit ("backup codes are stored
    in 1Password" names no code)."""
    if not _word_start(m, text):
        return None
    codes = re.split(r"[ \t,;]+", m.group("secret"))
    return m.span("secret") if all(_DIGIT.search(c) for c in codes) else None


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
    """ "with password 'letmein123'": a quoted password right after the word."""
    if not _word_start(m, text) or not _quoted_password(m.group("secret")):
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
    return (start, end) if _strong_password(text[start:end]) else None


# ----------------------------------------------------------------------------- rules
class Rule(NamedTuple):
    """One detection rule.

    Attributes:
        kind: Placeholder type (``[REDACTED:<kind>]``); a ``check`` may name another.
        pattern: Compiled regex.
        check: ``check(match, text)`` → span to redact (optionally with its kind), ``None``
            to reject the match, or an ``int``: reject it and search again from there (see
            :data:`Check`). ``text`` is always the original text (``match`` may come
            from the lower-cased copy). Without a check the named group ``secret`` (or
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
    start = m.start()
    lo = max(0, start - 10)
    while start > lo and text[start - 1].isdigit():
        start -= 1
    if m.start() - start < 8 or (start > 0 and text[start - 1].isalnum()):
        return None
    return start, m.end()


def _check_cmdline_option(m: re.Match[str], text: str) -> tuple[int, int] | None:
    """``--password X`` / ``--db-password=X``: the option starts a word."""
    i = m.start()
    if i > 0 and not text[i - 1].isspace() and text[i - 1] not in "\"'":
        return None
    return _secret_span(m)


def _check_prose_start(m: re.Match[str], text: str) -> tuple[int, int, str] | None:
    return _check_prose(m, text) if _word_start(m, text) else None


def _check_password_word_start(m: re.Match[str], text: str) -> tuple[int, int] | None:
    return _check_password_word(m, text) if _word_start(m, text) else None


def _check_header(m: re.Match[str], text: str) -> tuple[int, int] | None:
    i = m.start()
    if i > 0 and (text[i - 1].isalnum() or text[i - 1] == "-"):
        if not text[max(0, i - 6) : i].lower().endswith("proxy-"):
            return None
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
    "hf_", "api_org_", "sk_live_", "sk_test_", "rk_live_", "rk_test_", "pk_live_", "pk_test_",
    "whsec_", "shpat_", "shpca_", "shppa_", "shpss_", "npm_", "dckr_pat_", "glpat-", "gldt-",
    "glft-", "glsoat-", "glrt-", "glcbt-", "glimt-", "glptt-", "gloas-", "glagent-", "glffct-",
    "GR1348941", "pypi-", "dop_v1_", "doo_v1_", "dor_v1_", "lin_api_", "xoxe.xoxb-",
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
        "password",  # credentials in a URL: scheme://user:PASSWORD@host
        re.compile(
            r"://[^\s:/@\[\]\"'<>]{0,256}+:"
            + _NOT_PLACEHOLDER
            + r"(?P<secret>[^\s/?#\[\]\"'<>]{1,256})@"
        ),
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
        _check_word_start,
        lower=True,
    ),
    Rule(
        "password",  # sshpass -p X, docker login -p X, redis-cli -a X
        re.compile(
            r"(?:sshpass|(?:docker|podman|buildah|nerdctl|registry)\s{1,5}login|redis-cli)"
            r"(?![\w\-])[^\n|;&]{0,200}?\s-[pa]\s{1,5}" + _NOT_PLACEHOLDER + _OPT_VALUE
        ),
        _check_word_start,
        lower=True,
    ),
    Rule(
        "password",  # --password X, --db-password=X, --token X, --api-key X
        re.compile(
            r"--(?:[a-z0-9]{1,20}-){0,3}"
            r"(?:password|passwd|pass|pwd|passphrase|token|secret|api-key|apikey)"
            r"(?:=|\s{1,5})" + _NOT_PLACEHOLDER + _OPT_VALUE
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
        lambda m, t: _secret_span(m) if m.start() == 0 or t[m.start() - 1].isspace() else None,
    ),
    Rule(
        "token",  # key = value, key: value, "key": "value" where the key names a secret
        re.compile(
            r"(?:pass(?:word|wd|phrase|code|key)?|pwd|pw|secret|token|auth|credentials?"
            # a key ending in "key" names a credential only with a prefix (api_key, AccountKey)
            r"|key(?<=[a-z0-9_.\-]key)|sess(?:ion)?(?:[_\-.]?(?:id|key))?"
            r"|sig(?:nature)?)"
            r"(?P<close>(?:\\?[\"'\]]){0,2})(?P<sep>\s{0,5}(?::=|=>|==|::|[:=])\s{0,5})"
            + _NOT_PLACEHOLDER  # the value: _VALUE_RE, read by the check
        ),
        _check_assignment,
        lower=True,
    ),
    Rule(
        "password",  # "the password for the staging db is hunter2", "API key: 3f6b…"
        re.compile(
            r"(?P<key>" + _PROSE_KEYWORDS + r")"
            # an aside before the value: "API token (read-only): …", "passphrase again: …",
            # "the passphrase, in case you need it, is …"
            r"(?:[ \t]{0,3}\([^()\n]{1,40}+\)|,[ \t]{1,3}[^,;:\n]{1,40}+,"
            r"|[ \t]{1,3}(?:" + "|".join(_ASIDE_WORDS) + "))?"
            r"(?:\s+(?:for|of|to|on|at)(?:\s+(?:[\w@./'\-]|:(?!\s)){1,40}+){1,4}?"
            r"(?:" + _PROSE_PUNCT + "|" + _PROSE_VERBS + r")"
            # a punctuation mark right after a one-word name is the assignment rule's
            r"|(?:(?<=[\s_\-]key)|(?<=[\s_\-]token)|(?<=pin)|(?<=code)|(?<=number)|(?<=answer)"
            r"|(?<=\))|" + "|".join(f"(?<={w})" for w in _ASIDE_WORDS) + ")"
            + _PROSE_PUNCT
            + "|" + _PROSE_VERBS + ")"
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
            r"(?P<key>(?:[\w\-]{0,30}[_\-])?(?:" + _PROSE_KEYWORDS + r"))"
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
        "password",  # "Passwort: Geheim123!", "le mot de passe est Soleil2024" (other languages)
        re.compile(
            r"(?P<key>passwort|kennwort|contraseña|contrasena|mot\s+de\s+passe|senha|wachtwoord"
            r"|[пП]ароль|ПАРОЛЬ|hasło|haslo|lösenord|losenord|adgangskode|passord|salasana|heslo"
            r"|jelszó|jelszo|şifre|sifre|パスワード|密码|密碼|비밀번호)"
            r"(?:\s{0,5}(?:=|:|：|->|是|は)\s{0,5}|\s{1,5}(?:ist|es|est|é|er|är|on|jest|je)\s{1,5})"
            + _NOT_PLACEHOLDER
            + r"(?:[\"'“‘`«](?P<qv>[^\"'”’`»\n]{1,256}+)[\"'”’`»]"
            r"|(?P<bv>[^\s\"'“”‘’`«»,;()\[\]{}<>]{1,256}+))"
        ),
        _check_foreign_password,
        lower=True,  # an ASCII-lower-cased copy when lower() changes the length: hence ПАРОЛЬ
        triggers=(
            "passw", "kennw", "contras", "passe", "senha", "wacht", "ароль", "АРОЛЬ", "hasło",
            "haslo", "lösen", "losen", "adgang", "passord", "salas", "heslo", "jelsz", "ifre",
            "パスワード", "密码", "密碼", "비밀번호",
        ),  # fmt: skip
    ),
    Rule(
        "password",  # <password>…</password>, <add key="ApiKey" value="…"/>, | password | … |
        re.compile(
            r"<(?P<k1>[\w:.\-]{1,64})>(?P<v1>[^<>\n]{1,512}+)</(?P=k1)>"
            r"|key\s{0,3}=\s{0,3}\"(?P<k2>[^\"\n]{1,64}+)\"\s{1,5}value\s{0,3}=\s{0,3}"
            r"\"(?P<v2>[^\"\n]{1,512}+)\""
            r"|\|[ \t]{0,5}(?P<k3>[^|\n]{1,64}?)[ \t]{0,5}\|[ \t]{0,5}(?P<v3>[^|\n \t]{1,256}+)"
            r"[ \t]{0,5}\|"
        ),
        _check_keyed_field,
        triggers=("pass", "pw", "secret", "token", "key", "auth", "cred", "sess", "pin"),
    ),
    Rule(
        "password",  # requests.get(url, auth=("bob", "hunter2!")), client.login("bob", "…")
        re.compile(
            r"(?:auth\s{0,3}=\s{0,3}[(\[]|(?:login|log_in|signin|sign_in|authenticate"
            r"|basic_auth|httpbasicauth)\s{0,3}\()\s{0,3}(?P<q1>[\"'])[^\"'\n]{1,128}+(?P=q1)\s{0,3},\s{0,3}"
            r"(?P<q2>[\"'])(?P<secret>[^\"'\n]{1,256}+)(?P=q2)"
        ),
        lower=True,
        triggers=("auth", "login", "log_in", "signin", "sign_in"),
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
        "password",  # "2FA backup codes: 1234-5678, 9012-3456"
        re.compile(
            r"(?:backup|recovery|2fa|mfa|one-time|one\s+time)\s{1,3}codes?"
            r"(?:\s{0,5}[:=]|\s{1,5}(?:are|is|were|was):?)?\s{1,5}"
            + _NOT_PLACEHOLDER
            + r"(?P<secret>[a-z0-9]{4,12}+(?:-[a-z0-9]{4,12}+)?"
            r"(?:[ \t]{0,3}[,;]?[ \t]{1,3}[a-z0-9]{4,12}+(?:-[a-z0-9]{4,12}+)?){0,15})"
            r"(?![\w\-])"
        ),
        _check_codes,
        lower=True,
        triggers=("code",),
    ),
    Rule(
        "password",  # "root:Tr0ub4dor&3 on the NAS": a well-known account and its password
        re.compile(
            r"(?:root|admin|administrator|sa|postgres|ubuntu|pi|deploy|ec2-user|oracle|sysadmin)"
            r"[ \t]{0,2}:[ \t]{0,2}"
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
            r"|secret\s{1,3}recovery\s{1,3}phrase)"
            r"(?:\s{0,5}[:=]|\s{1,5}(?:is|was))?\s{1,5}"
            r"(?P<secret>[a-z]{3,8}(?:[ \t]{1,3}[a-z]{3,8}){11,23})(?![a-z])"
        ),
        _check_word_start,
        lower=True,
        triggers=("mnemonic", "seed", "recovery"),
    ),
    Rule(
        "password",  # "log in with password Hunter22" (mixed letters and digits, no verb)
        re.compile(
            r"(?:password|passphrase)\s{1,5}"
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
_KEY_LINE = re.compile(r"[A-Za-z_][\w.\-]{0,40}:(?:[ \t]|$)|[A-Z][A-Z0-9]*_[A-Z0-9_]*=", re.M)
_BEFORE_BREAK = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-+/=.~")


def _break_pieces(text: str) -> Iterable[tuple[int, int, str]]:
    """Line breaks inside a token (``abc\\\\\\n  def``, ``abc-\\ndef``): ``(start, end, "")``.

    A line that starts with a key (``user: app``, ``DB_USER=app``) starts a new entry of a
    configuration, not the rest of a token: ``password: hunter2`` above it ends at the line
    break."""
    for m in _BREAK_IN_TOKEN.finditer(text):
        if _KEY_LINE.match(text, m.end()):
            continue
        s = m.start()
        lo = max(0, s - 10)
        if s > lo and text[s - 1] == "\r":
            s -= 1
        if s > lo and text[s - 1] == "\\":
            s -= 1
        while s > lo and text[s - 1] in " \t":
            s -= 1
        if s > 0 and text[s - 1] in _BEFORE_BREAK:
            yield s, m.end(), ""


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
        normalize: Also scan a percent-decoded copy and a copy with line breaks inside tokens
            removed, mapping what they find back onto the text.
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
        if self.entropy:
            prio = len(rules) + 1
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
        raw = self._rule_spans(text)
        if self.normalize:
            for pieces in (_percent_pieces, _break_pieces):
                view = _View(text, pieces(text))
                if not view.pieces:
                    continue
                for s, e, p, kind in self._rule_spans(view.text):
                    if view.crosses(s, e):
                        os_, oe = view.span_to_orig(s, e)
                        raw.append((os_, oe, p, kind))
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
        return [(s, e, k) for s, e, _, k in merged]

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

    def scrub_value(self, value: Any, *, field: str = "value") -> tuple[Any, int]:
        """Scrub every string inside a JSON-like value: dict keys and values, list items.

        A string stored under a key that names a credential (``{"db_password": "hunter2"}``)
        is redacted whole when it has a credential's shape (:func:`keyed_secret`): on its own,
        ``hunter2`` says nothing.

        Args:
            value: A string, number, bool, ``None``, or a dict / list / tuple of those.
            field: Name used in error messages.

        Returns:
            A scrubbed copy (dicts, lists and tuples are rebuilt; other values are returned
            as they are) and the number of redactions made.

        Raises:
            ValueError: If the value nests deeper than ``max_depth``.
        """
        self._checked()
        return self._scrub_value(value, field, 0)

    def _scrub_value(self, value: Any, path: str, depth: int) -> tuple[Any, int]:
        if isinstance(value, str):
            return self.scrub(value)
        if not isinstance(value, (dict, list, tuple)):
            return value, 0
        if depth >= self.max_depth:
            raise ValueError(f"field '{path}' nests deeper than {self.max_depth} levels")
        total = 0
        if isinstance(value, dict):
            out: dict[Any, Any] = {}
            for k, v in value.items():
                ck, n1 = self.scrub(k) if isinstance(k, str) else (k, 0)
                kind = keyed_secret(k, v) if isinstance(k, str) and isinstance(v, str) else None
                if kind is not None:  # {"db_password": "hunter2"}: the key says what it is
                    out[ck] = _PLACEHOLDER.format(kind)
                    total += n1 + 1
                    continue
                cv, n2 = self._scrub_value(v, f"{path}.{ck}", depth + 1)
                out[ck] = cv
                total += n1 + n2
            return out, total
        items = []
        for i, v in enumerate(value):
            cv, n = self._scrub_value(v, f"{path}[{i}]", depth + 1)
            items.append(cv)
            total += n
        return (tuple(items) if isinstance(value, tuple) else items), total


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
