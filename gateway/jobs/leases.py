"""Leases with fencing tokens: one worker at a time writes a job's side effects.

A job has at most one lease row, kept after release so that its ``fencing_token`` only ever
increases. Conditional UPDATEs decide every grant (the row count says who won; never
read-then-write), and expiry is judged by the database's clock (:func:`gateway.ledger.db.db_now`,
``clock_timestamp()`` on PostgreSQL), never by a worker's.

Fencing (docs/api.md, "Headers"): while a job has an active lease, a
workflow-token call to a side-effect endpoint must carry ``X-Fencing-Token`` equal to the latest
grant; the check runs before the call is claimed and again just before the WordPress write.

The lease's state is its ``owner`` (declared in :mod:`gateway.ledger.models`, moves:
:data:`gateway.core.states.LEASE_MOVES`): NULL once released, held otherwise. Every write of
it is :func:`gateway.ledger.moves.move`; the fencing rules above are its conditions.
"""

from __future__ import annotations

import datetime as dt
import logging
import math

from gateway.core import exceptions as exc
from gateway.core.states import SET
from gateway.ledger import db
from gateway.ledger import moves
from gateway.ledger import unique
from gateway.ledger.models import LEASE_OWNER
from gateway.ledger.models import Job
from gateway.ledger.models import Lease

log = logging.getLogger(__name__)
MAX_ROUNDS = 4


def lease_view(lease: Lease) -> dict:
    """``{"owner", "fencing_token", "expires_at"}``."""
    return {
        "owner": lease.owner,
        "fencing_token": lease.fencing_token,
        "expires_at": db.rfc3339(lease.expires_at),
    }


_UNREAD = object()


def _row(job: Job) -> Lease | None:
    return Lease.get_or_none(Lease.tenant == job.tenant, Lease.job_id == job.job_id)


def _of(job: Job) -> dict:
    return {"tenant": job.tenant, "job_id": job.job_id}


def acquire(job: Job, owner: str, ttl_seconds: int) -> Lease:
    """Grant or renew the job's lease for ``owner``.

    The same owner renews (same token, later expiry) as long as nobody else was granted the
    lease since; a released or expired lease goes to the next caller with ``token + 1``.

    Raises:
        LeaseHeld (409, Retry-After): another owner holds an unexpired lease.
    """
    for _ in range(MAX_ROUNDS):
        now = db.db_now()
        expires = now + dt.timedelta(seconds=ttl_seconds)
        with db.atomic():
            # the same owner renews: same token, later expiry
            mine = {**_of(job), "owner": owner}
            renewed = moves.move(LEASE_OWNER, mine, owner, SET, expires_at=expires, updated_at=now)
            if not renewed:  # released or expired: the next grant, token + 1
                free = ((Lease.owner.is_null()) | (Lease.expires_at <= now),)
                renewed = moves.move(
                    LEASE_OWNER,
                    _of(job),
                    owner,
                    (None, SET),
                    when=free,
                    fencing_token=Lease.fencing_token + 1,
                    expires_at=expires,
                    updated_at=now,
                )
            if renewed:
                lease = _row(job)
                log.info(
                    "lease of job_id=%s granted to %s (token %s)",
                    job.job_id,
                    owner,
                    lease.fencing_token,
                )
                return lease
        current = _row(job)
        if current is None:
            lease, created = unique.insert_or_get(
                lambda expires=expires: Lease.create(
                    tenant=job.tenant, job_id=job.job_id, owner=owner, expires_at=expires
                )
            )
            if created:
                return lease
            continue  # another owner inserted first: look again
        if current.owner not in (None, owner) and current.expires_at > now:
            wait = max(1, math.ceil((current.expires_at - now).total_seconds()))
            raise exc.LeaseHeld(
                f"job {job.job_id} is leased to another owner until "
                f"{db.rfc3339(current.expires_at)}",
                retry_after=wait,
                expires_at=db.rfc3339(current.expires_at),
            )
    raise exc.LeaseHeld("the lease changed hands repeatedly; try again", retry_after=1)


def release(job: Job, owner: str, fencing_token: int) -> dict:
    """Release the lease held by ``owner`` under ``fencing_token`` (repeat-safe).

    Raises:
        StaleFencingToken: the lease was granted to someone else (or a newer token) since.
    """
    now = db.db_now()
    held = {**_of(job), "owner": owner, "fencing_token": fencing_token}
    released = moves.move(LEASE_OWNER, held, None, SET, expires_at=now, updated_at=now)
    current = _row(job)
    if released or (current and current.owner is None and current.fencing_token == fencing_token):
        return {"owner": owner, "fencing_token": fencing_token, "released": True}
    raise exc.StaleFencingToken(
        "this owner and token do not hold the job's lease",
        fencing_token=current.fencing_token if current else None,
    )


def check_fencing(job: Job, fencing_token: int | None) -> None:
    """Refuse a workflow call that does not carry the latest grant of an active lease.

    A sent token is always compared with the latest grant (even when the lease expired);
    a missing token matters only while a lease is active.

    Raises:
        LeaseRequired: an active lease exists and no token was sent.
        StaleFencingToken: the token is not the latest grant.
    """
    # The lease row read with the job in the same statement (records.get_job(with_site=True):
    # a JobRow's lease_row; a Job instance has none), used once: a later check on the same
    # job object reads the lease again.
    lease = getattr(job, "lease_row", _UNREAD)
    if lease is _UNREAD:
        lease = _row(job)
    else:
        job.lease_row = _UNREAD
    if lease is None:
        return
    active = lease.owner is not None and lease.expires_at > db.db_now()
    if fencing_token is None:
        if active:
            raise exc.LeaseRequired(
                f"job {job.job_id} is leased; send X-Fencing-Token with the lease's token"
            )
        return
    if fencing_token != lease.fencing_token:
        log.warning(
            "stale fencing token %s for job_id=%s (latest %s)",
            fencing_token,
            job.job_id,
            lease.fencing_token,
        )
        raise exc.StaleFencingToken(
            f"fencing token {fencing_token} is not the latest grant",
            fencing_token=lease.fencing_token,
        )


def active_lease(job: Job) -> dict | None:
    """The job's active lease as JSON, or None."""
    lease = _row(job)
    if lease is None or lease.owner is None or lease.expires_at <= db.db_now():
        return None
    return lease_view(lease)
