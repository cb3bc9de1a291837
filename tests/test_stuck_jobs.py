"""No job left stuck or half-done after a crash, an outage or bad input (issue 30), on the
gateway's side; ``tests/test_n8n_real.py`` drives the same rows through a real n8n.

* a draft confirmed by reconciliation finishes what its request would have done: its images
  are attached to the post (read in WordPress), and a verified job without an approval
  request is resumable, not done;
* idle time counts from the job's last client request: ``/recover`` and the sweep, which
  write to the job's ledger rows, do not make a stopped job look busy;
* WordPress down (no connection) is 503 ``wordpress-unavailable`` saying so, not 409
  "without the companion plugin's guard";
* ``POST /v1/articles/validate`` names every problem of an article before anything is
  written; a version the gateway refused for its content goes to a person, not to resume.

"A while ago" is made by moving ``job.last_request_at`` back in the ledger, never by sleeping.
"""

from __future__ import annotations

import base64
import datetime as dt

import pytest
from support import TENANT
from support import draft_body
from support import free_port
from support import new_job_id
from support import op_key
from support import png_bytes
from support import problem_slug

from gateway.jobs import records
from gateway.ledger import db
from gateway.ledger.db import database
from gateway.ledger.models import Job
from gateway.ledger.models import Operation
from gateway.recovery import reconciliation
from gateway.tenancy import sites
from gateway_tools.fault_proxy import Fault

MEDIA = r"^/wp-json/wp/v2/media/?$"
POSTS = r"^/wp-json/wp/v2/posts/?$"
LOOKUP = r"^/wp-json/publishing-gateway/v1/objects"


def in_ledger(gw, function, *args):
    with gw.app.app_context(), database.connection_context():
        return function(*args)


def last_request_ago(gw, job_id: str, seconds: float) -> None:
    """The job's last client request was ``seconds`` ago (nothing else is moved)."""

    def move():
        past = db.utcnow() - dt.timedelta(seconds=seconds)
        Job.update(last_request_at=past).where(Job.tenant == TENANT, Job.job_id == job_id).execute()

    in_ledger(gw, move)


def resume(gw, job_id: str) -> dict:
    answer = gw.client.post(f"/v1/jobs/{job_id}/resume", json={}, headers=gw.headers())
    assert answer.status_code == 200, answer.get_json()
    return answer.get_json()


def put_resume_point(gw, job_id: str, article: dict | None = None, images=None):
    answer = gw.client.put(
        f"/v1/jobs/{job_id}/resume-point",
        json={
            "article": article or {"title": "Resumable", "content": "<p>x</p>"},
            "images": images or [{"slot": "hero", "url": "https://images.example/hero.png"}],
        },
        headers=gw.headers(),
    )
    assert answer.status_code in (200, 201), answer.get_json()


def with_images_body(job_id: str) -> dict:
    return draft_body(
        title=f"Stuck {job_id}",
        content="<p>Intro</p>\n{{media:diagram}}\n<p>End</p>",
        featured_media={"slot": "hero"},
        body_media=["diagram"],
    )


# --------------------------------------------------------------------------- row 1


