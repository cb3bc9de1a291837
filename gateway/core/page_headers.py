"""The security headers of every HTML page the gateway serves: the review site's pages (the
consent page among them, :mod:`gateway.api.review_page`) and the authorization server's
error page (:mod:`gateway.oauth.error_pages`), written once so the two cannot drift.

The policy allows inline styles only (the pages' one ``<style>``), no script, images from
the page's own origin or ``data:``, forms posted back to the same origin (the consent page
adds the client's redirect origin, :func:`gateway.api.oauth_consent._with_form_action`), and
no framing (``frame-ancestors 'none'`` and ``X-Frame-Options: DENY`` for older browsers). No
page is stored by a cache (``no-store``): each carries a session's or a sign-in's facts.
Sources: CSP Level 3 (W3C); RFC 7034 (X-Frame-Options); Referrer Policy (W3C); RFC 9111
§5.2.2.5 (no-store)."""

from __future__ import annotations

SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
}
