"""Configuration: every ``GATEWAY_*`` environment variable, converted and checked in one place.

Each setting is declared once, in :data:`SETTINGS`: its :class:`Config` attribute, its
environment variable, the parser that converts and checks the variable's text, its default and
its doc line. :class:`Config` (its fields, defaults and docstring) and :func:`load` are built
from that table, so a setting cannot have two defaults.

The app factory and the CLI call :func:`load` once at start-up; nothing else reads the
environment. A missing ``GATEWAY_SECRET_KEY`` fails start-up with a clear message, except when a
test configuration supplies one.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from dataclasses import make_dataclass
from dataclasses import replace
from typing import Any

DEFAULT_DATABASE_URL = "sqlite:///gateway.ledger.db"
DEFAULT_WP_TIMEOUT = 30.0
# gateway serve's --workers and --threads, measured on 2 cores against the test WordPress
# (docs/operations.md, "Workers and threads"): a request mostly waits on WordPress, so threads,
# not processes, carry the load; with 32 a lone tenant's 32 keep-alive clients fit in either
# worker however the connections fall, every thread but the fair shares' reserve
# (gateway/tenancy/tenant_shares.py).
DEFAULT_WORKERS = 2
DEFAULT_THREADS = 32
# 40 megapixels (8000 x 5000): above any camera's default output we expect; decoding it takes
# ~120 MiB (RGB), where a 13000 x 13000 pixel flood would take ~650 MiB.
DEFAULT_MEDIA_MAX_PIXELS = 40_000_000
TEST_SECRET_KEY = "insecure-test-key"  # the secret key of a test configuration without one


class ConfigError(Exception):
    """A ``GATEWAY_*`` variable is missing or malformed; the message names it."""


class MissingSecretKey(ConfigError):
    """``GATEWAY_SECRET_KEY`` is unset outside tests. ``database_url`` is the ledger's URL, so
    that the command line can name the key a ledger already there was filled with
    (``gateway.cli``): a new key cannot decrypt the passwords it stores."""

    def __init__(self, database_url: str | None):
        super().__init__(
            "GATEWAY_SECRET_KEY is required: it encrypts the WordPress application passwords "
            "stored in the ledger"
        )
        self.url_given = bool(database_url)  # False: GATEWAY_DATABASE_URL unset
        self.database_url = database_url or DEFAULT_DATABASE_URL


# --------------------------------------------------------------------------- parsers
# Each turns a variable's text (None: unset) into the setting's value:
# ``parse(raw, default, variable) -> value``; ``variable`` names it in the error message.


def _text(raw: str | None, default: str, variable: str) -> str:
    """As written; unset: the default (set but empty stays empty)."""
    return default if raw is None else raw


def _text_or_default(raw: str | None, default, variable: str):
    """As written; unset or empty: the default."""
    return raw or default


def _stripped(raw: str | None, default: str, variable: str) -> str:
    """Without surrounding white space; unset: the default."""
    return (raw or default).strip()


def _positive(kind: type) -> Callable[[str | None, Any, str], Any]:
    """A parser of numbers > 0 of ``kind`` (``float`` or ``int``); unset or empty: the
    default."""

    def parse(raw: str | None, default, variable: str):
        if raw is None or raw == "":
            return default
        try:
            value = kind(raw)
        except ValueError:
            raise ConfigError(f"{variable} must be a number, got {raw!r}") from None
        if value <= 0:
            raise ConfigError(f"{variable} must be positive, got {raw!r}")
        return value

    return parse


_seconds = _positive(float)  # also hours, days, minutes: the setting's doc names the unit
_size = _positive(int)


def _count(raw: str | None, default: int | None, variable: str) -> int | None:
    """A whole number >= 0 (0 switches a limit off); unset or blank: the default."""
    raw = (raw or "").strip()
    if not raw:
        return default
    if not raw.isdigit():
        raise ConfigError(f"{variable} must be a whole number >= 0, got {raw!r}")
    return int(raw)


def _grace(raw: str | None, default: int, variable: str) -> int:
    """Whole seconds from 0 (off) to 60, the longest grace any of Okta's, Auth0's or
    Cognito's refresh rotation allows; unset or blank: the default."""
    seconds = _count(raw, default, variable)
    if seconds > 60:
        raise ConfigError(f"{variable} must be at most 60 seconds, got {raw!r}")
    return seconds


