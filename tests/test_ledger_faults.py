"""Ledger failures answer 503 ``ledger-unavailable`` with ``Retry-After`` and make no
WordPress call; once the fault is gone the same request goes through (one post).

Each class of failure is produced for real in the ledger the suite runs on: SQLite errors on
the pooled connection the next request uses, PostgreSQL errors by the server itself (a
database turned read-only, a lock held by another session, a trigger raising SQLSTATE 40001,
a port where nothing listens). The other backend's classes are skipped: CI runs this file on
both."""

from __future__ import annotations

import contextlib
import os
import sqlite3

import pytest
from servers import Server
from support import draft_body
from support import new_job_id
from support import op_key
from support import problem_slug
from support import sqlite_path

from gateway.ledger import db
from gateway.ledger.db import database
from gateway.ledger.models import Job

pytestmark = pytest.mark.wordpress
POSTS = r"^/wp-json/wp/v2/posts/?$"


def _prime(*statements: str):
    """Leave exactly one idle pooled connection, with ``statements`` run on it: the next
    request of this thread (Flask's test client runs in it) gets that connection."""
    database.obj.close_idle()
    database.connect()
    for sql in statements:
        database.execute_sql(sql)
    database.close()


@contextlib.contextmanager
def sqlite_locked(url: str):
    _prime("PRAGMA busy_timeout = 100")
    holder = sqlite3.connect(sqlite_path(url), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        yield
    finally:
        holder.execute("ROLLBACK")
        holder.close()


@contextlib.contextmanager
def sqlite_read_only(url: str):
    # root ignores file modes, so the connection itself is made read-only: SQLite then
    # answers SQLITE_READONLY ("attempt to write a readonly database") as for a 0444 file.
    _prime("PRAGMA query_only = 1")
    yield


@contextlib.contextmanager
def sqlite_disk_io(url: str):
    _prime("SELECT count(*) FROM operation")  # opens the write-ahead log
    wal = str(sqlite_path(url)) + "-wal"
    fds = [int(fd) for fd in os.listdir("/proc/self/fd") if _target(f"/proc/self/fd/{fd}") == wal]
    assert fds, "the pooled connection has no write-ahead log open"
    broken = os.open("/dev/null", os.O_RDONLY)
    for fd in fds:  # every write to the log now fails: SQLITE_IOERR ("disk I/O error")
        os.dup2(broken, fd)
    os.close(broken)
    yield


def _target(link: str) -> str | None:
    try:
        return os.readlink(link)
    except OSError:
        return None


@contextlib.contextmanager
def _pg_admin(url: str):
    """A cursor on its own autocommit session, writable even in a read-only database."""
    import psycopg2

    with contextlib.closing(psycopg2.connect(url)) as conn:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SET default_transaction_read_only = off")
            yield cur


def _pg_name(url: str) -> str:
    return url.rsplit("/", 1)[1].split("?", 1)[0]


@contextlib.contextmanager
def _pg_setting(url: str, name: str, value: str):
    with _pg_admin(url) as cur:
        cur.execute(f'ALTER DATABASE "{_pg_name(url)}" SET {name} = {value}')
    database.obj.close_idle()  # new sessions get the setting
    try:
        yield
    finally:
        with _pg_admin(url) as cur:
            cur.execute(f'ALTER DATABASE "{_pg_name(url)}" RESET {name}')
        database.obj.close_idle()


@contextlib.contextmanager
def pg_refused(url: str):
    db.bind("postgresql://gateway@127.0.0.1:9/nowhere")  # nothing listens on port 9
    try:
        yield
    finally:
        db.bind(url)


@contextlib.contextmanager
def pg_read_only(url: str):
    with _pg_setting(url, "default_transaction_read_only", "on"):
        yield


@contextlib.contextmanager
def pg_serialization_failure(url: str):
    with _pg_admin(url) as cur:
        cur.execute(
            "CREATE FUNCTION gw_conflict() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION "
            "'could not serialize access due to concurrent update' USING ERRCODE = "
            "'serialization_failure'; END $$ LANGUAGE plpgsql; "
            "CREATE TRIGGER gw_conflict BEFORE INSERT ON operation "
            "FOR EACH ROW EXECUTE FUNCTION gw_conflict()"
        )
    try:
        yield
    finally:
        with _pg_admin(url) as cur:
            cur.execute("DROP TRIGGER gw_conflict ON operation; DROP FUNCTION gw_conflict()")


@contextlib.contextmanager
def _pg_lock_held(url: str, setting: str):
    import psycopg2

    with _pg_setting(url, setting, "'200ms'"):
        locker = psycopg2.connect(url)
        try:
            locker.cursor().execute("LOCK TABLE operation IN ACCESS EXCLUSIVE MODE")
            yield
        finally:
            locker.rollback()
            locker.close()


def pg_lock_timeout(url: str):
    return _pg_lock_held(url, "lock_timeout")


def pg_statement_timeout(url: str):
    return _pg_lock_held(url, "statement_timeout")


FAULTS = {
    "sqlite-locked-past-busy-timeout": ("sqlite", sqlite_locked),
    "sqlite-read-only": ("sqlite", sqlite_read_only),
    "sqlite-disk-io-error": ("sqlite", sqlite_disk_io),
    "postgresql-refused-connection": ("postgresql", pg_refused),
    "postgresql-read-only": ("postgresql", pg_read_only),
    "postgresql-serialization-failure": ("postgresql", pg_serialization_failure),
    "postgresql-lock-timeout": ("postgresql", pg_lock_timeout),
    "postgresql-statement-timeout": ("postgresql", pg_statement_timeout),
}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=getattr(pytest.mark, f"{backend}_pass"))
        for name, (backend, _fault) in FAULTS.items()
    ],
)
def test_ledger_failure_is_503_without_a_wordpress_call(gwp, proxy, ledger_url, name):
    backend, fault = FAULTS[name]
    assert ledger_url.startswith(backend)
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    body = draft_body(title=f"Ledger {job_id}")
    with fault(ledger_url):
        answer = gwp.put_draft(job_id, body)
        assert answer.status_code == 503, answer.get_json()
        assert problem_slug(answer) == "ledger-unavailable"
        assert int(answer.headers["Retry-After"]) >= 1
        assert answer.get_json()["retryable"] is True
    assert proxy.count(method="POST", path=POSTS) == 0
    again = gwp.put_draft(job_id, body)
    assert again.status_code == 201, again.get_json()
    assert gwp.count_objects(op_key(job_id, "draft")) == 1


