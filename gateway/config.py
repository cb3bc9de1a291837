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

DEFAULT_DATABASE_URL = "sqlite:///gateway.db"
DEFAULT_WP_TIMEOUT = 30.0
DEFAULT_MAX_CONTENT_LENGTH = 25 * 1024 * 1024


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
        crash_points: named crash points enabled for fault tests (empty in production).
        testing: relaxes the secret-key requirement.
    """

    database_url: str = DEFAULT_DATABASE_URL
    secret_key: str = field(default="", repr=False)
    wp_timeout: float = DEFAULT_WP_TIMEOUT
    inflight_window: float = DEFAULT_WP_TIMEOUT + 10
    max_content_length: int = DEFAULT_MAX_CONTENT_LENGTH
    crash_points: frozenset[str] = frozenset()
    testing: bool = False

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
        crash_points=frozenset(p.strip() for p in crash.split(",") if p.strip()),
        testing=testing,
    )
