"""The main job against the real test WordPress: media, draft, verification, replays, lost
responses, concurrency, refusals, and the requests that must never reach WordPress.

Assertions are what a user would check: status codes, what WordPress holds (counted through the
companion plugin's lookup by operation key), and the ledger rows of ``GET /v1/jobs/{id}``.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from support import JPEG_BYTES
from support import TENANT
from support import all_ledger_rows
from support import both_transports
from support import call_count
from support import call_fault
from support import draft_body
from support import new_job_id
from support import op_key
from support import png_bytes
from support import problem_slug
from support import sqlite_path
from support import transport_param

from gateway.ledger.db import database
from gateway.ledger.models import Operation
from gateway_tools.fault_proxy import Fault

POSTS = r"^/wp-json/wp/v2/posts/?$"
MEDIA = r"^/wp-json/wp/v2/media/?$"
LOOKUP = r"/publishing-gateway/v1/objects"

wordpress = pytest.mark.wordpress


def full_job(gw, job_id: str) -> tuple[dict, dict, dict]:
    """Job, three images and a draft with featured image, two body images, excerpt and SEO.

    Returns ``(draft_request, draft_response_body, media_ids_by_slot)``."""
    assert gw.put_job(job_id).status_code == 201
    media_ids = {}
    for slot, content, name in (
        ("hero", png_bytes((200, 30, 30), 3), "hero.png"),
        ("fig-1", JPEG_BYTES, "figure one.jpg"),
        ("fig-2", png_bytes((30, 30, 200), 2), "fig2.png"),
    ):
        alt = {"alt_text": f"alt of {slot}"} if gw.transport == "rest" else {}  # REST only
        answer = gw.put_media(job_id, slot, content, name, **alt)
        assert answer.status_code == 201, answer.get_json()
        body = answer.get_json()
        assert body["state"] == "CONFIRMED" and body["media_id"]
        assert body["replayed"] is False
        media_ids[slot] = body["media_id"]
    request = draft_body(
        title="Tom & Jerry: a gateway story",
        content=(
            "<p>Intro paragraph.</p>\n{{media:fig-1}}\n<p>Middle paragraph.</p>\n"
            "{{media:fig-2}}\n<p>Closing paragraph.</p>"
        ),
        excerpt="The gateway story, in short.",
        featured_media={"slot": "hero"},
        body_media=["fig-1", "fig-2"],
        seo={
            "title": "Tom and Jerry | Gateway",
            "description": "How the gateway writes a draft exactly once.",
            "focus_keyword": "gateway story",
        },
    )
    answer = gw.put_draft(job_id, request)
    assert answer.status_code == 201, answer.get_json()
    return request, answer.get_json(), media_ids


def retry_like_n8n(call, tries: int = 5):
    """Call until the answer is not a retryable 503/409, like n8n's Retry On Fail."""
    answers = []
    for attempt in range(tries):
        answer = call()
        answers.append(answer)
        if answer.status_code not in (409, 503) or problem_slug(answer) in (
            "needs-review",
            "operation-key-reused",
            "media-not-ready",
        ):
            break
        if attempt < tries - 1:
            time.sleep(min(float(answer.headers.get("Retry-After", "1")), 2.0))
    return answers


# --------------------------------------------------------------------------- the main job


