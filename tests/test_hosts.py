"""WordPress as hosts serve it (issue 55, docs/hosts.md), each host through a front of the
fault proxy's (:mod:`gateway_tools.host_fronts`) in front of the real test WordPress: a cache
in front of ``/wp-json/`` that ignores ``no-cache`` (litespeedtech/lscache_wp#413, #732), a
host whose REST API answers only at ``?rest_route=`` (tradik/wpexporter#66), a redirect in
front of the site (WP-API/node-wpapi#248). The URL helpers are checked without WordPress."""

from __future__ import annotations

import json

import pytest
import requests
from support import AUTHOR_PASSWORD_ENV
from support import CALLS
from support import SECRET_KEY
from support import SITE_NAME
from support import TENANT
from support import draft_body
from support import gateway_cli
from support import new_job_id
from support import op_key
from support import problem_slug
from support import xmlrpc_only
from test_main_job import full_job

from gateway.ledger.db import database
from gateway.operator import doctor
from gateway.wordpress import rest_root
from gateway_tools.host_fronts import HostFront

wordpress = pytest.mark.wordpress
POST_BY_ID = r"/wp/v2/posts/\d+$"
# A write to a post: a POST that is not a read served as GET (support.CALLS, "write").
WRITE = {**CALLS["rest"]["write"], "path": r"^/wp-json/wp/v2/posts/\d+$"}


def post(gw, path: str):
    return gw.client.post(path, json={}, headers=gw.headers())


def two_versions(gw) -> tuple[str, int]:
    """A job's draft at version 1, then at version 2 with another title: ``(job_id, post)``."""
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    first = gw.put_draft(job_id, draft_body(title="Version one"))
    assert first.status_code == 201, first.get_json()  # its read-back left it in the cache
    assert gw.put_job(job_id, task_version=2).status_code in (200, 201)
    return job_id, first.get_json()["post_id"]


def cli_env(ledger_url: str, wp_site: dict) -> dict:
    return {
        "GATEWAY_DATABASE_URL": ledger_url,
        "GATEWAY_SECRET_KEY": SECRET_KEY,
        AUTHOR_PASSWORD_ENV: wp_site["users"]["author"]["app_password"],
    }


def sites_add(url: str, ledger_url: str, wp_site: dict):
    args = ["sites", "add", "--tenant", TENANT, "--name", SITE_NAME, "--url", url]
    args += ["--username", wp_site["users"]["author"]["username"]]
    args += ["--app-password-env", AUTHOR_PASSWORD_ENV]
    return gateway_cli(args, cli_env(ledger_url, wp_site))


# --------------------------------------------------------------------------- a cache in front


@wordpress
def test_a_cache_dropping_query_strings_neither_fails_a_version_2_draft_nor_makes_repair_write(
    gwp, proxy
):
    """litespeedtech/lscache_wp#413: the cache keeps each post's GET by path, whatever the
    query and no-cache say, and says nothing of itself. The version-2 draft verifies (its
    read-back is made again as a POST), is approvable, and repair writes nothing."""
    proxy.front = HostFront("cache", keep_query=False, path=POST_BY_ID, announce=False)
    job_id, post_id = two_versions(gwp)
    assert gwp.verification(job_id).get_json()["ok"] is True
    second = gwp.put_draft(job_id, draft_body(title="Version two", content="<p>Two.</p>"))
    assert second.status_code == 201, second.get_json()
    body = second.get_json()
    assert body["state"] == "CONFIRMED" and body["verification"]["ok"] is True
    assert proxy.count(fault_kind="front:cache") >= 1  # the cache did answer reads
    assert gwp.wp_post(post_id)["title"]["raw"] == "Version two"
    assert gwp.verification(job_id).get_json()["ok"] is True
    writes = proxy.count(**WRITE)
    repaired = post(gwp, f"/v1/jobs/{job_id}/repair")
    assert repaired.status_code == 200, repaired.get_json()
    assert repaired.get_json()["fixes"] == {}
    assert proxy.count(**WRITE) == writes  # repair sent no write
    requested = post(gwp, f"/v1/jobs/{job_id}/approval-requests")
    assert requested.status_code == 201, requested.get_json()
    # a block is written into WordPress's content, not into the cache's older copy
    block = gwp.client.put(
        f"/v1/jobs/{job_id}/blocks/promo", json={"html": "<p>Promo</p>"}, headers=gwp.headers()
    )
    assert block.status_code == 201, block.get_json()
    content = gwp.wp_post(post_id)["content"]["raw"]
    assert "<p>Two.</p>" in content and "Promo" in content


