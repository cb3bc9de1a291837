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

from gateway.ledger.db import database

# The to-state of a set-once column's one move: any value but NULL.
SET = "<set>"
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
    """

    model: type
    column: str
    moves: Mapping[str | None, frozenset]
    owner: str
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

    def allows(self, from_state, to) -> bool:
        """True when the declaration allows ``from_state -> to``."""
        if self.set_once:
            return from_state is None and to is not None
        return to in self.moves.get(from_state, ())

    def check(self, from_states: Iterable, to) -> None:
        """Raise :class:`IllegalMove` unless every ``from_states -> to`` is declared."""
        for state in from_states:
            if not self.allows(state, to):
                raise IllegalMove(f"{self.name} may not move from {state} to {to}")


_DECLARED: dict[tuple[type, str], StateColumn] = {}


def declare(model, column: str, moves: Mapping, owner: str) -> StateColumn:
    """Declare ``model.column`` a state column with ``moves`` (see :class:`StateColumn`), and
    return its declaration.

    Raises:
        ValueError: the column is declared already (a registry refuses a taken name), or a
            to-state of ``moves`` is neither a key of ``moves`` nor a final state listed as
            one (a typo would otherwise be a state nothing can leave).
    """
    key = (model, column)
    if key in _DECLARED:
        raise ValueError(f"{model.__name__}.{column} is declared already")
    if moves is not SET_ONCE:
        for targets in moves.values():
            unknown = set(targets) - set(moves)
            if unknown:
                raise ValueError(f"{model.__name__}.{column}: no moves declared from {unknown}")
    declared_column = StateColumn(model, column, moves, owner)
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


_TEXTS: dict[tuple, str] = {}  # (parameter marker, table.column, set names, where names, n, null)


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
    named = tuple(s for s in states if s is not None)
    null = len(named) != len(states)
    concrete = database.obj
    key = (concrete.param, state.name, tuple(values), tuple(where), len(named), null)
    sql = _TEXTS.get(key)
    if sql is None:
        sql = _TEXTS[key] = _update_text(model, state, tuple(values), tuple(where), named, null)
    fields_of = model._meta.fields
    column = fields_of[state.column]
    params = [fields_of[name].db_value(value) for name, value in values.items()]
    params += [fields_of[name].db_value(value) for name, value in where.items()]
    params += [column.db_value(s) for s in named]
    return concrete.execute_sql(sql, params).rowcount


def _update_text(model, state: StateColumn, names, where_names, named, null: bool) -> str:
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
    conditions.append("(" + " OR ".join(alternatives) + ")")
    table = f'"{model._meta.table_name}"'
    return f"UPDATE {table} SET {assignments} WHERE {' AND '.join(conditions)}"


def _move_with_peewee(state: StateColumn, where, states, values, when) -> int:
    model = state.model
    column = getattr(model, state.column)
    named = [s for s in states if s is not None]
    alternatives = []
    if named:
        alternatives.append(column.in_(named))
    if len(named) != len(states):
        alternatives.append(column.is_null())
    matches = alternatives[0]
    for alternative in alternatives[1:]:
        matches = matches | alternative
    conditions = [getattr(model, name) == value for name, value in where.items()]
    return model.update(**values).where(*conditions, matches, *when).execute()
