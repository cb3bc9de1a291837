"""What a refused refresh says: the ``error_description`` of the token endpoint's
``invalid_grant`` (RFC 6749 §5.2) for each refusal of :func:`gateway.tenancy.oauth_tokens.
refresh_check`, and the cause the operator's log gets.

A client's developer must tell "sign in again, someone revoked you" from a bug in their token
storage; nobody may learn anything of another client's or another tenant's grants from it:

* an unknown refresh token and another client's (live or refused) get the same words,
  :data:`NOT_VALID` (the SDK's handler pretends another client's code does not exist too);
* no names (approver, tenant, site) and no grant id (ids are counted across tenants); the one
  time said is of the caller's own grant;
* every description keeps to RFC 6749 §5.2's characters (printable ASCII without ``"`` and
  ``\\``).

The log line names the grant and the real cause, another client's too, never the token.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from gateway.tenancy.oauth_tokens import EXPIRED
from gateway.tenancy.oauth_tokens import RETIRED
from gateway.tenancy.oauth_tokens import REUSED
from gateway.tenancy.oauth_tokens import REVOKED
from gateway.tenancy.oauth_tokens import UNKNOWN
from gateway.tenancy.oauth_tokens import GrantAccess
from gateway.tenancy.oauth_tokens import Refusal

NOT_VALID = "the refresh token is not valid for this client; sign in again"

#: Who or what revoked a grant, by its ``revoked_why`` (:func:`gateway.tenancy.grants.revoke`).
#: ``editor`` is the review page's revocation (an editor or an admin) and ``gateway tokens
#: revoke --grant`` (the operator): the ledger does not tell them apart.
REVOKED_BY = {
    "editor": "an editor or administrator of the site revoked it",
    "approver-revoked": "the access of the editor who approved it was revoked",
    "refresh-reused": (
        "one of its refresh tokens was presented again after it had been rotated (reuse detection)"
    ),
    "code-reused": "its authorization code was presented twice",
    "client-revoked": "the client revoked it (token revocation, RFC 7009)",
}


@dataclass(frozen=True)
class Said:
    """A refusal in words: ``description`` for the client (the ``error_description`` of
    ``invalid_grant``), ``logged`` for the operator (names the grant, never the token), and
    the grant's id (None for an unknown token)."""

    description: str
    logged: str
    grant_id: int | None


def _when(at: dt.datetime | None) -> str:
    """``at`` (naive UTC) as RFC 3339 UTC to the second, e.g. ``2026-12-06T12:00:00Z``."""
    return at.strftime("%Y-%m-%dT%H:%M:%SZ") if at is not None else "an unknown time"


def _description(refusal: Refusal) -> str:
    when = _when(refusal.at)
    if refusal.cause == EXPIRED:
        return f"the refresh token expired at {when}; sign in again"
    if refusal.cause == RETIRED:
        return (
            f"the refresh token was retired at {when}: its grant was refreshed twice in "
            "parallel and the refresh token of the other answer was used first (only one "
            "answer goes on); sign in again"
        )
    if refusal.cause == REVOKED:
        by = REVOKED_BY.get(refusal.revoked_why or "")
        return f"the grant was revoked at {when}" + (f": {by}" if by else "") + "; sign in again"
    if refusal.cause == REUSED:
        return (
            f"the refresh token was used already, at {when}: a rotated refresh token presented "
            "again revokes its grant (reuse detection), so the grant is revoked now; keep the "
            "refresh token of the latest answer only, and sign in again"
        )
    return NOT_VALID


def describe(seen: GrantAccess | Refusal, client_id: str) -> Said | None:
    """What to answer the client ``client_id`` that presented a refresh token
    :func:`gateway.tenancy.oauth_tokens.refresh_check` saw as ``seen``: None when it is
    valid and the client's own; else the :class:`Said` refusal (:data:`NOT_VALID` for an
    unknown token and for any token of another client, whatever its state)."""
    if isinstance(seen, GrantAccess):
        if seen.client_id == client_id:
            return None
        logged = f"grant {seen.grant_id}: a live refresh token of another client"
        return Said(NOT_VALID, logged, seen.grant_id)
    if seen.cause == UNKNOWN:
        return Said(NOT_VALID, "an unknown refresh token", None)
    detail = f"{seen.cause} at {_when(seen.at)}" + (
        f" ({seen.revoked_why})" if seen.revoked_why else ""
    )
    if seen.client_id != client_id:
        logged = f"grant {seen.grant_id}: a refresh token of another client, {detail}"
        return Said(NOT_VALID, logged, seen.grant_id)
    return Said(_description(seen), f"grant {seen.grant_id}: {detail}", seen.grant_id)