def test_a_constraint_violation_is_not_ledger_unavailable():
    """Only "try again later" errors are 503: a bug stays a 500."""
    from peewee import IntegrityError
    from peewee import OperationalError

    assert not db.is_unavailable(IntegrityError(Exception("UNIQUE constraint failed")))
    assert db.is_unavailable(OperationalError(sqlite3.OperationalError("database is locked")))


def _wrapped(driver_error: Exception):
    """peewee's InterfaceError for ``driver_error``, raised as peewee raises it (while the
    driver's error is handled: tests/test_ledger_death.py meets the real one)."""
    from peewee import InterfaceError

    try:
        try:
            raise driver_error
        except Exception as error:
            raise InterfaceError(error, *error.args) from None
    except InterfaceError as wrapped:
        return wrapped


def test_a_lost_postgresql_connection_is_ledger_unavailable_other_interface_errors_are_bugs():
    """psycopg2's InterfaceError ("connection already closed": the ROLLBACK after a COMMIT
    whose session died) is "try again later"; sqlite3's (a value it cannot bind) and peewee's
    own (a query without a database) stay 500s."""
    import psycopg2
    from peewee import InterfaceError

    assert db.is_unavailable(_wrapped(psycopg2.InterfaceError("connection already closed")))
    assert not db.is_unavailable(_wrapped(sqlite3.InterfaceError("Error binding parameter 1")))
    assert not db.is_unavailable(InterfaceError("Query must be bound to a database"))


@pytest.mark.postgresql_pass
def test_read_only_postgresql_through_gateway_serve(wp_site, ledger_url, tmp_path, proxy):
    """The issue's row through a real ``gateway serve``: the ledger's database turned
    read-only (``default_transaction_read_only``) -> 503 ``ledger-unavailable`` with
    ``Retry-After`` and no WordPress write; once it is writable again the same request
    creates the post (the read-only sessions were not kept in the pool)."""
    assert ledger_url.startswith("postgresql")
    server = Server(wp_site, ledger_url, tmp_path, site_url=proxy.url)  # init-db, site, token
    job_id = new_job_id()
    db.bind(ledger_url)
    with database.connection_context():
        Job.create(tenant="acme", job_id=job_id, site="blog", task_version=1)
    database.obj.close_all()
    body = draft_body(title=f"Read-only {job_id}")
    with _pg_admin(ledger_url) as cur:
        cur.execute(
            f'ALTER DATABASE "{_pg_name(ledger_url)}" SET default_transaction_read_only = on'
        )
    server.start()
    try:
        answer = server.call("PUT", f"/v1/jobs/{job_id}/draft", json=body)
        assert answer.status_code == 503, answer.text
        assert problem_slug(answer) == "ledger-unavailable"
        assert int(answer.headers["Retry-After"]) >= 1
        assert proxy.count(method="POST", path=POSTS) == 0
        with _pg_admin(ledger_url) as cur:
            cur.execute(
                f'ALTER DATABASE "{_pg_name(ledger_url)}" RESET default_transaction_read_only'
            )
        again = server.retry("PUT", f"/v1/jobs/{job_id}/draft", json=body)
        assert again.status_code == 201, again.text
    finally:
        server.kill()
    assert proxy.count(method="POST", path=POSTS) == 1
