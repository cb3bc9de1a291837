"""What the editors' desk (``GET /review``) narrows its drafts to: a site, a state, and a
search by job id or title, beside the page's paging (issue 56, item 5).

* ``site``: one of the tenant's sites (``Job.site``);
* ``state``: ``waiting`` (no live approval of the job's current version, and no changes
  requested on it), ``changes_requested`` (sent back with a note: it waits for the workflow's
  next task version) or ``approved`` (a live approval: neither revoked nor expired): the
  page's own three badges, as :func:`gateway.editorial.review_board.count_approved` and
  :func:`~gateway.editorial.review_board.count_sent_back` count them;
* ``q``: a job id (exactly, or its beginning) or words of the title the workflow sent with the
  draft (the ``sent`` part of the draft rows' stored intent, matched case-insensitively; the
  ledger keeps no title column, so this is a ``LIKE`` over the intent's JSON text after its
  ``"title"`` key).

Every condition is SQL on existing columns, so paging and counts stay ledger queries; no
WordPress read happens for a job the page does not show. No Flask here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from peewee import Value
from peewee import fn

from gateway.core import exceptions as exc
from gateway.core.states import CHANGES_REQUESTED
from gateway.ledger import db
from gateway.ledger.models import Approval
from gateway.ledger.models import Job
from gateway.ledger.models import Operation

WAITING = "waiting"
APPROVED = "approved"
STATES = {
    WAITING: "waiting for an approval",
    CHANGES_REQUESTED: "changes requested",
    APPROVED: "approved: ready to publish",
}
MAX_QUERY_CHARS = 200


@dataclass(frozen=True)
class DeskFilter:
    """One narrowing of the desk's drafts; every member None means all of them."""

    site: str | None = None
    state: str | None = None
    query: str | None = None

    def apply(self, select):
        """``select`` (a peewee query over :class:`Job`) narrowed by every member set."""
        if self.site:
            select = select.where(Job.site == self.site)
        if self.state == APPROVED:
            select = select.where(fn.EXISTS(_live_approval()))
        elif self.state == WAITING:
            select = select.where(~fn.EXISTS(_live_approval()), sent_back(False))
        elif self.state == CHANGES_REQUESTED:
            select = select.where(sent_back(True))
        if self.query:
            select = select.where(_matches(self.query))
        return select

    def args(self) -> dict[str, str]:
        """The members set, as query parameters for the pager's links."""
        named = {"site": self.site, "state": self.state, "q": self.query}
        return {name: value for name, value in named.items() if value}

    @property
    def active(self) -> bool:
        """True when the desk shows fewer than all the drafts."""
        return bool(self.args())


def parse(args, sites: list[str]) -> DeskFilter:
    """A :class:`DeskFilter` from query parameters ``site``, ``state`` and ``q`` (a mapping
    of str to str; empty values ignored), ``sites`` being the tenant's site names.

    Raises:
        ValidationFailed: an unknown site or state, or a search longer than
            :data:`MAX_QUERY_CHARS` characters (RFC 9457 ``errors`` name the parameter).
    """
    site = (args.get("site") or "").strip() or None
    state = (args.get("state") or "").strip() or None
    query = " ".join((args.get("q") or "").split()) or None
    if site is not None and site not in sites:
        _refuse("site", f"unknown site {site!r}: one of {', '.join(sorted(sites)) or 'none'}")
    if state is not None and state not in STATES:
        _refuse("state", f"state must be one of {', '.join(STATES)}")
    if query is not None and len(query) > MAX_QUERY_CHARS:
        _refuse("q", f"a search is at most {MAX_QUERY_CHARS} characters")
    return DeskFilter(site, state, query)


def _refuse(name: str, message: str) -> None:
    raise exc.ValidationFailed(message, errors=[{"pointer": f"/{name}", "message": message}])


def sent_back(which: bool):
    """``which``: the outer query's job has changes requested on its current version
    (``Job.decision``); False: it has not (no decision, or approved)."""
    if which:
        return Job.decision == CHANGES_REQUESTED
    return Job.decision.is_null() | (Job.decision != CHANGES_REQUESTED)


def _live_approval():
    """Approvals of the outer query's job and version, neither revoked nor expired."""
    return Approval.select(Approval.id).where(
        Approval.tenant == Job.tenant,
        Approval.job_id == Job.job_id,
        Approval.task_version == Job.task_version,
        Approval.revoked_at.is_null(),
        Approval.expires_at > db.db_now(),
    )


def _like(text: str) -> str:
    # LIKE's own wildcards in the search become "any one character": a harmless superset,
    # and the same on SQLite and PostgreSQL (whose escape characters differ)
    return text.replace("%", "_")


def _matches(query: str):
    """The job id (exactly or its beginning) or the sent title holds ``query``."""
    as_json = json.dumps(query, ensure_ascii=False)[1:-1]  # as the intent's text stores it
    titled = Operation.select(Operation.id).where(
        Operation.tenant == Job.tenant,
        Operation.job_id == Job.job_id,
        Operation.action == "draft",
        # the pattern as it is (the JSON column would encode it as a JSON string)
        Operation.intent ** Value(f'%"title": "%{_like(as_json)}%', converter=False),
    )
    return (Job.job_id == query) | (Job.job_id ** f"{_like(query)}%") | fn.EXISTS(titled)
