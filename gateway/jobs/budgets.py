"""Per-job budgets: counters with a ceiling that stop a job which keeps going after it should
have stopped (an n8n error branch wired back into itself once made 20,000 calls in two hours).

A budget is a named counter per job (a :class:`Budget` row). Every kind is a constant here,
declared once in :data:`KINDS` with the configuration default that applies until an editor
raises it for one job. Spending is one conditional UPDATE whose row count decides
(``used + n <= ceiling``), so racing workers can never overspend. Past the ceiling the caller
gets 429 ``budget-exhausted`` naming the budget, and the job is listed on the review page as
needing a person; only an editor or admin raises it (:func:`raise_ceiling`).

Kinds today: ``write_attempts`` (WordPress writes; replays and refusals answered from the
ledger do not spend). Adding one (resume attempts, tool calls, tokens of an agent session):
a name constant and its ``Kind(name, description, default=lambda config: ...)`` in
:data:`KINDS` (a fixed set, no registry: nothing outside this module declares one), and call
:func:`spend` where the thing happens (it refuses, spending nothing, when the ceiling would
be passed). A deadline is a budget of seconds: spend the seconds a step took.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from peewee import fn

from gateway.core import exceptions as exc
from gateway.core.config import Config
from gateway.ledger import db
from gateway.ledger import hot_sql
from gateway.ledger.models import Budget

WRITE_ATTEMPTS = "write_attempts"


@dataclass(frozen=True)
class Kind:
    """A budget kind: ``default(config)`` is the ceiling of a job nobody raised (0 = none)."""

    name: str
    description: str
    default: Callable[[Config], int]


# Every budget kind, by name.
KINDS: dict[str, Kind] = {
    WRITE_ATTEMPTS: Kind(
        WRITE_ATTEMPTS,
        "WordPress write attempts of the job (replays and ledger refusals do not count)",
        lambda config: config.job_write_budget,
    ),
}


def _kind(name: str) -> Kind:
    if name not in KINDS:
        raise exc.NotFound(f"no budget named {name!r}; known: {', '.join(sorted(KINDS))}")
    return KINDS[name]


def _where(tenant: str, job_id: str, name: str):
    return (Budget.tenant == tenant) & (Budget.job_id == job_id) & (Budget.name == name)


def _ceiling(row: Budget | None, default: int) -> int:
    return row.allowed if row is not None and row.allowed is not None else default


def _exhausted(config: Config, tenant: str, job_id: str, name: str) -> exc.GatewayError:
    view = budget_view(config, tenant, job_id, name)
    return exc.BudgetExhausted(
        f"job {job_id} has used {view['used']} of its {view['limit']} {name} "
        f"(budget exhausted); an editor or admin can raise the job's {name} budget",
        budget=view,
    )


def _ensure_row(tenant: str, job_id: str, name: str) -> None:
    Budget.insert(tenant=tenant, job_id=job_id, name=name, used=0).on_conflict_ignore().execute()


def spend(config: Config, tenant: str, job_id: str, name: str, amount: int = 1) -> None:
    """Spend ``amount`` of budget ``name`` of the job, or refuse without spending.

    One plain-SQL statement (:func:`gateway.ledger.hot_sql.spend_budget`):
    ``INSERT ... ON CONFLICT (tenant, job_id, name) DO UPDATE SET used = used + amount WHERE
    used + amount <= ceiling RETURNING id`` (SQLite 3.35+ and PostgreSQL both take it). The
    job's first spend inserts its row; a later one updates it only while there is room, and
    no returned row means the ceiling was reached. An ``amount`` larger than the default
    ceiling is refused outright for a job whose row does not exist yet.

    Raises:
        BudgetExhausted (429): ``used + amount`` would pass the ceiling.
    """
    default = _kind(name).default(config)
    limited = default > 0
    if limited and amount > default and Budget.get_or_none(_where(tenant, job_id, name)) is None:
        raise _exhausted(config, tenant, job_id, name)  # the insert would pass the ceiling
    if not hot_sql.spend_budget(tenant, job_id, name, amount, db.utcnow(), default):
        raise _exhausted(config, tenant, job_id, name)


def budget_view(config: Config, tenant: str, job_id: str, name: str) -> dict:
    """``{"name", "used", "limit", "exhausted", "raised_by"}``; ``limit`` None = unlimited."""
    default = _kind(name).default(config)
    row = Budget.get_or_none(_where(tenant, job_id, name))
    ceiling = _ceiling(row, default)
    limited = ceiling > 0 or (row is not None and row.allowed is not None)
    used = row.used if row else 0
    return {
        "name": name,
        "used": used,
        "limit": ceiling if limited else None,
        "exhausted": limited and used >= ceiling,
        "raised_by": row.raised_by if row else None,
    }


def budgets_of(config: Config, tenant: str, job_id: str) -> list[dict]:
    """Every declared budget of the job (see :func:`budget_view`)."""
    return [budget_view(config, tenant, job_id, name) for name in sorted(KINDS)]


def raise_ceiling(config: Config, tenant: str, job_id: str, name: str, limit: int, by: str) -> dict:
    """Set the job's ceiling of budget ``name`` to ``limit`` (an editor's decision, recorded
    with ``by``). Returns :func:`budget_view`.

    Raises:
        NotFound: unknown budget name. ValidationFailed: ``limit`` below what is used.
    """
    _kind(name)
    with db.atomic():
        _ensure_row(tenant, job_id, name)
        row = Budget.get(_where(tenant, job_id, name))
        if limit < row.used:
            raise exc.ValidationFailed(
                f"the job has already used {row.used} {name}",
                errors=[{"pointer": "/limit", "message": f"must be at least {row.used}"}],
            )
        Budget.update(allowed=limit, raised_by=by, updated_at=db.utcnow()).where(
            Budget.id == row.id
        ).execute()
    return budget_view(config, tenant, job_id, name)


def exhausted_jobs(config: Config, tenant: str, limit: int = 200) -> list[dict]:
    """Budgets of ``tenant``'s jobs that are used up, newest first:
    ``[{"job_id", **budget_view}]`` (what the review page lists as needing a person)."""
    result = []
    for name, kind in sorted(KINDS.items()):
        default = kind.default(config)
        if default > 0:
            full = Budget.used >= fn.COALESCE(Budget.allowed, default)
        else:
            full = Budget.allowed.is_null(False) & (Budget.used >= Budget.allowed)
        query = (
            Budget.select()
            .where((Budget.tenant == tenant) & (Budget.name == name) & full)
            .order_by(Budget.updated_at.desc())
            .limit(limit)
        )
        for row in query:
            ceiling = _ceiling(row, default)
            result.append(
                {
                    "job_id": row.job_id,
                    "name": name,
                    "used": row.used,
                    "limit": ceiling,
                    "exhausted": True,
                    "raised_by": row.raised_by,
                }
            )
    return result
