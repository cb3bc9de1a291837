"""Causes kept: a 404 from WordPress for a post that does not exist is a definite refusal
(never a retryable 503), against the real test WordPress."""

from __future__ import annotations

import pytest
from support import TENANT
from support import draft_body
from support import new_job_id
from support import op_key
from support import problem_slug

from gateway.ledger.db import database
from gateway.ledger.models import UNKNOWN
from gateway.ledger.models import Operation
from gateway.ledger.models import Review

pytestmark = pytest.mark.wordpress
MISSING_POST = 987654321


def _draft(gw, job_id: str) -> int:
    assert gw.put_job(job_id).status_code == 201
    answer = gw.put_draft(job_id, draft_body(title=f"Refusal {job_id}"))
    assert answer.status_code == 201, answer.get_json()
    return answer.get_json()["post_id"]


def test_repair_and_blocks_of_a_deleted_post_are_definite_refusals(gw):
    job_id = new_job_id()
    post_id = _draft(gw, job_id)
    deleted = gw.wp.delete(
        f"{gw.wp_url}/wp-json/wp/v2/posts/{post_id}", params={"force": "true"}, timeout=30
    )
    assert deleted.status_code == 200
    repair = gw.client.post(f"/v1/jobs/{job_id}/repair", json={}, headers=gw.headers())
    assert repair.status_code == 502 and problem_slug(repair) == "wordpress-refused"
    assert repair.get_json()["retryable"] is False
    assert repair.get_json()["wordpress_status"] == 404
    block = gw.client.put(
        f"/v1/jobs/{job_id}/blocks/promo", json={"html": "<b>x</b>"}, headers=gw.headers()
    )
    assert block.status_code == 502 and block.get_json()["retryable"] is False
    [row] = [r for r in gw.operations(job_id) if r["action"] == "block"]
    assert row["state"] == "FAILED" and row["problem"]["wordpress_status"] == 404


def test_an_editor_naming_a_post_that_does_not_exist_gets_422_and_nothing_changes(gw):
    job_id = new_job_id()
    _draft(gw, job_id)
    key = op_key(job_id, "draft")
    with gw.app.app_context(), database.connection_context():
        Operation.update(state=UNKNOWN).where(Operation.operation_key == key).execute()
        review = Review.create(
            tenant=TENANT, job_id=job_id, operation_key=key, kind="suspected_duplicate", detail={}
        )
    editor = gw.make_token("editor")
    answer = gw.client.post(
        f"/v1/reviews/{review.id}/resolve",
        json={"decision": "same_as", "post_id": MISSING_POST},
        headers=gw.headers(editor),
    )
    assert answer.status_code == 422 and problem_slug(answer) == "validation-failed"
    assert answer.get_json()["errors"][0]["pointer"] == "/post_id"
    [row] = gw.operations(job_id)
    assert row["state"] == "UNKNOWN"
    reviews = gw.client.get("/v1/reviews", headers=gw.headers(editor)).get_json()["reviews"]
    assert [r["review_id"] for r in reviews if r["job_id"] == job_id] == [review.id]
