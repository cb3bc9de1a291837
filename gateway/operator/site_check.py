"""The check ``gateway sites add`` makes before it stores a site: WordPress answers, the
application password signs in, and (over REST) the companion plugin is there.

A refused password, a site that does not answer as WordPress, and a web server that strips
the ``Authorization`` header refuse the site (nothing stored; public report n8n-io/n8n#18687:
made-up credentials that "pass" and fail at the first post). A missing plugin or a role that
WordPress does not sanitise for are stored with a warning that says what the site will not
guarantee and the fix. ``--no-check`` skips it for a site added before WordPress is reachable
(docker-compose's start-up, a test behind a fault proxy); ``gateway doctor`` checks it fully
later. Source: docs/operations.md, "sites add".

The REST root is discovered first (:mod:`gateway.wordpress.discovery`: the site's ``Link``
header, ``/wp-json/``, ``/index.php?rest_route=/``) and stored with the site; a redirect in front of
the site is named with the URL it suggests (docs/hosts.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field

from gateway.wordpress import connect
from gateway.wordpress import discovery
from gateway.wordpress.errors import WordPressAuthError
from gateway.wordpress.errors import WordPressError

# Roles WordPress does not sanitise content for (they hold unfiltered_html), with the advice;
# gateway doctor's role check says the same (gateway.operator.doctor_checks).
ROLE_ADVICE = {
    "administrator": "use an author: administrators have unfiltered_html, so WordPress would "
    "not sanitise script in content written for them",
    "editor": "use an author: editors have unfiltered_html, so WordPress would not sanitise "
    "script in content written for them",
}


class SiteRefused(Exception):
    """The site was not stored: the message says why and what to do."""


@dataclass
class Checked:
    """What the check found: ``rest_root`` (the discovered REST root, None when none answered:
    ``/wp-json/`` is assumed) and ``warnings`` (one line each)."""

    rest_root: str | None
    warnings: list[str] = field(default_factory=list)


def check_new_site(
    url: str, username: str, password: str, transport: str, timeout: float
) -> Checked:
    """Find the site's REST root, sign in as ``username`` over ``transport`` and look for the
    plugin.

    Returns:
        :class:`Checked`: the REST root to store, and warnings for a site that is stored
        anyway (no companion plugin over REST, an editor or administrator account).

    Raises:
        SiteRefused: WordPress refused the password, the ``Authorization`` header does not
            reach it, it could not be asked (unreachable, not WordPress, a firewall), or a
            redirect stands in front of it (named, with the URL to add instead).
    """
    found = discovery.discover(url, timeout)
    if found.root is None and found.redirect is not None:
        location, suggested = found.redirect
        raise SiteRefused(
            f"{url} answers with a redirect to {location}: the gateway follows no redirect "
            f"with credentials. Add the site with --url {suggested}; nothing was stored"
        )
    client = connect(transport, url, username, password, timeout, found.root)
    try:
        user = client.me()
    except WordPressAuthError as error:
        raise SiteRefused(_refusal(url, username, password, transport, timeout, error)) from None
    except WordPressError as error:
        where = (
            ""
            if found.root
            else " (no REST index answered at /wp-json/ nor at /index.php?rest_route=/)"
        )
        raise SiteRefused(
            f"cannot sign in to WordPress at {url}{where}: {error.message}. Check the URL; to "
            "store the site anyway (WordPress not reachable yet), add --no-check and run "
            "'gateway doctor' once it is"
        ) from None
    return Checked(found.root, _warnings(client, user, username, transport))


def _warnings(client, user: dict, username: str, transport: str) -> list[str]:
    warnings = []
    roles = [r for r in user.get("roles") or [] if r in ROLE_ADVICE]
    if roles:
        warnings.append(f"{username} is an {roles[0]}: {ROLE_ADVICE[roles[0]]}")
    if transport == "rest" and _companion_absent(client):
        warnings.append(
            "the companion plugin is not active: no lookup by operation key (a lost answer is "
            "waited out, then an editor asked), no uniqueness guard, no Rank Math fields. "
            "Install wp_test_site/publishing-gateway-companion/, or add the site with "
            "--transport xmlrpc (docs/transports.md)"
        )
    return warnings


def _companion_absent(client) -> bool:
    try:
        return client.companion_status() is None
    except WordPressError:
        return True


def password_over_xmlrpc(url: str, username: str, password: str, timeout: float) -> bool | None:
    """Does the application password sign in over XML-RPC, which carries it in the request
    body, not in the ``Authorization`` header? True (signed in), False (WordPress refused the
    password: 403 ``InvalidCredentialsError``), None (XML-RPC unavailable or blocked: it
    cannot tell). Tells a stripped header (True) from a wrong password (False) when REST
    answers ``rest_not_logged_in`` to both (``sites add`` here, ``gateway doctor``'s header
    check). Source: WordPress XML-RPC API, ``wp.getProfile``; application passwords apply to
    XML-RPC since WordPress 5.6."""
    try:
        connect("xmlrpc", url, username, password, timeout).me()
    except WordPressAuthError:
        return False
    except WordPressError:
        return None
    return True


def _refusal(url, username, password, transport, timeout, error: WordPressAuthError) -> str:
    """Why WordPress refused: over REST a 401 ``rest_not_logged_in`` is also what a stripped
    header gives, so the same password is tried over XML-RPC (:func:`password_over_xmlrpc`)."""
    wrong = (
        f"WordPress at {url} refused the application password of {username!r} "
        f"({error.status} {error.code or ''}): create a new one (Users > Profile > "
        "Application Passwords) for an author-role user; nothing was stored"
    )
    if transport != "rest" or error.code != "rest_not_logged_in":
        return wrong
    if not password_over_xmlrpc(url, username, password, timeout):
        return wrong
    return (
        f"the web server in front of WordPress at {url} strips the Authorization header "
        "(the same password signs in over XML-RPC). Apache: 'CGIPassAuth On'; nginx with "
        "PHP-FPM: 'fastcgi_param HTTP_AUTHORIZATION $http_authorization;'; or add the site "
        "with --transport xmlrpc. Nothing was stored"
    )
