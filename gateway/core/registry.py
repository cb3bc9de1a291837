"""One registry type for the gateway's named parts: the actions
(:mod:`gateway.operations.registry`), the review deciders (:mod:`gateway.editorial.resolution`)
and the doctor checks (:mod:`gateway.operator.doctor_registry`).

A :class:`Registry` maps a name to an entry, in registration order. Registering a name that
is taken raises :class:`NameTaken` (a second module claiming a name is a bug; a silent
replacement hid one); asking for a name that is not there raises the registry's own
:class:`UnknownName` subclass (``UnknownAction``...). Parts register at import, and the
composition root (:mod:`gateway.composition`) imports them all, so each registry is complete in
every process. The design follows huey's task registry, which refuses a second task of one
name (``huey.registry.Registry.register``).

How to use it::

    checks: Registry[Check] = Registry("doctor check", UnknownCheck)
    checks.add(check.name, check)       # NameTaken when the name is registered already
    checks.get("rest_api")              # UnknownCheck when it is not
    "rest_api" in checks; list(checks)  # membership; the entries in registration order
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic
from typing import TypeVar

T = TypeVar("T")


class NameTaken(ValueError):
    """A name registered twice (the first entry stays). ``registry`` and ``name`` say which."""

    def __init__(self, registry: str, name: str):
        super().__init__(f"a {registry} named {name!r} is registered already")
        self.registry = registry
        self.name = name


class UnknownName(LookupError):
    """No entry of this name is registered. Each registry raises a subclass of its own."""


class Registry(Generic[T]):
    """Named entries of one kind, in registration order.

    Args:
        what: what an entry is, for messages (``action``, ``review decider``, ``doctor check``).
        unknown: the :class:`UnknownName` subclass :meth:`get` raises.
    """

    def __init__(self, what: str, unknown: type[UnknownName] = UnknownName):
        self.what = what
        self.unknown = unknown
        self._entries: dict[str, T] = {}

    def add(self, name: str, entry: T) -> T:
        """Register ``entry`` under ``name`` and return it.

        Raises:
            NameTaken: ``name`` is registered already (nothing changes).
        """
        if name in self._entries:
            raise NameTaken(self.what, name)
        self._entries[name] = entry
        return entry

    def remove(self, name: str) -> None:
        """Forget ``name`` (tests that register an entry of their own); absent is fine."""
        self._entries.pop(name, None)

    def get(self, name: str) -> T:
        """The entry registered under ``name``.

        Raises:
            UnknownName (the registry's subclass): nothing of that name is registered.
        """
        try:
            return self._entries[name]
        except KeyError:
            raise self.unknown(f"no {self.what} {name!r} is registered") from None

    def names(self) -> list[str]:
        """The registered names, in registration order."""
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[T]:
        """The entries (not the names), in registration order."""
        return iter(list(self._entries.values()))

    def __len__(self) -> int:
        return len(self._entries)
