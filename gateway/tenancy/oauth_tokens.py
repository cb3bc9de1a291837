"""The tokens of an editor's grant (issue 43): an authorization code redeemed once for an access
token and a refresh token, refresh tokens rotated at every use, access tokens checked on every
MCP request.

* **Single use, decided by the ledger**: redeeming a code or a refresh token is a conditional
  UPDATE of its ``used_at``; of two racing requests exactly one wins. A code or refresh token
  presented after it was used revokes its grant, and with it every token the grant issued
  (OAuth 2.1 §4.1.3 and §4.3.1, RFC 6819 §5.2.2.3): a stolen copy and the legitimate client
  cannot both go on. A client whose refresh answer was lost is in the same position as a thief
  (it still holds the used token): its next refresh is refused with ``invalid_grant`` and it
  signs in again, which an editor approves on the consent page.
* **A grace window for the last rotation** (``Lifetimes.reuse_grace``,
  ``GATEWAY_OAUTH_REFRESH_GRACE_SECONDS``; Okta's "grace period for token rotation", Auth0's
  "reuse interval"): the refresh token rotated last in its grant, presented again within the
  window, gets a new pair of its own instead of revoking the grant. Hosted clients refresh
  from several nodes at once and keep whichever answer they stored last
  (PrefectHQ/fastmcp#4264). Only hashes are stored, so the first answer cannot be sent
  again: the family forks, and every fork stays valid until one fork's refresh token is
  rotated, which retires the other forks' unused refresh tokens (they expire now). An older
  token, or the same one after the window, still revokes the family (docs/security.md).
* **Short-lived access tokens**: ``GATEWAY_OAUTH_ACCESS_MINUTES``; the grant is read on every
  check, so a revoked grant is refused at the very next call (no cache).
* **Last use**: written at most once a minute per grant (a conditional UPDATE), so a busy
  client adds one write a minute, not one per call.
* **A refused refresh token says why** (:class:`Refusal`, :func:`refresh_check`): unknown,
  expired, retired by another fork's rotation, its grant revoked (and why), or used already
  (reuse detected now). Whom to tell what is :mod:`gateway.oauth.refusals`'s.

Every token is 32 random bytes as URL-safe text, stored only as SHA-256
(:mod:`gateway.ledger.oauth_models`). ``now`` is naive UTC (:func:`gateway.ledger.db.utcnow`
when None) so that tests drive the clock.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import secrets
from dataclasses import dataclass

from gateway.core.digests import sha256_hex
from gateway.ledger import db
from gateway.ledger import moves
from gateway.ledger.oauth_models import CODE_USED
from gateway.ledger.oauth_models import TOKEN_USED
from gateway.ledger.oauth_models import OAuthCode
from gateway.ledger.oauth_models import OAuthGrant
from gateway.ledger.oauth_models import OAuthToken
from gateway.tenancy import grants

log = logging.getLogger(__name__)
ACCESS = "access"
REFRESH = "refresh"
LAST_USE_EVERY = dt.timedelta(minutes=1)

#: Why a refresh token is refused (:attr:`Refusal.cause`).
UNKNOWN = "unknown"  # no such token (never issued, or forgotten a day after its expiry)
EXPIRED = "expired"  # past its expiry
RETIRED = "retired"  # expired early: another fork of its family was rotated (_retire_forks)
REVOKED = "revoked"  # its grant was revoked (Refusal.revoked_why says why)
REUSED = "reused"  # used already, outside the grace window: its grant is revoked now


@dataclass(frozen=True)
class Lifetimes:
    """How long what :func:`redeem_code` and :func:`rotate` issue stays valid."""

    access: dt.timedelta
    refresh: dt.timedelta
    reuse_grace: dt.timedelta = dt.timedelta(0)  # 0: every reuse revokes


@dataclass(frozen=True)
class Issued:
    """An access token and its refresh token (RFC 6749 §5.1), ``expires_in`` in seconds."""

    access_token: str
    refresh_token: str
    expires_in: int
    scopes: list[str]
    grant_id: int


@dataclass(frozen=True)
class CodeView:
    """What the token endpoint checks of a code before redeeming it (no secret): its client,
    redirect URI, PKCE challenge, expiry (POSIX seconds), the grant's scopes and resource."""

    client_id: str
    redirect_uri: str
    redirect_uri_explicit: bool
    code_challenge: str
    expires_at: float
    scopes: list[str]
    resource: str
    grant_id: int


