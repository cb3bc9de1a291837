"""The guards every side effect passes before any ledger claim or WordPress call, whoever
calls (a view, the CLI, the agent worker): the job is not cancelled, and a fenced caller holds
the latest grant of the job's lease (docs/api.md, "Common rules of side-effect calls").
Every action's domain function calls :func:`check_writable` first; the agent worker and
``resume`` re-check them at every resume."""

from __future__ import annotations

from typing import Protocol

from gateway.core import exceptions as exc
from gateway.jobs import leases
from gateway.ledger.models import Job


class Writer(Protocol):
    """What the guards read of a side effect's target: a
    :class:`gateway.operations.target.Target` is one (operations sit above jobs, so this layer
    names the shape, not the class)."""

    job: Job
    fenced: bool  # a workflow's call under the job's lease (editors are not fenced)
    fencing_token: int | None


def refuse_cancelled(job: Job) -> None:
    """Refuse side effects on a cancelled job - replays of CONFIRMED operations included,
    so that "cancelled" means one thing to every caller; ``recover`` reports what exists.

    Raises:
        JobCancelled (409).
    """
    if job.cancelled:
        raise exc.JobCancelled(
            f"job {job.job_id} was cancelled ({job.cancel_reason or 'no reason given'}); "
            "no further writes",
            cancel_reason=job.cancel_reason,
        )


def check_writable(target: Writer) -> None:
    """The checks that precede any ledger claim or WordPress call of a side effect, whoever
    calls (a view, the CLI, the agent worker): the job is not cancelled and, for a fenced
    target, its fencing token is the latest grant of the job's lease (API.md, "Common rules of
    side-effect calls"). Every action's domain function calls this first.

    Args:
        target: a :class:`Writer` such as :class:`gateway.operations.target.Target` (its
            ``job``, ``fenced`` and ``fencing_token`` are read).

    Raises:
        JobCancelled, LeaseRequired, StaleFencingToken (409).
    """
    refuse_cancelled(target.job)
    if target.fenced:
        leases.check_fencing(target.job, target.fencing_token)
