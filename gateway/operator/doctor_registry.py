"""The registry of ``gateway doctor``'s checks: what a check is (:class:`Check`), how one
is registered (:func:`check`), and the :class:`Probe` a check reads the site through. The
checks live in :mod:`gateway.operator.doctor_checks`; the run is
:func:`gateway.operator.doctor.doctor`.

Preflight of a WordPress site (``gateway doctor``): one registry of named checks, each with a
plain explanation of what it looks at and the fix when it fails, run over the site's transport
(REST or XML-RPC).

A check is a function ``run(probe) -> (ok, detail)`` registered with :func:`register` (a
taken name is refused: :class:`gateway.core.registry.NameTaken`):
``ok`` is True (fine), False (the gateway will fail or misbehave on this site) or None (a
warning: a weaker guarantee, or the check could not run). ``transports`` names the transports
it applies to (a REST-only check such as ``authorization_header`` is left out of an XML-RPC
site's report). Checks run in registration order; a check whose ``needs`` (among those that
apply to the site) did not pass is reported as not run. The :class:`Probe` gives every check
the site, its client and what earlier checks fetched (the signed-in user, the companion's
status, one scratch draft), so the whole run costs a handful of WordPress calls.

Over REST without the companion plugin the gateway still works, but with weaker guarantees: no
lookup by operation key (reconciliation waits out the in-flight window and falls back to
suspected-duplicate review), no uniqueness guard inside WordPress, and no Rank Math fields.
Over XML-RPC no plugin is needed for lookups and Rank Math fields (custom fields), but nothing
inside WordPress refuses a second object and alt text cannot be written. The report says so
plainly instead of letting a user find out from a duplicate.

The checks themselves live in :mod:`gateway.operator.doctor_checks`; other parts of the gateway add
theirs with ``register(Check(...))``. The scratch draft (emoji round trip, Rank Math fields) is
created as the site's own user and deleted at once; it carries no operation key.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from functools import cached_property

from gateway.core.config import Config
from gateway.core.registry import Registry
from gateway.core.registry import UnknownName
from gateway.operator import site_check
from gateway.tenancy import sites
from gateway.wordpress import TRANSPORTS
from gateway.wordpress import Transport
from gateway.wordpress import WordPressClient
from gateway.wordpress.client import SEO_META
from gateway.wordpress.client import parse_json_lenient
from gateway.wordpress.errors import UpstreamRefused
from gateway.wordpress.errors import WordPressError

COMPANION_MIN_VERSION = "1.0.0"  # the companion plugin release this gateway expects
SCRATCH_EMOJI = "\U0001f600\U0001f680"


@dataclass(frozen=True)
class Check:
    """A named check: ``explains`` (what it looks at, plainly), ``fix`` (what to do when it
    fails), ``run(probe) -> (ok, detail)``, the checks that must pass first, and the
    ``transports`` it applies to."""

    name: str
    explains: str
    fix: str
    run: Callable[[Probe], tuple[bool | None, str]]
    needs: tuple[str, ...] = ()
    transports: tuple[str, ...] = TRANSPORTS


class UnknownCheck(UnknownName):
    """No doctor check of this name is registered."""


CHECKS: Registry[Check] = Registry("doctor check", UnknownCheck)


def register(check: Check) -> Check:
    """Add ``check`` to the registry and return it.

    Raises:
        NameTaken: a check of that name is registered already (the first one stays).
    """
    return CHECKS.add(check.name, check)


def get(name: str) -> Check:
    """The registered check ``name``.

    Raises:
        UnknownCheck: nothing of that name is registered.
    """
    return CHECKS.get(name)


def check(
    name: str,
    explains: str,
    fix: str,
    needs: tuple[str, ...] = (),
    transports: tuple[str, ...] = TRANSPORTS,
):
    """Decorator form of :func:`register` for a ``run(probe)`` function (raises
    :class:`~gateway.core.registry.NameTaken` for a taken name)."""

    def decorate(run):
        register(Check(name, explains, fix, run, needs, transports))
        return run

    return decorate


def checks_for(transport: str) -> list[Check]:
    """The registered checks that apply to a site on ``transport``, in registration order."""
    return [c for c in CHECKS if transport in c.transports]


def firewall_detail(error: UpstreamRefused, endpoint: str = "/wp-json/") -> str:
    """What a person needs to lift a block in front of WordPress's API at ``endpoint``
    (status, content type, the page's title), never a credentials hint: WordPress did not
    answer."""
    title = f" titled {error.title!r}" if error.title else ""
    api = "XML-RPC API" if endpoint == "/xmlrpc.php" else "REST API"
    if error.location:
        return (
            f"{error.method} {error.url} is redirected ({error.status}) to {error.location}: "
            f"the gateway follows no redirect with credentials; add the site with --url "
            f"{error.suggested_url}"
        )
    return (
        f"a firewall, CDN, proxy or the web server in front of the {api} answered "
        f"{error.method} {error.url} with {error.status} {error.content_type or 'no content type'}"
        f"{title}, not WordPress: let the gateway's address or User-Agent "
        f"'publishing-gateway' through to {endpoint}"
    )


@dataclass
class Probe:
    """What the checks share: the site, its client (``client.transport`` says which), and
    results fetched once."""

    config: Config
    site: object
    client: Transport
    notes: dict = field(default_factory=dict)

    @property
    def transport(self) -> str:
        return self.client.transport

    @cached_property
    def rest(self) -> WordPressClient:
        """A REST client for the site's REST index (the client itself on REST)."""
        if isinstance(self.client, WordPressClient):
            return self.client
        password = sites.decrypt_password(self.config.secret_key, self.site.password_encrypted)
        return WordPressClient(
            self.site.url,
            self.site.username,
            password,
            self.config.wp_timeout,
            self.site.rest_root,
        )

    @cached_property
    def me(self):
        """REST: ``(response, body or None)`` of ``GET /wp/v2/users/me?context=edit`` as it
        came."""
        response = self.client.get_raw("/wp/v2/users/me", {"context": "edit"})
        try:
            body = parse_json_lenient(response.text)
        except ValueError:
            body = None
        return response, body if isinstance(body, dict) else None

    @cached_property
    def password_over_xmlrpc(self) -> bool | None:
        """REST: the stored password over XML-RPC
        (:func:`gateway.operator.site_check.password_over_xmlrpc`), asked once."""
        password = sites.decrypt_password(self.config.secret_key, self.site.password_encrypted)
        return site_check.password_over_xmlrpc(
            self.site.url, self.site.username, password, self.config.wp_timeout
        )

    @cached_property
    def profile(self) -> tuple[dict | None, WordPressError | None]:
        """XML-RPC: ``(wp.getProfile as {id, slug, roles}, None)`` or ``(None, the error)``;
        the whitespace or byte order marks its answer carried before ``<?xml`` (tolerated by
        the transport) go to ``notes["stray_output"]``."""
        try:
            profile = self.client.me()
        except WordPressError as error:
            return None, error
        self.notes["stray_output"] = getattr(self.client, "stray_output", b"")
        return profile, None

    @property
    def user(self) -> dict:
        """The signed-in user (``slug``, ``roles``; ``capabilities`` over REST only)."""
        if self.transport == "xmlrpc":
            return self.profile[0] or {}
        return self.me[1] or {}

    @cached_property
    def wordpress_version(self) -> str:
        """The version WordPress reports (over REST the companion's status, read once with
        :attr:`companion`; ``software_version`` over XML-RPC), or ``unknown`` when it cannot
        be read."""
        if self.transport != "xmlrpc":
            return self.companion.wordpress_version or "unknown"
        try:
            return self.client.wordpress_version() or "unknown"
        except WordPressError:
            return "unknown"

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
