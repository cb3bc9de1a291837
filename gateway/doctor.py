"""Preflight of a WordPress site (``gateway doctor``): one registry of named checks, each with a
plain explanation of what it looks at and the fix when it fails.

A check is a function ``run(probe) -> (ok, detail)`` registered with :func:`register`:
``ok`` is True (fine), False (the gateway will fail or misbehave on this site) or None (a
warning: a weaker guarantee, or the check could not run). Checks run in registration order; a
check whose ``needs`` did not pass is reported as not run. The :class:`Probe` gives every check
the site, its REST client and what earlier checks fetched (the signed-in user, the companion's
status, one scratch draft), so the whole run costs a handful of WordPress calls.

Other parts of the gateway add their checks here (``register(Check(...))``): the transports
of later work, for example; ``firewall`` (an answer from in front of WordPress) came so.

The scratch draft (emoji round trip, Rank Math fields) is created as the site's own user and
deleted at once (``force=true``); it carries no operation key.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from functools import cached_property

from gateway import sites
from gateway.config import Config
from gateway.wordpress import WordPressClient
from gateway.wordpress.client import SEO_META
from gateway.wordpress.client import parse_json_lenient
from gateway.wordpress.client import upstream_page
from gateway.wordpress.errors import UpstreamRefused
from gateway.wordpress.errors import WordPressError

COMPANION_MIN_VERSION = "1.0.0"  # the companion plugin release this gateway expects
REQUIRED_CAPABILITIES = ("edit_posts", "upload_files")
SCRATCH_EMOJI = "\U0001f600\U0001f680"
ROLE_ADVICE = {
    "administrator": "use an author: administrators have unfiltered_html, so WordPress would "
    "not sanitise script in content written for them",
    "editor": "use an author: editors have unfiltered_html, so WordPress would not sanitise "
    "script in content written for them",
}


@dataclass(frozen=True)
class Check:
    """A named check: ``explains`` (what it looks at, plainly), ``fix`` (what to do when it
    fails), ``run(probe) -> (ok, detail)``, and the checks that must pass first."""

    name: str
    explains: str
    fix: str
    run: Callable[[Probe], tuple[bool | None, str]]
    needs: tuple[str, ...] = ()


CHECKS: dict[str, Check] = {}


def register(check: Check) -> Check:
    """Add ``check`` to the registry (a later registration under the same name replaces it)."""
    CHECKS[check.name] = check
    return check


def check(name: str, explains: str, fix: str, needs: tuple[str, ...] = ()):
    """Decorator form of :func:`register` for a ``run(probe)`` function."""

    def decorate(run):
        register(Check(name, explains, fix, run, needs))
        return run

    return decorate


@dataclass
class Probe:
    """What the checks share: the site, its client, and results fetched once."""

    config: Config
    site: object
    client: WordPressClient
    notes: dict = field(default_factory=dict)

    @cached_property
    def me(self):
        """``(response, body or None)`` of ``GET /wp/v2/users/me?context=edit`` as it came."""
        response = self.client.get_raw("/wp/v2/users/me", {"context": "edit"})
        try:
            body = parse_json_lenient(response.text)
        except ValueError:
            body = None
        return response, body if isinstance(body, dict) else None

    @cached_property
    def companion(self) -> sites.Companion:
        sites.forget_companion()
        return sites.companion(self.site, self.client)

    @cached_property
    def scratch(self) -> dict:
        """A draft written with an emoji title and Rank Math fields, read back in
        ``context=edit``, then deleted. ``{"sent", "stored", "deleted"}`` or ``{"error"}``."""
        marker = uuid.uuid4().hex[:12]
        sent = {
            "title": f"gateway doctor scratch {SCRATCH_EMOJI} {marker}",
            "content": f"<p>{SCRATCH_EMOJI}</p>",
            "status": "draft",
            "meta": {SEO_META["title"]: f"doctor {SCRATCH_EMOJI}"},
        }
        try:
            created = self.client.create_post(sent)
        except WordPressError as error:
            return {
                "error": f"could not create a scratch draft: {error.message}",
                "code": error.code,
            }
        try:
            stored = self.client.get_post(int(created["id"]))
        except WordPressError as error:
            stored = {"error": error.message}
        try:
            self.client.delete_post(int(created["id"]))
            deleted = True
        except WordPressError:
            deleted = False
        return {"sent": sent, "stored": stored, "deleted": deleted, "id": created["id"]}


def _me_error(probe: Probe) -> tuple[int, str | None]:
    response, body = probe.me
    code = body.get("code") if body and response.status_code >= 400 else None
    return response.status_code, code


@check(
    "rest_api",
    "The REST API answers at /wp-json/ with JSON.",
    "Check the site URL; turn on pretty permalinks (Settings > Permalinks) so /wp-json/ routes.",
)
def _rest_api(probe: Probe):
    try:
        index = probe.client.get_raw("/")
    except WordPressError as error:
        return False, f"{probe.client.url('/')} not reachable: {error.message}"
    try:
        parse_json_lenient(index.text)
    except ValueError:
        return False, f"{probe.client.url('/')} answered {index.status_code} without JSON"
    probe.notes["index"] = parse_json_lenient(index.text)
    return True, f"{probe.client.url('/')} answers with pretty permalinks"


def firewall_detail(error: UpstreamRefused) -> str:
    """What a person needs to lift a block in front of the REST API (status, content type,
    the page's title), never a credentials hint: WordPress did not answer."""
    title = f" titled {error.title!r}" if error.title else ""
    return (
        f"a firewall, CDN, proxy or the web server in front of the REST API answered "
        f"{error.method} {error.url} with {error.status} {error.content_type or 'no content type'}"
        f"{title}, not WordPress: let the gateway's address or User-Agent "
        "'publishing-gateway' through to /wp-json/"
    )


@check(
    "firewall",
    "The gateway's signed-in requests reach WordPress itself, not a page from a firewall, CDN, "
    "proxy or the web server in front of it.",
    "Allow the gateway's address (or its User-Agent 'publishing-gateway') through to /wp-json/ "
    "in the firewall, CDN or security plugin named by the page.",
    needs=("rest_api",),
)
def _firewall(probe: Probe):
    response, _ = probe.me
    url = probe.client.url("/wp/v2/users/me")
    blocked = upstream_page("GET", url, response)
    if blocked is not None:
        return False, firewall_detail(blocked)
    return True, "WordPress itself answers"


@check(
    "json_clean",
    "WordPress answers with clean JSON: no PHP notice or warning printed in front of it. The "
    "gateway cannot trust a write whose answer is not clean JSON and has to treat it as "
    "unknown and reconcile it.",
    "Stop PHP from printing errors into responses: define('WP_DEBUG_DISPLAY', false) in "
    "wp-config.php and display_errors = Off in php.ini; log them instead (WP_DEBUG_LOG).",
    needs=("firewall",),
)
def _json_clean(probe: Probe):
    response, _ = probe.me
    try:
        json.loads(response.text)
    except ValueError:
        start = response.text.strip()[:80]
        return False, f"the answer of /wp/v2/users/me starts with {start!r}, not with JSON"
    return True, "answers are plain JSON"


@check(
    "application_passwords",
    "Application passwords are available: the gateway signs in with one.",
    "WordPress offers application passwords only over HTTPS (or with WP_ENVIRONMENT_TYPE "
    "'local'); serve the site over HTTPS, and check that no security plugin switched them off "
    "(the filter wp_is_application_passwords_available).",
    needs=("firewall",),
)
def _application_passwords(probe: Probe):
    status, code = _me_error(probe)
    if code in ("application_passwords_disabled", "application_passwords_disabled_for_user"):
        return False, f"WordPress answered {status} {code}"
    index = probe.notes.get("index") or {}
    if isinstance(index, dict) and "application-passwords" not in index.get("authentication", {}):
        return False, "the REST index does not offer application-passwords authentication"
    return True, "available"


@check(
    "authorization_header",
    "The Authorization header reaches WordPress. When the web server drops it, WordPress "
    "answers the generic 401 rest_not_logged_in although the gateway sent credentials (a "
    "wrong password gives incorrect_password, except on WordPress versions that decide the "
    "user before the REST request starts, which answer rest_not_logged_in to both).",
    "Apache: add 'CGIPassAuth On' (Apache 2.4.13+) or 'SetEnvIf Authorization \"(.*)\" "
    "HTTP_AUTHORIZATION=$1' to the site's .htaccess or vhost. nginx with PHP-FPM: add "
    "'fastcgi_param HTTP_AUTHORIZATION $http_authorization;' to the PHP location. If the "
    "header does arrive, the application password is wrong: create a new one and store it "
    "with 'gateway sites add'.",
    needs=("application_passwords",),
)
def _authorization_header(probe: Probe):
    status, code = _me_error(probe)
    if status == 401 and code == "rest_not_logged_in":
        return False, (
            "WordPress answered 401 rest_not_logged_in to a request that carried an "
            "Authorization header: the web server stripped it, or the password is wrong"
        )
    return True, "credentials reach WordPress"


@check(
    "login",
    "The application password signs in as the configured user.",
    "Create a new application password for the user (Users > Profile > Application "
    "Passwords) and store it with 'gateway sites add'.",
    needs=("authorization_header",),
)
def _login(probe: Probe):
    response, body = probe.me
    if response.status_code != 200 or not body:
        status, code = _me_error(probe)
        return False, f"application password refused: {status} {code or response.reason}"
    roles = body.get("roles") or []
    return True, f"logged in as {body.get('slug')} ({', '.join(roles)})"


@check(
    "role",
    "The user is an author: WordPress then sanitises content as for any author.",
    "Use an author account for the gateway.",
    needs=("login",),
)
def _role(probe: Probe):
    roles = probe.me[1].get("roles") or []
    advice = [ROLE_ADVICE[r] for r in roles if r in ROLE_ADVICE]
    if advice:
        return None, advice[0]
    return True, "author role: WordPress sanitises content as for any author"


@check(
    "capabilities",
    f"The user may do what the gateway does: {', '.join(REQUIRED_CAPABILITIES)}.",
    "Give the user the author role (or a role with these capabilities).",
    needs=("login",),
)
def _capabilities(probe: Probe):
    held = probe.me[1].get("capabilities") or {}
    missing = [c for c in REQUIRED_CAPABILITIES if not held.get(c)]
    if missing:
        return False, f"the user lacks {', '.join(missing)}"
    return True, f"has {', '.join(REQUIRED_CAPABILITIES)}"


@check(
    "install",
    "Which WordPress install the site is (the url and home of its /wp-json/ index, stored "
    "with the site), and which other sites of any tenant reach the same one.",
    "Make /wp-json/ answer its index with url and home (a plugin or proxy that strips them "
    "hides which install this is).",
    needs=("login",),
)
def _install(probe: Probe):
    try:
        url, home = sites.install_identity(probe.site, probe.client)
    except WordPressError as error:
        return False, f"the /wp-json/ index names no install: {error}"
    shared = [f"{s.tenant}/{s.name}" for s in sites.same_install(probe.site)]
    detail = f"WordPress install {url} (home {home})"
    if shared:
        detail += f"; also reached as {', '.join(shared)}: the ledger keeps their objects apart"
    return True, detail


def _version(text: str | None) -> tuple[int, ...]:
    parts = []
    for part in (text or "0").split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


@check(
    "companion_plugin",
    "The companion plugin is active and at least the version this gateway expects: it gives "
    "lookups by operation key and the uniqueness guard.",
    "Copy wp_test_site/publishing-gateway-companion/ of this gateway's release into "
    "wp-content/plugins/ and activate it.",
    needs=("login",),
)
def _companion_plugin(probe: Probe):
    found = probe.companion
    if not found.present:
        return None, (
            "absent: reconciliation can only wait out GATEWAY_INFLIGHT_WINDOW, then asks an "
            "editor about same-title posts"
        )
    if _version(found.version) < _version(COMPANION_MIN_VERSION):
        return False, f"version {found.version} is older than {COMPANION_MIN_VERSION}"
    return True, f"version {found.version}: lookup by operation key available"


@check(
    "uniqueness_guard",
    "WordPress itself refuses a second object with one operation key.",
    "Install and activate the companion plugin.",
    needs=("login",),
)
def _uniqueness_guard(probe: Probe):
    if probe.companion.guard:
        return True, "WordPress refuses a second object with one operation key"
    return None, "absent: a resend after a lost response relies on the in-flight window alone"


@check(
    "seo_meta",
    "The companion plugin reports the Rank Math fields registered for REST.",
    "Activate the companion plugin (it registers rank_math_title, rank_math_description and "
    "rank_math_focus_keyword for REST).",
    needs=("login",),
)
def _seo_meta(probe: Probe):
    if probe.companion.seo_meta:
        return True, "Rank Math fields are writable and readable over REST"
    return None, "absent: Rank Math fields are silently dropped by WordPress and verify as null"


@check(
    "rank_math_fields",
    "Rank Math fields written over REST are stored and read back (a scratch draft, deleted "
    "afterwards).",
    "Activate the companion plugin (it registers rank_math_title, rank_math_description and "
    "rank_math_focus_keyword for REST); without it WordPress drops them silently.",
    needs=("capabilities",),
)
def _rank_math_fields(probe: Probe):
    scratch = probe.scratch
    if "error" in scratch:
        return None, scratch["error"]
    meta = scratch["stored"].get("meta") or {}
    sent = scratch["sent"]["meta"][SEO_META["title"]]
    if meta.get(SEO_META["title"]) != sent:
        ok = False if probe.companion.present else None
        return ok, "Rank Math fields are not readable over REST: they would verify as null"
    return True, "Rank Math fields are written and read back over REST"


@check(
    "utf8mb4",
    "The database keeps 4-byte characters (emoji) as they were sent: a scratch draft's "
    "title and content round-trip, and the draft is deleted afterwards.",
    "Convert the WordPress tables to utf8mb4 (WordPress does it on a database upgrade when "
    "the server supports it; otherwise ALTER TABLE ... CONVERT TO CHARACTER SET utf8mb4) and "
    "set DB_CHARSET to 'utf8mb4' in wp-config.php.",
    needs=("capabilities",),
)
def _utf8mb4(probe: Probe):
    scratch = probe.scratch
    if scratch.get("code") == "db_insert_error":  # a 3-byte column refuses the emoji
        return False, f"WordPress could not store an emoji title: {scratch['error']}"
    if "error" in scratch:
        return None, scratch["error"]
    if "error" in scratch["stored"]:
        return None, f"the scratch draft could not be read back: {scratch['stored']['error']}"
    title = (scratch["stored"].get("title") or {}).get("raw")
    cleanup = "" if scratch["deleted"] else f" (scratch draft {scratch['id']} left: delete it)"
    if title != scratch["sent"]["title"]:
        return False, f"an emoji title came back as {title!r}{cleanup}"
    return True, f"emoji round-trip intact{cleanup}"


def doctor(config: Config, tenant: str, site_name: str) -> dict:
    """Run every registered check against site ``site_name`` of ``tenant``.

    Returns ``{"site", "url", "ok", "checks": [{"check", "ok", "detail", "explains",
    "fix"}], "guarantees"}``; ``ok`` is False when a check failed (None entries are
    warnings); ``fix`` is given for every check that is not ok.

    Raises:
        SiteNotFound: no such site for the tenant.
    """
    site = sites.get_site(tenant, site_name)
    client = sites.client_for(site, config.secret_key, config.wp_timeout)
    probe = Probe(config, site, client)
    results: dict[str, bool | None] = {}
    report = []
    for item in list(CHECKS.values()):
        blocked = [n for n in item.needs if results.get(n) is not True]
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
    found = probe.companion if results.get("login") else sites.ABSENT
    return {
        "site": site.name,
        "url": site.url,
        "ok": all(entry["ok"] is not False for entry in report),
        "checks": report,
        "guarantees": {
            "lookup_by_operation_key": found.present,
            "guard": found.guard,
            "seo_meta": found.seo_meta,
        },
    }
