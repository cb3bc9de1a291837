r"""Validation at the edge: JSON Schema files in ``gateway/schemas`` (``jsonschema`` library,
draft 2020-12, validators compiled once per process), every error reported with its JSON
pointer (RFC 6901) as ``{"pointer": "/seo/title", "message": "..."}``.

* One definition of an acceptable text field, ``schemas/text.json`` (no control characters
  but tab, CR and LF), referenced by every free-text field of every schema.
* Messages quote at most :data:`QUOTE_CHARS` characters of any value, so a 3 MB field that
  fails does not come back as a 3 MB problem body.
* Integers arrive as JSON numbers: ``1.0`` is valid for an ``integer`` field (JSON Schema says
  so) and is handed on as the ``int`` 1, as it is stored.
* :func:`check_template_leftovers`: nothing template-like reaches WordPress.
* A worker remembers the last :data:`PASSED_BODIES` request bodies that passed (schema name
  and SHA-256 of the bytes, nothing else): the same bytes again, a retry or replay, are
  not validated twice (:func:`validate_body`). Only passes are remembered; a refused body is
  checked, and refused, every time.

**Two validators per schema** (issue 32): the verdict comes first from the compiled one
(``jsonschema_rs``, Rust: a draft body's verdict in about 0.004 ms against 0.6 ms,
``docs/performance.md``), and only a body it does not pass is checked by ``jsonschema``, which
alone writes the errors, so an answer's errors are exactly what they were. The two agree on
every schema file and on the fuzz corpus (``tests/test_validation_differential.py``, which also
compares each pattern of the schema files in both regex dialects over the whole Basic
Multilingual Plane); a body the compiled one refuses that ``jsonschema`` passes (an integer
past 64 bits, which ``jsonschema_rs`` cannot hold; a ``\S`` field of only U+FEFF, a space in
ECMA-262's regex dialect) still passes, as before.

Identifiers match as a whole: path parameters with :meth:`re.Pattern.fullmatch` (``$`` in
Python's ``re`` also matches before a trailing newline, so ``"nl1\n"`` would pass), and the
JSON Schema patterns end with ``(?![\s\S])`` ("no character follows"), which means end of input
both under Python's ``re`` (what ``jsonschema`` uses, with ``re.search``) and in ECMA-262 (what
an OpenAPI document's readers use). Integers that become ledger columns are bounded by
:data:`MAX_DB_INT` (PostgreSQL ``integer``), so a huge id is a 4xx, never a database overflow.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import threading
from functools import cache
from importlib import resources

import jsonschema_rs
from jsonschema import Draft202012Validator
from referencing import Registry
from referencing import Resource

from gateway.core import exceptions as exc
from gateway.core import tool_schemas

# Written as the JSON Schema files write them (valid ECMA-262 for the OpenAPI document) and
# matched with fullmatch in code as well.
JOB_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}(?![\s\S])")
SLOT = re.compile(r"^[a-z0-9_-]{1,64}(?![\s\S])")
TENANT = re.compile(r"^[a-z0-9_-]{1,64}(?![\s\S])")
SITE_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}(?![\s\S])")
TOKEN_NAME = re.compile(r"^[A-Za-z0-9._@+-]{1,128}(?![\s\S])")
MAX_DB_INT = 2**31 - 1  # PostgreSQL integer; every id column of the ledger
MAX_JSON_DEPTH = 64  # arrays and objects nested in a request body
_DIGITS = re.compile(r"[0-9]{1,10}")


TEXT_SCHEMA_ID = "https://publishing-gateway.dev/schemas/text.json"
SHARED_SCHEMAS = ("text",)  # definitions other schemas refer to, not request bodies
QUOTE_CHARS = 40
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_BRACES = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
_PLACEHOLDER = re.compile(r"\{\{media:[a-z0-9_-]{1,64}\}\}")
# Every text of a request that reaches WordPress, by schema (``*``: each item of an array):
# the template-leftover guard (check_template_leftovers) looks at each of them, whichever door
# the request came through (the HTTP routes, /v1/articles/validate, MCP, the OpenAI tools).
TEMPLATE_FIELDS = {
    "draft": ("/title", "/content", "/excerpt", "/seo/title", "/seo/description",
              "/seo/focus_keyword", "/categories/*", "/categories/*/name",
              "/categories/*/parent", "/tags/*"),
    "media": ("/alt_text", "/caption", "/title"),
    "block": ("/html",),
    "article_validation": ("/media/*/alt_text", "/media/*/caption", "/media/*/title"),
}  # fmt: skip


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


@cache
def fast_validator(name: str) -> jsonschema_rs.Draft202012Validator:
    """The ``jsonschema_rs`` validator of ``schemas/{name}.json`` (``text.json`` resolvable,
    formats not asserted, as :func:`validator`): a verdict only, never the errors (module
    docstring)."""
    registry = jsonschema_rs.Registry([(TEXT_SCHEMA_ID, schema("text"))])
    return jsonschema_rs.Draft202012Validator(schema(name), registry=registry)


def inline_shared(node):
    """``node`` (a schema or part of one; not mutated) with the shared text-field definition
    (``schemas/text.json``) written into each field that refers to it: a schema that stands
    alone, as agents' tool parameters must (OpenAI function tools, MCP ``inputSchema``). A
    field with a pattern of its own keeps it, the text rule's beside it in ``allOf``."""
    if isinstance(node, list):
        return [inline_shared(v) for v in node]
    if not isinstance(node, dict):
        return node
    node = {k: inline_shared(v) for k, v in node.items()}
    if node.get("$ref") == TEXT_SCHEMA_ID:
        del node["$ref"]
        if "pattern" in node:  # a rule of its own too: term_name must not be blank
            node["allOf"] = [*node.get("allOf", []), {"pattern": text_pattern()}]
        else:
            node["pattern"] = text_pattern()
    return node


