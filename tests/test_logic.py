"""Fast tests of pure logic: no WordPress, no ledger, no network. The suite against the real
test WordPress stays the judge of behaviour; these pin down the rules each piece applies."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest
import requests
from PIL import Image
from support import JPEG_BYTES
from support import png_bytes

from gateway.actions import media
from gateway.actions import repair
from gateway.core import exceptions as exc
from gateway.core import states
from gateway.jobs import checkpoints
from gateway.jobs import records
from gateway.ledger.models import Job
from gateway.ledger.models import Operation
from gateway.ledger.models import Review
from gateway.operations import block_markers
from gateway.operations import registry
from gateway.operations import verification
from gateway.recovery import reconciliation
from gateway.wordpress import SEO_META
from gateway.wordpress import client as wp_client
from gateway.wordpress import errors as wp_errors

SEO = {"title": "SEO title", "description": "SEO description", "focus_keyword": "kw"}


def _receipt(content: str = "<p>Body</p>") -> dict:
    base = {
        "title": "Title",
        "content": content,
        "excerpt": "Excerpt",
        "featured_media": 7,
        "status": "draft",
        "seo": dict(SEO),
    }
    sent = {"title": "Title", "content": content, "excerpt": "Excerpt", "seo": dict(SEO)}
    return {"baseline": base, "sent": sent, "expected": {"featured_media": 7, "body_media": []}}


def _live(**changes) -> dict:
    post = {
        "id": 11,
        "title": {"raw": "Title"},
        "content": {"raw": "<p>Body</p>"},
        "excerpt": {"raw": "Excerpt"},
        "featured_media": 7,
        "status": "draft",
        "meta": {key: SEO[name] for name, key in SEO_META.items()},
    }
    post.update(changes)
    return post


# --------------------------------------------------------------------------- verification


def test_compare_ok_when_the_live_post_matches_the_baseline():
    result = verification.compare(_receipt(), _live(), companion_present=True)
    assert result["ok"] is True and result["post_id"] == 11
    assert all(field["ok"] for field in result["fields"].values())


def test_compare_reports_drift_field_by_field():
    live = _live(title={"raw": ""}, featured_media=0)
    result = verification.compare(_receipt(), live, companion_present=True)
    assert result["ok"] is False
    failed = sorted(k for k, f in result["fields"].items() if f["ok"] is False)
    assert failed == ["featured_media", "title"]
    assert result["fields"]["title"]["reason"] == "WordPress holds an empty value"


def test_compare_ignores_gateway_blocks_and_cannot_check_seo_without_the_companion():
    live = _live(content={"raw": block_markers.with_block("<p>Body</p>", "promo", "<b>x</b>")})
    result = verification.compare(_receipt(), live, companion_present=False)
    assert result["fields"]["content"]["ok"] is True
    assert result["fields"]["seo.title"]["ok"] is None
    assert result["ok"] is None  # nothing failed, but not everything could be checked


def test_compare_expects_publish_once_published():
    result = verification.compare(_receipt(), _live(), True, expected_status="publish")
    assert result["fields"]["status"] == {"expected": "publish", "actual": "draft", "ok": False}


# --------------------------------------------------------------------------- repair


def test_repair_fixes_only_the_failed_fields_and_keeps_live_blocks():
    receipt = _receipt()
    live_content = block_markers.with_block("<p>Edited</p>", "promo", "<b>x</b>")
    meta = {key: SEO[name] for name, key in SEO_META.items()} | {"rank_math_title": ""}
    live = _live(title={"raw": "Other"}, content={"raw": live_content}, meta=meta)
    result = verification.compare(receipt, live, companion_present=True)
    fixes = repair.fixes_for(receipt, live, result)
    assert sorted(fixes) == ["content", "meta", "title"]
    assert fixes["title"] == "Title"
    assert fixes["meta"] == {"rank_math_title": "SEO title"}
    assert fixes["content"].startswith("<p>Body</p>")
    assert block_markers.has_block(fixes["content"], "promo", block_markers.html_digest("<b>x</b>"))


def test_repair_finds_nothing_to_fix_on_a_verified_post():
    result = verification.compare(_receipt(), _live(), companion_present=True)
    assert repair.fixes_for(_receipt(), _live(), result) == {}


# --------------------------------------------------------------------------- blocks


def test_with_block_appends_then_replaces_in_place_and_drops_extra_copies():
    once = block_markers.with_block("<p>A</p>", "promo", "<i>1</i>")
    assert once.startswith("<p>A</p>\n\n<!-- gateway:block name=promo digest=")
    twice = block_markers.with_block(
        once + "\n\n" + block_markers.render("promo", "<i>old</i>"), "promo", "<i>2</i>"
    )
    assert [b["name"] for b in block_markers.blocks_in(twice)] == ["promo"]
    assert block_markers.has_block(twice, "promo", block_markers.html_digest("<i>2</i>"))
    assert not block_markers.has_block(twice, "promo", block_markers.html_digest("<i>1</i>"))
    assert block_markers.strip_blocks(twice) == "<p>A</p>"


def test_block_names_with_double_dashes_survive_kses():
    content = block_markers.with_block("", "a--b", "<i>x</i>")
    assert "name=a%2D%2Db " in content and "--b" not in content.replace("-->", "")
    assert block_markers.has_block(content, "a--b", block_markers.html_digest("<i>x</i>"))


# --------------------------------------------------------------------------- checkpoints


@pytest.mark.parametrize(
    "data, pointers",
    [
        ({"password": "x"}, ["/password"]),
        ({"authToken": "x", "access_token": "y"}, ["/authToken", "/access_token"]),
        ({"usage": {"prompt_tokens": 12}}, []),
        ({"note": "abcd EFGH ijkl mnop qrst uv12"}, ["/note"]),
        ({"note": "that will also make some more"}, []),
        ({"items": ["ok", "sk-abcdefghijkl"]}, ["/items/1"]),
        ({"header": "Bearer abcdefghijk"}, ["/header"]),
        ({"cfg": "password=hunter2"}, ["/cfg"]),
    ],
)
def test_secret_detection_in_checkpoint_data(data, pointers):
    assert [f["pointer"] for f in checkpoints.find_secrets(data)] == pointers


# --------------------------------------------------------------------------- media


def _pillow_image(kind: str) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (3, 3), (10, 200, 30)).save(out, format=kind)
    return out.getvalue()


@pytest.mark.parametrize(
    "content, mime",
    [
        (png_bytes(), "image/png"),
        (JPEG_BYTES, "image/jpeg"),
        (_pillow_image("GIF"), "image/gif"),
        (_pillow_image("WEBP"), "image/webp"),
    ],
)
def test_media_type_is_sniffed_from_the_bytes(content, mime):
    assert media.sniff(content)[0] == mime


def test_an_image_cut_off_after_its_header_is_unreadable():
    with pytest.raises(exc.ImageUnreadable):
        media.sniff(png_bytes()[:40])


def test_media_that_is_no_image_is_refused_and_names_are_made_safe():
    with pytest.raises(exc.UnsupportedMediaType):
        media.sniff(b"<?php echo 1; ?>")
    assert media.safe_filename("Héro image.PNG.exe", "hero", "png") == "H-ro-image-PNG.png"
    assert media.safe_filename(None, "hero", "jpg") == "hero.jpg"


# --------------------------------------------------------------------------- WordPress errors


def _response(status: int, body: bytes = b"", headers: dict | None = None) -> requests.Response:
    response = requests.Response()
    response.status_code = status
    response._content = body
    response.reason = "Reason"
    response.headers.update(headers or {})
    return response


def _wp_error(code: str, **data) -> bytes:
    return json.dumps({"code": code, "message": "no", "data": {"status": 0, **data}}).encode()


@pytest.mark.parametrize(
    "status, body, cls, definite",
    [
        (401, _wp_error("incorrect_password"), wp_errors.WordPressAuthError, True),
        (403, _wp_error("rest_cannot_create"), wp_errors.WordPressAuthError, True),
        (404, _wp_error("rest_post_invalid_id"), wp_errors.WordPressNotFound, True),
        (400, _wp_error("rest_invalid_param"), wp_errors.WordPressRefused, True),
        (500, _wp_error("rest_upload_sideload_error"), wp_errors.WordPressRefused, True),
        (500, _wp_error("internal_server_error"), wp_errors.WordPressOutcomeUnknown, False),
        (503, _wp_error("maintenance"), wp_errors.WordPressUnavailable, False),
        (403, b"<html><title>Blocked</title></html>", wp_errors.UpstreamRefused, False),
        (502, b"", wp_errors.WordPressOutcomeUnknown, False),
    ],
)
def test_wordpress_error_mapping(status, body, cls, definite):
    error = wp_client.error_for("POST", "http://wp/wp-json/wp/v2/posts", _response(status, body))
    assert type(error) is cls and error.definite is definite and error.status == status


def test_duplicate_and_throttle_carry_their_facts():
    body = _wp_error("gateway_duplicate_operation", existing_id=42)
    duplicate = wp_client.error_for("POST", "u", _response(409, body))
    assert isinstance(duplicate, wp_errors.WordPressDuplicate) and duplicate.existing_id == 42
    throttle = _response(429, _wp_error("rest_throttled"), {"Retry-After": "7"})
    throttled = wp_client.error_for("POST", "u", throttle)
    assert isinstance(throttled, wp_errors.WordPressUnavailable) and throttled.retry_after == 7


def test_a_php_notice_before_the_json_is_parsed_leniently():
    assert wp_client.parse_json_lenient('<b>Notice</b>: x\n{"id": 3}') == {"id": 3}


# --------------------------------------------------------------------------- lookup batching


def test_lookup_batches_by_count_and_by_url_length():
    keys = [f"acme/job-{i}/v1/draft" for i in range(250)]
    assert [len(b) for b in wp_client.lookup_batches(keys)] == [100, 100, 50]
    long_keys = ["k" * 2500 for _ in range(5)]
    assert [len(b) for b in wp_client.lookup_batches(long_keys)] == [2, 2, 1]
    assert wp_client.lookup_batches(["x" * 9000]) == [["x" * 9000]]
    assert wp_client.lookup_batches([]) == []


# --------------------------------------------------------------------------- job status, next steps


def _job(phase=None, cancelled=False, version=1) -> Job:
    return Job(tenant="acme", job_id="J", site="blog", task_version=version, phase=phase,
               cancelled=cancelled)  # fmt: skip


def _row(state: str, version: int = 1) -> Operation:
    return Operation(operation_key=f"k-{state}", action="draft", state=state, task_version=version)


@pytest.mark.parametrize(
    "job, rows, reviews, status",
    [
        (_job(), [], [], "in_progress"),
        (_job("verified"), [_row("CONFIRMED")], [], "completed"),
        (_job("published"), [_row("CONFIRMED")], [], "completed"),
        (_job("draft_confirmed"), [_row("CONFIRMED")], [], "in_progress"),
        (_job(), [_row("FAILED")], [], "failed"),
        (_job(), [_row("UNKNOWN"), _row("FAILED")], [], "unknown"),
        (_job(), [_row("SENT")], [], "unknown"),
        (_job(version=2), [_row("UNKNOWN", version=1)], [], "in_progress"),  # old version
        (_job(), [_row("UNKNOWN")], [Review(kind="multiple_objects")], "needs_review"),
        (_job(cancelled=True), [_row("UNKNOWN")], [Review()], "cancelled"),
    ],
)
def test_job_status_is_derived_from_the_ledger(job, rows, reviews, status):
    assert records.status_of(job, rows, reviews) == status


def _report(completed=(), failed=(), unknown=(), needs_review=()) -> dict:
    return {
        "completed": list(completed),
        "failed": list(failed),
        "unknown": list(unknown),
        "needs_review": list(needs_review),
    }


ABSENT_MEDIA = {"action": "media", "absent": True}
ABSENT_BLOCK = {"action": "block", "absent": True}
IN_FLIGHT = {"action": "draft", "reason": "in flight"}

# Every job state -> next_allowed_actions.
NEXT_ACTIONS = [
    # (job, report, expected)
    (_job(), _report(), ["create_draft", "upload_media"]),
    (_job("sources_collected"), _report(), ["create_draft", "upload_media"]),
    (_job("images_prepared"), _report(), ["create_draft", "upload_media"]),
    (_job("draft_confirmed"), _report(), ["repair", "verify"]),
    (_job("verified"), _report(), ["request_approval"]),
    (_job("approval_pending"), _report(), ["publish"]),
    (_job("scheduled"), _report(), ["none"]),  # WordPress publishes it at its time
    (_job("published"), _report(), ["none"]),
    (_job(version=2), _report(), ["create_draft", "upload_media"]),  # a bump: draft again
    (_job(cancelled=True), _report(needs_review=[{}]), ["none"]),
    (_job("verified"), _report(needs_review=[{"action": "draft"}]), ["editor_review"]),
    (_job("verified"), _report(unknown=[IN_FLIGHT, ABSENT_MEDIA]), ["retry_later"]),
    (_job(), _report(unknown=[ABSENT_MEDIA]), ["create_draft", "upload_media"]),
    (_job("verified"), _report(unknown=[ABSENT_BLOCK]), ["put_block", "request_approval"]),
    (_job("verified"), _report(failed=[{"action": "block"}]), ["none"]),
    (_job(), _report(failed=[{}], unknown=[ABSENT_MEDIA]), ["upload_media"]),
]


@pytest.mark.parametrize("job, report, expected", NEXT_ACTIONS)
def test_next_allowed_actions_for_every_job_state(job, report, expected):
    assert reconciliation.next_actions(job, report) == expected


def test_the_table_covers_every_phase_and_every_status():
    phases = {records.stage(job) for job, _, _ in NEXT_ACTIONS}
    assert phases == {states.DRAFTING, *states.GATEWAY_PHASES}
    kinds = {"cancelled", "needs_review", "unknown", "failed"}
    seen = set()
    for job, report, _ in NEXT_ACTIONS:
        seen |= {"cancelled"} if job.cancelled else set()
        seen |= {k for k in ("needs_review", "unknown", "failed") if report[k]}
    assert kinds <= seen


# --------------------------------------------------------------------------- registry, imports


def test_every_action_is_registered_with_a_recovery_kind_and_a_step():
    registered = {a.name: a for a in registry.all_actions()}
    lookups = {"media", "draft", "block", "repair", "publish", "attach", "unschedule"}
    agent_inputs = {"tool_result", "mcp_approval_result", "computer_use_approval_result"}
    workers = agent_inputs | {"session_cancel", "follow_up"}
    assert set(registered) == lookups | workers | {"term", "media_meta", "notify"}
    for name in lookups:
        action = registered[name]
        assert action.recovery == registry.LOOKUP and action.scope == registry.JOB
        assert action.step and callable(action.send) and callable(action.rebuild)
    term, media_meta = registered["term"], registered["media_meta"]
    assert term.recovery == registry.LOOKUP and term.scope == registry.SITE  # found by name
    assert media_meta.recovery == registry.RESEND and media_meta.scope == registry.JOB
    assert registered["unschedule"].resend_if_absent and registered["publish"].sweep_pass
    for name in workers:  # resent with the same key by the agent worker
        action = registered[name]
        assert action.recovery == registry.RESEND and action.scope == registry.WORKER
    assert sorted(registry.worker_actions()) == sorted(workers)
    notify = registered["notify"]  # its own table; resent with the same key by the sweep
    assert notify.recovery == registry.RESEND and notify.scope == registry.SITE
    assert notify.sweep_pass and notify.binds is None
    # The agents' side-effect tools are the registered actions that carry one; none publishes.
    assert {a.name: a.tool.name for a in registry.agent_tools()} == {
        "media": "upload_media",
        "draft": "put_draft",
        "block": "insert_block",
    }
    # What ownership binds (issue 10): the draft's post chain, an image slot's chain, terms.
    assert registry.binding("post") == {"draft", "block", "repair", "publish", "unschedule"}
    assert registry.binding("attachment") == {"media", "attach", "media_meta"}
    assert registry.binding("term") == {"term"}
    assert registry.keyed() == {"draft": "post", "media": "attachment"}
    with pytest.raises(registry.UnknownAction):
        registry.get("no-such-action")
    with pytest.raises(ValueError):
        registry.Action("x", "retry", send=print, rebuild=print, step="x")


def test_the_wordpress_package_imports_without_flask_or_peewee():
    code = (
        "import sys, gateway.wordpress, gateway.wordpress.errors; "
        "print(sorted(m for m in ('flask', 'peewee', 'werkzeug') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_a_worker_validates_the_same_body_bytes_once_and_refuses_bad_ones_every_time(
    monkeypatch,
):
    """Replays send the same bytes: the schema runs on the first, the answer is the same."""
    from gateway.core import validation

    monkeypatch.setattr(validation, "_passed", {})  # what earlier tests' requests left
    runs = []
    real = validation.check  # the schema's one run, whichever validator gives the verdict
    monkeypatch.setattr(validation, "check", lambda *a, **k: runs.append(1) or real(*a, **k))
    raw = json.dumps({"site": "wordpress", "task_version": 2.0}).encode()
    first = validation.validate_body("job", raw, json.loads(raw))
    again = validation.validate_body("job", raw, json.loads(raw))
    assert first == again == {"site": "wordpress", "task_version": 2}
    assert isinstance(again["task_version"], int)
    assert len(runs) == 1
    bad = json.dumps({"site": "wordpress", "task_version": "two"}).encode()
    for _ in range(2):
        with pytest.raises(exc.ValidationFailed):
            validation.validate_body("job", bad, json.loads(bad))
    assert len(runs) == 3  # a refusal is never remembered
    for i in range(validation.PASSED_BODIES + 5):
        body = json.dumps({"site": "wordpress", "task_version": i + 1}).encode()
        validation.validate_body("job", body, json.loads(body))
    assert len(validation._passed) == validation.PASSED_BODIES
