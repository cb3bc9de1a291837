"""The app factory (Flask): configuration, the ledger binding and the blueprints.

Kept out of the package ``__init__`` so that ``import gateway.wordpress`` (the worker, the
XML-RPC transport) loads neither Flask nor peewee.
"""

from __future__ import annotations

import logging

from flask import Flask

from gateway import config as config_module
from gateway import db
from gateway import jsonio
from gateway import migrations


def create_app(test_config: dict | None = None, check_ledger: bool = True) -> Flask:
    """The app factory.

    Args:
        test_config: overrides of :class:`gateway.config.Config` fields (tests, the demo);
            when given, a missing ``GATEWAY_SECRET_KEY`` is tolerated and the ledger is
            created or migrated (tests start from an empty database).
        check_ledger: refuse a missing or outdated ledger (the CLI passes False and checks
            per command, so that ``init-db`` can create it).

    Raises:
        ConfigError: configuration is missing or malformed (outside tests).
        LedgerError: no ledger, or one that ``gateway init-db`` has to migrate first.
    """
    from gateway import api

    cfg = config_module.load(testing=test_config is not None)
    if test_config:
        cfg = cfg.with_overrides(**test_config)
    app = Flask(__name__)
    app.json = jsonio.JSONProvider(app)
    app.config["GATEWAY"] = cfg
    app.config["MAX_CONTENT_LENGTH"] = cfg.max_content_length
    app.config["SECRET_KEY"] = cfg.secret_key
    app.json.ensure_ascii = False
    app.json.sort_keys = False
    db.bind(cfg.database_url)
    if cfg.testing:
        migrations.migrate()
    elif check_ledger:
        migrations.check(cfg.database_url)
    api.init_app(app)
    logging.getLogger("gateway").setLevel(logging.INFO)
    return app
