"""The schemas agents' tools advertise, derived from the ones that validate (issue 42, item 2).

The HTTP API's JSON Schema files (``gateway/schemas``) stay the single source and keep
validating every call, of the HTTP API, the MCP tools and the OpenAI Agents sessions' function
tools alike. What a tool *advertises* to a model is :func:`advertised`: the same schema in the
form every client can read, which is OpenAI's strict subset of JSON Schema (the Structured
Outputs guide, "Supported schemas"; what the Agents SDK's ``ensure_strict_json_schema`` and
``convert_schemas_to_strict`` make of a tool):

* every ``$ref`` resolved and written in place, no ``$defs`` (clients that do not resolve
  references cannot load or call a tool that has them);
* every object closed (``additionalProperties: false``), the optional properties nullable
  (``null`` means "not given": :func:`without_nulls` drops them before the arguments are
  validated, so the gateway sees the HTTP shape). ``required`` lists what the call needs (the
  MCP tools, issue 52: clients such as Claude Code fill every required property) or, in the
  ``strict`` form the agent sessions send to OpenAI, every property;
* only the keywords of :data:`STRICT_KEYWORDS`; length and item limits, ``uniqueItems`` and
  the shared text rule (``schemas/text.json``) are said in the description instead, and a
  pattern's ``(?![\\s\\S])`` end anchor (Python's strict end of text) is written ``$`` (the
  same in ECMA-262). The validating schema still checks all of them.

:func:`at_the_door` is the one liberal door of the MCP tools and the agents' function tools
(issue 52; docs/mcp.md, "What the tools accept"): it undoes the deviations clients are known
to make before the strict validation runs. The HTTP API stays strict.
"""

from __future__ import annotations

import copy
import json
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


def advertised(schema: dict, text_pattern: str, strict: bool = True) -> dict:
    """The advertised form of ``schema`` (an object schema whose ``$ref`` are
    ``#/$defs/...``, fields of the shared text rule carrying ``text_pattern`` as a ``pattern``
    or in an ``allOf``; not mutated): see the module docstring. ``strict``: every property
    required (OpenAI's strict mode); otherwise ``required`` is the validating schema's.

    Raises:
        ValueError: a ``$ref`` that is not ``#/$defs/NAME`` of ``schema``.
    """
    return _strict(_resolved(schema, schema.get("$defs", {})), text_pattern, strict)


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


def _strict(node: dict, text_pattern: str, strict: bool) -> dict:
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
            out[key] = {name: _strict(sub, text_pattern, strict) for name, sub in value.items()}
        elif key == "items":
            out[key] = _strict(value, text_pattern, strict)
        elif key == "anyOf":
            out[key] = [_strict(sub, text_pattern, strict) for sub in value]
        elif key == "pattern":
            pattern = ecma(value)
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
        _close(out, node.get("required", []), strict)
    if notes:
        said = "; ".join(notes)
        out["description"] = f"{out['description']} ({said})" if "description" in out else said
    return out


def ecma(pattern: str) -> str:
    """``pattern`` with Python's strict end-of-text lookahead ``(?![\\s\\S])`` written as
    ECMA-262's ``$`` (the same there: no multiline flag), as tools advertise it and refusals
    show it."""
    return pattern[: -len(_END)] + "$" if pattern.endswith(_END) else pattern


def _close(node: dict, required: list, strict: bool) -> None:
    """Close object ``node``: the properties not in ``required`` made nullable, no other
    property allowed; all of them required when ``strict``, else those of ``required``."""
    properties = node.setdefault("properties", {})
    for name, sub in properties.items():
        if name not in required:
            properties[name] = nullable(sub, union=not strict)
    node["required"] = list(properties) if strict else [r for r in required if r in properties]
    node["additionalProperties"] = False


def nullable(node: dict, union: bool = False) -> dict:
    """``node`` (a strict schema) that also accepts ``null``: a ``"null"`` type beside its
    own (OpenAI's strict form), or with ``union`` ``{"anyOf": [node, {"type": "null"}]}``
    (its description kept outside): Cursor checks a ``type`` list against a value's one type
    and refuses every value (cursor/cursor#3540, cursor/cursor#3778), not an ``anyOf``."""
    node = dict(node)
    if union and "anyOf" not in node and "null" not in _types(node):
        said = {"description": node.pop("description")} if "description" in node else {}
        return {**said, "anyOf": [node, {"type": "null"}]}
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
    return _drop(arguments, schema, schema.get("$defs", {}), None)


# What clients send for "not given" (anthropics/claude-code#95239: optional parameters filled
# with the text "null" or ["null"]; a key left empty). Read so only where a value can never be
# the word: never in free text (a caption may say "null").
PLACEHOLDERS = ("null", "")
PLACEHOLDER_ARRAY = ["null"]


