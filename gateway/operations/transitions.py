"""Every state change of a ledger row: the state tables, the claim and the mover.

Three kinds of row move here and nowhere else (``tests/test_transitions.py`` scans
``gateway/`` for a state written anywhere else):

* **operations** (``operation``: every WordPress write, and every agent-session input, whose
  rows are operations too: :mod:`gateway.agents.submissions`): PREPARED -> SENT -> CONFIRMED /
  FAILED / UNKNOWN, by :data:`gateway.core.states.OPERATION_MOVES`;
* **notifications** (``notification``): PENDING -> DELIVERED, or REFUSED after
  ``GATEWAY_NOTIFICATION_MAX_REFUSALS`` definite refusals, by
  :data:`gateway.core.states.NOTIFICATION_MOVES`; one sender at a time holds a delivery claim
  (``claimed_until``, :func:`claim_delivery`); since schema version 18 the same moves are a
  **webhook delivery**'s (``webhook_delivery``: one event row to one endpoint).

A move is one conditional UPDATE decided by its row count (:func:`move`: the row is in the
state it was read in, or one of ``expect``; 1 row = this caller moved it, 0 = somebody else
did first), never read-then-write; a move the table does not allow is a programming error
(:class:`gateway.ledger.moves.IllegalMove`), raised before any statement. A claim is an
insert-or-get on the operation key (:func:`claim`, :func:`gateway.ledger.unique.insert_or_get`).
Claims' expiry (a notification's delivery claim, an agent input's in-flight window) is judged by the
database's clock (:func:`gateway.ledger.db.db_now`), as leases are.

This module sits below ``perform``, ``target``, ``ownership`` and ``refusals``: it imports
only ``gateway.ledger`` and ``gateway.core`` and takes plain values (what an action binds, the
credential version, the fencing token), which its callers look up. The hot path's statements
stay plain SQL (:mod:`gateway.ledger.hot_sql`: the claim's INSERT, the send's and the
confirmation's UPDATE). Source: docs/api.md ("Ledger states"), docs/architecture.md ("Every
state change goes through operations/transitions.py").
"""

from __future__ import annotations

import datetime as dt

from gateway.core.states import DELIVERED
from gateway.core.states import NOT_CONFIRMED as NOT_CONFIRMED
from gateway.core.states import PENDING
from gateway.core.states import REFUSED
from gateway.ledger import db
from gateway.ledger import hot_sql
from gateway.ledger import moves
from gateway.ledger import unique
from gateway.ledger.models import OPERATION_STATE
from gateway.ledger.models import PREPARED
from gateway.ledger.models import SENT
from gateway.ledger.models import UNKNOWN
from gateway.ledger.models import WEBHOOK_DELIVERY_STATE
from gateway.ledger.models import Notification
from gateway.ledger.models import Operation
from gateway.ledger.models import WebhookDelivery
from gateway.ledger.rows import OperationRow


def claim(
    *,
    key: str,
    tenant: str,
    job_id: str,
    task_version: int,
    action: str,
    slot: str | None,
    request_hash: str,
    intent: dict | None,
    binds: str | None,
    credential_version: int | None,
    fencing_token: int | None,
) -> tuple[Operation | OperationRow, bool]:
    """Insert the PREPARED row of operation ``key`` or get the one that holds the key.

    One plain-SQL INSERT (:func:`gateway.ledger.hot_sql.insert_operation`) in its own
    transaction; the key's unique constraint is the lock, and the row of a caller that lost
    is read back with peewee. ``binds`` is what the action binds in WordPress (``post``,
    ``attachment``, None for no WordPress object), ``credential_version`` the site's,
    ``fencing_token`` the lease grant the caller holds (None: none).

    Returns ``(row, created)``: the inserted row (an ``OperationRow``), or the holder's
    (an :class:`Operation` instance). The caller compares ``row.request_hash`` with its digest (a
    different one is its 422 ``operation-key-reused``, before anything is sent).

    Raises:
        peewee.DatabaseError other than the key's IntegrityError (the ledger cannot serve).
    """
    values = {
        "operation_key": key,
        "tenant": tenant,
        "job_id": job_id,
        "task_version": task_version,
        "action": action,
        "slot": slot,
        "request_hash": request_hash,
        "state": PREPARED,
        "intent": intent,
        "binds": binds,
        "credential_version": credential_version,
        "fencing_token": fencing_token,
    }
    return unique.insert_or_get(
        lambda: hot_sql.insert_operation(values),
        lambda: Operation.get(Operation.operation_key == key),
    )


def move(
    row,
    to: str,
    expect: str | tuple[str, ...] | None = None,
    *,
    column: moves.StateColumn = OPERATION_STATE,
    same_attempt: bool = False,
    when: tuple = (),
    **fields,
) -> bool:
    """Move ``row`` to state ``to`` in the declared state column ``column`` if it is still in
    ``expect`` (a state or a tuple of them; default: the state ``row`` was read in), writing
    ``fields`` (column name -> value) with it.

    ``row`` is any object with the attributes read (``id``, ``state``, and ``attempts`` with
    ``same_attempt``), whatever its class: a model instance from a peewee query or a plain row
    of :mod:`gateway.ledger.hot_sql`.

    Args:
        column: the state column moved: an operation's (the default,
            :data:`gateway.ledger.models.OPERATION_STATE`) or a notification's
            (:data:`gateway.ledger.models.NOTIFICATION_STATE`).
        same_attempt: also require the attempt count ``row`` was read with (a sender's
            claim: nobody sent it since).
        when: further peewee conditions on the row (e.g. the object it holds).
        fields: an operation's ``updated_at`` defaults to now.

    Returns True when this caller moved it (one row updated: ``row`` then holds what was
    written, not read again), False when another caller moved it first (zero rows).

    Raises:
        IllegalMove: the state table does not allow a move from ``expect`` to ``to``
            (before any statement).

    Every move is :func:`gateway.ledger.moves.move` on the declared ``state`` column: plain
    SQL unless ``when`` holds peewee expressions.
    """
    states = (row.state,) if expect is None else (expect,) if isinstance(expect, str) else expect
    if column is OPERATION_STATE:
        fields.setdefault("updated_at", db.utcnow())
    where = {"id": row.id}
    if same_attempt:
        where["attempts"] = row.attempts
    if moves.move(column, where, to, tuple(states), when=when, **fields) != 1:
        return False
    for name, value in {"state": to, **fields}.items():
        setattr(row, name, value)
    return True


