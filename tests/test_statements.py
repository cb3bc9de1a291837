"""The compiled-statement cache (gateway/statements.py): a cached shape runs exactly the SQL
and parameters peewee would build, on SQLite and PostgreSQL; shapes it cannot prove equal
stay with peewee. No WordPress needed."""

from __future__ import annotations

import datetime as dt

from gateway import db
from gateway import migrations
from gateway import statements
from gateway import tokens
from gateway.ledger import Job
from gateway.ledger import Operation
from gateway.ledger import Token


def _ledger(ledger_url):
    concrete = db.bind(ledger_url)
    db.database.connect(reuse_if_open=True)
    migrations.migrate()
    return concrete


def _peewee(query):
    """What peewee itself builds for ``query``."""
    return db.database.obj.get_sql_context().sql(query).query()


def _op(key: str, state: str = "PREPARED") -> Operation:
    return Operation.create(
        operation_key=key,
        tenant="acme",
        job_id="j1",
        task_version=1,
        action="draft",
        request_hash="h",
        state=state,
        intent={"title": "t"},
    )


def test_cached_shapes_return_what_peewee_returns(ledger_url):
    concrete = _ledger(ledger_url)
    try:
        raw = tokens.create_token("acme", "workflow", "n8n")
        token_hash = tokens.sha256_hex(raw)
        for i in range(3):
            _op(f"acme/j1/v1/draft{i}")
        cache = concrete.statement_cache
        for _ in range(3):  # first call learns the shape, the next ones use it
            assert Token.get_or_none(Token.token_hash == token_hash).name == "n8n"
            assert Token.get_or_none(Token.token_hash == "absent") is None
            assert Operation.get(Operation.operation_key == "acme/j1/v1/draft1").id == 2
            assert [o.operation_key for o in Operation.select().where(Operation.id > 1)] == [
                "acme/j1/v1/draft1",
                "acme/j1/v1/draft2",
            ]
        learned = [e for e in cache.values() if e is not statements.UNCACHEABLE]
        assert learned and all(e[0] for e in learned)
        # Another value of a learned shape: same SQL text, the new value as parameter.
        query = (
            Operation.select().where(Operation.operation_key == "acme/j1/v1/draft2").paginate(1, 1)
        )
        key, leaves, _keep = statements.shape(query)
        sql, template, positions, _ = cache[key]
        params = list(template)
        for position, (converter, value) in zip(positions, leaves, strict=True):
            params[position] = statements._convert(converter, value)
        peewee_sql, peewee_params = _peewee(query)
        assert (sql, params) == (peewee_sql, list(peewee_params))
    finally:
        db.database.close()


def test_cached_update_converts_values_like_peewee(ledger_url):
    concrete = _ledger(ledger_url)
    try:
        row = _op("acme/j1/v1/draft")
        when = dt.datetime(2026, 1, 2, 3, 4, 5, 678901)
        for attempt in range(3):  # learn, then reuse with other values
            updated = (
                Operation.update(
                    state="SENT", attempts=attempt + 1, receipt={"n": attempt}, sent_at=when
                )
                .where(Operation.id == row.id, Operation.attempts == attempt)
                .execute()
            )
            assert updated == 1
            again = Operation.get_by_id(row.id)
            assert (again.attempts, again.receipt, again.sent_at) == (
                attempt + 1,
                {"n": attempt},
                when,
            )
        # A stale guard matches no row: the value really is a parameter, not baked in.
        stale = Operation.update(state="UNKNOWN").where(
            Operation.id == row.id, Operation.attempts == 0
        )
        assert stale.execute() == 0
        kinds = [
            key[0][0].__name__
            for key, entry in concrete.statement_cache.items()
            if entry is not statements.UNCACHEABLE
        ]
        assert "ModelUpdate" in kinds and "ModelSelect" in kinds
    finally:
        db.database.close()


def test_other_shapes_stay_with_peewee(ledger_url):
    concrete = _ledger(ledger_url)
    try:
        _op("a")
        _op("b", state="CONFIRMED")
        Job.create(tenant="acme", job_id="j1", site="blog", task_version=1)
        # IN lists, IS NULL, expressions in SET and INSERT are not cached, and still right.
        assert Operation.select().where(Operation.state.in_(["CONFIRMED", "SENT"])).count() == 1
        assert [o.operation_key for o in Operation.select().where(Operation.slot.is_null())] == [
            "a",
            "b",
        ]
        assert (
            Operation.update(attempts=Operation.attempts + 1)
            .where(Operation.operation_key == "a")
            .execute()
            == 1
        )
        assert Operation.get(Operation.operation_key == "a").attempts == 1
        for query in (
            Operation.select().where(Operation.state.in_(["CONFIRMED"])),
            Operation.select().where(Operation.slot.is_null()),
            Operation.update(attempts=Operation.attempts + 1),
            Operation.insert(operation_key="c"),
        ):
            assert statements.shape(query) is None
        assert all(isinstance(key, tuple) for key in concrete.statement_cache)
    finally:
        db.database.close()
