"""A job's phase moves by its declared rule only (issue 51): forward from the phases before
it under the task version the writer read, backwards only by a new task version or a
confirmed unschedule, decided in SQL, so that a writer holding a stale job never moves it
back.

Real threads against the real ledger (SQLite, or PostgreSQL with
``GATEWAY_TEST_DATABASE_URL``: this module runs in both passes); the races of a request with
its WordPress round trip use the real test WordPress, a racer held at a named step.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from support import TENANT
from support import draft_body
from support import new_job_id
from support import op_key

from gateway.core import states
from gateway.jobs import records
from gateway.ledger import hot_sql
from gateway.ledger import moves
from gateway.ledger.db import database
from gateway.ledger.models import JOB_PHASE
from gateway.ledger.models import Job

PHASES = states.PHASES


def _job(app, phase=None, task_version=1) -> Job:
    with app.app_context(), database.connection_context():
        return Job.create(
            tenant=TENANT, job_id=new_job_id(), site="blog", phase=phase, task_version=task_version
        )


def _stored(app, job: Job) -> Job:
    with app.app_context(), database.connection_context():
        return Job.get_by_id(job.id)


def test_the_phase_moves_forward_and_back_only_by_the_declared_moves():
    backwards = {
        (before, after)
        for before, targets in states.PHASE_MOVES.items()
        for after in targets
        if after is None or (before is not None and PHASES.index(after) <= PHASES.index(before))
    }
    assert backwards == {(p, None) for p in (None, *PHASES)} | {("scheduled", "approval_pending")}
    for index, phase in enumerate(PHASES):  # every later phase, from none and each phase
        assert set(PHASES[index + 1 :]) <= states.PHASE_MOVES[phase]
        assert phase in states.PHASE_MOVES[None]
    assert moves.declaration(Job, "phase") is JOB_PHASE


def test_a_stale_job_never_moves_the_phase_back(app):
    job = _job(app, phase="verified")
    stale = _stored(app, job)
    with app.app_context(), database.connection_context():
        assert records.advance_phase(Job.get_by_id(job.id), "published") is True
        assert records.advance_phase(stale, "approval_pending") is False
        assert stale.phase == "published"  # read again: the caller answers the truth
    assert _stored(app, job).phase == "published"


def test_phase_is_refused_by_the_wrappers_before_any_statement(app):
    job = _job(app, phase="published")
    with app.app_context(), database.connection_context():
        with pytest.raises(moves.IllegalMove):
            records.touch(job, phase="approval_pending")
        with pytest.raises(moves.IllegalMove):
            hot_sql.update_job(job.id, {"phase": "verified"})
        with pytest.raises(moves.IllegalMove):  # an undeclared move, before any SQL
            moves.move(JOB_PHASE, {"id": job.id}, "verified", "published")
    assert _stored(app, job).phase == "published"


def test_an_unschedule_moves_back_only_a_scheduled_job(app):
    scheduled, published = _job(app, phase="scheduled"), _job(app, phase="scheduled")
    stale = _stored(app, published)
    with app.app_context(), database.connection_context():
        assert records.advance_phase(Job.get_by_id(published.id), "published")
        assert records.end_schedule(stale) is False  # published meanwhile: stays published
        assert records.end_schedule(Job.get_by_id(scheduled.id)) is True
    assert _stored(app, published).phase == "published"
    assert _stored(app, scheduled).phase == "approval_pending"


def test_racing_writers_leave_the_latest_phase_they_reached(app):
    """Writers holding the job as read before any of them wrote (no phase) advance it at
    once to different phases: whatever their order, the phase ends at the latest."""
    job = _job(app)
    wanted = ["body_generated", "draft_confirmed", "verified", "published", "approval_pending"]
    barrier = threading.Barrier(len(wanted))

    def advance(phase: str) -> bool:
        context = app.app_context()
        context.push()
        try:
            with database.connection_context():
                held = Job.get_by_id(job.id)
                barrier.wait()
                return records.advance_phase(held, phase)
        finally:
            context.pop()

    with ThreadPoolExecutor(len(wanted)) as pool:
        moved = list(pool.map(advance, wanted))
    assert _stored(app, job).phase == "published"
    assert moved[wanted.index("published")] is True


def test_a_stale_version_never_sets_the_new_versions_phase(offline_gw):
    app = offline_gw.app
    job_id = new_job_id()
    assert offline_gw.put_job(job_id).status_code == 201
    with app.app_context(), database.connection_context():
        held = records.get_job(TENANT, job_id)  # a request of version 1 holds this
    assert offline_gw.put_job(job_id, task_version=2).status_code == 200
    with app.app_context(), database.connection_context():
        assert records.advance_phase(held, "verified", post_id=41) is False
        assert (held.task_version, held.phase, held.post_id) == (2, None, 41)
        stored = records.get_job(TENANT, job_id)
    assert (stored.task_version, stored.phase, stored.post_id) == (2, None, 41)


# --------------------------------------------------------------------------- WordPress


def post(gw, path: str, body=None, token=None):
    return gw.app.test_client().post(path, json=body or {}, headers=gw.headers(token))


class Held:
    """Holds the call ``module.name`` in the thread :func:`race` starts until :meth:`go`
    (``before``: hold before the call, else after it), so a racer stops at a named step
    while the test makes the other request."""

    def __init__(self, monkeypatch, module, name: str, before: bool = False):
        self.there, self.released = threading.Event(), threading.Event()
        real = getattr(module, name)

        def held(*args, **kwargs):
            if not threading.current_thread().name.startswith("racer"):
                return real(*args, **kwargs)
            if before:
                self._wait()
                return real(*args, **kwargs)
            result = real(*args, **kwargs)
            self._wait()
            return result

        monkeypatch.setattr(module, name, held)

    def _wait(self) -> None:
        self.there.set()
        assert self.released.wait(120)

    def go(self) -> None:
        self.released.set()


def race(call, held: Held):
    """Start ``call`` in a thread of its own (``racer_0``), wait until it is held; returns
    its future."""
    pool = ThreadPoolExecutor(1, thread_name_prefix="racer")
    future = pool.submit(call)
    pool.shutdown(wait=False)
    assert held.there.wait(120), future.exception(0) if future.done() else "not held"
    return future


@pytest.mark.wordpress
def test_an_approval_request_racing_a_publish_leaves_it_published(gw, monkeypatch):
    """An approval request that read the job (``verified``) and the live post before an
    approval and a publish went through finishes after them: the job stays ``published``
    and its answer says so."""
    from test_editorial import approve
    from test_editorial import make_draft
    from test_editorial import publish

    from gateway.actions import drafts

    job_id, editor = new_job_id(), gw.make_token("editor")
    post_id = make_draft(gw, job_id)
    assert gw.job(job_id).get_json()["phase"] == "verified"
    held = Held(monkeypatch, drafts, "verify_job")  # after its WordPress read
    stale = race(lambda: post(gw, f"/v1/jobs/{job_id}/approval-requests"), held)
    assert post(gw, f"/v1/jobs/{job_id}/approval-requests").status_code == 201
    assert approve(gw, job_id, editor).status_code == 201
    assert publish(gw, job_id).status_code == 201
    assert gw.job(job_id).get_json()["phase"] == "published"
    held.go()
    answer = stale.result(120)
    assert answer.status_code == 200, answer.get_json()
    assert answer.get_json()["phase"] == "published"
    assert gw.job(job_id).get_json()["phase"] == "published"
    assert gw.wp_post(post_id)["status"] == "publish"


@pytest.mark.wordpress
def test_a_rerun_draft_racing_a_version_bump(gw, monkeypatch):
    """An n8n re-run's draft of version 1, confirmed in WordPress while ``PUT /v1/jobs``
    moves the job to version 2, finishes after the bump: it records its post on the job but
    never the new version's phase (the job is still drafting: version 2's content was never
    written); version 2's draft then updates the same post, the one object in WordPress."""
    from gateway.actions import drafts

    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    held = Held(monkeypatch, drafts, "settle", before=True)  # written and CONFIRMED
    first = race(
        lambda: gw.app.test_client().put(
            f"/v1/jobs/{job_id}/draft", json=draft_body(), headers=gw.headers()
        ),
        held,
    )
    assert gw.put_job(job_id, task_version=2).status_code == 200
    held.go()
    answer = first.result(120)
    assert answer.status_code == 201, answer.get_json()
    post_id = answer.get_json()["post_id"]
    job = gw.job(job_id).get_json()
    assert (job["task_version"], job["phase"], job["post_id"]) == (2, None, post_id)
    assert job["status"] == "in_progress"
    assert "create_draft" in gw.recover(job_id).get_json()["next_allowed_actions"]
    second = gw.put_draft(job_id, draft_body(title="Version two"))
    assert second.status_code == 201, second.get_json()
    assert second.get_json()["post_id"] == post_id
    assert gw.job(job_id).get_json()["phase"] == "verified"
    keys = [op_key(job_id, "draft"), op_key(job_id, "draft", version=2)]
    assert gw.count_objects(keys, "post") == 1
    assert gw.wp_post(post_id)["title"]["raw"] == "Version two"
