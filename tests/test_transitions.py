"""Every state moves by one rule (issues 37 and 51): :func:`gateway.ledger.moves.move`.

* no declared state column (:func:`gateway.ledger.moves.declared`: an operation's and a
  notification's state, a webhook event's status, a request key's state, a lease's owner, a
  job's cancel, an agent's stop, the set-once revocations and OAuth uses...) is written
  anywhere else in ``gateway/``, nor a notification's delivery claim outside its owner (an AST
  scan, :mod:`state_writes`, shown to catch planted writes);
* every move its state tables do not allow is refused before any statement, and every move
  they allow is made;
* a move is decided by its row count: a caller that read the row before another moved it
  gets False and changes nothing; of racing senders exactly one wins (also on PostgreSQL:
  ``GATEWAY_TEST_DATABASE_URL``). The other columns' races: ``tests/test_state_columns.py``.
"""

from __future__ import annotations

import threading
import types
from pathlib import Path

import pytest
import state_writes
from support import TENANT

from gateway.core import states
from gateway.ledger import db
from gateway.ledger import hot_sql
from gateway.ledger import moves
from gateway.ledger import rows
from gateway.ledger.db import database
from gateway.ledger.models import NOTIFICATION_STATE
from gateway.ledger.models import STATES
from gateway.ledger.models import Job
from gateway.ledger.models import Notification
from gateway.ledger.models import Operation
from gateway.operations import transitions

ROOT = Path(__file__).resolve().parents[1]
PLANTED = """
from gateway.core import states
from gateway.core.states import KEY_DONE
from gateway.core.states import KEY_IN_PROGRESS as IN_PROGRESS
Operation.update(state=SENT).where(Operation.id == 1).execute()
Notification.update({Notification.claimed_until: None}).execute()
Operation.create(operation_key='k', state='CONFIRMED')
hot_sql.move_operation(1, 'SENT', 0, {})
Operation.update(receipt=None).execute()
WebhookEvent.update({"status": states.EVENT_DONE}).execute()
RequestKey.create(token_hash='t', key='k', state=KEY_DONE)
RequestKey.create(token_hash='t', key='k', state=IN_PROGRESS)
Lease.create(tenant='acme', job_id='j', owner=owner)
Lease.insert(tenant='acme', job_id='j', owner=None).execute()
models.Job.update(cancelled=True).execute()
OAuthCode.insert_many([{"code_hash": "h", "used_at": now}]).execute()
AgentSession.get_or_create(session_id='s', defaults={"stopped_reason": "x"})
Approval.replace(id=1, revoked_at=None).execute()
job.save()
touch(job, phase="published")
records.touch(job, post_id=1)
hot_sql.update_job(job.id, {"updated_at": now, "phase": "verified"})
Lease.insert(tenant='a', job_id='j', owner=o).on_conflict(update={Lease.owner: o}).execute()

def advance(job, phase, **fields):
    fields["phase"] = phase
    records.touch(job, **fields)

def create(tenant, job_id):
    values = {"tenant": tenant, "job_id": job_id, "phase": "published"}
    hot_sql.insert_job(values)
"""
# What the planted source writes (line order), and what it may write.
CAUGHT = [
    "Operation.update(state)",
    "Notification.update(claimed_until) outside gateway.operations.transitions",
    "Operation.create(state)",  # an INSERT of a state that is not the column's initial one
    "hot_sql.move_operation",
    "WebhookEvent.update(status)",
    "RequestKey.create(state)",  # DONE: not an initial state (IN_PROGRESS below is)
    "Lease.insert(owner)",  # NULL is not held: the lease's initial value is any owner
    "Job.update(cancelled)",
    "OAuthCode.insert_many(used_at)",  # a set-once column has no initial value but NULL
    "AgentSession.get_or_create(stopped_reason)",
    "Approval.replace(revoked_at)",
    ".save()",
    "touch(phase)",
    "update_job(phase)",
    "Lease.on_conflict(owner)",  # the INSERT of an owner is allowed, its upsert's UPDATE not
    "touch(phase)",  # through the splat of ``fields``
    "insert_job(phase)",  # through ``values``: an INSERT of a phase that is not an initial one
]


