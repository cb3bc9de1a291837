"""Validation at the edge: JSON Schema files in ``gateway/schemas`` (``jsonschema`` library,
draft 2020-12, validators compiled once per process), every error reported with its JSON
pointer (RFC 6901) as ``{"pointer": "/seo/title", "message": "..."}``.
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources

from jsonschema import Draft202012Validator

from gateway import exceptions as exc

JOB_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
SLOT = re.compile(r"^[a-z0-9_-]{1,64}$")
TENANT = re.compile(r"^[a-z0-9_-]{1,64}$")


def schema_names() -> list[str]:
    """The names of the request schemas in ``gateway/schemas`` (``draft`` for ``draft.json``),
    sorted."""
    folder = resources.files("gateway").joinpath("schemas")
    return sorted(p.name[: -len(".json")] for p in folder.iterdir() if p.name.endswith(".json"))


@cache
def schema(name: str) -> dict:
    """The JSON Schema document ``schemas/{name}.json``, as loaded from the file (the one
    source of both validation and the OpenAPI document; do not mutate it)."""
    text = resources.files("gateway").joinpath("schemas", f"{name}.json").read_text("utf-8")
    return json.loads(text)


@cache
def validator(name: str) -> Draft202012Validator:
    """The compiled validator of ``schemas/{name}.json``."""
    document = schema(name)
    Draft202012Validator.check_schema(document)
    return Draft202012Validator(document)


def _pointer(parts) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _errors(error) -> list[dict]:
    path = list(error.absolute_path)
    if error.validator == "additionalProperties":
        allowed = set(error.schema.get("properties", {}))
        return [
            {"pointer": _pointer(path + [name]), "message": "unknown field"}
            for name in sorted(set(error.instance) - allowed)
        ]
    if error.validator == "required":
        missing = [n for n in error.validator_value if n not in error.instance]
        return [
            {"pointer": _pointer(path + [name]), "message": "required field missing"}
            for name in missing
        ]
    return [{"pointer": _pointer(path), "message": error.message}]


def validate(name: str, document) -> dict:
    """Validate ``document`` against schema ``name`` and return it.

    Raises:
        ValidationFailed: with ``errors``, one entry per problem, sorted by pointer.
    """
    found = []
    for error in validator(name).iter_errors(document):
        found.extend(_errors(error))
    if found:
        found = [dict(t) for t in dict.fromkeys(tuple(sorted(e.items())) for e in found)]
        found.sort(key=lambda e: e["pointer"])
        raise exc.ValidationFailed(f"{len(found)} problem(s) in the request body", errors=found)
    return document


def check_identifier(value: str, pattern: re.Pattern, pointer: str, what: str) -> str:
    """Check a path parameter such as ``job_id`` or ``slot``.

    Raises:
        ValidationFailed: ``value`` does not match ``pattern``.
    """
    if not pattern.match(value):
        raise exc.ValidationFailed(
            f"invalid {what}",
            errors=[{"pointer": pointer, "message": f"{what} must match {pattern.pattern}"}],
        )
    return value
