"""The limits a principal may carry beyond its tenant and role (:class:`Principal`'s
``sites`` and ``tools_only``), checked once the caller is known and before any route runs, so
a refused call reads at most one ledger row and never reaches WordPress (docs/api.md
"Callers limited to sites or to the tools").

What a refusal tells the caller, chosen to leak least:

* ``tools_only`` and a route that is not one of :data:`gateway.core.callers.TOOL_ROUTES`:
  403 ``forbidden`` (the route is public knowledge; approving and publishing are refused so).
* ``sites`` and a job of another site of the tenant: 404 ``job-not-found``, exactly the
  answer for a job of another tenant (counted as an unauthorized call the same way), so a
  grant learns nothing of the jobs outside its sites.
* ``sites`` and a new job whose body names another site (``PUT /v1/jobs/{job_id}``): 403
  ``forbidden`` (the caller named that site itself: nothing is learnt). Checked by the view,
  once the body is read (:func:`check_site`).
* ``sites`` and a route that is not a job's (lists, reports, reviews): 403 ``forbidden``,
  since those answer for every site of the tenant.
"""

from __future__ import annotations

import logging

from flask import request

from gateway.core import exceptions as exc
from gateway.core.callers import TOOL_ROUTES
from gateway.ledger import models
from gateway.ledger.models import Job
from gateway.tenancy.tokens import Principal

log = logging.getLogger(__name__)


def check(principal: Principal) -> None:
    """Refuse the current request when ``principal``'s limits do not allow it (a no-op for a
    principal without limits, which costs nothing: gateway tokens).

    Raises:
        Forbidden (403): see the module's docstring.
        JobNotFound (404): a job of a site outside ``principal.sites``.
    """
    if principal.sites is None and not principal.tools_only:
        return
    rule = request.url_rule.rule if request.url_rule is not None else None
    if rule is None:
        return  # no route: the 404 or 405 it gets anyway
    if principal.tools_only and (request.method, rule) not in TOOL_ROUTES:
        _refuse(principal, "this caller may call only the routes of the MCP tools")
    if principal.sites is None:
        return
    job_id = (request.view_args or {}).get("job_id")
    if job_id is None:
        _refuse(principal, "this caller is limited to some sites: only a job's routes")
    site = Job.select(Job.site).where(Job.tenant == principal.tenant, Job.job_id == job_id)
    row = site.first()
    if row is not None and row.site not in principal.sites:
        models.bump_counter("unauthorized_calls", tenant=principal.tenant)
        raise exc.JobNotFound(f"no job {job_id!r} for this tenant")  # as records.get_job


def check_site(principal: Principal, site: str) -> None:
    """Refuse a job on ``site`` when ``principal`` is limited to other sites.

    Raises:
        Forbidden (403): ``site`` is not one of ``principal.sites``.
    """
    if principal.sites is not None and site not in principal.sites:
        _refuse(principal, f"this caller may not work on site {site!r}")


def _refuse(principal: Principal, detail: str) -> None:
    models.bump_counter("unauthorized_calls", tenant=principal.tenant)
    log.warning("refused %s %s: %s (tenant %s)", request.method, request.path, detail,
                principal.tenant)  # fmt: skip
    raise exc.Forbidden(detail)