@pytest.mark.wordpress
def test_a_draft_confirmed_by_recover_attaches_its_images_and_is_resumable(gwp, proxy):
    """The draft's answer is lost after WordPress saved it and the run stops there (the
    gateway's own lookup fails too): ``/recover`` finds the post, attaches both images to it
    and names ``request_approval``; ``/resume`` resumes the verified job instead of ``none``."""
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    put_resume_point(gwp, job_id)
    media_ids = {}
    for slot, colour in (("hero", (200, 30, 30)), ("diagram", (30, 200, 30))):
        answer = gwp.put_media(job_id, slot, png_bytes(colour, size=4), f"{slot}.png")
        assert answer.status_code == 201, answer.get_json()
        media_ids[slot] = answer.get_json()["media_id"]
    proxy.add_fault(Fault(kind="drop_response", method="POST", path=POSTS, times=1))
    proxy.add_fault(Fault(kind="status_without_forward", status=503, path=LOOKUP, times=1))
    lost = gwp.put_draft(job_id, with_images_body(job_id))
    assert lost.status_code == 503 and problem_slug(lost) == "outcome-unknown", lost.get_json()
    assert not any(gwp.wp_media(i)["post"] for i in media_ids.values())  # unattached

    report = gwp.recover(job_id).get_json()
    draft = next(e for e in report["completed"] if e["action"] == "draft")
    post_id = draft["remote_id"]
    assert draft["reconciled"] is True
    # what the draft request would have done: both images attached to the post, in WordPress
    assert {slot: gwp.wp_media(i)["post"] for slot, i in media_ids.items()} == {
        "hero": post_id,
        "diagram": post_id,
    }
    rows = {r["operation_key"]: r["state"] for r in gwp.operations(job_id)}
    for slot in media_ids:
        assert rows[op_key(job_id, "attach", slot)] == "CONFIRMED"
    assert report["status"] == "completed"
    assert "request_approval" in report["next_allowed_actions"], report
    assert proxy.count(method="POST", path=POSTS, forwarded=True) == 1  # one post

    # verified, no approval request: not done for the recovery workflow
    assert gwp.job(job_id).get_json()["phase"] == "verified"
    last_request_ago(gwp, job_id, 3600)
    resumed = resume(gwp, job_id)
    assert resumed["action"] == "resume", resumed
    listed = gwp.client.get("/v1/jobs?unfinished=true", headers=gwp.headers()).get_json()
    assert job_id in [j["job_id"] for j in listed["jobs"]]


# --------------------------------------------------------------------------- rows 2 and 3


def an_unknown_upload_wordpress_does_not_hold(gwp, proxy, job_id: str) -> bytes:
    """An upload sent whose outcome is unknown (a 502 page from in front of WordPress, a
    proxy whose upstream went away) and that WordPress never received: its row is UNKNOWN."""
    image = png_bytes((10, 10, 250), size=4)
    proxy.add_fault(Fault(kind="status_without_forward", status=502, path=MEDIA, times=1))
    answer = gwp.put_media(job_id, "hero", image, "hero.png")
    assert answer.status_code == 503 and problem_slug(answer) == "outcome-unknown"
    rows = {r["operation_key"]: r["state"] for r in gwp.operations(job_id)}
    assert rows[op_key(job_id, "media", "hero")] == "UNKNOWN"
    return image


@pytest.mark.wordpress
def test_idle_time_counts_from_the_last_client_request_not_from_recover_or_the_sweep(gwp, proxy):
    job_id = new_job_id()
    gwp.put_job(job_id)
    put_resume_point(gwp, job_id)
    an_unknown_upload_wordpress_does_not_hold(gwp, proxy, job_id)
    config = gwp.app.config["GATEWAY"]
    last_request_ago(gwp, job_id, config.attention_after + 60)

    # the recovery workflow's own /recover and the sweep look the upload up: absent, and the
    # row is written again (UNKNOWN, updated now); neither is a client request
    report = gwp.recover(job_id).get_json()
    assert [e.get("absent") for e in report["unknown"]] == [True], report
    assert report["next_allowed_actions"] == ["create_draft", "upload_media"]
    counts = in_ledger(gwp, reconciliation.sweep, config, 0)
    assert counts["absent"] == 1
    # the sweep's own one-hour notice fires: idle since the last client request
    assert counts["notifications"]["attention_decided"] == 1
    assert resume(gwp, job_id)["action"] == "resume"  # not "wait ... 0 s ago"

    # a client request (the resumed run saving its resume point) counts
    put_resume_point(gwp, job_id)
    waiting = resume(gwp, job_id)
    assert waiting["action"] == "wait" and waiting["retry_after"] > 0, waiting


