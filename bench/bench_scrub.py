"""Credential scrubbing: detection rate, false positives and throughput.

Usage: python bench/bench_scrub.py [--quick]

Reports, on the corpora in ``tests/fixtures/secrets/`` (rebuild them with
``python tests/fixtures/secrets/build_corpus.py``):

* detection rate: share of positive texts with no part (4+ characters, raw or percent-decoded)
  of the secret left after scrubbing, with and without the detect-secrets plugins;
* false-positive rate: share of benign texts changed by scrubbing, and the same on the
  texts of ``datasets/agent-memories`` that hold no credential keyword;
* throughput in MB/s on the corpora and the time for 20,000-character memories and 1 MB
  adversarial inputs (target: each well under a second), with the 1 MB / 100 kB time ratio
  (≈10 for linear time).
"""

from __future__ import annotations

import base64
import json
import random
import sys
import time
from pathlib import Path
from urllib.parse import unquote

from memlab.memory.scrub import Scrubber

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "fixtures" / "secrets"


def load(name: str) -> list[dict]:
    return [json.loads(line) for line in (CORPUS / name).read_text().splitlines() if line]


def leaked(out: str, secret: str) -> bool:
    parts = [p for p in secret.replace("\\\n", " ").split() if len(p) >= 4]
    return any(p in out for p in parts + [unquote(p) for p in parts])


def adversarial(n: int) -> dict[str, str]:
    rng = random.Random(0)
    b64 = base64.b64encode(rng.randbytes(n * 3 // 4 + 3)).decode()[:n]
    units = {
        "'a' * n": "a",
        "'=' * n": "=",
        "'password ' * n": "password ",
        "'password=x ' * n": "password=x ",
        "'token: ' * n": "token: ",
        "'the password is long ' * n": "the password is long ",
        "'sk-' * n": "sk-",
        "'AKIA' * n": "AKIA",
        "'ab\\n' * n (line breaks in tokens)": "ab\n",
        "'%41' * n (percent escapes)": "%41",
        "'http://a:b@' * n": "http://a:b@",
        "'mysql -u ' * n": "mysql -u ",
        "'-----BEGIN RSA PRIVATE KEY-----' * n": "-----BEGIN RSA PRIVATE KEY-----",
        "'\\n' * n": "\n",
        "'-' * n": "-",
        "'pw: ' * n": "pw: ",
        "'key:' * n": "key:",
        "'password - ' * n": "password - ",
        "'set the password to ' * n": "set the password to ",
        "'<password>' * n": "<password>",
        "'| a | b |' * n": "| a | b |",
        "'credentials: a / ' * n": "credentials: a / ",
        # the red-team classes' triggers
        "'htpasswd -b a b c ' * n": "htpasswd -b a b c ",
        "'net use \\\\a\\b x ' * n": "net use \\\\a\\b x ",
        "'-storepass ' * n": "-storepass ",
        "'identified by x ' * n": "identified by x ",
        "'echo x | sudo -S ' * n": "echo x | sudo -S ",
        "'a.b:1:c:d:e\\n' * n (.pgpass)": "a.b:1:c:d:e\n",
        "\"('password', 'x\" * n": "('password', 'x",
        "\"|| 'x' \" * n": "|| 'x' ",
        "'4111 ' * n (card digits)": "4111 ",
        "'door code ' * n": "door code ",
        "'x as the password ' * n": "x as the password ",
        "'**password:** ' * n": "**password:** ",
        "'| password |\\n|---|\\n' * n": "| password |\n|---|\n",
        "'2fa secret: ABCD ' * n": "2fa secret: ABCD ",
        "'wifi:t:wpa;' * n": "wifi:t:wpa;",
        "'passwort für ' * n": "passwort für ",
        "'пароль от ' * n": "пароль от ",
        "'p a s s ' * n": "p a s s ",
        "'p4ssw0rd ' * n": "p4ssw0rd ",
        "'\\u200b' * n (zero-width space)": "\u200b",
        "'p\\u0430ss' * n (Cyrillic a)": "p\u0430ss",
        "'\\uff50' * n (fullwidth p)": "\uff50",
        "'a ' * n (spaced letters)": "a ",
        "'recovery codes: ab12\\n' * n": "recovery codes: ab12\n",
        "'seed words - 1. abc ' * n": "seed words - 1. abc ",
        "'ssh-rsa AAAA' * n": "ssh-rsa AAAA",
        "'-----BEGIN CERTIFICATE-----' * n": "-----BEGIN CERTIFICATE-----",
        "'key_base = ' * n": "key_base = ",
    }
    out = {k: (u * (n // len(u) + 1))[:n] for k, u in units.items()}
    out["base64 without delimiters"] = b64
    return out


def timed(fn, text: str) -> float:
    t0 = time.perf_counter()
    fn(text)
    return time.perf_counter() - t0


def main() -> None:
    quick = "--quick" in sys.argv
    full = Scrubber()
    own = Scrubber(plugins=())
    positives, benign = load("positives.jsonl"), load("benign.jsonl")
    for name, sc in (("own rules + detect-secrets", full), ("own rules only", own)):
        missed = [r for r in positives if leaked(sc.scrub(r["text"])[0], r["secret"])]
        fps = [r for r in benign if sc.scrub(r["text"])[1]]
        print(
            f"{name:28s} detection {1 - len(missed) / len(positives):.3f} "
            f"({len(positives) - len(missed)}/{len(positives)})  "
            f"false positives {len(fps) / len(benign):.3f} ({len(fps)}/{len(benign)})"
        )
        for r in missed:
            print(f"    missed {r['kind']}: {r['text'][:80]!r}")
    keywords = ("password", "secret", "token", "api_key", "key=", "sk-", "BEGIN", "://", "Bearer")
    rows = [
        json.loads(line)
        for line in (ROOT / "datasets/agent-memories/memories.jsonl").read_text().splitlines()
        if line.strip()
    ]
    memories = [r["text"] for r in rows if isinstance(r.get("text"), str)]
    clean = [t for t in memories if not any(k in t for k in keywords)]
    changed = sum(1 for t in clean if full.scrub(t)[1])
    print(
        f"agent-memories without credential markers: {changed}/{len(clean)} changed "
        f"(false-positive rate {changed / max(1, len(clean)):.4f})"
    )

    texts = [r["text"] for r in positives + benign]
    size = sum(len(t.encode()) for t in texts)
    t0 = time.perf_counter()
    for t in texts:
        full.scrub(t)
    dt = time.perf_counter() - t0
    print(
        f"corpus throughput: {size / dt / 1e6:.2f} MB/s, "
        f"{len(texts) / dt:,.0f} texts/s ({dt / len(texts) * 1e6:.0f} µs/text)"
    )
    rng = random.Random(1)
    legal = " ".join(rng.choice(memories) for _ in range(400))[:20_000]
    print(f"20,000-character memory: {timed(full.scrub, legal) * 1000:.1f} ms")

    n_big = 200_000 if quick else 1_000_000
    big, small = adversarial(n_big), adversarial(n_big // 10)
    print(f"adversarial inputs ({n_big:,} characters; ratio = time / time at a tenth):")
    worst = 0.0
    for name, text in big.items():
        t_big = timed(full.scrub, text)
        t_small = max(timed(full.scrub, small[name]), 1e-6)
        worst = max(worst, t_big)
        print(
            f"  {name:42s} {t_big:7.3f} s  {len(text) / t_big / 1e6:6.2f} MB/s  "
            f"ratio {t_big / t_small:5.1f}"
        )
    print(f"worst adversarial time: {worst:.3f} s")


if __name__ == "__main__":
    main()
