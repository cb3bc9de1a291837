"""Categories and tags by name, against the real test WordPress (issue 14, part 1)."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from support import SECRET_KEY
from support import SITE_NAME
from support import TENANT
from support import both_transports
from support import draft_body
from support import new_job_id
from support import op_key
from support import problem_slug

from gateway.actions import terms
from gateway.ledger.db import database
from gateway.tenancy import sites
from gateway_tools.fault_proxy import Fault

pytestmark = pytest.mark.wordpress


def _admin_term(gw, route: str, name: str) -> dict:
    answer = gw.wp.post(f"{gw.wp_url}/wp-json/wp/v2/{route}", json={"name": name}, timeout=30)
    assert answer.status_code == 201, answer.text
    return answer.json()


def _terms_named(gw, route: str, name: str) -> list[dict]:
    answer = gw.wp.get(
        f"{gw.wp_url}/wp-json/wp/v2/{route}",
        params={"search": name, "per_page": 100, "hide_empty": "false"},
        timeout=30,
    )
    answer.raise_for_status()
    return [t for t in answer.json() if t["name"] == name]


def test_names_match_like_wordpress_and_missing_tags_are_created_once(gw, monkeypatch):
    uid = uuid.uuid4().hex[:10]
    category = _admin_term(gw, "categories", f"Reviews {uid}")
    plain = _admin_term(gw, "tags", f"Cafe {uid}")
    for letter in "ab":  # sort before the wanted tag: it is found on page 3 of 1-term pages
        _admin_term(gw, "tags", f"{letter} zz{uid}")
    late = _admin_term(gw, "tags", f"zz{uid}")
    monkeypatch.setattr(terms, "PAGE", 1)
    # digits only, new to the site, far above any term id it holds: never taken as an id
    numeric = str(100_000_000 + int(uid[:6], 16))
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    body = draft_body(
        title=f"Terms {job_id}",
        categories=[f"reviews {uid}"],  # ASCII case folded: the existing category
        tags=[f"cafe {uid}", f"Café {uid}", f"zz{uid}", numeric, plain["id"]],
    )
    answer = gw.put_draft(job_id, body)
    assert answer.status_code == 201, answer.get_json()
    assert answer.get_json()["verification"]["fields"]["tags"]["ok"] is True
    post = gw.wp_post(answer.get_json()["post_id"])
    assert post["categories"] == [category["id"]]
    accented = _terms_named(gw, "tags", f"Café {uid}")
    assert len(accented) == 1 and accented[0]["slug"] == f"cafe-{uid}-2"  # a term of its own
    twelve = _terms_named(gw, "tags", numeric)
    assert len(twelve) == 1 and twelve[0]["id"] != int(numeric)  # a string is always a name
    wanted = {plain["id"], accented[0]["id"], late["id"], twelve[0]["id"]}
    assert sorted(post["tags"]) == sorted(wanted)
    rows = {r["operation_key"]: r for r in gw.operations(job_id)}
    key = f"{TENANT}/site/{SITE_NAME}/term/post_tag/café {uid}"
    assert rows[key]["state"] == "CONFIRMED" and rows[key]["remote_id"] == accented[0]["id"]
    assert f"{TENANT}/site/{SITE_NAME}/term/post_tag/cafe {uid}" not in rows  # it existed

    # Drift: the tags are removed behind the gateway's back; verification and repair see it.
    gw.wp_update_post(post["id"], {"tags": []})
    assert gw.verification(job_id).get_json()["fields"]["tags"]["ok"] is False
    repaired = gw.client.post(f"/v1/jobs/{job_id}/repair", headers=gw.headers())
    assert repaired.status_code == 201, repaired.get_json()
    assert sorted(gw.wp_post(post["id"])["tags"]) == sorted(post["tags"])


def test_unknown_category_is_422_listing_names_and_writes_nothing(gw):
    uid = uuid.uuid4().hex[:10]
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    body = draft_body(categories=[1, f"Nope {uid}", f"Neither {uid}"], tags=[f"fresh {uid}"])
    answer = gw.put_draft(job_id, body)
    assert answer.status_code == 422, answer.get_json()
    assert problem_slug(answer) == "validation-failed"
    errors = answer.get_json()["errors"]
    assert [e["pointer"] for e in errors] == ["/categories/1", "/categories/2"]
    assert f"Nope {uid}" in errors[0]["message"]
    assert gw.operations(job_id) == []  # no draft, no term operation
    assert gw.count_objects(op_key(job_id, "draft")) == 0
    assert _terms_named(gw, "tags", f"fresh {uid}") == []
    assert _terms_named(gw, "categories", f"Nope {uid}") == []


def _validate(gw, body: dict):
    return gw.client.post("/v1/articles/validate", json=body, headers=gw.headers())


def test_validate_looks_names_up_read_only_and_answers_the_draft_routes_422(gwp, proxy):
    """Issue 41: ``POST /v1/articles/validate`` looks category and tag names up in the job's
    site with GET requests only: an unknown category is the draft route's 422, with its
    pointer under ``/draft``; a missing tag passes and is not created. With several sites
    the body names one (``site``)."""
    uid = uuid.uuid4().hex[:10]
    _admin_term(gwp, "categories", f"Known {uid}")
    draft = draft_body(categories=[f"known {uid}", f"Nope {uid}"], tags=[f"Fresh {uid}"])
    proxy.reset_log()
    refused = _validate(gwp, {"draft": draft, "media": []})
    problem = refused.get_json()
    assert refused.status_code == 422 and problem_slug(refused) == "validation-failed", problem
    assert [(e["pointer"], e["problem"]) for e in problem["errors"]] == [
        ("/draft/categories/1", "validation-failed")
    ]
    assert f"Nope {uid}" in problem["errors"][0]["message"]
    assert proxy.count() > 0 and proxy.count() == proxy.count(method="GET")  # reads only
    assert _terms_named(gwp, "tags", f"Fresh {uid}") == []
    assert _terms_named(gwp, "categories", f"Nope {uid}") == []
    # the draft route answers the same problem at the same entry
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    written = gwp.put_draft(job_id, draft)
    assert written.status_code == 422 and problem_slug(written) == "validation-failed"
    assert [e["pointer"] for e in written.get_json()["errors"]] == ["/categories/1"]

    draft["categories"] = [f"known {uid}"]
    proxy.reset_log()
    passed = _validate(gwp, {"draft": draft, "media": []})
    assert passed.status_code == 200, passed.get_json()
    assert passed.get_json()["site"] == SITE_NAME
    assert proxy.count() == proxy.count(method="GET")
    assert _terms_named(gwp, "tags", f"Fresh {uid}") == []  # the draft route creates it, later
    assert gwp.operations(job_id) == []

    # a second site: the body names the job's site, or is refused at /site
    with gwp.app.app_context(), database.connection_context():
        sites.add_site(SECRET_KEY, TENANT, "shop", proxy.url, "author", "x" * 24, "rest")
    for body, found in (
        ({}, [("/site", "validation-failed")]),
        ({"site": "nowhere"}, [("/site", "site-not-found")]),
        ({"site": SITE_NAME}, None),
    ):
        answer = _validate(gwp, {"draft": draft, "media": [], **body})
        if found is None:
            assert answer.status_code == 200 and answer.get_json()["site"] == SITE_NAME
        else:
            errors = [(e["pointer"], e["problem"]) for e in answer.get_json()["errors"]]
            assert answer.status_code == 422 and errors == found, errors


def test_twenty_racing_jobs_create_one_new_tag(gateway_server, gw):
    uid = uuid.uuid4().hex[:10]
    name = f"Race tag {uid}"
    headers = gateway_server.headers()

    def job(i: int) -> int:
        job_id = f"{new_job_id()}-{i}"
        url = f"{gateway_server.url}/v1/jobs/{job_id}"
        put = requests.put(url, json={"site": SITE_NAME, "task_version": 1}, headers=headers)
        assert put.status_code == 201, put.text
        spelled = name if i % 2 else name.lower()  # both spellings are the same term
        body = draft_body(title=f"Race {job_id}", tags=[spelled])
        for _ in range(5):
            answer = requests.put(url + "/draft", json=body, headers=headers, timeout=120)
            if answer.status_code != 409:
                break
        assert answer.status_code == 201, answer.text
        return answer.json()["post_id"]

    with ThreadPoolExecutor(max_workers=20) as pool:
        posts = list(pool.map(job, range(20)))
    created = [t for t in _terms_named(gw, "tags", name) + _terms_named(gw, "tags", name.lower())]
    assert len(created) == 1, created
    assert all(gw.wp_post(p)["tags"] == [created[0]["id"]] for p in posts)


def test_a_lost_tag_creation_is_found_by_name_not_created_twice(gwp, proxy):
    name = f"Lost tag {uuid.uuid4().hex[:10]}"
    proxy.add_fault(Fault(kind="drop_response", method="POST", path=r"^/wp-json/wp/v2/tags/?$"))
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    answer = gwp.put_draft(job_id, draft_body(title=f"Lost {job_id}", tags=[name]))
    assert answer.status_code == 201, answer.get_json()
    created = _terms_named(gwp, "tags", name)
    assert len(created) == 1
    assert proxy.count(method="POST", path=r"^/wp-json/wp/v2/tags/?$", forwarded=True) == 1
    assert gwp.wp_post(answer.get_json()["post_id"])["tags"] == [created[0]["id"]]
    rows = {r["operation_key"]: r for r in gwp.operations(job_id)}
    term = rows[f"{TENANT}/site/{SITE_NAME}/term/post_tag/{name.lower()}"]
    assert term["state"] == "CONFIRMED" and term["receipt"]["reconciled"] is True


@both_transports
def test_a_changed_draft_naming_a_new_tag_is_refused_before_wordpress_is_asked(
    gwp, proxy, transport
):
    """Issue 24, item 6: a changed body under an existing draft key is 422
    ``operation-key-reused`` before its terms are resolved: no request of any method reaches
    WordPress, the new tag is not created, the ledger row is untouched."""
    uid = uuid.uuid4().hex[:10]
    existing = _admin_term(gwp, "tags", f"Kept {uid}")
    # XML-RPC cannot create a tag (a transport limit): its first draft names existing tags only.
    first_tags = [existing["name"]] + ([f"First {uid}"] if transport == "rest" else [])
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    first = gwp.put_draft(job_id, draft_body(title=f"Reused {job_id}", tags=first_tags))
    assert first.status_code == 201, first.get_json()
    key = op_key(job_id, "draft")
    before = {r["operation_key"]: r for r in gwp.operations(job_id)}[key]
    assert before["state"] == "CONFIRMED"

    new_tag = f"Never {uid}"
    proxy.reset_log()
    changed = draft_body(title=f"Reused {job_id}", tags=[existing["name"], new_tag])
    refused = gwp.put_draft(job_id, changed)
    assert proxy.requests == []  # not one request, GETs included, reached WordPress
    assert refused.status_code == 422, refused.get_json()
    assert problem_slug(refused) == "operation-key-reused"
    assert refused.get_json()["operation_key"] == key
    assert _terms_named(gwp, "tags", new_tag) == []
    rows = {r["operation_key"]: r for r in gwp.operations(job_id)}
    assert rows[key] == before  # state CONFIRMED, same request hash, nothing rewritten
    assert f"{TENANT}/site/{SITE_NAME}/term/post_tag/{new_tag.lower()}" not in rows


def _admin_child(gw, name: str, parent: int) -> dict:
    answer = gw.wp.post(
        f"{gw.wp_url}/wp-json/wp/v2/categories", json={"name": name, "parent": parent}, timeout=30
    )
    assert answer.status_code == 201, answer.text
    return answer.json()


@both_transports
def test_names_wordpress_stores_escaped_are_found_and_nothing_is_created(gwp, proxy, transport):
    """Issue 28, WP-API/WP-API#1227: WordPress stores ``News & Events`` as ``News &amp;
    Events``; both transports find the existing category and tag by the name as written."""
    uid = uuid.uuid4().hex[:10]
    category = _admin_term(gwp, "categories", f"News & Events {uid}")
    tag = _admin_term(gwp, "tags", f"Q&A {uid}")  # stored as "Q&amp;A ..." by WordPress 6.1
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    proxy.reset_log()
    body = draft_body(categories=[f"News & Events {uid}"], tags=[f"q&a {uid}"])
    answer = gwp.put_draft(job_id, body)
    assert answer.status_code == 201, answer.get_json()
    post = gwp.wp_post(answer.get_json()["post_id"])
    assert post["categories"] == [category["id"]] and post["tags"] == [tag["id"]]
    assert proxy.count(method="POST", path=r"/wp/v2/tags") == 0  # found, not created
    assert proxy.count(rpc_method=r"^wp\.newTerm$") == 0
    assert [r["action"] for r in gwp.operations(job_id)] == ["draft"]  # no term operation


@both_transports
def test_one_category_name_under_two_parents_is_422_until_the_parent_chooses(gw, transport):
    """Issue 28, jahvi/post-category-filter#3: ``Local`` under Sports and under Politics. A
    name alone names both candidates with their parents and writes nothing; ``{name,
    parent}`` (parent by name or id) or the id chooses. A ``/`` is part of a name."""
    uid = uuid.uuid4().hex[:10]
    sports = _admin_term(gw, "categories", f"Sports {uid}")
    politics = _admin_term(gw, "categories", f"Politics {uid}")
    name = f"Local/Regional {uid}"
    under_sports = _admin_child(gw, name, sports["id"])
    under_politics = _admin_child(gw, name, politics["id"])
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201

    refused = gw.put_draft(job_id, draft_body(categories=[1, name.lower()]))
    assert refused.status_code == 422, refused.get_json()
    assert problem_slug(refused) == "validation-failed"
    [error] = refused.get_json()["errors"]
    assert error["pointer"] == "/categories/1"
    assert error["candidates"] == [
        {"id": child["id"], "name": name, "parent": {"id": parent["id"], "name": parent["name"]}}
        for child, parent in ((under_sports, sports), (under_politics, politics))
    ]
    assert sports["name"] in error["message"] and politics["name"] in error["message"]
    assert gw.operations(job_id) == [] and gw.count_objects(op_key(job_id, "draft")) == 0

    unknown_parent = draft_body(categories=[{"name": name, "parent": f"Nowhere {uid}"}])
    answer = gw.put_draft(job_id, unknown_parent)
    assert answer.status_code == 422
    assert [e["pointer"] for e in answer.get_json()["errors"]] == ["/categories/0/parent"]

    chosen = draft_body(categories=[{"name": name, "parent": f"sports {uid}"}])
    answer = gw.put_draft(job_id, chosen)
    assert answer.status_code == 201, answer.get_json()
    assert gw.wp_post(answer.get_json()["post_id"])["categories"] == [under_sports["id"]]
    assert answer.get_json()["verification"]["fields"]["categories"]["ok"] is True

    other = new_job_id()
    assert gw.put_job(other).status_code == 201
    by_id = draft_body(categories=[{"name": name, "parent": politics["id"]}])
    answer = gw.put_draft(other, by_id)
    assert answer.status_code == 201, answer.get_json()
    assert gw.wp_post(answer.get_json()["post_id"])["categories"] == [under_politics["id"]]


def test_a_tag_left_unknown_by_an_earlier_version_is_created_for_the_new_one(gwp, proxy):
    """A term row is site-scoped (one per site and name, shared by jobs and their versions),
    so a version bump never makes it stale: the v1 draft's tag creation meets a 503 page from
    in front of WordPress (nothing created, the row UNKNOWN); after the bump to v2 the v2
    draft looks the tag up, finds it absent, and creates it once under the same row - not
    409 ``stale-task-version``, which only a job-scoped row of an old version earns."""
    name = f"Bumped tag {uuid.uuid4().hex[:10]}"
    tags = r"^/wp-json/wp/v2/tags/?$"
    proxy.add_fault(Fault(kind="status_without_forward", status=503, method="POST", path=tags))
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    first = gwp.put_draft(job_id, draft_body(title=f"Bumped {job_id}", tags=[name]))
    assert first.status_code >= 500, first.get_json()
    key = f"{TENANT}/site/{SITE_NAME}/term/post_tag/{name.lower()}"
    assert {r["operation_key"]: r for r in gwp.operations(job_id)}[key]["state"] != "CONFIRMED"
    assert gwp.put_job(job_id, task_version=2).status_code == 200
    second = gwp.put_draft(job_id, draft_body(title=f"Bumped {job_id}", tags=[name]))
    assert second.status_code == 201, second.get_json()
    created = _terms_named(gwp, "tags", name)
    assert len(created) == 1
    assert gwp.wp_post(second.get_json()["post_id"])["tags"] == [created[0]["id"]]
    assert proxy.count(method="POST", path=tags, forwarded=True) == 1


@both_transports
def test_the_sites_terms_are_listed_read_only_for_a_forms_pickers(gw, transport):
    """``GET /v1/sites/{site}/terms/{taxonomy}`` (issue 54, the n8n node's Categories and Tags
    lists): the site's terms with their ids, parents and names as a person reads them (``&``,
    stored ``&amp;``), a search narrowing them; an unknown taxonomy or site is refused."""
    uid = uuid.uuid4().hex[:10]
    parent = _admin_term(gw, "categories", f"Parent {uid}")
    answer = gw.wp.post(
        f"{gw.wp_url}/wp-json/wp/v2/categories",
        json={"name": f"News & Events {uid}", "parent": parent["id"]},
        timeout=30,
    )
    assert answer.status_code == 201, answer.text
    child = answer.json()
    tag = _admin_term(gw, "tags", f"Tag {uid}")
    headers = gw.headers()

    listed = gw.client.get(f"/v1/sites/{SITE_NAME}/terms/categories", headers=headers)
    assert listed.status_code == 200, listed.get_json()
    body = listed.get_json()
    assert body["site"] == SITE_NAME and body["taxonomy"] == "categories"
    by_id = {t["id"]: t for t in body["terms"]}
    assert by_id[child["id"]] == {
        "id": child["id"],
        "name": f"News & Events {uid}",
        "parent": parent["id"],
    }
    searched = gw.client.get(
        f"/v1/sites/{SITE_NAME}/terms/tags", query_string={"search": uid}, headers=headers
    ).get_json()
    assert searched["terms"] == [{"id": tag["id"], "name": f"Tag {uid}", "parent": 0}]
    assert searched["truncated"] is False

    unknown = gw.client.get(f"/v1/sites/{SITE_NAME}/terms/authors", headers=headers)
    assert unknown.status_code == 404 and problem_slug(unknown) == "not-found"
    no_site = gw.client.get("/v1/sites/nowhere/terms/tags", headers=headers)
    assert no_site.status_code == 422 and problem_slug(no_site) == "site-not-found"
