"""Objects deleted in WordPress behind the gateway's back (issue 41, item 7): repair names an
image whose attachment was deleted (slot, media id, the next step) with 409
``repair-incomplete``, never a 500."""

from __future__ import annotations

import pytest
from support import draft_body
from support import new_job_id
from support import png_bytes
from support import problem_slug


def _post(gw, path: str, body: dict | None = None, token: str | None = None):
    return gw.client.post(path, json={} if body is None else body, headers=gw.headers(token))


def _delete_in_wordpress(gw, kind: str, object_id: int) -> None:
    gone = gw.wp.delete(
        f"{gw.wp_url}/wp-json/wp/v2/{kind}/{object_id}", params={"force": "true"}, timeout=30
    )
    assert gone.status_code == 200, gone.text


def _job_with_images(gw, job_id: str) -> tuple[dict, dict, int]:
    """A job with a featured image ``hero`` and a body image ``fig`` (each with alt text) and a
    draft using both. Returns ``(draft request, {slot: media_id}, post_id)``."""
    assert gw.put_job(job_id).status_code == 201
    media = {}
    for slot, rgb in (("hero", (41, 7, 1)), ("fig", (41, 7, 2))):
        answer = gw.put_media(
            job_id, slot, png_bytes(rgb, 3), f"{slot}.png", alt_text=f"{slot} alt"
        )
        assert answer.status_code == 201, answer.get_json()
        media[slot] = answer.get_json()["media_id"]
    body = draft_body(
        title=f"Deleted behind the gateway {job_id}",
        content="<p>Before.</p>{{media:fig}}<p>After.</p>",
        featured_media={"slot": "hero"},
        body_media=["fig"],
    )
    drafted = gw.put_draft(job_id, body)
    assert drafted.status_code == 201, drafted.get_json()
    return body, media, drafted.get_json()["post_id"]


@pytest.mark.wordpress
def test_repair_names_an_image_deleted_in_wordpress_and_the_way_back(gw):
    """The body image's attachment is deleted and the featured image's alt text drifted:
    repair writes the hero's alt text back, names the deleted image (slot, media id, what to
    do) in a 409 ``repair-incomplete``, and no row is FAILED. Doing what it says (a new
    task_version, the image uploaded again, the draft sent again) makes the job verify."""
    job_id = new_job_id()
    body, media, post_id = _job_with_images(gw, job_id)
    drifted = gw.wp.post(
        f"{gw.wp_url}/wp-json/wp/v2/media/{media['hero']}", json={"alt_text": ""}, timeout=30
    )
    assert drifted.status_code == 200, drifted.text
    _delete_in_wordpress(gw, "media", media["fig"])

    answer = _post(gw, f"/v1/jobs/{job_id}/repair")
    assert answer.status_code == 409, answer.get_json()
    problem = answer.get_json()
    assert problem_slug(answer) == "repair-incomplete" and problem["post_id"] == post_id
    [gone] = problem["unfixable"]
    assert gone["field"] == "media_metadata" and gone["slot"] == "fig"
    assert gone["media_id"] == media["fig"]
    assert f"attachment {media['fig']} of slot fig" in gone["reason"]
    assert "new task_version" in gone["reason"] and gone["reason"] in problem["detail"]
    assert problem["fixes"] == ["media_metadata"]  # the hero's alt text was written back
    assert gw.wp_media(media["hero"])["alt_text"] == "hero alt"
    assert [r["state"] for r in gw.operations(job_id) if r["state"] == "FAILED"] == []
    assert gw.job(job_id).get_json()["status"] != "failed"

    assert gw.put_job(job_id, task_version=2).status_code == 200
    again = gw.put_media(job_id, "fig", png_bytes((41, 7, 2), 3), "fig.png", alt_text="fig alt")
    assert again.status_code == 201, again.get_json()
    assert again.get_json()["media_id"] != media["fig"]
    redrafted = gw.put_draft(job_id, body)
    assert redrafted.status_code == 201, redrafted.get_json()
    assert redrafted.get_json()["verification"]["ok"] is True
