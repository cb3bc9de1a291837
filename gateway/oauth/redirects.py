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
