"""API tokens: 32 random bytes as URL-safe text, stored only as SHA-256.

A fast hash suffices for 256-bit random tokens (a password KDF would cost ~100 ms a request).
The tenant and role always come from the token, never from a request body."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from gateway.core import validation
from gateway.core.digests import sha256_hex
from gateway.ledger import hot_sql
from gateway.ledger import moves
from gateway.ledger import unique
from gateway.ledger.db import utcnow
from gateway.ledger.models import TOKEN_REVOKED
from gateway.ledger.models import Token
from gateway.tenancy import grants
from gateway.tenancy import review_sessions

ROLES = ("workflow", "editor", "admin")


@dataclass(frozen=True)
class Principal:
    """Who is calling: ``tenant``, ``role``, the token's ``name`` (for audit) and its stored
    SHA-256 (what an agent session's binding records and request rates are counted by; never
    the token).

    Two limits a grant may carry (a gateway token carries neither):

    * ``sites`` - the sites of the tenant it may work on (None: every site). A job of another
      site answers as a job of another tenant does (404 ``job-not-found``); starting a job on
      another site, or any route that is not a job's, is 403 ``forbidden``
      (:mod:`gateway.api.grant_limits`).
    * ``tools_only`` - it may call only the routes of the MCP tools
      (:data:`gateway.core.callers.TOOL_ROUTES`): never approve or publish (403).
    """

    tenant: str
    role: str
    name: str
    token_hash: str = ""
    sites: frozenset[str] | None = None
    tools_only: bool = False


def create_token(tenant: str, role: str, name: str) -> str:
    """Create a token and return it; only its SHA-256 is stored.

    Names are unique per tenant, revoked tokens included: ``requested_by``, ``approved_by``
    and ``tokens revoke --name`` each mean exactly one token.

    Raises:
        ValueError: ``role`` is not one of :data:`ROLES`; ``tenant`` or ``name`` is not a
            whole match of :data:`validation.TENANT` / :data:`validation.TOKEN_NAME`; the
            tenant already has a token of that name.
    """
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}")
    validation.check_name(tenant, validation.TENANT, "tenant")
    validation.check_name(name, validation.TOKEN_NAME, "token name")
    token = secrets.token_urlsafe(32)
    _row, created = unique.insert_or_get(
        lambda: Token.create(token_hash=sha256_hex(token), tenant=tenant, role=role, name=name)
    )
    if not created:
        raise ValueError(
            f"tenant {tenant!r} already has a token named {name!r} (names are unique per "
            "tenant, revoked ones included, so audit records name one token): choose another"
        ) from None
    return token


def authenticate(token: str) -> Principal | None:
    """The principal for ``token``, or None when it is unknown or revoked."""
    return authenticate_hash(sha256_hex(token))


def authenticate_hash(token_hash: str) -> Principal | None:
    """The principal for a token's SHA-256 (an editor's session keeps only that, so a
    revoked token ends its sessions at the next request), or None (unknown or revoked). Read
    from the ledger on every call, never remembered: a token revoked by another process (the
    CLI's ``gateway tokens revoke``) is refused from the very next request on. One plain-SQL
    statement (:func:`gateway.ledger.hot_sql.live_token`)."""
    row = hot_sql.live_token(token_hash)
    if row is None:
        return None
    tenant, role, name = row
    return Principal(tenant, role, name, token_hash)


def revoke_tokens(tenant: str, name: str) -> int:
    """Revoke the token of ``tenant`` named ``name`` (names are unique per tenant); returns
    how many were revoked now (0 or 1). The token's review-page sessions are deleted too, and
    the OAuth grants it approved as an editor are revoked
    (:func:`gateway.tenancy.grants.revoke_approved_by`, ``approver-revoked``; also when the
    token was revoked before, so a second call finishes what a crash left)."""
    live = Token.select().where(
        Token.tenant == tenant, Token.name == name, Token.revoked_at.is_null()
    )
    hashes = [t.token_hash for t in live]
    count = moves.move(TOKEN_REVOKED, {}, utcnow(), None, when=(Token.token_hash << hashes,))
    for token_hash in hashes:
        review_sessions.end_for_token(token_hash)
    grants.revoke_approved_by(tenant, name)
    return count


def list_tokens(tenant: str | None) -> list[Token]:
    """Every token of ``tenant`` (every tenant's when None), revoked ones included, by tenant
    and name. The rows hold only hashes; callers show names, roles and dates."""
    query = Token.select().order_by(Token.tenant, Token.name)
    return list(query.where(Token.tenant == tenant) if tenant is not None else query)
