"""The hot path's ledger statements in plain SQL (issue 32): the few statements that every
side-effect request runs, written out once instead of built by peewee on every call.

Which: the token lookup (:func:`live_token`), the job with its site and lease in one join
(:func:`job_with_site`), the operation by key (:func:`operation_by_key`), the claim's INSERT
(:func:`insert_operation`), the budget spend's upsert
(:func:`spend_budget`) and the job's last client request (:func:`note_request`); and on a
fresh job's path, the site by name (:func:`site_by_name`), the job's INSERT
(:func:`insert_job`), a checkpoint by phase (:func:`checkpoint_of`) and the job's UPDATE by id
(:func:`update_job`). Everything else goes through peewee's query builder, as before.

Why: building a statement's SQL text is most of what the ledger costs. peewee walks the
query tree on every call (each selected column, each condition, each joined model) and maps
each row back through the same tree; the database then executes an indexed lookup in a few
microseconds. These statements are always the same shapes, so their text is written here,
built once per parameter style from the models' own table and column names.

How, on both databases: the text uses the database's parameter style (peewee's
``database.param``: ``?`` for SQLite, ``%s`` for psycopg2) and standard SQL that SQLite 3.35+
and PostgreSQL both run (``RETURNING``, ``INSERT ... ON CONFLICT ... DO UPDATE``). Statements
run through ``database.execute_sql``, peewee's own entry to the driver: the connection is the
request's pooled one, inside or outside ``db.atomic()``, and a driver error arrives as
peewee's exception (``IntegrityError``, ``OperationalError``...) exactly as before. Values are
converted with each field's ``db_value`` and columns back with its ``python_value``, as
peewee does.

Rows come back as plain objects of :mod:`gateway.ledger.rows` (``JobRow``, ``OperationRow``...),
not the models' instances: the same attributes with the same values as peewee's own ``SELECT``
gives, and the model's own methods (``tests/test_statements.py`` compares them on both
databases). Only peewee's public API is used (``database.execute_sql``, ``database.param``,
``Model._meta``'s fields, each field's ``db_value``, ``python_value`` and ``default``), so any
peewee the suite passes on will do (``pyproject.toml``).

Errors: every function raises what ``execute_sql`` raises, peewee's ``DatabaseError`` family
(``OperationalError`` when the ledger cannot serve: :func:`gateway.ledger.db.is_unavailable`),
and nothing else. Statements are counted at the driver (``tests/test_statements.py``), so
these count exactly like peewee's.
"""

from __future__ import annotations

import datetime as dt

from peewee import AutoField
from peewee import IntegerField
from peewee import TextField

from gateway.ledger import moves
from gateway.ledger import rows
from gateway.ledger.db import database
from gateway.ledger.models import Budget
from gateway.ledger.models import Checkpoint
from gateway.ledger.models import Job
from gateway.ledger.models import Lease
from gateway.ledger.models import Operation
from gateway.ledger.models import Site
from gateway.ledger.models import Token

# Field types whose values both drivers already hand back as peewee's python_value would
# make them (str, int, None): no conversion. Others (DateTimeField on SQLite's text,
# BooleanField on SQLite's 0/1, JSONField's text) go through the field's python_value.
_AS_RETURNED = (TextField, IntegerField, AutoField)


def _q(name: str) -> str:
    return f'"{name}"'


class _Columns:
    """How one model's columns are selected and its rows built: every field, in the
    model's order, under table alias ``alias``, as ``row_class`` (:mod:`gateway.ledger.rows`)."""

    def __init__(self, model, alias: str, row_class: type):
        self.model = model
        self.row_class = row_class
        fields = model._meta.sorted_fields
        self.width = len(fields)
        self.sql = ", ".join(f"{_q(alias)}.{_q(f.column_name)}" for f in fields)
        self.converters = tuple(
            (i, f.python_value) for i, f in enumerate(fields) if type(f) not in _AS_RETURNED
        )

    def build(self, row, start: int = 0, *joined):
        """The row of ``row[start:start + width]`` (a DB-API row tuple), each column through
        its field's ``python_value`` where the driver's value is not already it, then
        ``joined`` (a job's site and lease rows), in one call of the row class (about 0.5 µs
        for an operation's 21 fields, the conversions apart)."""
        values = row[start : start + self.width]
        if self.converters:
            values = list(values)
            for i, convert in self.converters:
                if values[i] is not None:
                    values[i] = convert(values[i])
        return self.row_class(*values, *joined)


_JOB = _Columns(Job, "j", rows.JobRow)
_SITE = _Columns(Site, "s", rows.SiteRow)
_LEASE = _Columns(Lease, "l", rows.LeaseRow)
_OPERATION = _Columns(Operation, "o", rows.OperationRow)
_CHECKPOINT = _Columns(Checkpoint, "c", rows.CheckpointRow)


def _table(model) -> str:
    return _q(model._meta.table_name)


def _column(model, name: str) -> str:
    return _q(model._meta.fields[name].column_name)


