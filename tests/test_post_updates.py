"""Images attached to their post, and a version bump that leaves untouched fields alone
(issue 14, parts 4 and 5), against the real test WordPress."""

from __future__ import annotations

import uuid

import pytest
from support import both_transports
from support import call_count
from support import draft_body
from support import new_job_id
from support import op_key
from support import png_bytes
from support import problem_slug

pytestmark = pytest.mark.wordpress


def _parent(gw, media_id: int) -> int:
    answer = gw.wp.get(
        f"{gw.wp_url}/wp-json/wp/v2/media/{media_id}", params={"context": "edit"}, timeout=30
    )
    answer.raise_for_status()
    return answer.json()["post"]


def _media(gw, job_id: str, slot: str, content: bytes) -> int:
    answer = gw.put_media(job_id, slot, content, f"{slot}.png", alt_text=f"{slot} alt")
    assert answer.status_code in (200, 201), answer.get_json()
    return answer.get_json()["media_id"]


def test_version_bump_changing_only_the_excerpt_leaves_the_rest_and_images_are_attached(gw):
    uid = uuid.uuid4().hex[:10]
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    hero = _media(gw, job_id, "hero", png_bytes((10, 20, 30), 3))
    fig = _media(gw, job_id, "fig", png_bytes((40, 50, 60), 3))
    body = draft_body(
        title=f"Bump {job_id}",
        content="<p>Intro</p>{{media:fig}}<p>End</p>",
        featured_media={"slot": "hero"},
        body_media=["fig"],
        tags=[f"bump {uid}"],
        categories=[1],
        slug=f"bump-{uid}",
    )
    first = gw.put_draft(job_id, body)
    assert first.status_code == 201, first.get_json()
    post_id = first.get_json()["post_id"]
    assert _parent(gw, hero) == post_id and _parent(gw, fig) == post_id
    attach_rows = [r for r in gw.operations(job_id) if r["action"] == "attach"]
    assert sorted(r["slot"] for r in attach_rows) == ["fig", "hero"]
    assert all(r["state"] == "CONFIRMED" for r in attach_rows)
    before = gw.wp_post(post_id)

    assert gw.put_job(job_id, task_version=2).status_code == 200
    second = gw.put_draft(job_id, {**body, "excerpt": "Only the excerpt changed."})
    assert second.status_code == 201, second.get_json()
    assert second.get_json()["verification"]["ok"] is True
    after = gw.wp_post(post_id)
    assert after["excerpt"]["raw"] == "Only the excerpt changed."
    for name in ("featured_media", "tags", "categories", "slug", "meta"):
        assert after[name] == before[name], name
    assert after["content"]["raw"] == before["content"]["raw"]  # the body image stays
    assert f"wp-image-{fig}" in after["content"]["raw"]
    assert not [
        r for r in gw.operations(job_id) if r["action"] == "attach" and r["task_version"] == 2
    ]

    # A replaced image in a later version is attached too; the unchanged one is not resent.
    assert gw.put_job(job_id, task_version=3).status_code == 200
    new_fig = _media(gw, job_id, "fig", png_bytes((70, 80, 90), 3))
    assert new_fig != fig
    third = gw.put_draft(job_id, {**body, "excerpt": "Only the excerpt changed."})
    assert third.status_code == 201, third.get_json()
    assert _parent(gw, new_fig) == post_id
    v3 = [
        r["slot"]
        for r in gw.operations(job_id)
        if r["action"] == "attach" and r["task_version"] == 3
    ]
    assert v3 == ["fig"]


def test_changing_only_metadata_in_a_new_version_updates_the_attachment(gw):
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    image = png_bytes((90, 91, 92), 3)
    first = gw.put_media(job_id, "hero", image, "hero.png", alt_text="Old alt", title="Old")
    assert first.status_code == 201, first.get_json()
    media_id = first.get_json()["media_id"]
    assert gw.put_job(job_id, task_version=2).status_code == 200
    second = gw.put_media(
        job_id, "hero", image, "hero.png", alt_text="New alt", caption="A caption", title="Old"
    )
    assert second.status_code == 201, second.get_json()
    assert second.get_json()["media_id"] == media_id  # the same attachment, no upload
    assert gw.count_objects(op_key(job_id, "media", "hero", version=2)) == 0
    stored = gw.wp.get(
        f"{gw.wp_url}/wp-json/wp/v2/media/{media_id}", params={"context": "edit"}, timeout=30
    ).json()
    assert stored["alt_text"] == "New alt" and stored["caption"]["raw"] == "A caption"
    assert stored["title"]["raw"] == "Old"
    row = [r for r in gw.operations(job_id) if r["task_version"] == 2][0]
    assert row["receipt"]["metadata_ok"] is True and row["receipt"]["update_of"] == media_id
    replay = gw.put_media(
        job_id, "hero", image, "hero.png", alt_text="New alt", caption="A caption", title="Old"
    )
    assert replay.status_code == 200 and replay.headers["Idempotent-Replayed"] == "true"


