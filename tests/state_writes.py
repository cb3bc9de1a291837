"""The AST scan behind ``tests/test_transitions.py``: every write of a declared state column
outside :func:`gateway.ledger.moves.move` (issue 51).

The guarded (model, column) pairs are read from :func:`gateway.ledger.moves.declared`, so a
column declared by any module is covered the moment it is declared. A write is:

* ``Model.update(col=...)``, ``Model.update({Model.col: ...})``, ``Model.update({"col": ...})``
  and ``Model.replace(...)`` of a guarded column (an UPDATE: only the mover may);
* ``Model.create/insert/insert_many/get_or_create(...)`` writing a guarded column with a value
  that is not one of its declaration's ``initial`` values (resolved through the file's own
  imports: ``state=KEY_IN_PROGRESS``, ``status=states.EVENT_PENDING``; a value the scan cannot
  resolve passes only where the declaration's initial values are :data:`~states.SET`, any
  value: a lease's owner);
* the wrappers that write a job's or an operation's columns by name (:data:`WRAPPERS`:
  ``records.touch(job, phase=...)``, ``hot_sql.update_job(id, {"phase": ...})``...), and
  hot_sql's operation statements (:data:`HOT_MOVES`, the state is an argument);
* ``Model.insert(...).on_conflict(update=...)`` and ``.on_conflict_replace()`` of a guarded
  column (an upsert's UPDATE);
* ``x.save()`` without arguments (a model's save writes every column it holds);
* a ``**name`` splat or a ``name`` argument into one of these whose ``name`` is given a
  guarded column in the same function (``fields["phase"] = phase; touch(job, **fields)``,
  ``values = {"phase": ...}; hot_sql.insert_job(values)``).

A column that is part of a state's claim (:data:`CLAIMS`: a notification's delivery claim) may
be written only in its state's owner module (the declaration's ``owner``).
"""

from __future__ import annotations

import ast
import sys

from gateway.core import states
from gateway.ledger import moves
from gateway.ledger import oauth_models  # noqa: F401 - its declarations
from gateway.ledger.models import NOTIFICATION_STATE
from gateway.ledger.models import WEBHOOK_DELIVERY_STATE

UPDATES = {"update", "replace"}
INSERTS = {"insert", "create", "insert_many", "get_or_create"}
UPSERTS = {"on_conflict", "on_conflict_replace"}  # Model.insert(...).on_conflict(update=...)
# A function that writes a model's columns named by keyword or by a dict's keys:
# name -> (model, "update" or "insert").
WRAPPERS = {
    "touch": ("Job", "update"),  # gateway.jobs.records.touch(job, **fields)
    "update_job": ("Job", "update"),  # gateway.ledger.hot_sql.update_job(id, values)
    "insert_job": ("Job", "insert"),  # gateway.ledger.hot_sql.insert_job(values)
    "insert_operation": ("Operation", "insert"),  # gateway.ledger.hot_sql.insert_operation
}
# hot_sql statements whose state is an argument: only the mover's owner calls them.
HOT_MOVES = {"move_operation", "confirm_operation"}
# (model, column) -> the state whose claim it is: written only in that state's owner module.
CLAIMS = {
    ("Notification", "claimed_until"): NOTIFICATION_STATE,
    ("Notification", "refusals"): NOTIFICATION_STATE,
    ("WebhookDelivery", "claimed_until"): WEBHOOK_DELIVERY_STATE,
    ("WebhookDelivery", "refusals"): WEBHOOK_DELIVERY_STATE,
}
UNRESOLVED = object()


def guarded() -> dict[str, dict[str, moves.StateColumn]]:
    """model class name -> {column: its declaration}, from :func:`moves.declared`."""
    found: dict[str, dict[str, moves.StateColumn]] = {}
    for column in moves.declared():
        found.setdefault(column.model.__name__, {})[column.column] = column
    return found