def text_pattern() -> str:
    """The shared text rule's pattern (``schemas/text.json``)."""
    return schema("text")["pattern"]


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
        # the pattern as the tools advertise it (ECMA-262's ``$`` for Python's strict end)
        return f"{quote(instance)} does not match {tool_schemas.ecma(error.validator_value)}"
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
    return check(validator(name), document, name, fast=fast_validator(name))


def check(
    compiled: Draft202012Validator,
    document,
    name: str | None = None,
    fast: jsonschema_rs.Draft202012Validator | None = None,
):
    """Validate ``document`` with a compiled validator (e.g. an agent tool's parameters,
    generated from these schema files) and return it as :func:`validate` does; ``name`` is
    the schema file the validator was made from (its template-leftover rules apply). ``fast``,
    the same schema's :func:`fast_validator`, lets a body it passes skip ``jsonschema``
    (module docstring).

    Raises:
        ValidationFailed: with ``errors``, one entry per problem, sorted by pointer.
        TemplateLeftover: a draft field holds an unevaluated template expression.
    """
    check_storable(document)
    if not _passes(fast, document):
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


def _passes(fast: jsonschema_rs.Draft202012Validator | None, document) -> bool:
    """Whether ``fast`` passes ``document`` (False without one). ``document`` holds what
    parsed JSON holds (dict, list, str, int, float, bool, None); a value ``jsonschema_rs``
    cannot take (ValueError) is left to ``jsonschema``."""
    if fast is None:
        return False
    try:
        return fast.is_valid(document)
    except ValueError:
        return False


