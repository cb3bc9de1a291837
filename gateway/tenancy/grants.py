"""What an editor grants an MCP client (OAuth 2.1 authorization code flow, issue 43): the
pending authorisation ``/authorize`` opens, the editor's decision on the consent page, the grant
it makes and its single-use authorization code, and the grants an editor lists and revokes.

A grant's principal is one tenant, a set of that tenant's sites and the eight tool routes
(:data:`TOOL_SCOPE`): never approve or publish. Every id and code here is 32 random bytes, stored
only as SHA-256 (:mod:`gateway.ledger.oauth_models`). Each function takes ``now`` (naive UTC,
:func:`gateway.ledger.db.utcnow` when None) so that tests drive the clock.

Sources: OAuth 2.1 (draft-ietf-oauth-v2-1) §4.1.1-4.1.3, §7.5.1 (a used code revokes what it
issued); RFC 7636 (PKCE); RFC 8707 (resource indicators).
"""

from __future__ import annotations

import datetime as dt
import logging
import secrets
from dataclasses import dataclass

from gateway.core.digests import sha256_hex
from gateway.ledger import db
from gateway.ledger import moves
from gateway.ledger.oauth_models import GRANT_REVOKED
from gateway.ledger.oauth_models import PENDING_CLAIMED
from gateway.ledger.oauth_models import PENDING_USED
from gateway.ledger.oauth_models import OAuthCode
from gateway.ledger.oauth_models import OAuthGrant
from gateway.ledger.oauth_models import OAuthPending
from gateway.ledger.oauth_models import OAuthToken

log = logging.getLogger(__name__)

#: The one scope a grant carries: the eight MCP tools (start_job, get_job, upload_media,
#: put_draft, insert_block, verify, request_approval, recover), never approve or publish.
TOOL_SCOPE = "gateway:tools"
SCOPES = (TOOL_SCOPE,)


@dataclass(frozen=True)
class Decision:
    """Where the editor's browser goes after a decision: the client's ``redirect_uri`` with
    ``code`` (approved; None when denied) and the client's ``state``."""

    redirect_uri: str
    code: str | None
    state: str | None


def _now(now: dt.datetime | None) -> dt.datetime:
    return now if now is not None else db.utcnow()


def clamp_scopes(asked: list[str] | None) -> list[str]:
    """The scopes a request may get: those of :data:`SCOPES` it asked for, or all of them
    when it asked for none it knows (scopes are clamped, never refused into a redirect)."""
    kept = [s for s in (asked or []) if s in SCOPES]
    return kept or list(SCOPES)


def open_pending(
    client_id: str,
    redirect_uri: str,
    redirect_uri_explicit: bool,
    code_challenge: str,
    resource: str,
    scopes: list[str],
    state: str | None,
    lifetime: dt.timedelta,
    now: dt.datetime | None = None,
) -> str:
    """Keep an authorisation request (``GET /authorize``, already checked: client known,
    redirect URI registered, PKCE S256, resource this server's) until an editor decides it;
    returns its id (URL-safe text, 43 characters), valid for ``lifetime``. Only its SHA-256
    is stored."""
    pending_id = secrets.token_urlsafe(32)
    now = _now(now)
    OAuthPending.create(
        id_hash=sha256_hex(pending_id),
        client_id=client_id,
        redirect_uri=redirect_uri,
        redirect_uri_explicit=redirect_uri_explicit,
        code_challenge=code_challenge,
        resource=resource,
        scopes=clamp_scopes(scopes),
        state=state,
        created_at=now,
        expires_at=now + lifetime,
    )
    return pending_id


def _waiting(client_id: str, now: dt.datetime | None):
    """``client_id``'s authorisation requests that wait, unexpired, undecided and unclaimed
    (no editor opened them): what ``GATEWAY_OAUTH_PENDING_PER_CLIENT`` caps. A claimed
    request does not count: an editor is deciding it."""
    return OAuthPending.select().where(
        OAuthPending.client_id == client_id,
        OAuthPending.used_at.is_null(),
        OAuthPending.claimed_by.is_null(),
        OAuthPending.expires_at > _now(now),
    )


def room_at(client_id: str, cap: int, now: dt.datetime | None = None) -> dt.datetime | None:
    """When fewer than ``cap`` (at least 1) of ``client_id``'s requests will be waiting
    (unexpired, undecided, unclaimed) by expiry alone, or None when fewer wait already: the
    expiry of the ``cap``-th latest to expire (with ``W >= cap`` waiting, ``W - cap + 1``
    must expire first). Nobody can list waiting requests (each is a link in the browser that
    started it), so expiry frees a place, unless an editor happens to open one sooner. One
    query, on the ``GATEWAY_OAUTH_PENDING_PER_CLIENT`` cap's path."""
    latest_first = _waiting(client_id, now).order_by(OAuthPending.expires_at.desc())
    row = latest_first.limit(1).offset(cap - 1).first()
    return row.expires_at if row is not None else None


def pending(pending_id: str, now: dt.datetime | None = None) -> OAuthPending | None:
    """The undecided, unexpired authorisation request of ``pending_id``, or None."""
    return OAuthPending.get_or_none(
        OAuthPending.id_hash == sha256_hex(pending_id),
        OAuthPending.used_at.is_null(),
        OAuthPending.expires_at > _now(now),
    )


def claim(pending_id: str, editor_hash: str, now: dt.datetime | None = None) -> OAuthPending | None:
    """The editor whose token's SHA-256 is ``editor_hash`` opens the request: the first one
    claims it (a conditional UPDATE). The request, or None when it is decided, expired,
    unknown, or claimed by another editor."""
    now = _now(now)
    key = sha256_hex(pending_id)
    moves.move(PENDING_CLAIMED, {"id_hash": key}, editor_hash, None)
    found = pending(pending_id, now)
    return found if found is not None and found.claimed_by == editor_hash else None


