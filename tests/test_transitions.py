"""One module moves ledger rows (issue 37): ``gateway/operations/transitions.py``.

* no state of an operation or a notification (nor a notification's delivery claim) is
  written anywhere else in ``gateway/`` (an AST scan, shown to catch a planted write);
* every move its state tables do not allow is refused before any statement, and every move
  they allow is made;
* a move is decided by its row count: a caller that read the row before another moved it
  gets False and changes nothing; of racing senders exactly one wins (also on PostgreSQL:
  ``GATEWAY_TEST_DATABASE_URL``).
"""

from __future__ import annotations

import ast
import threading
import types
from pathlib import Path

import pytest
from support import TENANT

from gateway.core import states
from gateway.ledger import db
from gateway.ledger import hot_sql
from gateway.ledger import rows
from gateway.ledger.db import database
from gateway.ledger.models import NOTIFICATION_STATE
from gateway.ledger.models import STATES
from gateway.ledger.models import Notification
from gateway.ledger.models import Operation
from gateway.operations import transitions

ROOT = Path(__file__).resolve().parents[1]
MOVER = ROOT / "gateway" / "operations" / "transitions.py"
# Where the hot path's statements are written out (the mover calls them).
HOT_SQL = ROOT / "gateway" / "ledger" / "hot_sql.py"
STATE_COLUMNS = {
    "Operation": {"state"},
    "Notification": {"state", "claimed_until", "refusals"},
}
WRITES = {"update", "insert", "create", "insert_many", "replace", "get_or_create"}
HOT_MOVES = {"insert_operation", "move_operation", "confirm_operation"}