@dataclass(frozen=True)
class GrantAccess:
    """Who an access or refresh token speaks for: a live grant's tenant, sites and scopes,
    its client, the resource the token was issued for, the token's expiry (POSIX seconds)
    and the grant's stable caller key (``principal_hash``, not a secret)."""

    grant_id: int
    tenant: str
    sites: frozenset[str]
    scopes: list[str]
    client_id: str
    resource: str
    expires_at: float
    principal_hash: str
    last_used_at: dt.datetime | None = None  # the grant's, as read (naive UTC)


@dataclass(frozen=True)
class Refusal:
    """Why a refresh token is refused, with no secret: ``cause`` (:data:`UNKNOWN`,
    :data:`EXPIRED`, :data:`RETIRED`, :data:`REVOKED`, :data:`REUSED`); but for an unknown
    token, its grant's id and client; ``at`` (naive UTC) when it expired or was retired, when
    its grant was revoked, or when it was used; ``revoked_why`` the grant's
    (:func:`gateway.tenancy.grants.revoke`) when REVOKED."""

    cause: str
    grant_id: int | None = None
    client_id: str | None = None
    at: dt.datetime | None = None
    revoked_why: str | None = None


def _now(now: dt.datetime | None) -> dt.datetime:
    return now if now is not None else db.utcnow()


def _posix(moment: dt.datetime) -> float:
    return moment.replace(tzinfo=dt.UTC).timestamp()


def code_view(code: str, now: dt.datetime | None = None) -> CodeView | None:
    """The code ``code`` for the token endpoint's checks, or None: unknown, its grant revoked,
    or used already - and then its grant is revoked now (a code presented twice)."""
    row = OAuthCode.get_or_none(OAuthCode.code_hash == sha256_hex(code))
    if row is None:
        return None
    if row.used_at is not None:
        grants.revoke(row.grant_id, "code-reused", now)
        return None
    grant = grants.live(row.grant_id)
    if grant is None:
        return None
    return CodeView(
        row.client_id,
        row.redirect_uri,
        row.redirect_uri_explicit,
        row.code_challenge,
        _posix(row.expires_at),
        list(grant.scopes),
        grant.resource,
        grant.id,
    )


def _issue(grant: OAuthGrant, lifetimes: Lifetimes, now: dt.datetime) -> Issued:
    access, refresh = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    OAuthToken.insert_many(
        [
            {
                "token_hash": sha256_hex(access),
                "kind": ACCESS,
                "grant_id": grant.id,
                "expires_at": now + lifetimes.access,
                "created_at": now,
            },
            {
                "token_hash": sha256_hex(refresh),
                "kind": REFRESH,
                "grant_id": grant.id,
                "expires_at": now + lifetimes.refresh,
                "created_at": now,
            },
        ]
    ).execute()
    seconds = int(lifetimes.access.total_seconds())
    return Issued(access, refresh, seconds, list(grant.scopes), grant.id)


def redeem_code(code: str, lifetimes: Lifetimes, now: dt.datetime | None = None) -> Issued | None:
    """Redeem ``code`` once for an access and a refresh token (after the token endpoint's
    checks of :func:`code_view`). None when another request redeemed it first (and then its
    grant is revoked: a code presented twice), when it expired, or its grant was revoked."""
    now = _now(now)
    key = sha256_hex(code)
    spend = lambda: moves.move(  # noqa: E731
        CODE_USED, {"code_hash": key}, now, None, when=(OAuthCode.expires_at > now,)
    )
    return _spend_once(
        spend, lambda: OAuthCode.get_or_none(OAuthCode.code_hash == key), "code-reused",
        lifetimes, now,
    )  # fmt: skip


