"""Editors deciding one review item at once (issue 51): the decision is claimed (``open`` ->
``deciding``, one conditional UPDATE) before any write it causes, so one decision applies,
every other decider gets 409 ``review-decided`` naming it, and WordPress sees one write.

Real threads against the real ledger (SQLite, or PostgreSQL with
``GATEWAY_TEST_DATABASE_URL``: this module runs in both passes) and, where the decision
writes, the real test WordPress behind the fault proxy, which counts the writes.
"""

from __future__ import annotations

import datetime as dt
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from support import Gateway
from support import draft_body
from support import hide_companion
from support import new_job_id
from support import problem_slug

from gateway.core import exceptions as exc
from gateway.core import states
from gateway.editorial import reviews
from gateway.ledger.db import database
from gateway.ledger.models import Job
from gateway.ledger.models import Review
from gateway.recovery import reconciliation
from gateway.tenancy import sites
from gateway_tools.fault_proxy import Fault
from gateway_tools.openai_standin import OpenAIStandIn

POSTS = r"^/wp-json/wp/v2/posts/?$"
RACERS = 4


def _ledger(app):
    """Enter the app's context and a ledger connection (a thread of its own needs both)."""
    context = app.app_context()
    context.push()
    database.connect(reuse_if_open=True)
    return context


def _leave(context) -> None:
    database.close()
    context.pop()


def _review(app, kind="suspected_duplicate", detail=None, **fields) -> int:
    with app.app_context(), database.connection_context():
        fields.setdefault("job_id", new_job_id())
        fields.setdefault("operation_key", f"acme/{new_job_id()}/v1/draft")
        return Review.create(
            tenant="acme", kind=kind, detail=detail or {"suspects": [{"id": 7}]}, **fields
        ).id


def _one_applied(answers) -> dict:
    """The body of the one decision applied among racing ``answers``: every other racer got
    409 ``review-decided`` naming it, or, arriving once it was applied with the same
    decision, its answer again (200, ``Idempotent-Replayed: true``)."""
    applied = [a for a in answers if a.status_code == 200 and not _replayed(a)]
    assert len(applied) == 1, [(a.status_code, a.get_json()) for a in answers]
    winner = applied[0].get_json()
    for other in (a for a in answers if a is not applied[0]):
        if other.status_code == 200:
            assert _replayed(other) and other.get_json()["review"] == winner["review"]
        else:
            assert other.status_code == 409 and problem_slug(other) == "review-decided"
            assert other.get_json()["resolved_by"] == winner["review"]["resolved_by"]
    return winner


def _replayed(answer) -> bool:
    return answer.headers.get("Idempotent-Replayed") == "true"


def _claim_in_thread(app, review_id: int, editor: str, barrier: threading.Barrier):
    context = _ledger(app)
    try:
        review = reviews.get_open("acme", review_id)
        barrier.wait()
        try:
            return reviews.claim(review, "distinct", None, editor, window=60).resolved_by
        except exc.ReviewDecided as decided:
            return decided.extensions
    finally:
        _leave(context)


def test_one_of_several_racing_claims_wins_and_the_others_name_it(app):
    review_id = _review(app)
    barrier = threading.Barrier(RACERS)
    with ThreadPoolExecutor(RACERS) as pool:
        editors = [f"editor-{n}" for n in range(RACERS)]
        answers = list(pool.map(lambda e: _claim_in_thread(app, review_id, e, barrier), editors))
    winners = [a for a in answers if isinstance(a, str)]
    assert len(winners) == 1, answers
    for lost in (a for a in answers if not isinstance(a, str)):
        assert lost["resolved_by"] == winners[0] and lost["decision"] == "distinct"
        assert lost["review_status"] == states.REVIEW_DECIDING
    with app.app_context(), database.connection_context():
        stored = Review.get_by_id(review_id)
        assert (stored.status, stored.resolved_by) == (states.REVIEW_DECIDING, winners[0])
        closed = reviews.close(stored)
        assert closed.status == states.REVIEW_RESOLVED
        with pytest.raises(exc.ReviewDecided):  # resolved: never claimed again
            reviews.get_open("acme", review_id)