def state_writes(source: str, filename: str = "<source>") -> list[str]:
    """Every place in ``source`` that writes a state column of an operation or a
    notification (``Operation.update(state=...)``, ``Notification.update(claimed_until=...)``,
    ``Model.update({Model.state: ...})``, ``Operation.create(state=...)``...) or calls one of
    hot_sql's operation statements: ``file:line``."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        owner, method = node.func.value, node.func.attr
        if method in HOT_MOVES and isinstance(owner, ast.Name) and owner.id == "hot_sql":
            found.append(f"{filename}:{node.lineno} hot_sql.{method}")
            continue
        if method not in WRITES or not isinstance(owner, ast.Name):
            continue
        columns = STATE_COLUMNS.get(owner.id)
        if not columns:
            continue
        named = {k.arg for k in node.keywords} & columns
        for arg in node.args:  # Model.update({Model.state: ...}) / ({"state": ...})
            if isinstance(arg, ast.Dict):
                for key in arg.keys:
                    if isinstance(key, ast.Attribute) and key.attr in columns:
                        named.add(key.attr)
                    if isinstance(key, ast.Constant) and key.value in columns:
                        named.add(key.value)
        if named:
            found.append(f"{filename}:{node.lineno} {owner.id}.{method}({', '.join(named)})")
    return found


def test_the_scan_finds_a_state_written_outside_the_mover():
    planted = (
        "Operation.update(state=SENT).where(Operation.id == 1).execute()\n"
        "Notification.update({Notification.claimed_until: None}).execute()\n"
        "Operation.create(operation_key='k', state='CONFIRMED')\n"
        "hot_sql.move_operation(1, 'SENT', 0, {})\n"
        "Operation.update(receipt=None).execute()\n"  # not a state column: allowed
    )
    found = sorted(state_writes(planted))
    assert [f.split()[1].split("(")[0] for f in found] == [
        "Operation.update",
        "Notification.update",
        "Operation.create",
        "hot_sql.move_operation",
    ], found


def test_no_state_is_written_outside_operations_transitions():
    found = []
    for path in sorted((ROOT / "gateway").rglob("*.py")):
        if path in (MOVER, HOT_SQL):
            continue
        found += state_writes(path.read_text(), str(path.relative_to(ROOT)))
    assert found == [], "state changes must go through gateway/operations/transitions.py"


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
    assert set(transitions.OPERATION_MOVES) == set(STATES)
    assert set().union(*transitions.OPERATION_MOVES.values()) <= set(STATES)
    assert transitions.OPERATION_MOVES[transitions.CONFIRMED] == {transitions.UNKNOWN}


def test_an_operation_moves_only_as_the_table_allows(ledger):
    """Every (from, to) pair of ledger states, each on a row of its own."""
    for start, to in OPERATION_PAIRS:
        row = _operation(start, key=f"acme/j/v1/draft/{start}-{to}")
        allowed = to in transitions.OPERATION_MOVES[start]
        if allowed:
            assert transitions.move(row, to) is True, (start, to)
            assert row.state == to
        else:
            with pytest.raises(transitions.IllegalMove):
                transitions.move(row, to)
        assert Operation.get_by_id(row.id).state == (to if allowed else start), (start, to)


def test_a_notification_moves_only_as_the_table_allows(ledger):
    for start, to in NOTIFICATION_PAIRS:
        row = _notification(start, key=f"acme/j/v1/notify/{start}-{to}")
        allowed = to in transitions.NOTIFICATION_MOVES[start]
        if allowed:
            assert transitions.move(row, to, column=NOTIFICATION_STATE) is True, (start, to)
        else:
            with pytest.raises(transitions.IllegalMove):
                transitions.move(row, to, column=NOTIFICATION_STATE)
        assert Notification.get_by_id(row.id).state == (to if allowed else start), (start, to)


def test_an_illegal_expect_is_refused_even_when_one_of_its_states_is_legal(ledger):
    row = _operation(transitions.SENT)
    with pytest.raises(transitions.IllegalMove, match="from PREPARED to FAILED"):
        transitions.move(row, transitions.FAILED, (transitions.SENT, transitions.PREPARED))
    assert Operation.get_by_id(row.id).state == transitions.SENT


def test_a_lost_race_returns_false_and_changes_nothing(ledger):
    first = _operation(transitions.SENT)
    second = Operation.get_by_id(first.id)  # read before the first caller moves it
    assert transitions.move(first, transitions.FAILED, problem={"detail": "refused"})
    assert transitions.move(second, transitions.UNKNOWN, problem={"detail": "lost"}) is False
    stored = Operation.get_by_id(first.id)
    assert (stored.state, stored.problem) == ("FAILED", {"detail": "refused"})
    assert second.state == transitions.SENT  # the loser's row is not changed in memory either
    # the confirmation decides by its row count too: the second confirmer loses
    for state, attempt in ((transitions.UNKNOWN, 1), (transitions.CONFIRMED, 2)):
        row = _operation(transitions.UNKNOWN, key=f"acme/j/v1/media/{attempt}")
        stale = Operation.get_by_id(row.id)
        assert transitions.move(row, transitions.CONFIRMED, transitions.NOT_CONFIRMED, remote_id=1)
        won = transitions.move(stale, transitions.CONFIRMED, transitions.NOT_CONFIRMED, remote_id=2)
        assert won is False and Operation.get_by_id(row.id).remote_id == 1, state


def test_the_caller_names_the_column_and_any_row_with_its_attributes_moves(ledger):
    """The mover reads the row's ``id``, ``state`` and ``attempts``, never its class (issue
    51): a plain row of hot_sql, or any object with those attributes, moves as a model
    instance does; the declared column is the caller's (an operation's by default), so a
    notification row moved as an operation is refused before any statement."""
    row = _operation(transitions.PREPARED)
    plain = types.SimpleNamespace(id=row.id, state=row.state, attempts=row.attempts)
    assert transitions.move(plain, transitions.SENT, same_attempt=True, attempts=1)
    assert plain.state == transitions.SENT and plain.attempts == 1
    assert Operation.get_by_id(row.id).state == transitions.SENT
    hot = hot_sql.operation_by_key(row.operation_key)
    assert type(hot) is rows.OperationRow
    assert transitions.move(hot, transitions.UNKNOWN) and hot.state == transitions.UNKNOWN
    assert Operation.get_by_id(row.id).state == transitions.UNKNOWN
    assert not transitions.move(plain, transitions.UNKNOWN)  # read as SENT: moved since
    note = _notification(states.PENDING)
    with pytest.raises(transitions.IllegalMove):
        transitions.move(note, states.DELIVERED)
    assert transitions.move(note, states.DELIVERED, column=NOTIFICATION_STATE)
    assert Notification.get_by_id(note.id).state == states.DELIVERED


def test_a_send_claimed_at_the_same_attempt_is_won_once(ledger):
    row = _operation(transitions.PREPARED)
    readers = [Operation.get_by_id(row.id) for _ in range(2)]
    assert transitions.move(readers[0], transitions.SENT, same_attempt=True, attempts=1)
    assert not transitions.move(readers[1], transitions.SENT, same_attempt=True, attempts=1)
    assert Operation.get_by_id(row.id).attempts == 1


def test_racing_senders_of_an_agent_input_one_wins_and_an_in_flight_row_is_not_resent(app):
    """Eight threads, each with its own connection and its own read of the row, claim the
    send of one agent input: exactly one wins; afterwards the SENT row is in flight (by the
    database's clock) and nobody may send it again until the window passed."""
    with app.app_context(), database.connection_context():
        row_id = _operation(transitions.PREPARED, key="acme/j/v1/follow_up/abc").id
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