# A lone UTF-16 surrogate: JSON's "\ud800" escape decodes to it (a pair decodes to one code
# point above U+FFFF), but it is not a Unicode scalar value, so UTF-8 cannot encode it and
# neither SQLite's driver nor PostgreSQL can store it (RFC 8259 section 8.2).
LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def check_storable(document) -> None:
    """Refuse text no ledger can store: a lone surrogate in any string of ``document``,
    member names included, wherever it is nested.

    Raises:
        ValidationFailed (422): one error per string, with its JSON pointer (a surrogate in
            a member name is written U+FFFD there: the answer itself must be UTF-8).
    """
    found: list[str] = []
    stack = [(document, [])]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            if LONE_SURROGATE.search(value):
                found.append(_pointer(path))
        elif isinstance(value, dict):
            for name, member in value.items():
                if isinstance(name, str) and LONE_SURROGATE.search(name):
                    found.append(_pointer([*path, name]))
                stack.append((member, [*path, name]))
        elif isinstance(value, list):
            stack.extend((item, [*path, index]) for index, item in enumerate(value))
    if found:
        message = "a lone UTF-16 surrogate (U+D800-U+DFFF) is not text and cannot be stored"
        raise exc.ValidationFailed(
            f"{len(found)} field(s) hold text that cannot be stored: {message}",
            errors=[
                {"pointer": LONE_SURROGATE.sub("\ufffd", p), "message": message}
                for p in sorted(found)
            ],
        )


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


def _texts(document, pointer: str) -> list[tuple[str, str]]:
    """``[(concrete pointer, text)]`` of the strings at ``pointer`` in ``document``, a ``*``
    part standing for each item of an array (``/tags/*``: ``/tags/0``, ``/tags/1``...)."""
    found = [("", document)]
    for part in pointer.strip("/").split("/"):
        step = []
        for where, value in found:
            if part == "*" and isinstance(value, list):
                step.extend((f"{where}/{i}", item) for i, item in enumerate(value))
            elif isinstance(value, dict) and part in value:
                step.append((f"{where}/{part}", value[part]))
        found = step
    return [(where, value) for where, value in found if isinstance(value, str)]


def check_template_leftovers(document: dict, pointers: tuple[str, ...]) -> None:
    """Refuse text that a template engine should have replaced (n8n-io/n8n#18181: an
    expression that fails to resolve is sent literally) at ``pointers`` (``*``: each item of
    an array; :data:`TEMPLATE_FIELDS`): a ``{{ ... }}`` whose inside,
    trimmed, starts with ``$`` (an n8n expression never evaluated, ``{{ $json.title }}``) or
    with ``media`` in any case, unless it is exactly the placeholder ``{{media:SLOT}}``.
    Other double braces (a code sample, a Handlebars snippet) pass.

    Raises:
        TemplateLeftover (422): ``errors`` names each leftover (quoted short) and its pointer.
    """
    found = []
    texts = [t for p in pointers for t in _texts(document, p) if "{{" in t[1]]
    for pointer, text in texts:
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
    """Check a path parameter such as ``job_id`` or ``slot``: the WHOLE value must match.

    Raises:
        ValidationFailed: ``value`` does not match ``pattern`` from start to end.
    """
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise exc.ValidationFailed(
            f"invalid {what}",
            errors=[{"pointer": pointer, "message": f"{what} must match {pattern.pattern}"}],
        )
    return value


def check_form_fields(
    fields, files, allowed_fields: tuple[str, ...], allowed_files: tuple[str, ...]
) -> None:
    """Refuse a ``multipart/form-data`` body naming a field or file part this route does not
    take (a misspelt ``alt_txt``), as an unknown JSON field is refused: silently dropped, it
    would be uploaded without it, and the corrected request then refused as a changed
    request under the same operation key.

    Args:
        fields, files: the names of the form's text fields and file parts.
        allowed_fields, allowed_files: what the route takes.

    Raises:
        ValidationFailed (422): one error per unknown name, pointer ``/{name}``, sorted.
    """
    unknown = sorted((set(fields) - set(allowed_fields)) | (set(files) - set(allowed_files)))
    if not unknown:
        return
    takes = ", ".join((*allowed_files, *allowed_fields))
    raise exc.ValidationFailed(
        f"{len(unknown)} unknown multipart field(s): "
        + ", ".join(quote(name) for name in unknown)
        + f" (this route takes {takes}); nothing was uploaded",
        errors=[
            {"pointer": _pointer([name]), "message": f"unknown field (takes {takes})"}
            for name in unknown
        ],
    )


