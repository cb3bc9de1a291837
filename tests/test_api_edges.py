"""Requests the gateway answers without WordPress: authentication, roles, validation and job
rows. The tenant's site points at a port where nothing listens, so any WordPress call would
show up as a 503 instead of the expected answer."""

from __future__ import annotations

from support import draft_body
from support import metric_value
from support import new_job_id
from support import png_bytes
from support import problem_slug


def test_missing_and_wrong_tokens_are_401(offline_gw):
    job_id = new_job_id()
    client = offline_gw.client
    for headers in ({}, {"Authorization": "Bearer not-a-token"}, {"Authorization": "Basic x"}):
        answer = client.put(
            f"/v1/jobs/{job_id}", json={"site": "blog", "task_version": 1}, headers=headers
        )
        assert answer.status_code == 401
        assert answer.mimetype == "application/problem+json"
        assert problem_slug(answer) == "unauthenticated"
    assert client.get(f"/v1/jobs/{job_id}", headers=offline_gw.headers()).status_code == 404


def test_editor_token_cannot_write_a_draft(offline_gw):
    job_id = new_job_id()
    assert offline_gw.put_job(job_id).status_code == 201
    editor = offline_gw.make_token("editor")
    answer = offline_gw.put_draft(job_id, draft_body(), token=editor)
    assert answer.status_code == 403
    assert problem_slug(answer) == "forbidden"
    assert offline_gw.operations(job_id) == []
    # ... but may read the job
    job = offline_gw.client.get(f"/v1/jobs/{job_id}", headers=offline_gw.headers(editor))
    assert job.status_code == 200


def test_other_tenant_does_not_see_the_job(offline_gw):
    job_id = new_job_id()
    assert offline_gw.put_job(job_id).status_code == 201
    stranger = offline_gw.make_token("workflow", tenant="other")
    answer = offline_gw.client.get(f"/v1/jobs/{job_id}", headers=offline_gw.headers(stranger))
    assert answer.status_code == 404
    assert problem_slug(answer) == "job-not-found"


def test_job_put_is_idempotent_and_versioned(offline_gw):
    job_id = new_job_id()
    first = offline_gw.put_job(job_id, task_version=2)
    assert first.status_code == 201
    assert first.get_json()["task_version"] == 2
    again = offline_gw.put_job(job_id, task_version=2)
    assert again.status_code == 200
    assert again.get_json()["created_at"] == first.get_json()["created_at"]

    stale = offline_gw.put_job(job_id, task_version=1)
    assert stale.status_code == 409
    assert problem_slug(stale) == "stale-task-version"

    bumped = offline_gw.put_job(job_id, task_version=3)
    assert bumped.status_code == 200
    assert bumped.get_json()["task_version"] == 3


def test_job_on_unknown_site_is_422(offline_gw):
    job_id = new_job_id()
    answer = offline_gw.put_job(job_id, site="no-such-site")
    assert answer.status_code == 422
    assert answer.get_json()["errors"][0]["pointer"] == "/site"
    assert answer.get_json()["detail"].endswith("its sites: blog")  # issue 44: as doctor says
    assert (
        offline_gw.client.get(f"/v1/jobs/{job_id}", headers=offline_gw.headers()).status_code == 404
    )


def test_the_front_door_points_to_the_review_page_and_the_reference(offline_gw):
    """``GET /`` (issue 44: a bare 404 before): every link it gives answers."""
    answer = offline_gw.client.get("/")
    assert answer.status_code == 200
    links = answer.get_json()["links"]
    assert links["review"] == "/review" and links["openapi"] == "/openapi.json"
    for path in (links["review"], links["openapi"], links["health"]):
        assert offline_gw.client.get(path, follow_redirects=True).status_code == 200, path


def test_bad_draft_input_leaves_no_ledger_row(offline_gw):
    job_id = new_job_id()
    assert offline_gw.put_job(job_id).status_code == 201

    broken = offline_gw.put_draft(job_id, '{"title": "unterminated')
    assert broken.status_code == 400
    assert problem_slug(broken) == "invalid-json"
    assert broken.mimetype == "application/problem+json"

    unknown = offline_gw.put_draft(job_id, draft_body(zzz=1))
    assert unknown.status_code == 422
    assert problem_slug(unknown) == "validation-failed"
    assert [e["pointer"] for e in unknown.get_json()["errors"]] == ["/zzz"]

    wrong_type = offline_gw.put_draft(job_id, draft_body(title=42))
    assert wrong_type.status_code == 422
    assert "/title" in [e["pointer"] for e in wrong_type.get_json()["errors"]]

    missing = offline_gw.put_draft(job_id, {"title": "only a title"})
    assert missing.status_code == 422
    pointers = {e["pointer"] for e in missing.get_json()["errors"]}
    assert {"/content", "/excerpt", "/seo"} <= pointers

    nested = offline_gw.put_draft(job_id, draft_body(seo={"title": "x"}))
    assert nested.status_code == 422
    assert {"/seo/description", "/seo/focus_keyword"} <= {
        e["pointer"] for e in nested.get_json()["errors"]
    }

    assert offline_gw.operations(job_id) == []


def test_bad_path_identifiers_are_422(offline_gw):
    job_id = new_job_id()
    assert offline_gw.put_job(job_id).status_code == 201
    answer = offline_gw.put_media(job_id, "Bad Slot", b"\x89PNG\r\n\x1a\n")
    assert answer.status_code == 422
    assert answer.get_json()["errors"][0]["pointer"] == "/slot"
    answer = offline_gw.put_job("bad id with spaces")
    assert answer.status_code == 422
    assert offline_gw.operations(job_id) == []


