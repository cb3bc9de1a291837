"""The ledger's PostgreSQL session dying at any point of a request answers honestly (issue 51
item 4): 503 ``ledger-unavailable``, retryable, with ``Retry-After`` and ``X-Request-Id``,
never a 500 and never an answer without its request id; a death in the request's finalize or
teardown, after the answer was decided, leaves that answer as it was. The same request sent
again then succeeds (the dead connection is not handed to it) and the test WordPress holds
exactly one post for it.

The session is ended for real: a second connection runs ``pg_terminate_backend`` on the
request's backend (its pid from psycopg2's ``connection.info.backend_pid``) from the ledger's
observer (:func:`gateway.ledger.db.observe_commits`) just before the chosen statement,
``COMMIT`` or ``ROLLBACK`` runs, in process (Flask's test client). A point names what is
about to run and the gateway function it runs for; every armed point must be reached, so a
renamed function fails the test instead of leaving a point untested. The app holds a site
concurrency slot (``GATEWAY_SITE_CONCURRENCY``), so that the teardown writes too.

PostgreSQL only (the SQLite pass deselects it): a SQLite file has no session to lose; its
failures are tests/test_ledger_faults.py's.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import uuid

import psycopg2
import pytest
from support import SECRET_KEY
from support import draft_body
from support import new_job_id
from support import op_key
from support import problem_slug
from test_review_page import _sign_in

import gateway
from gateway.ledger import db
from gateway.ledger.db import database

pytestmark = pytest.mark.postgresql_pass


class Terminator:
    """The ledger observer that ends the request's server session at armed points.

    A point is ``(moment, function)``: ``moment`` is what the ledger is about to run
    (``"statement"``, ``"COMMIT"`` or ``"ROLLBACK"``), ``function`` the name of a gateway
    function on the stack (the step that runs it). Points are reached in order; each ends the
    session of the connection about to run it, once."""

    def __init__(self):
        # on the suite's server database (tests/conftest.py's ledger_url makes each test's
        # from it): a database cannot refuse its own sessions
        self.admin = psycopg2.connect(os.environ["GATEWAY_TEST_DATABASE_URL"])
        self.admin.autocommit = True
        self.points: list[tuple[str, str]] = []

    def arm(self, *points: tuple[str, str]) -> None:
        self.points = list(points)

    def __call__(self, event: str) -> None:
        if not self.points or event == "commit":  # "commit": after the fact
            return
        moment, function = self.points[0]
        wrapper = inspect.currentframe().f_back  # db._observe's execute_sql/commit/rollback
        now = "ROLLBACK" if event == "rollback" else "statement"
        if wrapper.f_code.co_name == "commit":
            now = "COMMIT"
        if now == moment and _on_stack(wrapper, function):
            self.points.pop(0)
            self.end_session(database.connection().info.backend_pid)

    def end_session(self, pid: int) -> None:
        with self.admin.cursor() as cur:  # waits (up to 5 s) until the backend has exited
            cur.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
            assert cur.fetchone() == (True,)

    def close(self) -> None:
        self.points = []
        self.admin.close()


def _on_stack(frame, function: str) -> bool:
    while frame is not None:
        if frame.f_code.co_name == function and "/gateway/" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


@pytest.fixture
def app(ledger_url):
    """The suite's app (tests/conftest.py) with one site concurrency slot held per request
    that writes to WordPress, released in the request's teardown."""
    application = gateway.create_app(
        {
            "database_url": ledger_url,
            "secret_key": SECRET_KEY,
            "wp_timeout": 20.0,
            "inflight_window": 2.0,
            "site_concurrency": 8,  # a slot whose release died stays held
        }
    )
    yield application
    if not database.is_closed():
        database.close()


@pytest.fixture
def terminator(app, ledger_url):
    assert ledger_url.startswith("postgresql"), "the PostgreSQL pass runs this module"
    ending = Terminator()
    db.observe_commits(ending)
    try:
        yield ending
    finally:
        ending.close()
        db.observe_commits(None)
        database.obj.close_idle()


