"""The issue's input rows, each through a real ``gateway serve`` in front of the
real test WordPress: what must never reach WordPress is refused with a clear problem+json,
leaves no ledger row and makes no WordPress call; the HTTP details RFC 9110 asks for."""

from __future__ import annotations

import base64
import datetime as dt
import io
import json

import pytest
import requests
from servers import Server
from support import JPEG_BYTES
from support import admin_session
from support import draft_body
from support import new_job_id
from support import op_key
from support import png_bytes
from support import problem_slug

pytestmark = pytest.mark.wordpress


@pytest.fixture(scope="module")
def server(shared_wp_site, tmp_path_factory):
    """One ``gateway serve`` for the module (SQLite ledger: nothing here is ledger-specific)."""
    workdir = tmp_path_factory.mktemp("input-rows")
    running = Server(shared_wp_site, f"sqlite:///{workdir / 'ledger.db'}", workdir).start()
    editor = running._cli(
        "tokens", "create", "--tenant", "acme", "--role", "editor", "--name", "ed"
    )
    running.editor = {"Authorization": "Bearer " + editor.strip().splitlines()[-1]}
    yield running
    running.kill()


def _job(server) -> str:
    job_id = new_job_id()
    answer = server.call("PUT", f"/v1/jobs/{job_id}", json={"site": "blog", "task_version": 1})
    assert answer.status_code == 201, answer.text
    return job_id


def _objects(wp_site, key: str) -> list[dict]:
    answer = admin_session(wp_site).get(
        wp_site["url"].rstrip("/") + "/wp-json/publishing-gateway/v1/objects",
        params={"keys": key},
        timeout=30,
    )
    answer.raise_for_status()
    return answer.json()["objects"]


def _rows(server, job_id: str) -> list[dict]:
    return server.call("GET", f"/v1/jobs/{job_id}").json()["operations"]


def _problem(answer, status: int, slug: str) -> dict:
    assert answer.status_code == status, answer.text[:500]
    assert answer.headers["Content-Type"].startswith("application/problem+json")
    assert problem_slug(answer) == slug
    return answer.get_json() if hasattr(answer, "get_json") else answer.json()  # Flask too


def test_title_with_nul_is_422_with_its_pointer(server, wp_site):
    job_id = _job(server)
    answer = server.call("PUT", f"/v1/jobs/{job_id}/draft", json=draft_body(title="Hi\u0000x"))
    problem = _problem(answer, 422, "validation-failed")
    assert [e["pointer"] for e in problem["errors"]] == ["/title"]
    assert "U+0000" in problem["errors"][0]["message"]
    tabbed = draft_body(title="tab\tok", excerpt="line\r\nbreak")  # tab, CR, LF are text
    assert server.call("PUT", f"/v1/jobs/{job_id}/draft", json=tabbed).status_code == 201
    assert len(_objects(wp_site, op_key(job_id, "draft"))) == 1


def test_chunked_40_mib_media_body_is_413_problem(server):
    job_id = _job(server)

    def chunks():
        block = b"\0" * (1 << 20)
        for _ in range(40):
            yield block

    try:
        answer = requests.put(
            f"{server.url}/v1/jobs/{job_id}/media/hero",
            data=chunks(),  # a generator: Transfer-Encoding: chunked, no Content-Length
            headers={**server.headers, "Content-Type": "application/json"},
            timeout=60,
        )
    except requests.ConnectionError:
        pytest.fail("the gateway dropped the connection instead of answering 413")
    _problem(answer, 413, "payload-too-large")
    assert _rows(server, job_id) == []


def test_base64_media_without_filename_is_named_from_its_bytes(server, wp_site):
    job_id = _job(server)
    body = {"content_base64": base64.b64encode(JPEG_BYTES).decode(), "alt_text": "generated"}
    answer = server.call("PUT", f"/v1/jobs/{job_id}/media/genimg", json=body)
    assert answer.status_code == 201, answer.text
    assert answer.json()["mime_type"] == "image/jpeg"
    [obj] = _objects(wp_site, op_key(job_id, "media", "genimg"))
    media = admin_session(wp_site).get(
        wp_site["url"].rstrip("/") + f"/wp-json/wp/v2/media/{obj['id']}", timeout=30
    )
    assert media.json()["source_url"].rsplit("/", 1)[1].startswith("genimg")
    assert media.json()["source_url"].endswith(".jpg")
    pdf = {"content_base64": base64.b64encode(b"%PDF-1.4\n%\xe2\xe3\n1 0 obj").decode()}
    refused = server.call("PUT", f"/v1/jobs/{job_id}/media/doc", json=pdf)
    _problem(refused, 415, "unsupported-media-type")
    assert [r["slot"] for r in _rows(server, job_id)] == ["genimg"]