def at_the_door(arguments, schema: dict, text_pattern: str):
    """``arguments`` of a tool call as a strict validation of ``schema`` (the validating
    schema; its free text carries ``text_pattern``) should see them, at any depth (issue 52;
    docs/mcp.md, "What the tools accept"):

    * an array or object property (one that takes no string) given as JSON text of that type
      is parsed (anthropics/claude-code#22394, github/copilot-cli#4301);
    * an optional property whose value can never be the word - not free text (see
      :func:`free_text`) - given as ``"null"`` or ``["null"]`` is not given
      (anthropics/claude-code#95239); in free text the word stays the text it is;
    * an optional property that takes no empty text given as ``""`` is not given
      (cursor/cursor#3614: Cursor's unset optional); where ``""`` is valid it stays;
    * ``null`` for an optional property that does not take it is not given
      (:func:`without_nulls`).

    Anything else is returned as it is, for the validation to judge. Source: STYLE.md, "Be
    liberal at the door, strict inside"."""
    return _drop(arguments, schema, schema.get("$defs", {}), text_pattern)


def free_text(node, defs: dict, text_pattern: str) -> bool:
    """Whether ``node`` (a validating schema, ``#/$defs`` in ``defs``) takes free text: a
    string with no ``enum``, ``format`` or ``contentEncoding`` and no anchored pattern of its
    own (an identifier's syntax: a slot, a slug, a request key); ``text_pattern``, the shared
    text rule, is not one. A term name (pattern ``\\S``) is free text."""
    node = _deref(node, defs)
    if any(free_text(branch, defs, text_pattern) for branch in node.get("anyOf", ())):
        return True
    if "string" not in _types(node):
        return False
    pattern = node.get("pattern", "")
    identifier = pattern.startswith("^") and pattern != text_pattern
    return not (identifier or {"enum", "format", "contentEncoding"} & set(node))


def _deref(node, defs: dict) -> dict:
    if not isinstance(node, dict):
        return {}
    ref = node.get("$ref", "")
    if ref.startswith("#/$defs/") and ref[8:] in defs:
        return {**_deref(defs[ref[8:]], defs), **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _types(node: dict) -> list:
    kind = node.get("type")
    return kind if isinstance(kind, list) else [kind]


def _kinds(node, defs: dict) -> set:
    """Every JSON type ``node`` takes, its ``anyOf`` branches' included."""
    node = _deref(node, defs)
    kinds = set(_types(node)) - {None}
    for branch in node.get("anyOf", ()):
        kinds |= _kinds(branch, defs)
    return kinds


def _parsed(value, node: dict, defs: dict):
    """``value`` parsed when it is JSON text of the array or object ``node`` takes (and
    ``node`` takes no string); else ``value``."""
    kinds = _kinds(node, defs)
    if not isinstance(value, str) or "string" in kinds or not {"array", "object"} & kinds:
        return value
    try:
        parsed = json.loads(value)
    except ValueError:
        return value
    if (
        isinstance(parsed, list)
        and "array" in kinds
        or isinstance(parsed, dict)
        and "object" in kinds
    ):
        return parsed
    return value


def _not_given(value, node: dict, defs: dict, text_pattern: str | None) -> bool:
    if value is None:
        return not _accepts_null(node)
    if text_pattern is None:
        return False
    if value == "":  # only where no text, not even an empty one, is valid: nothing changes
        return not _takes_empty_text(node, defs)
    if value in PLACEHOLDERS or value == PLACEHOLDER_ARRAY:
        return not free_text(node, defs, text_pattern)
    return False


def _takes_empty_text(node, defs: dict) -> bool:
    """Whether ``node`` takes the empty string (its type, ``minLength`` and ``pattern``)."""
    node = _deref(node, defs)
    if any(_takes_empty_text(branch, defs) for branch in node.get("anyOf", ())):
        return True
    if "string" not in _types(node) or node.get("minLength", 0) > 0:
        return False
    return re.search(node.get("pattern", ""), "") is not None


def _drop(value, node, defs: dict, text_pattern: str | None):
    """``value`` through the door of ``node``: nulls only (``text_pattern`` None) or
    :func:`at_the_door`'s rules too."""
    node = _deref(node, defs)
    if isinstance(value, list) and isinstance(node.get("items"), dict):
        return [_drop(v, node["items"], defs, text_pattern) for v in value]
    if isinstance(value, dict) and isinstance(node.get("properties"), dict):
        properties, required = node["properties"], node.get("required", [])
        kept = {}
        for name, given in value.items():
            sub = _deref(properties.get(name), defs)
            if text_pattern is not None:
                given = _parsed(given, sub, defs)
            optional = name in properties and name not in required
            if not (optional and _not_given(given, sub, defs, text_pattern)):
                kept[name] = _drop(given, sub, defs, text_pattern)
        return kept
    for branch in node.get("anyOf", ()):  # an object branch of a union (a category)
        if isinstance(value, dict) and isinstance(branch, dict) and "properties" in branch:
            return _drop(value, branch, defs, text_pattern)
    return value


def _accepts_null(node) -> bool:
    return "null" in _types(node) if isinstance(node, dict) else False
