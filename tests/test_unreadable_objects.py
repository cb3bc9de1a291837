"""A lookup hit the gateway's WordPress user cannot read (issue 55, companion plugin 1.4.0's
``readable: false``): a draft's answer is lost (fault proxy), then WordPress holds the post
under another author. Reconciliation must neither send it again (a second post) nor adopt an
object it cannot read back; the operation goes to an editor as ``unreadable_object``.

The three paths: one unreadable hit (the client repeats its request); an unreadable and a
readable hit under one key (``POST /recover``); a post reassigned to another author (the sweep,
then the editor's ``same_as``, refused until the site's user can read the post again).
"""

from __future__ import annotations

import re

import pytest
from support import Gateway
from support import draft_body
from support import mysql_query
from support import new_job_id
from support import op_key
from support import problem_slug

from gateway.ledger.db import database
from gateway.recovery import reconciliation
from gateway_tools.fault_proxy import Fault

pytestmark = [pytest.mark.wordpress, pytest.mark.sqlite_pass]
POST_CREATE = r"^/wp-json/wp/v2/posts/?$"
KEY_LOOKUP = r"^/wp-json/publishing-gateway/v1/objects"


def _lost_draft(gwp: Gateway, proxy) -> tuple[str, dict, int]:
    """A draft WordPress stored while its answer and the immediate lookup were lost: the row
    UNKNOWN. Returns ``(job_id, request body, post id)``."""
    job_id, body = new_job_id(), draft_body(title=f"Unreadable {new_job_id()}")
    assert gwp.put_job(job_id).status_code == 201
    proxy.add_fault(Fault(kind="drop_response", method="POST", path=POST_CREATE))
    proxy.add_fault(Fault(kind="status_without_forward", status=503, method="GET", path=KEY_LOOKUP))
    lost = gwp.put_draft(job_id, body)
    assert lost.status_code == 503 and problem_slug(lost) == "outcome-unknown", lost.get_json()
    [post] = gwp.lookup(op_key(job_id, "draft"))
    return job_id, body, post["id"]


def _give_to(gwp: Gateway, post_id: int, role: str) -> None:
    """The admin makes the site's user ``role`` the post's author (as an editor might)."""
    gwp.wp_update_post(post_id, {"author": gwp.site["users"][role]["id"]})


def _creates(proxy) -> int:
    return proxy.count(method="POST", path=POST_CREATE, forwarded=True)


def _draft_row(gwp: Gateway, job_id: str) -> dict:
    [row] = [r for r in gwp.operations(job_id) if r["action"] == "draft"]
    return row


def _review(gwp: Gateway, job_id: str) -> dict:
    [review] = gwp.job(job_id).get_json()["reviews"]
    assert review["kind"] == "unreadable_object"
    return review


def test_one_unreadable_hit_is_neither_sent_again_nor_adopted(gwp, proxy):
    job_id, body, post_id = _lost_draft(gwp, proxy)
    _give_to(gwp, post_id, "editor")
    for _ in range(2):  # n8n repeats the request: the same answer, one review item
        again = gwp.put_draft(job_id, body)
        assert again.status_code == 409 and problem_slug(again) == "needs-review"
        assert "cannot read back" in again.get_json()["detail"]
    assert _creates(proxy) == 1 and gwp.count_objects(op_key(job_id, "draft")) == 1
    row = _draft_row(gwp, job_id)
    assert row["state"] == "UNKNOWN" and row["remote_id"] is None
    [hit] = _review(gwp, job_id)["detail"]["objects"]
    assert hit == {
        "operation_key": op_key(job_id, "draft"),
        "id": post_id,
        "type": "post",
        "readable": False,
    }
    page = _review_page(gwp)  # what the editor reads: the reason, the post to open
    assert f"post {post_id} carrying this operation key" in page and "cannot read back" in page
    assert f"Same as #{post_id}" in page


def _review_page(gwp: Gateway) -> str:
    """The review page as an editor signed in with a token sees it."""
    login = gwp.client.get("/review/login").get_data(as_text=True)
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', login).group(1)
    form = {"token": gwp.make_token("editor"), "csrf_token": csrf}
    assert gwp.client.post("/review/login", data=form).status_code == 303
    return gwp.client.get("/review").get_data(as_text=True)