def _build_texts(p: str) -> dict[str, str]:
    """The fixed statements' SQL text for parameter marker ``p``."""
    job, site, lease, op = (_table(m) for m in (Job, Site, Lease, Operation))
    budget = _table(Budget)
    spend = (
        f"INSERT INTO {budget} (tenant, job_id, name, used, updated_at) VALUES ({p}, {p}, {p}, "
        f"{p}, {p}) ON CONFLICT (tenant, job_id, name) DO UPDATE SET used = {budget}.used + "
        f"{p}, updated_at = {p} WHERE "
    )
    return {
        "token": f"SELECT tenant, role, name FROM {_table(Token)} "
        f"WHERE token_hash = {p} AND revoked_at IS NULL",
        "job": f"SELECT {_JOB.sql}, {_SITE.sql}, {_LEASE.sql} FROM {job} AS j "
        f"LEFT OUTER JOIN {site} AS s ON s.tenant = j.tenant AND s.name = j.site "
        f"LEFT OUTER JOIN {lease} AS l ON l.tenant = j.tenant AND l.job_id = j.job_id "
        f"WHERE j.tenant = {p} AND j.job_id = {p}",
        "operation": f"SELECT {_OPERATION.sql} FROM {op} AS o WHERE o.operation_key = {p}",
        "site": f"SELECT {_SITE.sql} FROM {site} AS s WHERE s.tenant = {p} AND s.name = {p}",
        "checkpoint": f"SELECT {_CHECKPOINT.sql} FROM {_table(Checkpoint)} AS c WHERE "
        f"c.tenant = {p} AND c.job_id = {p} AND c.task_version = {p} AND c.phase = {p}",
        "spend_limited": spend
        + f"{budget}.used + {p} <= COALESCE({budget}.allowed, {p}) RETURNING {budget}.id",
        "spend_unlimited": spend
        + f"{budget}.allowed IS NULL OR {budget}.used + {p} <= {budget}.allowed "
        f"RETURNING {budget}.id",
        "request": f"UPDATE {job} SET last_request_at = {p} WHERE tenant = {p} AND job_id = {p} "
        f"AND (last_request_at IS NULL OR last_request_at <= {p})",
    }


_TEXTS: dict[str, dict[str, str]] = {}  # parameter marker -> name -> SQL text
_SHAPED: dict[tuple, str] = {}  # (parameter marker, kind, column names) -> SQL text


def _text(name: str) -> tuple:
    """``(concrete database, SQL text of statement name)`` for the bound database."""
    concrete = database.obj
    texts = _TEXTS.get(concrete.param)
    if texts is None:
        texts = _TEXTS[concrete.param] = _build_texts(concrete.param)
    return concrete, texts[name]


def _db_values(model, values: dict) -> list:
    fields = model._meta.fields
    return [fields[name].db_value(value) for name, value in values.items()]


def live_token(token_hash: str) -> tuple[str, str, str] | None:
    """``(tenant, role, name)`` of the token whose SHA-256 (hex) is ``token_hash``, or None
    when no token has it or it was revoked. One indexed SELECT (``token.token_hash`` is
    unique)."""
    concrete, sql = _text("token")
    return concrete.execute_sql(sql, (token_hash,)).fetchone()


def job_with_site(tenant: str, job_id: str) -> rows.JobRow | None:
    """The job ``(tenant, job_id)`` with its site and lease read in the same statement (two
    LEFT JOINs), or None when the tenant has no such job. The site row is ``job.site_row``
    (None when the site was removed) and the lease row ``job.lease_row`` (None: the job was
    never leased), as peewee's join with ``attr=`` names them."""
    concrete, sql = _text("job")
    row = concrete.execute_sql(sql, (tenant, job_id)).fetchone()
    if row is None:
        return None
    at = _JOB.width
    site = _SITE.build(row, at) if row[at] is not None else None
    at += _SITE.width
    lease = _LEASE.build(row, at) if row[at] is not None else None
    return _JOB.build(row, 0, site, lease)


def operation_by_key(key: str) -> rows.OperationRow | None:
    """The ledger row of operation key ``key`` (unique), or None."""
    concrete, sql = _text("operation")
    row = concrete.execute_sql(sql, (key,)).fetchone()
    return None if row is None else _OPERATION.build(row)


def _default(field):
    """``field``'s default as ``Model(...)`` evaluates it (a callable is called), or None."""
    return field.default() if callable(field.default) else field.default


def _insert(columns: _Columns, values: dict):
    """Insert a row of ``columns.model`` and return it as its row class, with its ``id``:
    ``values`` by field name, and each field that has a default and is not in ``values`` gets
    it, as ``model.create`` does (the columns of fields without either are left to the
    database: NULL, and None in the row).

    Raises:
        peewee.IntegrityError: a unique constraint refused the row.
    """
    model = columns.model
    fields = model._meta.sorted_fields
    data = {f.name: values[f.name] if f.name in values else _default(f) for f in fields}
    names = tuple(
        f.name for f in fields if f.name in values or (f.default is not None and not f.primary_key)
    )
    concrete = database.obj
    key = (concrete.param, "insert", model, names)
    sql = _SHAPED.get(key)
    if sql is None:
        names_sql = ", ".join(_column(model, n) for n in names)
        marks = ", ".join([concrete.param] * len(names))
        table = _table(model)
        sql = _SHAPED[key] = f"INSERT INTO {table} ({names_sql}) VALUES ({marks}) RETURNING id"
    params = _db_values(model, {n: data[n] for n in names})
    data["id"] = concrete.execute_sql(sql, params).fetchone()[0]
    return columns.row_class(*data.values())


