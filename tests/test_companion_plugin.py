"""The companion plugin as a wordpress.org reviewer reads it (issue 55), by behaviour on the
real test WordPress (both lines: WordPress 6.1 and 7.1):

* ``/objects`` describes only objects the caller may read: another author or a contributor
  learns that a private draft carries a key (so a lookup never mistakes it for absence), never
  its title, status, dates or author;
* ``/status`` tells a contributor nothing beyond detection (no WordPress version);
* ``keys`` is validated and the registered meta are sanitized;
* the lookup index: made on activation in one statement even on a big ``wp_postmeta``, kept on
  deactivation, removed with its option by ``uninstall.php`` (on the ``exclusive`` site: these
  switch the plugin for the whole site).
"""

from __future__ import annotations

import json
import uuid

import pytest
from support import admin_session
from support import mysql_query
from support import new_wp_user
from support import switch_companion

NAMESPACE = "/wp-json/publishing-gateway/v1"
KEY_META = "_gateway_operation_key"
INDEX = "pgw_operation_key"
OPTION = "pgw_companion_key_index"


def _url(site: dict, path: str) -> str:
    return site["url"].rstrip("/") + NAMESPACE + path


def _author_session(site: dict):
    session = admin_session(site)
    author = site["users"]["author"]
    session.auth = (author["username"], author["app_password"])
    return session


def _lookup(session, site: dict, keys: list[str]) -> dict[str, dict]:
    answer = session.get(_url(site, "/objects"), params={"keys": ",".join(keys)}, timeout=30)
    assert answer.status_code == 200, answer.text
    return {o["operation_key"]: o for o in answer.json()["objects"]}


def _post(session, site: dict, title: str, status: str) -> tuple[str, int]:
    key = f"plugin-test/{uuid.uuid4().hex}"
    made = session.post(
        site["url"].rstrip("/") + "/wp-json/wp/v2/posts",
        json={"title": title, "status": status, "meta": {KEY_META: key}},
        timeout=30,
    )
    assert made.status_code == 201, made.text
    return key, made.json()["id"]


def test_another_author_or_a_contributor_sees_no_private_draft_title(wp_site):
    """The author's draft and private post: their owner and an editor read them in full; an
    other author and a contributor get ``readable: false`` and nothing else."""
    owner = _author_session(wp_site)
    title = f"Private draft {uuid.uuid4().hex}"
    posts = dict(_post(owner, wp_site, title, status) for status in ("draft", "private"))
    keys = list(posts)
    _, other_author = new_wp_user(wp_site, "author")
    _, contributor = new_wp_user(wp_site, "contributor")
    for session in (other_author, contributor):
        answer = session.get(_url(wp_site, "/objects"), params={"keys": ",".join(keys)})
        assert answer.status_code == 200, answer.text
        assert title not in answer.text
        found = {o["operation_key"]: o for o in answer.json()["objects"]}
        assert found == {
            k: {"operation_key": k, "id": i, "type": "post", "readable": False}
            for k, i in posts.items()
        }
    for session in (owner, admin_session(wp_site)):
        found = _lookup(session, wp_site, keys)
        assert {o["title"] for o in found.values()} == {title}
        assert all(o["readable"] and o["editable"] for o in found.values())
        assert {o["status"] for o in found.values()} == {"draft", "private"}


def test_status_tells_a_contributor_no_wordpress_version(wp_site):
    _, contributor = new_wp_user(wp_site, "contributor")
    seen = contributor.get(_url(wp_site, "/status"), timeout=30)
    assert seen.status_code == 200, seen.text
    assert seen.json()["plugin"] == "publishing-gateway-companion"
    assert "wordpress" not in seen.json() and "key_index" not in seen.json()
    assert wp_site["wordpress"]["version"] not in seen.text
    author = _author_session(wp_site).get(_url(wp_site, "/status"), timeout=30).json()
    assert author["wordpress"] == wp_site["wordpress"]["version"]  # what doctor reads
    assert author["key_index"] is True


