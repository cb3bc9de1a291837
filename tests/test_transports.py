"""What only one transport has to prove: XML-RPC's limits and two-call uploads, the companion
plugin switched off for real, racing drafts where only the gateway's ledger decides, switching
a site's transport, and the library's constructor call under our timeout.

The XML-RPC tests run in the SQLite pass only (see ``support.SQLITE_PASS_ONLY``).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import xmlrpc.client
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from support import SECRET_KEY
from support import SITE_NAME
from support import SQLITE_PASS_ONLY
from support import TENANT
from support import both_transports
from support import call_count
from support import call_fault
from support import draft_body
from support import gateway_command
from support import new_job_id
from support import op_key
from support import png_bytes
from support import problem_slug
from support import xmlrpc_only

from gateway.core import exceptions as exc
from gateway.ledger.db import database
from gateway.tenancy import sites
from gateway.wordpress.errors import WordPressOutcomeUnknown
from gateway.wordpress.errors import WordPressUnavailable
from gateway.wordpress.identifiers import media_token
from gateway.wordpress.xmlrpc import XmlRpcClient
from gateway.wordpress.xmlrpc_compat import methods
from gateway_tools.fault_proxy import Fault
from gateway_tools.fault_proxy import FaultProxy

pytestmark = pytest.mark.wordpress


def custom_fields(wp_site: dict, object_id: int) -> list[tuple[str, str]]:
    """``(key, value)`` of every custom field of an object, read as admin over XML-RPC
    (also without the companion plugin, and showing duplicated keys)."""
    admin = wp_site["users"]["admin"]
    server = xmlrpc.client.ServerProxy(wp_site["url"] + "/xmlrpc.php")
    post = server.wp.getPost(
        0, admin["username"], admin["app_password"], object_id, ["custom_fields", "post_title"]
    )
    return sorted((f["key"], f["value"]) for f in post["custom_fields"])


# --------------------------------------------------------------------------- XML-RPC limits


@xmlrpc_only
def test_alt_text_over_xmlrpc_is_a_transport_limit(gw):
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    image = png_bytes((3, 3, 90))
    refused = gw.put_media(job_id, "hero", image, "hero.png", alt_text="a red square")
    assert refused.status_code == 422
    assert problem_slug(refused) == "transport-limit"
    assert refused.get_json()["feature"] == "alt_text"
    assert gw.operations(job_id) == []  # nothing claimed, nothing sent
    assert gw.count_objects(op_key(job_id, "media", "hero")) == 0
    answer = gw.put_media(job_id, "hero", image, "hero.png", title="Hero", caption="A caption")
    assert answer.status_code == 201, answer.get_json()
    media_id = answer.get_json()["media_id"]
    assert ("gateway_operation_key", op_key(job_id, "media", "hero")) in custom_fields(
        gw.site, media_id
    )
    media = gw.wp.get(f"{gw.wp_url}/wp-json/wp/v2/media/{media_id}?context=edit").json()
    assert media["title"]["raw"] == "Hero" and media["caption"]["raw"] == "A caption"


@xmlrpc_only
def test_new_tag_over_xmlrpc_is_a_transport_limit_existing_terms_by_name_work(gw):
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    new_tag = f"Fresh tag {job_id}"
    refused = gw.put_draft(job_id, draft_body(categories=["Uncategorized"], tags=[new_tag]))
    assert refused.status_code == 422, refused.get_json()
    assert problem_slug(refused) == "transport-limit"
    assert refused.get_json()["feature"] == "new_terms"
    assert refused.get_json()["errors"][0]["pointer"] == "/tags/0"
    assert gw.operations(job_id) == []  # nothing claimed, nothing sent
    assert gw.count_objects(op_key(job_id, "draft")) == 0
    tags = gw.wp.get(f"{gw.wp_url}/wp-json/wp/v2/tags", params={"search": new_tag}).json()
    assert tags == []
    answer = gw.put_draft(job_id, draft_body(categories=["uncategorized"]))
    assert answer.status_code == 201, answer.get_json()
    assert gw.wp_post(answer.get_json()["post_id"])["categories"] == [1]


@xmlrpc_only
def test_xmlrpc_updates_media_metadata_and_attaches_the_image(gw):
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    image = png_bytes((41, 42, 43), 3)
    first = gw.put_media(job_id, "hero", image, "hero.png", title="Old")
    assert first.status_code == 201, first.get_json()
    media_id = first.get_json()["media_id"]
    assert gw.put_job(job_id, task_version=2).status_code == 200
    second = gw.put_media(job_id, "hero", image, "hero.png", caption="A caption", title="Old")
    assert second.status_code == 201, second.get_json()
    assert second.get_json()["media_id"] == media_id  # wp.editPost, no second upload
    row = [r for r in gw.operations(job_id) if r["task_version"] == 2][0]
    assert row["receipt"]["metadata_ok"] is True and row["receipt"]["update_of"] == media_id
    draft = gw.put_draft(job_id, draft_body(featured_media={"slot": "hero"}))
    assert draft.status_code == 201, draft.get_json()
    stored = gw.wp.get(
        f"{gw.wp_url}/wp-json/wp/v2/media/{media_id}", params={"context": "edit"}, timeout=30
    ).json()
    assert stored["caption"]["raw"] == "A caption" and stored["title"]["raw"] == "Old"
    assert stored["post"] == draft.get_json()["post_id"]  # attached: wp.editPost post_parent
    assert gw.count_objects(op_key(job_id, "media", "hero")) == 1


@xmlrpc_only
@pytest.mark.parametrize("kind", ["status_without_forward", "drop_response"])
def test_crash_between_upload_and_identifier_is_reconciled(gwp, proxy, transport, kind):
    """``wp.uploadFile`` carries no custom field: the follow-up ``wp.editPost`` writes the
    key. When it never arrives (or its answer is lost), the lookup finds the attachment by the
    token in its title, the gateway finishes the second call, and WordPress holds one
    attachment carrying the key."""
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    proxy.add_fault(call_fault(transport, "edit", kind, times=1))
    image = png_bytes((4, 90, 4))
    answers = [gwp.put_media(job_id, "hero", image, "hero.png", title="Hero title")]
    while answers[-1].status_code in (409, 503) and len(answers) < 5:
        time.sleep(1)
        answers.append(gwp.put_media(job_id, "hero", image, "hero.png", title="Hero title"))
    final = answers[-1]
    assert final.status_code in (200, 201), [a.get_json() for a in answers]
    media_id = final.get_json()["media_id"]
    assert call_count(proxy, transport, "upload", forwarded=True) == 1  # never uploaded twice
    key = op_key(job_id, "media", "hero")
    assert [(o["type"], o["id"]) for o in gwp.lookup(key)] == [("attachment", media_id)]
    fields = custom_fields(gwp.site, media_id)
    assert fields.count(("gateway_operation_key", key)) == 1
    media = gwp.wp.get(f"{gwp.wp_url}/wp-json/wp/v2/media/{media_id}?context=edit").json()
    assert media["title"]["raw"] == "Hero title"
    assert media_token(key) in media["source_url"]
    (row,) = gwp.operations(job_id)
    assert row["state"] == "CONFIRMED" and row["remote_id"] == media_id


@xmlrpc_only
def test_wrong_password_over_xmlrpc_is_a_definite_refusal(gw, app):
    """Fault 403 (``InvalidCredentialsError``) proves nothing was written: FAILED, not
    UNKNOWN; the write goes through once the site's password is renewed."""
    with app.app_context(), database.connection_context():
        sites.add_site(
            SECRET_KEY, TENANT, SITE_NAME, gw.wp_url, gw.author["username"],
            "aaaa bbbb cccc dddd eeee ffff", "xmlrpc",
        )  # fmt: skip
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    body = draft_body(title=f"Wrong password {job_id}")
    refused = gw.put_draft(job_id, body)
    assert refused.status_code == 502, refused.get_json()
    assert problem_slug(refused) == "wordpress-refused"
    assert refused.get_json()["wordpress_status"] == 403
    (row,) = gw.operations(job_id)
    assert row["state"] == "FAILED"
    assert gw.posts_titled(body["title"]) == []
    gw.add_site(gw.wp_url)  # the right password: credential_version 3
    renewed = gw.put_draft(job_id, body)
    assert renewed.status_code == 201, renewed.get_json()
    assert [p["id"] for p in gw.posts_titled(body["title"])] == [renewed.get_json()["post_id"]]


