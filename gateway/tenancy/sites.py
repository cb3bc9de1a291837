"""WordPress sites of a tenant: encrypted application passwords, credential versions, and the
companion plugin's guarantees as detected on the live site.

Passwords are encrypted with ``cryptography``'s Fernet (AES-128-CBC + HMAC-SHA256) under a key
derived from ``GATEWAY_SECRET_KEY`` by HKDF-SHA256: a well-kept library rather than our own
crypto. Adding a site under an existing name updates it and bumps ``credential_version``, which
lets FAILED 401/403 operations be sent again.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit
from urllib.parse import urlunsplit

from cryptography.fernet import Fernet
from cryptography.fernet import InvalidToken

from gateway.core import sealing
from gateway.core import validation
from gateway.core.config import ConfigError
from gateway.core.exceptions import SecretKeyMismatch
from gateway.core.exceptions import SiteNotFound
from gateway.core.exceptions import TransportSwitchRefused
from gateway.ledger import db
from gateway.ledger import hot_sql
from gateway.ledger.models import SENT
from gateway.ledger.models import UNKNOWN
from gateway.ledger.models import Job
from gateway.ledger.models import Operation
from gateway.ledger.models import Site
from gateway.wordpress import Transport
from gateway.wordpress import connect
from gateway.wordpress.errors import WordPressError
from gateway.wordpress.errors import WordPressOutcomeUnknown
from gateway.wordpress.rest_root import default_root

log = logging.getLogger(__name__)
COMPANION_TTL = 60.0  # seconds a detection result is trusted per process

_companion_cache: dict[tuple, tuple[float, Companion]] = {}
_cache_lock = threading.Lock()


@dataclass(frozen=True)
class Companion:
    """What the site guarantees: ``present`` (lookup by operation key works), ``guard``
    (WordPress refuses a second object with one key), ``seo_meta`` (Rank Math fields kept),
    ``alt_text`` (image alt text writable), ``new_terms`` (an author may create tags: REST
    yes, XML-RPC no, ``wp.newTerm`` needs ``edit_terms``), the ``transport``, and
    ``key_index`` (the companion's postmeta index for lookups by operation key exists; None:
    a plugin older than 1.2.0 does not say), ``wordpress_version`` (what WordPress says it is,
    from the companion's status; None before companion 1.3.0)."""

    present: bool
    guard: bool
    seo_meta: bool
    version: str | None = None
    transport: str = "rest"
    alt_text: bool = True
    new_terms: bool = True
    key_index: bool | None = None
    wordpress_version: str | None = None


ABSENT = Companion(present=False, guard=False, seo_meta=False)
# XML-RPC needs no plugin: the key is a custom field found by a scan, Rank Math fields are
# custom fields; nothing inside WordPress refuses a second object, alt text is protected meta.
XMLRPC = Companion(
    present=True, guard=False, seo_meta=True, transport="xmlrpc", alt_text=False, new_terms=False
)


def _fernet(secret_key: str) -> Fernet:
    if not secret_key:  # a command that needs no key was given none (config.load)
        raise ConfigError("GATEWAY_SECRET_KEY is required to use a site's application password")
    return sealing.fernet(secret_key, b"site-credentials")


def encrypt_password(secret_key: str, password: str) -> str:
    """Encrypt an application password for storage (Fernet token, text)."""
    return _fernet(secret_key).encrypt(password.encode("utf-8")).decode("ascii")


@lru_cache(maxsize=64)
def _decrypted(secret_key: str, token: str) -> str:
    # Per process: a site's stored token changes with every credential update, so a cached
    # entry never outlives the credentials it decrypts (the client holds them anyway).
    return _fernet(secret_key).decrypt(token.encode("ascii")).decode("utf-8")


def decrypt_password(secret_key: str, token: str) -> str:
    """Decrypt a stored application password.

    Raises:
        SecretKeyMismatch: the ledger was written under another ``GATEWAY_SECRET_KEY``.
    """
    try:
        return _decrypted(secret_key, token)
    except InvalidToken:
        raise SecretKeyMismatch(
            "cannot decrypt a site password: GATEWAY_SECRET_KEY differs from the one used "
            "by 'gateway sites add'"
        ) from None


def check_site_url(url: str) -> None:
    """Refuse a site URL that is not ``http://`` or ``https://`` with a host and nothing
    else around it (no spaces, no ``<...>`` placeholder, no credentials, query or fragment).

    Raises:
        ValueError: what is wrong, in one sentence.
    """
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a malformed port raises here
    except ValueError as error:
        raise ValueError(f"the site URL {url!r} is malformed ({error})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or any(c in url for c in " <>"):
        raise ValueError(
            f"the site URL {url!r} is not an http:// or https:// URL with a host "
            "(e.g. https://blog.example.com)"
        )
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ValueError(f"the site URL {url!r} may not carry credentials, a query or a fragment")


def add_site(
    secret_key: str,
    tenant: str,
    name: str,
    url: str,
    username: str,
    password: str,
    transport: str = "rest",
    rest_root: str | None = None,
) -> Site:
    """Create or update site ``name`` of ``tenant``; an update bumps ``credential_version``.
    ``rest_root``: where the site serves its REST API, as ``gateway sites add`` discovered it
    (:mod:`gateway.wordpress.discovery`); None: ``{url}/wp-json/``.

    Switching the transport keeps the ledger (CONFIRMED operations stay replays; lookups
    know both identifier keys) but is refused while an operation of the site is SENT or
    UNKNOWN: its lookup must run over the transport that sent it.

    Raises:
        TransportSwitchRefused: a switch while SENT/UNKNOWN operations exist.
        ValueError: ``tenant`` or ``name`` does not match :data:`validation.TENANT` /
            :data:`validation.SITE_NAME` as a whole, or ``url`` is not an ``http(s)://`` URL
            with a host (a pasted placeholder such as ``<https://your-site.example>``).
    """
    validation.check_name(tenant, validation.TENANT, "tenant")
    validation.check_name(name, validation.SITE_NAME, "site name")
    check_site_url(url)
    encrypted = encrypt_password(secret_key, password)
    with db.atomic():
        site = Site.get_or_none(Site.tenant == tenant, Site.name == name)
        if site is not None and site.transport != transport:
            _check_switch(site, transport)
        if site is None:
            return Site.create(
                tenant=tenant,
                name=name,
                url=url.rstrip("/"),
                username=username,
                password_encrypted=encrypted,
                transport=transport,
                rest_root=rest_root,
            )
        moved = site.url != url.rstrip("/")
        Site.update(
            url=url.rstrip("/"),
            username=username,
            # Another URL may reach another install: learn its identity again on first use.
            install_url=None if moved else site.install_url,
            install_home=None if moved else site.install_home,
            rest_root=rest_root or (None if moved else site.rest_root),
            password_encrypted=encrypted,
            transport=transport,
            credential_version=Site.credential_version + 1,
            updated_at=db.utcnow(),
        ).where(Site.id == site.id).execute()
    return Site.get_by_id(site.id)


def _check_switch(site: Site, transport: str) -> None:
    pending = (
        Operation.select()
        .join(Job, on=((Job.tenant == Operation.tenant) & (Job.job_id == Operation.job_id)))
        .where(
            Job.tenant == site.tenant,
            Job.site == site.name,
            Operation.state.in_((SENT, UNKNOWN)),
        )
        .count()
    )
    if pending:
        raise TransportSwitchRefused(
            f"site {site.name!r} has {pending} SENT or UNKNOWN operation(s) sent over "
            f"{site.transport}; reconcile them first ('gateway reconcile' or POST "
            f".../recover), then switch to {transport}",
            pending=pending,
        )


def get_site(tenant: str, name: str) -> Site:
    """The site ``name`` of ``tenant``: one plain-SQL SELECT
    (:func:`gateway.ledger.hot_sql.site_by_name`; every job PUT reads it).

    Raises:
        SiteNotFound: no such site for this tenant.
    """
    site = hot_sql.site_by_name(tenant, name)
    if site is None:
        names = [s.name for s in list_sites(tenant)]  # the refusal only: never the hot path
        raise SiteNotFound(
            f"site {name!r} is not configured for tenant {tenant!r}; its sites: "
            + (", ".join(names) or "none (gateway sites add)"),
            errors=[{"pointer": "/site", "message": "unknown site"}],
        )
    return site


def list_sites(tenant: str | None) -> list[Site]:
    """Every site of ``tenant`` (every tenant's when None), by tenant and name."""
    query = Site.select().order_by(Site.tenant, Site.name)
    return list(query.where(Site.tenant == tenant) if tenant is not None else query)


def install_identity(site: Site, client: Transport) -> tuple[str, str]:
    """``(url, home)`` of the WordPress install behind ``site``, as its REST index reports
    them (WordPress REST API, the index route at the site's REST root), stored on the site
    row at first use. Two tenants reaching one install by different URLs get one identity.

    Raises:
        WordPressError: the index cannot be read (the identity stays unknown).
    """
    if site.install_url:
        return site.install_url, site.install_home or ""
    index = client.site_index()
    url = _normal_url(index.get("url")) if isinstance(index, dict) else ""
    home = _normal_url(index.get("home")) if isinstance(index, dict) else ""
    if not url:
        raise WordPressOutcomeUnknown("the REST index names no url", url=client.url("/"))
    Site.update(install_url=url, install_home=home).where(Site.id == site.id).execute()
    site.install_url, site.install_home = url, home
    log.info("site %s/%s is the WordPress install %s (home %s)", site.tenant, site.name, url, home)
    return url, home


def same_install(site: Site) -> list[Site]:
    """Other sites (any tenant) known to be the same WordPress install as ``site``."""
    if not site.install_url:
        return []
    return list(
        Site.select()
        .where(
            Site.install_url == site.install_url,
            Site.install_home == site.install_home,
            Site.id != site.id,
        )
        .order_by(Site.tenant, Site.name)
    )


def _normal_url(value) -> str:
    """A URL compared case-insensitively in scheme and host, without a trailing slash."""
    if not isinstance(value, str) or not value:
        return ""
    parts = urlsplit(value.strip())
    return urlunsplit(
        parts._replace(scheme=parts.scheme.lower(), netloc=parts.netloc.lower())
    ).rstrip("/")


def rest_root_of(site: Site) -> str:
    """Where ``site`` serves its REST API: the stored discovered root, else
    ``{url}/wp-json/`` (a site added before schema version 16, or with ``--no-check``)."""
    return site.rest_root or default_root(site.url)


def client_for(site: Site, secret_key: str, timeout: float) -> Transport:
    """A client of the site's transport (REST or XML-RPC) with its decrypted application
    password, at the site's REST root; ``timeout`` is seconds per WordPress call."""
    password = decrypt_password(secret_key, site.password_encrypted)
    return connect(site.transport, site.url, site.username, password, timeout, site.rest_root)


def companion(site: Site, client: Transport, strict: bool = False) -> Companion:
    """What ``site`` guarantees over its transport: fixed for XML-RPC; for REST, the
    companion plugin as detected (cached per process for :data:`COMPANION_TTL` seconds). A
    site that cannot be reached counts as absent for this call and is not cached, unless
    ``strict``: then a detection that could not ask (no answer at all, a timeout, a 5xx or a
    429, from WordPress or from in front of it) raises, because "absent" would be a guess (on
    the side-effect path a resend decided on a guessed absence would wait out an in-flight
    window instead of saying that WordPress is down). A 4xx answer (the route is not there,
    or is refused) still counts as absent.

    Raises:
        WordPressError: only with ``strict``, when WordPress could not be asked.
    """
    if client.transport == "xmlrpc":
        return XMLRPC
    key = (site.id, site.url, site.credential_version)
    now = time.monotonic()
    with _cache_lock:
        hit = _companion_cache.get(key)
    if hit and now - hit[0] < COMPANION_TTL:
        return hit[1]
    try:
        status = client.companion_status()
    except WordPressError as exc:
        log.warning("companion detection failed for site %s: %s", site.name, exc)
        if strict and (exc.status is None or exc.status >= 500 or exc.status == 429):
            raise
        return ABSENT
    found = (
        ABSENT
        if status is None
        else Companion(
            present=True,
            guard=bool(status.get("guard")),
            seo_meta=bool(status.get("seo_meta")),
            version=status.get("version"),
            key_index=status.get("key_index"),
            wordpress_version=status.get("wordpress") or None,
        )
    )
    with _cache_lock:
        _companion_cache[key] = (now, found)
    return found


def forget_companion() -> None:
    """Drop cached detections (tests that deactivate the plugin call this)."""
    with _cache_lock:
        _companion_cache.clear()
