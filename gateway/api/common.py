"""What the blueprints share: the job named in the path, the WordPress target of a
side-effect call (its ``X-Fencing-Token`` header), and the status codes and headers of
side-effect answers. The domain returns outcomes; this layer turns them into responses, with
the body each action's registration carries (:class:`gateway.operations.registry.Answer`, the
one the agent tools answer with too) or the bodies of :mod:`gateway.api.answers`.
"""

from __future__ import annotations

from flask import g
from flask import request

from gateway.api.http import config
from gateway.core import exceptions as exc
from gateway.core import validation
from gateway.jobs import records
from gateway.ledger import models
from gateway.ledger.models import Job
from gateway.operations import registry
from gateway.operations.effects import Outcome
from gateway.operations.target import Target
from gateway.operations.target import target_for

FENCING_HEADER = "X-Fencing-Token"


def job_of_path(job_id: str, with_site: bool = False) -> Job:
    """The caller's tenant's job ``job_id`` (422 for a malformed id, 404 when absent; a job
    of another tenant is a 404 too, counted as an unauthorized call of the caller's tenant).
    ``with_site``: its site row comes in the same statement (for :func:`side_effect_target`
    of a write)."""
    validation.check_identifier(job_id, validation.JOB_ID, "/job_id", "job_id")
    try:
        return records.get_job(g.principal.tenant, job_id, with_site=with_site)
    except exc.JobNotFound:
        if records.held_by_another_tenant(g.principal.tenant, job_id):
            # Still a 404 (no tenant learns of another's jobs), but counted: the token is valid.
            models.bump_counter("unauthorized_calls", tenant=g.principal.tenant)
        raise


def fencing_token() -> int | None:
    """The ``X-Fencing-Token`` header as an int (None when absent).

    Raises:
        ValidationFailed: the header is not a positive integer.
    """
    return validation.parse_int(request.headers.get(FENCING_HEADER), f"/headers/{FENCING_HEADER}")


def side_effect_target(job: Job) -> Target:
    """The target of a side-effect call: workflow tokens work under the job's lease (fenced,
    with the header's token); editors are not fenced. The domain checks cancellation and
    fencing (:func:`gateway.jobs.guards.check_writable`) before any claim or WordPress call."""
    fenced = g.principal.role == "workflow"
    token = fencing_token() if fenced else None
    return target_for(config(), job, fencing_token=token, fenced=fenced)


def answer(body: dict, outcome: Outcome | None):
    """``(body, status, headers)``: 201 when this request made the write, 200 otherwise,
    with ``Idempotent-Replayed: true`` for a stored receipt."""
    if outcome is None:
        return body, 200
    status = 201 if outcome.created else 200
    headers = {"Idempotent-Replayed": "true"} if outcome.replayed else {}
    return body, status, headers


def action_body(action: str, outcome: Outcome) -> dict:
    """The body registered for ``action``'s answer (``media``, ``draft``, ``block``,
    ``publish``: its :class:`~gateway.operations.registry.Answer`; docs/api.md, "Response
    shapes"), the one its agent tool answers with too.

    Raises:
        UnknownAction: ``action`` is not registered. AttributeError: it was registered without
            an answer shape (a bug of the view, which its tests find).
    """
    return registry.get(action).answer.body(outcome)


def action_answer(action: str, outcome: Outcome):
    """:func:`answer` with :func:`action_body`: ``(body, status, headers)``."""
    return answer(action_body(action, outcome), outcome)
