"""Preflight of a WordPress site (``gateway doctor``): can the gateway reach it over its
transport, log in, and which of its guarantees hold there?

Over REST without the companion plugin the gateway still works, but with weaker guarantees: no
lookup by operation key (reconciliation waits out the in-flight window and falls back to
suspected-duplicate review), no uniqueness guard inside WordPress, and no Rank Math fields.
Over XML-RPC no plugin is needed for lookups and Rank Math fields (custom fields), but nothing
inside WordPress refuses a second object and alt text cannot be written. This report says so
plainly instead of letting a user find out from a duplicate.
"""

from __future__ import annotations

from gateway import sites
from gateway.config import Config
from gateway.wordpress.errors import UpstreamRefused
from gateway.wordpress.errors import WordPressAuthError
from gateway.wordpress.errors import WordPressError

ROLE_ADVICE = {
    "administrator": "use an author: administrators have unfiltered_html, so WordPress would "
    "not sanitise script in content written for them",
    "editor": "use an author: editors have unfiltered_html, so WordPress would not sanitise "
    "script in content written for them",
}


def _check(name: str, ok: bool | None, detail: str) -> dict:
    return {"check": name, "ok": ok, "detail": detail}


def firewall_detail(error: UpstreamRefused, endpoint: str = "/wp-json/") -> str:
    """What a person needs to lift a block in front of WordPress's API at ``endpoint``
    (status, content type, the page's title), never a credentials hint: WordPress did not
    answer."""
    title = f" titled {error.title!r}" if error.title else ""
    api = "XML-RPC API" if endpoint == "/xmlrpc.php" else "REST API"
    return (
        f"a firewall, CDN, proxy or the web server in front of the {api} answered "
        f"{error.method} {error.url} with {error.status} {error.content_type or 'no content type'}"
        f"{title}, not WordPress: let the gateway's address or User-Agent "
        f"'publishing-gateway' through to {endpoint}"
    )


def doctor(config: Config, tenant: str, site_name: str) -> dict:
    """Check site ``site_name`` of ``tenant``.

    Returns ``{"site", "url", "ok", "checks": [{"check", "ok", "detail"}], "guarantees"}``;
    ``ok`` is False when a check failed (None entries are warnings). When the first probe
    (``GET /wp/v2/users/me``) meets an answer from in front of WordPress the only check is
    ``firewall`` (False), naming the status, content type and page title.

    Raises:
        SiteNotFound: no such site for the tenant.
    """
    site = sites.get_site(tenant, site_name)
    client = sites.client_for(site, config.secret_key, config.wp_timeout)
    api = "xmlrpc_api" if client.transport == "xmlrpc" else "rest_api"
    checks = []
    try:
        me = client.me()
    except UpstreamRefused as error:
        endpoint = "/xmlrpc.php" if api == "xmlrpc_api" else "/wp-json/"
        checks.append(_check("firewall", False, firewall_detail(error, endpoint)))
        return _result(site, checks, sites.ABSENT)
    except WordPressAuthError as error:
        checks.append(_check("login", False, f"application password refused: {error.message}"))
        return _result(site, checks, sites.ABSENT)
    except WordPressError as error:
        checks.append(_check(api, False, f"{client.url('/')} not usable: {error}"))
        return _result(site, checks, sites.ABSENT)
    answers = "answers" if api == "xmlrpc_api" else "answers with pretty permalinks"
    checks.append(_check(api, True, f"{client.url('/')} {answers}"))
    roles = me.get("roles") or []
    checks.append(_check("login", True, f"logged in as {me.get('slug')} ({', '.join(roles)})"))
    advice = [ROLE_ADVICE[r] for r in roles if r in ROLE_ADVICE]
    checks.append(
        _check(
            "role",
            None if advice else True,
            advice[0] if advice else "author role: WordPress sanitises content as for any author",
        )
    )
    checks.append(_install_check(site, client))
    sites.forget_companion()
    found = sites.companion(site, client)
    if found.transport == "xmlrpc":
        checks.extend(_xmlrpc_checks())
        return _result(site, checks, found)
    checks.append(
        _check(
            "companion_plugin",
            found.present or None,
            f"version {found.version}: lookup by operation key available"
            if found.present
            else "absent: reconciliation can only wait out GATEWAY_INFLIGHT_WINDOW, then asks an "
            "editor about same-title posts",
        )
    )
    checks.append(
        _check(
            "uniqueness_guard",
            found.guard or None,
            "WordPress refuses a second object with one operation key"
            if found.guard
            else "absent: a resend after a lost response relies on the in-flight window alone",
        )
    )
    checks.append(
        _check(
            "seo_meta",
            found.seo_meta or None,
            "Rank Math fields are writable and readable over REST"
            if found.seo_meta
            else "absent: Rank Math fields are silently dropped by WordPress and verify as null",
        )
    )
    return _result(site, checks, found)


def _xmlrpc_checks() -> list[dict]:
    return [
        _check(
            "lookup_by_operation_key",
            True,
            "custom field gateway_operation_key, found by scanning wp.getPosts newest first "
            "(no plugin needed)",
        ),
        _check(
            "uniqueness_guard",
            None,
            "absent over XML-RPC: the gateway's ledger alone keeps one write per operation; "
            "another writer to this site is not stopped by WordPress",
        ),
        _check("seo_meta", True, "Rank Math fields are custom fields: written and read back"),
        _check(
            "alt_text",
            None,
            "not writable over XML-RPC (protected meta): media with alt_text answer 422 "
            "transport-limit",
        ),
        _check(
            "new_terms",
            None,
            "authors cannot create terms over XML-RPC (wp.newTerm needs edit_terms): a draft "
            "naming a tag that does not exist answers 422 transport-limit",
        ),
    ]


def _install_check(site, client) -> dict:
    """Which WordPress install the site is (the ``url`` and ``home`` of its ``/wp-json/``
    index, stored with the site), and which other sites of any tenant reach the same one."""
    try:
        url, home = sites.install_identity(site, client)
    except WordPressError as error:
        return _check("install", False, f"the /wp-json/ index names no install: {error}")
    shared = [f"{s.tenant}/{s.name}" for s in sites.same_install(site)]
    detail = f"WordPress install {url} (home {home})"
    if shared:
        detail += f"; also reached as {', '.join(shared)}: the ledger keeps their objects apart"
    return _check("install", True, detail)


def _result(site, checks: list[dict], found: sites.Companion) -> dict:
    return {
        "site": site.name,
        "url": site.url,
        "transport": site.transport,
        "ok": all(c["ok"] is not False for c in checks),
        "checks": checks,
        "guarantees": {
            "lookup_by_operation_key": found.present,
            "guard": found.guard,
            "seo_meta": found.seo_meta,
            "alt_text": found.alt_text,
            "new_terms": found.new_terms,
        },
    }