@pytest.mark.parametrize("keys", [" , ", ",".join(f"k{i}" for i in range(101))])
def test_keys_are_validated(wp_site, keys):
    answer = _author_session(wp_site).get(_url(wp_site, "/objects"), params={"keys": keys})
    assert answer.status_code == 400
    body = answer.json()
    assert body["code"] == "rest_invalid_param"
    assert "operation key" in body["data"]["params"]["keys"]


def test_registered_meta_are_sanitized(wp_site):
    key = f"plugin-test/{uuid.uuid4().hex}"
    made = _author_session(wp_site).post(
        wp_site["url"].rstrip("/") + "/wp-json/wp/v2/posts",
        json={
            "title": "Sanitized meta",
            "meta": {KEY_META: f" <b>{key}</b>\x07 ", "rank_math_title": "<b>Bold</b>\ntitle"},
        },
        params={"context": "edit"},
        timeout=30,
    )
    assert made.status_code == 201, made.text
    assert made.json()["meta"][KEY_META] == key  # markup stripped, the key's syntax kept
    assert made.json()["meta"]["rank_math_title"] == "Bold title"
    assert list(_lookup(admin_session(wp_site), wp_site, [key])) == [key]


# ----------------------------------------------------------------- lifecycle (whole site)


def _index_and_option(site: dict) -> tuple[bool, str]:
    index = mysql_query(site, f"SHOW INDEX FROM wp_postmeta WHERE Key_name = '{INDEX}'")
    option = mysql_query(
        site, f"SELECT option_value FROM wp_options WHERE option_name = '{OPTION}'"
    )
    return bool(index), option


@pytest.mark.site_exclusive  # the plugin is deactivated and uninstalled for the whole site
def test_deactivation_keeps_the_index_and_uninstall_removes_it(wp_site):
    assert _index_and_option(wp_site) == (True, "present")
    try:
        assert switch_companion("off", wp_site) == "inactive"
        assert _index_and_option(wp_site) == (True, "present")
        assert switch_companion("uninstall", wp_site) == "inactive"
        assert _index_and_option(wp_site) == (False, "")
    finally:
        assert switch_companion("on", wp_site) == "active"
    assert _index_and_option(wp_site) == (True, "present")  # made again by activation


BULK_ROWS = 200_000


@pytest.mark.site_exclusive  # fills wp_postmeta and uninstalls the plugin for the whole site
def test_activation_on_a_big_postmeta_is_one_statement(wp_site):
    """The index is one ALTER TABLE on activation (SAVEQUERIES: every statement the
    activation ran), however many rows wp_postmeta holds; no statement reads its rows."""
    bulk = f"pgw-bulk-{uuid.uuid4().hex[:8]}"
    mysql_query(
        wp_site,
        "INSERT INTO wp_postmeta (post_id, meta_key, meta_value) "
        f"SELECT 0, '{bulk}', CONCAT('v', seq) FROM seq_1_to_{BULK_ROWS}",
    )
    try:
        assert switch_companion("uninstall", wp_site) == "inactive"
        ran = json.loads(switch_companion("on", wp_site, "--queries"))
    finally:
        switch_companion("on", wp_site)
        mysql_query(wp_site, f"DELETE FROM wp_postmeta WHERE meta_key = '{bulk}'")
    assert ran["state"] == "active"
    on_postmeta = [q for q in ran["queries"] if "wp_postmeta" in q]
    assert [q.split(" ", 1)[0].upper() for q in on_postmeta] == ["SHOW", "ALTER"], on_postmeta
    assert on_postmeta[1].startswith(f"ALTER TABLE wp_postmeta ADD INDEX {INDEX} ")
    assert sum(q.upper().startswith("ALTER") for q in ran["queries"]) == 1
    assert _index_and_option(wp_site) == (True, "present")
