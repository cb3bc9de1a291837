"""API tokens: 32 random bytes as URL-safe text, stored only as SHA-256.

A fast hash suffices for 256-bit random tokens (a password KDF would cost ~100 ms a request).
The tenant and role always come from the token, never from a request body."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from gateway.db import utcnow
from gateway.digests import sha256_hex
from gateway.ledger import Token

ROLES = ("workflow", "editor", "admin")


@dataclass(frozen=True)
class Principal:
    """Who is calling: ``tenant``, ``role`` and the token's ``name`` (for audit)."""

    tenant: str
    role: str
    name: str


def create_token(tenant: str, role: str, name: str) -> str:
    """Create a token and return it; only its SHA-256 is stored.

    Raises:
        ValueError: ``role`` is not one of :data:`ROLES`.
    """
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}")
    token = secrets.token_urlsafe(32)
    Token.create(token_hash=sha256_hex(token), tenant=tenant, role=role, name=name)
    return token


def authenticate(token: str) -> Principal | None:
    """The principal for ``token``, or None when it is unknown or revoked."""
    return authenticate_hash(sha256_hex(token))


def authenticate_hash(token_hash: str) -> Principal | None:
    """The principal for a token's SHA-256 (an editor's session keeps only that, so a
    revoked token ends its sessions at the next request), or None."""
    row = Token.get_or_none(Token.token_hash == token_hash)
    if row is None or row.revoked_at is not None:
        return None
    return Principal(row.tenant, row.role, row.name)


def revoke_tokens(tenant: str, name: str) -> int:
    """Revoke every live token of ``tenant`` named ``name``; returns how many."""
    return (
        Token.update(revoked_at=utcnow())
        .where(Token.tenant == tenant, Token.name == name, Token.revoked_at.is_null())
        .execute()
    )
