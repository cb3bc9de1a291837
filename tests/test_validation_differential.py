"""The compiled validator (``jsonschema_rs``) against ``jsonschema`` (issue 32, item 4): the
same verdict for every schema file, over the fuzz corpus and over bodies made to probe the
two regex dialects, so that the compiled one may decide alone when it passes a body
(``gateway/core/validation.py``, module docstring).

* every ``pattern`` of the schema files, in Python's ``re`` (``re.search``, what
  ``jsonschema``'s ``pattern`` keyword calls) and in ``jsonschema_rs``, over every code point
  of the Basic Multilingual Plane (surrogates aside: JSON text cannot carry them, and
  :func:`~gateway.core.validation.check_storable` refuses them first) in five positions;
* the fuzz corpus: the bodies schemathesis generates from the OpenAPI document for every
  operation, positive and negative (as ``tests/test_fuzz.py`` sends them), each checked
  against every schema, and :func:`~gateway.core.validation.validate` giving the same
  document or the same errors as ``jsonschema`` alone;
* each schema's valid bodies from that corpus with one leaf replaced at a time: control,
  separator and space characters, line ends, long strings, integers and floats at 32 and 64
  bits and past them, booleans for numbers, duplicate array items, an unknown member.
"""

from __future__ import annotations

import copy
import json
import os
import re

import jsonschema_rs
import pytest
import schemathesis
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from schemathesis import GenerationMode
from support import SECRET_KEY

import gateway
from gateway.api import openapi
from gateway.core import exceptions as exc
from gateway.core import validation
from gateway.ledger.db import database

# Pure validation, no ledger: once per CI run, in the SQLite pass.
pytestmark = pytest.mark.sqlite_pass

EXAMPLES = int(os.environ.get("GATEWAY_DIFF_EXAMPLES", "6"))  # per operation and mode
NAMES = validation.schema_names()
POSITIONS = ("{}", "a{}", "{}a", "https://a{}", "0" * 64 + "{}")
CHARS = (
    [chr(c) for c in range(0x100)]
    + [chr(c) for c in range(0x100, 0x10000) if chr(c).isspace()]
    + ["\u200b", "\u2028", "\u2029", "\ufeff", "\uffff", "\U0001f600", "\U0010ffff"]
)
# Leaf values: the dialect is covered character by character above; here a sample of each kind
# (C0, tab/CR/LF, C1, spaces to Python or to ECMA-262 only, format characters, astral).
SAMPLE = "\x00\x08\t\n\x0b\r\x1c\x1f \x7f\x85\x9f\xa0\u1680\u2000\u200b\u2028\u3000\ufeff\uffff"
STRINGS = sorted(
    {
        p.format(c)
        for c in [*SAMPLE, "\U0001f600", "a", "-", "_", "."]
        for p in ("{}", "a{}b", "https://a{}")
    }
    | {"", "a\n", "\n", "a\r\n", "0" * 64, "0" * 64 + "\n", "F" * 64, "https://", "x" * 2049}
)
NUMBERS = [0, 1, -1, 1.0, 1.5, -0.0, 2**31 - 1, 2**31, 2**53 + 1, 2**63, 2**64, 10**30, 1e308]
NUMBERS += [True, False, None, "1"]


def _pattern_fields(node, found: set) -> set[tuple[str, bool]]:
    """``(pattern, refers to text.json)`` of every schema node holding a ``pattern``."""
    if isinstance(node, dict):
        if isinstance(node.get("pattern"), str):
            found.add((node["pattern"], node.get("$ref") == validation.TEXT_SCHEMA_ID))
        for value in node.values():
            _pattern_fields(value, found)
    elif isinstance(node, list):
        for value in node:
            _pattern_fields(value, found)
    return found


def _python_passes(name: str, document) -> bool:
    return not any(validation.validator(name).iter_errors(document))


def _compiled_passes(name: str, document) -> bool | None:
    """The compiled verdict, None when it cannot take the value (jsonschema then decides)."""
    try:
        return validation.fast_validator(name).is_valid(document)
    except ValueError:
        return None


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> list:
    """Request bodies schemathesis generates from the OpenAPI document (derandomized)."""
    folder = tmp_path_factory.mktemp("corpus")
    app = gateway.create_app(
        {"database_url": f"sqlite:///{folder / 'ledger.db'}", "secret_key": SECRET_KEY}
    )
    with app.app_context():
        document = openapi.build(app)
    if not database.is_closed():
        database.close()
    bodies: list = []
    api = schemathesis.openapi.from_dict(document)
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
        for result in api.get_all_operations():

            @settings(
                max_examples=EXAMPLES,
                derandomize=True,
                database=None,
                deadline=None,
                suppress_health_check=list(HealthCheck),
            )
            @given(case=result.ok().as_strategy(generation_mode=mode))
            def collect(case):
                if isinstance(case.body, dict | list | str | int | float | bool):
                    bodies.append(case.body)

            collect()
    return bodies


