"""``docs/api.md`` documents everything the OpenAPI document (and so the code) has: a section per
route, every request field (nested too) and parameter in it, every response shape with its
fields, every problem type with its status, every header. A new field, route or problem without
documentation fails here; so does documentation of a route that is gone."""

from __future__ import annotations

import re

import pytest
from support import ROOT

from gateway.api import openapi
from gateway.api import routes

API_MD = ROOT / "docs" / "api.md"
HEADING = re.compile(r"^(#{2,4}) (.+?)\s*$", re.M)
OPERATION_HEADING = re.compile(r"^(GET|PUT|POST|DELETE|PATCH) (/\S*)$")
HEADERS = (
    "Idempotent-Replayed",
    "Retry-After",
    "X-Fencing-Token",
    "X-Request-Id",
    "WWW-Authenticate",
)


@pytest.fixture(scope="module")
def document() -> dict:
    return openapi.build(routes.bare_app())


@pytest.fixture(scope="module")
def sections() -> dict[str, str]:
    """Heading text -> the text below it up to the next heading of the same or a higher level."""
    text = API_MD.read_text(encoding="utf-8")
    found = list(HEADING.finditer(text))
    result = {}
    for i, match in enumerate(found):
        level, end = len(match.group(1)), len(text)
        for later in found[i + 1 :]:
            if len(later.group(1)) <= level:
                end = later.start()
                break
        assert match.group(2) not in result, f"two sections named {match.group(2)!r}"
        result[match.group(2)] = text[match.end() : end]
    return result


def _anchor(name: str) -> str:
    return "#" + name.lower()


def field_paths(schema: dict, components: dict, prefix: str = "") -> tuple[set, set]:
    """``(paths, linked)``: dotted property paths (``seo.title``, ``artifacts[].sha256``) of
    ``schema``, and the component shapes it refers to (documented in their own section)."""
    paths, linked = set(), set()
    ref = schema.get("$ref", "")
    if ref.startswith("#/components/schemas/"):
        name = ref.rsplit("/", 1)[-1]
        if name.startswith("request."):
            return field_paths(components[name], components, prefix)
        return paths, {name}
    for name, child in schema.get("properties", {}).items():
        path = f"{prefix}{name}"
        paths.add(path)
        sub_paths, sub_linked = field_paths(child, components, path + ".")
        paths |= sub_paths
        linked |= sub_linked
    items = schema.get("items")
    if isinstance(items, dict):
        sub_paths, sub_linked = field_paths(items, components, prefix.rstrip(".") + "[].")
        paths |= sub_paths
        linked |= sub_linked
    for key in ("allOf", "anyOf", "oneOf"):
        for child in schema.get(key, []):
            sub_paths, sub_linked = field_paths(child, components, prefix)
            paths |= sub_paths
            linked |= sub_linked
    return paths, linked


def _missing(paths, text: str) -> list[str]:
    return sorted(p for p in paths if f"`{p}`" not in text)


def test_every_route_has_a_section_and_no_section_names_a_gone_route(document, sections):
    documented = {f"{m.upper()} {p}" for p, ops in document["paths"].items() for m in ops}
    headed = {h for h in sections if OPERATION_HEADING.match(h)}
    assert sorted(documented - headed) == [], "routes without a '### METHOD /path' section"
    assert sorted(headed - documented) == [], "sections for routes that do not exist"


def test_every_request_field_and_parameter_is_documented(document, sections):
    components = document["components"]["schemas"]
    problems = []
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            text = sections[f"{method.upper()} {path}"]
            # Path parameters are named by the heading itself; X-Request-Id under Headers.
            names = {
                p["name"]
                for p in operation.get("parameters", [])
                if "name" in p and p["in"] != "path" and p["name"] != "X-Request-Id"
            }
            for content in operation.get("requestBody", {}).get("content", {}).values():
                names |= field_paths(content["schema"], components)[0]
            problems += [f"{method.upper()} {path}: `{n}`" for n in _missing(names, text)]
    assert problems == []


def test_every_response_shape_is_documented(document, sections):
    components = document["components"]["schemas"]
    problems, shapes = [], set()
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            text = sections[f"{method.upper()} {path}"]
            for status, response in operation["responses"].items():
                for content in response.get("content", {}).values():
                    _, linked = field_paths(content["schema"], components)
                    linked.discard("Problem")
                    for name in linked:
                        if f"]({_anchor(name)})" not in text:
                            problems.append(f"{method.upper()} {path} {status}: link [{name}]")
                    shapes |= linked
    pending = set(shapes)
    while pending:
        name = pending.pop()
        assert name in sections, f"no '### {name}' section for the response shape"
        paths, linked = field_paths(components[name], components)
        problems += [f"shape {name}: `{p}`" for p in _missing(paths, sections[name])]
        problems += [
            f"shape {name}: link [{n}]" for n in linked if f"]({_anchor(n)})" not in sections[name]
        ]
        pending |= linked - shapes
        shapes |= linked
    assert problems == []


def test_every_problem_type_is_documented_with_its_status(document, sections):
    text = sections["Problem types"]
    rows = dict(re.findall(r"^\| `([a-z0-9-]+)` \| (\d{3}) \|", text, re.M))
    listed = document["x-problem-types"]
    assert {slug: str(facts["status"]) for slug, facts in listed.items()} == rows
    members = field_paths(document["components"]["schemas"]["Problem"], {})[0]
    assert _missing(members, sections["Problems"]) == []


def test_every_header_is_documented(sections):
    assert _missing(HEADERS, sections["Headers"]) == []


def test_links_inside_the_reference_resolve(sections):
    """Every ``](#anchor)`` names a heading (GitHub's anchor rules: lower case, punctuation
    other than ``-`` and ``_`` dropped, spaces to ``-``)."""
    anchors = {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in sections}
    text = API_MD.read_text(encoding="utf-8")
    assert sorted(set(re.findall(r"\]\(#([^)]+)\)", text)) - anchors) == []


def test_both_guides_list_the_timeline_events_the_code_records():
    """Issue 56 follow-up: docs/api.md's TimelineEntry and docs/editors.md's timeline list
    name exactly :data:`gateway.core.states.TIMELINE_EVENTS` (each had lost one)."""
    from gateway.core.states import TIMELINE_EVENTS

    api = (ROOT / "docs" / "api.md").read_text()
    row = re.search(r"^### TimelineEntry$.*?^\| `event` \| (.+?) \|$", api, re.M | re.S).group(1)
    assert re.findall(r"`(\w+)`", row) == list(TIMELINE_EVENTS)
    guide = (ROOT / "docs" / "editors.md").read_text()
    listed = re.search(r"the version and the digest \(([^)]+)\)", guide).group(1)
    words = [w.strip().replace(" ", "_") for w in " ".join(listed.split()).split(",")]
    assert words == list(TIMELINE_EVENTS)