def _spend_once(
    spend, row_of, why: str, lifetimes: Lifetimes, now: dt.datetime, retire=None, forgive=None
) -> Issued | None:
    """Run ``spend``, the conditional UPDATE of a code's or refresh token's ``used_at``
    (:func:`gateway.ledger.moves.move`; returns its row count): the
    request whose UPDATE changed the row gets a new token pair from its live grant (after
    ``retire(row, now)``, when given); one that found the row used already (another request was
    first: a reuse) gets a pair of its own when ``forgive(row)`` says so (a refresh token within
    its grace window, :func:`_in_grace`), else revokes the grant (``why``). ``row_of`` reads the
    row after the UPDATE. None but for the winner and a forgiven reuse."""
    with db.atomic():
        won = spend()
        row = row_of()
        if row is None:
            return None
        grant = grants.live(row.grant_id)
        if won == 1 and grant is not None:
            if retire is not None:
                retire(row, now)
            return _issue(grant, lifetimes, now)
        if grant is not None and forgive is not None and forgive(row):
            log.info("OAuth grant %s: its last refresh token again, in the grace window", grant.id)
            return _issue(grant, lifetimes, now)
    if won == 0 and row.used_at is not None:
        grants.revoke(row.grant_id, why, now)
    return None


def _in_grace(row: OAuthToken, grace: dt.timedelta, now: dt.datetime) -> bool:
    """Whether the used refresh token ``row`` may be presented again: it was rotated at most
    ``grace`` ago, and no refresh token of its grant was rotated after it (only the last
    rotation has a grace: Auth0's "only the previous token can be reused"; an older one is a
    stolen copy or a client gone astray)."""
    if row.kind != REFRESH or row.used_at is None or not grace:
        return False
    if now - row.used_at > grace:
        return False
    later = OAuthToken.select().where(
        OAuthToken.grant_id == row.grant_id,
        OAuthToken.kind == REFRESH,
        OAuthToken.used_at > row.used_at,
    )
    return not later.exists()


def _retire_forks(row: OAuthToken, now: dt.datetime) -> None:
    """A refresh token ``row`` of a forked family was rotated: the other forks' unused
    refresh tokens expire now (the client kept this fork; the others' holders, a node whose
    answer was not kept or whoever raced within the grace window, sign in again). Expiry is
    not a state column (:mod:`gateway.ledger.oauth_models`); in a family that never forked
    this changes no row."""
    OAuthToken.update(expires_at=now).where(
        OAuthToken.grant_id == row.grant_id,
        OAuthToken.kind == REFRESH,
        OAuthToken.used_at.is_null(),
        OAuthToken.expires_at > now,
    ).execute()


def refresh_check(
    token: str, now: dt.datetime | None = None, grace: dt.timedelta = dt.timedelta(0)
) -> GrantAccess | Refusal:
    """The refresh token ``token`` for the token endpoint's checks, or why it is refused
    (:class:`Refusal`), in this order: unknown; its grant revoked; expired (or retired); used
    already - and then its grant is revoked now (a rotated refresh token presented again,
    RFC 6819 §5.2.2.3), unless it is its grant's last rotation at most ``grace`` ago
    (:func:`_in_grace`): then it is shown as valid, and :func:`rotate` gives it a pair of its
    own. Whose client it is, is the caller's to check (``client_id`` of either answer)."""
    return _look(token, REFRESH, _now(now), grace)


def rotate(token: str, lifetimes: Lifetimes, now: dt.datetime | None = None) -> Issued | None:
    """Use the refresh token ``token`` once: a new access token and a new refresh token (the
    family's other forks' refresh tokens retire, :func:`_retire_forks`). Presented again, by
    a racing request too, within ``lifetimes.reuse_grace`` of its rotation and while it is its
    grant's last rotation: a pair of its own. None when it was used already otherwise (its
    grant is then revoked), expired, or its grant was revoked."""
    now = _now(now)
    key = sha256_hex(token)
    spend = lambda: moves.move(  # noqa: E731
        TOKEN_USED,
        {"token_hash": key, "kind": REFRESH},
        now,
        None,
        when=(OAuthToken.expires_at > now,),
    )
    row_of = lambda: OAuthToken.get_or_none(  # noqa: E731
        OAuthToken.token_hash == key, OAuthToken.kind == REFRESH
    )
    forgive = lambda row: _in_grace(row, lifetimes.reuse_grace, now)  # noqa: E731
    return _spend_once(
        spend, row_of, "refresh-reused", lifetimes, now, retire=_retire_forks, forgive=forgive
    )