def test_a_released_claim_is_open_again_and_a_stale_one_is_taken_over(app):
    review_id = _review(app)
    with app.app_context(), database.connection_context():
        claimed = reviews.claim(reviews.get_open("acme", review_id), "distinct", None, "a", 60)
        with pytest.raises(exc.ReviewDecided):  # a fresh claim is not taken over
            reviews.claim(reviews.get_open("acme", review_id), "distinct", None, "b", 60)
        assert reviews.release(claimed) is True
        assert Review.get_by_id(review_id).status == states.REVIEW_OPEN
        # a claim left by a process that died: older than the window by the database's clock
        claimed = reviews.claim(reviews.get_open("acme", review_id), "distinct", None, "a", 60)
        hour_ago = claimed.resolved_at - dt.timedelta(hours=1)
        reviews.moves.move(
            reviews.REVIEW_STATUS,
            {"id": review_id},
            states.REVIEW_DECIDING,
            states.REVIEW_DECIDING,
            resolved_at=hour_ago,
        )
        taken = reviews.claim(reviews.get_open("acme", review_id), "distinct", None, "b", 60)
        assert taken.resolved_by == "b"
        with pytest.raises(exc.ReviewDecided):  # the dead claim can no longer close it
            reviews.close(claimed)
        assert reviews.close(taken).resolved_by == "b"


def test_two_editors_dismissing_an_agent_action_one_wins(app, client):
    """The agents' decider (``agent_action``, here an environment reconnection, which
    answers nothing at OpenAI) is claimed the same way."""
    from gateway.tenancy import tokens

    with app.app_context(), database.connection_context():
        job = Job.create(tenant="acme", job_id=new_job_id(), site="blog")
        review_id = Review.create(
            tenant="acme",
            job_id=job.job_id,
            operation_key=f"acme/{job.job_id}/v1/environment_connection/env-1",
            kind="agent_action",
            detail={
                "session_id": "sess-1",
                "action": {"type": "environment_connection", "environment_id": "env-1"},
                "decisions": ["dismiss"],
            },
        ).id
        names = [tokens.create_token("acme", "editor", f"editor-{n}") for n in range(RACERS)]
    barrier = threading.Barrier(RACERS)

    def decide(token: str):
        barrier.wait()
        return app.test_client().post(
            f"/v1/reviews/{review_id}/resolve",
            json={"decision": "dismiss", "reason": "not ours"},
            headers={"Authorization": f"Bearer {token}"},
        )

    with ThreadPoolExecutor(RACERS) as pool:
        answers = list(pool.map(decide, names))
    winner = _one_applied(answers)["review"]
    for lost in (a for a in answers if a.status_code == 409):
        assert lost.get_json()["decision"] == "dismiss"
    assert winner["status"] == states.REVIEW_RESOLVED
    assert winner["detail"]["reason"] == "not ours"


@pytest.fixture
def agent_gw(ledger_url, wp_site):
    """The gateway on the test WordPress (the worker checks the site's credentials before
    it answers a session), its OpenAI client pointed at a stand-in:
    ``(Gateway, OpenAIStandIn)``."""
    from agent_support import agent_app

    with OpenAIStandIn() as standin:
        application = agent_app(ledger_url, standin)
        yield Gateway(application, application.test_client(), wp_site), standin
        if not database.is_closed():
            database.close()


@pytest.mark.wordpress
def test_editors_racing_an_agents_approval_answer_it_once(agent_gw):
    """The agents' decider writes to OpenAI (the ``*_result`` event): of the editors
    approving one MCP approval request at once, one answers it, once."""
    from agent_support import bind
    from agent_support import run_worker

    from gateway.agents import tools

    gw, standin = agent_gw
    job_id, sid = new_job_id(), standin.create_session(tools=tools.definitions())
    assert bind(gw, job_id, sid).status_code == 201
    standin.require(sid, OpenAIStandIn.mcp_approval())
    run_worker(gw.app)
    editors = [gw.make_token("editor") for _ in range(RACERS)]
    [item] = gw.client.get("/v1/reviews", headers=gw.headers(editors[0])).get_json()["reviews"]
    barrier = threading.Barrier(RACERS)

    def decide(token: str):
        barrier.wait()
        return gw.app.test_client().post(
            f"/v1/reviews/{item['review_id']}/resolve",
            json={"decision": "approve"},
            headers=gw.headers(token),
        )

    with ThreadPoolExecutor(RACERS) as pool:
        answers = list(pool.map(decide, editors))
    _one_applied(answers)
    for lost in (a for a in answers if a.status_code == 409):
        assert lost.get_json()["decision"] == "approve"
    kind = "agent.session.input.mcp_approval_request_result"
    assert len(standin.events(sid, kind)) == 1


