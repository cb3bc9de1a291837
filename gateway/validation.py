"""Validation at the edge: JSON Schema files in ``gateway/schemas`` (``jsonschema`` library,
draft 2020-12, validators compiled once per process), every error reported with its JSON
pointer (RFC 6901) as ``{"pointer": "/seo/title", "message": "..."}``.

* One definition of an acceptable text field, ``schemas/text.json`` (no control characters
  but tab, CR and LF), referenced by every free-text field of every schema.
* Messages quote at most :data:`QUOTE_CHARS` characters of any value, so a 3 MB field that
  fails does not come back as a 3 MB problem body.
* Integers arrive as JSON numbers: ``1.0`` is valid for an ``integer`` field (JSON Schema says
  so) and is handed on as the ``int`` 1, as it is stored.
* :func:`check_template_leftovers`: nothing template-like reaches WordPress.
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources

from jsonschema import Draft202012Validator
from referencing import Registry
from referencing import Resource

from gateway import exceptions as exc

JOB_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
SLOT = re.compile(r"^[a-z0-9_-]{1,64}$")
TENANT = re.compile(r"^[a-z0-9_-]{1,64}$")


TEXT_SCHEMA_ID = "https://publishing-gateway.dev/schemas/text.json"
SHARED_SCHEMAS = ("text",)  # definitions other schemas refer to, not request bodies
QUOTE_CHARS = 40
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_BRACES = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
_PLACEHOLDER = re.compile(r"\{\{media:[a-z0-9_-]{1,64}\}\}")
TEMPLATE_FIELDS = {"draft": ("/title", "/content", "/excerpt", "/seo/title",
                             "/seo/description", "/seo/focus_keyword")}  # fmt: skip


def schema_names() -> list[str]:
    """The names of the request schemas in ``gateway/schemas`` (``draft`` for ``draft.json``),
    sorted; shared definitions (``text.json``) are not request schemas."""
    folder = resources.files("gateway").joinpath("schemas")
    names = (p.name[: -len(".json")] for p in folder.iterdir() if p.name.endswith(".json"))
    return sorted(n for n in names if n not in SHARED_SCHEMAS)


@cache
def schema(name: str) -> dict:
    """The JSON Schema document ``schemas/{name}.json``, as loaded from the file (the one
    source of both validation and the OpenAPI document; do not mutate it)."""
    text = resources.files("gateway").joinpath("schemas", f"{name}.json").read_text("utf-8")
    return json.loads(text)


@cache
def _registry() -> Registry:
    return Registry().with_resource(TEXT_SCHEMA_ID, Resource.from_contents(schema("text")))


@cache
def validator(name: str) -> Draft202012Validator:
    """The compiled validator of ``schemas/{name}.json`` (``text.json`` resolvable)."""
    document = schema(name)
    Draft202012Validator.check_schema(document)
    return Draft202012Validator(document, registry=_registry())


def quote(value) -> str:
    """``value`` for a message: its JSON, cut to :data:`QUOTE_CHARS` characters."""
    text = json.dumps(value, ensure_ascii=True) if not isinstance(value, str) else repr(value)
    return text if len(text) <= QUOTE_CHARS else text[: QUOTE_CHARS - 1] + "…"


def _message(error) -> str:
    instance = error.instance
    if error.validator == "pattern" and isinstance(instance, str):
        bad = _CONTROL.search(instance)
        if bad and error.validator_value == _registry().contents(TEXT_SCHEMA_ID)["pattern"]:
            return (
                f"control character U+{ord(bad.group()):04X} at character {bad.start()} is "
                "not allowed (tab, CR and LF are)"
            )
        return f"{quote(instance)} does not match {error.validator_value}"
    if error.validator in ("maxLength", "minLength") and isinstance(instance, str):
        word = "at most" if error.validator == "maxLength" else "at least"
        return f"must be {word} {error.validator_value} characters ({len(instance)} given)"
    if error.validator in ("maxItems", "minItems") and isinstance(instance, list):
        word = "at most" if error.validator == "maxItems" else "at least"
        return f"must have {word} {error.validator_value} items ({len(instance)} given)"
    message = error.message
    if isinstance(instance, str | list | dict):  # jsonschema quotes the whole value
        message = message.replace(repr(instance), quote(instance))
    return message if len(message) <= 300 else message[:299] + "…"


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
    return [{"pointer": _pointer(path), "message": _message(error)}]


def validate(name: str, document) -> dict:
    """Validate ``document`` against schema ``name`` and return it, integral numbers of
    ``integer`` fields as ``int``; a draft also passes :func:`check_template_leftovers`.

    Raises:
        ValidationFailed: with ``errors``, one entry per problem, sorted by pointer.
        TemplateLeftover: a draft field holds an unevaluated template expression.
    """
    return check(validator(name), document, name)


def check(compiled: Draft202012Validator, document, name: str | None = None):
    """Validate ``document`` with a compiled validator (e.g. an agent tool's parameters,
    generated from these schema files) and return it as :func:`validate` does; ``name`` is
    the schema file the validator was made from (its template-leftover rules apply).

    Raises:
        ValidationFailed: with ``errors``, one entry per problem, sorted by pointer.
        TemplateLeftover: a draft field holds an unevaluated template expression.
    """
    found = []
    for error in compiled.iter_errors(document):
        found.extend(_errors(error))
    if found:
        found = [dict(t) for t in dict.fromkeys(tuple(sorted(e.items())) for e in found)]
        found.sort(key=lambda e: e["pointer"])
        raise exc.ValidationFailed(f"{len(found)} problem(s) in the request body", errors=found)
    document = _integers(compiled.schema, document)
    if name in TEMPLATE_FIELDS:
        check_template_leftovers(document, TEMPLATE_FIELDS[name])
    return document


def _integers(schema: dict, value):
    """``value`` with integral floats turned into ints wherever ``schema`` (properties and
    items, recursively) says ``integer``."""
    if isinstance(value, float) and schema.get("type") == "integer" and value.is_integer():
        return int(value)
    if isinstance(value, dict) and "properties" in schema:
        props = schema["properties"]
        return {k: _integers(props[k], v) if k in props else v for k, v in value.items()}
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_integers(schema["items"], v) for v in value]
    return value


def _at(document: dict, pointer: str):
    value = document
    for part in pointer.strip("/").split("/"):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def check_template_leftovers(document: dict, pointers: tuple[str, ...]) -> None:
    """Refuse text that a template engine should have replaced: a ``{{ ... }}`` whose inside,
    trimmed, starts with ``$`` (an n8n expression never evaluated, ``{{ $json.title }}``) or
    with ``media`` in any case, unless it is exactly the placeholder ``{{media:SLOT}}``.
    Other double braces (a code sample, a Handlebars snippet) pass.

    Raises:
        TemplateLeftover (422): ``errors`` names each leftover (quoted short) and its pointer.
    """
    found = []
    for pointer in pointers:
        text = _at(document, pointer)
        if not isinstance(text, str) or "{{" not in text:
            continue
        for match in _BRACES.finditer(text):
            inside = match.group(1).strip()
            if not (inside.startswith("$") or inside.lower().startswith("media")):
                continue
            if _PLACEHOLDER.fullmatch(match.group()):
                continue
            found.append(
                {
                    "pointer": pointer,
                    "message": f"template leftover {quote(match.group())} at character "
                    f"{match.start()}; placeholders are exactly {{{{media:SLOT}}}}",
                    "leftover": match.group()[:QUOTE_CHARS],
                }
            )
    if found:
        raise exc.TemplateLeftover(
            f"{len(found)} template leftover(s): text that a template should have replaced "
            "would reach WordPress verbatim",
            errors=found,
        )


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