def _planted_columns() -> dict:
    """The declared columns, and a job's phase as the planted source's wrappers write it
    (declared here if no module declares it yet)."""
    columns = state_writes.guarded()
    if "phase" not in columns.get("Job", {}):
        phase = moves.StateColumn(Job, "phase", {None: frozenset()}, "planted")
        columns.setdefault("Job", {})["phase"] = phase
    return columns


def test_the_scan_finds_every_planted_write_of_a_state_column():
    found = state_writes.state_writes(PLANTED, columns=_planted_columns())
    assert [f.split(" ", 1)[1] for f in found] == CAUGHT, found


def test_every_declared_column_is_scanned_and_its_default_is_an_initial_value():
    """The scan reads the declarations; a column's default (what an INSERT that does not name
    it writes) must be one of its declared initial values, or NULL."""
    names = {(c.model.__name__, c.column) for c in moves.declared()}
    assert {("Operation", "state"), ("RequestKey", "state"), ("Lease", "owner")} <= names
    assert {("OAuthCode", "used_at"), ("WebhookEvent", "status"), ("Job", "cancelled")} <= names
    for column in moves.declared():
        default = column.model._meta.fields[column.column].default
        assert default is None or column.kind(default) in column.initial, column.name


def test_declare_refuses_a_default_that_is_no_initial_value(monkeypatch):
    """``moves.declare`` itself refuses a column whose plain default an INSERT leaving it
    out would write, unless it is among ``initial`` (None and callables are not judged)."""
    import peewee

    monkeypatch.setattr(moves, "_DECLARED", {})  # a registry of this test's own

    class Door(peewee.Model):
        state = peewee.TextField(default="ajar")
        opened = peewee.TextField(null=True)

    table = {"shut": frozenset({"open"}), "open": frozenset(), "ajar": frozenset()}
    with pytest.raises(ValueError, match="default 'ajar' is not initial"):
        moves.declare(Door, "state", table, owner="tests", initial=("shut",))
    assert moves.declared() == ()
    state = moves.declare(Door, "state", table, owner="tests", initial=("shut", "ajar"))
    opened = moves.declare(Door, "opened", moves.SET_ONCE, owner="tests", initial=())
    assert moves.declared() == (state, opened) and state.initial == {"shut", "ajar"}