# --------------------------------------------------------------------------- WordPress


@pytest.fixture
def suspected(gwp, proxy):
    """A suspected duplicate (a keyless post of the same title by the gateway's author
    appeared after the draft was sent), then the companion plugin visible again, so that
    ``same_as`` writes the operation key onto the suspect: the one WordPress write a
    decision makes. Yields ``(review_id, suspect_id, editor tokens)``."""
    sites.forget_companion()
    hide_companion(proxy)
    job_id = new_job_id()
    body = draft_body(title=f"Race {job_id}")
    assert gwp.put_job(job_id).status_code == 201
    proxy.add_fault(Fault(kind="status_without_forward", status=500, method="POST", path=POSTS))
    assert gwp.put_draft(job_id, body).status_code == 503
    author = gwp.site["users"]["author"]
    made = requests.post(
        gwp.wp_url + "/wp-json/wp/v2/posts",
        timeout=30,
        auth=(author["username"], author["app_password"]),
        json={"title": body["title"], "status": "draft"},
    )
    assert made.status_code == 201
    time.sleep(3.2)  # absence is provable only after the in-flight window (test_recovery)
    assert problem_slug(gwp.put_draft(job_id, body)) == "needs-review"
    editors = [gwp.make_token("editor") for _ in range(RACERS)]
    listed = gwp.client.get("/v1/reviews", headers=gwp.headers(editors[0])).get_json()
    review = next(r for r in listed["reviews"] if r["job_id"] == job_id)
    proxy.clear_faults()
    sites.forget_companion()
    proxy.reset_log()
    yield review["review_id"], made.json()["id"], editors
    sites.forget_companion()


def _same_as(gwp, review_id: int, post_id: int, token: str):
    return gwp.app.test_client().post(
        f"/v1/reviews/{review_id}/resolve",
        json={"decision": "same_as", "post_id": post_id},
        headers=gwp.headers(token),
    )


def _key_writes(proxy, post_id: int) -> int:
    return proxy.count(method="POST", path=rf"^/wp-json/wp/v2/posts/{post_id}/?$", forwarded=True)


@pytest.mark.wordpress
def test_editors_racing_same_as_make_one_wordpress_write(gwp, proxy, suspected):
    review_id, suspect, editors = suspected
    barrier = threading.Barrier(RACERS)

    def decide(token: str):
        barrier.wait()
        return _same_as(gwp, review_id, suspect, token)

    with ThreadPoolExecutor(RACERS) as pool:
        answers = list(pool.map(decide, editors))
    winner = _one_applied(answers)
    assert winner["operation"]["state"] == "CONFIRMED"
    assert winner["operation"]["remote_id"] == suspect
    for lost in (a for a in answers if a.status_code == 409):
        assert (lost.get_json()["decision"], lost.get_json()["post_id"]) == ("same_as", suspect)
    assert _key_writes(proxy, suspect) == 1
    again = _same_as(gwp, review_id, suspect, editors[-1])  # a retry whose answer was lost
    assert again.status_code == 200 and _replayed(again), again.get_json()
    replayed = again.get_json()["operation"]
    assert (replayed["state"], replayed["remote_id"]) == ("CONFIRMED", suspect)
    assert _key_writes(proxy, suspect) == 1  # nothing written again
    assert gwp.lookup(winner["operation"]["operation_key"])[0]["id"] == suspect


@pytest.mark.wordpress
def test_the_decision_is_claimed_before_its_wordpress_write(gwp, proxy, suspected, monkeypatch):
    """The first editor is held inside the adoption, before it writes to WordPress: the
    second already gets 409 naming the first's decision, and nothing was written yet."""
    review_id, suspect, editors = suspected
    adopting, go = threading.Event(), threading.Event()
    adopt = reconciliation.adopt

    def held_adopt(*args, **kwargs):
        adopting.set()
        assert go.wait(60)
        return adopt(*args, **kwargs)

    monkeypatch.setattr(reconciliation, "adopt", held_adopt)
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(_same_as, gwp, review_id, suspect, editors[0])
        assert adopting.wait(60)
        second = _same_as(gwp, review_id, suspect, editors[1])
        assert second.status_code == 409 and problem_slug(second) == "review-decided"
        assert second.get_json()["review_status"] == states.REVIEW_DECIDING
        assert second.get_json()["resolved_by"] == "test-editor"
        assert _key_writes(proxy, suspect) == 0
        go.set()
        assert first.result().status_code == 200, first.result().get_json()
    assert _key_writes(proxy, suspect) == 1