@contextlib.contextmanager
def refusing_connections(terminator: Terminator, url: str):
    """The ledger's database refuses new sessions and every session it had is gone (the
    app's idle pooled connection too): the next request dies at connect."""
    name = url.rsplit("/", 1)[1]
    with terminator.admin.cursor() as cur:
        cur.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS false')
        cur.execute(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        )
    try:
        yield
    finally:
        with terminator.admin.cursor() as cur:
            cur.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS true')


REFUSED = "refused"
# Each case: what kills each request sent before the one that succeeds (the points armed for
# it, or REFUSED: no session at all), and the status those requests answer. A COMMIT or a
# statement of a transaction that dies is followed by peewee's ROLLBACK on the lost connection,
# which raises psycopg2's InterfaceError (issue 51). "rollback": the first request leaves its
# operation PREPARED, so the second one's INSERT of it meets the key and rolls back.
CASES = {
    "connect": ([REFUSED], 503),
    "first-statement": ([[("statement", "authenticate")]], 503),
    "statement-in-a-transaction": ([[("statement", "claim")]], 503),
    "commit-before-wordpress": ([[("COMMIT", "_claim_send")]], 503),
    "rollback": ([[("COMMIT", "_claim_send")], [("ROLLBACK", "claim")]], 503),
    "statement-after-wordpress": ([[("statement", "confirm")]], 503),
    "finalize-after-a-death": ([[("COMMIT", "_claim_send"), ("statement", "note")]], 503),
    "finalize": ([[("statement", "note")]], 201),
    "teardown": ([[("statement", "release_held")]], 201),
}


def _send(gw, job_id: str, body: dict, request_id: str):
    return gw.client.put(
        f"/v1/jobs/{job_id}/draft",
        json=body,
        headers={**gw.headers(), "X-Request-Id": request_id},
    )


def _assert_honest(case: str, answer, status: int, request_id: str) -> None:
    assert answer.status_code == status, (case, answer.get_json())
    assert answer.headers.get("X-Request-Id") == request_id, case
    if status == 503:
        assert problem_slug(answer) == "ledger-unavailable", case
        assert answer.get_json()["retryable"] is True, case
        assert int(answer.headers["Retry-After"]) >= 1, case


def test_a_dead_ledger_session_answers_honestly_and_the_retry_makes_one_post(
    gw, terminator, ledger_url
):
    """Each case on a job of its own, on one ledger (a fresh PostgreSQL database per case
    would double the test's time)."""
    for case, (kills, status) in CASES.items():
        job_id = new_job_id()
        assert gw.put_job(job_id).status_code == 201, case
        body = draft_body(title=f"Ledger death {case} {job_id}")
        for kill in kills:
            request_id = f"death-{uuid.uuid4().hex}"
            if kill == REFUSED:
                with refusing_connections(terminator, ledger_url):
                    answer = _send(gw, job_id, body, request_id)
            else:
                terminator.arm(*kill)
                answer = _send(gw, job_id, body, request_id)
                assert terminator.points == [], (case, "never reached", terminator.points)
            _assert_honest(case, answer, status, request_id)
        again = _send(gw, job_id, body, f"death-retry-{case}")  # the next request: a live session
        assert again.status_code in (200, 201), (case, again.get_json())
        assert again.headers["X-Request-Id"] == f"death-retry-{case}"
        assert gw.count_objects(op_key(job_id, "draft")) == 1, case


def test_a_review_session_whose_ledger_session_died_reads_as_signed_out(offline_gw, terminator):
    """The review page's session store (:mod:`gateway.api.session_store`) loses the ledger's
    session while loading the editor's: the page answers as for a visitor who is signed out
    (never a 500, never the dead connection for the page's own statements: the answer forgets
    the cookie, as for any session it cannot find); signing in again works."""
    client = offline_gw.client
    assert _sign_in(client, offline_gw.make_token("editor")).status_code == 303
    terminator.arm(("statement", "load"))
    signed_out = client.get("/review")
    assert terminator.points == []
    assert signed_out.status_code == 303, signed_out.get_data(as_text=True)[:500]
    assert signed_out.headers["Location"].endswith("/review/login")
    assert _sign_in(client, offline_gw.make_token("editor")).status_code == 303
    assert client.get("/review").status_code == 200
