"""Removing a site (``gateway sites remove``): its credentials leave the ledger, its jobs'
history stays.

A site is removed only when none of its jobs is unfinished: a job is finished when it is
published, cancelled or failed (:func:`gateway.jobs.records.status_of`; not failed only by
writes never sent, which a run sends again: :func:`gateway.jobs.records.run_unfinished`);
any other job (in progress, unknown, needing review, or a draft waiting for approval or its
schedule) would lose the only credentials that can finish it, so the removal is refused and
names those jobs, unless forced. A removed site's jobs answer ``site-not-found`` at their
next write (:mod:`gateway.operations.target`); adding the name again lets them go on.
Source: docs/operations.md, "Sites".
"""

from __future__ import annotations

from gateway.core.states import CANCELLED
from gateway.core.states import JOB_FAILED
from gateway.core.states import PUBLISHED
from gateway.jobs import records
from gateway.ledger import db
from gateway.ledger.models import Job
from gateway.ledger.models import Site
from gateway.tenancy import sites

FINISHED = (CANCELLED, JOB_FAILED)  # besides a published job
SHOWN = 5  # unfinished jobs named in a refusal


class SiteInUse(Exception):
    """A removal refused: ``jobs`` (job ids) of the site are unfinished."""

    def __init__(self, site: Site, jobs: list[str]):
        listed = ", ".join(jobs[:SHOWN]) + (", ..." if len(jobs) > SHOWN else "")
        super().__init__(
            f"site {site.name!r} of tenant {site.tenant!r} has {len(jobs)} unfinished job(s) "
            f"({listed}): publish them (an editor approves, then Publish) or cancel them "
            "(POST /v1/jobs/{job_id}/cancel) first, or remove it anyway with --force (their "
            "next write is refused until the site is added again)"
        )
        self.jobs = jobs


def unfinished_jobs(site: Site) -> list[str]:
    """The job ids of ``site`` that are neither published, cancelled nor failed, oldest first."""
    query = (
        Job.select()
        .where(Job.tenant == site.tenant, Job.site == site.name)
        .order_by(Job.created_at)
    )
    return [job.job_id for job in query if job.phase != PUBLISHED and _unfinished(job)]


def _unfinished(job: Job) -> bool:
    status = records.status_of(job)  # failed only by writes never sent: a run resends them
    return status not in FINISHED or records.run_unfinished(job, status)


def remove_site(tenant: str, name: str, force: bool = False) -> dict:
    """Delete site ``name`` of ``tenant`` (its row, with the encrypted application password).

    Returns:
        ``{"tenant", "name", "url", "removed": True, "unfinished_jobs": [job_id, ...]}`` (the
        jobs left without a site, non-empty only with ``force``).

    Raises:
        SiteNotFound: no such site (the message lists the tenant's sites).
        SiteInUse: some of its jobs are unfinished and ``force`` is False.
    """
    with db.atomic():
        site = sites.get_site(tenant, name)
        unfinished = unfinished_jobs(site)
        if unfinished and not force:
            raise SiteInUse(site, unfinished)
        Site.delete().where(Site.id == site.id).execute()
    return {
        "tenant": tenant,
        "name": name,
        "url": site.url,
        "removed": True,
        "unfinished_jobs": unfinished,
    }