@pytest.mark.wordpress
def test_wordpress_down_is_503_saying_so_not_409_and_nothing_is_sent(gwp, proxy):
    job_id = new_job_id()
    gwp.put_job(job_id)
    image = an_unknown_upload_wordpress_does_not_hold(gwp, proxy, job_id)
    sites.forget_companion()
    gwp.add_site(f"http://127.0.0.1:{free_port()}")  # nginx stopped: connection refused
    down = gwp.put_media(job_id, "hero", image, "hero.png")
    problem = down.get_json()
    assert down.status_code == 503 and problem_slug(down) == "wordpress-unavailable", problem
    assert "cannot be reached" in problem["detail"] and "guard" not in problem["detail"]
    assert down.headers["Retry-After"]
    report = gwp.recover(job_id).get_json()
    assert report["next_allowed_actions"] == ["retry_later"]  # not "absent": not asked
    assert [e["reason"] for e in report["unknown"]] == ["WordPress could not be asked"]

    gwp.add_site(proxy.url)  # back: the next identical request looks up, then sends once
    sites.forget_companion()
    again = gwp.put_media(job_id, "hero", image, "hero.png")
    assert again.status_code == 201, again.get_json()
    assert gwp.count_objects(op_key(job_id, "media", "hero"), "attachment") == 1
    assert proxy.count(method="POST", path=MEDIA, forwarded=True) == 1


# --------------------------------------------------------------------------- bad input


SAMPLE_PNG = base64.b64encode(png_bytes((1, 2, 3), size=3)).decode()


def validate(gw, body) -> tuple[int, dict]:
    answer = gw.client.post("/v1/articles/validate", json=body, headers=gw.headers())
    return answer.status_code, answer.get_json()


def test_validate_article_passes_a_good_article_and_writes_nothing(offline_gw):
    body = {
        "draft": draft_body(
            content="<p>a</p>{{media:diagram}}",
            featured_media={"slot": "hero"},
            body_media=["diagram", "ledger"],
        ),
        "media": [
            {"slot": "hero", "content_base64": SAMPLE_PNG, "filename": "hero.png"},
            {"slot": "diagram", "url": "https://images.example/diagram.jpg"},
            {"slot": "ledger"},  # uploaded before (a resumed run): referenced only
        ],
    }
    status, answer = validate(offline_gw, body)
    assert status == 200, answer
    assert answer["draft"] == {
        "featured_slot": "hero",
        "body_media": ["diagram", "ledger"],
        "placeholders": ["diagram"],
    }
    assert [(m["slot"], m["source"]) for m in answer["media"]] == [
        ("hero", "content_base64"),
        ("diagram", "url"),
        ("ledger", "none"),
    ]
    assert answer["media"][0]["mime_type"] == "image/png"
    listed = offline_gw.client.get("/v1/jobs", headers=offline_gw.headers()).get_json()
    assert listed["jobs"] == []
    assert in_ledger(offline_gw, lambda: Operation.select().count()) == 0


