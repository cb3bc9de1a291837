"""What a run's requests tell the ledger, noted once per answered request (an ``after_request``
hook of :mod:`gateway.api.routes`):

* **the job's last client request** (``job.last_request_at``): every request on a job's
  routes but reads (GET), ``/recover`` and ``/resume``. A recovery workflow asks those two
  for every unfinished job on each of its runs; counting them would keep a stopped job from
  ever becoming idle (the sweep's lookups do not count either). Source: docs/api.md,
  "Resuming a stopped job";
* **a refusal of the version's content**: a 413, 415 or 422 answer to the job's media or
  draft (the image or the article itself is wrong), kept on the version's resume point so
  that ``/resume`` sends the job to a person instead of running the same content again.

Neither is a side effect, and neither may fail the request: a ledger error here is logged.
"""

from __future__ import annotations

import logging

from flask import Response
from flask import g
from flask import request

from gateway.jobs import records
from gateway.ledger import db
from gateway.recovery import resume_points

log = logging.getLogger(__name__)

# Endpoints that are not a step of a run: the recovery workflow's own questions.
NOT_A_RUN = frozenset(("jobs.recover", "follow_up.resume"))
READS = frozenset(("GET", "HEAD", "OPTIONS"))
# The routes whose refusals judge the content of the version, and those refusals' statuses.
CONTENT_ROUTES = frozenset(("jobs.put_media", "jobs.put_draft"))
CONTENT_REFUSALS = frozenset((413, 415, 422))


def note(response: Response) -> None:
    """Record what ``response`` (the answer to the current request) says about its job's run;
    no-op outside ``/v1/jobs/{job_id}/...`` or without an authenticated caller."""
    principal = g.get("principal")
    job_id = (request.view_args or {}).get("job_id")
    if principal is None or not job_id or not request.path.startswith("/v1/jobs/"):
        return
    if request.method in READS or request.endpoint in NOT_A_RUN:
        return
    try:
        records.record_request(principal.tenant, job_id)
        if request.endpoint in CONTENT_ROUTES and response.status_code in CONTENT_REFUSALS:
            _record_refusal(principal.tenant, job_id, response)
    except db.LEDGER_ERRORS as error:  # the answer stands; idle time is a best effort
        log.error("job_id=%s: could not note the request: %s", job_id, error)


def _record_refusal(tenant: str, job_id: str, response: Response) -> None:
    problem = response.get_json(silent=True) or {}
    resume_points.record_refusal(
        tenant,
        job_id,
        {
            "route": f"{request.method} {request.path}"[:200],
            "status": response.status_code,
            "type": str(problem.get("type", ""))[:200],
            "title": str(problem.get("title", ""))[:200],
            "detail": str(problem.get("detail", ""))[:500],
            "errors": (problem.get("errors") or [])[:10],
        },
    )
