"""The app factory (Flask): configuration, the ledger binding and the blueprints.

Kept out of the package ``__init__`` so that ``import gateway.wordpress`` (the worker, the
XML-RPC transport) loads neither Flask nor peewee.
"""

from __future__ import annotations

import logging

from flask import Flask

from gateway import composition  # noqa: F401 - fills the registries (actions, deciders)
from gateway.api import jsonio
from gateway.core import config as config_module
from gateway.ledger import db
from gateway.ledger import migrations
from gateway.operations import crashes


def create_app(
    test_config: dict | None = None, check_ledger: bool = True, needs_secret_key: bool = True
) -> Flask:
    """The app factory.

    Args:
        test_config: overrides of :class:`gateway.core.config.Config` fields (tests, the demo);
            when given, a missing ``GATEWAY_SECRET_KEY`` is tolerated and the ledger is
            created or migrated (tests start from an empty database).
        check_ledger: refuse a missing or outdated ledger (the CLI passes False and checks
            per command, so that ``init-db`` can create it).
        needs_secret_key: False for a command that encrypts and decrypts nothing (the CLI's
            ``sites list``, ``sites remove``, ``tokens``): ``GATEWAY_SECRET_KEY`` may then be
            unset.

    Raises:
        ConfigError: configuration is missing or malformed (outside tests).
        LedgerError: no ledger, or one that ``gateway init-db`` has to migrate first.
    """
    from gateway.api import routes

    cfg = config_module.load(testing=test_config is not None, needs_secret_key=needs_secret_key)
    if test_config:
        cfg = cfg.with_overrides(**test_config)
    app = Flask(__name__)
    app.json = jsonio.JSONProvider(app)
    app.config["GATEWAY"] = cfg
    app.config["MAX_CONTENT_LENGTH"] = cfg.max_content_length
    app.config["SECRET_KEY"] = cfg.secret_key
    app.json.ensure_ascii = False
    app.json.sort_keys = False
    _behind_proxies(app, cfg)
    crashes.install(app, cfg)  # fault tests only: first, so a request's count starts first
    # a request holds its ledger connection to its end: one per thread, never a wait for one
    db.bind(cfg.database_url, connections=max(db.POOL["max_connections"], cfg.worker_threads))
    if cfg.testing:
        migrations.migrate()
    elif check_ledger:
        migrations.check(cfg.database_url)
    routes.init_app(app)
    logging.getLogger("gateway").setLevel(logging.INFO)
    return app


def _behind_proxies(app: Flask, cfg: config_module.Config) -> None:
    """TLS terminated in front of the gateway: ``GATEWAY_PUBLIC_URL=https://...`` marks the
    review page's session cookie ``Secure``; ``GATEWAY_PROXY_HOPS=N`` trusts N hops of
    ``X-Forwarded-For/-Proto/-Host/-Port/-Prefix`` (werkzeug's ``ProxyFix``), so client
    addresses in the logs and the request scheme are the real ones. With 0 hops (default) the
    headers are ignored: anyone could send them."""
    app.config["SESSION_COOKIE_SECURE"] = cfg.public_url.startswith("https://")
    if cfg.proxy_hops:
        from werkzeug.middleware.proxy_fix import ProxyFix

        hops = cfg.proxy_hops
        app.wsgi_app = ProxyFix(
            app.wsgi_app, x_for=hops, x_proto=hops, x_host=hops, x_port=hops, x_prefix=hops
        )
