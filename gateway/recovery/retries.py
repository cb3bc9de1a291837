"""Trying a FAILED operation again, by a person's decision.

FAILED is kept for WordPress's own definite refusals (a JSON error from WordPress: validation,
capability, a refused upload). Such a row is sent again in two cases only:

* the site's credentials were renewed since the refusal (``gateway sites add``) and the
  refusal was a 401/403 (:mod:`gateway.operations.perform` does that by itself);
* an editor or admin decides it (``POST /v1/jobs/{job_id}/operations/retry``, or the button
  on the review page): :func:`retry_failed` moves the row from FAILED to UNKNOWN and records
  who and why in ``operation_retry``. UNKNOWN means what it says: the next identical request
  looks the operation up in WordPress first and sends only when it is absent.

A refusal from in front of WordPress never makes a row FAILED (it is UNKNOWN with reason
``upstream-refused``), so it needs no decision.
"""

from __future__ import annotations

import logging

from gateway.core import exceptions as exc
from gateway.ledger import db
from gateway.ledger.models import FAILED
from gateway.ledger.models import UNKNOWN
from gateway.ledger.models import Job
from gateway.ledger.models import Operation
from gateway.ledger.models import OperationRetry
from gateway.operations import transitions
from gateway.tenancy.tokens import Principal

log = logging.getLogger(__name__)


def retry_failed(job: Job, operation_key: str, reason: str, principal: Principal) -> dict:
    """Turn the FAILED operation ``operation_key`` of ``job`` back into one the next
    identical request sends (after reconciling), and record who decided it and why.

    Returns ``{"operation_key", "state": "UNKNOWN", "retry": {...}}``.

    Raises:
        NotFound (404): the job has no operation with this key.
        OperationNotFailed (409): the operation is not FAILED (``ledger_state`` says what
            it is); nothing is changed.
    """
    with db.atomic():
        row = Operation.get_or_none(
            Operation.operation_key == operation_key,
            Operation.tenant == job.tenant,
            Operation.job_id == job.job_id,
        )
        if row is None:
            raise exc.NotFound(
                f"job {job.job_id} has no operation {operation_key!r}",
                errors=[{"pointer": "/operation_key", "message": "no such operation in the job"}],
            )
        previous = row.problem
        changed = transitions.move(
            row,
            UNKNOWN,
            FAILED,
            problem={
                "reason": "retry-authorized",
                "detail": f"{principal.name} ({principal.role}) allowed a new attempt: {reason}",
                "previous": previous,
            },
        )
        if not changed:
            raise exc.OperationNotFailed(
                f"operation {operation_key} is {row.state}, not FAILED: only a refusal by "
                "WordPress can be retried this way",
                operation_key=operation_key,
                ledger_state=row.state,
            )
        retry = OperationRetry.create(
            operation_key=operation_key,
            tenant=job.tenant,
            job_id=job.job_id,
            requested_by=principal.name,
            role=principal.role,
            reason=reason,
            previous_problem=previous,
        )
    log.info(
        "retry of %s allowed by %s job_id=%s: %s", operation_key, principal.name, job.job_id, reason
    )
    return {"operation_key": operation_key, "state": UNKNOWN, "retry": retry_view(retry)}


def retry_view(retry: OperationRetry) -> dict:
    """One recorded decision as JSON."""
    return {
        "requested_by": retry.requested_by,
        "role": retry.role,
        "reason": retry.reason,
        "previous_problem": retry.previous_problem,
        "created_at": db.rfc3339(retry.created_at),
    }


def retries_of(job: Job) -> list[dict]:
    """Every recorded retry decision of ``job``, oldest first, with its operation key."""
    query = (
        OperationRetry.select()
        .where(OperationRetry.tenant == job.tenant, OperationRetry.job_id == job.job_id)
        .order_by(OperationRetry.id)
    )
    return [{"operation_key": r.operation_key, **retry_view(r)} for r in query]


def failed_operations(tenant: str) -> list[Operation]:
    """FAILED ledger rows of ``tenant``, oldest first (for the review page)."""
    return list(
        Operation.select()
        .where(Operation.tenant == tenant, Operation.state == FAILED)
        .order_by(Operation.id)
    )
