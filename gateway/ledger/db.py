"""The ledger database: one peewee ``DatabaseProxy`` bound once from ``GATEWAY_DATABASE_URL``.

SQLite (the embedded default) runs in WAL mode with a busy timeout so that several server
workers on one host can share the file; PostgreSQL serves several gateway processes or hosts.
Database differences live here and nowhere else. No connection is opened at bind time, so the
server's main process can bind before it forks its workers.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import psycopg2
from peewee import DatabaseError
from peewee import DatabaseProxy
from peewee import InterfaceError
from peewee import OperationalError
from peewee import PostgresqlDatabase
from peewee import SqliteDatabase
from playhouse.db_url import connect

database = DatabaseProxy()

SQLITE_PRAGMAS = {
    "journal_mode": "wal",
    "busy_timeout": 15000,  # ms: workers queue on the write lock instead of failing
    "synchronous": "normal",
    "foreign_keys": 1,
}


POOL = {"max_connections": 16, "stale_timeout": 300, "timeout": 30}

# Statements that change rows: outside a transaction each one commits by itself (autocommit).
_WRITES = frozenset({"INSERT", "UPDATE", "DELETE", "REPLACE"})
_commit_observer: Callable[[str], None] | None = None

# What the ledger raises when a statement, a COMMIT or a ROLLBACK fails: peewee's
# ``DatabaseError`` family, and its ``InterfaceError``, which is not of that family but is what
# a statement on a connection the driver knows to be lost raises (psycopg2's "connection
# already closed", e.g. the ROLLBACK after a COMMIT whose server session died). Every
# ``except`` that takes a ledger failure takes both; :func:`is_unavailable` tells "try again
# later" from a bug.
LEDGER_ERRORS = (DatabaseError, InterfaceError)


def bind(url: str, connections: int | None = None, **driver_options):
    """Bind :data:`database` to ``url`` (``sqlite:///path`` or ``postgresql://...``).

    Connections are pooled (peewee's ``playhouse.pool``): a request's ``close()`` hands its
    connection back for the next request of the same process instead of reconnecting; at
    most ``connections`` at once (default ``POOL["max_connections"]``, 16; ``gateway serve``
    gives each worker one per thread), a caller past it waits up to 30 s for one.
    ``driver_options`` go to the driver's ``connect`` for every new connection
    (``sqlite3.connect``, ``psycopg2.connect``): e.g. a connection ``factory`` or a
    ``cursor_factory`` that counts statements (tests/test_statements.py). Returns the
    concrete peewee database. Opens no connection.
    """
    scheme, rest = url.split("://", 1)
    pooled = scheme if scheme.endswith("+pool") else scheme + "+pool"
    # A pooled SQLite connection is handed from thread to thread, one user at a time.
    extra = (
        {"pragmas": SQLITE_PRAGMAS, "check_same_thread": False}
        if scheme.startswith("sqlite")
        else {}
    )
    pool = {**POOL, "max_connections": connections or POOL["max_connections"]}
    db = connect(f"{pooled}://{rest}", autoconnect=True, **pool, **extra, **driver_options)
    if database.obj is not None:
        database.obj.close_idle()  # rebinding (tests, the demo): drop the old pool's idle ones
    if _commit_observer is not None:
        _observe(db, _commit_observer)
    database.initialize(db)
    return db


def observe_commits(observer: Callable[[str], None] | None) -> None:
    """Install ``observer`` on the bound database and on every later :func:`bind` (None
    removes it at the next bind). Fault tests count the ledger's commits with it
    (:mod:`gateway.operations.crashes`); production never installs one, so its statements run
    through peewee's own ``execute_sql`` and ``commit`` unwrapped.

    ``observer(event)`` is called with ``"statement"`` before every statement and every
    ``COMMIT`` (it may raise to stop both, as a dead process would: the open transaction is
    then rolled back), and with ``"commit"`` after each durable commit: a transaction's
    ``COMMIT`` (peewee's ``Database.commit``, which ``atomic()`` calls when the outermost
    block ends; a savepoint's ``RELEASE`` is not durable and does not count) and every
    ``INSERT``/``UPDATE``/``DELETE``/``REPLACE`` run outside a transaction (autocommit: the
    driver commits it by itself), and with ``"rollback"`` before a transaction's
    ``ROLLBACK`` (peewee's ``Database.rollback``: an ``atomic()`` block left by an error, or a
    ``COMMIT`` that failed; a savepoint's ``ROLLBACK TO`` is a ``"statement"``): a test may
    end the session there (tests/test_ledger_death.py).
    """
    global _commit_observer
    _commit_observer = observer
    if observer is not None and database.obj is not None:
        _observe(database.obj, observer)


def _observe(db, observer: Callable[[str], None]) -> None:
    """Wrap this peewee database's ``execute_sql``, ``commit`` and ``rollback`` (instance
    attributes over its class's methods: peewee calls them through ``self``, and ``hot_sql``
    calls ``execute_sql`` on the concrete database)."""
    cls = type(db)

    def execute_sql(sql, params=None, *args, **kwargs):
        observer("statement")
        cursor = cls.execute_sql(db, sql, params, *args, **kwargs)
        words = sql.lstrip().split(None, 1)
        if words and words[0].upper() in _WRITES and not db.in_transaction():
            observer("commit")
        return cursor

    def commit():
        observer("statement")
        done = cls.commit(db)
        observer("commit")
        return done

    def rollback():
        observer("rollback")
        return cls.rollback(db)

    db.execute_sql = execute_sql
    db.commit = commit
    db.rollback = rollback


def close_all() -> None:
    """Close every pooled connection of this process (before a fork, or at exit)."""
    database.obj.close_all()


def is_postgres() -> bool:
    """True when the ledger is PostgreSQL."""
    return isinstance(database.obj, PostgresqlDatabase)


def shared_lock(query):
    """``query`` (a peewee select) taking a shared lock on the rows it reads until the
    transaction ends, so that a statement deciding on them cannot straddle a concurrent
    UPDATE of them: ``FOR SHARE`` on PostgreSQL (a row updated meanwhile is read again in its
    committed version and the condition checked on that); SQLite serialises every writer, so
    the query as it is there."""
    return query.for_update("FOR SHARE") if is_postgres() else query


def atomic():
    """A write transaction. SQLite takes the write lock up front (``BEGIN IMMEDIATE``) so
    that two workers never both read-then-upgrade and deadlock."""
    if isinstance(database.obj, SqliteDatabase):
        return database.obj.atomic(lock_type="IMMEDIATE")
    return database.atomic()


def utcnow() -> dt.datetime:
    """The gateway's clock: naive UTC, microseconds kept."""
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def db_now() -> dt.datetime:
    """The database's clock (naive UTC), used to judge lease expiry across hosts.

    PostgreSQL's ``now()`` is the transaction's start, so ``clock_timestamp()`` is used.
    SQLite lives on this host, whose clock is the database's clock.
    """
    if is_postgres():
        (value,) = database.execute_sql("SELECT clock_timestamp() AT TIME ZONE 'UTC'").fetchone()
        return value
    return utcnow()


def rfc3339(value: dt.datetime | None) -> str | None:
    """Format a naive-UTC timestamp as RFC 3339 with an explicit ``+00:00`` offset."""
    if value is None:
        return None
    if isinstance(value, str):  # SQLite hands back text for some expressions
        value = dt.datetime.fromisoformat(value)
    return value.replace(tzinfo=dt.UTC).isoformat()


# SQLSTATE classes and codes of PostgreSQL that mean "try again later", not "bad request":
# connection exceptions (08), insufficient resources (53), operator intervention (57:
# statement timeout, shutdown, cannot connect now), read-only transaction (25006),
# serialization failure and deadlock (40001, 40P01), lock not available (55P03).
PG_UNAVAILABLE_CLASSES = ("08", "53", "57")
PG_UNAVAILABLE_CODES = frozenset({"25006", "40001", "40P01", "55P03"})


def is_unavailable(error: Exception) -> bool:
    """True when ``error`` (one of :data:`LEDGER_ERRORS`) says the ledger cannot serve right
    now and the same request may succeed later: on PostgreSQL a refused or lost connection
    (a server session that died answers its next statement with ``OperationalError``, and
    every later one, the ``ROLLBACK`` after a failed ``COMMIT`` included, with psycopg2's
    ``InterfaceError`` "connection already closed"), a read-only transaction, a
    serialization failure or deadlock, a lock or statement timeout; on SQLite a lock held past
    the busy timeout, a read-only file, a disk I/O error (sqlite3 reports all of those as
    ``OperationalError``). Constraint violations and programming errors are not: they are
    bugs or bad input (peewee's own ``InterfaceError``, a query without a database; sqlite3's,
    a value it cannot bind)."""
    code = None
    for original in (error, error.__cause__, error.__context__, *error.args[:1]):
        code = code or getattr(original, "pgcode", None)  # the driver's error, wrapped
    if code:
        return code in PG_UNAVAILABLE_CODES or code[:2] in PG_UNAVAILABLE_CLASSES
    if isinstance(error, InterfaceError):  # the driver's own error is the one peewee wrapped
        return _connection_lost(error.__context__)
    return isinstance(error, OperationalError)


def _connection_lost(driver_error) -> bool:
    """Whether the driver's error that peewee wrapped in its ``InterfaceError`` is
    psycopg2's: psycopg2 raises ``InterfaceError`` only for a connection or cursor it has
    closed (the server ended the session, or the network lost it)."""
    return isinstance(driver_error, psycopg2.InterfaceError)


def discard_connection() -> None:
    """Close this thread's ledger connection for good instead of handing it back to the pool,
    after :func:`is_unavailable` said so: a session that met a read-only database, a broken
    file descriptor or a dead server must not serve the next request once the ledger is
    back (a PostgreSQL session keeps ``default_transaction_read_only`` from its start)."""
    if database.obj is None or database.is_closed():
        return
    try:
        database.obj.manual_close()
    except Exception:  # noqa: BLE001 - a broken connection may fail to close; it is dropped
        pass
