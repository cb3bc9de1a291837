"""The poll: the safety net under lost webhooks (seed, section 11: "轮询作为补偿通道").

Every bound session that is not finished is retrieved on a schedule, whatever its last seen
status (``null``, ``idle``, ``in_progress``, ``requires_action``): a webhook that never came
cannot leave a session unanswered. A session leaves the poll when it is finished: its status
is ``failed``, it was stopped (``stopped_reason``: a person decides), its job was cancelled
or completed (published or scheduled for publishing: nothing is left for an agent to do; a
verified or approval-pending job still polls, its agent may still ask for something), or its
deadline passed (the worker records that stop at the session's next due time).

The schedule, per session (columns of ``agent_session``, schema version 10):

* after a retrieve that showed something new (another status, or actions answered in the
  pass) the next one is due ``GATEWAY_AGENT_STALE_AFTER`` seconds later; each retrieve in a
  row that showed nothing new doubles that wait (``poll_streak``), up to
  ``GATEWAY_AGENT_POLL_MAX_INTERVAL``;
* after a failure (OpenAI or the site unreachable, the job's lease held elsewhere) the wait
  starts at ``GATEWAY_AGENT_RETRY_AFTER`` and doubles per failure in a row (``poll_failures``),
  up to the same cap;
* every wait is multiplied by a random factor in [0.8, 1.2) (jitter), so that sessions bound
  together are not retrieved together forever.

A pass retrieves at most ``GATEWAY_AGENT_POLL_BATCH`` sessions, shared round robin between
tenants (each tenant's most overdue first, then each one's second...); the rest are due at the
next pass, where the worker's turns (:mod:`gateway.agents.turns`) take them. A session is
claimed for one worker by a conditional UPDATE of its ``next_poll_at`` (the row count decides;
a crashed worker's claim ends after ``GATEWAY_AGENT_LEASE_SECONDS``). Webhook events that
could not be handled are retried on the same backoff (:func:`retry_delay`).
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable

from peewee import fn

from gateway.core import states
from gateway.core.config import Config
from gateway.ledger import db
from gateway.ledger.models import AgentSession
from gateway.ledger.models import Job

FINISHED_STATUSES = ("failed",)
JITTER = (0.8, 1.2)
MAX_EXPONENT = 30


def delay(
    base: float, cap: float, exponent: int, rand: Callable[[], float] = random.random
) -> float:
    """Seconds to wait: ``min(cap, base * 2**exponent)`` times a jitter factor in
    [0.8, 1.2). A pure function (``rand`` returns a float in [0, 1))."""
    raw = min(cap, base * 2 ** min(max(exponent, 0), MAX_EXPONENT))
    low, high = JITTER
    return raw * (low + (high - low) * rand())


def retry_delay(config: Config, failures: int) -> float:
    """Seconds before the next try after ``failures`` (>= 1) failures in a row."""
    return delay(config.agent_retry_after, config.agent_poll_max_interval, failures - 1)


def due(config: Config, now: dt.datetime | None = None) -> list[AgentSession]:
    """The unfinished sessions whose next retrieve is due (see the module docstring for what
    is finished), at most ``config.agent_poll_batch`` of them, the batch shared round robin
    between tenants: every tenant's most overdue session first, then every tenant's second,
    and so on (most overdue first within a round), so one tenant's backlog never keeps
    another tenant's session out of a pass."""
    now = now or db.utcnow()
    when = fn.COALESCE(AgentSession.next_poll_at, AgentSession.created_at)
    turn = fn.ROW_NUMBER().over(
        partition_by=[AgentSession.tenant], order_by=[when, AgentSession.id]
    )
    ranked = (
        AgentSession.select(AgentSession.id, turn.alias("turn"), when.alias("due_at"))
        .join(
            Job,
            on=(Job.session_id == AgentSession.session_id) & (Job.tenant == AgentSession.tenant),
        )
        .where(
            Job.cancelled == False,  # noqa: E712 (peewee expression)
            Job.phase.is_null() | Job.phase.not_in(states.RELEASED_PHASES),
            AgentSession.stopped_reason.is_null(),
            AgentSession.status.is_null() | AgentSession.status.not_in(FINISHED_STATUSES),
            AgentSession.next_poll_at.is_null() | (AgentSession.next_poll_at <= now),
        )
        .alias("ranked")
    )
    query = (
        AgentSession.select()
        .join(ranked, on=(AgentSession.id == ranked.c.id))
        .order_by(ranked.c.turn, ranked.c.due_at, AgentSession.id)
        .limit(config.agent_poll_batch)
    )
    return list(query)


def claim(config: Config, row: AgentSession) -> bool:
    """Take ``row``'s due retrieve for this worker: its ``next_poll_at`` moves a lease's length
    ahead, on the condition that it is still what was read (one worker wins)."""
    until = db.utcnow() + dt.timedelta(seconds=config.agent_lease_seconds)
    unchanged = (
        AgentSession.next_poll_at.is_null()
        if row.next_poll_at is None
        else AgentSession.next_poll_at == row.next_poll_at
    )
    won = (
        AgentSession.update(next_poll_at=until)
        .where(AgentSession.id == row.id, unchanged)
        .execute()
    )
    return won == 1


def seen(config: Config, row: AgentSession, news: bool) -> None:
    """Schedule the next retrieve after a successful one: ``news`` (another status than last
    time, or actions answered) starts the wait again from ``agent_stale_after``; nothing new
    doubles it."""
    streak = 0 if news else row.poll_streak + 1
    wait = delay(config.agent_stale_after, config.agent_poll_max_interval, streak)
    AgentSession.update(
        poll_streak=streak,
        poll_failures=0,
        next_poll_at=db.utcnow() + dt.timedelta(seconds=wait),
    ).where(AgentSession.id == row.id).execute()


def failed(config: Config, row: AgentSession) -> None:
    """Schedule the next retrieve after a failed try (backoff with jitter)."""
    failures = row.poll_failures + 1
    wait = retry_delay(config, failures)
    AgentSession.update(
        poll_failures=failures, next_poll_at=db.utcnow() + dt.timedelta(seconds=wait)
    ).where(AgentSession.id == row.id).execute()


def due_now(row: AgentSession) -> None:
    """Make the session due at the next pass (a webhook said something changed)."""
    AgentSession.update(next_poll_at=None).where(AgentSession.id == row.id).execute()