def _mismatches(name: str, documents) -> tuple[list, int]:
    """Bodies whose verdicts differ, as ``(jsonschema's verdict, body)``, and how many bodies
    jsonschema passed. A body only jsonschema passes is no mismatch when it holds U+FEFF (the
    dialect gap of the pattern test): jsonschema decides it, as before."""
    wrong, passed = [], 0
    for document in documents:
        python = _python_passes(name, document)
        passed += python
        compiled = _compiled_passes(name, document)  # None: jsonschema decides alone
        if compiled is None or compiled == python:
            continue
        text = json.dumps(document)
        if compiled or "\\ufeff" not in text:
            wrong.append((python, text[:300]))
    return wrong, passed


def test_every_pattern_matches_alike_or_leaves_the_verdict_to_jsonschema():
    """Per pattern field (with the text.json pattern where the field refers to it): the
    compiled validator never passes a string ``re`` refuses. It refuses more in one place:
    ECMA-262's ``\\s``, which ``jsonschema_rs`` follows, counts U+FEFF as a space and Python's
    does not; such a body is not passed by the compiled one, so ``jsonschema`` decides it
    (U+001C-U+001F and U+0085, spaces to Python only, are control characters text.json
    refuses first)."""
    fields = set()
    for name in [*NAMES, "text"]:
        _pattern_fields(validation.schema(name), fields)
    assert len(fields) >= 6, fields
    text = validation.schema("text")["pattern"]
    for pattern, with_text in sorted(fields):
        python = [re.compile(p) for p in (pattern, text)[: 1 + with_text]]
        compiled = jsonschema_rs.Draft202012Validator(
            {"type": "string", "allOf": [{"pattern": p} for p in (pattern, text)[: 1 + with_text]]}
        )
        unsafe, refused_more = [], set()
        for char in map(chr, range(0x10000)):
            if 0xD800 <= ord(char) <= 0xDFFF:
                continue
            for position in POSITIONS:
                value = position.format(char)
                by_re = all(p.search(value) for p in python)
                if compiled.is_valid(value) != by_re:
                    (refused_more.add(ord(char)) if by_re else unsafe.append(value))
        assert unsafe == [], f"{pattern}: passed by jsonschema_rs only: {unsafe[:20]!r}"
        assert refused_more <= {0xFEFF}, f"{pattern}: {sorted(map(hex, refused_more))}"


def test_the_corpus_gets_the_same_verdict_from_every_schema(corpus):
    assert len(corpus) >= 200
    passed = 0
    for name in NAMES:
        wrong, valid = _mismatches(name, corpus)
        assert wrong == [], f"{name}: (jsonschema's verdict, body) {wrong[:5]}"
        passed += valid
    assert passed >= 100  # the corpus holds valid bodies, not only refusals


def test_validate_answers_as_jsonschema_alone(corpus):
    """The document returned, or the errors raised, are those of ``jsonschema`` alone."""
    for name in NAMES:
        for document in corpus:
            if isinstance(document, dict):
                both = _outcome(name, document, fast=True), _outcome(name, document, fast=False)
                assert both[0] == both[1], (name, document)


def _outcome(name: str, document, fast: bool):
    compiled = validation.fast_validator(name) if fast else None
    try:
        checked = validation.check(
            validation.validator(name), copy.deepcopy(document), name, compiled
        )
        return ("ok", checked)
    except (exc.ValidationFailed, exc.TemplateLeftover) as error:
        return (type(error).__name__, error.problem())


def _leaves(node, path=()):
    yield path, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _leaves(value, (*path, index))


def _with(document, path, value):
    if not path:
        return value
    document = copy.deepcopy(document)
    node = document
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return document


def _variants(seed):
    for path, leaf in _leaves(seed):
        if isinstance(leaf, str):
            yield from (_with(seed, path, s) for s in STRINGS)
        elif leaf is None or isinstance(leaf, bool | int | float):
            yield from (_with(seed, path, n) for n in NUMBERS)
        elif isinstance(leaf, list):
            extra = [*leaf[:1], 1, 1.0, True, "a"]
            yield from (_with(seed, path, [*leaf, item]) for item in extra)
        elif isinstance(leaf, dict):
            yield _with(seed, path, {**leaf, "unknown_field": 1})


@pytest.mark.parametrize("name", NAMES)
def test_valid_bodies_changed_one_leaf_at_a_time_get_the_same_verdict(corpus, name):
    seeds = {json.dumps(d, sort_keys=True): d for d in corpus if _python_passes(name, d)}
    assert seeds, f"no valid body for {name} in the corpus"
    fullest = max(seeds.values(), key=lambda d: len(json.dumps(d)))
    wrong, _ = _mismatches(name, _variants(fullest))
    assert wrong == [], f"{name}: (jsonschema's verdict, body) {wrong[:5]}"