def test_no_state_is_written_outside_the_mover():
    found = []
    for path in sorted((ROOT / "gateway").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found += state_writes.state_writes(path.read_text(), str(path.relative_to(ROOT)), module)
    assert found == [], "state changes must go through gateway.ledger.moves.move"


# --------------------------------------------------------------------------- the ledger


@pytest.fixture
def ledger(app):
    with app.app_context(), database.connection_context():
        yield


def _operation(state: str, key: str = "acme/j/v1/draft") -> Operation:
    return Operation.create(
        operation_key=key,
        tenant=TENANT,
        job_id="j",
        task_version=1,
        action="draft",
        request_hash="digest",
        state=state,
    )


def _notification(state: str, key: str = "acme/j/v1/notify/published") -> Notification:
    return Notification.create(
        key=key,
        tenant=TENANT,
        job_id="j",
        task_version=1,
        event="published",
        payload={},
        state=state,
    )


OPERATION_PAIRS = [(a, b) for a in STATES for b in STATES]
NOTIFICATION_STATES = states.NOTIFICATION_STATES
NOTIFICATION_PAIRS = [(a, b) for a in NOTIFICATION_STATES for b in NOTIFICATION_STATES]


def test_the_operation_table_covers_every_ledger_state():
    assert set(states.OPERATION_MOVES) == set(STATES)
    assert set().union(*states.OPERATION_MOVES.values()) <= set(STATES)
    assert states.OPERATION_MOVES[states.CONFIRMED] == {states.UNKNOWN}


def test_an_operation_moves_only_as_the_table_allows(ledger):
    """Every (from, to) pair of ledger states, each on a row of its own."""
    for start, to in OPERATION_PAIRS:
        row = _operation(start, key=f"acme/j/v1/draft/{start}-{to}")
        allowed = to in states.OPERATION_MOVES[start]
        if allowed:
            assert transitions.move(row, to) is True, (start, to)
            assert row.state == to
        else:
            with pytest.raises(moves.IllegalMove):
                transitions.move(row, to)
        assert Operation.get_by_id(row.id).state == (to if allowed else start), (start, to)


def test_a_notification_moves_only_as_the_table_allows(ledger):
    for start, to in NOTIFICATION_PAIRS:
        row = _notification(start, key=f"acme/j/v1/notify/{start}-{to}")
        allowed = to in states.NOTIFICATION_MOVES[start]
        if allowed:
            assert transitions.move(row, to, column=NOTIFICATION_STATE) is True, (start, to)
        else:
            with pytest.raises(moves.IllegalMove):
                transitions.move(row, to, column=NOTIFICATION_STATE)
        assert Notification.get_by_id(row.id).state == (to if allowed else start), (start, to)


def test_an_illegal_expect_is_refused_even_when_one_of_its_states_is_legal(ledger):
    row = _operation(states.SENT)
    with pytest.raises(moves.IllegalMove, match="from CONFIRMED to FAILED"):
        transitions.move(row, states.FAILED, (states.SENT, states.CONFIRMED))
    assert Operation.get_by_id(row.id).state == states.SENT


def test_a_lost_race_returns_false_and_changes_nothing(ledger):
    first = _operation(states.SENT)
    second = Operation.get_by_id(first.id)  # read before the first caller moves it
    assert transitions.move(first, states.FAILED, problem={"detail": "refused"})
    assert transitions.move(second, states.UNKNOWN, problem={"detail": "lost"}) is False
    stored = Operation.get_by_id(first.id)
    assert (stored.state, stored.problem) == ("FAILED", {"detail": "refused"})
    assert second.state == states.SENT  # the loser's row is not changed in memory either
    # the confirmation decides by its row count too: the second confirmer loses
    for state, attempt in ((states.UNKNOWN, 1), (states.CONFIRMED, 2)):
        row = _operation(states.UNKNOWN, key=f"acme/j/v1/media/{attempt}")
        stale = Operation.get_by_id(row.id)
        assert transitions.move(row, states.CONFIRMED, transitions.NOT_CONFIRMED, remote_id=1)
        won = transitions.move(stale, states.CONFIRMED, transitions.NOT_CONFIRMED, remote_id=2)
        assert won is False and Operation.get_by_id(row.id).remote_id == 1, state


def test_the_caller_names_the_column_and_any_row_with_its_attributes_moves(ledger):
    """The mover reads the row's ``id``, ``state`` and ``attempts``, never its class (issue
    51): a plain row of hot_sql, or any object with those attributes, moves as a model
    instance does; the declared column is the caller's (an operation's by default), so a
    notification row moved as an operation is refused before any statement."""
    row = _operation(states.PREPARED)
    plain = types.SimpleNamespace(id=row.id, state=row.state, attempts=row.attempts)
    assert transitions.move(plain, states.SENT, same_attempt=True, attempts=1)
    assert plain.state == states.SENT and plain.attempts == 1
    assert Operation.get_by_id(row.id).state == states.SENT
    hot = hot_sql.operation_by_key(row.operation_key)
    assert type(hot) is rows.OperationRow
    assert transitions.move(hot, states.UNKNOWN) and hot.state == states.UNKNOWN
    assert Operation.get_by_id(row.id).state == states.UNKNOWN
    assert not transitions.move(plain, states.UNKNOWN)  # read as SENT: moved since
    note = _notification(states.PENDING)
    with pytest.raises(moves.IllegalMove):
        transitions.move(note, states.DELIVERED)
    assert transitions.move(note, states.DELIVERED, column=NOTIFICATION_STATE)
    assert Notification.get_by_id(note.id).state == states.DELIVERED


def test_a_send_claimed_at_the_same_attempt_is_won_once(ledger):
    row = _operation(states.PREPARED)
    readers = [Operation.get_by_id(row.id) for _ in range(2)]
    assert transitions.move(readers[0], states.SENT, same_attempt=True, attempts=1)
    assert not transitions.move(readers[1], states.SENT, same_attempt=True, attempts=1)
    assert Operation.get_by_id(row.id).attempts == 1


def test_racing_senders_of_an_agent_input_one_wins_and_an_in_flight_row_is_not_resent(app):
    """Eight threads, each with its own connection and its own read of the row, claim the
    send of one agent input: exactly one wins; afterwards the SENT row is in flight (by the
    database's clock) and nobody may send it again until the window passed."""
    with app.app_context(), database.connection_context():
        row_id = _operation(states.PREPARED, key="acme/j/v1/follow_up/abc").id
    barrier, wins, errors = threading.Barrier(8), [], []

    def sender():
        try:
            with app.app_context(), database.connection_context():
                row = Operation.get_by_id(row_id)
                barrier.wait(timeout=10)
                wins.append(transitions.claim_send(row, window=30))
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=sender) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == [] and sorted(wins) == [False] * 7 + [True], (errors, wins)
    with app.app_context(), database.connection_context():
        row = Operation.get_by_id(row_id)
        assert (row.state, row.attempts) == ("SENT", 1)
        assert transitions.in_flight(row, 30)
        assert transitions.claim_send(row, window=30) is False  # in flight: not resent
        assert transitions.claim_send(row, window=0) is True  # past the window: resent
        assert Operation.get_by_id(row_id).attempts == 2


