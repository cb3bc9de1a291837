"""The one resource an MCP listener serves (RFC 8707 resource indicators, RFC 9728 protected
resource metadata), and how clients spell it.

Be liberal at the door, strict inside: what a client sends as ``resource`` at ``/authorize``
and ``/token`` is compared by :func:`names_resource`, which accepts the spellings public
reports show (each cited there); what is stored with a grant and checked at ``/mcp`` is the
canonical URL, compared by :func:`same_resource`.

Sources: RFC 8707 §2; RFC 9728 §3.1; MCP authorization (revision 2025-11-25, "Canonical
Server URI").
"""

from __future__ import annotations

from urllib.parse import urlsplit

from mcp.shared.auth_utils import resource_url_from_server_url


def same_resource(a: str | None, b: str) -> bool:
    """Whether two resource indicators name the same resource (RFC 8707 §2: compared in the
    SDK client's canonical form: scheme and host lower case, no fragment)."""
    if not a:
        return False
    try:
        return resource_url_from_server_url(a) == resource_url_from_server_url(b)
    except ValueError:
        return False


def _bare(url: str) -> str | None:
    """``url`` in canonical form without one trailing slash, or None when it carries a query
    or is not a URL (a query changes the resource: getsentry/sentry-mcp#1247)."""
    try:
        parts = urlsplit(resource_url_from_server_url(url))
    except ValueError:
        return None
    if parts.query or not parts.scheme or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}{parts.path.removesuffix('/')}"


def names_resource(asked: str | None, resource: str, origin_is_ours: bool) -> bool:
    """Whether a client's ``resource`` parameter (RFC 8707) names ``resource``, as clients
    spell it: the same URL (:func:`same_resource`), or with a trailing slash
    (anthropics/claude-code#52871: Claude Code sends ``resource`` with a ``/`` appended;
    vercel/ai#13988 the same from ``URL.href``), and, when ``origin_is_ours`` (the issuer is
    the bare origin, so the origin serves this one resource), the origin with or without its
    ``/`` (a client that took the root's protected resource metadata, RFC 9728 §3.1). Any
    other URL, another path, a query, a fragment (RFC 8707 §2: "MUST NOT include a fragment
    component"), is not this resource (``invalid_target``). Only the door is liberal: what is
    stored and checked at ``/mcp`` is the canonical ``resource``."""
    if not asked or "#" in asked:
        return False
    if same_resource(asked, resource):
        return True
    bare, own = _bare(asked), _bare(resource)
    if bare is None or own is None:
        return False
    if bare == own:
        return True
    parts = urlsplit(own)
    return origin_is_ours and bare == f"{parts.scheme}://{parts.netloc}"