def in_flight(row: Operation, window: float) -> bool:
    """True while a SENT ``row`` was sent less than ``window`` seconds ago by the database's
    clock (another sender's call may still be under way)."""
    if row.state != SENT or row.sent_at is None:
        return False
    return (db.db_now() - row.sent_at).total_seconds() < window


def claim_send(row: Operation, window: float, **fields) -> bool:
    """Move an agent-session input (``row``: PREPARED, UNKNOWN, or SENT longer ago than
    ``window`` seconds by the database's clock) to SENT for one send, with its attempt count
    raised and ``sent_at`` set by the database's clock. Decided by one conditional UPDATE on
    the state and attempt count ``row`` was read with: of two racing senders one wins.

    Returns True when this caller won the send; False when the row is settled, in flight
    (a SENT row inside ``window``) or another sender moved it first.
    """
    if row.state not in (PREPARED, SENT, UNKNOWN) or in_flight(row, window):
        return False
    return move(
        row,
        SENT,
        same_attempt=True,
        attempts=row.attempts + 1,
        sent_at=db.db_now(),
        **fields,
    )


def claim_delivery(row: Notification | WebhookDelivery, hold_seconds: float) -> bool:
    """Take a PENDING delivery row (a :class:`WebhookDelivery`; a :class:`Notification` of a
    ledger before schema version 18 moves the same way) for one attempt until ``hold_seconds``
    from now (the database's clock), counting the attempt. False when it is no longer PENDING,
    or another sender holds it, or it waits out a back-off (``claimed_until`` not passed yet).
    One conditional UPDATE decides."""
    model = type(row)
    now = db.db_now()
    claimed = (
        model.update(
            claimed_until=now + dt.timedelta(seconds=hold_seconds),
            attempts=model.attempts + 1,
        )
        .where(
            model.id == row.id,
            model.state == PENDING,
            (model.claimed_until.is_null()) | (model.claimed_until < now),
        )
        .execute()
    )
    return claimed == 1


def release_delivery(
    row: Notification | WebhookDelivery,
    error: str,
    refused: bool,
    max_refusals: int,
    backoff_seconds: float,
) -> str:
    """After a failed delivery attempt of ``row`` (claimed by this sender): record ``error``
    and, for a definite refusal (``refused``), count it; the ``max_refusals``-th definite
    refusal moves the row to REFUSED (no more resends; ``max_refusals`` 0: never), an earlier
    one holds the row back ``backoff_seconds`` by the database's clock (``claimed_until``,
    which the next claim must pass). Anything else (unreachable, a 5xx, no URL) keeps the row
    PENDING, held back ``backoff_seconds`` too (the caller's retry back-off), never REFUSED.

    Returns the state the row is in afterwards (PENDING or REFUSED)."""
    model = type(row)
    column = moves.declaration(model, "state")
    until = db.db_now() + dt.timedelta(seconds=backoff_seconds)
    if not refused:
        model.update(claimed_until=until, last_error=error).where(
            model.id == row.id, model.state == PENDING
        ).execute()
        return PENDING
    refusals = (row.refusals or 0) + 1
    if (
        max_refusals
        and refusals >= max_refusals
        and move(
            row,
            REFUSED,
            PENDING,
            column=column,
            refusals=refusals,
            claimed_until=None,
            last_error=error,
        )
    ):
        return REFUSED
    model.update(refusals=model.refusals + 1, claimed_until=until, last_error=error).where(
        model.id == row.id, model.state == PENDING
    ).execute()
    return PENDING


def delivered(row: WebhookDelivery) -> bool:
    """Move a claimed PENDING delivery to DELIVERED (its receiver answered 2xx); False when it
    is no longer PENDING."""
    return move(
        row,
        DELIVERED,
        PENDING,
        column=WEBHOOK_DELIVERY_STATE,
        delivered_at=db.utcnow(),
        claimed_until=None,
        last_error=None,
    )


def redeliver(row: WebhookDelivery) -> bool:
    """Move a REFUSED delivery back to PENDING, its refusals, claim and error cleared (a
    workflow asked for it again); False when it is not REFUSED (any more)."""
    return move(
        row,
        PENDING,
        REFUSED,
        column=WEBHOOK_DELIVERY_STATE,
        refusals=0,
        claimed_until=None,
        last_error=None,
    )


def stop_deliveries(endpoint_id: int, why: str) -> int:
    """Move every PENDING delivery to the endpoint ``endpoint_id`` to REFUSED with ``why``
    (its endpoint was deleted: nothing more is sent there). Returns the rows moved."""
    return moves.move(
        WEBHOOK_DELIVERY_STATE,
        {"endpoint_id": endpoint_id},
        REFUSED,
        (PENDING,),
        claimed_until=None,
        last_error=why,
    )