@xmlrpc_only
@pytest.mark.parametrize(
    "kind,status,retryable",
    [
        ("upstream_page", 403, False),  # a host blocks xmlrpc.php: nothing reached WordPress
        ("status_after_forward", 403, False),  # the post was created, then a 403 page came
        ("upstream_page", 429, True),
    ],
    ids=["403-page", "403-page-after-commit", "429-page"],
)
def test_page_in_front_of_xmlrpc_is_unknown_then_one_post(
    gwp, proxy, transport, kind, status, retryable
):
    """An HTML page instead of an XML-RPC answer never makes a FAILED operation: 502
    ``upstream-refused`` (origin ``upstream``), the row UNKNOWN; identical retries reconcile
    and WordPress ends with one post."""
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    proxy.add_fault(call_fault(transport, "create_post", kind, status=status))
    body = draft_body(title=f"Page {job_id}")
    first = gwp.put_draft(job_id, body)
    problem = first.get_json()
    assert first.status_code == 502 and problem_slug(first) == "upstream-refused", problem
    assert problem["origin"] == "upstream" and problem["upstream"]["status"] == status
    assert problem["retryable"] is retryable and problem["ledger_state"] == "UNKNOWN"
    answers = [gwp.put_draft(job_id, body)]
    while answers[-1].status_code == 409 and len(answers) < 6:  # no guard: the window first
        time.sleep(min(float(answers[-1].headers.get("Retry-After", "1")), 2.0))
        answers.append(gwp.put_draft(job_id, body))
    assert answers[-1].status_code in (200, 201), [a.get_json() for a in answers]
    assert [p["id"] for p in gwp.posts_titled(body["title"])] == [answers[-1].get_json()["post_id"]]
    (row,) = gwp.operations(job_id)
    assert row["state"] == "CONFIRMED"