def _rate(raw: str | None, default, variable: str) -> tuple[int, int] | None:
    """``N/SECONDS`` (``N`` alone means per second); empty or ``0`` = no limit; unset: the
    default."""
    if raw is None:
        return default
    raw = raw.strip()
    if raw in ("", "0"):
        return None
    count, _, seconds = raw.partition("/")
    seconds = seconds or "1"
    if not (count.isdigit() and seconds.isdigit() and int(count) > 0 and int(seconds) > 0):
        raise ConfigError(f"{variable} must look like 600/60 (requests per seconds), got {raw!r}")
    return int(count), int(seconds)


def _public_url(raw: str | None, default: str, variable: str) -> str:
    """An ``http://`` or ``https://`` URL without its trailing slash; unset: the default."""
    raw = (raw or default).strip().rstrip("/")
    if raw and not raw.startswith(("http://", "https://")):
        raise ConfigError(f"{variable} must start with http:// or https://, got {raw!r}")
    return raw


def _listen(raw: str | None, default: str, variable: str) -> str:
    """``host:port`` (``[::1]:8001`` for IPv6), or empty (off); unset: the default."""
    raw = (default if raw is None else raw).strip()
    if not raw:
        return ""
    host, _, port = raw.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{variable} must look like 127.0.0.1:8001 (or be empty), got {raw!r}")
    return raw


def _words(raw: str | None, default: frozenset[str], variable: str) -> frozenset[str]:
    """A comma-separated list as a set of trimmed entries; unset: the default."""
    if raw is None:
        return default
    return frozenset(p for p in (p.strip() for p in raw.split(",")) if p)


def _lower_words(raw: str | None, default: frozenset[str], variable: str) -> frozenset[str]:
    """:func:`_words`, lower-cased (URL schemes)."""
    return frozenset(p.lower() for p in _words(raw, default, variable))


def _switch(raw: str | None, default: bool, variable: str) -> bool:
    """``on``/``off`` (also ``1``/``0``, ``true``/``false``, ``yes``/``no``); unset: the
    default."""
    if raw is None or not raw.strip():
        return default
    value = raw.strip().lower()
    if value in ("on", "1", "true", "yes"):
        return True
    if value in ("off", "0", "false", "no"):
        return False
    raise ConfigError(f"{variable} must be on or off, got {raw!r}")


def _not_read(raw: str | None, default, variable: str):
    """A setting no variable sets (``load``'s own argument or a test's override)."""
    return default


# --------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class Setting:
    """One setting of :class:`Config`, declared once.

    Attributes:
        name: the :class:`Config` attribute.
        kind: its type (the dataclass field's annotation).
        env: the environment variable :func:`load` reads it from; None: none.
        parse: ``(raw text or None, default, env) -> value``; raises :class:`ConfigError`.
        default: the value when the variable is unset (and the dataclass default).
        doc: its line of :class:`Config`'s docstring (units included).
        secret: never shown by ``repr`` (nor logged).
        default_from: the default computed from the settings declared above it (by name);
            ``default`` is then what it gives for their defaults.
    """

    name: str
    kind: Any
    env: str | None
    parse: Callable[[str | None, Any, str], Any]
    default: Any
    doc: str
    secret: bool = False
    default_from: Callable[[dict], Any] | None = None


