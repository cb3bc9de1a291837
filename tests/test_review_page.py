"""The editors' review page (``/review``): sign-in, CSRF, and the whole editorial path in a real
headless Chromium against a real ``gateway serve`` and the real test WordPress.

The browser test needs Debian's ``chromium`` and ``chromium-driver``
(``apt-get install -y --no-install-recommends chromium chromium-driver``) and ``selenium``;
without them it skips on a laptop and fails under ``CI=true``.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
from servers import Server
from support import CHROMEDRIVER
from support import CHROMIUM
from support import ROOT
from support import SITE_NAME
from support import TENANT
from support import admin_session
from support import chromium_driver
from support import draft_body
from support import hide_companion
from support import metric_value
from support import new_job_id
from support import op_key
from support import png_bytes
from support import problem_slug

from gateway_tools.fault_proxy import Fault

ARTIFACTS = ROOT / "test-artifacts"


# --------------------------------------------------------------------------- test client


def _csrf(page) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', page.get_data(as_text=True)).group(1)


def _sign_in(client, token: str):
    form = {"token": token, "csrf_token": _csrf(client.get("/review/login"))}
    return client.post("/review/login", data=form)


def test_login_refuses_a_workflow_token(offline_gw):
    client = offline_gw.client
    answer = _sign_in(client, offline_gw.token)
    assert answer.status_code == 403
    assert "editor or admin token" in answer.get_data(as_text=True)
    assert offline_gw.token not in answer.get_data(as_text=True)
    follow = client.get("/review")
    assert follow.status_code == 303 and follow.headers["Location"].endswith("/review/login")


def test_login_refuses_an_unknown_token_and_counts_it(offline_gw):
    from gateway.ledger.db import database
    from gateway.operator import report

    refused = "gateway_unauthenticated_calls_total"
    metrics = offline_gw.client.get("/metrics").get_data(as_text=True)
    before = metric_value(metrics, refused, answer="refused")
    answer = _sign_in(offline_gw.client, "not-a-token")
    assert answer.status_code == 401
    assert _sign_in(offline_gw.client, offline_gw.token).status_code == 403  # workflow token
    admin = offline_gw.make_token("admin")
    acme = offline_gw.client.get("/v1/report", headers=offline_gw.headers(admin)).get_json()
    assert acme["unauthorized_calls"] == 1  # the workflow token's: its tenant is known
    with offline_gw.app.app_context(), database.connection_context():
        # the unknown token is counted in the metrics only: nothing in the ledger (issue 29)
        assert report.global_counters()["unauthorized_calls"] == 1
    metrics = offline_gw.client.get("/metrics").get_data(as_text=True)
    assert metric_value(metrics, refused, answer="refused") == before + 1


def test_editor_signs_in_with_a_safe_session_cookie_and_no_token_in_the_page(offline_gw):
    editor = offline_gw.make_token("editor")
    answer = _sign_in(offline_gw.client, editor)
    assert answer.status_code == 303
    cookie = answer.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie
    assert editor not in cookie
    page = offline_gw.client.get("/review")
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    assert "Signed in as test-editor" in html and editor not in html
    assert page.headers["Cache-Control"] == "no-store"
    assert "frame-ancestors 'none'" in page.headers["Content-Security-Policy"]


def test_revoking_the_editor_token_ends_the_session_at_the_next_request(offline_gw):
    from gateway.ledger.db import database
    from gateway.tenancy import tokens

    editor = offline_gw.make_token("editor")
    client = offline_gw.app.test_client()
    _sign_in(client, editor)
    assert client.get("/review").status_code == 200
    with offline_gw.app.app_context(), database.connection_context():
        assert tokens.revoke_tokens("acme", "test-editor") == 1
    answer = client.get("/review")
    assert answer.status_code == 303 and answer.headers["Location"].endswith("/review/login")
    assert client.get("/v1/reviews", headers=offline_gw.headers(editor)).status_code == 401


def test_form_post_without_csrf_token_is_400(offline_gw):
    editor = offline_gw.make_token("editor")
    assert offline_gw.client.post("/review/login", data={"token": editor}).status_code == 400
    assert _sign_in(offline_gw.client, editor).status_code == 303
    for path in ("/review/reviews/1/resolve", "/review/jobs/J-1/publish", "/review/logout"):
        answer = offline_gw.client.post(path, data={"decision": "distinct"})
        assert answer.status_code == 400, path
        assert "Traceback" not in answer.get_data(as_text=True)


def test_json_api_needs_no_csrf_token(offline_gw):
    job_id = new_job_id()
    assert offline_gw.put_job(job_id).status_code == 201
    editor = offline_gw.make_token("editor")
    reviews = offline_gw.client.get("/v1/reviews", headers=offline_gw.headers(editor))
    assert reviews.status_code == 200 and reviews.get_json() == {"reviews": []}
    missing = offline_gw.client.post(
        "/v1/reviews/999/resolve", json={"decision": "distinct"}, headers=offline_gw.headers(editor)
    )
    assert missing.status_code == 404 and problem_slug(missing) == "not-found"
    cancelled = offline_gw.client.post(
        f"/v1/jobs/{job_id}/cancel", json={"reason": "test"}, headers=offline_gw.headers(editor)
    )
    assert cancelled.status_code == 200, cancelled.get_json()


def test_domain_errors_become_a_flash_message_not_a_trace(offline_gw):
    editor = offline_gw.make_token("editor")
    client = offline_gw.client
    _sign_in(client, editor)
    token = _csrf(client.get("/review"))
    answer = client.post(
        "/review/reviews/999/resolve",
        data={"decision": "distinct", "csrf_token": token},
        follow_redirects=True,
    )
    html = answer.get_data(as_text=True)
    assert answer.status_code == 200
    assert "Not found: no open review 999" in html and "Traceback" not in html


def test_admin_may_resolve_but_not_approve(offline_gw):
    admin = offline_gw.make_token("admin")
    client = offline_gw.client
    _sign_in(client, admin)
    token = _csrf(client.get("/review"))
    form = {"task_version": "1", "post_id": "1", "content_sha256": "0" * 64, "csrf_token": token}
    answer = client.post("/review/jobs/J-1/approve", data=form, follow_redirects=True)
    assert "Not allowed for this token" in answer.get_data(as_text=True)


@pytest.mark.wordpress
def test_images_come_through_the_gateway_only_for_the_editors_own_jobs(gw):
    """The thumbnail route streams an image the job uploaded, fetched from WordPress with
    the site's credentials; it is scoped to the editor's tenant and to attachments the job's
    ledger holds (never an open proxy), and needs a signed-in editor."""
    job_id, other_job = new_job_id(), new_job_id()
    uploaded = {}
    for job in (job_id, other_job):
        assert gw.put_job(job).status_code == 201
        answer = gw.put_media(job, "hero", png_bytes((10, 150, 90), size=40))
        assert answer.status_code == 201, answer.get_json()
        uploaded[job] = answer.get_json()["media_id"]
    route = f"/review/jobs/{job_id}/media/{uploaded[job_id]}"
    assert gw.client.get(route).status_code == 303  # not signed in: to the sign-in page
    _sign_in(gw.client, gw.make_token("editor"))
    image = gw.client.get(route)
    assert image.status_code == 200 and image.mimetype == "image/png"
    assert image.data == png_bytes((10, 150, 90), size=40)  # too small for a generated size
    assert "default-src 'none'" in image.headers["Content-Security-Policy"]
    # another job's attachment, an id WordPress has but no job uploaded, an unknown job
    for path in (
        f"/review/jobs/{job_id}/media/{uploaded[other_job]}",
        f"/review/jobs/{job_id}/media/1",
        f"/review/jobs/{new_job_id()}/media/{uploaded[job_id]}",
    ):
        assert gw.client.get(path).status_code == 404, path
    stranger = gw.app.test_client()
    _sign_in(stranger, gw.make_token("editor", tenant="other"))
    assert stranger.get(route).status_code == 404  # another tenant's editor


def test_content_is_rendered_without_scripts_and_with_only_the_jobs_images():
    from gateway.editorial import previews

    media = {7: "http://wp.test/wp-content/uploads/a.png"}
    content = (
        '<!-- wp:paragraph --><p onclick="steal()">Hi <script>alert(1)</script>'
        '<a href="javascript:alert(1)">x</a><a href="https://example.org">y</a></p>'
        '<figure><img src="http://wp.test/wp-content/uploads/a.png" alt="A" class="wp-image-7">'
        '</figure><img src="https://tracker.example/pixel.gif"><iframe src="https://x"></iframe>'
        "<style>body{display:none}</style>"
    )
    rendered = previews.render_content(content, media, lambda i: f"/review/jobs/J/media/{i}")
    html = rendered["html"]
    assert rendered["images"] == [7]
    assert '<img src="/review/jobs/J/media/7" alt="A">' in html
    for banned in (
        "script",
        "onclick",
        "javascript:",
        "tracker.example",
        "iframe",
        "style",
        "<!--",
    ):
        assert banned not in html, banned
    assert 'href="https://example.org" rel="noopener noreferrer"' in html
    assert "not one of this job's uploads" in html


def test_times_to_the_minute_and_problems_in_words():
    from gateway.editorial import previews

    assert previews.minute("2026-11-30T08:56:51.340918+00:00") == "30 Nov 2026, 08:56 UTC"
    assert previews.minute("2026-11-30T09:56:51+01:00") == "30 Nov 2026, 08:56 UTC"
    assert previews.minute("2026-11-30T08:56:51") == "30 Nov 2026, 08:56 UTC"  # date_gmt
    assert previews.minute(None) == "—"
    row = {
        "action": "draft",
        "slot": None,
        "state": "UNKNOWN",
        "sent_at": "2026-11-30T08:56:51+00:00",
        "problem": {
            "detail": "connection lost: ('Connection aborted.', RemoteDisconnected('x'))",
            "wordpress_status": None,
            "wordpress_code": None,
        },
    }
    words = previews.problem_in_words(row)
    assert words["summary"].startswith("The connection to WordPress was lost")
    assert "RemoteDisconnected" not in words["summary"]
    assert "RemoteDisconnected" in words["technical"]
    words = previews.problem_in_words(
        {
            **row,
            "action": "media",
            "slot": "hero",
            "problem": {"detail": "Bad gateway", "wordpress_status": 502, "wordpress_code": None},
        }
    )
    assert "the image 'hero'" in words["summary"] and "HTTP 502" in words["summary"]
    sent = previews.problem_in_words({**row, "state": "SENT", "problem": None})
    assert "30 Nov 2026, 08:56 UTC" in sent["summary"] and sent["technical"] is None
    refused = previews.problem_in_words(
        {
            **row,
            "state": "FAILED",
            "problem": {
                "detail": "WordPress refused: Sorry, you are not allowed to create posts.",
                "wordpress_status": 403,
                "wordpress_code": "rest_cannot_create",
            },
        }
    )
    assert refused["summary"] == (
        "WordPress refused the post (HTTP 403): Sorry, you are not allowed to create posts."
    )
    assert "allow a retry" in refused["next"] and "rest_cannot_create" in refused["technical"]
    blocked = previews.problem_in_words(
        {
            **row,
            "problem": {
                "detail": "403 text/html page",
                "reason": "upstream-refused",
                "origin": "upstream",
                "upstream": {"status": 403, "title": "Access denied", "url": "http://x/wp-json"},
            },
        }
    )
    assert "in front of WordPress" in blocked["summary"] and "Access denied" in blocked["summary"]


# --------------------------------------------------------------------------- browser


@pytest.fixture
def browser(tmp_path):
    """A headless Chromium driven through ``/usr/bin/chromedriver`` with a fresh profile."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).exists()]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (pip install -e '.[test]')")
    if missing:
        message = (
            f"no headless browser: missing {', '.join(missing)}; install with "
            "apt-get install -y --no-install-recommends chromium chromium-driver"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    with chromium_driver(tmp_path / "chromium-profile") as driver:
        yield driver


@pytest.fixture
def server(wp_site, ledger_url, tmp_path, proxy):
    instance = Server(wp_site, ledger_url, tmp_path, site_url=proxy.url)
    yield instance
    instance.kill()


def _suspected_duplicate(server: Server, proxy, job_id: str, title: str, **draft) -> None:
    """Without the companion plugin (its routes answer 404), a create whose response is lost
    and a retry after the in-flight window leave a suspected duplicate for an editor
    (``draft``: more of the draft's fields, e.g. its ``content``)."""
    hide_companion(proxy)
    server.start()
    assert server.call("PUT", f"/v1/jobs/{job_id}", json={"site": SITE_NAME, "task_version": 1})
    proxy.add_fault(Fault(kind="drop_response", method="POST", path=r"^/wp-json/wp/v2/posts/?$"))
    body = draft_body(title=title, **draft)
    first = server.call("PUT", f"/v1/jobs/{job_id}/draft", json=body)
    assert first.status_code == 503 and problem_slug(first) == "outcome-unknown", first.text
    time.sleep(3.2)  # past the in-flight window: absence is all the gateway can prove
    second = server.call("PUT", f"/v1/jobs/{job_id}/draft", json=body)
    assert second.status_code == 409 and problem_slug(second) == "needs-review", second.text
    server.kill()
    proxy.clear_faults()


ARTICLE = (
    "<p>An <strong>opening</strong> paragraph an editor reads before approving.</p>\n"
    "{{media:body}}\n<h2>A heading</h2>\n<ul><li>one point</li><li>another point</li></ul>\n"
    '<p>A <a href="https://example.org/source">source link</a> and a closing line.</p>'
)


def _draft_awaiting_approval(server: Server, job_id: str, title: str) -> int:
    """A verified draft with a featured image and an image in the text, approval requested."""
    assert server.call("PUT", f"/v1/jobs/{job_id}", json={"site": SITE_NAME, "task_version": 1}).ok
    for slot, colour in (("hero", (30, 110, 200)), ("body", (220, 140, 20))):
        image = png_bytes(colour, size=96)
        answer = server.call(
            "PUT", f"/v1/jobs/{job_id}/media/{slot}", files={"file": (f"{slot}.png", image)}
        )
        assert answer.status_code == 201, answer.text
    body = draft_body(
        title=title, content=ARTICLE, featured_media={"slot": "hero"}, body_media=["body"]
    )
    draft = server.call("PUT", f"/v1/jobs/{job_id}/draft", json=body)
    assert draft.status_code == 201, draft.text
    requested = server.call("POST", f"/v1/jobs/{job_id}/approval-requests")
    assert requested.status_code == 201, requested.text
    return draft.json()["post_id"]


def _shot(driver, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"review-{name}.png"
    driver.save_screenshot(str(path))
    return path


TIME_TO_THE_MINUTE = re.compile(r"\b\d{1,2} [A-Z][a-z]{2} \d{4}, \d{2}:\d{2} UTC\b")


def _assert_readable_times(driver) -> None:
    """Times read like ``30 Nov 2026, 08:56 UTC``: no seconds, microseconds or ISO ``T``."""
    from selenium.webdriver.common.by import By

    text = driver.find_element(By.TAG_NAME, "main").text
    assert TIME_TO_THE_MINUTE.search(text), text
    assert not re.search(r"\d{2}:\d{2}:\d{2}|\d{4}-\d{2}-\d{2}T", text), text


def _assert_images_load(driver, card) -> None:
    """The featured image, the image in the text and its copy inside the rendered text are
    all served by the gateway (same origin) and decoded by the browser."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    images = card.find_elements(By.CSS_SELECTOR, "img.featured, img.body-image, .rendered img")
    assert len(images) == 3
    for image in images:
        src = image.get_attribute("src")
        assert src.startswith(driver.current_url.split("/review")[0]), src
        try:
            WebDriverWait(driver, 30).until(lambda d, i=image: d.execute_script(JS_DONE, i))
        except TimeoutException:
            pytest.fail(f"{src} still loading after 30 s")
        width = driver.execute_script("return arguments[0].naturalWidth", image)
        if not width:  # say why: what the same request answers now
            status = driver.execute_async_script(JS_FETCH_STATUS, src)
            pytest.fail(f"{src} did not load (naturalWidth 0); fetching it now: {status}")


JS_DONE = "return arguments[0].complete"
JS_FETCH_STATUS = (
    "const done = arguments[arguments.length - 1];"
    "fetch(arguments[0]).then(r => done(r.status + ' ' + r.headers.get('content-type')),"
    " e => done(String(e)));"
)


def _flash(driver) -> str:
    from selenium.webdriver.common.by import By

    return " | ".join(e.text for e in driver.find_elements(By.CSS_SELECTOR, ".flash"))


def _submit(driver, button) -> str:
    """Press a form button and wait until the next page (after the POST-redirect-GET) is
    loaded; returns its flash messages."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    page = driver.find_element(By.TAG_NAME, "html")
    button.click()
    wait = WebDriverWait(driver, 60, ignored_exceptions=(StaleElementReferenceException,))

    def left(_d) -> bool:
        # The old page is gone: Chromium says so with a stale element, or (when the
        # document was swapped under the lookup) with "Node ... does not belong to the
        # document".
        try:
            page.is_enabled()
        except StaleElementReferenceException:
            return True
        except WebDriverException as error:
            if "does not belong to the document" in str(error):
                return True
            raise
        return False

    wait.until(left)

    def settled(d) -> bool:
        # On a loaded machine Chromium may still swap the document after readyState first
        # says "complete" (a lookup then fails with "Node ... does not belong to the
        # document"): the page counts as loaded once the same document stays for 250 ms.
        first = d.find_element(By.TAG_NAME, "html")
        if d.execute_script("return document.readyState") != "complete":
            return False
        time.sleep(0.25)
        return d.find_element(By.TAG_NAME, "html") == first

    wait.until(settled)
    return _flash(driver)


@pytest.mark.wordpress
def _counts(driver) -> tuple[int, int]:
    """The drafts section's two counts (waiting for an approval, approved), checked against
    what its cards say of themselves (issue 44: a count that counted other things)."""
    from selenium.webdriver.common.by import By

    shown = tuple(
        int(driver.find_element(By.CSS_SELECTOR, f"#drafts .{name}").text)
        for name in ("waiting-count", "approved-count")
    )
    states = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#drafts .draft-state")]
    said = (
        sum("waiting for an approval" in t for t in states),
        sum("ready to publish" in t for t in states),
    )
    assert shown == said, (shown, states)
    publish = driver.find_elements(By.CSS_SELECTOR, "#drafts button.publish")
    assert len(publish) == said[1]  # Publish only on an approved draft
    return shown


def test_editor_resolves_a_duplicate_approves_and_publishes_in_a_real_browser(
    browser, server, proxy, wp_site
):
    from selenium.webdriver.common.by import By

    suspect_job, draft_job = new_job_id(), new_job_id()
    suspect_title, draft_title = f"Suspect {suspect_job}", f"Ready {draft_job}"
    _suspected_duplicate(server, proxy, suspect_job, suspect_title)
    server.start()  # a fresh process: the companion plugin is visible again
    post_id = _draft_awaiting_approval(server, draft_job, draft_title)
    editor = server._cli("tokens", "create", "--tenant", TENANT, "--role", "editor", "--name", "ed")
    editor = editor.strip().splitlines()[-1]

    browser.get(server.url + "/review")
    assert browser.current_url.endswith("/review/login")
    _shot(browser, "0-sign-in")
    browser.find_element(By.ID, "token").send_keys(editor)
    assert "Signed in as ed" in _submit(browser, browser.find_element(By.ID, "sign-in"))
    assert editor not in browser.page_source

    review = browser.find_element(By.CSS_SELECTOR, f'#reviews .review[data-job="{suspect_job}"]')
    assert suspect_title in review.text  # the intended title and the suspect's title
    candidates = review.find_elements(By.CSS_SELECTOR, ".candidate")
    assert len(candidates) == 1 and suspect_title in candidates[0].text
    pending = browser.find_element(By.ID, "pending").text
    assert op_key(suspect_job, "draft") in pending and "UNKNOWN" in pending
    assert "may or may not have saved it" in pending  # the problem in words...
    details = browser.find_element(By.CSS_SELECTOR, "#pending .problem details")
    assert details.get_attribute("open") is None  # ... the technical detail folded away
    _assert_readable_times(browser)
    card = browser.find_element(By.CSS_SELECTOR, f'#drafts .draft[data-job="{draft_job}"]')
    # issue 44: the drafts come first, the counts say what they count, Publish waits for an
    # approval, and the approval window is explained
    sections = browser.find_elements(By.CSS_SELECTOR, "main section")
    assert sections[0].get_attribute("id") == "drafts"
    assert _counts(browser) == (1, 0)
    assert "waiting for an approval" in card.find_element(By.CSS_SELECTOR, ".draft-state").text
    assert not card.find_elements(By.CSS_SELECTOR, "button.publish")
    assert "24 hours" in browser.find_element(By.CSS_SELECTOR, "#drafts .explain").text
    assert not browser.find_elements(By.ID, "nothing-else")  # a review item is open
    _assert_images_load(browser, card)
    rendered = card.find_element(By.CSS_SELECTOR, ".rendered")
    assert "An opening paragraph an editor reads" in rendered.text
    assert rendered.find_element(By.TAG_NAME, "h2").text == "A heading"
    assert "sha256" not in card.text  # the digests are folded away too
    _shot(browser, "1-signed-in")
    browser.execute_script("arguments[0].scrollIntoView()", card)
    _shot(browser, "1-draft-awaiting-approval")
    same_as = candidates[0].find_element(By.CSS_SELECTOR, "button.same-as")
    post = same_as.text.removeprefix("Same as #")
    flashed = _submit(browser, same_as)
    adopted = (
        f"Same as #{post}: job {suspect_job} “{suspect_title}” takes post #{post} as its draft; "
        "no new post is written."
    )
    assert adopted in flashed, flashed
    assert not browser.find_elements(By.CSS_SELECTOR, f'.review[data-job="{suspect_job}"]')

    card = browser.find_element(By.CSS_SELECTOR, f'#drafts .draft[data-job="{draft_job}"]')
    assert draft_title in card.find_element(By.CSS_SELECTOR, ".title").text
    assert "approval_pending" in card.text
    flashed = _submit(browser, card.find_element(By.CSS_SELECTOR, "button.approve"))
    assert "Approved job" in flashed, flashed
    card = browser.find_element(By.CSS_SELECTOR, f'#drafts .draft[data-job="{draft_job}"]')
    states = [
        r.get_attribute("data-state") for r in card.find_elements(By.CSS_SELECTOR, ".approval")
    ]
    assert states == ["valid"]
    assert _counts(browser)[1] == 1  # the adopted suspect's draft waits, this one is approved
    assert "ready to publish" in card.find_element(By.CSS_SELECTOR, ".draft-state").text
    _shot(browser, "2-approved")
    flashed = _submit(browser, card.find_element(By.CSS_SELECTOR, "button.publish"))
    assert f"post {post_id} is now published" in flashed, flashed
    assert _counts(browser)[1] == 0
    # nothing left to decide: one line instead of five empty sections
    assert [
        e.get_attribute("id") for e in browser.find_elements(By.CSS_SELECTOR, "main section")
    ] == ["drafts"]
    assert "Nothing else needs you" in browser.find_element(By.ID, "nothing-else").text
    _shot(browser, "3-published")

    live = admin_session(wp_site).get(
        f"{wp_site['url'].rstrip('/')}/wp-json/wp/v2/posts/{post_id}",
        params={"context": "edit"},
        timeout=30,
    )
    assert live.status_code == 200 and live.json()["status"] == "publish"
    job = server.call("GET", f"/v1/jobs/{draft_job}").json()
    assert job["phase"] == "published"
    suspect = server.call("GET", f"/v1/jobs/{suspect_job}").json()
    assert [r["state"] for r in suspect["operations"]] == ["CONFIRMED"]


# --------------------------------------------------------------------------- the desk (issue 56)


def _editor(server: Server, name: str) -> dict:
    out = server._cli("tokens", "create", "--tenant", TENANT, "--role", "editor", "--name", name)
    return {"Authorization": "Bearer " + out.strip().splitlines()[-1]}


def _as(server: Server, headers: dict, method: str, path: str, **kwargs):
    import requests

    return requests.request(method, server.url + path, headers=headers, timeout=30, **kwargs)


def _approval(server: Server, job_id: str, editor: dict, version: int):
    """An editor's approval over the JSON API of what the version's verification reads."""
    import datetime as dt

    check = server.call("GET", f"/v1/jobs/{job_id}/verification").json()
    expires = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)).isoformat()
    body = {
        "task_version": version,
        "content_sha256": check["content_sha256"],
        "post_id": check["post_id"],
        "expires_at": expires,
    }
    return _as(server, editor, "POST", f"/v1/jobs/{job_id}/approvals", json=body)


