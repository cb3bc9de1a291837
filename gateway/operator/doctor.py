"""``gateway doctor``: every registered check (:mod:`gateway.operator.doctor_checks`, in the
order registered) run against one site, with what each explains and its fix."""

from __future__ import annotations

from gateway.core.config import Config
from gateway.operator import doctor_checks  # noqa: F401 - registers the checks, in order
from gateway.operator.doctor_registry import Probe
from gateway.operator.doctor_registry import checks_for
from gateway.tenancy import sites
from gateway.wordpress.errors import WordPressError


def doctor(config: Config, tenant: str, site_name: str) -> dict:
    """Run every registered check that applies to the transport of site ``site_name`` of
    ``tenant``.

    Returns ``{"site", "url", "rest_root", "transport", "wordpress_version", "ok", "checks":
    [{"check", "ok", "detail", "explains", "fix"}], "guarantees"}``; ``rest_root`` is where the
    site serves its REST API; ``wordpress_version`` what the site reports (the companion
    plugin's status over REST, ``software_version`` over XML-RPC) or ``unknown``; each
    guarantee is None (unknown) unless the login check passed; ``ok`` is False when a check
    failed (None entries are warnings); ``fix`` is given for every check that is not ok.

    Raises:
        SiteNotFound: no such site for the tenant.
    """
    site = sites.get_site(tenant, site_name)
    client = sites.client_for(site, config.secret_key, config.wp_timeout)
    probe = Probe(config, site, client)
    applies = checks_for(client.transport)
    names = {c.name for c in applies}
    results: dict[str, bool | None] = {}
    report = []
    for item in applies:
        blocked = [n for n in item.needs if n in names and results.get(n) is not True]
        if blocked:
            ok, detail = None, f"not run: needs {', '.join(blocked)}"
        else:
            try:
                ok, detail = item.run(probe)
            except WordPressError as error:
                ok, detail = False, f"WordPress call failed: {error.message}"
        results[item.name] = ok
        entry = {"check": item.name, "ok": ok, "detail": detail, "explains": item.explains}
        if ok is not True:
            entry["fix"] = item.fix
        report.append(entry)
    # What the site guarantees is known only once the checks that learn it ran: None until
    # then (a login that failed proves nothing about the plugin, alt text or new terms).
    ran = results.get("login") is True
    found = probe.companion if ran else None
    return {
        "site": site.name,
        "url": site.url,
        "rest_root": sites.rest_root_of(site),
        "transport": site.transport,
        "wordpress_version": probe.wordpress_version if results.get("login") else "unknown",
        "ok": all(entry["ok"] is not False for entry in report),
        "checks": report,
        "guarantees": {
            "lookup_by_operation_key": found.present if found else None,
            "guard": found.guard if found else None,
            "seo_meta": found.seo_meta if found else None,
            "alt_text": found.alt_text if found else None,
            "new_terms": found.new_terms if found else None,
        },
    }