@wordpress
@both_transports
def test_full_job_creates_one_verified_draft(gw):
    job_id = new_job_id()
    request, draft, media_ids = full_job(gw, job_id)
    post_id = draft["post_id"]
    assert draft["state"] == "CONFIRMED" and draft["replayed"] is False
    assert draft["operation_key"] == op_key(job_id, "draft")

    answer = gw.verification(job_id)
    assert answer.status_code == 200
    report = answer.get_json()
    assert report["ok"] is True
    assert report["post_id"] == post_id
    assert {name: f["ok"] for name, f in report["fields"].items()} == {
        name: True for name in report["fields"]
    }
    for name in ("title", "excerpt", "content", "featured_media", "body_media", "status"):
        assert name in report["fields"]
    for name in ("seo.title", "seo.description", "seo.focus_keyword"):
        assert report["fields"][name]["ok"] is True
    assert report["fields"]["featured_media"]["actual"] == media_ids["hero"]
    assert report["fields"]["body_media"]["actual"] == [media_ids["fig-1"], media_ids["fig-2"]]
    # The author's "&" was stored as "&amp;": reported, not a failure.
    assert report["normalized"]["title"]["sent"] == "Tom & Jerry: a gateway story"
    assert report["normalized"]["title"]["stored"] == "Tom &amp; Jerry: a gateway story"

    # WordPress holds exactly one post and three attachments with the job's keys.
    draft_key = op_key(job_id, "draft")
    media_keys = [op_key(job_id, "media", slot) for slot in media_ids]
    objects = gw.lookup([draft_key, *media_keys])
    assert [(o["type"], o["id"]) for o in objects if o["operation_key"] == draft_key] == [
        ("post", post_id)
    ]
    attachments = sorted(o["id"] for o in objects if o["type"] == "attachment")
    assert attachments == sorted(media_ids.values())
    assert len(objects) == 4

    # Read directly from WordPress: a draft, with the SEO meta that was sent.
    post = gw.wp_post(post_id)
    assert post["status"] == "draft"
    assert post["featured_media"] == media_ids["hero"]
    assert post["excerpt"]["raw"] == request["excerpt"]
    assert post["meta"]["rank_math_title"] == request["seo"]["title"]
    assert post["meta"]["rank_math_description"] == request["seo"]["description"]
    assert post["meta"]["rank_math_focus_keyword"] == request["seo"]["focus_keyword"]
    assert post["author"] == gw.site["users"]["author"]["id"]
    for media_id in (media_ids["fig-1"], media_ids["fig-2"]):
        assert f"wp-image-{media_id}" in post["content"]["raw"]

    # The ledger: seven CONFIRMED rows, the draft's with the post id, and each image attached.
    rows = {row["operation_key"]: row for row in gw.operations(job_id)}
    attach_keys = [op_key(job_id, "attach", slot) for slot in media_ids]
    assert set(rows) == {draft_key, *media_keys, *attach_keys}
    assert all(rows[key]["receipt"]["post_id"] == post_id for key in attach_keys)
    assert all(row["state"] == "CONFIRMED" for row in rows.values())
    assert rows[draft_key]["remote_id"] == post_id
    job = gw.job(job_id).get_json()
    assert job["post_id"] == post_id
    assert job["phase"] == "verified"
    assert job["status"] == "completed"


@wordpress
@both_transports
def test_replays_make_no_wordpress_write(gwp, proxy, transport):
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    image = png_bytes((10, 120, 10))
    first_media = gwp.put_media(job_id, "hero", image, "hero.png")
    assert first_media.status_code == 201
    request = draft_body(featured_media={"slot": "hero"})
    first = gwp.put_draft(job_id, request)
    assert first.status_code == 201, first.get_json()
    post_id = first.get_json()["post_id"]
    assert call_count(proxy, transport, "upload", forwarded=True) == 1
    assert call_count(proxy, transport, "create_post", forwarded=True) == 1
    # REST: one upload, one post, the image attached to the post (POST /wp/v2/media/{id});
    # XML-RPC: the same as wp.uploadFile, wp.newPost, wp.editPost (parent), plus the
    # upload's second call (wp.editPost writing the key onto the attachment)
    writes = call_count(proxy, transport, "write", forwarded=True)
    assert writes == (3 if transport == "rest" else 4)
    calls = proxy.count(forwarded=True)

    again = gwp.put_draft(job_id, request)
    assert again.status_code == 200
    assert again.headers.get("Idempotent-Replayed") == "true"
    assert again.get_json()["post_id"] == post_id
    assert again.get_json()["replayed"] is True

    media_again = gwp.put_media(job_id, "hero", image, "hero.png")
    assert media_again.status_code == 200
    assert media_again.headers.get("Idempotent-Replayed") == "true"
    assert media_again.get_json()["media_id"] == first_media.get_json()["media_id"]

    assert proxy.count(forwarded=True) == calls  # replays: no WordPress call at all
    assert gwp.count_objects(op_key(job_id, "draft")) == 1
    assert gwp.count_objects(op_key(job_id, "media", "hero")) == 1


