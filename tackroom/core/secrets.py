"""Secret scrubbing: the one redaction of credentials, wherever text is stored or printed.

Every text and JSON value the record store writes passes through :func:`scrub` or
:func:`scrub_text` (see :func:`tackroom.records.rows.scrubbed_json`), so a
secret never reaches the DuckDB file or its write-ahead log; policy specs and URLs
that are printed (run tables, errors, reports) go through :func:`redact_url` or
:func:`scrub_text` too. It lives in ``core`` because both the policies that hold
secrets and the records that must not keep them use it. The rules:

* a value whose *key* names a secret (``api_key``, ``apiKey``, ``X-Api-Key``,
  ``authorization``, ``password``, ``client_secret``, ``access_token``,
  ``hf_token``, ``token`` ...) is replaced by :data:`REDACTED`, whatever its
  type; ``token_ids``, ``prompt_tokens``, ``max_tokens``, tokenizer settings
  (``eos_token`` ...) and the ``token`` of a log-prob entry are not secrets;
* inside every string, ``sk-...`` keys, ``hf_`` / ``ghp_`` / ``github_pat_``
  tokens, ``Bearer``/``Basic`` credentials and ``api_key=<value>``-style
  assignments are redacted;
* inside every string, the password of a URL's user-info
  (``http://user:PASSWORD@host/`` — the user-info ends at the authority's *last*
  ``@``, so a password may hold ``@``) and the value of a credential-named query
  parameter (``?key=``, ``?api_key=``, ``&token=``, ``&sig=`` ...) are redacted,
  whatever their length;
* dict keys are text too: a spec used as a key (``policy_ids``) is scrubbed;
* secrets known to be live in this process (the API key a policy sends, a
  password in its base URL, a served endpoint's key), registered with
  :func:`register_secret`, are redacted wherever they appear, whatever they
  look like.
"""

from __future__ import annotations

import base64
import functools
import json
import re
import threading
from collections.abc import Mapping
from typing import Any

__all__ = ["REDACTED", "MIN_SECRET_CHARS", "may_hold_secret", "register_secret", "scrub",
           "scrub_text", "redact_url", "live_secrets", "set_live_secrets"]

#: What a secret is replaced with.
REDACTED = "[redacted]"

# A key whose value is a secret: api_key, apiKey, X-Api-Key, authorization,
# password, client_secret, access_token, hf_token, token ... but not
# token_ids, prompt_tokens, completion_tokens or max_tokens (``token`` must
# be the key's last word).
_SECRET_KEY = re.compile(
    r"(?:^|_)(?:api_?key|apikey|secrets?|password|passwd|passphrase|authorization|auth"
    r"|credentials?|private_key|access_key|cookie)(?:_|$)"
    r"|(?:^|_)token$"
)
# Tokenizer settings that end in ``token`` but hold no secret.
_NOT_SECRET_KEYS = frozenset(
    {"bos_token", "eos_token", "pad_token", "unk_token", "sep_token", "cls_token",
     "mask_token", "max_token", "next_token", "stop_token"}
)
# Secret-looking substrings of free text.
_SECRET_TEXT = re.compile(
    # OpenAI / Anthropic / OpenRouter style keys: sk-..., sk-proj-..., sk-ant-...
    r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_-]{8,}"
    # Hugging Face and GitHub tokens.
    r"|(?<![A-Za-z0-9])(?:hf|gh[pousr]|github_pat)_[A-Za-z0-9_]{20,}"
)
_BEARER = re.compile(r"\b([Bb]earer|BEARER)\s+[A-Za-z0-9._~+/=-]{8,}")
# Basic credentials are base64 of ``user:password``: only a word that decodes to one, so
# that prose ("Basic terminal detected", Gemini CLI's start-up line) is left alone.
_BASIC = re.compile(r"\b([Bb]asic|BASIC)\s+([A-Za-z0-9+/]{4,}={0,2})(?![A-Za-z0-9+/=])")


