"""The rows the hot path's plain SQL returns (:mod:`gateway.ledger.hot_sql`, issue 51): plain
Python objects, one class per table, built through peewee's public API only.

What: :data:`JobRow`, :data:`SiteRow`, :data:`LeaseRow`, :data:`OperationRow` and
:data:`CheckpointRow`, each a slotted dataclass made from its model's fields in the model's
order (``Model._meta.sorted_fields``, peewee's documented table metadata): one attribute per
field, named as the field, holding the value peewee's own ``SELECT`` gives (each field's
``python_value`` applied by :mod:`gateway.ledger.hot_sql`). A new column of the model is a new
attribute of its row class, with no change here. The methods the model defines itself (not
peewee's: ``Operation.as_dict``) are the row class's too, so a reader calls them on either. A
job read with its site and lease has two attributes more, ``site_row`` and ``lease_row`` (None:
the site was removed, the job was never leased), as peewee's join with ``attr=`` names them.

Why not the models' instances: peewee documents one way to make an instance, its constructor
``Model(**columns)``, which evaluates every default and writes every field through its
descriptor (about 22 µs for an operation's 21 fields, against 0.5 µs for
``OperationRow(*columns)``; a replay reads an operation, a job, its site and its lease). Making
one as peewee's ``SELECT`` does takes its private instance attributes (``__data__``,
``_dirty``, ``__rel__``), which tied the gateway to one peewee minor until issue 51.

What a reader may rely on, whichever way a row was read (a model instance from a peewee query,
or one of these): the field attributes, read and written (the mover and
:func:`gateway.jobs.records.touch` write back what they wrote, as on an instance), and the
model's own methods. Not a model: no ``save()``, no query methods, no ``_meta``; a misspelt
attribute raises ``AttributeError`` (no instance dictionary); equality is identity (peewee
compares class and primary key; nothing in the gateway compares rows); ``repr`` names the class
and id only, as peewee's does (a site row holds its encrypted password).
``tests/test_statements.py`` compares each row with peewee's own, attribute by attribute, on
SQLite and PostgreSQL, and checks that every method a model defines is its row class's.
"""

from __future__ import annotations

import dataclasses
import inspect

from peewee import Model

from gateway.ledger.models import Checkpoint
from gateway.ledger.models import Job
from gateway.ledger.models import Lease
from gateway.ledger.models import Operation
from gateway.ledger.models import Site


class Row:
    """The base of every row class: no instance dictionary, and peewee's ``repr``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: {getattr(self, 'id', None)}>"


def own_methods(model) -> dict:
    """The methods ``model`` and its bases define below peewee's ``Model`` (name -> function),
    which its rows share; nested classes (``Meta``, ``DoesNotExist``) and fields excluded."""
    methods = {}
    for cls in reversed(model.__mro__[: model.__mro__.index(Model)]):
        for name, value in vars(cls).items():
            if inspect.isfunction(value) and not name.startswith("__"):
                methods[name] = value
    return methods


def row_class(model, joined: tuple[str, ...] = ()) -> type:
    """The row class of ``model``: a slotted, mutable dataclass named ``<Model>Row`` whose
    positional arguments are the model's fields in their order (``_meta.sorted_fields``),
    then ``joined`` (rows read in the same statement; None by default), with the model's own
    methods (:func:`own_methods`)."""
    names = [f.name for f in model._meta.sorted_fields]
    spec = [*names, *((name, object, dataclasses.field(default=None)) for name in joined)]
    made = dataclasses.make_dataclass(
        f"{model.__name__}Row",
        spec,
        bases=(Row,),
        namespace=own_methods(model),
        slots=True,
        eq=False,
        repr=False,
    )
    made.__module__ = __name__
    return made


SiteRow = row_class(Site)
LeaseRow = row_class(Lease)
JobRow = row_class(Job, joined=("site_row", "lease_row"))
OperationRow = row_class(Operation)
CheckpointRow = row_class(Checkpoint)
