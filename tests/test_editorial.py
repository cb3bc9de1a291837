"""Editorial control against the real test WordPress: checkpoints, task versions, approvals
and publishing, leases with fencing tokens, cancel, repair and named blocks (issue 4).

WordPress writes are counted with the fault proxy (``gwp`` fixture) in front of the site.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import time

import pytest
from support import both_transports
from support import call_count
from support import draft_body
from support import new_job_id
from support import op_key
from support import png_bytes
from support import problem_slug

from gateway.ledger import models
from gateway.ledger.db import database
from gateway.operations import perform
from gateway_tools.fault_proxy import Fault

pytestmark = pytest.mark.wordpress
POST_WRITE = r"^/wp-json/wp/v2/posts(/\d+)?/?$"
SHA = "a" * 64


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def counter(app, name: str) -> int:
    with app.app_context(), database.connection_context():
        return models.counter(name)


def post(gw, path: str, body=None, token=None, headers=None):
    return gw.client.post(path, json=body or {}, headers={**gw.headers(token), **(headers or {})})


def make_draft(gw, job_id: str, **overrides) -> int:
    assert gw.put_job(job_id).status_code == 201
    answer = gw.put_draft(job_id, draft_body(**overrides))
    assert answer.status_code == 201, answer.get_json()
    return answer.get_json()["post_id"]


def expiry(seconds: float) -> str:
    return (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds)).isoformat()


def approve(gw, job_id: str, editor: str, seconds: float = 3600, version: int = 1):
    check = gw.verification(job_id).get_json()
    body = {
        "task_version": version,
        "content_sha256": check["content_sha256"],
        "post_id": check["post_id"],
        "expires_at": expiry(seconds),
    }
    return post(gw, f"/v1/jobs/{job_id}/approvals", body, token=editor)


def publish(gw, job_id: str, token=None):
    return post(gw, f"/v1/jobs/{job_id}/publish", token=token)


# --------------------------------------------------------------------------- checkpoints


def checkpoint(gw, job_id, phase, artifacts=None, data=None, headers=None):
    body = {
        "phase": phase,
        "artifacts": artifacts or [{"role": "x", "uri": "s3://x", "sha256": SHA}],
    }
    if data is not None:
        body["data"] = data
    return post(gw, f"/v1/jobs/{job_id}/checkpoints", body, headers=headers)


def test_checkpoint_rules(offline_gw):
    gw, job_id = offline_gw, new_job_id()
    assert gw.put_job(job_id).status_code == 201
    first = [{"role": "sources", "uri": "s3://b/sources.json", "sha256": SHA}]
    assert checkpoint(gw, job_id, "sources_collected", first).status_code == 201
    assert checkpoint(gw, job_id, "sources_collected", first).status_code == 200
    other = [{"role": "sources", "uri": "s3://b/other.json", "sha256": SHA}]
    conflict = checkpoint(gw, job_id, "sources_collected", other)
    assert conflict.status_code == 409 and problem_slug(conflict) == "checkpoint-conflict"
    assert checkpoint(gw, job_id, "images_prepared").status_code == 201  # skipping forward
    assert gw.job(job_id).get_json()["phase"] == "images_prepared"

    before = counter(gw.app, "rejected_checkpoint_advances")
    for phase in ("draft_confirmed", "verified", "approval_pending", "published"):
        owned = checkpoint(gw, job_id, phase)
        assert owned.status_code == 403 and problem_slug(owned) == "phase-owned-by-gateway"
    assert counter(gw.app, "rejected_checkpoint_advances") == before + 4
    assert gw.job(job_id).get_json()["phase"] == "images_prepared"

    secrets = [
        {"password": "hunter2"},
        {"nested": [{"wp": {"api_key": "x"}}]},
        {"Authorization": "x"},
        {"note": "abcd EFGH 1234 ijkl mnop qr5t"},
        {"llm": "sk-proj-0123456789abcdef"},
        {"access_token": "x"},
    ]
    for data in secrets:
        refused = checkpoint(gw, job_id, "structure_checked", data=data)
        assert refused.status_code == 422 and problem_slug(refused) == "secret-in-checkpoint"
        assert "hunter2" not in refused.get_data(as_text=True)
    phases = [c["phase"] for c in gw.job(job_id).get_json()["checkpoints"]]
    assert "structure_checked" not in phases
    usage = {"usage": {"prompt_tokens": 12, "completion_tokens": 40}, "model": "gpt"}
    assert checkpoint(gw, job_id, "structure_checked", data=usage).status_code == 201

    assert gw.put_job(job_id, task_version=2).status_code == 200  # a bump starts afresh
    assert gw.job(job_id).get_json()["checkpoints"] == []
    assert checkpoint(gw, job_id, "sources_collected", other).status_code == 201


def test_draft_refused_when_body_artifact_digest_differs(gw):
    job_id, body = new_job_id(), draft_body(content="<p>The checkpointed body.</p>")
    assert gw.put_job(job_id).status_code == 201
    artifact = [{"role": "body", "uri": "s3://b/body.html", "sha256": sha(body["content"])}]
    assert checkpoint(gw, job_id, "body_generated", artifact).status_code == 201
    before = counter(gw.app, "rejected_checkpoint_advances")
    refused = gw.put_draft(job_id, {**body, "content": "<p>Something else.</p>"})
    assert refused.status_code == 409 and problem_slug(refused) == "artifact-digest-mismatch"
    assert counter(gw.app, "rejected_checkpoint_advances") == before + 1
    assert gw.operations(job_id) == []  # nothing was claimed
    assert gw.put_draft(job_id, body).status_code == 201


# --------------------------------------------------------------------------- task versions


@both_transports
def test_version_bump_updates_the_same_post(gw):
    """A new task version changing only the title changes only the title: content, excerpt,
    the featured image and the Rank Math fields read back unchanged (over XML-RPC too, where
    a partial edit once wrote "Untitled" or dropped the featured image)."""
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    assert gw.put_media(job_id, "hero", png_bytes((90, 9, 9)), "hero.png").status_code == 201
    body = draft_body(featured_media={"slot": "hero"})
    first = gw.put_draft(job_id, body)
    assert first.status_code == 201, first.get_json()
    post_id = first.get_json()["post_id"]
    before = gw.wp_post(post_id)
    assert before["featured_media"]
    assert gw.put_job(job_id, task_version=2).status_code == 200
    answer = gw.put_draft(job_id, {**body, "title": "Second version title"})
    assert answer.status_code == 201, answer.get_json()
    assert answer.get_json()["post_id"] == post_id
    assert answer.get_json()["verification"]["ok"] is True
    after = gw.wp_post(post_id)
    assert after["title"]["raw"] == "Second version title"
    for name in ("content", "excerpt"):
        assert after[name]["raw"] == before[name]["raw"]
    assert after["featured_media"] == before["featured_media"]
    assert after["status"] == "draft"
    for meta in ("rank_math_title", "rank_math_description", "rank_math_focus_keyword"):
        assert after["meta"][meta] == before["meta"][meta] != ""
    v1_key = op_key(job_id, "draft")
    assert gw.count_objects([v1_key, op_key(job_id, "draft", version=2)], "post") == 1


# --------------------------------------------------------------------------- approvals


def test_approval_for_v1_is_stale_after_a_bump(gw):
    job_id, editor = new_job_id(), gw.make_token("editor")
    post_id = make_draft(gw, job_id)
    assert approve(gw, job_id, editor).status_code == 201
    assert gw.put_job(job_id, task_version=2).status_code == 200
    refused = publish(gw, job_id)
    assert refused.status_code == 409 and problem_slug(refused) == "approval-stale"
    assert gw.wp_post(post_id)["status"] == "draft"


def test_content_edited_in_wordpress_after_approval_is_refused(gw):
    job_id, editor = new_job_id(), gw.make_token("editor")
    post_id = make_draft(gw, job_id)
    assert approve(gw, job_id, editor).status_code == 201
    gw.wp_update_post(post_id, {"content": "<p>Changed behind the editor's back.</p>"})
    refused = publish(gw, job_id)
    assert refused.status_code == 409 and problem_slug(refused) == "approval-stale"
    assert gw.wp_post(post_id)["status"] == "draft"


def test_expired_approval_is_refused(gw):
    job_id, editor = new_job_id(), gw.make_token("editor")
    post_id = make_draft(gw, job_id)
    assert approve(gw, job_id, editor, seconds=1.5).status_code == 201
    time.sleep(2)
    refused = publish(gw, job_id)
    assert refused.status_code == 403 and problem_slug(refused) == "approval-expired"
    assert gw.wp_post(post_id)["status"] == "draft"


def test_revoked_approval_is_refused(gw):
    job_id, editor = new_job_id(), gw.make_token("editor")
    post_id = make_draft(gw, job_id)
    granted = approve(gw, job_id, editor)
    approval_id = granted.get_json()["approval_id"]
    revoked = gw.client.delete(
        f"/v1/jobs/{job_id}/approvals/{approval_id}", headers=gw.headers(editor)
    )
    assert revoked.status_code == 200 and revoked.get_json()["revoked_by"] == "test-editor"
    refused = publish(gw, job_id)
    assert refused.status_code == 403 and problem_slug(refused) == "approval-revoked"
    assert gw.wp_post(post_id)["status"] == "draft"


def test_workflow_token_cannot_approve(gw):
    job_id = new_job_id()
    make_draft(gw, job_id)
    refused = approve(gw, job_id, gw.token)
    assert refused.status_code == 403 and problem_slug(refused) == "forbidden"
    missing = publish(gw, job_id)
    assert missing.status_code == 403 and problem_slug(missing) == "approval-required"


@both_transports
def test_valid_approval_publishes_once(gwp, proxy):
    gw, job_id, editor = gwp, new_job_id(), gwp.make_token("editor")
    post_id = make_draft(gw, job_id)
    requested = post(gw, f"/v1/jobs/{job_id}/approval-requests")
    assert requested.status_code == 201, requested.get_json()
    assert post(gw, f"/v1/jobs/{job_id}/approval-requests").status_code == 200
    assert gw.job(job_id).get_json()["phase"] == "approval_pending"
    granted = approve(gw, job_id, editor)
    assert granted.status_code == 201 and granted.get_json()["approved_by"] == "test-editor"
    done = publish(gw, job_id)
    assert done.status_code == 201, done.get_json()
    assert gw.wp_post(post_id)["status"] == "publish"
    assert gw.job(job_id).get_json()["phase"] == "published"
    proxy.reset_log()
    again = publish(gw, job_id, token=editor)
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    assert proxy.count("POST") == 0


# --------------------------------------------------------------------------- leases


def lease(gw, job_id, owner, ttl=60):
    return post(gw, f"/v1/jobs/{job_id}/lease", {"owner": owner, "ttl_seconds": ttl})


def test_lease_grants_renewals_and_fencing(gwp, proxy):
    gw, job_id = gwp, new_job_id()
    assert gw.put_job(job_id).status_code == 201
    first = lease(gw, job_id, "worker-a", ttl=1).get_json()
    renewed = lease(gw, job_id, "worker-a", ttl=1).get_json()
    assert renewed["fencing_token"] == first["fencing_token"]
    assert renewed["expires_at"] > first["expires_at"]
    held = lease(gw, job_id, "worker-b")
    assert held.status_code == 409 and problem_slug(held) == "lease-held"
    assert int(held.headers["Retry-After"]) >= 1
    time.sleep(1.3)
    second = lease(gw, job_id, "worker-b").get_json()
    assert second["fencing_token"] > first["fencing_token"]

    proxy.reset_log()
    stale_header = {"X-Fencing-Token": str(first["fencing_token"])}
    stale = gw.client.put(
        f"/v1/jobs/{job_id}/draft", json=draft_body(), headers={**gw.headers(), **stale_header}
    )
    assert stale.status_code == 409 and problem_slug(stale) == "stale-fencing-token"
    missing = gw.put_draft(job_id, draft_body())
    assert missing.status_code == 409 and problem_slug(missing) == "lease-required"
    old_checkpoint = checkpoint(gw, job_id, "sources_collected", headers=stale_header)
    assert problem_slug(old_checkpoint) == "stale-fencing-token"
    assert proxy.count("POST") == 0 and gw.operations(job_id) == []

    fresh = {**gw.headers(), "X-Fencing-Token": str(second["fencing_token"])}
    created = gw.client.put(f"/v1/jobs/{job_id}/draft", json=draft_body(), headers=fresh)
    assert created.status_code == 201, created.get_json()
    assert gw.operations(job_id)[0]["fencing_token"] == second["fencing_token"]
    released = gw.client.delete(
        f"/v1/jobs/{job_id}/lease",
        json={"owner": "worker-b", "fencing_token": second["fencing_token"]},
        headers=gw.headers(),
    )
    assert released.status_code == 200
    third = lease(gw, job_id, "worker-a").get_json()
    assert third["fencing_token"] > second["fencing_token"]


# --------------------------------------------------------------------------- cancel


def test_cancel_refuses_every_side_effect(gwp, proxy):
    gw, job_id, editor = gwp, new_job_id(), gwp.make_token("editor")
    post_id = make_draft(gw, job_id)
    assert approve(gw, job_id, editor).status_code == 201
    before = gw.wp_post(post_id)
    cancelled = post(gw, f"/v1/jobs/{job_id}/cancel", {"reason": "brief withdrawn"})
    assert cancelled.status_code == 200 and cancelled.get_json()["status"] == "cancelled"
    proxy.reset_log()
    answers = [
        gw.put_media(job_id, "hero", png_bytes()),
        gw.put_draft(job_id, draft_body()),  # a replay of the CONFIRMED draft: refused too
        gw.put_draft(job_id, draft_body(title="Another")),
        publish(gw, job_id),
        publish(gw, job_id, token=editor),
        post(gw, f"/v1/jobs/{job_id}/repair"),
        gw.client.put(
            f"/v1/jobs/{job_id}/blocks/promo", json={"html": "<p>x</p>"}, headers=gw.headers()
        ),  # fmt: skip
        checkpoint(gw, job_id, "sources_collected"),
        post(gw, f"/v1/jobs/{job_id}/approval-requests"),
    ]
    for answer in answers:
        assert answer.status_code == 409 and problem_slug(answer) == "job-cancelled"
    assert proxy.count("POST") == 0 and proxy.count("PUT") == 0
    after = gw.wp_post(post_id)
    assert after["status"] == "draft" and after["modified_gmt"] == before["modified_gmt"]
    report = gw.recover(job_id).get_json()
    assert report["status"] == "cancelled" and report["next_allowed_actions"] == ["none"]
    assert [e["remote_id"] for e in report["completed"]] == [post_id]
    assert proxy.count("POST") == 0


# --------------------------------------------------------------------------- repair


@both_transports
def test_repair_restores_dropped_fields_once(gwp, proxy, transport):
    gw, job_id = gwp, new_job_id()
    post_id = make_draft(gw, job_id)
    meta = {"rank_math_title": "", "rank_math_description": "", "rank_math_focus_keyword": ""}
    gw.wp_update_post(post_id, {"excerpt": "", "meta": meta})
    check = gw.verification(job_id).get_json()
    assert check["ok"] is False and check["fields"]["excerpt"]["ok"] is False
    proxy.reset_log()
    repaired = post(gw, f"/v1/jobs/{job_id}/repair")
    assert repaired.status_code == 201, repaired.get_json()
    fixes = repaired.get_json()["fixes"]
    assert set(fixes) == {"excerpt", "meta"} and len(fixes["meta"]) == 3
    assert repaired.get_json()["post_id"] == post_id
    assert call_count(proxy, transport, "create_post") == 0  # never a new post
    assert call_count(proxy, transport, "write") == 1
    live = gw.wp_post(post_id)
    assert live["excerpt"]["raw"] == "A short summary."
    assert live["meta"]["rank_math_title"] == "Gateway SEO title"
    assert live["meta"]["rank_math_focus_keyword"] == "gateway"
    assert gw.verification(job_id).get_json()["ok"] is True
    proxy.reset_log()
    second = post(gw, f"/v1/jobs/{job_id}/repair")
    assert second.status_code == 200 and second.get_json()["fixes"] == {}
    assert call_count(proxy, transport, "write") == 0


# --------------------------------------------------------------------------- blocks


def put_block(gw, job_id, html, name="resources"):
    return gw.client.put(
        f"/v1/jobs/{job_id}/blocks/{name}", json={"html": html}, headers=gw.headers()
    )


def markers(gw, post_id: int, name: str = "resources") -> list[str]:
    content = gw.wp_post(post_id)["content"]["raw"]
    return re.findall(rf"<!-- gateway:block name={name} digest=([0-9a-f]{{16}}) -->", content)


@both_transports
def test_block_is_inserted_exactly_once(gwp, proxy, transport):
    gw, job_id = gwp, new_job_id()
    post_id = make_draft(gw, job_id)
    html = '<div class="pack"><a href="https://example.com/pack">Resource pack</a></div>'
    proxy.reset_log()
    answers = [put_block(gw, job_id, html) for _ in range(3)]
    assert [a.status_code for a in answers] == [201, 200, 200], answers[0].get_json()
    key = op_key(job_id, "block", f"resources/{sha(html)[:16]}")
    assert answers[0].get_json()["operation_key"] == key
    assert call_count(proxy, transport, "write") == 1
    assert markers(gw, post_id) == [sha(html)[:16]]
    assert gw.verification(job_id).get_json()["ok"] is True  # a block is not drift

    assert gw.put_job(job_id, task_version=2).status_code == 200
    proxy.reset_log()
    assert put_block(gw, job_id, html).status_code == 201
    assert call_count(proxy, transport, "write") == 0  # the marker is already there
    assert markers(gw, post_id) == [sha(html)[:16]]

    newer = html.replace("Resource pack", "New resource pack")
    assert put_block(gw, job_id, newer).status_code == 201
    assert markers(gw, post_id) == [sha(newer)[:16]]  # replaced in place
    assert "New resource pack" in gw.wp_post(post_id)["content"]["raw"]


def test_block_survives_a_lost_response(gwp, proxy):
    gw, job_id = gwp, new_job_id()
    post_id = make_draft(gw, job_id)
    html = "<p>Download the <strong>resource pack</strong>.</p>"
    proxy.add_fault(Fault("drop_response", method="POST", path=r"^/wp-json/wp/v2/posts/\d+$"))
    proxy.reset_log()
    first = put_block(gw, job_id, html)
    assert proxy.count("POST", POST_WRITE, fault_kind="drop_response") == 1
    assert first.status_code == 200, first.get_json()  # resolved by lookup, in-request
    assert first.get_json()["reconciled"] is True
    retried = put_block(gw, job_id, html)
    assert retried.status_code in (200, 201), retried.get_json()
    assert retried.get_json()["state"] == "CONFIRMED"
    assert proxy.count("POST", POST_WRITE) == 1  # the write that landed, never a second
    assert markers(gw, post_id) == [sha(html)[:16]]


def test_block_after_a_crash_between_write_and_ledger(gwp, proxy, monkeypatch):
    gw, job_id = gwp, new_job_id()
    post_id = make_draft(gw, job_id)
    html = "<p>Crash-proof block.</p>"

    def crash(_config, name):
        if name == "after_wordpress_response":
            raise RuntimeError("simulated crash: WordPress wrote, the ledger did not")

    monkeypatch.setattr(perform, "crash_point", crash)
    proxy.reset_log()
    try:
        crashed = put_block(gw, job_id, html)
        assert crashed.status_code == 500
    except RuntimeError:
        pass
    assert [r["state"] for r in gw.operations(job_id) if r["action"] == "block"] == ["SENT"]
    monkeypatch.undo()
    retried = put_block(gw, job_id, html)
    assert retried.status_code == 200 and retried.get_json()["reconciled"] is True
    assert proxy.count("POST", POST_WRITE) == 1
    assert markers(gw, post_id) == [sha(html)[:16]]
