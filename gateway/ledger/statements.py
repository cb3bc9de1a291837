"""Compiled ledger statements: peewee builds each ``SELECT``, ``UPDATE`` and ``INSERT`` once
per shape.

Building SQL text is most of the gateway's ledger cost: peewee walks the query tree (every
selected column, every condition) on every call, about a millisecond per statement on a small
CPU, while SQLite or PostgreSQL then execute it in a few microseconds. The hot statements are
always the same few shapes (``Token.token_hash == ?``, ``Job.tenant == ? AND Job.job_id ==
?``, ...), so :func:`install` makes a database keep, per shape, the SQL text and the
parameter list once compiled by peewee, and only swap in the new values afterwards.

A **shape** is the query with the values of its ``WHERE`` comparisons left out: the query
class, its model, selected columns, joins (whose ``ON`` compares columns only, no values),
order, limit, offset, locking clause, and the ``WHERE`` tree (``AND``/``OR`` of ``field <op>
value`` with ``=``, ``!=``, ``<``, ``<=``, ``>``, ``>=`` and one scalar value). Anything else
(``IN`` lists, sub-queries, functions, ``IS NULL``, an unknown node or attribute) makes the
query "not cacheable" and peewee compiles it as before. An ``UPDATE`` is cached when its
``SET`` list holds plain values (not ``Field + 1``). A one-row ``INSERT`` (``Model.create``)
is cached only when it names every field that has a default, so that peewee fills in nothing
while compiling (a default such as the current time would otherwise be frozen into the cached
parameters), and holds plain values; other inserts and ``DELETE`` never are.

Safety: the first time a shape is met it is compiled twice by peewee, once with the real
values and once with a marker in place of each value; the shape is cached only when the two
texts are equal, each marker appears exactly once, and putting each value, converted by its
field's ``db_value`` exactly as peewee converts it, in place of the markers gives peewee's
own parameter list. Otherwise the shape is remembered as not cacheable. The cache lives on
the database object, so rebinding the ledger (tests, the demo) starts a fresh one.
"""

from __future__ import annotations

import datetime as dt
import uuid

from peewee import OP
from peewee import Expression
from peewee import Field
from peewee import Join
from peewee import ModelBase
from peewee import ModelInsert
from peewee import ModelSelect
from peewee import ModelUpdate
from peewee import Node
from peewee import Ordering
from peewee import Value

# Comparisons with one parameter whose SQL does not depend on the value.
COMPARISONS = frozenset({OP.EQ, OP.NE, OP.LT, OP.LTE, OP.GT, OP.GTE})
SCALARS = (str, int, float, dt.datetime, dt.date, uuid.UUID)
# Query attributes that never reach the SQL text (identity hash) or are the shape's model.
IGNORED = frozenset({"_hash"})
UNCACHEABLE = object()
_PLAIN_FIELDS: set[type] = set()  # Field subclasses met in selected columns (grows, bounded)
MAX_SHAPES = 512  # a bound on memory: a process meets a few dozen shapes


class _NotCacheable(Exception):
    pass


