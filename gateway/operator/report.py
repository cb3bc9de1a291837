"""Acceptance counters (the seed article's §13): duplicate drafts and media found in WordPress
by identifier, unauthorized calls, rejected checkpoint advances, operations left UNKNOWN, and
jobs by final status. Served by ``GET /v1/report`` and ``gateway report``."""

from __future__ import annotations

import logging
from collections import Counter as Tally

from gateway.actions import scheduling
from gateway.core import exceptions as exc
from gateway.core import states
from gateway.core.config import Config
from gateway.jobs import records
from gateway.ledger import models
from gateway.ledger.models import SENT
from gateway.ledger.models import UNKNOWN
from gateway.ledger.models import Job
from gateway.ledger.models import Operation
from gateway.operations import registry
from gateway.operations.target import target_for
from gateway.wordpress.errors import WordPressError

log = logging.getLogger(__name__)


def duplicates_in_wordpress(config: Config, tenant: str) -> dict:
    """Operation keys carried by two or more objects in WordPress, counted by type, with
    one batched lookup per 50 keys per site. Sites that cannot be asked are listed."""
    counts = {"duplicate_posts": 0, "duplicate_media": 0, "sites_unreachable": []}
    by_site: dict[str, list[Operation]] = {}
    job_sites = {
        j.job_id: j.site for j in Job.select(Job.job_id, Job.site).where(Job.tenant == tenant)
    }
    keyed = registry.keyed()  # actions whose objects carry their operation key
    rows = Operation.select().where(Operation.tenant == tenant, Operation.action.in_(list(keyed)))
    for row in rows:
        by_site.setdefault(job_sites.get(row.job_id), []).append(row)
    for site_name, site_rows in by_site.items():
        if site_name is None:
            continue
        job = records.get_job(tenant, site_rows[0].job_id)
        try:
            target = target_for(config, job)
            if not target.companion.present:
                counts["sites_unreachable"].append(site_name)
                continue
            found = target.client.find_by_operation_keys(
                [r.operation_key for r in site_rows],
                since=min(r.created_at for r in site_rows),
                types=sorted(set(keyed.values())),
            )
        except (WordPressError, exc.WordPressUnavailable, exc.UpstreamRefused) as error:
            log.warning("report: site %s unreachable: %s", site_name, error)
            counts["sites_unreachable"].append(site_name)
            continue
        per_key = Tally((o["operation_key"], o["type"]) for o in found)
        for (_key, kind), n in per_key.items():
            if n > 1:
                counts["duplicate_media" if kind == "attachment" else "duplicate_posts"] += n - 1
    return counts


REFUSAL_COUNTERS = ("unauthorized_calls", "rejected_checkpoint_advances")


def report(config: Config, tenant: str) -> dict:
    """The acceptance counters of ``tenant``: ``unauthorized_calls`` counts the refusals of
    the tenant's own tokens (wrong role, another tenant's job); a call without a valid token
    has no tenant and writes nothing to the ledger: it counts only in ``/metrics``
    (``gateway_unauthenticated_calls_total``). Source: docs/api.md, "GET /v1/report"."""
    statuses = Tally(records.status_of(job) for job in Job.select().where(Job.tenant == tenant))
    unknown = (
        Operation.select()
        .where(Operation.tenant == tenant, Operation.state.in_((UNKNOWN, SENT)))
        .count()
    )
    return {
        **duplicates_in_wordpress(config, tenant),
        **{name: models.counter(name, tenant) for name in REFUSAL_COUNTERS},
        "unknown_operations": unknown,
        "missed_schedules": scheduling.missed_schedules(tenant),
        "jobs_by_status": {s: statuses.get(s, 0) for s in states.STATUSES},
    }


def global_counters() -> dict:
    """The refusal counters summed over every tenant:
    ``{"unauthorized_calls": int, "rejected_checkpoint_advances": int}`` (a call without a
    valid token is not among them: see :func:`report`)."""
    return {name: models.counter(name) for name in REFUSAL_COUNTERS}