@wordpress
def test_different_payload_under_same_key_is_refused(gw):
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    first = gw.put_draft(job_id, draft_body(title="The original title"))
    assert first.status_code == 201
    post_id = first.get_json()["post_id"]

    changed = gw.put_draft(job_id, draft_body(title="A different title"))
    assert changed.status_code == 422
    assert problem_slug(changed) == "operation-key-reused"
    assert changed.get_json()["operation_key"] == op_key(job_id, "draft")
    assert gw.wp_post(post_id)["title"]["raw"] == "The original title"
    assert gw.count_objects(op_key(job_id, "draft")) == 1

    other_bytes = gw.put_media(job_id, "hero", png_bytes((1, 2, 3)))
    assert other_bytes.status_code == 201
    reused = gw.put_media(job_id, "hero", png_bytes((3, 2, 1)))
    assert reused.status_code == 422
    assert problem_slug(reused) == "operation-key-reused"
    assert gw.count_objects(op_key(job_id, "media", "hero")) == 1


# --------------------------------------------------------------------------- concurrency


def _fire(count: int, send) -> list[requests.Response]:
    barrier = threading.Barrier(count)

    def one(_index):
        barrier.wait(timeout=30)
        return send()

    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(one, range(count)))


@wordpress
def test_concurrent_identical_drafts_create_one_post(gateway_server):
    server = gateway_server
    job_id = new_job_id()
    answer = requests.put(
        f"{server.url}/v1/jobs/{job_id}",
        json={"site": "blog", "task_version": 1},
        headers=server.headers(),
        timeout=30,
    )
    assert answer.status_code == 201, answer.text
    request = draft_body(title=f"Concurrent {job_id}")
    answers = _fire(
        20,
        lambda: requests.put(
            f"{server.url}/v1/jobs/{job_id}/draft",
            json=request,
            headers=server.headers(),
            timeout=60,
        ),
    )
    statuses = sorted(a.status_code for a in answers)
    assert set(statuses) <= {200, 201, 409}, (statuses, [a.text for a in answers], server.log())
    assert statuses.count(201) == 1, statuses
    post_ids = {a.json()["post_id"] for a in answers if a.status_code in (200, 201)}
    assert len(post_ids) == 1
    for conflict in (a for a in answers if a.status_code == 409):
        assert problem_slug(conflict) == "operation-in-progress"
        assert conflict.headers.get("Retry-After")

    site = server_site_lookup(server)
    objects = site(op_key(job_id, "draft"))
    assert [o["id"] for o in objects] == list(post_ids)


@wordpress
def test_concurrent_identical_uploads_create_one_attachment(gateway_server):
    server = gateway_server
    job_id = new_job_id()
    answer = requests.put(
        f"{server.url}/v1/jobs/{job_id}",
        json={"site": "blog", "task_version": 1},
        headers=server.headers(),
        timeout=30,
    )
    assert answer.status_code == 201, answer.text
    image = png_bytes((90, 90, 0), 4)
    answers = _fire(
        10,
        lambda: requests.put(
            f"{server.url}/v1/jobs/{job_id}/media/hero",
            files={"file": ("hero.png", image, "image/png")},
            headers=server.headers(),
            timeout=60,
        ),
    )
    statuses = sorted(a.status_code for a in answers)
    assert set(statuses) <= {200, 201, 409}, (statuses, [a.text for a in answers], server.log())
    assert statuses.count(201) == 1, statuses
    media_ids = {a.json()["media_id"] for a in answers if a.status_code in (200, 201)}
    assert len(media_ids) == 1
    objects = server_site_lookup(server)(op_key(job_id, "media", "hero"))
    assert [o["id"] for o in objects] == list(media_ids)


def server_site_lookup(server):
    """Lookup by operation key against the WordPress the server writes to (admin auth)."""
    from support import _read_site
    from support import admin_session

    site = _read_site()
    session = admin_session(site)

    def lookup(key: str) -> list[dict]:
        answer = session.get(
            f"{site['url']}/wp-json/publishing-gateway/v1/objects",
            params={"keys": key},
            timeout=30,
        )
        answer.raise_for_status()
        return answer.json()["objects"]

    return lookup


# --------------------------------------------------------------------------- lost responses


