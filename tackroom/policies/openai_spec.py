"""Where an ``openai`` policy's server is: its spec (``openai:MODEL@URL``) and base URL.

A base URL may carry a password (``http://user:pass@host/v1``): it is taken out
here (:func:`split_userinfo`) and only the printable form of the URL
(:func:`clean_url`: no user-info, query or fragment) is ever shown or recorded; a
spec printed in an error goes through :func:`tackroom.core.secrets.redact_url`, the
one redaction the records use too.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.request
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from tackroom.core.errors import PolicyError
from tackroom.core.secrets import redact_url

__all__ = ["SPEC_FORM", "check_url", "clean_url", "is_local", "is_openai_host", "proxied",
           "read_spec", "split_userinfo"]

_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "0.0.0.0", "[::1]"}


def split_userinfo(url: str) -> tuple[str, str, str]:
    """``(url with user-info percent-encoded, user, password)``.

    The authority ends at the first ``/``, ``?`` or ``#`` and the user-info at
    its *last* ``@``, so a password may hold ``@`` and ``:``
    (``http://user:p@ss@host:8000/v1``).
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url, "", ""
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, tail = rest[:end], rest[end:]
    userinfo, at, hostport = authority.rpartition("@")
    if not at:
        return url, "", ""
    user, _, password = userinfo.partition(":")
    user, password = unquote(user), unquote(password)
    enc = quote(user, safe="") + (f":{quote(password, safe='')}" if password else "")
    return f"{scheme}://{enc}@{hostport}{tail}", user, password


def check_url(url: str, policy_id: str) -> str:
    """The printable form of ``url`` (see :func:`_clean_url`), or a PolicyError if it is not
    an http(s) URL with a host that the HTTP client could use."""
    try:
        parts = urlsplit(url)
        # hostname is None, never "", when the URL has no host
        ok = (parts.scheme in ("http", "https") and parts.hostname is not None
              and _valid_host(parts.hostname) and not _URL_JUNK.search(url))
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        ok = False
    if not ok:
        shown = redact_url(url)  # never a password
        raise PolicyError(f"cannot use base URL {shown!r}", policy_id,
                          "give an http(s) URL with a host, e.g. http://127.0.0.1:8000/v1")
    return clean_url(url)


# Whitespace and control characters, which no HTTP client puts on a request line.
_URL_JUNK = re.compile(r"[\x00-\x20\x7f]")
_HOST_CHARS = re.compile(r"[a-z0-9._~%!$&'()*+,;=-]+")


def _valid_host(host: str) -> bool:
    """An IP literal, or a name that encodes to ASCII host characters (IDNA for others)."""
    if ":" in host:
        try:
            ipaddress.IPv6Address(host.split("%", 1)[0])
        except ValueError:
            return False
        return True
    try:
        ascii_host = host.encode("idna").decode("ascii")
    except UnicodeError:
        return False
    return bool(_HOST_CHARS.fullmatch(ascii_host.lower()))


def clean_url(url: str) -> str:
    """``url`` without user-info, query or fragment: safe to print and record."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def is_openai_host(url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    return host == "openai.com" or host.endswith(".openai.com")


def is_local(url: str) -> bool:
    return (urlsplit(url).hostname or "").lower() in _LOCAL_HOSTS


def proxied(url: str) -> bool:
    """Whether an ``HTTP(S)_PROXY`` variable applies to ``url`` (``NO_PROXY`` honoured)."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies_environment()
    if not proxies.get(parts.scheme) and not proxies.get("all"):
        return False
    # typeshed leaves out proxy_bypass_environment (CPython's urllib.request has it)
    return not urllib.request.proxy_bypass_environment(  # type: ignore[attr-defined]
        parts.hostname or "", proxies)


SPEC_FORM = "write openai:MODEL or openai:MODEL@http://host:port/v1"
# The ``@`` that starts a URL: the first one followed by ``scheme://``.
_URL_AT = re.compile(r"@(?=[A-Za-z][A-Za-z0-9+.-]*://)")
# What follows an ``@`` and looks like a host without a scheme:
# ``localhost[:port]``, an IP, ``[v6]``, or any ``host:port`` / ``host/path``.
_BARE_HOST = re.compile(
    r"^(?:(?:localhost|\d{1,3}(?:\.\d{1,3}){3}|\[[0-9A-Fa-f:.]+\])(?::\d+)?(?:[/?#]|$)"
    r"|[A-Za-z0-9][A-Za-z0-9.-]*(?::\d+(?:[/?#]|$)|\.[A-Za-z0-9-]+/))")


def read_spec(spec: str, opts: dict[str, Any]) -> tuple[str, str]:
    """``(model, spec as shown)`` of ``openai:MODEL`` or ``openai:MODEL@http://host:port/v1``;
    the URL, if any, goes into ``opts["base_url"]``.

    A ``base_url`` in ``opts`` wins over none in the spec; giving both is an error.
    The URL starts at the first ``@`` followed by ``http://`` or ``https://``,
    so a model name may hold ``@`` (``org/model@v2@http://...``) and so may the
    URL's password (its user-info ends at the authority's last ``@``). A spec whose
    ``@`` is followed by something else that looks like a server
    (``m@127.0.0.1:8000/v1``, ``m@ftp://...``) is refused: it is never read as a
    model name served by the default (remote) endpoint.
    """
    shown = redact_url(spec)
    prefix, sep, rest = spec.partition(":")
    if prefix != "openai" or not sep or not rest:
        raise PolicyError(f"not an openai policy spec: {shown!r}", "--policy", SPEC_FORM)
    m = _URL_AT.search(rest)
    if m is not None:
        model, url = rest[:m.start()], rest[m.end():]
        if not url.lower().startswith(("http://", "https://")) or not model:
            raise PolicyError(f"cannot read model and URL from {shown!r}", "--policy",
                              SPEC_FORM + " (MODEL not empty, the URL starting with http:// or https://)")
        scheme, _, tail = url.partition("://")
        url = f"{scheme.lower()}://{tail}"  # schemes are case-insensitive
        if opts.get("base_url"):
            raise PolicyError(f"two base URLs: {shown!r} and base_url="
                              f"{clean_url(str(opts['base_url']))!r}",
                              "--policy", "give the URL once")
        opts["base_url"] = url
    else:
        model = rest
        tails = [rest[i + 1:] for i, c in enumerate(rest) if c == "@"]
        if any(_BARE_HOST.match(t) for t in tails):
            raise PolicyError(f"{shown!r} names a server without http:// or https://",
                              "--policy", SPEC_FORM)
    return model, shown
