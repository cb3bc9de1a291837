"""The checks of ``gateway doctor``'s registry (:mod:`gateway.operator.doctor_registry`), in the
order they run.

Each says what it looks at (``explains``) and the fix; those marked ``transports=("rest",)``
or ``("xmlrpc",)`` apply to one transport only, the others look at either through the
:class:`~gateway.operator.doctor_registry.Probe`. Over REST the signed-in user is read raw from
``/wp/v2/users/me`` (so a stripped header, a disabled application password or PHP output
before the JSON can be told apart); over XML-RPC from ``wp.getProfile``, whose failures arrive
already mapped onto the error tree (:mod:`gateway.wordpress.xmlrpc_errors`).
"""

from __future__ import annotations

import json

from gateway.ledger import db
from gateway.ledger.models import AgentWorkerState
from gateway.operator import doctor_registry as registry
from gateway.operator.doctor_registry import Probe
from gateway.operator.doctor_registry import check
from gateway.operator.doctor_registry import firewall_detail
from gateway.operator.site_check import ROLE_ADVICE
from gateway.tenancy import sites
from gateway.wordpress import rest_root as roots
from gateway.wordpress.client import SEO_META
from gateway.wordpress.client import parse_json_lenient
from gateway.wordpress.client import upstream_page
from gateway.wordpress.errors import UpstreamRefused
from gateway.wordpress.errors import WordPressAuthError
from gateway.wordpress.errors import WordPressError

REQUIRED_CAPABILITIES = ("edit_posts", "upload_files")
# What WordPress's built-in roles may do (wp-admin/includes/schema.php, populate_roles):
# wp.getProfile names the roles only, so over XML-RPC the capabilities follow from them.
ROLE_CAPABILITIES = {
    "administrator": {"edit_posts", "upload_files"},
    "editor": {"edit_posts", "upload_files"},
    "author": {"edit_posts", "upload_files"},
    "contributor": {"edit_posts"},
    "subscriber": set(),
}
REST = ("rest",)
XMLRPC = ("xmlrpc",)
GARBLED = "garbled"  # xmlrpc_errors' word for output printed before <?xml


def stray_words(stray: bytes) -> str:
    """What stray output before ``<?xml`` is, in words: byte order marks, line breaks and
    other whitespace counted, with the bytes themselves (``b'\\n'``)."""
    bom = stray.count(b"\xef\xbb\xbf")
    rest = stray.replace(b"\xef\xbb\xbf", b"")
    lines = rest.count(b"\n")
    parts = []
    if lines:
        parts.append(f"{lines} blank line{'s' if lines > 1 else ''}")
    if bom:
        parts.append(f"{bom} UTF-8 byte order mark{'s' if bom > 1 else ''}")
    spaces = len(rest) - lines - rest.count(b"\r")
    if spaces:
        parts.append(f"{spaces} space{'s' if spaces > 1 else ''} or tab{'s' if spaces > 1 else ''}")
    return " and ".join(parts) + f" ({stray[:40]!r})"


def _me_error(probe: Probe) -> tuple[int, str | None]:
    response, body = probe.me
    code = body.get("code") if body and response.status_code >= 400 else None
    return response.status_code, code


@check(
    "rest_api",
    "The REST API answers at the site's REST root with JSON: /wp-json/, or /index.php?rest_route=/ "
    "where a host hides /wp-json/ or the permalinks are plain (found by 'gateway sites add' "
    "as WordPress advertises it, stored with the site).",
    "Check the site URL, and add the site again ('gateway sites add') so that its REST root is "
    "discovered; a redirect: add the site at the URL it points to.",
    transports=REST,
)
def _rest_api(probe: Probe):
    root = probe.client.url("/")
    try:
        index = probe.client.get_raw("/")
    except WordPressError as error:
        return False, f"{root} not reachable: {error.message}"
    if index.is_redirect:
        return False, redirect_detail(probe, index)
    try:
        parse_json_lenient(index.text)
    except ValueError:
        return False, f"{root} answered {index.status_code} without JSON"
    probe.notes["index"] = probe.notes["index_get"] = parse_json_lenient(index.text)
    direct = _direct_index(probe)
    if direct is not None:
        probe.notes["index"] = direct
    return True, f"the REST API answers at {root}"