def test_draft_for_unknown_job_is_404(offline_gw):
    answer = offline_gw.put_draft(new_job_id(), draft_body())
    assert answer.status_code == 404
    assert problem_slug(answer) == "job-not-found"


def test_metrics_expose_ledger_figures_without_credentials(offline_gw):
    job_id = new_job_id()
    assert offline_gw.put_job(job_id).status_code == 201
    refused = "gateway_unauthenticated_calls_total"
    scrape = offline_gw.client.get("/metrics").get_data(as_text=True)
    before = metric_value(scrape, refused, answer="refused")
    offline_gw.client.get("/v1/jobs", headers={"Authorization": "Bearer wrong"})
    answer = offline_gw.client.get("/metrics")
    assert answer.status_code == 200
    text = answer.get_data(as_text=True)
    # a 401 is counted in the metrics, not in the ledger (issue 29)
    assert metric_value(text, refused, answer="refused") == before + 1
    assert "gateway_unauthorized_calls_total 0.0" in text
    assert offline_gw.author["app_password"] not in text


def test_refusals_count_for_the_tenant_they_know_and_401s_only_in_metrics(offline_gw):
    from gateway.ledger import models
    from gateway.ledger.db import database
    from gateway.operator import report

    def counts() -> tuple[int, int, int]:
        with offline_gw.app.app_context(), database.connection_context():
            return (
                report.global_counters()["unauthorized_calls"],
                models.counter("unauthorized_calls", "acme"),
                models.counter("unauthorized_calls", "other"),
            )

    job_id = new_job_id()
    assert offline_gw.put_job(job_id).status_code == 201
    assert counts() == (0, 0, 0)
    client = offline_gw.client
    refused = "gateway_unauthenticated_calls_total"
    before = metric_value(client.get("/metrics").get_data(as_text=True), refused, answer="refused")
    assert client.get("/v1/jobs", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert counts() == (0, 0, 0)  # no valid token: no tenant, no ledger write (metrics only)
    editor = offline_gw.make_token("editor")
    assert offline_gw.put_draft(job_id, draft_body(), token=editor).status_code == 403
    assert counts() == (1, 1, 0)  # a valid acme token of the wrong role
    stranger = offline_gw.make_token("workflow", tenant="other")
    answer = client.get(f"/v1/jobs/{job_id}", headers=offline_gw.headers(stranger))
    assert answer.status_code == 404  # acme's job stays invisible to "other"...
    assert counts() == (2, 1, 1)  # ... but the attempt counts for "other"
    assert client.get(f"/v1/jobs/{new_job_id()}", headers=offline_gw.headers()).status_code == 404
    assert counts() == (2, 1, 1)  # a job nobody has is no refusal
    acme = client.get("/v1/report", headers=offline_gw.headers(editor)).get_json()
    assert acme["unauthorized_calls"] == 1
    offline_gw.app.config["GATEWAY"] = offline_gw.app.config["GATEWAY"].with_overrides(
        metrics_token="scrape-token"  # tenant names only behind the metrics token
    )
    scrape = {"Authorization": "Bearer scrape-token"}
    metrics = client.get("/metrics", headers=scrape).get_data(as_text=True)
    assert "gateway_unauthorized_calls_total 2.0" in metrics
    assert metric_value(metrics, refused, answer="refused") == before + 1
    assert 'gateway_tenant_unauthorized_calls_total{tenant="acme"} 1.0' in metrics
    assert 'gateway_tenant_unauthorized_calls_total{tenant="other"} 1.0' in metrics


LEFTOVER = "{{ $json.tag_name }}"  # n8n-io/n8n#18181: an expression n8n could not resolve


def test_a_template_leftover_in_any_text_for_wordpress_is_refused_before_anything(offline_gw):
    """Issue 44: term names, media alt text, caption and title, a named block's HTML and the
    validation route's images are guarded as the draft's title is: 422 template-leftover with
    the pointer, no ledger row. The site's address answers nothing, so a WordPress call would
    show as a 503, never a 422."""
    job_id = new_job_id()
    assert offline_gw.put_job(job_id).status_code == 201
    drafts = {
        "/tags/1": draft_body(tags=["news", LEFTOVER]),
        "/categories/0": draft_body(categories=[LEFTOVER]),
        "/categories/0/name": draft_body(categories=[{"name": LEFTOVER, "parent": 0}]),
    }
    for pointer, body in drafts.items():
        answer = offline_gw.put_draft(job_id, body)
        assert answer.status_code == 422 and problem_slug(answer) == "template-leftover", pointer
        assert [e["pointer"] for e in answer.get_json()["errors"]] == [pointer]
    for field in ("alt_text", "caption", "title"):
        answer = offline_gw.put_media(job_id, "hero", png_bytes(), **{field: LEFTOVER})
        assert problem_slug(answer) == "template-leftover", (field, answer.get_json())
        assert answer.get_json()["errors"][0]["pointer"] == f"/{field}"
    block = offline_gw.client.put(
        f"/v1/jobs/{job_id}/blocks/cta",
        json={"html": f"<p>{LEFTOVER}</p>"},
        headers=offline_gw.headers(),
    )
    assert problem_slug(block) == "template-leftover", block.get_json()
    checked = offline_gw.client.post(
        "/v1/articles/validate",
        json={"draft": draft_body(), "media": [{"slot": "hero", "alt_text": LEFTOVER}]},
        headers=offline_gw.headers(),
    )
    assert problem_slug(checked) == "template-leftover", checked.get_json()
    assert checked.get_json()["errors"][0]["pointer"] == "/media/0/alt_text"
    assert offline_gw.operations(job_id) == []