@wordpress
def test_a_url_keyed_cache_is_passed_by_a_fresh_query_parameter(gwp, proxy):
    """A cache keyed by the whole URL never holds a read: each carries a value used once."""
    proxy.front = HostFront("cache", path=POST_BY_ID)
    job_id, post_id = two_versions(gwp)
    second = gwp.put_draft(job_id, draft_body(title="Version two"))
    assert second.status_code == 201 and second.get_json()["verification"]["ok"] is True
    assert proxy.count(fault_kind="front:cache") == 0
    assert proxy.count(method="POST", query="gateway_fresh") == 0  # no second read needed


@wordpress
@pytest.mark.parametrize("announce", [True, False], ids=["x-cache-hit", "silent"])
def test_a_cache_defeating_even_the_second_read_is_named_and_nothing_is_repaired(
    gwp, proxy, announce
):
    """The cache also serves a POST carrying X-HTTP-Method-Override from its store: the
    version-2 draft is not CONFIRMED on the cached copy; the answer names the cache and how
    to exclude REST from it; repair writes nothing. A cache that says so (X-Cache: HIT) is
    named by verification and repair too; a silent one shows only where its copy is older
    than the write."""
    proxy.front = HostFront(
        "cache", keep_query=False, override=True, path=POST_BY_ID, announce=announce
    )
    job_id, post_id = two_versions(gwp)
    second = gwp.put_draft(job_id, draft_body(title="Version two"))
    assert second.status_code == 502 and problem_slug(second) == "upstream-refused"
    problem = second.get_json()
    assert "cache" in problem["detail"] and "/wp-json/" in problem["detail"]
    assert problem["upstream"]["cache"]
    assert "firewall" not in problem["detail"]
    version_2 = [r for r in gwp.operations(job_id) if r["task_version"] == 2]
    assert all(r["state"] != "CONFIRMED" for r in version_2)
    # A cache that says so is found before the update (the post is read first: nothing is
    # written); a silent one only by the read-back of the write WordPress made.
    held = "Version one" if announce else "Version two"
    assert gwp.wp_post(post_id)["title"]["raw"] == held
    writes = proxy.count(**WRITE)
    repaired = post(gwp, f"/v1/jobs/{job_id}/repair")
    assert proxy.count(**WRITE) == writes  # no write on a cached copy
    checked = gwp.verification(job_id)
    if announce:
        assert repaired.status_code == 502 and "cache" in repaired.get_json()["detail"]
        assert checked.status_code == 502 and checked.get_json()["upstream"]["cache"]
    else:  # version 1 (the ledger's latest CONFIRMED draft) is what the cache holds
        assert repaired.status_code == 200 and repaired.get_json()["fixes"] == {}


@wordpress
def test_doctor_names_a_caching_front_and_what_to_exclude(gwp, proxy):
    proxy.front = HostFront("cache", keep_query=True)
    with gwp.app.app_context(), database.connection_context():
        result = doctor.doctor(gwp.app.config["GATEWAY"], TENANT, SITE_NAME)
    cache = {c["check"]: c for c in result["checks"]}["cache"]
    assert cache["ok"] is None and "X-Cache: HIT" in cache["detail"]
    assert "/wp-json/" in cache["fix"] and "LiteSpeed" in cache["fix"]