def _atom(value, keep: list):
    """A hashable key for a query attribute (``_NotCacheable`` for anything unknown); fields
    and models are keyed by identity and appended to ``keep``, which the cache entry holds so
    that no identity is reused while it is cached."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return (type(value), value)
    if isinstance(value, (Field, ModelBase)):
        if isinstance(value, Field) and len(_PLAIN_FIELDS) < 64:
            _PLAIN_FIELDS.add(type(value))
        keep.append(value)
        return ("id", id(value))
    if isinstance(value, (list, tuple)):
        if all(type(v) in _PLAIN_FIELDS for v in value):  # the selected columns: fast path
            keep.extend(value)
            return tuple(map(id, value))
        atoms = tuple(_atom(v, keep) for v in value)
        if all(isinstance(v, Field) for v in value):  # the fast path's key, next time too
            return tuple(map(id, value))
        return atoms
    if type(value) is Ordering:  # ORDER BY field [ASC|DESC]
        return ("order", _atom(value.node, keep), value.direction, value.collation, value.nulls)
    if type(value) is Join:  # FROM a JOIN b ON <columns compared with columns>
        return (
            "join",
            _atom(value.lhs, keep),
            _atom(value.rhs, keep),
            _atom(value.join_type, keep),
            _on(value._on, keep),
            _atom(value._alias, keep),
        )
    if isinstance(value, dict):  # {} or the joins: {model: [(model, attr, model, kind)]}
        return ("dict", *((_atom(k, keep), _atom(v, keep)) for k, v in value.items()))
    if type(value).__name__ == "DatabaseProxy":
        return ("db",)
    raise _NotCacheable


def _on(node, keep: list):
    """The shape of a join's ``ON``: ``AND``/``OR`` of comparisons of two columns (no
    values, so nothing to put in a parameter)."""
    if type(node) is not Expression:
        raise _NotCacheable
    if node.op in (OP.AND, OP.OR):
        return (node.op, node.flat, _on(node.lhs, keep), _on(node.rhs, keep))
    if node.op not in COMPARISONS or not (
        isinstance(node.lhs, Field) and isinstance(node.rhs, Field)
    ):
        raise _NotCacheable
    return (node.op, node.flat, _atom(node.lhs, keep), _atom(node.rhs, keep))


def _where(node, leaves: list, keep: list):
    """The shape of a ``WHERE`` tree; appends ``(field, value)`` per comparison to ``leaves``."""
    if node is None:
        return None
    if type(node) is not Expression:
        raise _NotCacheable
    if node.op in (OP.AND, OP.OR):
        return (
            node.op,
            node.flat,
            _where(node.lhs, leaves, keep),
            _where(node.rhs, leaves, keep),
        )
    lhs, rhs = node.lhs, node.rhs
    if (
        node.op not in COMPARISONS
        or not isinstance(lhs, Field)
        or isinstance(rhs, bool)
        or not isinstance(rhs, SCALARS)
    ):
        raise _NotCacheable
    leaves.append((lhs.db_value if lhs._coerce else None, rhs))
    keep.append(lhs)
    return (node.op, node.flat, id(lhs), lhs._coerce)


def _update(values, leaves: list, keep: list):
    """The shape of an ``UPDATE``'s ``SET`` list or a one-row ``INSERT``'s values: plain
    values only (peewee converts each with its field's ``db_value``); an expression such as
    ``Field + 1`` is not cached."""
    if type(values) is not dict:  # several rows, or INSERT ... SELECT
        raise _NotCacheable
    shape = []
    for field, value in values.items():
        if not isinstance(field, Field) or isinstance(value, Node):
            raise _NotCacheable
        leaves.append((field.db_value, value))
        keep.append(field)
        shape.append(id(field))
    return tuple(shape)


def _marker(markers: list) -> Value:
    markers.append(f"\x00gateway-statement-marker-{len(markers)}\x00")
    return Value(markers[-1], converter=False)


def _marked(node, markers: list):
    """A copy of the ``WHERE`` tree with each value replaced by an unconverted marker."""
    if node is None:
        return None
    if node.op in (OP.AND, OP.OR):
        return Expression(
            _marked(node.lhs, markers), node.op, _marked(node.rhs, markers), node.flat
        )
    return Expression(node.lhs, node.op, _marker(markers), node.flat)


def _convert(converter, value):
    return converter(value) if converter is not None else value


def _insert_complete(query) -> bool:
    """True when a one-row ``INSERT`` names every field with a default: peewee then adds no
    column, and evaluates no default, while compiling it."""
    values = query._insert
    return type(values) is dict and all(f in values for f in query.model._meta.defaults)


def shape(query) -> tuple[tuple, list, list] | None:
    """``(key, leaves, keep)`` of a cacheable ``SELECT``, ``UPDATE`` or ``INSERT``, or None;
    ``leaves`` are ``(converter, value)`` in the order :func:`_learn` puts markers in,
    ``keep`` the objects the key names by identity."""
    kind = type(query)
    if kind is ModelInsert:
        if not _insert_complete(query):
            return None
    elif kind is not ModelSelect and kind is not ModelUpdate:
        return None
    leaves: list = []
    keep: list = []
    try:
        parts = [(kind,)]
        if kind is ModelUpdate:
            parts.append(("set", _update(query._update, leaves, keep)))
        elif kind is ModelInsert:
            parts.append(("values", _update(query._insert, leaves, keep)))
        parts.append(("where", _where(query._where, leaves, keep)))
        for name, value in vars(query).items():
            if name not in ("_where", "_update", "_insert") and name not in IGNORED:
                parts.append((name, _atom(value, keep)))
    except _NotCacheable:
        return None
    return tuple(parts), leaves, keep


def _marker_positions(sql, params, marked_sql, marked_params, markers, values):
    """The position of each marker in ``marked_params``, when the marked compile is safe to
    reuse: the two texts are equal, each marker appears exactly once, and ``values`` (as
    peewee would pass them) in place of the markers give peewee's own ``params``; else None."""
    positions = []
    for marker in markers:
        found = [i for i, p in enumerate(marked_params) if p == marker]
        if len(found) != 1:
            return None
        positions.append(found[0])
    rebuilt = list(marked_params)
    for position, value in zip(positions, values, strict=True):
        rebuilt[position] = value
    if marked_sql != sql or rebuilt != list(params):
        return None
    return tuple(positions)


def _learn(query, leaves: list, keep: list, compile_):
    """Compile ``query`` with peewee; returns ``(sql, params, entry)`` where ``entry`` is
    what to cache for its shape (``UNCACHEABLE`` when the check fails)."""
    sql, params = compile_(query)
    markers: list[str] = []
    clone = query.clone()
    if type(query) is ModelUpdate:
        clone._update = {field: _marker(markers) for field in query._update}
    elif type(query) is ModelInsert:
        clone._insert = {field: _marker(markers) for field in query._insert}
    clone._where = _marked(query._where, markers)
    marked_sql, marked_params = compile_(clone)
    converted = [_convert(converter, value) for converter, value in leaves]
    positions = _marker_positions(sql, params, marked_sql, marked_params, markers, converted)
    if positions is None:
        return sql, params, UNCACHEABLE
    return sql, params, (sql, tuple(marked_params), positions, keep)


def install(database) -> None:
    """Make ``database`` (a concrete peewee database) compile each ``SELECT``/``UPDATE``/
    complete one-row ``INSERT`` shape once: its ``execute`` is replaced;
    ``database.statement_cache`` maps shape keys to entries (inspection and tests)."""
    cache: dict = {}
    plain = database.execute

    def compile_(query):
        return database.get_sql_context().sql(query).query()

    def execute(query, **context_options):
        found = None if context_options else shape(query)
        if found is None:
            return plain(query, **context_options)
        key, leaves, keep = found
        entry = cache.get(key)
        if entry is None:
            sql, params, entry = _learn(query, leaves, keep, compile_)
            if len(cache) < MAX_SHAPES:
                cache[key] = entry
            return database.execute_sql(sql, params)
        if entry is UNCACHEABLE:
            return plain(query)
        sql, template, positions, _keep = entry
        params = list(template)
        for position, (converter, value) in zip(positions, leaves, strict=True):
            params[position] = _convert(converter, value)
        return database.execute_sql(sql, params)

    database.execute = execute
    database.statement_cache = cache


class Prepared:
    """A statement peewee cannot be asked to cache by shape (an upsert, ``SET used = used +
    ?``, ``COALESCE``), compiled once per database: ``build(*values)`` returns the peewee
    query for ``values``; the first :meth:`execute` on a database compiles it twice, with the
    real values and with a marker per value, and keeps the SQL text and the markers'
    positions only when the two texts agree and the real values, put in place of the
    markers, give peewee's own parameter list (so peewee converts no value; otherwise every
    call is compiled by peewee, as without this class). Each value must be used once.
    """

    def __init__(self, build):
        self.build = build

    def execute(self, database, *values):
        """Run the statement for ``values`` on ``database`` (the concrete peewee database);
        returns the DB-API cursor."""
        cache = database.__dict__.setdefault("prepared_statements", {})
        entry = cache.get(self)
        if entry is None:
            entry = cache[self] = self._learn(database, values)
        if entry is UNCACHEABLE:
            sql, params = database.get_sql_context().sql(self.build(*values)).query()
            return database.execute_sql(sql, params)
        sql, template, positions = entry
        params = list(template)
        for position, value in zip(positions, values, strict=True):
            params[position] = value
        return database.execute_sql(sql, params)

    def _learn(self, database, values):
        def compile_(query):
            return database.get_sql_context().sql(query).query()

        sql, params = compile_(self.build(*values))
        markers: list[str] = []
        marked_sql, marked_params = compile_(self.build(*(_marker(markers) for _ in values)))
        positions = _marker_positions(sql, params, marked_sql, marked_params, markers, values)
        if positions is None:
            return UNCACHEABLE
        return sql, tuple(marked_params), positions