@wordpress
@both_transports
def test_draft_response_lost_after_commit_is_reconciled(gwp, proxy, transport):
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    proxy.add_fault(call_fault(transport, "create_post", "drop_response", times=1))
    request = draft_body(title=f"Lost response {job_id}")

    answers = retry_like_n8n(lambda: gwp.put_draft(job_id, request))
    final = answers[-1]
    assert final.status_code in (200, 201), [a.get_json() for a in answers]
    assert call_count(proxy, transport, "create_post", fault_kind="drop_response") == 1
    assert call_count(proxy, transport, "create_post", forwarded=True) == 1
    post_id = final.get_json()["post_id"]

    objects = gwp.lookup(op_key(job_id, "draft"))
    assert [o["id"] for o in objects] == [post_id]
    (row,) = [r for r in gwp.operations(job_id) if r["action"] == "draft"]
    assert row["state"] == "CONFIRMED"
    assert row["remote_id"] == post_id
    assert gwp.verification(job_id).get_json()["ok"] is True


@wordpress
@both_transports
def test_draft_response_and_lookup_lost_then_retry_confirms(gwp, proxy, transport):
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    proxy.add_fault(call_fault(transport, "create_post", "drop_response", times=1))
    proxy.add_fault(call_fault(transport, "lookup", "status_without_forward", status=503, times=1))
    request = draft_body(title=f"Lost twice {job_id}")

    first = gwp.put_draft(job_id, request)
    assert first.status_code == 503, first.get_json()
    assert problem_slug(first) == "outcome-unknown"
    assert first.headers.get("Retry-After")
    assert first.get_json()["retryable"] is True
    (row,) = gwp.operations(job_id)
    assert row["state"] == "UNKNOWN"
    assert gwp.job(job_id).get_json()["status"] == "unknown"

    posts_sent = call_count(proxy, transport, "create_post", forwarded=True)
    retry = gwp.put_draft(job_id, request)
    assert retry.status_code == 200, retry.get_json()
    post_id = retry.get_json()["post_id"]
    # found, not resent
    assert call_count(proxy, transport, "create_post", forwarded=True) == posts_sent
    assert [o["id"] for o in gwp.lookup(op_key(job_id, "draft"))] == [post_id]
    (row,) = gwp.operations(job_id)
    assert row["state"] == "CONFIRMED" and row["remote_id"] == post_id


@wordpress
@both_transports
def test_media_response_lost_is_reconciled(gwp, proxy, transport):
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    proxy.add_fault(call_fault(transport, "upload", "drop_response", times=1))
    image = png_bytes((5, 200, 200))

    answers = retry_like_n8n(lambda: gwp.put_media(job_id, "hero", image, "hero.png"))
    final = answers[-1]
    assert final.status_code in (200, 201), [a.get_json() for a in answers]
    media_id = final.get_json()["media_id"]
    assert call_count(proxy, transport, "upload", fault_kind="drop_response") == 1
    assert call_count(proxy, transport, "upload", forwarded=True) == 1
    objects = gwp.lookup(op_key(job_id, "media", "hero"))
    assert [(o["type"], o["id"]) for o in objects] == [("attachment", media_id)]
    (row,) = gwp.operations(job_id)
    assert row["state"] == "CONFIRMED" and row["remote_id"] == media_id


GARBLED = {
    "500-not-forwarded": ("status_without_forward", 500),
    "500-after-commit": ("status_after_forward", 500),
    "502-after-commit": ("status_after_forward", 502),
    "php-notice": ("php_notice", None),
}


@wordpress
@pytest.mark.parametrize(
    "transport,kind,status",
    [
        transport_param(transport, *fault, id=f"{transport}-{name}")
        for transport in ("rest", "xmlrpc")
        for name, fault in GARBLED.items()
    ],
    indirect=["transport"],
)
def test_wordpress_5xx_or_garbled_answer_is_never_failed(gwp, proxy, transport, kind, status):
    """A 5xx or a body WordPress garbled proves nothing: the gateway looks the key up and
    either adopts the post or (absence proven) sends again - one post in the end."""
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    proxy.add_fault(call_fault(transport, "create_post", kind, status=status))
    request = draft_body(title=f"Garbled {job_id}")

    answers = retry_like_n8n(lambda: gwp.put_draft(job_id, request))
    assert all(a.status_code != 502 for a in answers), [a.get_json() for a in answers]
    final = answers[-1]
    assert final.status_code in (200, 201), [a.get_json() for a in answers]
    post_id = final.get_json()["post_id"]
    assert [o["id"] for o in gwp.lookup(op_key(job_id, "draft"))] == [post_id]
    (row,) = gwp.operations(job_id)
    assert row["state"] == "CONFIRMED" and row["remote_id"] == post_id
    assert gwp.wp_post(post_id)["status"] == "draft"