def _direct_index(probe: Probe) -> dict | None:
    """The REST index read by the route no cache stores (a POST served as GET), or None
    when that read fails: a cache that drops query strings may hold another answer
    (``?_fields=namespaces``) at the index's path."""
    try:
        body = parse_json_lenient(probe.client.get_raw("/", direct=True).text)
    except (WordPressError, ValueError):
        return None
    return body if roots.is_index(body) else None


def _index_disagrees(probe: Probe) -> bool:
    """True when the index a GET answered is not the one WordPress answered to the POST:
    a cache in front answered the GET, whatever headers it sends."""
    got, direct = probe.notes.get("index_get"), probe.notes.get("index")
    if not isinstance(got, dict) or got is direct:
        return False
    return any(got.get(k) != direct.get(k) for k in ("namespaces", "authentication", "url"))


def redirect_detail(probe: Probe, response) -> str:
    """Where a redirect in front of the REST API points and the site URL it suggests."""
    error = upstream_page("GET", response.url, response, probe.site.url)
    return (
        f"{response.url} redirects ({response.status_code}) to {error.location}: the gateway "
        f"follows no redirect with credentials; add the site with --url {error.suggested_url}"
    )


@check(
    "cache",
    "No cache in front of the REST API answers the gateway's reads from its store. The "
    "gateway's reads go past a cache (no-cache, a query parameter used once, then a POST "
    "WordPress serves as GET), but a cache that keeps REST answers serves other clients "
    "stale posts and may defeat all of that (X-LiteSpeed-Cache, CF-Cache-Status, X-Cache, "
    "Age... on a REST GET).",
    f"Ask whoever runs the site's cache to {roots.EXCLUDE_REST}.",
    needs=("rest_api",),
    transports=REST,
)
def _cache(probe: Probe):
    if _index_disagrees(probe):
        return False, (
            "a cache answered a GET of the REST index from its store (another answer than "
            "WordPress gave to the same read as a POST), even with no-cache and a fresh URL: "
            "exclude /wp-json/ and rest_route= URLs from it"
        )
    plain = [probe.client.get_raw("/", {"_fields": "url"}, fresh=False) for _ in range(2)]
    front = roots.caching_front(plain[1].headers) or roots.caching_front(plain[0].headers)
    if front is None:
        return True, "no caching header on the REST API's answers"
    fresh = roots.cache_hit(probe.client.get_raw("/", {"_fields": "url"}).headers)
    if fresh:
        return False, (
            f"a cache answers the REST API from its store even with no-cache and a fresh URL "
            f"({fresh}): exclude /wp-json/ from it"
        )
    return None, f"a cache stands in front of the REST API ({front}): exclude /wp-json/ from it"


@check(
    "firewall",
    "The gateway's signed-in requests reach WordPress itself, not a page from a firewall, CDN, "
    "proxy or the web server in front of it.",
    "Allow the gateway's address (or its User-Agent 'publishing-gateway') through to /wp-json/ "
    "(REST) or /xmlrpc.php (XML-RPC) in the firewall, CDN or security plugin named by the page.",
    needs=("rest_api",),
)
def _firewall(probe: Probe):
    if probe.transport == "xmlrpc":
        error = probe.profile[1]
        if isinstance(error, UpstreamRefused):
            return False, firewall_detail(error, "/xmlrpc.php")
        return True, "WordPress itself answers"
    response, _ = probe.me
    url = probe.client.url("/wp/v2/users/me")
    blocked = upstream_page("GET", url, response, probe.site.url)
    if blocked is not None:
        return False, firewall_detail(blocked)
    return True, "WordPress itself answers"


@check(
    "xmlrpc_api",
    "WordPress's XML-RPC API answers at /xmlrpc.php (wp.getProfile).",
    "Check the site URL, and that no plugin or host setting switched XML-RPC off "
    "(the filter xmlrpc_enabled, or a web server rule on /xmlrpc.php).",
    needs=("firewall",),
    transports=XMLRPC,
)
def _xmlrpc_api(probe: Probe):
    error = probe.profile[1]
    if error is None or isinstance(error, WordPressAuthError) or GARBLED in error.message:
        return True, f"{probe.client.url('/')} answers"
    return False, f"{probe.client.url('/')} not usable: {error}"