def test_media_metadata_is_verified_and_repaired(gw):
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    hero = gw.put_media(
        job_id, "hero", png_bytes((5, 6, 7), 3), "hero.png", alt_text="Alt", caption="Cap"
    ).get_json()["media_id"]
    draft = gw.put_draft(job_id, draft_body(featured_media={"slot": "hero"}))
    assert draft.status_code == 201, draft.get_json()
    check = gw.verification(job_id).get_json()
    assert check["ok"] is True and check["fields"]["media_metadata"]["ok"] is True
    # the draft's answer verifies the same fields as GET /verification, metadata included
    answered = draft.get_json()["verification"]
    assert set(answered["fields"]) == set(check["fields"])
    assert answered["fields"]["media_metadata"] == check["fields"]["media_metadata"]
    drifted = gw.wp.post(
        f"{gw.wp_url}/wp-json/wp/v2/media/{hero}", json={"alt_text": "", "caption": "Cap"}
    )
    assert drifted.status_code == 200
    check = gw.verification(job_id).get_json()
    assert check["ok"] is False
    assert check["fields"]["media_metadata"]["actual"]["hero"]["alt_text"] == ""
    repaired = gw.client.post(f"/v1/jobs/{job_id}/repair", headers=gw.headers())
    assert repaired.status_code in (200, 201), repaired.get_json()
    assert repaired.get_json()["fixes"] == {"media_metadata": ["hero"]}
    assert gw.verification(job_id).get_json()["ok"] is True
    rows = [r for r in gw.operations(job_id) if r["action"] == "media_meta"]
    assert len(rows) == 1 and rows[0]["state"] == "CONFIRMED"
    again = gw.client.post(f"/v1/jobs/{job_id}/repair", headers=gw.headers())
    assert again.get_json()["fixes"] == {}  # nothing left to fix: no write


@both_transports
def test_a_deleted_image_is_uploaded_again_and_repair_says_it_cannot_restore_it(gw, transport):
    """Issue 28, proudcity/wp-proudcity#2184: an editor deletes the featured image from the
    media library. Repair cannot restore it and says so (409, nothing written); a new version
    with the same image uploads it again instead of reusing the deleted attachment."""
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    content = png_bytes((91, 92, 93), 3)
    old_id = gw.put_media(job_id, "hero", content, "hero.png").get_json()["media_id"]
    body = draft_body(title=f"Deleted image {job_id}", featured_media={"slot": "hero"})
    first = gw.put_draft(job_id, body)
    assert first.status_code == 201, first.get_json()
    post_id = first.get_json()["post_id"]
    gone = gw.wp.delete(f"{gw.wp_url}/wp-json/wp/v2/media/{old_id}", params={"force": "true"})
    assert gone.status_code == 200, gone.text
    assert gw.wp_post(post_id)["featured_media"] == 0
    assert gw.verification(job_id).get_json()["fields"]["featured_media"]["ok"] is False

    repaired = gw.client.post(f"/v1/jobs/{job_id}/repair", headers=gw.headers())
    assert repaired.status_code == 409 and problem_slug(repaired) == "repair-incomplete"
    [field] = repaired.get_json()["unfixable"]
    assert field["field"] == "featured_media" and str(old_id) in field["reason"]
    assert gw.wp_post(post_id)["featured_media"] == 0
    assert [r for r in gw.operations(job_id) if r["action"] == "repair"] == []

    assert gw.put_job(job_id, task_version=2).status_code == 200
    again = gw.put_media(job_id, "hero", content, "hero.png")
    assert again.status_code == 201 and "Idempotent-Replayed" not in again.headers
    new_id = again.get_json()["media_id"]
    assert new_id != old_id and gw.wp_media(new_id)["id"] == new_id
    second = gw.put_draft(job_id, body)
    assert second.status_code == 201, second.get_json()
    assert second.get_json()["verification"]["ok"] is True
    assert gw.wp_post(post_id)["featured_media"] == new_id


@both_transports
def test_a_version_for_a_post_in_the_trash_is_refused_before_any_write(gwp, proxy, transport):
    """Issue 28, pento/claudaborative-editing#27: an editor moved the post to the trash; the
    next version's draft is refused naming the trash (no tag created, nothing written), and
    goes through once the editor restored the post."""
    uid = uuid.uuid4().hex[:10]
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    first = gwp.put_draft(job_id, draft_body(title=f"Trash {job_id}"))
    assert first.status_code == 201, first.get_json()
    post_id = first.get_json()["post_id"]
    trashed = gwp.wp.delete(f"{gwp.wp_url}/wp-json/wp/v2/posts/{post_id}", timeout=30)
    assert trashed.status_code == 200 and gwp.wp_post(post_id)["status"] == "trash"

    assert gwp.put_job(job_id, task_version=2).status_code == 200
    tags = [f"trash tag {uid}"] if transport == "rest" else []  # XML-RPC creates no tags
    body = draft_body(title=f"Trash v2 {job_id}", tags=tags)
    proxy.reset_log()
    refused = gwp.put_draft(job_id, body)
    assert refused.status_code == 409 and problem_slug(refused) == "post-trashed"
    assert refused.get_json()["post_id"] == post_id and "trash" in refused.get_json()["detail"]
    assert call_count(proxy, transport, "write") == 0  # not one write reached WordPress
    live = gwp.wp_post(post_id)
    assert live["status"] == "trash" and live["title"]["raw"] == f"Trash {job_id}"
    assert [r["task_version"] for r in gwp.operations(job_id)] == [1]  # no v2 row, no term

    gwp.wp_update_post(post_id, {"status": "draft"})  # the editor restores it
    again = gwp.put_draft(job_id, body)
    assert again.status_code == 201, again.get_json()
    assert gwp.wp_post(post_id)["title"]["raw"] == f"Trash v2 {job_id}"