@wordpress
@both_transports
def test_recover_reports_lost_operation_completed(gwp, proxy, transport):
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    proxy.add_fault(call_fault(transport, "create_post", "drop_response", times=1))
    proxy.add_fault(call_fault(transport, "lookup", "status_without_forward", status=503, times=1))
    assert gwp.put_draft(job_id, draft_body()).status_code == 503

    answer = gwp.recover(job_id)
    assert answer.status_code == 200
    report = answer.get_json()
    assert [e["operation_key"] for e in report["completed"]] == [op_key(job_id, "draft")]
    assert report["unknown"] == [] and report["failed"] == []
    (row,) = gwp.operations(job_id)
    assert row["state"] == "CONFIRMED"
    assert gwp.count_objects(op_key(job_id, "draft")) == 1


# --------------------------------------------------------------------------- read-back


@wordpress
def test_fields_dropped_in_wordpress_fail_verification(gw):
    job_id = new_job_id()
    request, draft, _ = full_job(gw, job_id)
    assert gw.verification(job_id).get_json()["ok"] is True

    gw.wp_update_post(draft["post_id"], {"excerpt": "", "meta": {"rank_math_focus_keyword": ""}})

    answer = gw.verification(job_id)
    assert answer.status_code == 200
    report = answer.get_json()
    assert report["ok"] is False
    failing = {name for name, f in report["fields"].items() if f["ok"] is not True}
    assert failing == {"excerpt", "seo.focus_keyword"}
    assert report["fields"]["excerpt"]["actual"] == ""
    assert report["fields"]["seo.focus_keyword"]["expected"] == request["seo"]["focus_keyword"]
    assert report["fields"]["seo.focus_keyword"]["actual"] in ("", None)


# --------------------------------------------------------------------------- refusals