def test_truncated_png_is_422_image_unreadable_and_nothing_is_written(server, wp_site):
    job_id = _job(server)
    cut = png_bytes((9, 9, 9), 16)[:40]  # signature and header only
    answer = requests.put(
        f"{server.url}/v1/jobs/{job_id}/media/hero",
        files={"file": ("hero.png", cut, "image/png")},
        headers=server.headers,
        timeout=30,
    )
    _problem(answer, 422, "image-unreadable")
    assert _rows(server, job_id) == []
    assert _objects(wp_site, op_key(job_id, "media", "hero")) == []


@pytest.mark.parametrize(
    ("field", "text"),
    [
        ("content", "<p>See {{media: hero}}</p>"),
        ("content", "<p>{{MEDIA:hero}}</p>"),
        ("title", "{{ $json.title }}"),
        ("excerpt", "Summary: {{$json['excerpt']}}"),
        ("seo.description", "{{ $('Set fields').item.json.description }}"),
    ],
)
def test_template_leftovers_are_422_naming_each(server, wp_site, field, text):
    job_id = _job(server)
    body = draft_body()
    if field.startswith("seo."):
        body["seo"][field[4:]] = text
    else:
        body[field] = text
    problem = _problem(
        server.call("PUT", f"/v1/jobs/{job_id}/draft", json=body), 422, "template-leftover"
    )
    pointer = "/" + field.replace(".", "/")
    assert [e["pointer"] for e in problem["errors"]] == [pointer]
    assert problem["errors"][0]["leftover"].startswith("{{")
    assert _rows(server, job_id) == [] and _objects(wp_site, op_key(job_id, "draft")) == []


def test_other_double_braces_pass(server, wp_site):
    job_id = _job(server)
    body = draft_body(content="<pre>{{#each items}}{{ name }}{{/each}}</pre>")
    assert server.call("PUT", f"/v1/jobs/{job_id}/draft", json=body).status_code == 201


def test_problem_bodies_quote_only_a_short_prefix(server):
    job_id = _job(server)
    huge = "x" * 3_000_000
    for body in (draft_body(content=huge), draft_body(content=huge + "\u0001")):
        answer = server.call("PUT", f"/v1/jobs/{job_id}/draft", json=body)
        _problem(answer, 422, "validation-failed")
        assert len(answer.content) < 2000
    answer = server.call("PUT", f"/v1/jobs/{job_id}", json={"site": "s" * 5000, "task_version": 1})
    _problem(answer, 422, "validation-failed")
    assert len(answer.content) < 2000


def test_task_version_1_0_is_answered_as_an_integer(server):
    job_id = new_job_id()
    answer = requests.put(
        f"{server.url}/v1/jobs/{job_id}",
        data='{"site": "blog", "task_version": 1.0}',
        headers={**server.headers, "Content-Type": "application/json"},
        timeout=30,
    )
    assert answer.status_code == 201, answer.text
    assert '"task_version":1,' in answer.text.replace(" ", "")
    assert json.loads(answer.text)["task_version"] == 1


def test_job_id_with_a_slash_names_the_job_id_rule(server):
    for path in ("/v1/jobs/a/b", "/v1/jobs/a%2Fb/draft"):
        answer = server.call("PUT", path, json={"site": "blog", "task_version": 1})
        problem = _problem(answer, 404, "not-found")
        assert "job id must match" in problem["detail"]
        assert problem["errors"][0]["pointer"] == "/job_id"


def test_401_carries_www_authenticate_and_405_allow(server):
    job_id = new_job_id()
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        answer = requests.put(f"{server.url}/v1/jobs/{job_id}", headers=headers, timeout=30)
        _problem(answer, 401, "unauthenticated")
        assert answer.headers["WWW-Authenticate"].startswith("Bearer")
    answer = server.call("POST", f"/v1/jobs/{job_id}/draft", json=draft_body())
    assert answer.status_code == 405
    assert "PUT" in answer.headers["Allow"]
    assert answer.headers["Content-Type"].startswith("application/problem+json")


def _publish(server, job_id: str) -> dict:
    assert server.call("POST", f"/v1/jobs/{job_id}/approval-requests", json={}).ok
    check = server.call("GET", f"/v1/jobs/{job_id}/verification").json()
    approval = {
        "task_version": 1,
        "content_sha256": check["content_sha256"],
        "post_id": check["post_id"],
        "expires_at": (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).isoformat(),
    }
    granted = requests.post(
        f"{server.url}/v1/jobs/{job_id}/approvals", json=approval, headers=server.editor, timeout=30
    )
    assert granted.status_code == 201, granted.text
    done = server.call("POST", f"/v1/jobs/{job_id}/publish", json={})
    assert done.status_code == 201, done.text
    return done.json()


