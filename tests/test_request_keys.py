"""Clients' own request keys (``Idempotency-Key``, docs/api.md "Client request keys"): kept
per token in the ledger, a retry gets the first answer and nothing reaches WordPress; the same
key with another request is refused - against the real test WordPress."""

from __future__ import annotations

import datetime as dt

import pytest
from support import draft_body
from support import new_job_id
from support import problem_slug

from gateway.ledger.db import database
from gateway.ledger.models import RequestKey
from gateway.operator import retention

pytestmark = pytest.mark.wordpress
WRITES = r"^/wp-json/wp/v2/posts"


def _put_draft(gw, job_id: str, body: dict, key: str | None, token: str | None = None):
    headers = gw.headers(token)
    if key is not None:
        headers["Idempotency-Key"] = key
    return gw.client.put(f"/v1/jobs/{job_id}/draft", json=body, headers=headers)


def _writes(proxy) -> int:
    return sum(proxy.count(method=m, path=WRITES, forwarded=True) for m in ("POST", "PUT", "PATCH"))


def test_a_retry_with_the_same_key_gets_the_first_answer_and_writes_nothing(gwp, proxy):
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    body = draft_body(title=f"Keyed {job_id}")
    first = _put_draft(gwp, job_id, body, "k-1")
    assert first.status_code == 201, first.get_json()
    writes = _writes(proxy)
    # the same request under the same key, its keys in another order
    again = _put_draft(gwp, job_id, dict(reversed(list(body.items()))), "k-1")
    assert again.status_code == 201  # the first answer, as it was
    assert again.get_json() == first.get_json()
    assert again.headers.get("Idempotent-Replayed") == "true"
    assert _writes(proxy) == writes
    other = _put_draft(gwp, job_id, {**body, "title": "Changed"}, "k-1")
    assert other.status_code == 422 and problem_slug(other) == "request-key-reused"
    assert _writes(proxy) == writes
    # another token's key of the same name is another key: the job's key decides (a replay)
    second_token = gwp.make_token("workflow")
    theirs = _put_draft(gwp, job_id, body, "k-1", token=second_token)
    assert theirs.status_code == 200 and theirs.get_json()["replayed"] is True
    assert _writes(proxy) == writes


def test_a_refused_request_does_not_keep_its_key(gwp, proxy):
    """Issue 52 (anthropics/claude-code#95239: a client reusing one key, refused once, was
    refused ``request-key-reused`` on its next write for 24 hours): a 4xx answer releases the
    key, so the same key then carries another request, on this job or another one."""
    job_id, other_job = new_job_id(), new_job_id()
    assert gwp.put_job(job_id).status_code == 201 and gwp.put_job(other_job).status_code == 201
    bad = draft_body(excerpt="{{ $json.excerpt }}")
    assert problem_slug(_put_draft(gwp, job_id, bad, "k-refused")) == "template-leftover"
    assert problem_slug(_put_draft(gwp, job_id, bad, "k-refused")) == "template-leftover"  # ran
    assert _writes(proxy) == 0
    theirs = _put_draft(gwp, other_job, draft_body(title=f"Other {other_job}"), "k-refused")
    assert theirs.status_code == 201, theirs.get_json()
    good = _put_draft(gwp, job_id, draft_body(title=f"Good {job_id}"), "k-refused")
    assert problem_slug(good) == "request-key-reused"  # bound by the success, as before
    assert _put_draft(gwp, job_id, draft_body(title=f"Good {job_id}"), "k-new").status_code == 201


def test_malformed_keys_are_refused_and_expired_keys_are_pruned(gwp, proxy, app):
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    spaced = _put_draft(gwp, job_id, draft_body(), "has space")
    assert spaced.status_code == 422
    assert spaced.get_json()["errors"][0]["pointer"] == "/headers/Idempotency-Key"
    assert _writes(proxy) == 0
    assert _put_draft(gwp, job_id, draft_body(title=f"P {job_id}"), "k-old").status_code == 201
    with app.app_context(), database.connection_context():
        later = dt.datetime.now(dt.UTC).replace(tzinfo=None) + dt.timedelta(hours=25)
        assert retention.prune(30)["request_keys"] == 0
        assert retention.prune(30, now=later)["request_keys"] == 1
        assert RequestKey.select().count() == 0
