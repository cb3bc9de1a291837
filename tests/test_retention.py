"""Retention: ``gateway prune --older-than DAYS`` drops the bulky parts of a finished job's
operations and keeps what identifies each side effect; a replay of every kind of pruned
operation answers 200 with the core receipt and ``pruned: true`` and writes nothing to
WordPress; an unfinished job is left alone."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess

import pytest
from support import SECRET_KEY
from support import draft_body
from support import gateway_command
from support import new_job_id
from support import png_bytes
from support import problem_slug
from test_editorial import approve
from test_editorial import post
from test_editorial import put_block

from gateway.ledger import db
from gateway.ledger.db import database
from gateway.ledger.models import Job
from gateway.ledger.models import Operation

pytestmark = pytest.mark.wordpress
IMAGE = png_bytes((10, 200, 30))
BLOCK = "<p>Further reading</p>"


def _rows(gw, job_id: str) -> dict[str, Operation]:
    with gw.app.app_context(), database.connection_context():
        return {r.operation_key: r for r in Operation.select().where(Operation.job_id == job_id)}


def _published_job(gw, editor: str) -> tuple[str, int]:
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    assert gw.put_media(job_id, "hero", IMAGE).status_code == 201
    drafted = gw.put_draft(job_id, draft_body())
    assert drafted.status_code == 201, drafted.get_json()
    assert put_block(gw, job_id, BLOCK).status_code == 201
    post_id = drafted.get_json()["post_id"]
    gw.wp_update_post(post_id, {"excerpt": ""})  # drift, so that a repair operation exists
    assert post(gw, f"/v1/jobs/{job_id}/repair").status_code == 201
    assert post(gw, f"/v1/jobs/{job_id}/approval-requests").status_code == 201
    assert approve(gw, job_id, editor).status_code == 201
    assert post(gw, f"/v1/jobs/{job_id}/publish").status_code == 201
    return job_id, post_id


def _prune(ledger_url: str, days: str) -> dict:
    env = {**os.environ, "GATEWAY_DATABASE_URL": ledger_url, "GATEWAY_SECRET_KEY": SECRET_KEY}
    done = subprocess.run(
        [*gateway_command(), "prune", "--older-than", days],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_prune_keeps_identity_and_every_kind_replays_without_a_write(gwp, proxy, ledger_url):
    gw, editor = gwp, gwp.make_token("editor")
    job_id, post_id = _published_job(gw, editor)
    active = new_job_id()  # an unfinished job, touched today
    assert gw.put_job(active).status_code == 201
    assert gw.put_draft(active, draft_body(title="Still in progress")).status_code == 201
    before = _rows(gw, job_id)
    assert {r.action for r in before.values()} == {"media", "draft", "block", "repair", "publish"}
    long_ago = db.utcnow() - dt.timedelta(days=10)
    with gw.app.app_context(), database.connection_context():
        Operation.update(updated_at=long_ago).where(Operation.job_id << [job_id, active]).execute()
        Job.update(updated_at=long_ago).where(Job.job_id == job_id).execute()

    told = gw.client.get(f"/v1/jobs/{job_id}/timeline", headers=gw.headers(editor)).get_json()
    assert _prune(ledger_url, "5")["operations"] == len(before)
    assert _prune(ledger_url, "5")["operations"] == 0  # repeat-safe
    # issue 56: who decided what stays findable: the timeline is kept whole
    kept = gw.client.get(f"/v1/jobs/{job_id}/timeline", headers=gw.headers(editor)).get_json()
    assert kept == told and "published" in [e["event"] for e in kept["entries"]]

    after = _rows(gw, job_id)
    for key, row in before.items():
        kept = after[key]
        identity = ("state", "remote_id", "request_hash", "attempts", "action", "slot")
        assert [getattr(kept, f) for f in identity] == [getattr(row, f) for f in identity]
        assert kept.pruned_at is not None and kept.intent is None
        assert all(not isinstance(v, dict | list) for v in kept.receipt.values())
        assert len(json.dumps(kept.receipt)) <= len(json.dumps(row.receipt))
    draft_row = next(r for r in after.values() if r.action == "draft")
    assert "baseline" not in draft_row.receipt and "link" in draft_row.receipt
    untouched = _rows(gw, active)
    assert all(r.pruned_at is None and "baseline" in r.receipt for r in untouched.values())

    proxy.reset_log()
    answers = {
        "media": gw.put_media(job_id, "hero", IMAGE),
        "draft": gw.put_draft(job_id, draft_body()),
        "block": put_block(gw, job_id, BLOCK),
        "publish": post(gw, f"/v1/jobs/{job_id}/publish"),
    }
    for kind, answer in answers.items():
        body = answer.get_json()
        assert answer.status_code == 200, (kind, body)
        assert answer.headers["Idempotent-Replayed"] == "true", kind
        assert body["pruned"] is True and body["state"] == "CONFIRMED", (kind, body)
    assert answers["draft"].get_json()["post_id"] == post_id
    assert answers["media"].get_json()["source_url"]  # short scalar fields are kept
    # the two calls that need the full draft receipt say so, and write nothing
    repair = post(gw, f"/v1/jobs/{job_id}/repair")
    assert repair.status_code == 409 and problem_slug(repair) == "receipt-pruned"
    check = gw.verification(job_id)
    assert check.status_code == 409 and problem_slug(check) == "receipt-pruned"
    assert proxy.count("POST") == 0 and proxy.count("DELETE") == 0
    assert gw.count_objects(list(before)) == 2  # the post and the attachment, once each