def test_an_unreadable_and_a_readable_hit_go_to_an_editor(gwp, proxy, wp_site):
    job_id, _body, post_id = _lost_draft(gwp, proxy)
    other = gwp.wp.post(
        f"{gwp.wp_url}/wp-json/wp/v2/posts",
        json={"title": "Editor's copy", "author": wp_site["users"]["editor"]["id"]},
        timeout=30,
    )
    assert other.status_code == 201, other.text
    other_id = other.json()["id"]
    key = op_key(job_id, "draft")
    # a copy carrying the key, as a "duplicate post" plugin copying every meta would make
    mysql_query(
        wp_site,
        "INSERT INTO wp_postmeta (post_id, meta_key, meta_value) "
        f"VALUES ({other_id}, '_gateway_operation_key', '{key}')",
    )
    report = gwp.recover(job_id).get_json()
    assert report["completed"] == [] and report["next_allowed_actions"] == ["editor_review"]
    assert [e["operation_key"] for e in report["needs_review"]] == [key]
    review = _review(gwp, job_id)
    assert {o["id"]: o["readable"] for o in review["detail"]["objects"]} == {
        post_id: True,
        other_id: False,
    }
    assert f"post {other_id}" in review["detail"]["reason"]
    assert _draft_row(gwp, job_id)["state"] == "UNKNOWN"
    assert _creates(proxy) == 1 and gwp.count_objects(key) == 2


def _same_as(gwp: Gateway, review_id: int, post_id: int, editor: str):
    return gwp.client.post(
        f"/v1/reviews/{review_id}/resolve",
        json={"decision": "same_as", "post_id": post_id},
        headers=gwp.headers(editor),
    )


def test_a_post_reassigned_to_another_author_waits_for_an_editor(gwp, proxy):
    job_id, _body, post_id = _lost_draft(gwp, proxy)
    _give_to(gwp, post_id, "editor")
    with gwp.app.app_context(), database.connection_context():
        counts = reconciliation.sweep(gwp.app.config["GATEWAY"], older_than=0)
    assert counts["needs_review"] == 1 and counts["confirmed"] == counts["absent"] == 0, counts
    review, editor = _review(gwp, job_id), gwp.make_token("editor")
    refused = _same_as(gwp, review["review_id"], post_id, editor)
    assert refused.status_code == 502, refused.get_json()
    assert "cannot read object" in refused.get_json()["detail"]
    assert _review(gwp, job_id)["review_id"] == review["review_id"]  # still open
    assert _draft_row(gwp, job_id)["state"] == "UNKNOWN"
    _give_to(gwp, post_id, "author")  # the site's user may read it again
    adopted = _same_as(gwp, review["review_id"], post_id, editor)
    assert adopted.status_code == 200, adopted.get_json()
    row = _draft_row(gwp, job_id)
    assert row["state"] == "CONFIRMED" and row["remote_id"] == post_id
    assert _creates(proxy) == 1 and gwp.count_objects(op_key(job_id, "draft")) == 1


def test_a_key_squatted_by_a_post_out_of_reach_opens_the_review_at_once(gwp, proxy, wp_site):
    """The issue-55 try-out's squat.py: operation keys are guessable, and another user's draft
    carries a job's next key before the gateway writes it. The guard refuses the create (409
    naming that post), which the site's user cannot read: the first answer is already 409
    needs-review (not 503 outcome-unknown), and nothing is sent again."""
    job_id = new_job_id()
    key = op_key(job_id, "draft")
    assert gwp.put_job(job_id).status_code == 201
    squat = gwp.wp.post(
        f"{gwp.wp_url}/wp-json/wp/v2/posts",
        json={
            "title": "Squat",
            "author": wp_site["users"]["editor"]["id"],
            "meta": {"_gateway_operation_key": key},
        },
        timeout=30,
    )
    assert squat.status_code == 201, squat.text
    assert gwp.count_objects(key) == 1
    for _ in range(2):
        answer = gwp.put_draft(job_id, draft_body())
        assert answer.status_code == 409 and problem_slug(answer) == "needs-review", answer.json
        assert "cannot read back" in answer.get_json()["detail"]
    assert _creates(proxy) == 1 and gwp.count_objects(key) == 1  # the one create refused
    row = _draft_row(gwp, job_id)
    assert row["state"] == "UNKNOWN" and row["remote_id"] is None
    [hit] = _review(gwp, job_id)["detail"]["objects"]
    assert hit["id"] == squat.json()["id"] and hit["readable"] is False