@pytest.mark.wordpress
def test_a_decision_whose_write_fails_gives_the_item_back(gwp, proxy, suspected):
    review_id, suspect, editors = suspected
    proxy.add_fault(
        Fault(
            kind="status_without_forward",
            status=503,
            method="GET",
            path=rf"^/wp-json/wp/v2/posts/{suspect}/?$",
            times=None,
        )
    )
    failed = _same_as(gwp, review_id, suspect, editors[0])
    assert failed.status_code == 503, failed.get_json()
    listed = gwp.client.get("/v1/reviews", headers=gwp.headers(editors[0])).get_json()
    item = next(r for r in listed["reviews"] if r["review_id"] == review_id)
    assert (item["status"], item["decision"]) == (states.REVIEW_OPEN, None)
    proxy.clear_faults()
    decided = _same_as(gwp, review_id, suspect, editors[1])
    assert decided.status_code == 200, decided.get_json()
    assert decided.get_json()["review"]["resolved_by"] == "test-editor-2"
    assert _key_writes(proxy, suspect) == 1


# --------------------------------------------------------------------------- the same again


def _operation_review(app, job_id: str, title: str | None = None) -> int:
    """A suspected duplicate of job ``job_id``'s draft (suspect: post 7), its operation
    UNKNOWN (``title``: the one its workflow sent): ``distinct`` decides it without a
    WordPress call."""
    from gateway.ledger.models import Operation

    key = f"acme/{job_id}/v1/draft"
    with app.app_context(), database.connection_context():
        Operation.create(
            operation_key=key,
            tenant="acme",
            job_id=job_id,
            task_version=1,
            action="draft",
            request_hash="0" * 64,
            intent={"sent": {"title": title}} if title else None,
        )
    return _review(app, job_id=job_id, operation_key=key)


def test_the_decision_that_stands_sent_again_is_its_answer_again(offline_gw):
    """An n8n retry of a decision whose answer was lost, or a second editor agreeing:
    200 with the stored answer and ``Idempotent-Replayed: true``; another decision is
    still 409 ``review-decided`` naming the one that stands."""
    review_id = _operation_review(offline_gw.app, new_job_id())
    first, second = offline_gw.make_token("editor"), offline_gw.make_token("editor")
    path = f"/v1/reviews/{review_id}/resolve"
    decided = offline_gw.client.post(
        path, json={"decision": "distinct"}, headers=offline_gw.headers(first)
    )
    assert decided.status_code == 200 and not _replayed(decided), decided.get_json()
    for token in (first, second):
        again = offline_gw.client.post(
            path, json={"decision": "distinct"}, headers=offline_gw.headers(token)
        )
        assert again.status_code == 200 and _replayed(again), again.get_json()
        assert again.get_json() == decided.get_json()
    other = offline_gw.client.post(
        path, json={"decision": "same_as", "post_id": 7}, headers=offline_gw.headers(second)
    )
    assert other.status_code == 409 and problem_slug(other) == "review-decided"
    problem = other.get_json()
    assert (problem["decision"], problem["review_status"]) == ("distinct", "resolved")
    assert problem["resolved_by"] == decided.get_json()["review"]["resolved_by"]


def test_a_decision_being_applied_is_no_replay_yet(app):
    """The same decision while the first is still being applied (``deciding``) may yet
    fail and be given back: 409, not its answer."""
    from gateway.core.config import Config
    from gateway.editorial import resolution

    review_id = _operation_review(app, new_job_id())
    with app.app_context(), database.connection_context():
        reviews.claim(reviews.get_open("acme", review_id), "distinct", None, "ed1", 60)
        with pytest.raises(exc.ReviewDecided) as raised:
            resolution.resolve_review(Config(), "acme", review_id, "distinct", None, "ed1")
        assert raised.value.extensions["review_status"] == states.REVIEW_DECIDING


def _page_session(gw, token: str):
    from test_review_page import _csrf
    from test_review_page import _sign_in

    client = gw.app.test_client()
    assert _sign_in(client, token).status_code == 303
    return client, _csrf(client.get("/review"))