def access(token: str, now: dt.datetime | None = None) -> GrantAccess | None:
    """Who the access token ``token`` speaks for, or None (unknown, expired, or its grant
    revoked). Notes the grant's last use, at most once a minute: the UPDATE is sent only when
    the grant as read is due for it (a conditional UPDATE still decides between racers), so a
    busy client's calls are reads."""
    now = _now(now)
    seen = _view(token, ACCESS, now)
    stale = now - LAST_USE_EVERY
    if seen is not None and (seen.last_used_at is None or seen.last_used_at < stale):
        OAuthGrant.update(last_used_at=now).where(
            OAuthGrant.id == seen.grant_id,
            (OAuthGrant.last_used_at.is_null()) | (OAuthGrant.last_used_at < stale),
        ).execute()
    return seen


def _view(
    token: str, kind: str, now: dt.datetime, grace: dt.timedelta = dt.timedelta(0)
) -> GrantAccess | None:
    seen = _look(token, kind, now, grace)
    return None if isinstance(seen, Refusal) else seen


def _look(token: str, kind: str, now: dt.datetime, grace: dt.timedelta) -> GrantAccess | Refusal:
    """The token ``token`` of ``kind`` as the ledger has it, or its :class:`Refusal`; a used
    refresh token outside its grace revokes its grant here (:data:`REUSED`)."""
    row = OAuthToken.get_or_none(
        OAuthToken.token_hash == sha256_hex(token), OAuthToken.kind == kind
    )
    grant = OAuthGrant.get_or_none(OAuthGrant.id == row.grant_id) if row is not None else None
    if grant is None:
        return Refusal(UNKNOWN)
    refused = _refusal(row, grant, now, grace)
    if refused is not None:
        if refused.cause == REUSED:  # refresh tokens only: access tokens are never used
            grants.revoke(grant.id, "refresh-reused", now)
        return refused
    return GrantAccess(
        grant.id,
        grant.tenant,
        frozenset(grant.sites),
        list(grant.scopes),
        grant.client_id,
        grant.resource,
        _posix(row.expires_at),
        grant.principal_hash,
        grant.last_used_at,
    )


def _refusal(
    row: OAuthToken, grant: OAuthGrant, now: dt.datetime, grace: dt.timedelta
) -> Refusal | None:
    """Why the token ``row`` of ``grant`` is refused at ``now``, or None (reads only). A
    revoked grant is said first: it is what the holder must act on."""
    said = functools.partial(Refusal, grant_id=grant.id, client_id=grant.client_id)
    if grant.revoked_at is not None:
        return said(REVOKED, at=grant.revoked_at, revoked_why=grant.revoked_why)
    if row.expires_at <= now:
        return said(RETIRED if _retired(row) else EXPIRED, at=row.expires_at)
    if row.used_at is not None and not _in_grace(row, grace, now):
        return said(REUSED, at=row.used_at)
    return None


def _retired(row: OAuthToken) -> bool:
    """Whether the expired refresh token ``row`` was retired by :func:`_retire_forks`: unused,
    and another refresh token of its grant was rotated at the very moment it expired (the
    rotation and the retirement share one ``now``)."""
    if row.kind != REFRESH or row.used_at is not None:
        return False
    return (
        OAuthToken.select()
        .where(
            OAuthToken.grant_id == row.grant_id,
            OAuthToken.kind == REFRESH,
            OAuthToken.used_at == row.expires_at,
        )
        .exists()
    )


def revoke_token(token: str, client_id: str, now: dt.datetime | None = None) -> bool:
    """RFC 7009 revocation by the client ``client_id``: an access or refresh token of one of
    its grants ends the grant's whole family. False when the token is unknown or another
    client's (RFC 7009 §2.2: the endpoint answers 200 either way)."""
    row = OAuthToken.get_or_none(OAuthToken.token_hash == sha256_hex(token))
    if row is None:
        return False
    grant = OAuthGrant.get_or_none(OAuthGrant.id == row.grant_id)
    if grant is None or grant.client_id != client_id:
        return False
    return grants.revoke(grant.id, "client-revoked", now)