@xmlrpc_only
def test_seo_update_over_xmlrpc_edits_custom_fields_in_place(gw):
    """Without the meta id WordPress would add a second ``rank_math_title``: a new version
    changing an SEO field leaves exactly one value per key."""
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    first = gw.put_draft(job_id, draft_body())
    assert first.status_code == 201
    post_id = first.get_json()["post_id"]
    assert gw.put_job(job_id, task_version=2).status_code == 200
    seo = {**draft_body()["seo"], "title": "A new SEO title"}
    second = gw.put_draft(job_id, draft_body(seo=seo))
    assert second.status_code == 201 and second.get_json()["verification"]["ok"] is True
    fields = custom_fields(gw.site, post_id)
    assert [v for k, v in fields if k == "rank_math_title"] == ["A new SEO title"]
    assert [k for k, _ in fields].count("gateway_operation_key") == 1


# --------------------------------------------------------------------------- no plugin


@xmlrpc_only
def test_xmlrpc_job_without_the_plugin_verifies_every_field(gwp, proxy, transport, no_companion):
    """The case XML-RPC exists for: no companion plugin, yet the Rank Math fields are written
    and read back, and a lost create is found by its identifier instead of sent again."""
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    assert gwp.put_media(job_id, "hero", png_bytes((70, 7, 7)), "hero.png").status_code == 201
    proxy.add_fault(call_fault(transport, "create_post", "drop_response", times=1))
    body = draft_body(title=f"No plugin {job_id}", featured_media={"slot": "hero"})
    answer = gwp.put_draft(job_id, body)
    assert answer.status_code in (200, 201), answer.get_json()
    assert answer.get_json()["reconciled"] is True
    assert call_count(proxy, transport, "create_post", forwarded=True) == 1
    (post,) = gwp.posts_titled(body["title"])
    assert post["id"] == answer.get_json()["post_id"]
    report = gwp.verification(job_id).get_json()
    assert report["ok"] is True
    for name in ("seo.title", "seo.description", "seo.focus_keyword", "featured_media"):
        assert report["fields"][name]["ok"] is True


