"""Crash points for fault tests: the named ones and the counted ones (``GATEWAY_CRASH_POINTS``).

A process may die anywhere; the ledger's rules must hold wherever it does. The words of
``GATEWAY_CRASH_POINTS`` (comma-separated, :attr:`gateway.core.config.Config.crash_points`):

=====================  ===================================================================
word                   the process dies
=====================  ===================================================================
``after_prepared``...  at that named point (:func:`gateway.operations.perform.crash_point`:
                       ``perform``'s four, the agent path's three)
``commit#N``           right after the N-th durable ledger commit (a transaction's
                       ``COMMIT`` or an autocommitted write: :func:`gateway.ledger.db.
                       observe_commits`)
``wp_before#N``        before the N-th WordPress request is sent
``wp_after#N``         after the N-th WordPress answer is read (the REST client's
                       :data:`gateway.wordpress.http_session.CALL_HOOK`: ``requests`` offers
                       no moment between writing a request and reading its answer)
=====================  ===================================================================

N counts from 1 within one **scope**: a gateway request (:func:`install` starts one at each
request, before anything else runs), or a sweep pass or agent-worker step a test starts with
:func:`begin`. Outside a scope nothing is counted.

**Dying.** In ``gateway serve`` the process SIGKILLs itself. A test that calls
:func:`simulate` instead gets :class:`SimulatedCrash` raised (a ``BaseException``: no
``except Exception`` in the request path stops it, and Flask's test client hands it on), and
the process then plays dead: every later ledger statement or WordPress call raises it again,
so no ``finally`` block writes what a killed process never could, until :func:`revive`.

With no counted word and no simulation, nothing is installed: the ledger and the WordPress
client run unwrapped (one falsy check per WordPress call).
"""

from __future__ import annotations

import contextvars
import logging
import os
import signal

from gateway.core.config import Config
from gateway.core.config import ConfigError
from gateway.ledger import db
from gateway.wordpress import http_session

log = logging.getLogger(__name__)

COUNTED = ("commit", "wp_before", "wp_after")


class SimulatedCrash(BaseException):  # noqa: N818 - a crash, not an error anyone handles
    """The process died at a crash point (in-process fault tests only): ``args[0]`` names it,
    e.g. ``"commit#3"``."""


_plan: dict[str, int] = {}  # kind -> N
_simulating = False
_dead = False
_scope: contextvars.ContextVar[dict[str, int] | None] = contextvars.ContextVar(
    "gateway_crash_scope", default=None
)
_last: dict[str, int] = {}


def counted(words: frozenset[str]) -> dict[str, int]:
    """The counted points among ``words``: ``{"commit": 3}`` for ``commit#3``; named words
    (without ``#``) are left to :func:`gateway.operations.perform.crash_point`.

    Raises:
        ConfigError: a counted word of an unknown kind or without a positive count.
    """
    plan = {}
    for word in words:
        if "#" not in word:
            continue
        kind, _, number = word.partition("#")
        if kind not in COUNTED or not number.isdigit() or int(number) < 1:
            raise ConfigError(
                f"GATEWAY_CRASH_POINTS: {word!r} is not a counted point: use one of "
                f"{', '.join(k + '#N' for k in COUNTED)} with N >= 1"
            )
        plan[kind] = int(number)
    return plan


def install(app, config: Config) -> None:
    """Arm the counted points of ``config`` and start a scope at every request of ``app`` (a
    Flask app; called by :func:`gateway.app.create_app` before any route is registered, so
    the scope starts first). Does nothing when ``config`` names no counted point and no test
    :func:`simulate` s.

    Raises:
        ConfigError: as :func:`counted`.
    """
    plan = counted(config.crash_points)
    if not plan and not _simulating:
        return
    if plan:
        _arm(plan)
    app.before_request(_begin_request)


def _begin_request() -> None:
    begin()


def begin() -> None:
    """Start a new scope (one request, sweep pass or worker step): counts from zero."""
    global _last
    _last = dict.fromkeys(COUNTED, 0)
    _scope.set(_last)


def counts() -> dict[str, int]:
    """What the latest scope counted so far: ``{"commit": 5, "wp_before": 2, "wp_after": 2}``."""
    return dict(_last)


def simulate(plan: dict[str, int] | None = None) -> None:
    """Tests: count from now on, and die in-process (:class:`SimulatedCrash`) at ``plan``'s
    points (``{"commit": 3}``; None or empty: only count). The process is alive again."""
    global _simulating, _dead
    _simulating, _dead = True, False
    _arm(dict(plan or {}))


def revive() -> None:
    """Tests: the "restarted" process may use the ledger and WordPress again; no point is
    armed any longer (counting goes on)."""
    global _dead
    _dead = False
    _plan.clear()


def stop() -> None:
    """Tests: uninstall everything (the next :func:`gateway.ledger.db.bind` runs unwrapped)."""
    global _simulating, _dead
    _simulating, _dead = False, False
    _plan.clear()
    db.observe_commits(None)
    http_session.CALL_HOOK = None


def die(point: str) -> None:
    """Die at ``point``: SIGKILL this process, or raise :class:`SimulatedCrash` under
    :func:`simulate` (and play dead until :func:`revive`)."""
    global _dead
    if _simulating:
        log.warning("crash point %s reached: simulated crash", point)
        _dead = True
        raise SimulatedCrash(point)
    log.warning("crash point %s reached: SIGKILL", point)
    os.kill(os.getpid(), signal.SIGKILL)


def _arm(plan: dict[str, int]) -> None:
    _plan.clear()
    _plan.update(plan)
    db.observe_commits(_on_ledger)
    http_session.CALL_HOOK = _on_wordpress


def _on_ledger(event: str) -> None:
    if event == "rollback":  # the transaction's own undo: the database does it for the dead
        return
    if _dead:
        raise SimulatedCrash("dead: ledger statement after the crash")
    if event == "commit":
        _tick("commit")


def _on_wordpress(moment: str, _method: str, _url: str) -> None:
    if _dead:
        raise SimulatedCrash("dead: WordPress call after the crash")
    _tick("wp_" + moment)


def _tick(kind: str) -> None:
    scope = _scope.get()
    if scope is None:
        return
    scope[kind] += 1
    if _plan.get(kind) == scope[kind]:
        die(f"{kind}#{scope[kind]}")