def check_name(value: str, pattern: re.Pattern, what: str) -> str:
    """Check a name given on the command line (tenant, site, token name).

    Raises:
        ValueError: with a one-line message naming the rule.
    """
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise ValueError(f"{what} {value!r} must match {pattern.pattern}")
    return value


def parse_int(value: str | None, pointer: str, *, default: int | None = None) -> int | None:
    """A decimal integer from a query parameter, header or form field, 0..:data:`MAX_DB_INT`
    (ASCII digits only: ``str.isdigit`` would let ``"\u00b2"`` through to ``int()``).

    Raises:
        ValidationFailed: not ASCII digits, or beyond what the ledger can store.
    """
    if value is None or value.strip() == "":
        return default
    text = value.strip()
    if not _DIGITS.fullmatch(text) or int(text) > MAX_DB_INT:
        raise exc.ValidationFailed(
            f"{pointer.rsplit('/', 1)[-1]} must be an integer from 0 to {MAX_DB_INT}",
            errors=[{"pointer": pointer, "message": f"an integer from 0 to {MAX_DB_INT}"}],
        )
    return int(text)


PASSED_BODIES = 1024  # per worker process: schema name + 32-byte digest each
_passed: dict[tuple[str, bytes], None] = {}
_passed_lock = threading.Lock()


def validate_body(name: str, raw: bytes, document) -> dict:
    """:func:`validate` for a request body ``document`` parsed from the bytes ``raw``, plus
    the depth and object checks of a body; a body whose bytes this worker has already seen
    pass schema ``name`` is not checked again (validation depends only on the bytes and the
    schema: no clock, no ledger), only its integers are made ``int`` as :func:`validate`
    does.

    Raises:
        ValidationFailed (422): nested deeper than :data:`MAX_JSON_DEPTH`, not an object, or
            the schema refuses it.
        TemplateLeftover (422): as :func:`validate`.
    """
    key = (name, hashlib.sha256(raw).digest())
    if key in _passed:
        return _integers(validator(name).schema, document)
    if not json_depth_ok(document):
        raise exc.ValidationFailed(
            f"the body nests arrays and objects deeper than {MAX_JSON_DEPTH} levels",
            errors=[{"pointer": "", "message": f"at most {MAX_JSON_DEPTH} levels"}],
        )
    if not isinstance(document, dict):
        raise exc.ValidationFailed(
            "the body must be a JSON object",
            errors=[{"pointer": "", "message": "expected an object"}],
        )
    document = validate(name, document)
    with _passed_lock:
        if len(_passed) >= PASSED_BODIES:
            del _passed[next(iter(_passed))]  # the oldest
        _passed[key] = None
    return document


def json_depth_ok(document, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``document`` nests arrays and objects at most ``limit`` deep (iterative, so a
    deep document cannot exhaust the stack here)."""
    stack = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > limit:
                return False
            children = value.values() if isinstance(value, dict) else value
            stack.extend((child, depth + 1) for child in children)
    return True


def utc_moment(value: str, field: str, example: str) -> dt.datetime:
    """An RFC 3339 time with an offset, as naive UTC (microseconds kept).

    Raises:
        ValidationFailed (422): not ISO 8601 / RFC 3339, or no offset; the error names
            ``/{field}`` and shows ``example``.
    """
    try:
        moment = dt.datetime.fromisoformat(value)
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise exc.ValidationFailed(
            f"{field} must be RFC 3339 with an offset",
            errors=[{"pointer": f"/{field}", "message": f"e.g. {example}"}],
        )
    return moment.astimezone(dt.UTC).replace(tzinfo=None)
