"""An earlier task version's create, settled before a new version writes instead of it.

A job carries one post. Under a new task version the draft updates the post of the earlier
version's CONFIRMED create; when that create is SENT or UNKNOWN instead (its answer lost, its
lookup failed), a new version that simply created would leave two posts in WordPress, the
earlier one found later by reconciliation with nothing pointing at it (issue 51, "an n8n re-run
racing a version bump"). UNKNOWN is fixed by lookup, never by another write: :func:`settle`
looks the earlier row up exactly as a retry of the earlier request would
(:func:`gateway.operations.perform.reconcile`) and lets the new version create only on the
proof of absence that would let the earlier request send again
(:func:`gateway.operations.perform.check_resend_allowed`). Source: docs/api.md ("Task
versions").
"""

from __future__ import annotations

import logging

from gateway.core import exceptions as exc
from gateway.ledger.models import CONFIRMED
from gateway.ledger.models import SENT
from gateway.ledger.models import UNKNOWN
from gateway.ledger.models import Operation
from gateway.operations import perform
from gateway.operations import transitions
from gateway.operations.effects import Effect
from gateway.operations.effects import Outcome
from gateway.operations.target import Target

log = logging.getLogger(__name__)

UNSETTLED = (SENT, UNKNOWN)
# What the lookup raises when it could not ask WordPress (the outcome stays unknown).
_NOT_ASKED = (exc.OutcomeUnknown, exc.WordPressUnavailable, exc.UpstreamRefused)


def unsettled(query) -> list[Operation]:
    """The rows of ``query`` (a peewee select of operations) still SENT or UNKNOWN, newest
    task version first."""
    return list(query.where(Operation.state.in_(UNSETTLED)).order_by(Operation.task_version.desc()))


def settle(target: Target, row: Operation, effect: Effect) -> Outcome | None:
    """Settle ``row``, an earlier task version's SENT/UNKNOWN create, before the current
    version writes: look it up (``effect``: the row's action rebuilt from its intent, as
    reconciliation does), nothing sent.

    Returns the :class:`Outcome` of the row CONFIRMED with the object found (its caller then
    updates that object instead of creating one), or None when the object is proven absent
    (the same proof that lets a create be sent again; a SENT row is then marked UNKNOWN, as a
    reconciliation that finds nothing does) or the row was refused meanwhile (FAILED: nothing
    was created).

    Raises (each naming the earlier ``operation_key`` and ``ledger_state``, nothing sent):
        OutcomeUnknown / WordPressUnavailable (503, retryable) / UpstreamRefused (502): the
            lookup could not ask WordPress: the earlier write must be reconciled first.
        OperationInProgress (409): the earlier write is in flight (or, without the companion
            plugin's guard, its in-flight window has not passed).
        NeedsReview (409): two objects carry its key, or a same-title post may be it.
        ForeignObject (409): the object found is provably another job's.
    """
    try:
        outcome = perform.reconcile(target, row, effect)
    except _NOT_ASKED as unknown:
        in_flight = perform.in_flight_problem(target, row)
        if in_flight is not None and unknown.retryable:
            raise _earlier(in_flight, row) from unknown
        raise _earlier(unknown, row) from unknown
    if outcome is not None:
        return outcome
    row = Operation.get_by_id(row.id)
    if row.state == CONFIRMED:  # another request found it first
        return Outcome(row, reconciled=True)
    if row.state not in UNSETTLED:
        return None
    try:
        perform.check_resend_allowed(target, row, effect)
    except (exc.OperationInProgress, *_NOT_ASKED) as unproven:
        raise _earlier(unproven, row) from unproven
    if row.state == SENT:
        transitions.move(row, UNKNOWN)
    log.info("%s proven absent in WordPress (job_id=%s)", row.operation_key, row.job_id)
    return None


def _earlier(error: exc.GatewayError, row: Operation) -> exc.GatewayError:
    """``error`` (an outcome-unknown style problem about ``row``) told as the reason the
    current version's write waits: same class, status, ``retryable`` and extensions."""
    detail = (
        f"task version {row.task_version}'s write ({row.operation_key}) is not settled: "
        f"{error.detail}; it must be reconciled first (the next call looks it up again, as "
        f"POST /v1/jobs/{row.job_id}/recover does): nothing of this version was written"
    )
    facts = {"operation_key": row.operation_key, "ledger_state": row.state, **error.extensions}
    told = type(error)(detail, retry_after=error.retry_after, **facts)
    told.retryable = error.retryable  # a page from in front of WordPress may say "not later"
    return told
