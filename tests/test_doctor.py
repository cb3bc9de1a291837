"""``gateway doctor``: every check of the registry against the real test WordPress, healthy,
then made faulty on purpose (a contributor without ``upload_files``, the companion plugin
deactivated or older than expected, a ``utf8mb3`` title column) or through the fault proxy
(Authorization header stripped, application passwords unavailable, PHP notices in JSON)."""

from __future__ import annotations

import uuid
from contextlib import contextmanager

import pytest
import requests
from support import SECRET_KEY
from support import SITE_NAME
from support import TENANT
from support import admin_session
from support import both_transports
from support import mysql_query
from support import xmlrpc_only

from gateway.ledger.db import database
from gateway.operator import doctor
from gateway.operator import doctor_registry
from gateway.tenancy import sites
from gateway_tools.fault_proxy import Fault

pytestmark = pytest.mark.wordpress
ME = r"^/wp-json/wp/v2/users/me"
PLUGIN = "publishing-gateway-companion/publishing-gateway-companion"


def _run(gw) -> dict:
    with gw.app.app_context(), database.connection_context():
        result = doctor.doctor(gw.app.config["GATEWAY"], TENANT, SITE_NAME)
    return {c["check"]: c for c in result["checks"]} | {"_result": result}


def _scratch_drafts(gw) -> list[dict]:
    answer = gw.wp.get(
        f"{gw.wp_url}/wp-json/wp/v2/posts",
        params={"search": "gateway doctor scratch", "status": "any", "context": "edit"},
        timeout=30,
    )
    answer.raise_for_status()
    return answer.json()


@both_transports
@pytest.mark.site_exclusive  # no other run's doctor may have its scratch draft up meanwhile
def test_a_healthy_site_passes_every_check_and_leaves_no_scratch_draft(gw, transport):
    checks = _run(gw)
    result = checks.pop("_result")
    assert list(checks) == [c.name for c in doctor_registry.checks_for(transport)]
    # over XML-RPC three guarantees are weaker by nature: warnings, not failures
    weaker = {"uniqueness_guard", "alt_text", "new_terms"} if transport == "xmlrpc" else set()
    assert {name: c["ok"] for name, c in checks.items()} == {
        name: None if name in weaker else True for name in checks
    }
    assert result["ok"] is True and all("fix" not in c for c in checks.values() if c["ok"])
    assert result["transport"] == transport
    # the exact version the test site serves (site.json), read by the gateway over each transport
    assert result["wordpress_version"] == gw.site["wordpress"]["version"]
    if transport == "xmlrpc":
        assert {"xmlrpc_api", "lookup_by_operation_key"} <= set(checks)
        assert not {"rest_api", "authorization_header", "companion_plugin"} & set(checks)
    assert all(c["explains"] for c in checks.values())
    assert _scratch_drafts(gw) == []


def test_stripped_authorization_header_is_named_with_the_apache_and_nginx_fix(gwp, proxy):
    proxy.add_fault(Fault(kind="strip_authorization", path=ME, times=None))
    checks = _run(gwp)
    bad = checks["authorization_header"]
    assert bad["ok"] is False and "rest_not_logged_in" in bad["detail"]
    assert "CGIPassAuth" in bad["fix"] and "fastcgi_param HTTP_AUTHORIZATION" in bad["fix"]
    assert checks["login"]["ok"] is None and checks["_result"]["ok"] is False
    # the password signs in over XML-RPC, where no header is involved: the header is the cause
    assert "stripped the header" in bad["detail"]


def test_application_passwords_unavailable(gwp, proxy):
    proxy.add_fault(Fault(kind="app_passwords_unavailable", path=ME, times=None))
    checks = _run(gwp)
    assert checks["application_passwords"]["ok"] is False
    assert "application_passwords_disabled" in checks["application_passwords"]["detail"]
    assert "HTTPS" in checks["application_passwords"]["fix"]


def test_php_notices_in_json(gwp, proxy):
    proxy.add_fault(Fault(kind="php_notice", path=ME, times=None))
    checks = _run(gwp)
    assert checks["json_clean"]["ok"] is False and "Notice" in checks["json_clean"]["detail"]
    assert "display_errors" in checks["json_clean"]["fix"]
    assert checks["login"]["ok"] is True  # reads still parse leniently


