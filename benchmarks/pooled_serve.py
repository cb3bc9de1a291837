"""Benchmark-only experiment, not a gateway feature: ``gateway`` CLI with the ledger bound
through peewee's connection pool (``playhouse.pool``), so that a gunicorn worker keeps its
ledger connection between requests instead of opening and closing one per request.

    python benchmarks/pooled_serve.py serve --port 8000 --workers 4

Used by ``ledger_connections.py`` to measure what the proposal in benchmarks/README.md
("keep the ledger connection per worker") would save, without changing gateway code.
"""

from __future__ import annotations

import os

from playhouse.db_url import connect

from gateway import db


def pooled_bind(url: str):
    if url.startswith("sqlite"):
        database = connect(
            url.replace("sqlite://", "sqlite+pool://", 1),
            pragmas=db.SQLITE_PRAGMAS,
            autoconnect=True,
            max_connections=8,
            stale_timeout=300,
        )
    else:
        database = connect(
            url.replace("postgresql://", "postgresql+pool://", 1),
            autoconnect=True,
            max_connections=8,
            stale_timeout=300,
        )
    db.database.initialize(database)
    return database


def _close_idle_before_fork() -> None:
    # never hand an open SQLite/PostgreSQL connection to a forked gunicorn worker
    obj = db.database.obj
    if obj is not None and hasattr(obj, "close_idle"):
        obj.close_idle()


db.bind = pooled_bind
os.register_at_fork(before=_close_idle_before_fork)

if __name__ == "__main__":
    from gateway.cli import main

    main()
