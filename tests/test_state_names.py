"""Each name once (issue 51): outside ``gateway/core/states.py`` no module of ``gateway/``
spells a value of the gateway's own states as a string; it uses the name.

Which values: those the declarations name, read at run time so that a state column declared
later is covered without touching this test: every declared state column
(:func:`gateway.ledger.moves.declared`: the from-states and to-states of its moves, minus
NULL and :data:`gateway.ledger.moves.SET`), the job's phases, and the operation and
notification states (with the view's own, ``UNSUBSCRIBED``).

Of those, only the values that are the gateway's own words are banned:

* every job phase (``states.PHASES``): the phases are the gateway's vocabulary, and
  ``"published"`` was spelled in 22 places;
* any other value with an underscore or in upper case (``PREPARED``, ``approval_pending``):
  no English word and no other system's answer is spelled so by accident;
* not a lower-case word without an underscore that is no phase (a review's ``"open"``): the
  same word is a file mode, a word of prose or another system's state, and a scan for it
  would ban them too; the move tables name such a value and the mover refuses any move they
  do not declare, which is where a misspelling shows;
* not a value another system spells the same way (:data:`NOT_OURS`, each with its reason).

Where a string is not a value: a docstring (or any bare string statement), a dict key and a
subscript (JSON keys: ``{"verified": ...}``, ``counts["published"]``). Everything else is:
a comparison, an argument, an assignment, a member of a tuple or set, a dict's value. A SQL
text that quotes a banned value (``state != 'CONFIRMED'``) counts too. Replaces the scan of
operation states that ``tests/test_states.py`` had.
"""

from __future__ import annotations

import ast
from pathlib import Path

from gateway.core import states
from gateway.ledger import models  # noqa: F401 - declares the ledger's state columns
from gateway.ledger import moves

ROOT = Path(__file__).resolve().parents[1]
STATES_MODULE = ROOT / "gateway" / "core" / "states.py"

#: Values of our columns that another system spells the same way: not ours to ban.
NOT_OURS = {
    "in_progress": "OpenAI's status of a response and an agent session "
    "(gateway/agents/sessions.py, stops.py compare what OpenAI answered)",
}


def declared_values() -> set[str]:
    """Every value the declarations name: the declared columns' states, the job phases, the
    operation and notification states."""
    values = set(states.PHASES) | set(states.STATES) | set(states.NOTIFICATION_VIEW_STATES)
    for column in moves.declared():
        for before, targets in column.moves.items():
            values |= {before, *targets}
    return {v for v in values if isinstance(v, str) and v != moves.SET}


def ours(value: str) -> bool:
    """Whether ``value`` is banned outside core/states.py (see the module docstring)."""
    if value in NOT_OURS:
        return False
    return value in states.PHASES or "_" in value or value.isupper()


def banned() -> frozenset[str]:
    return frozenset(v for v in declared_values() if ours(v))


def _no_values(node: ast.AST) -> list[ast.AST]:
    """The children of ``node`` whose string is no value: a bare string statement (a
    docstring), a dict's keys, a subscript."""
    if isinstance(node, ast.Expr):
        return [node.value]
    if isinstance(node, ast.Dict):
        return [key for key in node.keys if key is not None]
    if isinstance(node, ast.Subscript):
        return [node.slice]
    return []


def spelled(source: str, values: frozenset[str], name: str = "<source>") -> list[str]:
    """``name:line 'value'`` for every string constant of ``source`` that is a value in
    ``values`` (or quotes one as SQL does), docstrings, dict keys and subscripts left out."""
    quoted = {f"'{v}'": v for v in values}
    skip: set[int] = set()
    found = []
    for node in ast.walk(ast.parse(source)):  # breadth first: a parent before its children
        skip.update(id(child) for child in _no_values(node))
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
            continue
        if id(node) in skip:
            continue
        hits = [node.value] if node.value in values else []
        hits += [v for q, v in quoted.items() if q in node.value]
        found += [f"{name}:{node.lineno} {hit!r}" for hit in hits]
    return found


def test_the_banned_values_come_from_the_declarations():
    values = banned()
    assert {states.PUBLISHED, states.SCHEDULED, states.VERIFIED, states.DRAFT_CONFIRMED} <= values
    assert set(states.STATES) | set(states.NOTIFICATION_VIEW_STATES) <= values
    for column in moves.declared():  # each declared column's own words are banned
        for before, targets in column.moves.items():
            assert {v for v in (before, *targets) if isinstance(v, str) and ours(v)} <= values
    assert "in_progress" not in values and moves.SET not in values


def test_no_module_spells_a_value_of_a_declared_state():
    """Outside core/states.py a state, a phase or a phase set is used by its name
    (``states.PUBLISHED``, ``states.RUN_DONE_PHASES``), never spelled as a string."""
    values = banned()
    found = []
    for path in sorted((ROOT / "gateway").rglob("*.py")):
        if path == STATES_MODULE:
            continue
        found += spelled(path.read_text("utf-8"), values, str(path.relative_to(ROOT)))
    assert found == []


def test_the_scan_catches_a_planted_literal():
    """A real module with its phase written as a string again is caught; the same string as
    a docstring, a dict key or a subscript is not."""
    values = banned()
    module = ROOT / "gateway" / "operator" / "retention.py"
    source = module.read_text("utf-8")
    assert "states.PUBLISHED" in source and spelled(source, values) == []
    planted = source.replace("states.PUBLISHED", '"published"')
    assert [hit.split(" ", 1)[1] for hit in spelled(planted, values)] == ["'published'"]
    assert spelled("x = {'PREPARED': 1}['SENT']\ny = 'WHERE state = \\'SENT\\''", values) == [
        "<source>:2 'SENT'"
    ]
    assert spelled('"""published"""\nrecords.touch(job, phase="approval_pending")', values) == [
        "<source>:2 'approval_pending'"
    ]
