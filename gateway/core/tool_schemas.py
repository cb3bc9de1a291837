"""The schemas agents' tools advertise, derived from the ones that validate (issue 42, item 2).

The HTTP API's JSON Schema files (``gateway/schemas``) stay the single source and keep
validating every call, of the HTTP API, the MCP tools and the OpenAI Agents sessions' function
tools alike. What a tool *advertises* to a model is :func:`advertised`: the same schema in the
form every client can read, which is OpenAI's strict subset of JSON Schema (the Structured
Outputs guide, "Supported schemas"; what the Agents SDK's ``ensure_strict_json_schema`` and
``convert_schemas_to_strict`` make of a tool):

* every ``$ref`` resolved and written in place, no ``$defs`` (clients that do not resolve
  references cannot load or call a tool that has them);
* every object closed (``additionalProperties: false``) with all its properties required, the
  optional ones nullable (``null`` means "not given": :func:`without_nulls` drops them before
  the arguments are validated, so the gateway sees the HTTP shape);
* only the keywords of :data:`STRICT_KEYWORDS`; length and item limits, ``uniqueItems`` and
  the shared text rule (``schemas/text.json``) are said in the description instead, and a
  pattern's ``(?![\\s\\S])`` end anchor (Python's strict end of text) is written ``$`` (the
  same in ECMA-262). The validating schema still checks all of them.
"""

from __future__ import annotations

import copy
import re

# OpenAI's strict subset (Structured Outputs, "Supported schemas"): no length or uniqueness
# limits, no composition but anyOf, patterns without lookaround.
STRICT_KEYWORDS = frozenset(
    (
        "type",
        "description",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "const",
        "anyOf",
        "pattern",
        "minimum",
        "maximum",
    )
)
TEXT_RULE = "no control characters other than tab, CR and LF"
_END = r"(?![\s\S])"
_LOOKAROUND = re.compile(r"\(\?<?[=!]")
_SAID = {
    "minLength": "at least {} characters",
    "maxLength": "at most {} characters",
    "minItems": "at least {} items",
    "maxItems": "at most {} items",
    "uniqueItems": "no item twice",
}


def advertised(schema: dict, text_pattern: str) -> dict:
    """The strict form of ``schema`` (an object schema whose ``$ref`` are ``#/$defs/...``,
    fields of the shared text rule carrying ``text_pattern`` as a ``pattern`` or in an
    ``allOf``; not mutated): see the module docstring.

    Raises:
        ValueError: a ``$ref`` that is not ``#/$defs/NAME`` of ``schema``.
    """
    return _strict(_resolved(schema, schema.get("$defs", {})), text_pattern)


def _resolved(node, defs: dict):
    """``node`` with every ``#/$defs/NAME`` reference replaced by its definition (resolved
    too), the reference's own keywords kept beside it."""
    if isinstance(node, list):
        return [_resolved(v, defs) for v in node]
    if not isinstance(node, dict):
        return node
    node = {k: _resolved(v, defs) for k, v in node.items() if k != "$defs"}
    ref = node.pop("$ref", None)
    if ref is None:
        return node
    name = ref.removeprefix("#/$defs/")
    if name == ref or name not in defs:
        raise ValueError(f"cannot inline {ref!r}: only #/$defs/NAME references are")
    return {**_resolved(copy.deepcopy(defs[name]), defs), **node}


def _strict(node: dict, text_pattern: str) -> dict:
    notes = []
    out = {}
    for extra in node.pop("allOf", []):  # only validation.inline_shared writes one
        if extra.get("pattern") == text_pattern:
            notes.append(TEXT_RULE)
        elif "pattern" in extra and "pattern" not in node:
            node["pattern"] = extra["pattern"]
        else:
            raise ValueError(f"cannot advertise allOf member {extra!r}")
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: _strict(sub, text_pattern) for name, sub in value.items()}
        elif key == "items":
            out[key] = _strict(value, text_pattern)
        elif key == "anyOf":
            out[key] = [_strict(sub, text_pattern) for sub in value]
        elif key == "pattern":
            pattern = _ecma(value)
            if value == text_pattern:
                notes.append(TEXT_RULE)
            elif _LOOKAROUND.search(pattern):
                notes.append(f"matches the regular expression {value}")
            else:
                out[key] = pattern
        elif key == "minLength" and value == 1:
            notes.append("not empty")
        elif key in _SAID:
            notes.append(_SAID[key].format(value))
        elif key in STRICT_KEYWORDS:
            out[key] = value
    if "properties" in out or out.get("type") == "object":
        _close(out, node.get("required", []))
    if notes:
        said = "; ".join(notes)
        out["description"] = f"{out['description']} ({said})" if "description" in out else said
    return out


def _ecma(pattern: str) -> str:
    """``pattern`` with Python's strict end-of-text lookahead written as ECMA-262's ``$``."""
    return pattern[: -len(_END)] + "$" if pattern.endswith(_END) else pattern


def _close(node: dict, required: list) -> None:
    """Close object ``node``: all properties required, the ones not in ``required`` made
    nullable, no other property allowed."""
    properties = node.setdefault("properties", {})
    for name, sub in properties.items():
        if name not in required:
            properties[name] = nullable(sub)
    node["required"] = list(properties)
    node["additionalProperties"] = False


def nullable(node: dict) -> dict:
    """``node`` (a strict schema) that also accepts ``null``."""
    node = dict(node)
    if "anyOf" in node:
        if {"type": "null"} not in node["anyOf"]:
            node["anyOf"] = [*node["anyOf"], {"type": "null"}]
        return node
    kind = node.get("type")
    if kind is None and "enum" in node:
        node["enum"] = [*node["enum"], None] if None not in node["enum"] else node["enum"]
        return node
    kinds = kind if isinstance(kind, list) else [kind]
    if "null" not in kinds:
        node["type"] = [*kinds, "null"]
    if "enum" in node and None not in node["enum"]:
        node["enum"] = [*node["enum"], None]
    return node


def without_nulls(arguments, schema: dict):
    """``arguments`` without the ``null`` values :func:`advertised` allows for properties that
    ``schema`` (the validating schema) makes optional and that do not accept ``null`` there,
    at any depth: "not given", as over HTTP. Anything else is returned as it is."""
    return _drop(arguments, schema, schema.get("$defs", {}))


def _drop(value, node, defs: dict):
    if not isinstance(node, dict):
        return value
    ref = node.get("$ref", "")
    if ref.startswith("#/$defs/") and ref[8:] in defs:
        node = {**defs[ref[8:]], **{k: v for k, v in node.items() if k != "$ref"}}
    if isinstance(value, list) and isinstance(node.get("items"), dict):
        return [_drop(v, node["items"], defs) for v in value]
    if isinstance(value, dict) and isinstance(node.get("properties"), dict):
        properties, required = node["properties"], node.get("required", [])
        return {
            name: _drop(v, properties.get(name), defs)
            for name, v in value.items()
            if not (v is None and name in properties and name not in required)
            or _accepts_null(properties[name])
        }
    for branch in node.get("anyOf", ()):  # an object branch of a union (a category)
        if isinstance(value, dict) and isinstance(branch, dict) and "properties" in branch:
            return _drop(value, branch, defs)
    return value


def _accepts_null(node) -> bool:
    kind = node.get("type") if isinstance(node, dict) else None
    return kind == "null" or (isinstance(kind, list) and "null" in kind)