def _basic(m: re.Match[str]) -> str:
    try:
        pair = base64.b64decode(m.group(2), validate=True)
    except ValueError:  # binascii.Error: not base64
        return m.group(0)
    return f"{m.group(1)} {REDACTED}" if b":" in pair else m.group(0)
# ``api_key=...``, ``"password": "..."``, ``Authorization: xyz`` inside text
# (command lines, JSON strings such as tool-call arguments, URLs).
_SECRET_ASSIGNMENT = re.compile(
    r"(?i)\b((?:[a-z0-9]+[_-])*(?:api[_-]?key|apikey|access[_-]?token|auth[_-]?token"
    r"|secret[_-]?key|client[_-]?secret|password|passwd|authorization)"
    r"[\"']?\s*[:=]\s*[\"']?)"
    r"(?!\[redacted\])(?!(?:bearer|basic)\s)([^\s\"',;&}]+)"
)

# The password of a URL's user-info: ``scheme://user:PASSWORD@host``. The authority
# ends at the first ``/``, ``?``, ``#`` or white space, and its user-info at its last
# ``@`` (the greedy ``[^/?#...]*`` backs off to it), so ``p@ss`` is redacted whole.
# Quotes, ``<>`` and backslashes end it too: a URL inside a JSON document or HTML
# never reaches past its own string.
_URL_PASSWORD = re.compile(
    r"(?i)\b([a-z][a-z0-9+.-]*://[^/?#\s:@\"'<>\\]*:)(?!\[redacted\]@)"
    r"[^/?#\s\"'<>\\]*@")
# A query parameter that carries a credential: ``?key=``, ``&api_key=``, ``&token=``,
# ``&access_token=``, ``&sig=`` (signed URLs), ``&password=`` ...
_URL_QUERY = re.compile(
    r"(?i)([?&;](?:key|api[_-]?key|apikey|x-goog-api-key|token|access[_-]?token"
    r"|auth[_-]?token|id[_-]?token|refresh[_-]?token|secret|client[_-]?secret|password"
    r"|passwd|pwd|sig|signature|x-amz-signature|x-amz-credential|code)=)"
    r"(?!\[redacted\])[^&#\s\"'<>]+")


def redact_url(text: str) -> str:
    """``text`` (a URL, or a spec such as ``openai:MODEL@URL``) with its credentials redacted.

    The user-info password and credential-named query values become :data:`REDACTED`;
    the rest (scheme, user, host, port, path, other parameters) is kept, so a printed or
    stored spec still says where a run went. Text without credentials comes back as is.
    """
    if "://" not in text:
        return text
    text = _URL_PASSWORD.sub(rf"\1{REDACTED}@", text)
    return _URL_QUERY.sub(rf"\1{REDACTED}", text)


def _snake(key: str) -> str:
    """``X-Api-Key`` → ``x_api_key``, ``accessToken`` → ``access_token``."""
    key = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key)
    return key.lower().replace("-", "_").replace(" ", "_")


@functools.lru_cache(maxsize=4096)
def _secret_name(key: str) -> str | None:
    """The snake-case form of ``key`` if it names a secret, else ``None``."""
    name = _snake(key)
    if name in _NOT_SECRET_KEYS or not _SECRET_KEY.search(name):
        return None
    return name


def _is_secret_key(key: str, siblings: Mapping[Any, Any]) -> bool:
    name = _secret_name(key)
    # OpenAI log-prob entries are {"token": "hello", "logprob": -0.1, ...}.
    return name is not None and not (name == "token" and "logprob" in siblings)


# A cheap test that a string (or a whole JSON document) may hold a secret.
# Every secret key name and every secret text pattern above contains one of
# these (lower-cased, with ``_``, ``-`` and spaces removed for the words), so
# text without any of them needs no scrubbing. Substring tests are ~20x faster
# than one case-insensitive regex over the same text.
_SECRET_MARKS = ("sk-", "hf_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")
_SECRET_WORDS = ("token", "auth", "apikey", "secret", "passw", "passphrase", "bearer", "basic",
                 "credential", "privatekey", "accesskey", "cookie")