S = Setting
SETTINGS: tuple[Setting, ...] = (
    S("database_url", str, "GATEWAY_DATABASE_URL", _text_or_default, DEFAULT_DATABASE_URL,
      "ledger location, ``sqlite:///path`` or ``postgresql://...``."),
    S("secret_key", str, "GATEWAY_SECRET_KEY", _text, "",
      "encrypts site credentials and signs editor sessions; never logged. Required outside "
      "tests (:func:`load`).", secret=True),
    S("wp_timeout", float, "GATEWAY_WP_TIMEOUT", _seconds, DEFAULT_WP_TIMEOUT,
      "seconds allowed for one WordPress call (connect + read)."),
    S("inflight_window", float, "GATEWAY_INFLIGHT_WINDOW", _seconds, DEFAULT_WP_TIMEOUT + 10,
      "seconds a SENT row counts as in flight when the site has no companion-plugin guard; "
      "unset: ``wp_timeout`` + 10.", default_from=lambda above: above["wp_timeout"] + 10),
    S("max_content_length", int, "GATEWAY_MAX_CONTENT_LENGTH", _size, 25 * 1024 * 1024,
      "request body limit in bytes."),
    S("resume_after", float, "GATEWAY_RESUME_AFTER", _seconds, 300.0,
      "seconds without any request before a job counts as stopped and may be resumed "
      "(``POST /v1/jobs/{id}/resume``)."),
    S("resume_budget", int, "GATEWAY_RESUME_BUDGET", _size, 3,
      "resumes allowed per job version before editors are told instead."),
    S("attention_after", float, "GATEWAY_ATTENTION_AFTER", _seconds, 3600.0,
      "seconds without any request after which an unfinished job needs attention: the sweep "
      "tells editors, and GET /v1/job-changes lists a stalled run with needs_attention."),
    S("crash_points", frozenset[str], "GATEWAY_CRASH_POINTS", _words, frozenset(),
      "crash points enabled for fault tests (empty in production): named ones and counted "
      "ones (``commit#3``, ``wp_before#2``: :mod:`gateway.operations.crashes`)."),
    S("metrics_token", str, "GATEWAY_METRICS_TOKEN", _text, "",
      "when set, ``GET /metrics`` requires it as a bearer token; never logged.", secret=True),
    # A job of the main scenario makes about 10 WordPress writes; 200 leaves room for task
    # versions, repairs and retries, and stops a workflow that loops into itself (one made
    # 20,000 calls in two hours) after minutes, not hours.
    S("job_write_budget", int, "GATEWAY_JOB_WRITE_BUDGET", _count, 200,
      "WordPress write attempts one job may make (``write_attempts`` budget, see "
      ":mod:`gateway.jobs.budgets`); an editor may raise it per job."),
    S("site_concurrency", int, "GATEWAY_SITE_CONCURRENCY", _count, 0,
      "WordPress-calling requests in flight per site across every worker and instance; "
      "0 = no limit."),
    S("token_rate", tuple[int, int] | None, "GATEWAY_TOKEN_RATE", _rate, None,
      "``(requests, seconds)`` allowed per API token and window, counted in the ledger across "
      "every worker; None = no limit."),
    S("public_url", str, "GATEWAY_PUBLIC_URL", _public_url, "",
      "the URL users reach the gateway at; ``https://`` makes the review page's cookies "
      "``Secure``. The remote MCP listener's issuer too, its resource ``<public_url>/mcp`` "
      "(empty: ``http://<mcp_listen>``, for loopback)."),
    S("mcp_listen", str, "GATEWAY_MCP_LISTEN", _listen, "127.0.0.1:8001",
      "``host:port`` where ``gateway serve`` starts its remote MCP listener (``/mcp``, its "
      "OAuth metadata; :mod:`gateway.remote`); empty = no listener. Unset, a default port "
      "already taken leaves the listener off (one line); set, a taken port fails start-up."),
    S("proxy_hops", int, "GATEWAY_PROXY_HOPS", _count, 0,
      "proxies in front of the gateway whose ``X-Forwarded-*`` headers are trusted "
      "(werkzeug's ``ProxyFix``); 0 trusts none."),
    S("media_url_schemes", frozenset[str], "GATEWAY_MEDIA_URL_SCHEMES", _lower_words,
      frozenset({"https"}), "URL schemes an image may be downloaded from (``https``)."),
    S("media_url_allow_hosts", frozenset[str], "GATEWAY_MEDIA_URL_ALLOW_HOSTS", _words,
      frozenset(),
      "``host:port`` entries, exactly as written in a URL; when not empty only these hosts "
      "are downloaded from, and a listed one may be a loopback or private address (never "
      "link-local or metadata)."),
    S("media_url_max_bytes", int, "GATEWAY_MEDIA_URL_MAX_BYTES", _size, 20 * 1024 * 1024,
      "the largest image downloaded, in bytes."),
    S("media_url_timeout", float, "GATEWAY_MEDIA_URL_TIMEOUT", _seconds, 20.0,
      "seconds for one download (connect, redirects and body together), enforced on every "
      "read."),
    S("preview_timeout", float, "GATEWAY_PREVIEW_TIMEOUT", _seconds, 20.0,
      "seconds for one image the review page streams from WordPress, all of it: a dripping "
      "answer is cut then, and the editor's share is held until its last byte."),
    S("media_max_pixels", int, "GATEWAY_MEDIA_MAX_PIXELS", _size, DEFAULT_MEDIA_MAX_PIXELS,
      "the most pixels (width x height) an image may declare; more is 422 "
      "``image-too-large`` before anything is decoded (Pillow's bomb limit follows it)."),
    S("notification_url_allow_hosts", frozenset[str], "GATEWAY_NOTIFICATION_URL_ALLOW_HOSTS",
      _words, frozenset(), "like ``media_url_allow_hosts``, for notification URLs."),
    S("notification_timeout", float, "GATEWAY_NOTIFICATION_TIMEOUT", _seconds, 10.0,
      "seconds for one notification delivery, all of it (connect, request, the receiver's "
      "whole answer)."),
    S("notification_max_bytes", int, "GATEWAY_NOTIFICATION_MAX_BYTES", _size, 64 * 1024,
      "the most bytes of a receiver's answer read."),
    S("notification_poll_interval", float, "GATEWAY_NOTIFICATION_POLL_INTERVAL", _seconds, 2.0,
      "seconds between a worker's looks for pending notifications (a decision in the same "
      "worker wakes it at once)."),
    S("notification_max_refusals", int, "GATEWAY_NOTIFICATION_MAX_REFUSALS", _count, 5,
      "definite refusals (:func:`gateway.core.answers.is_definite` for a receiver) after "
      "which a notification is REFUSED and no longer resent; it backs off after each earlier "
      "one; 0 = never stop."),
    S("webhook_endpoints_per_tenant", int, "GATEWAY_WEBHOOK_ENDPOINTS_PER_TENANT", _count, 20,
      "the most webhook endpoints a tenant may have (``POST /v1/webhook-endpoints``; its "
      "notification URL counts as one); more is 409 ``webhook-endpoint-limit``; 0 = no limit."),
    S("worker_threads", int, "GATEWAY_WORKER_THREADS", _count, 0,
      "the threads of this ``gateway serve`` worker process (set by ``gateway serve`` from "
      "``--threads``); 0 outside a server (no request share)."),
    S("tenant_requests", int | None, "GATEWAY_TENANT_REQUESTS", _count, None,
      "requests one tenant may have in flight in one worker process while another tenant "
      "has one there (alone: every thread but one, :mod:`gateway.tenancy.tenant_shares`); "
      "None = half of ``worker_threads`` (at least 1); 0 = no cap."),
    S("tenant_site_calls", int | None, "GATEWAY_TENANT_SITE_CALLS", _count, None,
      "callers of one tenant talking to one of its sites at once in one worker process "
      "while another tenant is in flight there; None = a quarter of ``worker_threads`` (at "
      "least 2: 8 of gateway serve's 32); 0 = no cap."),
    S("unauthenticated_rate", tuple[int, int] | None, "GATEWAY_UNAUTHENTICATED_RATE", _rate,
      (30, 60),
      "``(calls, seconds)`` without a valid token allowed per client address and worker "
      "process before 429; None = no limit."),
    S("approval_max_days", float, "GATEWAY_APPROVAL_MAX_DAYS", _seconds, 7.0,
      "the latest ``expires_at`` an approval may carry, in days from now."),
    S("session_hours", float, "GATEWAY_SESSION_HOURS", _seconds, 8.0,
      "the fixed lifetime of a review-page session, in hours."),
    S("session_idle_minutes", float, "GATEWAY_SESSION_IDLE_MINUTES", _seconds, 30.0,
      "a review-page session unused this long (minutes) ends."),
    S("testing", bool, None, _not_read, False,
      "relaxes the secret-key requirement (:func:`load`'s ``testing``)."),
    S("openai_api_key", str, "GATEWAY_OPENAI_API_KEY", _text, "",
      "the OpenAI project key the agent worker calls the Agents API with; never stored in "
      "the ledger, logged, returned, or handed to an agent.", secret=True),
    S("openai_base_url", str | None, "GATEWAY_OPENAI_BASE_URL", _text_or_default, None,
      "the Agents API base URL (None: the SDK's default, api.openai.com)."),
    S("openai_webhook_secret", str, "GATEWAY_OPENAI_WEBHOOK_SECRET", _text, "",
      "verifies ``POST /v1/webhooks/openai`` (``whsec_...``).", secret=True),
    S("agent_poll_interval", float, "GATEWAY_AGENT_POLL_INTERVAL", _seconds, 15.0,
      "seconds between the agent worker's passes."),
    S("agent_stale_after", float, "GATEWAY_AGENT_STALE_AFTER", _seconds, 120.0,
      "seconds without news after which a session waiting for an action is retrieved again "
      "(covers lost webhooks)."),
    S("agent_max_resumes", int, "GATEWAY_AGENT_MAX_RESUMES", _size, 50,
      "per-job limit of the agent's resumes; reaching it stops the agent (a person decides)."),
    S("agent_max_tool_calls", int, "GATEWAY_AGENT_MAX_TOOL_CALLS", _size, 200,
      "per-job limit of the agent's tool calls; reaching it stops the agent."),
    S("agent_max_tokens", int, "GATEWAY_AGENT_MAX_TOKENS", _size, 5_000_000,
      "per-job limit of the agent's tokens; reaching it stops the agent."),
    S("agent_deadline_hours", float, "GATEWAY_AGENT_DEADLINE_HOURS", _seconds, 48.0,
      "hours after the session was bound after which the agent stops."),
    S("agent_lease_seconds", int, "GATEWAY_AGENT_LEASE_SECONDS", _size, 120,
      "the job lease the worker takes while it answers a session's actions (a crashed "
      "worker's lease passes to the next worker after this), in seconds."),
    S("request_key_hours", float, "GATEWAY_REQUEST_KEY_HOURS", _seconds, 24.0,
      "how long a client's request key (``Idempotency-Key``) and its stored answer are kept "
      "(:mod:`gateway.tenancy.request_keys`), in hours."),
    S("agent_poll_max_interval", float, "GATEWAY_AGENT_POLL_MAX_INTERVAL", _seconds, 1800.0,
      "the longest wait between two retrieves of an unfinished session; a session whose "
      "retrieves show nothing new waits twice as long each time from ``agent_stale_after`` "
      "up to this (seconds)."),
    S("agent_poll_batch", int, "GATEWAY_AGENT_POLL_BATCH", _size, 50,
      "sessions the poll retrieves at most in one worker pass (the most overdue first; the "
      "rest wait for the next pass)."),
    S("agent_tenant_slice", float, "GATEWAY_AGENT_TENANT_SLICE", _seconds, 10.0,
      "seconds of one tenant's agent work in one worker pass: the tenants take turns (one "
      "event or session each), and a tenant whose work in the pass took this long leaves it; "
      "the rest waits, unclaimed, for the next pass (:mod:`gateway.agents.turns`)."),
    S("agent_retry_after", float, "GATEWAY_AGENT_RETRY_AFTER", _seconds, 5.0,
      "seconds before the first retry of a session or webhook event that could not be "
      "handled (OpenAI or the site unreachable); doubles per failure up to "
      "``agent_poll_max_interval``."),
    S("agent_environment_hook", str, "GATEWAY_AGENT_ENVIRONMENT_HOOK", _stripped, "",
      "what connects a session's environment when it asks for an ``environment_connection``: "
      "a command (run without a shell) or an ``https://`` (or ``http://``) URL; empty refuses "
      "such requests with a reason (:mod:`gateway.agents.environments`, docs/agents.md).",
      secret=True),  # a URL may carry a token
    S("agent_environment_hook_timeout", float, "GATEWAY_AGENT_ENVIRONMENT_HOOK_TIMEOUT",
      _seconds, 60.0, "seconds one run of the hook may take."),
    # The MCP authorization server (OAuth 2.1, docs/mcp.md "Remote MCP with OAuth").
    S("oauth_access_minutes", float, "GATEWAY_OAUTH_ACCESS_MINUTES", _seconds, 10.0,
      "minutes an OAuth access token for ``/mcp`` is valid; a client refreshes it after."),
    S("oauth_refresh_days", float, "GATEWAY_OAUTH_REFRESH_DAYS", _seconds, 30.0,
      "days a refresh token is valid; each is used once and replaced (rotation)."),
    S("oauth_refresh_grace_seconds", int, "GATEWAY_OAUTH_REFRESH_GRACE_SECONDS", _grace, 30,
      "seconds after a refresh token's rotation during which the same client may present it "
      "again for its own new pair without revoking the grant (0-60; 0: off): hosted clients "
      "refresh from several nodes at once (PrefectHQ/fastmcp#4264); docs/security.md."),
    S("oauth_pending_per_client", int, "GATEWAY_OAUTH_PENDING_PER_CLIENT", _size, 100,
      "authorisation requests of one client that may wait unclaimed for an editor at once; "
      "``/authorize`` answers 503 ``temporarily_unavailable`` past it."),
    S("oauth_code_seconds", float, "GATEWAY_OAUTH_CODE_SECONDS", _seconds, 60.0,
      "seconds an authorization code may wait for its exchange at ``/token``."),
    S("oauth_pending_minutes", float, "GATEWAY_OAUTH_PENDING_MINUTES", _seconds, 15.0,
      "minutes an authorisation request waits for an editor's decision on the consent page."),
    S("oauth_cimd", bool, "GATEWAY_OAUTH_CIMD", _switch, True,
      "accept clients named by the HTTPS URL of their metadata document (Client ID "
      "Metadata Documents), fetched through the egress guard; ``off`` refuses them."),
    S("oauth_cimd_cache_seconds", float, "GATEWAY_OAUTH_CIMD_CACHE_SECONDS", _seconds, 300.0,
      "seconds a fetched client metadata document is used before it is fetched again."),
    S("oauth_cimd_allow_hosts", frozenset[str], "GATEWAY_OAUTH_CIMD_ALLOW_HOSTS", _words,
      frozenset(), "``host:port`` entries whose metadata documents may be fetched though "
      "their address is loopback or private (like ``media_url_allow_hosts``)."),
    S("oauth_dcr", bool, "GATEWAY_OAUTH_DCR", _switch, True,
      "accept Dynamic Client Registration (RFC 7591) at ``/register``, for clients without "
      "a metadata document: public clients only; ``off`` refuses it."),
    S("oauth_dcr_rate", tuple[int, int] | None, "GATEWAY_OAUTH_DCR_RATE", _rate, (100, 3600),
      "registrations one client address may make, ``N/SECONDS`` (a hosted client's users "
      "share its cloud's few addresses)."),
    S("oauth_rate", tuple[int, int] | None, "GATEWAY_OAUTH_RATE", _rate, (600, 60),
      "requests to the MCP listener's token-less paths (the OAuth metadata, ``/authorize``, "
      "``/token``, ``/register``, ``/revoke``) one client address may make, ``N/SECONDS``; "
      "a sign-in takes about five, and a hosted client's users share its cloud's addresses."),
    S("oauth_dcr_unused_hours", float, "GATEWAY_OAUTH_DCR_UNUSED_HOURS", _seconds, 24.0,
      "hours after which a dynamic registration no editor has approved is forgotten."),
)  # fmt: skip
del S


