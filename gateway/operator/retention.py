"""Retention (``gateway prune --older-than DAYS``): finished jobs' operations lose their bulky
parts; what identifies a side effect is kept forever.

Policy:

* **Pruned**: operations in a final state (CONFIRMED or FAILED) last updated more than DAYS
  ago, of *finished* jobs: published, cancelled, or untouched (no update) for DAYS. SENT,
  UNKNOWN and PREPARED rows are never pruned: they still need reconciliation; nor is a
  FAILED row that was never sent (no ``sent_at``: its request died before sending), which
  the same request still sends.
* **Dropped** from such a row: the stored intent (what a reconciliation would have needed),
  and from the receipt every nested object and every text longer than
  :data:`CORE_TEXT_CHARS` characters - the copies of WordPress bodies (baseline, sent and
  expected posts, verification reports).
* **Kept forever**: operation key, state, remote id, request digest, attempts, the problem of
  a refusal, timestamps, and the receipt's short scalar fields (``source_url``, ``link``,
  ``status``, ``digest``...), with ``pruned_at`` set; and every job's timeline (``job_event``,
  :mod:`gateway.jobs.timeline`: who decided what, when, on which version and digest): its
  rows are small and are the audit of published and cancelled jobs, so ``prune`` never
  deletes nor shortens one (issue 56).

A replay of a pruned operation answers as any replay (200, ``Idempotent-Replayed: true``, no
WordPress write) with that core receipt and ``"pruned": true``. Calls that need the bulky
parts - verification and repair of the job's draft - answer 409 ``receipt-pruned`` and write
nothing. Processed webhook bodies join this policy when webhooks exist. Clients' request keys
(``Idempotency-Key``, :mod:`gateway.tenancy.request_keys`) have a retention of their own,
``GATEWAY_REQUEST_KEY_HOURS``: every run deletes those past it.
"""

from __future__ import annotations

import datetime as dt

from peewee import JOIN

from gateway.core import states
from gateway.ledger import db
from gateway.ledger.models import CONFIRMED
from gateway.ledger.models import FAILED
from gateway.ledger.models import Job
from gateway.ledger.models import Operation
from gateway.tenancy import request_keys

CORE_TEXT_CHARS = 300
BATCH = 500


def core_receipt(receipt: dict | None) -> dict | None:
    """``receipt`` without nested objects and long texts (see the module's policy)."""
    if receipt is None:
        return None
    return {
        name: value
        for name, value in receipt.items()
        if value is None
        or isinstance(value, bool | int | float)
        or (isinstance(value, str) and len(value) <= CORE_TEXT_CHARS)
    }


def prune(older_than_days: float, now: dt.datetime | None = None) -> dict:
    """Apply the retention policy to every tenant's ledger.

    Args:
        older_than_days: age in days (0 prunes every finished job's final operations).
        now: the reference time (naive UTC), default the gateway's clock.

    Returns:
        ``{"operations": n, "cutoff": "...Z", "request_keys": m}``: how many rows lost their
        bulky parts; how many clients' request keys past their own retention
        (``GATEWAY_REQUEST_KEY_HOURS``, whatever ``older_than_days``) were deleted.
    """
    cutoff = (now or db.utcnow()) - dt.timedelta(days=older_than_days)
    finished = (
        (Job.cancelled == True)  # noqa: E712 - peewee expression
        | (Job.phase == states.PUBLISHED)
        | (Job.updated_at <= cutoff)
    )
    candidates = (
        Operation.select(Operation.id, Operation.receipt)
        .join(
            Job,
            JOIN.INNER,
            on=(Job.tenant == Operation.tenant) & (Job.job_id == Operation.job_id),
        )
        .where(
            Operation.state.in_([CONFIRMED, FAILED]),
            (Operation.state == CONFIRMED) | Operation.sent_at.is_null(False),  # sent FAILED
            Operation.pruned_at.is_null(),
            Operation.updated_at <= cutoff,
            finished,
        )
        .order_by(Operation.id)
    )
    pruned, last_id = 0, 0
    while True:
        batch = list(candidates.where(Operation.id > last_id).limit(BATCH))
        if not batch:
            break
        stamp = db.utcnow()
        with db.atomic():
            for row in batch:
                pruned += (
                    Operation.update(
                        intent=None, receipt=core_receipt(row.receipt), pruned_at=stamp
                    )
                    .where(Operation.id == row.id, Operation.pruned_at.is_null())
                    .execute()
                )
        last_id = batch[-1].id
    with db.atomic():
        expired = request_keys.prune(now)
    return {"operations": pruned, "cutoff": db.rfc3339(cutoff), "request_keys": expired}