@check(
    "json_clean",
    "WordPress answers with clean JSON (REST) or XML (XML-RPC): no PHP notice or warning "
    "printed in front of it. The gateway cannot trust a write whose answer is not clean and "
    "has to treat it as unknown and reconcile it.",
    "Stop PHP from printing errors into responses: define('WP_DEBUG_DISPLAY', false) in "
    "wp-config.php and display_errors = Off in php.ini; log them instead (WP_DEBUG_LOG). A "
    "blank line or byte order mark before <?xml comes from a PHP file of a plugin or theme "
    "(often functions.php) with whitespace after its closing ?> or saved as UTF-8 with BOM: "
    "remove the closing ?> or save the file without BOM (switch plugins off one by one to "
    "find it).",
    needs=("firewall",),
)
def _json_clean(probe: Probe):
    if probe.transport == "xmlrpc":
        error = probe.profile[1]
        if error is not None and GARBLED in error.message:
            return False, f"the answer of wp.getProfile is not clean XML: {error.message}"
        stray = probe.notes.get("stray_output") or b""
        if stray:
            return False, (
                f"xmlrpc.php prints {stray_words(stray)} before <?xml: the gateway skips it "
                "(as WordPress's own XML-RPC client does), but other XML-RPC clients (apps, "
                "Jetpack, libraries) fail on it"
            )
        return True, "answers are plain XML"
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
    if probe.transport == "xmlrpc":
        profile, error = probe.profile
        if profile is not None:
            return True, "available: the application password signed in over XML-RPC"
        try:
            index = parse_json_lenient(probe.rest.get_raw("/", direct=True).text)
        except (WordPressError, ValueError):
            return True, "could not read the /wp-json/ index; the login check says more"
        if isinstance(index, dict) and "application-passwords" not in index.get(
            "authentication", {}
        ):
            return False, "the REST index does not offer application-passwords authentication"
        return True, "available"
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
    "user before the REST request starts, which answer rest_not_logged_in to both). "
    "XML-RPC carries the credentials in the request body instead.",
    "Apache: add 'CGIPassAuth On' (Apache 2.4.13+) or 'SetEnvIf Authorization \"(.*)\" "
    "HTTP_AUTHORIZATION=$1' to the site's .htaccess or vhost. nginx with PHP-FPM: add "
    "'fastcgi_param HTTP_AUTHORIZATION $http_authorization;' to the PHP location. If the "
    "header does arrive, the application password is wrong: create a new one and store it "
    "with 'gateway sites add'.",
    needs=("application_passwords",),
    transports=REST,
)
def _authorization_header(probe: Probe):
    status, code = _me_error(probe)
    if status == 401 and code == "rest_not_logged_in":
        # the same password over XML-RPC, which carries it in the body, tells the two apart
        over_xmlrpc = probe.password_over_xmlrpc
        if over_xmlrpc is False:
            return True, (
                "not the cause: WordPress refuses this password over XML-RPC too, where no "
                "header is involved (see login)"
            )
        if over_xmlrpc:
            return False, (
                "WordPress answered 401 rest_not_logged_in to a request that carried an "
                "Authorization header, while the same password signs in over XML-RPC: the "
                "web server stripped the header"
            )
        return False, (
            "WordPress answered 401 rest_not_logged_in to a request that carried an "
            "Authorization header: the web server stripped it, or the password is wrong "
            "(XML-RPC, which could tell them apart, is not available)"
        )
    return True, "credentials reach WordPress"


@check(
    "login",
    "The application password signs in as the configured user.",
    "Create a new application password for the user (Users > Profile > Application "
    "Passwords) and store it with 'gateway sites add'.",
    needs=("authorization_header", "xmlrpc_api", "application_passwords"),
)
def _login(probe: Probe):
    if probe.transport == "xmlrpc":
        profile, error = probe.profile
        if profile is None:
            return False, f"application password refused: {error.message}"
    else:
        response, body = probe.me
        if response.status_code != 200 or not body:
            status, code = _me_error(probe)
            detail = f"application password refused: {status} {code or response.reason}"
            if status == 401 and probe.password_over_xmlrpc is False:
                detail += " (and over XML-RPC: the password is wrong or was revoked)"
            return False, detail
    user = probe.user
    return True, f"logged in as {user.get('slug')} ({', '.join(user.get('roles') or [])})"


