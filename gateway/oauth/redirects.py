"""Where the editor's browser goes after a decision on the consent page (issue 43): the
client's redirect URI with the authorization response (RFC 6749 §4.1.2), ``iss`` included
(RFC 9207: the authorization server's metadata advertises
``authorization_response_iss_parameter_supported``, so the ``mcp`` SDK's client refuses a
response without it, and a response from another issuer).

The consent page (:mod:`gateway.api`) calls :func:`client_redirect` with what
:func:`gateway.tenancy.grants.approve` or :func:`gateway.tenancy.grants.deny` returned and
answers ``303`` to it; the approve response's CSP must allow its origin in ``form-action``
(:func:`gateway.oauth.consent.redirect_origin`).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from mcp.server.auth.provider import construct_redirect_uri

from gateway.tenancy.grants import Decision


def client_redirect(decision: Decision, issuer: str) -> str:
    """The client's redirect URI with ``code`` (approved) or ``error=access_denied``
    (denied), the client's ``state`` when it sent one, and ``iss`` (the issuer exactly as
    the metadata names it, no trailing slash). The URL carries the code: never log it."""
    iss = issuer.rstrip("/")
    if decision.code is None:
        return construct_redirect_uri(
            decision.redirect_uri, error="access_denied", state=decision.state, iss=iss
        )
    return construct_redirect_uri(
        decision.redirect_uri, code=decision.code, state=decision.state, iss=iss
    )


LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")  # as urlsplit's hostname gives them
# A private-use URI scheme (RFC 8252 §7.1): reverse domain name, so it holds a dot.
_PRIVATE_USE = re.compile(r"[a-z][a-z0-9+\-]*\.[a-z0-9+.\-]+")


def redirect_uri_problem(uri: str) -> str | None:
    """Why ``uri`` may not be a client's redirect URI, or None when it may (OAuth 2.1 §2.3.1
    and §8.4.2, RFC 8252 §7): ``https`` with a host; ``http`` only to a loopback host
    (127.0.0.1, [::1], localhost: an app on this computer); a private-use scheme named by a
    reverse domain (``com.example.app:/cb``). Never a fragment or user information, and never
    ``javascript:``, ``data:``, ``file:`` or any other scheme: the browser is sent there with
    the code."""
    try:
        parts = urlsplit(uri)
        host = parts.hostname
    except ValueError:
        return "not a URL"
    scheme = parts.scheme.lower()
    if parts.fragment or "#" in uri:
        return "a redirect URI may not hold a fragment (RFC 6749 §3.1.2)"
    if parts.username is not None or parts.password is not None:
        return "a redirect URI may not hold user information"
    if scheme == "https":
        return None if host else "an https redirect URI needs a host"
    if scheme == "http":
        if (host or "") in LOOPBACK_HOSTS:
            return None
        return "http is allowed only to a loopback address (127.0.0.1, [::1], localhost)"
    if _PRIVATE_USE.fullmatch(scheme):
        return None
    return f"the scheme {scheme or '(none)'!r} is not a redirect a browser may be sent to"