def _namespace(imports: list[ast.ImportFrom]) -> dict[str, object]:
    """The file's imported names -> their objects (modules or values). Only modules imported
    already are read (where states are named: core, the ledger's models); a name imported
    from any other module is not resolved."""
    names: dict[str, object] = {}
    for node in imports:
        if node.module and node.level == 0:
            module = sys.modules.get(node.module)
            for alias in node.names:
                value = getattr(module, alias.name, UNRESOLVED)
                if value is UNRESOLVED:
                    value = sys.modules.get(f"{node.module}.{alias.name}", UNRESOLVED)
                names[alias.asname or alias.name] = value
    return names


def _value(node: ast.AST, names: dict) -> object:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id, UNRESOLVED)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        owner = names.get(node.value.id, UNRESOLVED)
        return UNRESOLVED if owner is UNRESOLVED else getattr(owner, node.attr, UNRESOLVED)
    return UNRESOLVED


def _initial(column: moves.StateColumn, value) -> bool:
    """May an INSERT write ``value`` into ``column``?"""
    if value is UNRESOLVED:
        return states.SET in column.initial
    if value is None:
        return None in column.initial
    return column.kind(value) in column.initial


def _model_of(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _key(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Attribute):  # {Model.state: ...}
        return node.attr
    return None


def _dicts(node: ast.AST):
    if isinstance(node, ast.Dict):
        yield node
    elif isinstance(node, ast.List | ast.Tuple):
        for item in node.elts:
            yield from _dicts(item)


def _written(call: ast.Call, splats: dict[str, list]) -> list[tuple[str, ast.AST | None]]:
    """(column name, value node) of every column ``call`` writes by keyword, dict key, a
    ``defaults=`` dict, or a ``**name`` splat traced in the enclosing function."""
    pairs = []
    for keyword in call.keywords:
        if keyword.arg is None:
            if isinstance(keyword.value, ast.Name):
                pairs += splats.get(keyword.value.id, [])
            for found in _dicts(keyword.value):
                pairs += [(_key(k), v) for k, v in zip(found.keys, found.values, strict=True)]
        elif keyword.arg == "defaults":
            for found in _dicts(keyword.value):
                pairs += [(_key(k), v) for k, v in zip(found.keys, found.values, strict=True)]
        else:
            pairs.append((keyword.arg, keyword.value))
    for arg in call.args:
        if isinstance(arg, ast.Name):  # insert_job(values): what the function gave values
            pairs += splats.get(arg.id, [])
        for found in _dicts(arg):
            for key, value in zip(found.keys, found.values, strict=True):
                if key is None and isinstance(value, ast.Name):  # {**fields}
                    pairs += splats.get(value.id, [])
                else:
                    pairs.append((_key(key), value))
    return [(name, value) for name, value in pairs if name]


def _splats(function: ast.AST) -> dict[str, list]:
    """name -> (column, value) pairs a function gives a dict: ``name["col"] = v``,
    ``name = {"col": v}``, ``name.update(col=v)``."""
    found: dict[str, list] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                    key = _key(target.slice)
                    if key:
                        found.setdefault(target.value.id, []).append((key, node.value))
                elif isinstance(target, ast.Name) and isinstance(node.value, ast.Dict):
                    pairs = zip(node.value.keys, node.value.values, strict=True)
                    found.setdefault(target.id, []).extend((_key(k), v) for k, v in pairs)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "update"
            and isinstance(node.func.value, ast.Name)
        ):
            for keyword in node.keywords:
                if keyword.arg:
                    found.setdefault(node.func.value.id, []).append((keyword.arg, keyword.value))
    return found