@check(
    "role",
    "The user is an author: WordPress then sanitises content as for any author.",
    "Use an author account for the gateway.",
    needs=("login",),
)
def _role(probe: Probe):
    roles = probe.user.get("roles") or []
    advice = [ROLE_ADVICE[r] for r in roles if r in ROLE_ADVICE]
    if advice:
        return None, advice[0]
    return True, "author role: WordPress sanitises content as for any author"


@check(
    "capabilities",
    f"The user may do what the gateway does: {', '.join(REQUIRED_CAPABILITIES)} (over "
    "XML-RPC, which names only the roles, as WordPress's built-in roles give them).",
    "Give the user the author role (or a role with these capabilities).",
    needs=("login",),
)
def _capabilities(probe: Probe):
    if probe.transport == "xmlrpc":
        roles = probe.user.get("roles") or []
        unknown = [r for r in roles if r not in ROLE_CAPABILITIES]
        if unknown:
            return None, f"cannot tell over XML-RPC what role {', '.join(unknown)} may do"
        held = {c: True for r in roles for c in ROLE_CAPABILITIES[r]}
    else:
        held = probe.user.get("capabilities") or {}
    missing = [c for c in REQUIRED_CAPABILITIES if not held.get(c)]
    if missing:
        return False, f"the user lacks {', '.join(missing)}"
    return True, f"has {', '.join(REQUIRED_CAPABILITIES)}"


@check(
    "install",
    "Which WordPress install the site is (the url and home of its REST index, stored "
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
    "wp-content/plugins/ and activate it; a site that cannot take a plugin: 'gateway sites "
    "add ... --transport xmlrpc' (docs/transports.md).",
    needs=("login",),
    transports=REST,
)
def _companion_plugin(probe: Probe):
    found = probe.companion
    if not found.present:
        return False, (
            "absent: over REST without it there is no lookup by operation key (a lost answer "
            "is waited out for GATEWAY_INFLIGHT_WINDOW, then an editor is asked about "
            "same-title posts), no uniqueness guard and no Rank Math fields (a draft's "
            "verification answers ok: null); install it, or add the site with --transport "
            "xmlrpc, which needs no plugin (docs/transports.md)"
        )
    if _version(found.version) < _version(registry.COMPANION_MIN_VERSION):
        return False, f"version {found.version} is older than {registry.COMPANION_MIN_VERSION}"
    return True, f"version {found.version}: lookup by operation key available"


@check(
    "operation_key_index",
    "Lookups by operation key (the uniqueness guard before every write, reconciliation) use "
    "an index on postmeta, which the companion plugin (1.2.0 and later) creates once; without "
    "it every write scans the rows of every object the gateway made.",
    "Update the companion plugin to this gateway's release; if it reports that creating the "
    "index failed, give WordPress's database user the ALTER privilege and delete the option "
    "pgw_companion_key_index (the next request creates the index).",
    needs=("companion_plugin",),
    transports=REST,
)
def _operation_key_index(probe: Probe):
    index = probe.companion.key_index
    if index:
        return True, "postmeta index pgw_operation_key present"
    if index is None:
        return None, "not reported (companion plugin older than 1.2.0): lookups scan postmeta"
    return None, "creating the index failed: lookups scan postmeta, and slow down as it grows"


@check(
    "lookup_by_operation_key",
    "Objects are found by their operation key after a lost answer (over XML-RPC: the custom "
    "field gateway_operation_key, by scanning wp.getPosts newest first).",
    "Let the user read its own posts and media over XML-RPC (wp.getPosts).",
    needs=("login",),
    transports=XMLRPC,
)
def _lookup_by_operation_key(probe: Probe):
    return True, (
        "custom field gateway_operation_key, found by scanning wp.getPosts newest first "
        "(no plugin needed)"
    )