#: Registered secrets shorter than this are ignored: redacting every "abc"
#: from model output would mangle it, and such a value protects nothing.
MIN_SECRET_CHARS = 8
_LIVE_LOCK = threading.Lock()
# Each live secret with its JSON-escaped form (what it looks like inside a
# serialised document), longest first so that one containing another wins.
_LIVE: tuple[tuple[str, str], ...] = ()


def register_secret(value: str | None) -> bool:
    """Redact ``value`` from everything scrubbed from now on, in this process.

    For secrets in use that no pattern recognises: a policy's API key without
    a known prefix, a password in a base URL, ``tackroom serve``'s key. Values
    shorter than :data:`MIN_SECRET_CHARS` are ignored; returns whether
    ``value`` is (now) registered.
    """
    global _LIVE
    if not isinstance(value, str) or len(value) < MIN_SECRET_CHARS:
        return False
    with _LIVE_LOCK:
        if all(value != v for v, _ in _LIVE):
            pairs = [*_LIVE, (value, json.dumps(value)[1:-1])]
            _LIVE = tuple(sorted(pairs, key=lambda p: -len(p[0])))
    return True


def live_secrets() -> tuple[tuple[str, str], ...]:
    """The registered secrets (each with its JSON-escaped form), to hand to another process."""
    return _LIVE


def set_live_secrets(live: tuple[tuple[str, str], ...]) -> None:
    """Make ``live`` (from :func:`live_secrets` in another process) this process's secrets."""
    global _LIVE
    with _LIVE_LOCK:
        _LIVE = tuple(live)


def _scrub_live(text: str) -> str:
    for value, _ in _LIVE:
        if value in text:
            text = text.replace(value, REDACTED)
    return text


def may_hold_secret(text: str) -> bool:
    """``False`` when ``text`` (a string or a whole JSON document) surely holds no secret."""
    if any(v in text or e in text for v, e in _LIVE):
        return True
    if "://" in text and ("@" in text or "=" in text):  # a URL with user-info or a query
        return True
    low = text.lower()
    if any(mark in low for mark in _SECRET_MARKS):
        return True
    compact = low.replace("_", "").replace("-", "").replace(" ", "")
    return any(word in compact for word in _SECRET_WORDS)


def scrub_text(text: str) -> str:
    """``text`` with secret-looking substrings replaced by :data:`REDACTED`."""
    if not may_hold_secret(text):
        return text
    text = _scrub_live(text)
    text = redact_url(text)
    text = _SECRET_TEXT.sub(REDACTED, text)
    text = _BEARER.sub(rf"\1 {REDACTED}", text)
    text = _BASIC.sub(_basic, text)
    return _SECRET_ASSIGNMENT.sub(rf"\1{REDACTED}", text)


def scrub(obj: Any) -> Any:
    """A copy of ``obj`` with secrets replaced by ``"[redacted]"``.

    Walks dicts, lists and tuples. A value is a secret when its key names one
    (``api_key``, ``authorization``, ``password``, ``secret``, ``token``,
    ``access_token`` ...; not ``token_ids``, ``prompt_tokens`` or
    ``max_tokens``), whatever its type (``None``, ``""`` and booleans are
    kept). Inside every string — dict keys included — ``sk-...`` keys, ``hf_`` /
    ``ghp_`` tokens, ``Bearer <token>``, ``api_key=<value>``-style assignments, URL
    passwords and credential query values (:func:`redact_url`) and registered live
    secrets (:func:`register_secret`) are redacted. Other values are returned unchanged.
    """
    if isinstance(obj, str):
        return scrub_text(obj)
    if isinstance(obj, Mapping):
        out = {}
        for key, value in obj.items():
            if (isinstance(key, str) and value not in (None, "") and not isinstance(value, bool)
                    and _is_secret_key(key, obj)):
                out[key] = REDACTED
            else:
                out[scrub_text(key) if isinstance(key, str) else key] = scrub(value)
        return out
    if isinstance(obj, list | tuple):
        return [scrub(v) for v in obj]
    return obj