@both_transports
def test_attachment_slug_carries_the_operation_key_token(gw, transport):
    """Two jobs upload ``hero.png`` titled "Hero": each attachment's slug carries its own
    key's token, so WordPress never searched ``hero-2``, ``hero-3``... for a free slug."""
    slugs = []
    for shade in (40, 41):
        job_id = new_job_id()
        assert gw.put_job(job_id).status_code == 201
        image = png_bytes((shade, 7, 7))
        answer = gw.put_media(job_id, "hero", image, "hero.png", title="Hero")
        assert answer.status_code == 201, answer.get_json()
        media_id = answer.get_json()["media_id"]
        media = gw.wp.get(f"{gw.wp_url}/wp-json/wp/v2/media/{media_id}?context=edit").json()
        assert media["title"]["raw"] == "Hero"
        assert media_token(op_key(job_id, "media", "hero")) in media["slug"], media["slug"]
        slugs.append(media["slug"])
    assert slugs[0] != slugs[1]


@both_transports
def test_10_racing_identical_drafts_without_the_plugin_make_one_post(
    gateway_server, transport, no_companion, gw
):
    """No guard inside WordPress: the gateway's ledger alone (unique key, conditional
    UPDATE to SENT) lets one of ten identical requests through four workers write."""
    server = gateway_server
    job_id = new_job_id()
    job = requests.put(
        f"{server.url}/v1/jobs/{job_id}",
        json={"site": SITE_NAME, "task_version": 1},
        headers=server.headers(),
        timeout=60,
    )
    assert job.status_code == 201, job.text
    body = draft_body(title=f"Race without plugin {job_id}")

    def call():
        return requests.put(
            f"{server.url}/v1/jobs/{job_id}/draft", json=body, headers=server.headers(), timeout=60
        ).status_code

    with ThreadPoolExecutor(max_workers=10) as pool:
        statuses = list(pool.map(lambda _: call(), range(10)))
    assert set(statuses) <= {200, 201, 409}, statuses
    assert statuses.count(201) == 1, statuses
    assert len(gw.posts_titled(body["title"])) == 1


# --------------------------------------------------------------------------- switching