@check(
    "uniqueness_guard",
    "WordPress itself refuses a second object with one operation key.",
    "Use the REST transport with the companion plugin installed and activated.",
    needs=("login",),
)
def _uniqueness_guard(probe: Probe):
    if probe.transport == "xmlrpc":
        return None, (
            "absent over XML-RPC: the gateway's ledger alone keeps one write per operation; "
            "another writer to this site is not stopped by WordPress"
        )
    if probe.companion.guard:
        return True, "WordPress refuses a second object with one operation key"
    return None, "absent: a resend after a lost response relies on the in-flight window alone"


@check(
    "seo_meta",
    "The Rank Math fields can be written and read: over REST when the companion plugin "
    "registers them, over XML-RPC as custom fields.",
    "Activate the companion plugin (it registers rank_math_title, rank_math_description and "
    "rank_math_focus_keyword for REST).",
    needs=("login",),
)
def _seo_meta(probe: Probe):
    if probe.transport == "xmlrpc":
        return True, "Rank Math fields are custom fields: written and read back"
    if probe.companion.seo_meta:
        return True, "Rank Math fields are writable and readable over REST"
    return None, "absent: Rank Math fields are silently dropped by WordPress and verify as null"


@check(
    "alt_text",
    "Image alt text can be written (over XML-RPC it is protected meta: it cannot).",
    "Use the REST transport for sites whose media need alt text.",
    needs=("login",),
)
def _alt_text(probe: Probe):
    if probe.transport == "xmlrpc":
        return None, (
            "not writable over XML-RPC (protected meta): media with alt_text answer 422 "
            "transport-limit"
        )
    return True, "written with the attachment over REST"


@check(
    "new_terms",
    "A draft may name a tag that does not exist yet (over XML-RPC authors cannot create "
    "terms: wp.newTerm needs edit_terms).",
    "Create the tags beforehand, or use the REST transport.",
    needs=("login",),
)
def _new_terms(probe: Probe):
    if probe.transport == "xmlrpc":
        return None, (
            "authors cannot create terms over XML-RPC (wp.newTerm needs edit_terms): a draft "
            "naming a tag that does not exist answers 422 transport-limit"
        )
    return True, "tags named by a draft are created over REST"


@check(
    "rank_math_fields",
    "Rank Math fields written with a post are stored and read back (a scratch draft, deleted "
    "afterwards).",
    "Activate the companion plugin (it registers rank_math_title, rank_math_description and "
    "rank_math_focus_keyword for REST); without it WordPress drops them silently.",
    needs=("capabilities",),
)
def _rank_math_fields(probe: Probe):
    scratch = probe.scratch
    over = "XML-RPC" if probe.transport == "xmlrpc" else "REST"
    if "error" in scratch:
        return None, scratch["error"]
    meta = scratch["stored"].get("meta") or {}
    sent = scratch["sent"]["meta"][SEO_META["title"]]
    if meta.get(SEO_META["title"]) != sent:
        ok = False if probe.companion.present else None
        return ok, f"Rank Math fields are not readable over {over}: they would verify as null"
    return True, f"Rank Math fields are written and read back over {over}"


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
    refused = scratch.get("code") == "db_insert_error" or (  # a 3-byte column refuses it
        scratch.get("code") == "xmlrpc_fault_500" and "database" in scratch.get("error", "")
    )
    if refused:
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


@check(
    "agent_worker",
    "The agent workers can use the gateway's OpenAI key: after OpenAI refused it (401/403) "
    "every worker holding that key is paused, for every tenant, until the key changes.",
    "Create a new key in the OpenAI project, set GATEWAY_OPENAI_API_KEY to it and restart "
    "'gateway serve' / 'gateway worker': the first pass with the new key resumes the work.",
)
def _agent_worker(probe: Probe):
    if not probe.config.openai_api_key:
        return True, "no OpenAI key configured: agents are off"
    row = AgentWorkerState.get_or_none(AgentWorkerState.name == "openai")
    if row is None or row.paused_reason is None:
        return True, "not paused"
    return False, f"paused since {db.rfc3339(row.paused_at)}: {row.paused_reason}"