def test_the_claim_is_an_insert_or_get_on_the_key(ledger):
    values = {
        "key": "acme/j/v1/follow_up/x",
        "tenant": TENANT,
        "job_id": "j",
        "task_version": 1,
        "action": "follow_up",
        "slot": "x",
        "request_hash": "d",
        "intent": {"event": {}},
        "binds": None,
        "credential_version": 3,
        "fencing_token": 7,
    }
    first, created = transitions.claim(**values)
    again, created_again = transitions.claim(**{**values, "request_hash": "other"})
    assert (created, created_again) == (True, False) and again.id == first.id
    stored = Operation.get_by_id(first.id)
    assert (stored.state, stored.credential_version, stored.fencing_token) == ("PREPARED", 3, 7)
    assert again.request_hash == "d"  # the caller compares the digest (422 before any send)


def test_a_notification_claim_and_its_back_off_follow_the_database_clock(ledger):
    row = _notification(states.PENDING)
    assert transitions.claim_delivery(row, hold_seconds=60)
    assert not transitions.claim_delivery(Notification.get_by_id(row.id), hold_seconds=60)
    held = Notification.get_by_id(row.id)
    assert 50 < (held.claimed_until - db.db_now()).total_seconds() <= 60
    state = transitions.release_delivery(held, "HTTP 404", True, 2, backoff_seconds=120)
    backing_off = Notification.get_by_id(row.id)
    assert (state, backing_off.refusals, backing_off.attempts) == ("PENDING", 1, 1)
    assert 110 < (backing_off.claimed_until - db.db_now()).total_seconds() <= 120
    assert not transitions.claim_delivery(backing_off, hold_seconds=60)  # backing off
    Notification.update(claimed_until=None).where(Notification.id == row.id).execute()  # time
    assert transitions.claim_delivery(Notification.get_by_id(row.id), hold_seconds=60)
    state = transitions.release_delivery(Notification.get_by_id(row.id), "HTTP 410", True, 2, 1)
    refused = Notification.get_by_id(row.id)
    assert (state, refused.state, refused.refusals) == ("REFUSED", "REFUSED", 2)
    assert not transitions.claim_delivery(refused, hold_seconds=60)  # never resent