def test_validate_article_names_every_problem_before_any_upload(offline_gw):
    corrupt = base64.b64encode(base64.b64decode(SAMPLE_PNG)[:40] + b"\x00" * 30).decode()
    body = {
        "draft": draft_body(
            title="{{ $json.title }}",
            content="<p>a</p>{{media:nope}} {{media:diagram}}",
            featured_media={"slot": "hero"},
            body_media=["diagram"],
        ),
        "media": [
            {"slot": "hero", "content_base64": corrupt},
            {"slot": "diagram", "content_base64": "not base64!"},
            {"slot": "gif", "content_base64": base64.b64encode(b"GIF89a-not-really").decode()},
            {"slot": "text", "content_base64": base64.b64encode(b"plain text").decode()},
            {"slot": "url", "url": "ftp://user@images.example/x.png"},
        ],
    }
    status, problem = validate(offline_gw, body)
    assert status == 422 and problem["type"].endswith("/validation-failed"), problem
    found = {(e["pointer"], e["problem"]) for e in problem["errors"]}
    assert found == {
        ("/draft/title", "template-leftover"),
        ("/draft/content", "validation-failed"),  # {{media:nope}}: no such body image
        ("/media/0/content_base64", "image-unreadable"),
        ("/media/1/content_base64", "validation-failed"),
        ("/media/2/content_base64", "image-unreadable"),
        ("/media/3/content_base64", "unsupported-media-type"),
        ("/media/4/url", "validation-failed"),
    }, problem["errors"]
    assert "nothing was written" in problem["detail"]
    # a slot the draft names that is not among the images, a slot given twice
    status, problem = validate(
        offline_gw,
        {
            "draft": draft_body(featured_media={"slot": "missing"}, body_media=["a"]),
            "media": [{"slot": "a"}, {"slot": "a"}],
        },
    )
    assert status == 422
    assert {(e["pointer"], e["problem"]) for e in problem["errors"]} == {
        ("/draft/featured_media/slot", "validation-failed"),
        ("/media/1/slot", "validation-failed"),
    }
    # a malformed draft: its schema errors and its leftovers in one answer
    status, problem = validate(
        offline_gw, {"draft": {"title": "{{ $json.t }}", "seo": {}}, "media": []}
    )
    pointers = {e["pointer"] for e in problem["errors"]}
    assert status == 422 and {"/draft/content", "/draft/excerpt", "/draft/title"} <= pointers
    # a member whose name is a digit outside ASCII (the fuzzer's "²") is a name, not an index
    status, problem = validate(offline_gw, {"draft": {**draft_body(), "²": None}, "media": []})
    assert status == 422 and [e["pointer"] for e in problem["errors"]] == ["/draft/²"], problem
    assert in_ledger(offline_gw, lambda: Job.select().count() + Operation.select().count()) == 0


def test_a_version_refused_for_its_content_goes_to_a_person_not_to_resume(offline_gw):
    gw = offline_gw
    job_id = new_job_id()
    gw.put_job(job_id)
    put_resume_point(gw, job_id)
    refused = gw.put_draft(job_id, draft_body(title="{{ $json.title }}"))
    assert refused.status_code == 422 and problem_slug(refused) == "template-leftover"
    # at once: waiting cannot make the same article pass
    answer = resume(gw, job_id)
    assert answer["action"] == "needs_person", answer
    assert "template" in answer["reason"].lower() and "/title" in answer["reason"]
    assert answer["notification"]["event"] == "needs_attention"
    assert resume(gw, job_id)["action"] == "needs_person"  # decided once, answered again
    # a new run saves its resume point (the article corrected): resumable again, later
    put_resume_point(gw, job_id, {"title": "Corrected", "content": "<p>x</p>"})
    assert resume(gw, job_id)["action"] == "wait"
    last_request_ago(gw, job_id, 3600)
    assert resume(gw, job_id)["action"] == "resume"


def test_unfinished_lists_what_a_run_still_has_to_do(offline_gw):
    gw = offline_gw
    names = {name: new_job_id() for name in ("running", "verified", "pending", "cancelled")}
    for job_id in names.values():
        gw.put_job(job_id)

    def phases():
        for name, phase in (("verified", "verified"), ("pending", "approval_pending")):
            records.advance_phase(records.get_job(TENANT, names[name]), phase, post_id=7)
        records.cancel_job(records.get_job(TENANT, names["cancelled"]), "test")

    in_ledger(gw, phases)
    listed = gw.client.get("/v1/jobs?unfinished=true", headers=gw.headers()).get_json()
    assert [j["job_id"] for j in listed["jobs"]] == [names["running"], names["verified"]]
    every = gw.client.get("/v1/jobs", headers=gw.headers()).get_json()
    assert len(every["jobs"]) == 4
    bad = gw.client.get("/v1/jobs?unfinished=yes", headers=gw.headers())
    assert bad.status_code == 422 and bad.get_json()["errors"][0]["pointer"] == "/unfinished"