def _tenant_request_cap(self) -> int:
    """Requests one tenant may have in flight in this worker process; 0 = no cap (also
    outside ``gateway serve``, where ``worker_threads`` is 0)."""
    if not self.worker_threads or self.tenant_requests == 0:
        return 0
    if self.tenant_requests is None:
        return max(1, self.worker_threads // 2)
    return self.tenant_requests


def _tenant_site_cap(self) -> int:
    """Callers of one tenant on one site at once in this worker process; 0 = no cap (also
    outside ``gateway serve``). Measured (docs/performance.md, issue 39): 2 held a tenant of
    8 clients to 0.65 of direct beside a hostile tenant, 8 gave 0.86."""
    if not self.worker_threads or self.tenant_site_calls == 0:
        return 0
    if self.tenant_site_calls is None:
        return max(2, self.worker_threads // 4)
    return self.tenant_site_calls


def _with_overrides(self, **overrides):
    """Return a copy with ``overrides`` applied (used by tests and the demo)."""
    return replace(self, **overrides)


def _docstring() -> str:
    lines = ["Validated settings of one gateway process (declared in :data:`SETTINGS`).", ""]
    lines.append("Attributes:")
    for s in SETTINGS:
        source = f" (``{s.env}``)" if s.env else ""
        lines.append(f"    {s.name}{source}: {s.doc}")
    return "\n".join(lines)


Config = make_dataclass(
    "Config",
    [(s.name, s.kind, field(default=s.default, repr=not s.secret)) for s in SETTINGS],
    namespace={
        "__doc__": _docstring(),
        "__module__": __name__,
        "tenant_request_cap": property(_tenant_request_cap),
        "tenant_site_cap": property(_tenant_site_cap),
        "with_overrides": _with_overrides,
    },
    frozen=True,
)


def chosen(name: str, env: dict | None = None) -> bool:
    """Whether setting ``name`` (a :class:`Config` attribute) was chosen: its variable is set
    in ``env`` (default: ``os.environ``), even empty, rather than left to its default. A
    default may give way where a chosen value must not (``gateway serve``'s remote MCP
    listener on a busy port, :func:`gateway.server.run`).

    Raises:
        KeyError: ``name`` is no setting read from a variable.
    """
    variables = {s.name: s.env for s in SETTINGS if s.env}
    return variables[name] in (os.environ if env is None else env)


def load(env: dict | None = None, testing: bool = False, needs_secret_key: bool = True) -> Config:
    """Build a :class:`Config` from ``env`` (default: ``os.environ``): each setting of
    :data:`SETTINGS` parsed from its variable, in the table's order (a ``default_from``
    sees the values above it).

    ``needs_secret_key=False`` serves the commands that encrypt and decrypt nothing
    (``gateway sites list``, ``sites remove``, ``tokens``): without ``GATEWAY_SECRET_KEY`` the
    key is then empty, and a site's password is neither encrypted nor decrypted with it
    (:mod:`gateway.tenancy.sites` refuses).

    Raises:
        MissingSecretKey: ``GATEWAY_SECRET_KEY`` is missing outside tests and needed.
        ConfigError: a value is malformed.
    """
    env = dict(os.environ if env is None else env)
    if not env.get("GATEWAY_SECRET_KEY") and not testing and needs_secret_key:
        raise MissingSecretKey(env.get("GATEWAY_DATABASE_URL"))
    values: dict = {}
    for s in SETTINGS:
        default = s.default if s.default_from is None else s.default_from(values)
        values[s.name] = s.parse(env.get(s.env) if s.env else None, default, s.env)
    values["secret_key"] = values["secret_key"] or (TEST_SECRET_KEY if testing else "")
    values["testing"] = testing
    return Config(**values)