def test_taken_slug_shows_as_made_unique_after_publishing(server):
    slug = "gw-slug-" + new_job_id()[2:14].lower()
    first, second = _job(server), _job(server)
    for job_id in (first, second):
        answer = server.call("PUT", f"/v1/jobs/{job_id}/draft", json=draft_body(slug=slug))
        assert answer.status_code == 201, answer.text
        assert answer.json()["verification"]["ok"] is True  # made-unique does not block
    first_check = server.call("GET", f"/v1/jobs/{first}/verification").json()
    assert first_check["fields"]["slug"] == {"expected": slug, "actual": slug, "ok": True}
    published = _publish(server, first)
    assert published["slug"] == slug and slug in published["link"]
    again = _publish(server, second)
    assert again["slug"] != slug and again["slug"].startswith(slug + "-")
    assert again["slug"] in again["link"]
    check = server.call("GET", f"/v1/jobs/{second}/verification").json()
    assert check["fields"]["slug"] == {
        "expected": slug,
        "actual": again["slug"],
        "ok": False,
        "reason": "made-unique",
    }
    assert check["ok"] is True  # reported, not a failure: nothing the gateway may fix
    repaired = server.call("POST", f"/v1/jobs/{second}/repair", json={})
    assert repaired.status_code == 200, repaired.text
    assert repaired.json()["fixes"] == {}
    assert server.call("GET", f"/v1/jobs/{first}/verification").json()["fields"]["slug"]["ok"]


def test_another_slug_difference_fails_verification():
    from gateway.operations.verification import slug_field

    assert slug_field("news", "news-3")["reason"] == "made-unique"
    other = slug_field("news", "breaking")
    assert other["ok"] is False and other["reason"] != "made-unique"


@pytest.mark.parametrize(
    "cut",
    [
        pytest.param(lambda: png_bytes((1, 2, 3), 8)[:40], id="png-header-only"),
        pytest.param(lambda: png_bytes((1, 2, 3), 8)[:50], id="png-cut-in-its-pixels"),
        pytest.param(lambda: JPEG_BYTES[:-60], id="jpeg-cut"),
        pytest.param(lambda: JPEG_BYTES[:300], id="jpeg-tables-only"),
        pytest.param(lambda: b"GIF89a" + b"\0" * 10, id="gif-signature-only"),
        pytest.param(lambda: b"RIFF\0\0\0\0WEBPVP8 ", id="webp-signature-only"),
    ],
)
def test_images_that_do_not_decode_are_unreadable(cut):
    from gateway.actions import media
    from gateway.core import exceptions

    with pytest.raises(exceptions.ImageUnreadable):
        media.sniff(cut())


def test_a_misspelt_multipart_field_is_422_and_the_corrected_request_goes_through(gwp, proxy):
    """Issue 28: ``alt_txt=hello`` was dropped silently (201 without alt text), and the
    corrected request was then refused as ``operation-key-reused``. Unknown multipart fields
    and file parts are refused with their pointers, before anything reaches WordPress."""
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    content = png_bytes((5, 6, 7), 3)
    proxy.reset_log()
    typo = gwp.put_media(job_id, "hero", content, "hero.png", alt_txt="hello")
    problem = _problem(typo, 422, "validation-failed")
    assert [e["pointer"] for e in problem["errors"]] == ["/alt_txt"]
    extra_file = gwp.client.put(
        f"/v1/jobs/{job_id}/media/hero",
        data={"file": (io.BytesIO(content), "hero.png"), "thumb": (io.BytesIO(content), "t.png")},
        content_type="multipart/form-data",
        headers=gwp.headers(),
    )
    assert [e["pointer"] for e in _problem(extra_file, 422, "validation-failed")["errors"]] == [
        "/thumb"
    ]
    assert proxy.requests == [] and gwp.operations(job_id) == []
    fixed = gwp.put_media(job_id, "hero", content, "hero.png", alt_text="hello")
    assert fixed.status_code == 201, fixed.get_json()
    assert gwp.wp_media(fixed.get_json()["media_id"])["alt_text"] == "hello"


def test_a_form_body_sent_to_the_draft_is_400_naming_its_content_type(gw):
    """Issue 28: a form body answered "not valid JSON: Expecting value" and nothing about the
    ``Content-Type`` it came with. JSON sent with a form's type (``curl -d``) still works."""
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    form = gw.client.put(
        f"/v1/jobs/{job_id}/draft", data={"title": "Hello", "content": "x"}, headers=gw.headers()
    )
    problem = _problem(form, 400, "invalid-json")
    assert "Content-Type application/x-www-form-urlencoded" in problem["detail"]
    assert "application/json" in problem["detail"].split("urlencoded", 1)[1]
    plain = gw.client.put(
        f"/v1/jobs/{job_id}/draft", data=b"title=Hello", headers=gw.headers()
    )  # no Content-Type at all
    assert "no Content-Type" in _problem(plain, 400, "invalid-json")["detail"]
    assert gw.operations(job_id) == []
    labelled_form = gw.client.put(
        f"/v1/jobs/{job_id}/draft",
        data=json.dumps(draft_body(title=f"Form-typed {job_id}")),
        content_type="application/x-www-form-urlencoded",
        headers=gw.headers(),
    )
    assert labelled_form.status_code == 201, labelled_form.get_json()