def cli_switch(ledger_url: str, url: str, user: dict, transport: str):
    """``gateway sites add ... --transport T`` on the test's ledger."""
    env = {
        **os.environ,
        "GATEWAY_DATABASE_URL": ledger_url,
        "GATEWAY_SECRET_KEY": SECRET_KEY,
        "GW_SWITCH_PASSWORD": user["app_password"],
    }
    return subprocess.run(
        [
            *gateway_command(), "sites", "add", "--tenant", TENANT, "--name", SITE_NAME,
            "--url", url, "--username", user["username"],
            "--app-password-env", "GW_SWITCH_PASSWORD", "--transport", transport,
        ],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@SQLITE_PASS_ONLY
def test_switching_transport_keeps_the_ledger(gwp, proxy, app, ledger_url):
    """REST -> XML-RPC: CONFIRMED operations replay (even a media request with alt text),
    the report finds no duplicate (lookups know both keys), and a new version updates the
    same post. A switch is refused while an operation is UNKNOWN."""
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    image = png_bytes((8, 8, 80))
    media = gwp.put_media(job_id, "hero", image, "hero.png", alt_text="alt")
    assert media.status_code == 201
    body = draft_body(title=f"Switch {job_id}", featured_media={"slot": "hero"})
    draft = gwp.put_draft(job_id, body)
    assert draft.status_code == 201
    post_id = draft.get_json()["post_id"]

    stuck = new_job_id()
    assert gwp.put_job(stuck).status_code == 201
    proxy.add_fault(call_fault("rest", "create_post", "drop_response", times=1))
    proxy.add_fault(call_fault("rest", "lookup", "status_without_forward", status=503, times=1))
    assert gwp.put_draft(stuck, draft_body(title=f"Stuck {stuck}")).status_code == 503
    with pytest.raises(exc.TransportSwitchRefused):
        gwp.add_site(proxy.url, "xmlrpc")
    refused = cli_switch(ledger_url, proxy.url, gwp.author, "xmlrpc")
    assert refused.returncode == 2 and "SENT or UNKNOWN" in refused.stderr, refused.stderr
    assert gwp.recover(stuck).get_json()["unknown"] == []
    switched = cli_switch(ledger_url, proxy.url, gwp.author, "xmlrpc")
    assert switched.returncode == 0, switched.stderr
    assert json.loads(switched.stdout)["transport"] == "xmlrpc"

    proxy.reset_log()
    again = gwp.put_media(job_id, "hero", image, "hero.png", alt_text="alt")
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    assert gwp.put_draft(job_id, body).status_code == 200
    assert proxy.count() == 0  # replays: no WordPress call over either transport
    token = gwp.make_token("admin")
    report = gwp.client.get("/v1/report", headers=gwp.headers(token)).get_json()
    assert report["duplicate_posts"] == 0 and report["sites_unreachable"] == []
    assert gwp.put_job(job_id, task_version=2).status_code == 200
    bumped = gwp.put_draft(job_id, {**body, "excerpt": "Changed over XML-RPC."})
    assert bumped.status_code == 201, bumped.get_json()
    assert bumped.get_json()["post_id"] == post_id
    assert bumped.get_json()["verification"]["ok"] is True
    # alt text given over REST cannot be read over XML-RPC: not checked, not a failure
    field = bumped.get_json()["verification"]["fields"]["media_metadata"]
    assert field["ok"] is None and field["actual"]["hero"]["alt_text"] is None
    assert gwp.verification(job_id).get_json()["fields"]["media_metadata"] == field
    live = gwp.wp_post(post_id)
    assert live["featured_media"] == media.get_json()["media_id"]
    assert live["excerpt"]["raw"] == "Changed over XML-RPC."
    assert len(gwp.posts_titled(body["title"])) == 1


# --------------------------------------------------------------------------- the library


@SQLITE_PASS_ONLY
def test_library_list_methods_work_through_the_compat_module(wp_site):
    """``GetPosts`` with the library's own result class needs ``collections.Iterable``."""
    from gateway.wordpress.xmlrpc_compat import wordpress_xmlrpc

    author = wp_site["users"]["author"]
    client = wordpress_xmlrpc.Client(
        wp_site["url"] + "/xmlrpc.php", author["username"], author["app_password"]
    )
    posts = client.call(methods.posts.GetPosts({"number": 2, "post_status": "draft"}))
    assert isinstance(posts, list) and all(p.id for p in posts)


@SQLITE_PASS_ONLY
def test_constructor_call_and_reads_honour_the_timeout(wp_site):
    """``wordpress_xmlrpc.Client()`` asks ``mt.supportedMethods`` when constructed: that call
    and every later one give up after ``GATEWAY_WP_TIMEOUT`` seconds."""
    author = wp_site["users"]["author"]
    with FaultProxy(upstream=wp_site["url"], timeout=30) as slow:
        slow.add_fault(
            Fault(kind="delay", seconds=5, body="<methodName>mt.supportedMethods<", times=1)
        )
        client = XmlRpcClient(slow.url, author["username"], author["app_password"], timeout=1)
        started = time.monotonic()
        with pytest.raises(WordPressUnavailable):
            client.me()
        slow.add_fault(Fault(kind="delay", seconds=5, body="<methodName>wp.getProfile<"))
        with pytest.raises(WordPressOutcomeUnknown):
            client.me()
        assert time.monotonic() - started < 4.5
        assert client.me()["slug"] == author["username"]


@SQLITE_PASS_ONLY
def test_doctor_lists_each_sites_transport_and_guarantees(gw, app):
    from gateway.operator import doctor

    with app.app_context(), database.connection_context():
        sites.add_site(
            SECRET_KEY, TENANT, "plain", gw.wp_url, gw.author["username"],
            gw.author["app_password"], "xmlrpc",
        )  # fmt: skip
        config = app.config["GATEWAY"]
        rest, plain = (
            doctor.doctor(config, TENANT, SITE_NAME),
            doctor.doctor(config, TENANT, "plain"),
        )
    assert rest["transport"] == "rest" and rest["ok"] is True
    assert rest["guarantees"]["guard"] is True and rest["guarantees"]["alt_text"] is True
    assert plain["transport"] == "xmlrpc" and plain["ok"] is True, json.dumps(plain)
    assert plain["guarantees"] == {
        "lookup_by_operation_key": True,
        "guard": False,
        "seo_meta": True,
        "alt_text": False,
        "new_terms": False,
    }
    assert {c["check"] for c in plain["checks"]} >= {"xmlrpc_api", "login", "uniqueness_guard"}


# --------------------------------------------------------------------------- reconciliation


@xmlrpc_only
def test_a_sweep_over_xmlrpc_confirms_found_operations(gwp, proxy, transport, monkeypatch):
    """``gateway reconcile`` over XML-RPC: one scan per object type for every key of the
    site (its pages depend on how many objects are newer than the oldest operation, not on
    the number of keys), then one read-back per object."""
    from gateway.ledger.models import Operation
    from gateway.recovery import reconciliation

    scans = []
    scan = XmlRpcClient._scan

    def counted(self, post_type, since):
        scans.append(post_type)
        return scan(self, post_type, since)

    monkeypatch.setattr(XmlRpcClient, "_scan", counted)

    job_ids = [new_job_id() for _ in range(3)]
    for job_id in job_ids:
        gwp.put_job(job_id)
        assert gwp.put_media(job_id, "hero", png_bytes((9, 9, 19), 2)).status_code == 201
        assert gwp.put_draft(job_id, draft_body(title=f"Sweep {job_id}")).status_code == 201
    with gwp.app.app_context(), database.connection_context():
        Operation.update(state="UNKNOWN").execute()
        proxy.reset_log()
        counts = reconciliation.sweep(gwp.app.config["GATEWAY"], older_than=0)
        states = {row.state for row in Operation.select()}
    assert counts["confirmed"] == 6 and states == {"CONFIRMED"}
    assert call_count(proxy, transport, "write") == 0
    assert sorted(scans) == ["attachment", "post"]  # not one scan per key


@xmlrpc_only
def test_editor_adopts_a_same_title_post_over_xmlrpc(gwp, proxy, transport, wp_site):
    """A post with the job's title but no identifier appeared while the create's outcome was
    unknown: an editor says it is the job's post, the gateway writes the key onto it, and the
    next identical call replays."""
    job_id = new_job_id()
    body = draft_body(title=f"Adopt {job_id}")
    assert gwp.put_job(job_id).status_code == 201
    proxy.add_fault(call_fault(transport, "create_post", "status_without_forward", status=500))
    assert gwp.put_draft(job_id, body).status_code == 503
    author = wp_site["users"]["author"]
    other = requests.post(
        gwp.wp_url + "/wp-json/wp/v2/posts",
        auth=(author["username"], author["app_password"]),
        json={"title": body["title"], "status": "draft", "content": body["content"]},
        timeout=30,
    ).json()["id"]
    time.sleep(2.2)  # without a guard, absence is provable only after the in-flight window
    second = gwp.put_draft(job_id, body)
    assert second.status_code == 409 and problem_slug(second) == "needs-review"
    editor = gwp.make_token("editor")
    reviews = gwp.client.get("/v1/reviews", headers=gwp.headers(editor)).get_json()["reviews"]
    review = next(r for r in reviews if r["job_id"] == job_id)
    assert [s["id"] for s in review["detail"]["suspects"]] == [other]
    resolved = gwp.client.post(
        f"/v1/reviews/{review['review_id']}/resolve",
        json={"decision": "same_as", "post_id": other},
        headers=gwp.headers(editor),
    )
    assert resolved.status_code == 200, resolved.get_json()
    assert ("gateway_operation_key", op_key(job_id, "draft")) in custom_fields(wp_site, other)
    replay = gwp.put_draft(job_id, body)
    assert replay.status_code == 200 and replay.get_json()["post_id"] == other
    assert call_count(proxy, transport, "create_post", forwarded=True) == 0


@SQLITE_PASS_ONLY
def test_doctor_names_a_block_in_front_of_xmlrpc(gw, app, proxy):
    from gateway.operator import doctor

    proxy.add_fault(Fault(kind="upstream_page", path=r"^/xmlrpc\.php$", status=403, times=None))
    with app.app_context(), database.connection_context():
        sites.add_site(
            SECRET_KEY, TENANT, "blocked", proxy.url, gw.author["username"],
            gw.author["app_password"], "xmlrpc",
        )  # fmt: skip
        result = doctor.doctor(app.config["GATEWAY"], TENANT, "blocked")
    assert result["ok"] is False
    failed = [c for c in result["checks"] if c["ok"] is False]
    assert [c["check"] for c in failed] == ["firewall"] and "/xmlrpc.php" in failed[0]["detail"]
    assert all(c["detail"].startswith("not run") for c in result["checks"] if c["ok"] is None)


@xmlrpc_only
@pytest.mark.parametrize("stray", ["\n", "\ufeff", "\r\n\ufeff\n"], ids=["blank", "bom", "both"])
def test_stray_output_before_the_xml_is_tolerated_and_named_by_doctor(gwp, proxy, transport, stray):
    """Issue 28, maxcutler/python-wordpress-xmlrpc#101 and #146: a plugin or theme prints a
    blank line or a byte order mark before ``<?xml`` of every answer. The job goes through as
    on a clean site (one post, verified); ``gateway doctor`` names what is printed."""
    from gateway.operator import doctor

    proxy.add_fault(Fault(kind="stray_output", path=r"^/xmlrpc\.php$", text=stray, times=None))
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    body = draft_body(title=f"Stray {job_id}")
    answer = gwp.put_draft(job_id, body)
    assert answer.status_code == 201, answer.get_json()
    assert answer.get_json()["verification"]["ok"] is True
    assert [p["id"] for p in gwp.posts_titled(body["title"])] == [answer.get_json()["post_id"]]
    assert call_count(proxy, transport, "create_post", fault_kind="stray_output") == 1
    with gwp.app.app_context(), database.connection_context():
        result = doctor.doctor(gwp.app.config["GATEWAY"], TENANT, SITE_NAME)
    checks = {c["check"]: c for c in result["checks"]}
    assert checks["json_clean"]["ok"] is False, checks["json_clean"]
    words = {"\n": "1 blank line", "\ufeff": "1 UTF-8 byte order mark"}.get(stray, "2 blank")
    assert words in checks["json_clean"]["detail"]
    assert checks["login"]["ok"] is True and "closing ?>" in checks["json_clean"]["fix"]


@xmlrpc_only
def test_a_call_that_never_left_holds_no_in_flight_window(gwp, proxy, transport):
    """Issue 28: the XML-RPC client could not be set up (a PHP notice garbled the answer of
    ``mt.supportedMethods``), so ``wp.newPost`` never left: 503 with the row PREPARED, and the
    very next identical request sends it (201), not 409 ``operation-in-progress``."""
    proxy.add_fault(Fault(kind="php_notice", path=r"^/xmlrpc\.php$", body=r"mt\.supportedMethods"))
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    body = draft_body(title=f"Unsent {job_id}")
    first = gwp.put_draft(job_id, body)
    assert first.status_code == 503 and problem_slug(first) == "wordpress-unavailable"
    assert first.get_json()["ledger_state"] == "PREPARED" and first.get_json()["retryable"]
    assert call_count(proxy, transport, "create_post") == 0
    again = gwp.put_draft(job_id, body)
    assert again.status_code == 201, again.get_json()
    assert call_count(proxy, transport, "create_post") == 1
    assert [p["id"] for p in gwp.posts_titled(body["title"])] == [again.get_json()["post_id"]]
