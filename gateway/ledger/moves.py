"""The one mover of every state column in the ledger (issue 51).

A *state column* is a column of a ledger table that holds a state the gateway owns: an
operation's ``state``, a job's ``phase``, a review's ``status``... Each is declared once, as
data (:class:`StateColumn`: the model, the column and its moves ``from -> {to}``), beside its
model in :mod:`gateway.ledger.models`, from the move tables of :mod:`gateway.core.states`.
Every write of a declared column goes through :func:`move`: one conditional UPDATE whose
``WHERE`` names the allowed predecessors (``expect``) and whose row count says who won (1: this
caller moved the row; 0: somebody else moved it first, or it was never in ``expect``). A move
the declaration does not allow raises :class:`IllegalMove` before any statement: a bug in the
caller, never a client's error. ``tests/test_transitions.py`` reads the declared (model,
column) pairs from :func:`declared` and scans ``gateway/`` for any other write of them.

Two kinds of column:

* a **state machine** (``moves``: from-state -> the states it may move to; ``None`` is the
  column's NULL, e.g. a job with no phase yet);
* **set once** (:data:`SET_ONCE`): NULL -> a value, never back and never again (an OAuth
  code's ``used_at``, a grant's ``revoked_at``); a move to any non-NULL value from NULL.

In a table, :data:`SET` stands for any value the table does not name (a lease's owner: held;
a stop's reason), and as an ``expect`` it matches ``IS NOT NULL``. ``initial`` names the
values an INSERT may write (``None`` among them: NULL, e.g. a job with no phase yet); the
column's default, when it is a plain value, must be one of them (:func:`declare` checks it);
the AST test allows an INSERT of the column only with one of them.

Each owning module keeps its own rules (fencing, delivery claims, token rotation) and calls
:func:`move` with them as extra conditions (``where``: column equalities; ``when``: peewee
expressions). Not state columns, and so not declared: copies of another system's state (an
OpenAI session's ``status`` as last retrieved) and client values (an OAuth request's
``state`` parameter).

How: a move whose conditions are equalities only is plain SQL (its text built once per
shape and parameter style, as :mod:`gateway.ledger.hot_sql` does for the hot path); one with
peewee expressions in ``when`` is one peewee UPDATE. Source: docs/architecture.md ("Every
state moves by one rule"); huey's and rocket-rides' "a conditional UPDATE's row count decides".
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field

from gateway.core.states import SET
from gateway.ledger.db import database

# A set-once column's one move: NULL -> any value but NULL (SET).
SET_ONCE: Mapping[str | None, frozenset[str]] = {None: frozenset({SET})}


class IllegalMove(RuntimeError):
    """A move the column's declaration does not allow: a bug in the caller, never a client's
    error (raised before any statement)."""


@dataclass(frozen=True)
class StateColumn:
    """One declared state column: ``model.column`` and its moves.

    Attributes:
        model: the peewee model class.
        column: the field's name (``"state"``, ``"phase"``...).
        moves: from-state (``None``: NULL) -> the states it may move to; :data:`SET_ONCE`
            for a column set once from NULL.
        owner: the module that decides its moves (documentation; the AST test names it).
        initial: the values an INSERT may write (:data:`SET`: any value but NULL).
    """

    model: type
    column: str
    moves: Mapping[str | None, frozenset]
    owner: str
    initial: frozenset = frozenset()
    _field: object = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "_field", self.model._meta.fields[self.column])

    @property
    def name(self) -> str:
        """``table.column``, e.g. ``operation.state``."""
        return f"{self.model._meta.table_name}.{self.column}"

    @property
    def set_once(self) -> bool:
        """True for a NULL -> value column (:data:`SET_ONCE`)."""
        return self.moves is SET_ONCE

    def kind(self, value):
        """``value`` as the table names it: :data:`SET` for a value the table does not name
        (when the table has SET), else ``value`` itself."""
        if value is None or SET not in self.moves or value in self.moves:
            return value
        return SET

    def allows(self, from_state, to) -> bool:
        """True when the declaration allows ``from_state -> to``."""
        if to == SET:  # the placeholder itself is never written
            return False
        if self.set_once:
            return from_state is None and to is not None
        return self.kind(to) in self.moves.get(self.kind(from_state), ())

    def check(self, from_states: Iterable, to) -> None:
        """Raise :class:`IllegalMove` unless every ``from_states -> to`` is declared."""
        for state in from_states:
            if not self.allows(state, to):
                raise IllegalMove(f"{self.name} may not move from {state} to {to}")


_DECLARED: dict[tuple[type, str], StateColumn] = {}


def declare(model, column: str, moves: Mapping, owner: str, initial=()) -> StateColumn:
    """Declare ``model.column`` a state column with ``moves`` (see :class:`StateColumn`) and
    the values an INSERT may write (``initial``), and return its declaration.

    Raises:
        ValueError: the column is declared already (a registry refuses a taken name), or a
            to-state of ``moves`` is neither a key of ``moves`` nor a final state listed as
            one (a typo would otherwise be a state nothing can leave), an initial value is
            not a state of ``moves``, or the field's default (a plain value, not None nor a
            callable) is not one of ``initial`` when ``initial`` is given (an INSERT that
            leaves the column out writes it).
    """
    key = (model, column)
    if key in _DECLARED:
        raise ValueError(f"{model.__name__}.{column} is declared already")
    if moves is not SET_ONCE:
        for targets in moves.values():
            unknown = set(targets) - set(moves)
            if unknown:
                raise ValueError(f"{model.__name__}.{column}: no moves declared from {unknown}")
    initial = frozenset(initial)
    if initial - set(moves):
        raise ValueError(f"{model.__name__}.{column}: {set(initial) - set(moves)} not a state")
    declared_column = StateColumn(model, column, moves, owner, initial)
    default = declared_column._field.default
    if initial and default is not None and not callable(default):
        if declared_column.kind(default) not in initial:
            raise ValueError(f"{model.__name__}.{column}: its default {default!r} is not initial")
    _DECLARED[key] = declared_column
    return declared_column


def declared() -> tuple[StateColumn, ...]:
    """Every declared state column, in declaration order."""
    return tuple(_DECLARED.values())


def declaration(model, column: str) -> StateColumn:
    """The declaration of ``model.column``.

    Raises:
        KeyError: not a declared state column.
    """
    return _DECLARED[(model, column)]


def _expected(expect) -> tuple:
    if isinstance(expect, tuple | list | frozenset | set):
        return tuple(expect)
    return (expect,)


# (parameter marker, table.column, set names, where names, n, null, held) -> the UPDATE
_TEXTS: dict[tuple, str] = {}


def move(
    state: StateColumn,
    where: Mapping[str, object],
    to,
    expect,
    *,
    when: Iterable = (),
    **fields,
) -> int:
    """Move the rows of ``state.model`` matching ``where`` (field name -> value, all equal)
    and ``when`` (peewee expressions) from a state in ``expect`` (one state, ``None`` for
    NULL, or a tuple of them) to ``to``, writing ``fields`` (field name -> value) with it.

    Returns the rows updated: with ``where`` naming one row, 1 when this caller moved it and 0
    when another caller moved it first (or it was never in ``expect``).

    Raises:
        IllegalMove: the declaration does not allow ``expect -> to`` (before any statement).
        peewee.DatabaseError: the ledger cannot serve (as every statement).
    """
    states = _expected(expect)
    state.check(states, to)
    values = {state.column: to, **fields}
    when = tuple(when)
    if when:
        return _move_with_peewee(state, where, states, values, when)
    model = state.model
    named = tuple(s for s in states if s is not None and s != SET)
    null, held = None in states, SET in states
    concrete = database.obj
    key = (concrete.param, state.name, tuple(values), tuple(where), len(named), null, held)
    sql = _TEXTS.get(key)
    if sql is None:
        shape = (tuple(values), tuple(where), named, null, held)
        sql = _TEXTS[key] = _update_text(model, state, *shape)
    fields_of = model._meta.fields
    column = fields_of[state.column]
    params = [fields_of[name].db_value(value) for name, value in values.items()]
    params += [fields_of[name].db_value(value) for name, value in where.items()]
    params += [column.db_value(s) for s in named]
    return concrete.execute_sql(sql, params).rowcount


def _update_text(model, state: StateColumn, names, where_names, named, null, held) -> str:
    p = database.obj.param
    fields_of = model._meta.fields

    def q(name: str) -> str:
        return f'"{fields_of[name].column_name}"'

    assignments = ", ".join(f"{q(n)} = {p}" for n in names)
    conditions = [f"{q(n)} = {p}" for n in where_names]
    column = q(state.column)
    alternatives = []
    if named:
        alternatives.append(f"{column} IN ({', '.join([p] * len(named))})")
    if null:
        alternatives.append(f"{column} IS NULL")
    if held:
        alternatives.append(f"{column} IS NOT NULL")
    conditions.append("(" + " OR ".join(alternatives) + ")")
    table = f'"{model._meta.table_name}"'
    return f"UPDATE {table} SET {assignments} WHERE {' AND '.join(conditions)}"


def _move_with_peewee(state: StateColumn, where, states, values, when) -> int:
    model = state.model
    column = getattr(model, state.column)
    named = [s for s in states if s is not None and s != SET]
    alternatives = []
    if named:
        alternatives.append(column.in_(named))
    if None in states:
        alternatives.append(column.is_null())
    if SET in states:
        alternatives.append(column.is_null(False))
    matches = alternatives[0]
    for alternative in alternatives[1:]:
        matches = matches | alternative
    conditions = [getattr(model, name) == value for name, value in where.items()]
    return model.update(**values).where(*conditions, matches, *when).execute()