def insert_operation(values: dict) -> rows.OperationRow:
    """Insert a ledger row and return it (:func:`_insert`: ``values`` by field name, the
    model's defaults for the rest, its new ``id``).

    Raises:
        peewee.IntegrityError: the operation key exists (the claim's lock).
    """
    return _insert(_OPERATION, values)


def insert_job(values: dict) -> rows.JobRow:
    """Insert a job row and return it (:func:`_insert`), as ``Job.create(**values)``.

    Raises:
        peewee.IntegrityError: the tenant has a job with this ``job_id``.
    """
    return _insert(_JOB, values)


def site_by_name(tenant: str, name: str) -> rows.SiteRow | None:
    """The site ``name`` of ``tenant`` (unique per tenant), or None."""
    concrete, sql = _text("site")
    row = concrete.execute_sql(sql, (tenant, name)).fetchone()
    return None if row is None else _SITE.build(row)


def checkpoint_of(
    tenant: str, job_id: str, task_version: int, phase: str
) -> rows.CheckpointRow | None:
    """The checkpoint of ``phase`` in task version ``task_version`` of the job (unique), or
    None."""
    concrete, sql = _text("checkpoint")
    row = concrete.execute_sql(sql, (tenant, job_id, task_version, phase)).fetchone()
    return None if row is None else _CHECKPOINT.build(row)


def _update_text(kind: str, names: tuple, where: str, model=Operation) -> tuple:
    """``(concrete database, UPDATE <model's table> SET <names> WHERE <where>)``, ``{p}`` in
    ``where`` standing for the parameter marker; one text per set of column names."""
    concrete = database.obj
    key = (concrete.param, kind, model, names)
    sql = _SHAPED.get(key)
    if sql is None:
        p = concrete.param
        assignments = ", ".join(f"{_column(model, n)} = {p}" for n in names)
        condition = where.format(p=p)
        sql = _SHAPED[key] = f"UPDATE {_table(model)} SET {assignments} WHERE {condition}"
    return concrete, sql


def update_job(row_id: int, values: dict) -> int:
    """``UPDATE job SET <values> WHERE id = row_id`` (``values`` by field name); returns the
    rows updated.

    Raises:
        IllegalMove: ``values`` names ``phase``, a state column that moves only through
            :func:`gateway.ledger.moves.move` (before any statement).
    """
    if "phase" in values:
        raise moves.IllegalMove("job.phase moves only through gateway.ledger.moves.move")
    concrete, sql = _update_text("job", tuple(values), "id = {p}", Job)
    return concrete.execute_sql(sql, [*_db_values(Job, values), row_id]).rowcount


def spend_budget(
    tenant: str, job_id: str, name: str, amount: int, now: dt.datetime, default: int
) -> bool:
    """Spend ``amount`` of the job's budget ``name`` in one upsert; True when spent, False
    when the ceiling refused it (nothing changed).

    ``INSERT INTO budget ... VALUES (..., used = amount) ON CONFLICT (tenant, job_id, name)
    DO UPDATE SET used = used + amount, updated_at = now WHERE <room> RETURNING id``, where
    room is ``used + amount <= COALESCE(allowed, default)`` when ``default`` > 0 (a configured
    ceiling), else ``allowed IS NULL OR used + amount <= allowed`` (only an editor's ceiling
    limits). A returned row means the spend happened. The first spend of a job inserts its row
    whatever the amount: a caller checks an amount above ``default`` first
    (:func:`gateway.jobs.budgets.spend`)."""
    limited = default > 0
    concrete, sql = _text("spend_limited" if limited else "spend_unlimited")
    now = Budget.updated_at.db_value(now)
    params = [tenant, job_id, name, amount, now, amount, now, amount]
    if limited:
        params.append(default)
    return concrete.execute_sql(sql, params).fetchone() is not None


def note_request(
    tenant: str, job_id: str, now: dt.datetime, resolution: dt.timedelta = dt.timedelta(seconds=1)
) -> int:
    """``UPDATE job SET last_request_at = now`` of the job ``(tenant, job_id)`` unless it is
    already within ``resolution`` of ``now`` (``... AND (last_request_at IS NULL OR
    last_request_at <= now - resolution)``): a job asked many times a second is written once
    a second, and its idle time (counted in minutes) is at most ``resolution`` early. Returns
    the rows updated (0: no such job, or noted within ``resolution``)."""
    concrete, sql = _text("request")
    column = Job.last_request_at
    params = (column.db_value(now), tenant, job_id, column.db_value(now - resolution))
    return concrete.execute_sql(sql, params).rowcount