@pytest.mark.wordpress
def test_an_editor_sends_a_draft_back_with_a_note_and_the_timeline_keeps_who_decided(
    browser, server, wp_site
):
    """Issue 56: request changes with a note on a waiting draft (approving that version is
    then impossible); the workflow reads the note on the job and in the feed, and its v2
    clears it; two editors deciding v2 at once: the page whose decision lost says which one
    stands and writes nothing; the published job's timeline says who did what, when."""
    from selenium.webdriver.common.by import By

    server.start()
    job_id = new_job_id()
    start = server.call("GET", "/v1/job-changes", params={"cursor": "now"}).json()["next_cursor"]
    _draft_awaiting_approval(server, job_id, f"Desk {job_id}")
    browser_editor, other = _editor(server, "ed"), _editor(server, "ed2")
    browser.get(server.url + "/review/login")
    browser.find_element(By.ID, "token").send_keys(browser_editor["Authorization"][7:])
    _submit(browser, browser.find_element(By.ID, "sign-in"))

    card = browser.find_element(By.CSS_SELECTOR, f'#drafts .draft[data-job="{job_id}"]')
    note = "The second paragraph cites no source: add one & shorten the title."
    card.find_element(By.CSS_SELECTOR, "form.request-changes textarea").send_keys(note)
    flashed = _submit(browser, card.find_element(By.CSS_SELECTOR, "button.request-changes"))
    assert "sent back with your note" in flashed, flashed
    card = browser.find_element(By.CSS_SELECTOR, f'#drafts .draft[data-job="{job_id}"]')
    assert note in card.find_element(By.CSS_SELECTOR, ".changes-requested").text
    assert not card.find_elements(By.CSS_SELECTOR, "button.approve")
    _shot(browser, "4-changes-requested")
    from test_editors_desk import _shot as guide_shot  # docs/editors-*.png for the guide

    # the guide's picture: the counts, the card's "changes requested" header, the note, no Approve
    guide_shot(browser.find_element(By.ID, "drafts"), "changes-requested")
    refused = _approval(server, job_id, other, 1)
    assert refused.status_code == 409 and problem_slug(refused) == "decision-stands"
    assert refused.json()["decision"]["decided_by"] == "ed"
    assert f'changes_requested by ed: "{note}"' in refused.json()["detail"]  # the page shows it

    job = server.call("GET", f"/v1/jobs/{job_id}").json()  # the workflow hears it
    assert (job["decision"]["decision"], job["decision"]["note"]) == ("changes_requested", note)
    assert [n["note"] for n in job["notes"]] == [note]
    feed = server.call("GET", "/v1/job-changes", params={"cursor": start}).json()["changes"]
    [change] = [c for c in feed if c["job_id"] == job_id]
    assert "changes_requested" in change["events"] and change["decision"]["note"] == note
    told = server.call("GET", f"/v1/jobs/{job_id}/notifications").json()["notifications"]
    assert [(n["event"], n["reason"]) for n in told] == [  # decided by the gateway (issue 57)
        ("approval_pending", None),
        ("changes_requested", note),
    ]
    said = _as(server, other, "POST", f"/v1/jobs/{job_id}/comments", json={"note": "ok"})
    assert said.status_code == 201 and said.json()["content_sha256"]  # the v1 digest it is about

    assert server.call("PUT", f"/v1/jobs/{job_id}", json={"site": SITE_NAME, "task_version": 2}).ok
    assert server.call("GET", f"/v1/jobs/{job_id}").json()["decision"] is None  # v2 clears it
    v2 = draft_body(title=f"Desk {job_id} v2", content="<p>Now with a source.</p>")
    assert server.call("PUT", f"/v1/jobs/{job_id}/draft", json=v2).ok
    assert server.call("POST", f"/v1/jobs/{job_id}/approval-requests").status_code == 201

    browser.get(server.url + "/review")  # ed reads v2 while ed2 approves it
    card = browser.find_element(By.CSS_SELECTOR, f'#drafts .draft[data-job="{job_id}"]')
    card.find_element(By.CSS_SELECTOR, "form.request-changes textarea").send_keys("too late")
    assert _approval(server, job_id, other, 2).status_code == 201
    flashed = _submit(browser, card.find_element(By.CSS_SELECTOR, "button.request-changes"))
    assert "was not changed: approved by ed2 on v2 stands" in flashed, flashed
    card = browser.find_element(By.CSS_SELECTOR, f'#drafts .draft[data-job="{job_id}"]')
    assert "too late" not in card.text
    flashed = _submit(browser, card.find_element(By.CSS_SELECTOR, "button.publish"))
    assert "is now published" in flashed, flashed

    browser.find_element(By.CSS_SELECTOR, ".history-link a").click()
    row = browser.find_element(By.CSS_SELECTOR, f'.finished-job[data-job="{job_id}"]')
    row.find_element(By.TAG_NAME, "a").click()
    entries = browser.find_elements(By.CSS_SELECTOR, "table.timeline .entry")
    said = [
        (e.get_attribute("data-event"), e.find_element(By.CSS_SELECTOR, ".actor").text)
        for e in entries
    ]
    gateway_said = "the gateway"
    workflow = next(actor for event, actor in said if event == "approval_requested")
    assert said == [
        ("draft_written", gateway_said),
        ("verified", gateway_said),
        ("approval_requested", workflow),
        ("changes_requested", "ed"),
        ("commented", "ed2"),
        ("draft_written", gateway_said),
        ("verified", gateway_said),
        ("approval_requested", workflow),
        ("approved", "ed2"),
        ("published", "ed"),
    ]
    assert note in entries[3].text and "v1" in entries[3].text and "v2" in entries[-1].text
    _shot(browser, "5-timeline")
    guide_shot(browser.find_element(By.ID, "timeline"), "timeline")
    timeline = server.call("GET", f"/v1/jobs/{job_id}/timeline").json()
    assert [e["event"] for e in timeline["entries"]] == [event for event, _ in said]
    # each entry names the digest it is about: the read-back's, the published: the approved one's
    digests = [(e["task_version"], e["content_sha256"]) for e in timeline["entries"]]
    assert all(digest for _, digest in digests), timeline["entries"]
    assert len(set(digests[:5])) == 1 and digests[-1] == digests[-2] != digests[0]