def state_writes(
    source: str, filename: str = "<source>", module: str = "", columns: dict | None = None
) -> list[str]:
    """Every write in ``source`` (the module ``module``) of a guarded column outside the mover
    (see the module's docstring): ``file:line what``. ``columns``: :func:`guarded` unless
    given (a test plants a declaration of its own)."""
    columns = guarded() if columns is None else columns
    calls: list[tuple[ast.Call, ast.AST]] = []  # each call and its innermost function
    imports: list[ast.ImportFrom] = []

    def visit(node: ast.AST, function: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Call):
                calls.append((child, function))
            elif isinstance(child, ast.ImportFrom):
                imports.append(child)
            inner = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            visit(child, child if inner else function)

    tree = ast.parse(source, filename)
    visit(tree, tree)
    names = _namespace(imports)
    traced: dict[int, dict] = {}  # the splats of a function, traced when one is used
    found = []
    for node, function in calls:
        if id(function) not in traced:
            traced[id(function)] = _Splats(function)
        splats = traced[id(function)]
        where = f"{filename}:{node.lineno}"
        if isinstance(node.func, ast.Attribute):
            found += _call(node, where, module, names, splats, columns)
        elif isinstance(node.func, ast.Name) and node.func.id in WRAPPERS:
            found += _wrapper(node, node.func.id, where, names, splats, columns)
    return sorted(found, key=lambda f: int(f.split(" ", 1)[0].rsplit(":", 1)[1]))


class _Splats(dict):
    """:func:`_splats` of ``function``, traced on first use (most calls splat nothing)."""

    def __init__(self, function: ast.AST):
        super().__init__()
        self.function, self.traced = function, False

    def get(self, name, default=None):
        if not self.traced:
            self.update(_splats(self.function))
            self.traced = True
        return super().get(name, default)


def _call(node: ast.Call, where, module, names, splats, columns) -> list[str]:
    method = node.func.attr
    if method in HOT_MOVES:
        return [f"{where} hot_sql.{method}"]
    if method == "save" and not node.args:
        return [f"{where} .save()"]
    if method in WRAPPERS:
        return _wrapper(node, method, where, names, splats, columns)
    if method in UPSERTS and isinstance(node.func.value, ast.Call):  # insert(...).on_conflict
        return _upsert(node, where, splats, columns)
    model = _model_of(node.func.value)
    if method not in UPDATES | INSERTS or model is None:
        return []
    found = []
    for column, value in _written(node, splats):
        claim = CLAIMS.get((model, column))
        if claim is not None and module != claim.owner:
            found.append(f"{where} {model}.{method}({column}) outside {claim.owner}")
        declared = columns.get(model, {}).get(column)
        if declared is None:
            continue
        if method in UPDATES or not _initial(declared, _value(value, names)):
            found.append(f"{where} {model}.{method}({column})")
    return found


def _upsert(node: ast.Call, where, splats, columns) -> list[str]:
    """``Model.insert(...).on_conflict(update=...)`` / ``.on_conflict_replace()``: an UPDATE
    of the columns it updates (or of every inserted column, for a replace)."""
    insert = node.func.value
    if not isinstance(insert.func, ast.Attribute) or insert.func.attr not in INSERTS:
        return []
    model = _model_of(insert.func.value)
    if node.func.attr == "on_conflict_replace":
        written = _written(insert, splats)
    else:
        update = [ast.keyword(arg=None, value=k.value) for k in node.keywords if k.arg == "update"]
        written = _written(ast.Call(func=node.func, args=[], keywords=update), splats)
        for keyword in node.keywords:  # preserve=[Model.col, ...]: the inserted value
            if keyword.arg == "preserve" and isinstance(keyword.value, ast.List | ast.Tuple):
                written += [(_key(e), None) for e in keyword.value.elts if _key(e)]
    named = {column for column, _ in written} & set(columns.get(model, {}))
    return [f"{where} {model}.{node.func.attr}({column})" for column in sorted(named)]


def _wrapper(node: ast.Call, name: str, where, names, splats, columns) -> list[str]:
    model, kind = WRAPPERS[name]
    found = []
    for column, value in _written(node, splats):
        declared = columns.get(model, {}).get(column)
        if declared is None:
            continue
        if kind == "update" or not _initial(declared, _value(value, names)):
            found.append(f"{where} {name}({column})")
    return found
