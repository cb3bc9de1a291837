"""The counted crash points' configuration and hooks (:mod:`gateway.operations.crashes`), on a
real ledger without WordPress: what counts as a commit, what a dead process may still do, and
that production runs unwrapped. The walk over every write path is tests/test_crash_walk.py."""

from __future__ import annotations

import pytest
from support import SECRET_KEY

import gateway
from gateway.core.config import ConfigError
from gateway.ledger import db
from gateway.ledger.db import database
from gateway.ledger.models import Job
from gateway.operations import crashes
from gateway.operations.crashes import SimulatedCrash
from gateway.wordpress import http_session

pytestmark = pytest.mark.sqlite_pass  # the counting wraps peewee, not a dialect


@pytest.fixture
def simulated():
    crashes.simulate()
    yield
    crashes.stop()


def _app(ledger_url, **overrides):
    return gateway.create_app({"database_url": ledger_url, "secret_key": SECRET_KEY, **overrides})


def test_without_counted_points_nothing_is_installed(ledger_url):
    app = _app(ledger_url, crash_points=frozenset({"after_sent"}))
    assert http_session.CALL_HOOK is None
    assert "execute_sql" not in vars(database.obj) and "commit" not in vars(database.obj)
    assert all(f.__module__ != crashes.__name__ for f in app.before_request_funcs[None])
    database.close()


def test_a_counted_point_starts_its_count_before_any_other_request_hook(ledger_url):
    app = _app(ledger_url, crash_points=frozenset({"commit#99"}))
    try:
        assert app.before_request_funcs[None][0].__module__ == crashes.__name__
        assert http_session.CALL_HOOK is not None and "commit" in vars(database.obj)
    finally:
        crashes.stop()
        database.close()


def test_counted_words_are_checked():
    assert crashes.counted(frozenset({"commit#3", "wp_after#2", "after_sent"})) == {
        "commit": 3,
        "wp_after": 2,
    }
    for word in ("commit#0", "commit#x", "flush#1", "wp_sent#1"):
        with pytest.raises(ConfigError, match="not a counted point"):
            crashes.counted(frozenset({word}))


def test_commits_are_transactions_and_autocommitted_writes(ledger_url, simulated):
    _app(ledger_url)
    with database.connection_context():
        crashes.begin()
        Job.select().count()  # a read commits nothing
        Job.create(tenant="t", job_id="j1", site="blog")  # autocommit: 1
        with db.atomic():  # one transaction, however many writes and savepoints: 2
            Job.create(tenant="t", job_id="j2", site="blog")
            with database.atomic():
                Job.update(task_version=2).where(Job.job_id == "j2").execute()
        assert crashes.counts() == {"commit": 2, "wp_before": 0, "wp_after": 0}


def test_a_crash_after_a_commit_keeps_it_and_the_dead_process_writes_nothing(ledger_url, simulated):
    _app(ledger_url)
    crashes.simulate({"commit": 2})
    with database.connection_context():
        crashes.begin()
        Job.create(tenant="t", job_id="j1", site="blog")
        with pytest.raises(SimulatedCrash, match="commit#2"), db.atomic():
            Job.create(tenant="t", job_id="j2", site="blog")
        with pytest.raises(SimulatedCrash, match="dead"):
            Job.create(tenant="t", job_id="j3", site="blog")
        with pytest.raises(SimulatedCrash, match="dead"), db.atomic():
            pass  # not even a COMMIT of an empty transaction
    db.close_all()
    crashes.revive()
    with database.connection_context():
        assert sorted(j.job_id for j in Job.select()) == ["j1", "j2"]


def test_outside_a_scope_nothing_is_counted_or_killed(ledger_url, simulated):
    _app(ledger_url)
    crashes.simulate({"commit": 1})
    with database.connection_context():
        crashes._scope.set(None)  # a thread no request, pass or step started
        Job.create(tenant="t", job_id="j1", site="blog")
        assert Job.select().count() == 1