def _contributor(site: dict) -> tuple[str, str]:
    """A new contributor (no ``upload_files``) with an application password. One user per
    call: the passes of a CI run share the site, and two passes creating one shared name at
    once got WordPress's ``existing_user_login`` (or a user the other was still setting up)."""
    admin = admin_session(site)
    base = site["url"].rstrip("/") + "/wp-json/wp/v2/users"
    name = f"gw-doctor-contributor-{uuid.uuid4().hex[:8]}"
    created = admin.post(
        base,
        json={
            "username": name,
            "email": f"{name}@example.invalid",
            "password": uuid.uuid4().hex,
            "roles": ["contributor"],
        },
        timeout=30,
    )
    assert created.status_code == 201, created.text
    user = created.json()
    made = admin.post(
        f"{base}/{user['id']}/application-passwords",
        json={"name": f"doctor {uuid.uuid4().hex[:8]}"},
        timeout=30,
    )
    made.raise_for_status()
    return name, made.json()["password"]


@both_transports
def test_missing_capability(gw, wp_site, transport):
    username, password = _contributor(wp_site)
    with gw.app.app_context(), database.connection_context():
        sites.add_site(SECRET_KEY, TENANT, SITE_NAME, gw.wp_url, username, password, transport)
    checks = _run(gw)
    assert checks["capabilities"]["ok"] is False, checks
    assert "upload_files" in checks["capabilities"]["detail"]
    assert "edit_posts" not in checks["capabilities"]["detail"]


@contextmanager
def _companion_deactivated(site: dict):
    admin = admin_session(site)
    url = f"{site['url'].rstrip('/')}/wp-json/wp/v2/plugins/{PLUGIN}"
    answer = admin.post(url, json={"status": "inactive"}, timeout=60)
    assert answer.status_code == 200, answer.text
    sites.forget_companion()
    try:
        yield
    finally:
        back = admin.post(url, json={"status": "active"}, timeout=60)
        sites.forget_companion()
        assert back.status_code == 200 and back.json()["status"] == "active", back.text


@pytest.mark.site_exclusive  # the companion plugin is switched off for the whole site
def test_companion_missing_makes_rank_math_fields_unreadable(gw, wp_site):
    with _companion_deactivated(wp_site):
        checks = _run(gw)
    assert (
        checks["companion_plugin"]["ok"] is False
        and "absent" in checks["companion_plugin"]["detail"]
        and "--transport xmlrpc" in checks["companion_plugin"]["fix"]
    )
    assert checks["_result"]["ok"] is False  # exit 1: the plugin's guarantees are gone
    assert checks["uniqueness_guard"]["ok"] is None
    assert checks["rank_math_fields"]["ok"] is None
    assert "not readable" in checks["rank_math_fields"]["detail"]
    assert checks["_result"]["guarantees"]["seo_meta"] is False
    assert _scratch_drafts(gw) == []


def test_companion_older_than_expected(gw, monkeypatch):
    monkeypatch.setattr(doctor_registry, "COMPANION_MIN_VERSION", "99.0.0")
    checks = _run(gw)
    assert checks["companion_plugin"]["ok"] is False
    assert "older than 99.0.0" in checks["companion_plugin"]["detail"]


@pytest.mark.site_exclusive  # the posts table itself is altered
def test_a_title_column_without_utf8mb4_fails_the_emoji_round_trip(gw, wp_site):
    column = "post_title text CHARACTER SET {0} COLLATE {0}_unicode_ci NOT NULL"
    mysql_query(wp_site, "ALTER TABLE wp_posts MODIFY " + column.format("utf8mb3"))
    try:
        checks = _run(gw)
    finally:
        mysql_query(wp_site, "ALTER TABLE wp_posts MODIFY " + column.format("utf8mb4"))
    assert checks["utf8mb4"]["ok"] is False, checks["utf8mb4"]
    assert "emoji title" in checks["utf8mb4"]["detail"]
    assert _scratch_drafts(gw) == []
    assert requests.get(gw.wp_url + "/wp-json/", timeout=30).status_code == 200


@xmlrpc_only
def test_a_refused_password_over_xmlrpc_fails_the_login_check(gw, wp_site):
    wrong = "aaaa bbbb cccc dddd eeee ffff"
    with gw.app.app_context(), database.connection_context():
        sites.add_site(
            SECRET_KEY, TENANT, SITE_NAME, gw.wp_url,
            wp_site["users"]["author"]["username"], wrong, "xmlrpc",
        )  # fmt: skip
    checks = _run(gw)
    assert checks["xmlrpc_api"]["ok"] is True and checks["firewall"]["ok"] is True
    assert checks["login"]["ok"] is False and "refused" in checks["login"]["detail"]
    assert "application password" in checks["login"]["fix"]
    assert checks["capabilities"]["ok"] is None and checks["_result"]["ok"] is False