@wordpress
def test_disallowed_upload_is_refused_before_anything(gwp, proxy):
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    posts_before = proxy.count(method="POST")
    for content, name in (
        (b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog >>\nendobj\ntrailer\n%%EOF\n", "doc.png"),
        (b"just some text, not an image\n", "notes.jpg"),
    ):
        answer = gwp.put_media(job_id, "hero", content, name)
        assert answer.status_code == 415
        assert problem_slug(answer) == "unsupported-media-type"
        assert answer.mimetype == "application/problem+json"
    assert gwp.operations(job_id) == []
    assert proxy.count(method="POST") == posts_before
    assert gwp.count_objects(op_key(job_id, "media", "hero")) == 0


@wordpress
def test_draft_naming_media_never_uploaded_is_422_and_an_unfinished_upload_409(gw):
    """Issue 28: a slot never uploaded in the job is the request's mistake (422 with its
    pointer: waiting will not help); a slot whose upload is not CONFIRMED yet is 409
    ``media-not-ready`` naming its state."""
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    answer = gw.put_draft(job_id, draft_body(featured_media={"slot": "never-uploaded"}))
    assert answer.status_code == 422 and problem_slug(answer) == "validation-failed"
    assert [e["pointer"] for e in answer.get_json()["errors"]] == ["/featured_media/slot"]
    assert "never-uploaded" in answer.get_json()["detail"]
    with gw.app.app_context(), database.connection_context():
        Operation.create(
            operation_key=op_key(job_id, "media", "late"), tenant=TENANT, job_id=job_id,
            task_version=1, action="media", slot="late", binds="attachment",
            request_hash="h", state="UNKNOWN", attempts=1,
        )  # fmt: skip
    answer = gw.put_draft(
        job_id,
        draft_body(content="<p>x</p>{{media:late}}{{media:ghost}}", body_media=["late", "ghost"]),
    )
    assert answer.status_code == 422, answer.get_json()
    assert [e["pointer"] for e in answer.get_json()["errors"]] == ["/body_media/1"]
    answer = gw.put_draft(job_id, draft_body(content="<p>x</p>{{media:late}}", body_media=["late"]))
    assert answer.status_code == 409 and problem_slug(answer) == "media-not-ready"
    assert answer.get_json()["slots"] == ["late"] and "UNKNOWN" in answer.get_json()["detail"]
    assert gw.count_objects(op_key(job_id, "draft")) == 0


@wordpress
def test_revoked_credentials_stop_writes_until_site_is_updated(gwp, proxy):
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    proxy.add_fault(Fault(kind="unauthorized", method="POST", path=POSTS, times=None))
    request = draft_body(title=f"Revoked {job_id}")

    first = gwp.put_draft(job_id, request)
    assert first.status_code == 502, first.get_json()
    assert problem_slug(first) == "wordpress-refused"
    assert first.get_json()["retryable"] is False
    (row,) = gwp.operations(job_id)
    assert row["state"] == "FAILED"
    assert gwp.job(job_id).get_json()["status"] == "failed"

    posts_seen = proxy.count(method="POST", path=POSTS)
    again = gwp.put_draft(job_id, request)
    assert again.status_code == 502
    assert problem_slug(again) == "wordpress-refused"
    assert proxy.count(method="POST", path=POSTS) == posts_seen  # not even tried
    assert gwp.count_objects(op_key(job_id, "draft")) == 0

    # The admin renews the password: the site is added again (credential_version bumps).
    proxy.clear_faults()
    site = gwp.add_site(proxy.url)
    assert site.credential_version == 2
    renewed = gwp.put_draft(job_id, request)
    assert renewed.status_code == 201, renewed.get_json()
    assert proxy.count(method="POST", path=POSTS, forwarded=True) == 1
    post_id = renewed.get_json()["post_id"]
    assert [o["id"] for o in gwp.lookup(op_key(job_id, "draft"))] == [post_id]
    (row,) = gwp.operations(job_id)
    assert row["state"] == "CONFIRMED" and row["credential_version"] == 2


# --------------------------------------------------------------------------- credentials


@wordpress
def test_ledger_and_responses_hold_no_credential(gw, ledger_url):
    job_id = new_job_id()
    full_job(gw, job_id)
    password = gw.author["app_password"]
    secrets = [password, password.replace(" ", "")]

    path = sqlite_path(ledger_url)
    if path is not None:
        stored = b"".join(
            p.read_bytes()
            for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm"))
            if p.exists()
        )
        for secret in secrets:
            assert secret.encode() not in stored
    with gw.app.app_context():
        rows = all_ledger_rows()
    for secret in secrets:
        assert secret not in rows

    for answer in (gw.job(job_id), gw.verification(job_id), gw.recover(job_id)):
        assert answer.status_code == 200
        text = answer.get_data(as_text=True)
        for secret in secrets:
            assert secret not in text


@wordpress
def test_the_featured_image_may_also_be_placed_in_the_body(gw):
    """``{{media:hero}}`` with the featured slot ``hero`` and ``body_media`` not listing it
    (issue 54: was 422 "unknown placeholder slot 'hero': not in body_media"): the article
    check passes, the post holds the hero as featured image and in its body, and it verifies
    with the hero among the body images where its placeholder stands."""
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    ids = {}
    for slot, content in (("hero", png_bytes((200, 30, 30), 3)), ("fig", JPEG_BYTES)):
        answer = gw.put_media(job_id, slot, content, f"{slot}.png")
        assert answer.status_code == 201, answer.get_json()
        ids[slot] = answer.get_json()["media_id"]
    request = draft_body(
        content="<p>First.</p>\n{{media:fig}}\n<p>Then.</p>\n{{media:hero}}",
        featured_media={"slot": "hero"},
        body_media=["fig"],
    )
    checked = gw.client.post(
        "/v1/articles/validate",
        json={"draft": request, "media": [{"slot": "hero"}, {"slot": "fig"}]},
        headers=gw.headers(),
    )
    assert checked.status_code == 200, checked.get_json()
    answer = gw.put_draft(job_id, request)
    assert answer.status_code == 201, answer.get_json()
    post = gw.wp_post(answer.get_json()["post_id"])
    assert post["featured_media"] == ids["hero"]
    assert f"wp-image-{ids['hero']}" in post["content"]["raw"]
    report = gw.verification(job_id).get_json()
    assert report["ok"] is True, report
    assert report["fields"]["body_media"]["actual"] == [ids["fig"], ids["hero"]]
    assert gw.count_objects([op_key(job_id, "draft")]) == 1
