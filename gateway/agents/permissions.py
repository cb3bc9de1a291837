"""Permission at every resume (seed, section 12: "恢复前重验当前权限" - what is persisted is the
job's evidence, not a permanent authorisation).

A session is bound to a job by an API call (``PUT /v1/jobs/{id}`` with ``session_id``); the
token that made the call is remembered as the session's *binding* (its SHA-256 in
``agent_session.bound_token_hash``, schema version 10). Before the agent worker answers any
required action of a session it checks, in this order (:func:`check`):

1. the binding: that token still exists, is not revoked, belongs to the job's tenant and still
   has the ``workflow`` role. A session bound before schema version 10 has no recorded binding:
   it is treated as bound by its tenant's workflow role, so it goes on while the tenant has at
   least one live workflow token; a ``PUT /v1/jobs/{id}`` repeating the session by a workflow
   token records that token as its binding (:func:`adopt`);
2. the job is not cancelled;
3. the job's site still exists and its credentials work (``GET /wp/v2/users/me`` or XML-RPC
   ``wp.getProfile``, under the site's concurrency slot like any WordPress call).

A refused binding, a cancelled job or a removed site is a stop that only a person lifts; a
credentials refusal is a stop that lifts itself once ``gateway sites add`` updated the
credentials (:mod:`gateway.agents.stops`). WordPress that cannot be reached is no refusal:
the call stays unanswered until a later pass.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.core import exceptions as exc
from gateway.ledger.models import AgentSession
from gateway.ledger.models import Job
from gateway.ledger.models import Token
from gateway.operations.target import Target
from gateway.wordpress.errors import WordPressAuthError
from gateway.wordpress.errors import WordPressError

LEGACY = "legacy"  # bound before schema version 10: no binding token recorded
CREDENTIALS = "WordPress refused the site's credentials"


@dataclass(frozen=True)
class Refusal:
    """Why a session may not be resumed now. ``credentials``: the stop lifts itself once the
    site's credentials were updated."""

    reason: str
    credentials: bool = False


def binding_token(row: AgentSession) -> Token | None:
    """The token that bound the session (None: bound before schema version 10, or the token
    row is gone)."""
    if row.bound_token_hash is None:
        return None
    return Token.get_or_none(Token.token_hash == row.bound_token_hash)


def binding_view(row: AgentSession) -> dict:
    """``{"kind": "token" | "legacy", "token_name", "valid"}``: who bound the session and
    whether that binding still holds (the token's name, never its hash)."""
    if row.bound_token_hash is None:
        return {"kind": LEGACY, "token_name": None, "valid": _binding_refusal(row) is None}
    token = binding_token(row)
    return {
        "kind": "token",
        "token_name": token.name if token is not None else None,
        "valid": _binding_refusal(row) is None,
    }


def _binding_refusal(row: AgentSession) -> str | None:
    if row.bound_token_hash is None:
        live = Token.select().where(
            Token.tenant == row.tenant, Token.role == "workflow", Token.revoked_at.is_null()
        )
        if live.exists():
            return None
        return (
            "the session was bound before its binding token was recorded, and tenant "
            f"{row.tenant} has no live workflow token left"
        )
    token = binding_token(row)
    if token is None:
        return "the token that bound the session no longer exists"
    if token.revoked_at is not None:
        return f"the workflow token that bound the session ({token.name}) was revoked"
    if token.tenant != row.tenant or token.role != "workflow":
        return f"the token that bound the session ({token.name}) is no longer a workflow token"
    return None


def check(job: Job, row: AgentSession, target: Target) -> Refusal | None:
    """Whether the session may be resumed now (see the module docstring), or the refusal.

    Args:
        job: the job, as read under the worker's lease.
        row: the session row.
        target: the job's target (its site and client; the site's slot is taken for the
            credentials check).

    Raises:
        WordPressUnavailable (503): the site could not be asked (network, a page in front of
            WordPress): not a refusal, the caller tries again later.
        SiteBusy (429): every slot of the site is held.
    """
    reason = _binding_refusal(row)
    if reason:
        return Refusal(reason)
    if job.cancelled:
        return Refusal(f"the job was cancelled: {job.cancel_reason or 'no reason given'}")
    try:
        client = target.client
    except exc.SiteNotFound:
        return Refusal(f"the job's site {job.site} was removed")
    try:
        client.me()
    except WordPressAuthError:
        return Refusal(CREDENTIALS, credentials=True)
    except WordPressError as error:
        raise exc.WordPressUnavailable(
            f"cannot check the site's credentials now: {error.message}", retry_after=5
        ) from None
    return None


def adopt(row: AgentSession, token_hash: str) -> bool:
    """Record ``token_hash`` as the binding of a session bound before schema version 10
    (repeat-safe; a recorded binding is never replaced). Returns whether it was recorded."""
    return bool(
        AgentSession.update(bound_token_hash=token_hash)
        .where(AgentSession.id == row.id, AgentSession.bound_token_hash.is_null())
        .execute()
    )
