"""Configuration: every ``GATEWAY_*`` environment variable, converted and checked in one place.

The app factory and the CLI call :func:`load` once at start-up; nothing else reads the
environment. A missing ``GATEWAY_SECRET_KEY`` fails start-up with a clear message, except when a
test configuration supplies one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace

DEFAULT_DATABASE_URL = "sqlite:///gateway.ledger.db"
DEFAULT_WP_TIMEOUT = 30.0
DEFAULT_MAX_CONTENT_LENGTH = 25 * 1024 * 1024
# A job of the main scenario makes about 10 WordPress writes; 200 leaves room for task
# versions, repairs and retries, and stops a workflow that loops into itself (one made 20,000
# calls in two hours) after minutes, not hours.
DEFAULT_JOB_WRITE_BUDGET = 200
DEFAULT_MEDIA_URL_MAX_BYTES = 20 * 1024 * 1024
DEFAULT_MEDIA_URL_TIMEOUT = 20.0
# 40 megapixels (8000 x 5000): above any camera's default output we expect; decoding it takes
# ~120 MiB (RGB), where a 13000 x 13000 pixel flood would take ~650 MiB.
DEFAULT_MEDIA_MAX_PIXELS = 40_000_000
DEFAULT_NOTIFICATION_TIMEOUT = 10.0
DEFAULT_NOTIFICATION_MAX_BYTES = 64 * 1024
DEFAULT_TENANT_SITE_CALLS = 2
DEFAULT_UNAUTHENTICATED_RATE = (30, 60)


class ConfigError(Exception):
    """A ``GATEWAY_*`` variable is missing or malformed; the message names it."""


@dataclass(frozen=True)
class Config:
    """Validated settings of one gateway process.

    Attributes:
        database_url: ledger location, ``sqlite:///path`` or ``postgresql://...``.
        secret_key: encrypts site credentials and signs editor sessions; never logged.
        wp_timeout: seconds allowed for one WordPress call (connect + read).
        inflight_window: seconds a SENT row counts as in flight when the site has no
            companion-plugin guard.
        max_content_length: request body limit in bytes.
        resume_after: seconds without any request before a job counts as stopped and may
            be resumed (``POST /v1/jobs/{id}/resume``).
        resume_budget: resumes allowed per job version before editors are told instead.
        attention_after: seconds without any request after which the sweep tells editors
            that an unfinished job needs attention.
        crash_points: crash points enabled for fault tests (empty in production): named
            ones and counted ones (``commit#3``, ``wp_before#2``: gateway.operations.crashes).
        metrics_token: when set, ``GET /metrics`` requires it as a bearer token; never logged.
        job_write_budget: WordPress write attempts one job may make (``write_attempts``
            budget, see :mod:`gateway.jobs.budgets`); an editor may raise it per job.
        site_concurrency: WordPress-calling requests in flight per site across every worker
            and instance; 0 = no limit.
        token_rate: ``(requests, seconds)`` allowed per API token and window, counted in the
            ledger across every worker; None = no limit.
        public_url: the URL users reach the gateway at; ``https://`` makes the review page's
            cookies ``Secure``.
        proxy_hops: proxies in front of the gateway whose ``X-Forwarded-*`` headers are
            trusted (werkzeug's ``ProxyFix``); 0 trusts none.
        media_url_schemes: URL schemes an image may be downloaded from (``https``).
        media_url_allow_hosts: ``host:port`` entries, exactly as written in a URL; when not
            empty only these hosts are downloaded from, and a listed one may be a loopback or
            private address (never link-local or metadata).
        media_url_max_bytes: the largest image downloaded, in bytes.
        media_url_timeout: seconds for one download (connect, redirects and body together),
            enforced on every read.
        media_max_pixels: the most pixels (width x height) an image may declare; more is 422
            ``image-too-large`` before anything is decoded (Pillow's bomb limit follows it).
        notification_url_allow_hosts: like ``media_url_allow_hosts``, for notification URLs.
        notification_timeout: seconds for one notification delivery, all of it (connect,
            request, the receiver's whole answer).
        notification_max_bytes: the most bytes of a receiver's answer read.
        notification_poll_interval: seconds between a worker's looks for pending
            notifications (a decision in the same worker wakes it at once).
        worker_threads: the threads of this ``gateway serve`` worker process (set by
            ``gateway serve`` from ``--threads``); 0 outside a server (no request share).
        tenant_requests: requests one tenant may have in flight in one worker process; None =
            half of ``worker_threads`` (at least 1); 0 = no cap.
        tenant_site_calls: callers of one tenant talking to one of its sites at once in one
            worker process; 0 = no cap.
        unauthenticated_rate: ``(calls, seconds)`` without a valid token allowed per client
            address and worker process before 429; None = no limit.
        approval_max_days: the latest ``expires_at`` an approval may carry, in days from now.
        session_hours: the fixed lifetime of a review-page session, in hours.
        session_idle_minutes: a review-page session unused this long ends.
        testing: relaxes the secret-key requirement.
        openai_api_key: the OpenAI project key the agent worker calls the Agents API with;
            never stored in the ledger, logged, returned, or handed to an agent.
        openai_base_url: the Agents API base URL (None: the SDK's default, api.openai.com).
        openai_webhook_secret: verifies ``POST /v1/webhooks/openai`` (``whsec_...``).
        agent_poll_interval: seconds between the agent worker's passes.
        agent_stale_after: seconds without news after which a session waiting for an action
            is retrieved again (covers lost webhooks).
        agent_max_resumes / agent_max_tool_calls / agent_max_tokens: per-job limits of the
            agent counters; reaching one stops the agent (a person decides).
        agent_deadline_hours: hours after the session was bound after which the agent stops.
        agent_lease_seconds: the job lease the worker takes while it answers a session's
            actions (a crashed worker's lease passes to the next worker after this).
        request_key_hours: how long a client's request key (``Idempotency-Key``) and its
            stored answer are kept (:mod:`gateway.tenancy.request_keys`).
        agent_poll_max_interval: the longest wait between two retrieves of an unfinished
            session; a session whose retrieves show nothing new waits twice as long each time
            from ``agent_stale_after`` up to this (seconds).
        agent_poll_batch: sessions the poll retrieves at most in one worker pass (the most
            overdue first; the rest wait for the next pass).
        agent_retry_after: seconds before the first retry of a session or webhook event that
            could not be handled (OpenAI or the site unreachable); doubles per failure up to
            ``agent_poll_max_interval``.
        agent_environment_hook: what connects a session's environment when it asks for an
            ``environment_connection``: a command (run without a shell) or an ``https://``
            (or ``http://``) URL; empty refuses such requests with a reason
            (:mod:`gateway.agents.environments`, docs/agents.md).
        agent_environment_hook_timeout: seconds one run of the hook may take.
    """

    database_url: str = DEFAULT_DATABASE_URL
    secret_key: str = field(default="", repr=False)
    wp_timeout: float = DEFAULT_WP_TIMEOUT
    inflight_window: float = DEFAULT_WP_TIMEOUT + 10
    max_content_length: int = DEFAULT_MAX_CONTENT_LENGTH
    resume_after: float = 300.0
    resume_budget: int = 3
    attention_after: float = 3600.0
    crash_points: frozenset[str] = frozenset()
    metrics_token: str = field(default="", repr=False)
    job_write_budget: int = DEFAULT_JOB_WRITE_BUDGET
    site_concurrency: int = 0
    token_rate: tuple[int, int] | None = None
    public_url: str = ""
    proxy_hops: int = 0
    media_url_schemes: frozenset[str] = frozenset({"https"})
    media_url_allow_hosts: frozenset[str] = frozenset()
    media_url_max_bytes: int = DEFAULT_MEDIA_URL_MAX_BYTES
    media_url_timeout: float = DEFAULT_MEDIA_URL_TIMEOUT
    media_max_pixels: int = DEFAULT_MEDIA_MAX_PIXELS
    notification_url_allow_hosts: frozenset[str] = frozenset()
    notification_timeout: float = DEFAULT_NOTIFICATION_TIMEOUT
    notification_max_bytes: int = DEFAULT_NOTIFICATION_MAX_BYTES
    notification_poll_interval: float = 2.0
    worker_threads: int = 0
    tenant_requests: int | None = None
    tenant_site_calls: int = DEFAULT_TENANT_SITE_CALLS
    unauthenticated_rate: tuple[int, int] | None = DEFAULT_UNAUTHENTICATED_RATE
    approval_max_days: float = 7.0
    session_hours: float = 8.0
    session_idle_minutes: float = 30.0
    testing: bool = False
    openai_api_key: str = field(default="", repr=False)
    openai_base_url: str | None = None
    openai_webhook_secret: str = field(default="", repr=False)
    agent_poll_interval: float = 15.0
    agent_stale_after: float = 120.0
    agent_max_resumes: int = 50
    agent_max_tool_calls: int = 200
    agent_max_tokens: int = 5_000_000
    agent_deadline_hours: float = 48.0
    agent_lease_seconds: int = 120
    request_key_hours: float = 24.0
    agent_poll_max_interval: float = 1800.0
    agent_poll_batch: int = 50
    agent_retry_after: float = 5.0
    agent_environment_hook: str = field(default="", repr=False)  # a URL may carry a token
    agent_environment_hook_timeout: float = 60.0

    @property
    def tenant_request_cap(self) -> int:
        """Requests one tenant may have in flight in this worker process; 0 = no cap (also
        outside ``gateway serve``, where ``worker_threads`` is 0)."""
        if not self.worker_threads or self.tenant_requests == 0:
            return 0
        if self.tenant_requests is None:
            return max(1, self.worker_threads // 2)
        return self.tenant_requests

    @property
    def tenant_site_cap(self) -> int:
        """Callers of one tenant on one site at once in this worker process; 0 = no cap
        (also outside ``gateway serve``)."""
        return self.tenant_site_calls if self.worker_threads else 0

    def with_overrides(self, **overrides) -> Config:
        """Return a copy with ``overrides`` applied (used by tests and the demo)."""
        return replace(self, **overrides)


def _number(env: dict, name: str, default: float, kind=float):
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {raw!r}") from None
    if value <= 0:
        raise ConfigError(f"{name} must be positive, got {raw!r}")
    return value


def _count(env: dict, name: str, default: int) -> int:
    """A whole number >= 0 (0 switches a limit off)."""
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    if not raw.isdigit():
        raise ConfigError(f"{name} must be a whole number >= 0, got {raw!r}")
    return int(raw)


def _rate(env: dict, name: str, default: str = "") -> tuple[int, int] | None:
    """``N/SECONDS`` (``N`` alone means per second); ``0`` = no limit; unset: ``default``
    (empty = no limit)."""
    raw = env.get(name)
    raw = (default if raw is None else raw).strip()
    if raw in ("", "0"):
        return None
    count, _, seconds = raw.partition("/")
    seconds = seconds or "1"
    if not (count.isdigit() and seconds.isdigit() and int(count) > 0 and int(seconds) > 0):
        raise ConfigError(f"{name} must look like 600/60 (requests per seconds), got {raw!r}")
    return int(count), int(seconds)


def _optional_count(env: dict, name: str) -> int | None:
    """A whole number >= 0, or None when unset (a default computed elsewhere)."""
    raw = (env.get(name) or "").strip()
    return _count(env, name, 0) if raw else None


def _public_url(env: dict, name: str) -> str:
    raw = (env.get(name) or "").strip().rstrip("/")
    if raw and not raw.startswith(("http://", "https://")):
        raise ConfigError(f"{name} must start with http:// or https://, got {raw!r}")
    return raw


def _words(raw: str, lower: bool = False) -> frozenset[str]:
    """A comma-separated list as a set of trimmed entries."""
    items = (p.strip() for p in raw.split(","))
    return frozenset(p.lower() if lower else p for p in items if p)


def load(env: dict | None = None, testing: bool = False) -> Config:
    """Build a :class:`Config` from ``env`` (default: ``os.environ``).

    Raises:
        ConfigError: a value is malformed, or ``GATEWAY_SECRET_KEY`` is missing outside tests.
    """
    env = dict(os.environ if env is None else env)
    wp_timeout = _number(env, "GATEWAY_WP_TIMEOUT", DEFAULT_WP_TIMEOUT)
    secret = env.get("GATEWAY_SECRET_KEY", "")
    if not secret and not testing:
        raise ConfigError(
            "GATEWAY_SECRET_KEY is required: it encrypts the WordPress application passwords "
            "stored in the ledger. Generate one with: python3 -c 'import secrets; "
            "print(secrets.token_urlsafe(32))'"
        )
    crash = env.get("GATEWAY_CRASH_POINTS", "")
    return Config(
        database_url=env.get("GATEWAY_DATABASE_URL") or DEFAULT_DATABASE_URL,
        secret_key=secret or "insecure-test-key",
        wp_timeout=wp_timeout,
        inflight_window=_number(env, "GATEWAY_INFLIGHT_WINDOW", wp_timeout + 10),
        max_content_length=int(
            _number(env, "GATEWAY_MAX_CONTENT_LENGTH", DEFAULT_MAX_CONTENT_LENGTH, int)
        ),
        crash_points=_words(crash),
        media_url_schemes=_words(env.get("GATEWAY_MEDIA_URL_SCHEMES", "https"), lower=True),
        media_url_allow_hosts=_words(env.get("GATEWAY_MEDIA_URL_ALLOW_HOSTS", "")),
        media_url_max_bytes=int(
            _number(env, "GATEWAY_MEDIA_URL_MAX_BYTES", DEFAULT_MEDIA_URL_MAX_BYTES, int)
        ),
        media_url_timeout=_number(env, "GATEWAY_MEDIA_URL_TIMEOUT", DEFAULT_MEDIA_URL_TIMEOUT),
        media_max_pixels=int(
            _number(env, "GATEWAY_MEDIA_MAX_PIXELS", DEFAULT_MEDIA_MAX_PIXELS, int)
        ),
        notification_url_allow_hosts=_words(env.get("GATEWAY_NOTIFICATION_URL_ALLOW_HOSTS", "")),
        notification_timeout=_number(
            env, "GATEWAY_NOTIFICATION_TIMEOUT", DEFAULT_NOTIFICATION_TIMEOUT
        ),
        notification_max_bytes=int(
            _number(env, "GATEWAY_NOTIFICATION_MAX_BYTES", DEFAULT_NOTIFICATION_MAX_BYTES, int)
        ),
        notification_poll_interval=_number(env, "GATEWAY_NOTIFICATION_POLL_INTERVAL", 2.0),
        worker_threads=_count(env, "GATEWAY_WORKER_THREADS", 0),
        tenant_requests=_optional_count(env, "GATEWAY_TENANT_REQUESTS"),
        tenant_site_calls=_count(env, "GATEWAY_TENANT_SITE_CALLS", DEFAULT_TENANT_SITE_CALLS),
        unauthenticated_rate=_rate(env, "GATEWAY_UNAUTHENTICATED_RATE", "30/60"),
        approval_max_days=_number(env, "GATEWAY_APPROVAL_MAX_DAYS", 7.0),
        session_hours=_number(env, "GATEWAY_SESSION_HOURS", 8.0),
        session_idle_minutes=_number(env, "GATEWAY_SESSION_IDLE_MINUTES", 30.0),
        resume_after=_number(env, "GATEWAY_RESUME_AFTER", 300.0),
        resume_budget=int(_number(env, "GATEWAY_RESUME_BUDGET", 3, int)),
        attention_after=_number(env, "GATEWAY_ATTENTION_AFTER", 3600.0),
        metrics_token=env.get("GATEWAY_METRICS_TOKEN", ""),
        job_write_budget=_count(env, "GATEWAY_JOB_WRITE_BUDGET", DEFAULT_JOB_WRITE_BUDGET),
        site_concurrency=_count(env, "GATEWAY_SITE_CONCURRENCY", 0),
        token_rate=_rate(env, "GATEWAY_TOKEN_RATE"),
        public_url=_public_url(env, "GATEWAY_PUBLIC_URL"),
        proxy_hops=_count(env, "GATEWAY_PROXY_HOPS", 0),
        testing=testing,
        openai_api_key=env.get("GATEWAY_OPENAI_API_KEY", ""),
        openai_base_url=env.get("GATEWAY_OPENAI_BASE_URL") or None,
        openai_webhook_secret=env.get("GATEWAY_OPENAI_WEBHOOK_SECRET", ""),
        agent_poll_interval=_number(env, "GATEWAY_AGENT_POLL_INTERVAL", 15.0),
        agent_stale_after=_number(env, "GATEWAY_AGENT_STALE_AFTER", 120.0),
        agent_max_resumes=int(_number(env, "GATEWAY_AGENT_MAX_RESUMES", 50, int)),
        agent_max_tool_calls=int(_number(env, "GATEWAY_AGENT_MAX_TOOL_CALLS", 200, int)),
        agent_max_tokens=int(_number(env, "GATEWAY_AGENT_MAX_TOKENS", 5_000_000, int)),
        agent_deadline_hours=_number(env, "GATEWAY_AGENT_DEADLINE_HOURS", 48.0),
        agent_lease_seconds=int(_number(env, "GATEWAY_AGENT_LEASE_SECONDS", 120, int)),
        request_key_hours=_number(env, "GATEWAY_REQUEST_KEY_HOURS", 24.0),
        agent_poll_max_interval=_number(env, "GATEWAY_AGENT_POLL_MAX_INTERVAL", 1800.0),
        agent_poll_batch=int(_number(env, "GATEWAY_AGENT_POLL_BATCH", 50, int)),
        agent_retry_after=_number(env, "GATEWAY_AGENT_RETRY_AFTER", 5.0),
        agent_environment_hook=(env.get("GATEWAY_AGENT_ENVIRONMENT_HOOK") or "").strip(),
        agent_environment_hook_timeout=_number(env, "GATEWAY_AGENT_ENVIRONMENT_HOOK_TIMEOUT", 60.0),
    )