@wordpress
def test_doctor_behind_a_silent_path_keyed_cache_reads_the_index_past_it_and_names_it(
    gwp, proxy, wp_site
):
    """A cache keyed by path alone, sending no header, holds the ``_fields=namespaces`` index
    ``sites add`` read: doctor reads the index as a POST served as GET, so no false
    ``application_passwords`` failure stops the later checks, and the GET that disagrees
    with it names the cache."""
    proxy.front = HostFront("cache", keep_query=False, announce=False)
    author = wp_site["users"]["author"]
    auth = (author["username"], author["app_password"])
    kept = requests.get(proxy.url + "/wp-json/", {"_fields": "namespaces"}, auth=auth, timeout=30)
    # the cut index (WordPress 6.1 adds ``_links`` to ``_fields``): no authentication methods
    assert "namespaces" in kept.json() and "authentication" not in kept.json()
    with gwp.app.app_context(), database.connection_context():
        result = doctor.doctor(gwp.app.config["GATEWAY"], TENANT, SITE_NAME)
    checks = {c["check"]: c for c in result["checks"]}
    assert proxy.count(fault_kind="front:cache") >= 1  # the cache did answer GETs
    assert checks["application_passwords"]["ok"] is True
    assert checks["install"]["ok"] is True
    assert checks["cache"]["ok"] is False and "cache" in checks["cache"]["detail"]
    assert not [c["check"] for c in result["checks"] if c["detail"].startswith("not run")]


# --------------------------------------------------------------------------- ?rest_route= only


@wordpress
def test_a_site_serving_rest_only_at_rest_route_runs_the_main_job(gwp, proxy, ledger_url, wp_site):
    """tradik/wpexporter#66: /wp-json/ answers 404 (a host hiding it, or plain permalinks
    that cannot change). ``sites add`` finds ``/index.php?rest_route=/`` and stores it; the
    main job (three media, one post, every field verified) never asks at /wp-json/ again, and
    doctor's scratch draft is deleted: nginx answers 405 to a DELETE at ``/?rest_route=``
    (wp-includes/rest-api.php, get_rest_url()), not at ``/index.php?rest_route=``."""
    root = proxy.url + "/index.php?rest_route=/"
    proxy.front = HostFront("rest_route_only")
    added = sites_add(proxy.url, ledger_url, wp_site)
    assert added.exit_code == 0, added.output
    assert json.loads(added.stdout.splitlines()[-1])["rest_root"] == root
    listed = gateway_cli(["sites", "list"], cli_env(ledger_url, wp_site))
    assert json.loads(listed.stdout)[0]["rest_root"] == root
    proxy.reset_log()
    job_id = new_job_id()
    _request, draft, media_ids = full_job(gwp, job_id)
    assert draft["state"] == "CONFIRMED"
    report = gwp.verification(job_id).get_json()
    assert report["ok"] is True and all(f["ok"] for f in report["fields"].values())
    assert report["fields"]["body_media"]["actual"] == [media_ids["fig-1"], media_ids["fig-2"]]
    keys = [op_key(job_id, "draft"), *(op_key(job_id, "media", s) for s in media_ids)]
    assert len(gwp.lookup(keys)) == 4
    assert proxy.count(path=r"^/wp-json") == 0
    assert proxy.count(
        method="POST", query=r"rest_route=%2Fwp%2Fv2%2Fmedia|rest_route=/wp/v2/media"
    )
    with gwp.app.app_context(), database.connection_context():
        result = doctor.doctor(gwp.app.config["GATEWAY"], TENANT, SITE_NAME)
    assert result["rest_root"] == root
    checks = {c["check"]: c for c in result["checks"]}
    assert checks["rest_api"]["ok"] is True
    assert checks["utf8mb4"]["ok"] is True and "left" not in checks["utf8mb4"]["detail"]
    deletes = [r for r in proxy.requests if r.method == "DELETE"]
    assert deletes and all(r.path == "/index.php" and r.status == 200 for r in deletes)


# --------------------------------------------------------------------------- a redirect