def _take(pending_id: str, editor_hash: str, now: dt.datetime) -> OAuthPending | None:
    """Decide ``pending_id`` once, as the editor who claimed it: a conditional UPDATE of
    ``used_at``; None when it was decided already, expired, claimed by another editor, or
    never existed."""
    key = sha256_hex(pending_id)
    mine = {"id_hash": key, "claimed_by": editor_hash}
    taken = moves.move(PENDING_USED, mine, now, None, when=(OAuthPending.expires_at > now,))
    return OAuthPending.get_or_none(OAuthPending.id_hash == key) if taken == 1 else None


def approve(
    pending_id: str,
    editor_hash: str,
    tenant: str,
    sites: list[str],
    approved_by: str,
    client_name: str,
    code_lifetime: dt.timedelta,
    now: dt.datetime | None = None,
) -> Decision | None:
    """The editor who claimed the request (``editor_hash``, :func:`claim`), of ``tenant``,
    approves it: a grant for ``sites`` (names of the tenant's sites, checked by the caller)
    and one authorization code for it, valid for ``code_lifetime``. None when the request was
    decided already, expired or is another editor's (nothing made)."""
    now = _now(now)
    with db.atomic():
        request = _take(pending_id, editor_hash, now)
        if request is None:
            return None
        grant = OAuthGrant.create(
            tenant=tenant,
            sites=sorted(set(sites)),
            scopes=request.scopes,
            client_id=request.client_id,
            client_name=client_name,
            resource=request.resource,
            approved_by=approved_by,
            principal_hash=secrets.token_hex(32),
            created_at=now,
        )
        code = secrets.token_urlsafe(32)
        OAuthCode.create(
            code_hash=sha256_hex(code),
            grant_id=grant.id,
            client_id=request.client_id,
            redirect_uri=request.redirect_uri,
            redirect_uri_explicit=request.redirect_uri_explicit,
            code_challenge=request.code_challenge,
            expires_at=now + code_lifetime,
        )
    return Decision(request.redirect_uri, code, request.state)


def deny(pending_id: str, editor_hash: str, now: dt.datetime | None = None) -> Decision | None:
    """The editor who claimed the request denies it: the client's redirect
    (``error=access_denied`` is the caller's to add), or None when it was decided already,
    expired or is another editor's."""
    request = _take(pending_id, editor_hash, _now(now))
    if request is None:
        return None
    return Decision(request.redirect_uri, None, request.state)


def live(grant_id: int) -> OAuthGrant | None:
    """The grant ``grant_id`` unless it was revoked."""
    return OAuthGrant.get_or_none(OAuthGrant.id == grant_id, OAuthGrant.revoked_at.is_null())


def revoke(grant_id: int, why: str, now: dt.datetime | None = None) -> bool:
    """Revoke a grant and so its whole family: every code and token it issued is refused from
    the next call on. ``why``: ``editor``, ``code-reused``, ``refresh-reused``,
    ``client-revoked`` (RFC 7009), ``approver-revoked`` (:func:`revoke_approved_by`). True
    when it was live until now."""
    revoked = moves.move(GRANT_REVOKED, {"id": grant_id}, _now(now), None, revoked_why=why) == 1
    if revoked:  # a reuse is a stolen copy or a client that lost an answer: say which grant
        level = logging.WARNING if why.endswith("-reused") else logging.INFO
        log.log(level, "OAuth grant %s revoked: %s", grant_id, why)
    return revoked


def revoke_for_tenant(tenant: str, grant_id: int, now: dt.datetime | None = None) -> bool:
    """An editor or operator of ``tenant`` revokes one of its grants (another tenant's grant
    id revokes nothing). True when it was live until now."""
    grant = OAuthGrant.get_or_none(OAuthGrant.id == grant_id, OAuthGrant.tenant == tenant)
    return grant is not None and revoke(grant.id, "editor", now)


def revoke_approved_by(tenant: str, approved_by: str, now: dt.datetime | None = None) -> list[int]:
    """Revoke every live grant of ``tenant`` approved by the editor token named
    ``approved_by`` (token names are unique per tenant, :func:`gateway.tenancy.tokens.
    create_token`), as ``approver-revoked``: an editor whose token is revoked (gone, or the
    token leaked) no longer stands behind what they let an app do. Returns the ids revoked
    now (sorted)."""
    live = OAuthGrant.select(OAuthGrant.id).where(
        OAuthGrant.tenant == tenant,
        OAuthGrant.approved_by == approved_by,
        OAuthGrant.revoked_at.is_null(),
    )
    return sorted(g.id for g in live if revoke(g.id, "approver-revoked", now))


def list_grants(tenant: str | None) -> list[OAuthGrant]:
    """Every grant of ``tenant`` (every tenant's when None), revoked ones included, newest
    first. The rows hold no secret."""
    query = OAuthGrant.select().order_by(OAuthGrant.tenant, OAuthGrant.id.desc())
    return list(query.where(OAuthGrant.tenant == tenant) if tenant is not None else query)


def forget_expired(now: dt.datetime | None = None) -> int:
    """Delete decided or expired pending requests, and codes past their expiry, older than a
    day; returns how many rows went. Tokens stay while their grant is listed."""
    cutoff = _now(now) - dt.timedelta(days=1)
    gone = OAuthPending.delete().where(OAuthPending.expires_at < cutoff).execute()
    gone += OAuthCode.delete().where(OAuthCode.expires_at < cutoff).execute()
    gone += OAuthToken.delete().where(OAuthToken.expires_at < cutoff).execute()
    return gone
