"""A client's own request keys: the ``Idempotency-Key`` header of a write request (the IETF
draft "The Idempotency-Key HTTP Header Field"), kept per API token in the ledger
(:class:`gateway.ledger.models.RequestKey`, schema version 9).

The gateway's operation keys are made from the job (``{tenant}/{job_id}/v{task_version}/
{action}[/{slot}]``) and still decide what reaches WordPress. A request key is the client's
promise that two requests are one: a retry with the same key and the same request (its
*fingerprint*: method, path and body) is answered with the first 2xx answer, stored here, and
runs nothing; the same key with another request is refused (422 ``request-key-reused``). A
stateless caller (an MCP server process that was killed, a workflow run restarted) loses
nothing: the key and the answer live in the ledger, not in the caller.

Rules, per ``(token, key)``:

* absent, or past its retention (``expires_at``): claimed (IN_PROGRESS) - the request runs;
* another fingerprint: 422 ``request-key-reused``, whatever the state;
* DONE: the stored answer (status and JSON body);
* IN_PROGRESS until ``claimed_until``: 409 ``request-key-in-progress`` (retryable); a claim
  whose holder died is taken over after it (the job's operation keys make the rerun safe);
* OPEN (the last attempt was not answered 2xx, nor refused): claimed again - the request
  runs again.

A *refused* request (answered 4xx: nothing was written, e.g. 422 validation) does not keep its
key (issue 52): the row is deleted, so the same key may carry another request next (one
client's placeholder key, reused for every call, refused once, would otherwise refuse that
client's every other write for the retention). The key's scope stays the token: the same key
on two requests that both succeed is still ``request-key-reused``.

A unique index on ``(token_hash, key)`` is the lock; conditional UPDATEs decide who took
over a row (:func:`gateway.ledger.moves.move` on the declared ``state``, moves:
:data:`gateway.core.states.REQUEST_KEY_MOVES`): a take-over names the row as read (state,
retention and claim), a finish names the claim it holds. Only the token's SHA-256 is stored.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from gateway.core import exceptions as exc
from gateway.core.states import KEY_DONE as DONE
from gateway.core.states import KEY_IN_PROGRESS as IN_PROGRESS
from gateway.core.states import KEY_OPEN as OPEN
from gateway.ledger import db
from gateway.ledger import moves
from gateway.ledger import unique
from gateway.ledger.models import REQUEST_KEY_STATE
from gateway.ledger.models import RequestKey

HEADER = "Idempotency-Key"
# Printable ASCII without spaces, as a structured-field string carries it; at most 255.
KEY = re.compile(r"^[\x21-\x7e]{1,255}(?![\s\S])")


@dataclass(frozen=True)
class Claim:
    """This request holds ``(token_hash, key)`` until ``claimed_until`` (naive UTC) and must
    :func:`finish` it."""

    token_hash: str
    key: str
    fingerprint: str
    claimed_until: dt.datetime | None = None


@dataclass(frozen=True)
class Stored:
    """The first 2xx answer given under the key: HTTP ``status`` and JSON ``body``."""

    status: int
    body: dict


def check_key(key: str) -> str:
    """A request key as sent: 1 to 255 printable ASCII characters, no spaces.

    Raises:
        ValidationFailed (422): pointer ``/headers/Idempotency-Key``.
    """
    if not KEY.fullmatch(key):
        raise exc.ValidationFailed(
            f"invalid {HEADER}",
            errors=[
                {
                    "pointer": f"/headers/{HEADER}",
                    "message": "1 to 255 printable ASCII characters without spaces",
                }
            ],
        )
    return key


def claim(
    token_hash: str,
    key: str,
    fingerprint: str,
    lease_seconds: float,
    retention_hours: float,
    now: dt.datetime | None = None,
) -> Claim | Stored:
    """Claim ``key`` of the token ``token_hash`` for a request with ``fingerprint``, or find
    the answer stored under it (see the module's rules).

    Args:
        lease_seconds: how long this claim holds the key before another request may take
            it over (the holder may have died).
        retention_hours: how long the key and its answer are kept from now.

    Raises:
        RequestKeyReused (422): the key was used with another request.
        RequestKeyInProgress (409, retryable): another request holds the key now.
    """
    now = now or db.utcnow()
    held = now + dt.timedelta(seconds=lease_seconds)
    expires = now + dt.timedelta(hours=retention_hours)
    mine = Claim(token_hash, key, fingerprint, held)
    row, created = unique.insert_or_get(
        lambda: RequestKey.create(
            token_hash=token_hash,
            key=key,
            fingerprint=fingerprint,
            state=IN_PROGRESS,
            claimed_until=held,
            created_at=now,
            expires_at=expires,
        ),
        lambda: RequestKey.get_or_none(RequestKey.token_hash == token_hash, RequestKey.key == key),
    )
    if created:
        return mine
    if row is None:  # pruned between the insert and the read: rare, ask for a retry
        raise _in_progress(key, 1)
    fresh = {"claimed_until": held}
    if row.expires_at <= now:  # past its retention: a new key
        renewed = {"status": None, "body": None, "created_at": now, "expires_at": expires}
        fresh = {**fresh, "fingerprint": fingerprint, **renewed}
    elif row.fingerprint != fingerprint:
        raise exc.RequestKeyReused(
            f"the {HEADER} {key!r} was used with a different request (method, path or body); "
            "send the original request again, or use a new key for a new request",
            request_key=key,
        )
    elif row.state == DONE:
        return Stored(row.status, row.body)
    elif row.state == IN_PROGRESS and row.claimed_until is not None and row.claimed_until > now:
        raise _in_progress(key, max(1, int((row.claimed_until - now).total_seconds()) // 4))
    # the row as read: its state, retention and claim (two requests that both found a claim
    # past its time take it over once: the first one's claimed_until differs)
    as_read = {"id": row.id, "expires_at": row.expires_at}
    claim_as_read = (RequestKey.claimed_until == row.claimed_until,)  # None: IS NULL
    taken = moves.move(
        REQUEST_KEY_STATE, as_read, IN_PROGRESS, row.state, when=claim_as_read, **fresh
    )
    if not taken:  # another request took it over first
        raise _in_progress(key, 1)
    return mine


def _in_progress(key: str, retry_after: int) -> exc.GatewayError:
    return exc.RequestKeyInProgress(
        f"a request with {HEADER} {key!r} is still being answered; send it again later",
        retry_after=retry_after,
        request_key=key,
    )


def finish(held: Claim, status: int, body) -> None:
    """Store the answer of the request that holds ``held``: a 2xx answer with a JSON object
    body makes the key DONE (every retry gets it); a refusal (4xx) releases the key (the row
    is deleted: :func:`release`); any other answer makes it OPEN (the next identical request
    runs again; the key stays bound to its fingerprint). Nothing changes when the claim was
    taken over meanwhile (its holder was presumed dead): the request that holds the key now
    answers it."""
    if 400 <= status < 500:
        release(held)
        return
    done = 200 <= status < 300 and isinstance(body, dict)
    values = {"status": status, "body": body} if done else {}
    mine = _held_row(held)
    moves.move(
        REQUEST_KEY_STATE, mine, DONE if done else OPEN, IN_PROGRESS, claimed_until=None, **values
    )


def _held_row(held: Claim) -> dict:
    mine = {"token_hash": held.token_hash, "key": held.key, "fingerprint": held.fingerprint}
    if held.claimed_until is not None:
        mine["claimed_until"] = held.claimed_until
    return mine


def release(held: Claim) -> bool:
    """Delete the key ``held`` names while this request still holds it (IN_PROGRESS, its
    claim as made): a refused request leaves no key behind. Returns whether it did (False:
    the claim was taken over meanwhile)."""
    conditions = [getattr(RequestKey, name) == value for name, value in _held_row(held).items()]
    gone = RequestKey.delete().where(RequestKey.state == IN_PROGRESS, *conditions).execute()
    return gone == 1


def prune(now: dt.datetime | None = None) -> int:
    """Delete the request keys past their retention; returns how many."""
    return RequestKey.delete().where(RequestKey.expires_at <= (now or db.utcnow())).execute()
