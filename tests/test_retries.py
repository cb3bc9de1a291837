"""FAILED is not a dead end: an editor or admin may let a refused operation be sent again
(``POST /v1/jobs/{job_id}/operations/retry`` or the review page's button). The next
identical request reconciles first and then sends; who and why are recorded; any other
state is 409 ``operation-not-failed``. Plus: a ledger of the previous schema migrates."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest
from support import draft_body
from support import new_job_id
from support import op_key
from support import problem_slug

from gateway.ledger import db
from gateway.ledger import migrations
from gateway.ledger import models
from gateway.ledger.db import database
from gateway_tools.fault_proxy import Fault

POSTS = r"^/wp-json/wp/v2/posts/?$"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _failed_draft(gwp, proxy) -> tuple[str, dict]:
    """A job whose draft WordPress refused definitely (its JSON 401), so the row is FAILED."""
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    body = draft_body(title=f"Retry {job_id}")
    proxy.add_fault(Fault(kind="unauthorized", method="POST", path=POSTS))
    refused = gwp.put_draft(job_id, body)
    assert refused.status_code == 502 and problem_slug(refused) == "wordpress-refused"
    again = gwp.put_draft(job_id, body)  # the ledger repeats the refusal
    assert again.status_code == 502 and proxy.count(method="POST", path=POSTS) == 1
    return job_id, body


def _retry(gwp, job_id: str, key: str, token: str, reason: str = "password fixed by hand"):
    return gwp.client.post(
        f"/v1/jobs/{job_id}/operations/retry",
        json={"operation_key": key, "reason": reason},
        headers=gwp.headers(token),
    )


@pytest.mark.wordpress
def test_editor_retry_lets_the_next_identical_request_reconcile_and_send(gwp, proxy):
    job_id, body = _failed_draft(gwp, proxy)
    key = op_key(job_id, "draft")
    assert _retry(gwp, job_id, key, gwp.token).status_code == 403  # not for workflows
    editor = gwp.make_token("editor")
    answer = _retry(gwp, job_id, key, editor)
    assert answer.status_code == 200, answer.get_json()
    assert answer.get_json()["state"] == "UNKNOWN"
    proxy.reset_log()
    sent = gwp.put_draft(job_id, body)
    assert sent.status_code == 201, sent.get_json()
    paths = [(r.method, r.path) for r in proxy.requests]
    assert paths.index(("GET", "/wp-json/publishing-gateway/v1/objects")) < paths.index(
        ("POST", "/wp-json/wp/v2/posts")
    )
    assert gwp.count_objects(key) == 1
    job = gwp.job(job_id).get_json()
    [retry] = job["retries"]
    assert retry["operation_key"] == key and retry["requested_by"] == "test-editor"
    assert retry["reason"] == "password fixed by hand"
    assert retry["previous_problem"]["wordpress_status"] == 401
    again = _retry(gwp, job_id, key, editor)  # CONFIRMED now
    assert again.status_code == 409 and problem_slug(again) == "operation-not-failed"
    assert again.get_json()["ledger_state"] == "CONFIRMED"


def test_retry_refuses_what_is_not_failed(offline_gw):
    job_id = new_job_id()
    offline_gw.put_job(job_id)
    admin = offline_gw.make_token("admin")
    missing = _retry(offline_gw, job_id, op_key(job_id, "draft"), admin)
    assert missing.status_code == 404
    with offline_gw.app.app_context(), database.connection_context():
        models.Operation.create(
            operation_key=op_key(job_id, "draft"),
            tenant="acme",
            job_id=job_id,
            task_version=1,
            action="draft",
            binds="post",
            request_hash="x",
            state=models.UNKNOWN,
        )
    unknown = _retry(offline_gw, job_id, op_key(job_id, "draft"), admin)
    assert unknown.status_code == 409 and problem_slug(unknown) == "operation-not-failed"
    assert unknown.get_json()["ledger_state"] == "UNKNOWN"
    blank = _retry(offline_gw, job_id, op_key(job_id, "draft"), admin, reason="  ")
    assert blank.status_code == 422


@pytest.mark.wordpress
def test_review_page_button_allows_the_retry(gwp, proxy):
    job_id, body = _failed_draft(gwp, proxy)
    client = gwp.client
    editor = gwp.make_token("editor")
    login = client.get("/review/login").get_data(as_text=True)
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', login).group(1)
    client.post("/review/login", data={"token": editor, "csrf_token": csrf})
    page = client.get("/review").get_data(as_text=True)
    assert op_key(job_id, "draft") in page and "Allow retry" in page
    assert "WordPress refused the post (HTTP 401)" in page  # the refusal in words
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    answer = client.post(
        f"/review/jobs/{job_id}/operations/retry",
        data={"operation_key": op_key(job_id, "draft"), "reason": "fixed", "csrf_token": csrf},
        follow_redirects=True,
    )
    assert "will be sent again" in answer.get_data(as_text=True)
    assert gwp.put_draft(job_id, body).status_code == 201
    assert gwp.count_objects(op_key(job_id, "draft")) == 1


def test_the_release_0_1_0_ledger_migrates_to_operation_retries(tmp_path):
    """The previous release's ledger fixture gets the ``operation_retry`` table (version 2)."""
    path = tmp_path / "ledger-0.1.0.db"
    with sqlite3.connect(path) as connection:
        connection.executescript((FIXTURES / "ledger-0.1.0.sql").read_text())
    url = f"sqlite:///{path}"
    db.bind(url)
    with database.connection_context():
        assert "operation_retry" not in database.get_tables()
    assert migrations.migrate() == (migrations.BASELINE, migrations.latest_version())
    with database.connection_context():
        assert "operation_retry" in database.get_tables()
        assert migrations.current_version() >= 2
        assert models.OperationRetry.select().count() == 0
        assert models.Operation.select().count() == 2  # the old rows are kept
    database.close()
