"""What the editor's consent page shows of an authorisation request, and where the decision
sends the browser (issue 43). No Flask: the page is the review site's
(:mod:`gateway.api.oauth_consent`).

The consent screen is the editor's defence against a confused deputy (MCP authorization,
revision 2026-07-28, "Confused deputy problem"; the same in 2025-11-25): a client named by any
URL, or registered by anyone, asks for a grant, and only the editor can tell whether it is the
app they meant to connect. So the page shows what can be verified and flags what cannot:

* **The client's host**: for a Client ID Metadata Document the host of its URL, which the
  authorization server fetched over HTTPS and whose ``client_id`` equals that URL (the one
  name on the page a stranger cannot choose); for a dynamic registration (RFC 7591) nothing is
  verified, and the page says "registered dynamically, unverified". International names are
  shown as IDNA ASCII (``xn--``), never in a look-alike script.
* **The redirect host**: where the code goes. Flagged when it differs from the client's host;
  a loopback redirect (RFC 8252 §7.3: ``127.0.0.0/8``, ``::1``, ``localhost``) is "an app on
  this computer": whatever program listens on that port of the computer the editor approves
  from.
* **The client's name**: the client's own words, so least trusted: control, format (bidi
  overrides and isolates, zero-width) and line/paragraph separator characters are removed,
  whitespace collapsed, and the name capped at :data:`NAME_CHARS`. Its ``logo_uri`` is never
  shown (the page's ``img-src`` stays ``'self' data:``).
* **What the grant can and cannot do**: :data:`CAN` and :data:`CANNOT`.

The pending request's id is a bearer secret for the few minutes it lives: the session keeps it
sealed (:func:`seal`, Fernet under a key derived from ``GATEWAY_SECRET_KEY``), so neither the
sign-in cookie nor the ledger's session row holds it in clear. The page's form carries the
request it shows as :func:`reference` (a keyed digest, not the id): a decision whose form names
another request than the session holds is refused, so a request swapped into the session by a
navigation the editor did not see is never the one decided.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
import unicodedata
from dataclasses import dataclass
from urllib.parse import urlsplit

from cryptography.fernet import Fernet
from cryptography.fernet import InvalidToken

from gateway.core import sealing
from gateway.tenancy import grants

#: The most characters of a client's name shown (and kept in the grant).
NAME_CHARS = 80
UNVERIFIED = "registered dynamically, unverified"
LOOPBACK = "an app on this computer"
#: What a grant lets the client do: the eight tool routes, in the editor's words.
CAN = (
    "start jobs",
    "upload images",
    "write drafts",
    "insert blocks",
    "verify drafts",
    "request an editor's approval",
    "recover interrupted jobs",
    "read its jobs",
)
#: What a grant never lets the client do, whatever it asks.
CANNOT = (
    "approve a draft",
    "publish or schedule anything",
    "see other tenants",
    "use the sites you did not tick",
)
_DROPPED_CATEGORIES = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}
_ORIGIN_SAFE = re.compile(r"^[a-z][a-z0-9+.-]*://[A-Za-z0-9.\-\[\]:]+$|^[a-z][a-z0-9+.-]*:$")


@dataclass(frozen=True)
class ClientView:
    """What the consent page shows of one request (no secret).

    ``host`` is the verified host of a metadata-document client (``host`` or ``host:port``),
    None for a dynamic registration. ``redirect_kind`` is ``same`` (the client's host),
    ``loopback`` (RFC 8252 §7.3) or ``other`` (a different host: flagged), and ``unverified``
    for a dynamic registration's non-loopback redirect (nothing to compare it with).
    ``redirect_origin`` is the CSP source that lets the browser follow the decision's
    redirect (``form-action``), None when the URI has no origin a policy can name safely.
    """

    name: str
    host: str | None
    redirect_uri: str
    redirect_host: str
    redirect_kind: str
    redirect_origin: str | None

    @property
    def host_words(self) -> str:
        """The client's host, or :data:`UNVERIFIED`."""
        return self.host or UNVERIFIED

    @property
    def redirect_flagged(self) -> bool:
        """Whether the page warns about the redirect (another host than the client's, or
        an unverified client's non-loopback redirect)."""
        return self.redirect_kind in ("other", "unverified")


def clean_name(raw: object, limit: int = NAME_CHARS) -> str:
    """The client's name as the page may show it: text only, without control, format
    (bidi embeddings, overrides and isolates, zero-width characters), surrogate, private-use,
    unassigned or line/paragraph separator characters, whitespace runs made one space,
    NFC-normalised, at most ``limit`` characters (an ellipsis ends a cut name). Anything but
    a non-empty string gives ``"(no name)"``."""
    if not isinstance(raw, str):
        return "(no name)"
    kept = "".join(
        " " if ch.isspace() else ch
        for ch in unicodedata.normalize("NFC", raw)
        if ch.isspace() or unicodedata.category(ch) not in _DROPPED_CATEGORIES
    )
    text = " ".join(kept.split())
    if not text:
        return "(no name)"
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _ascii_host(host: str) -> str:
    """``host`` lower-cased, an international name as IDNA ASCII (``xn--``)."""
    host = host.lower()
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        return host.encode("ascii", "backslashreplace").decode("ascii")


def _host_and_port(url: str) -> tuple[str, int | None]:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    return _ascii_host(parts.hostname or ""), port


def client_host(client_id: str) -> str | None:
    """The verified host of a client named by the HTTPS URL of its metadata document
    (``host``, or ``host:port`` when the URL names a port), None for any other client id
    (a dynamic registration's ``dcr-…``: unverified)."""
    if not client_id.startswith("https://"):
        return None
    host, port = _host_and_port(client_id)
    if not host:
        return None
    return f"{host}:{port}" if port not in (None, 443) else host


def is_loopback(uri: str) -> bool:
    """Whether ``uri`` is a loopback redirect (RFC 8252 §7.3: ``http`` to ``127.0.0.0/8``
    or ``[::1]``; ``localhost`` counts too, RFC 8252 §8.3 discourages but clients use it)."""
    parts = urlsplit(uri)
    if parts.scheme not in ("http", "https"):
        return False
    host = (parts.hostname or "").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def redirect_origin(uri: str) -> str | None:
    """The CSP source expression of ``uri``'s origin (``scheme://host[:port]``, or
    ``scheme:`` for a private-use scheme, RFC 8252 §7.1), None when it cannot be written
    safely in a policy (no host, odd characters)."""
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    if scheme in ("http", "https"):
        if not parts.hostname:
            return None
        origin = f"{scheme}://{parts.netloc.rsplit('@', 1)[-1].lower()}"
    else:
        origin = f"{scheme}:"
    return origin if _ORIGIN_SAFE.match(origin) else None


def describe(client_id: str, metadata: dict | None, redirect_uri: str) -> ClientView:
    """What the consent page shows of a request from ``client_id`` (its ``metadata`` as the
    ledger keeps it, :mod:`gateway.tenancy.oauth_clients`) to ``redirect_uri``."""
    host = client_host(client_id)
    name = clean_name((metadata or {}).get("client_name"))
    redirect_host, port = _host_and_port(redirect_uri)
    scheme = urlsplit(redirect_uri).scheme.lower()
    if scheme not in ("http", "https"):  # a private-use scheme (RFC 8252 §7.1): any app's
        kind, shown = "other", f"an app's own link ({scheme}:)"
        return ClientView(name, host, redirect_uri, shown, kind, redirect_origin(redirect_uri))
    if is_loopback(redirect_uri):
        kind = "loopback"
        shown = LOOPBACK + (f" (port {port})" if port else "")
    elif host is None:
        kind, shown = "unverified", redirect_host
    else:
        same = redirect_host == _host_and_port(client_id)[0]
        kind, shown = ("same" if same else "other"), redirect_host
    return ClientView(name, host, redirect_uri, shown, kind, redirect_origin(redirect_uri))


def _fernet(secret_key: str) -> Fernet:
    return sealing.fernet(secret_key, b"oauth-pending")


def seal(secret_key: str, pending_id: str) -> str:
    """``pending_id`` encrypted and authenticated (Fernet) under a key derived from
    ``secret_key`` for this use only: what the review session keeps."""
    return _fernet(secret_key).encrypt(pending_id.encode("utf-8")).decode("ascii")


def unseal(secret_key: str, sealed: object, max_age_seconds: int) -> str | None:
    """The pending id :func:`seal` sealed at most ``max_age_seconds`` ago, or None (not a
    string, forged, sealed under another key, or older)."""
    if not isinstance(sealed, str) or not sealed:
        return None
    try:
        plain = _fernet(secret_key).decrypt(sealed.encode("ascii"), ttl=max_age_seconds)
    except (InvalidToken, UnicodeError):
        return None
    return plain.decode("utf-8")


def reference(secret_key: str, pending_id: str) -> str:
    """The consent form's name for the request it shows: HMAC-SHA256 of ``pending_id``
    under ``secret_key`` (64 hex characters; it reveals neither the id nor the ledger's
    SHA-256 of it)."""
    key = hashlib.sha256(b"oauth-pending-reference:" + secret_key.encode("utf-8")).digest()
    return hmac.new(key, pending_id.encode("utf-8"), hashlib.sha256).hexdigest()


def is_reference(secret_key: str, pending_id: str, shown: object) -> bool:
    """Whether ``shown`` (the form's field) is :func:`reference` of ``pending_id``
    (compared in constant time); False for anything but a string."""
    if not isinstance(shown, str):
        return False
    return hmac.compare_digest(
        shown.encode("ascii", "replace"), reference(secret_key, pending_id).encode()
    )


def grant_list(tenant: str | None) -> list[dict]:
    """The grants of ``tenant`` (every tenant's when None) as the review page and ``gateway
    tokens list`` show them, newest first per tenant, no secret: ``grant_id``, ``tenant``,
    ``client_id`` (public: a metadata document's URL or a registration's ``dcr-…``; two apps
    of the same name differ by it), ``client_name`` (cleaned), ``client_host`` (verified
    host, None: a dynamic registration, unverified), ``sites``, ``approved_by``,
    ``created_at``, ``last_used_at`` (written at most once a minute), ``revoked_at`` (naive
    UTC datetimes or None) and ``revoked_why``."""
    return [
        {
            "grant_id": grant.id,
            "tenant": grant.tenant,
            "client_id": grant.client_id,
            "client_name": clean_name(grant.client_name),
            "client_host": client_host(grant.client_id),
            "sites": list(grant.sites),
            "approved_by": grant.approved_by,
            "created_at": grant.created_at,
            "last_used_at": grant.last_used_at,
            "revoked_at": grant.revoked_at,
            "revoked_why": grant.revoked_why,
        }
        for grant in grants.list_grants(tenant)
    ]
