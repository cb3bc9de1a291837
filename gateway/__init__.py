"""Publishing Gateway: the only holder of WordPress credentials between automations (n8n,
agents) and WordPress. Every side effect goes through an idempotency ledger, is reconciled
against WordPress before any retry, and is verified by read-back."""

from __future__ import annotations

from gateway.core.version import VERSION as __version__  # noqa: F401 - the public name


def create_app(test_config: dict | None = None, check_ledger: bool = True):
    """The app factory: :func:`gateway.app.create_app` (imported on first call, so that
    importing a part of the package, e.g. ``gateway.wordpress``, loads no Flask or peewee)."""
    from gateway.app import create_app as factory

    return factory(test_config, check_ledger)