@wordpress
def test_a_redirect_is_named_with_the_url_to_use(gwp, proxy, ledger_url, wp_site):
    """WP-API/node-wpapi#248 (non-www to www): ``sites add``, doctor and a draft's refusal
    say where the redirect points and suggest that URL; nothing is stored or written."""
    target = wp_site["url"].rstrip("/")
    proxy.front = HostFront("redirect", location=target)
    refused = sites_add(proxy.url, ledger_url, wp_site)
    assert refused.exit_code != 0
    assert f"--url {target}" in refused.output and "redirect" in refused.output
    with gwp.app.app_context(), database.connection_context():
        result = doctor.doctor(gwp.app.config["GATEWAY"], TENANT, SITE_NAME)
    rest = {c["check"]: c for c in result["checks"]}["rest_api"]
    assert rest["ok"] is False and f"--url {target}" in rest["detail"]
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    answer = gwp.put_draft(job_id, draft_body())
    assert answer.status_code == 502 and problem_slug(answer) == "upstream-refused"
    problem = answer.get_json()
    assert problem["upstream"]["location"].startswith(target + "/wp-json/")
    assert problem["upstream"]["suggested_url"] == target
    assert target in problem["detail"] and "firewall" not in problem["detail"]
    # one statement: where it points, why not followed, what to run (issue 55 try-out)
    assert problem["detail"].count("follows no redirect") == 1
    assert problem["detail"].count(f"--url {target}") == 1


@wordpress
@xmlrpc_only
def test_a_redirect_in_front_of_xmlrpc_is_named_too(gwp, proxy, wp_site, transport):
    target = wp_site["url"].rstrip("/")
    proxy.front = HostFront("redirect", location=target)
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    answer = gwp.put_draft(job_id, draft_body())
    assert answer.status_code == 502 and problem_slug(answer) == "upstream-refused"
    assert answer.get_json()["upstream"]["suggested_url"] == target
    assert proxy.count(forwarded=True) == 0


# --------------------------------------------------------------------------- URL helpers


def test_rest_root_urls_discovery_links_and_redirect_suggestions():
    """The helpers every call goes through, without WordPress."""
    posts = "https://x.example/index.php?rest_route=/wp/v2/posts"
    assert rest_root.route_url("https://x.example/index.php?rest_route=/", "/wp/v2/posts") == posts
    # a root stored as /?rest_route=/ is called at index.php too (nginx: 405 to DELETE at /?)
    assert rest_root.route_url("https://x.example/?rest_route=/", "/wp/v2/posts") == posts
    assert rest_root.route_url("https://x.example/wp-json/", "/") == "https://x.example/wp-json/"
    # an advertised root keeps its path and query, never its host: credentials stay home
    assert rest_root.candidates("https://x.example", "http://internal:8080/?rest_route=/") == [
        "https://x.example/?rest_route=/",
        "https://x.example/wp-json/",
        "https://x.example/index.php?rest_route=/",
    ]
    header = '<https://x.example/wp-json/>; rel="https://api.w.org/"'
    links = requests.utils.parse_header_links(header)
    assert rest_root.advertised_root({link["rel"]: link for link in links}, "") == (
        "https://x.example/wp-json/"
    )
    page = '<head><link rel="https://api.w.org/" href="https://x.example/?rest_route=/" /></head>'
    assert rest_root.advertised_root({}, page) == "https://x.example/?rest_route=/"
    assert (
        rest_root.suggested_site_url(
            "http://x.example",
            "http://x.example/wp-json/wp/v2/posts",
            "https://www.x.example/wp-json/wp/v2/posts",
        )
        == "https://www.x.example"
    )
    assert rest_root.cache_hit({"X-LiteSpeed-Cache": "hit"}) == "X-LiteSpeed-Cache: hit"
    assert rest_root.cache_hit({"CF-Cache-Status": "DYNAMIC", "Age": "0"}) is None
    assert rest_root.caching_front({"CF-Cache-Status": "MISS"}) == "CF-Cache-Status: MISS"
    assert rest_root.fresh_value() != rest_root.fresh_value()