def test_the_page_shows_a_claim_and_words_the_decision_that_stands(offline_gw):
    """The review page says an item is being decided (by whom, since when) instead of
    offering its buttons, and words a decision, a losing or a repeated one with its own
    labels, by the job and title the card shows (never the item's id, which it does not)."""
    job_id = new_job_id()
    job = f"job {job_id} “Fish and chips”"
    review_id = _operation_review(offline_gw.app, job_id, "Fish and chips")
    client, csrf = _page_session(offline_gw, offline_gw.make_token("editor"))
    with offline_gw.app.app_context(), database.connection_context():
        claimed = reviews.claim(reviews.get_open("acme", review_id), "same_as", 7, "ed1", 60)
    page = client.get("/review").get_data(as_text=True)
    item = page[page.index(f'id="review-{review_id}"') :]
    assert "“Same as post #7”, being decided by ed1 since" in item
    assert 'class="same-as"' not in item and 'class="secondary distinct"' not in item

    form = {"decision": "distinct", "csrf_token": csrf}
    path = f"/review/reviews/{review_id}/resolve"
    lost = client.post(path, data=form, follow_redirects=True).get_data(as_text=True)
    stands = "was not changed: “Same as post #7”, being decided by ed1 since"
    assert f"J{job[1:]} {stands}" in lost, lost
    assert "same_as" not in lost and "deciding" not in lost  # no internal words

    with offline_gw.app.app_context(), database.connection_context():
        reviews.release(claimed)
    decided = client.post(path, data=form, follow_redirects=True).get_data(as_text=True)
    goes_on = f"Distinct: {job} goes on — its draft is written when its workflow sends it again"
    assert _flashed(decided) == [f"{goes_on}."]  # no item number, no operation state
    again = client.post(path, data=form, follow_redirects=True).get_data(as_text=True)
    assert _flashed(again) == [f"{goes_on} (already decided so: nothing written)."]
    other = {"decision": "same_as", "post_id": "7", "csrf_token": csrf}
    lost = client.post(path, data=other, follow_redirects=True).get_data(as_text=True)
    assert f"J{job[1:]} was not changed: “Distinct”, decided by test-editor on" in lost, lost


def _flashed(page: str) -> list[str]:
    """The flash messages of a review page's HTML, as the editor reads them."""
    import html

    found = re.findall(r'<div class="flash [a-z]+" role="status">([^<]*)</div>', page)
    return [html.unescape(text) for text in found]


def _request_changes_in_thread(app, job_row: int, editor: str, barrier: threading.Barrier):
    from gateway.editorial import decisions

    context = _ledger(app)
    try:
        job = Job.get_by_id(job_row)
        barrier.wait()
        try:
            body = {"task_version": 1, "note": f"from {editor}"}
            return decisions.request_changes(job, body, editor)["decided_by"]
        except exc.DecisionStands as stands:
            return stands.extensions
    finally:
        _leave(context)


def test_editors_sending_one_draft_back_at_once_one_wins_and_the_others_are_told(app):
    """Issue 56: a decision on a job's version (``job.decision``) moves by one conditional
    UPDATE, as a review item's claim does: of several editors deciding at once one wins, the
    others get 409 ``decision-stands`` naming it, and the timeline holds one decision."""
    from gateway.jobs import timeline

    with app.app_context(), database.connection_context():
        job = Job.create(
            tenant="acme", job_id=new_job_id(), site="blog", phase=states.APPROVAL_PENDING
        )
    barrier = threading.Barrier(RACERS)
    with ThreadPoolExecutor(RACERS) as pool:
        editors = [f"editor-{n}" for n in range(RACERS)]
        answers = list(
            pool.map(lambda e: _request_changes_in_thread(app, job.id, e, barrier), editors)
        )
    winners = [a for a in answers if isinstance(a, str)]
    assert len(winners) == 1, answers
    for lost in (a for a in answers if not isinstance(a, str)):
        assert lost["decision"]["decided_by"] == winners[0]
        assert lost["decision"]["decision"] == states.CHANGES_REQUESTED
    with app.app_context(), database.connection_context():
        stored = Job.get_by_id(job.id)
        assert stored.decision == states.CHANGES_REQUESTED
        assert [(n["actor"], n["note"]) for n in timeline.notes(stored)] == [
            (winners[0], f"from {winners[0]}")
        ]
