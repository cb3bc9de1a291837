"""The OpenAPI 3.1 document of the whole HTTP API (``GET /openapi.json``, ``gateway openapi``).

Built from the code itself, so it cannot drift from it:

* every route and method comes from the app's URL map (a new route appears by itself, with its
  view's docstring and roles; :func:`undocumented` names routes that lack an entry in
  :data:`gateway.api.contract.OPERATIONS`, and :func:`stale` entries whose route is gone: the
  tests require both to be empty);
* request bodies are the JSON Schema files in ``gateway/schemas`` that the gateway validates
  with, loaded from those files (``components.schemas["request.NAME"]``; their internal
  ``$ref`` rewritten to point inside the component);
* problem types come from the exception tree (:func:`problem_types`).

Follows OpenAPI 3.1.0 (https://spec.openapis.org/oas/v3.1.0), RFC 9457 (problem details),
RFC 6750 (bearer tokens) and RFC 9110 (``Retry-After``, ``WWW-Authenticate``).
"""

from __future__ import annotations

import copy
import inspect
import re

from flask import Flask
from werkzeug.http import HTTP_STATUS_CODES

from gateway.api.contract import EXTENSIONS
from gateway.api.contract import FENCED
from gateway.api.contract import HEADERS
from gateway.api.contract import LEDGER
from gateway.api.contract import OPERATIONS
from gateway.api.contract import Contract
from gateway.api.http import REQUEST_ID
from gateway.api.request_keys import WRITE_METHODS
from gateway.api.response_schemas import SCHEMAS
from gateway.core import exceptions as exc
from gateway.core import validation
from gateway.core.version import VERSION as __version__
from gateway.tenancy import request_keys

OPENAPI_VERSION = "3.1.0"
# Flask's own static route serves nothing here (the gateway has no static folder).
EXCLUDED_ENDPOINTS = frozenset({"static"})
# Errors the web framework raises itself (gateway.core.exceptions.framework_error).
FRAMEWORK_STATUSES = (400, 404, 405, 500)
PATH_PATTERNS = {"job_id": validation.JOB_ID, "slot": validation.SLOT, "name": validation.SLOT}
# A Werkzeug rule variable, ``<job_id>`` or ``<int:approval_id>``: (converter, name).
VARIABLE = re.compile(r"<(?:([a-z]+)(?:\([^)]*\))?:)?([A-Za-z_]\w*)>")
PROBLEM = "application/problem+json"
# Path variables declared <int:...> in the URL map (a non-integer value is 404 not-found).
INT_PATH = re.compile(r"\{(approval_id|review_id|media_id|grant_id)\}")


def problem_types() -> dict[str, dict]:
    """Every problem type the gateway answers: ``{slug: {"status", "title", "retryable"}}``,
    from the exception tree plus the framework's own errors, sorted by status then slug."""
    found = {}
    pending = [exc.GatewayError]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls is not exc.GatewayError:
            found[cls.slug] = {"status": cls.status, "title": cls.title, "retryable": cls.retryable}
    for status in FRAMEWORK_STATUSES:
        error = exc.framework_error(status, HTTP_STATUS_CODES[status])
        found.setdefault(error.slug, {"status": status, "title": error.title, "retryable": False})
    return dict(sorted(found.items(), key=lambda item: (item[1]["status"], item[0])))


def routes(app: Flask) -> list[tuple[str, str, object]]:
    """``(METHOD, OpenAPI path, rule)`` of every route in the URL map, sorted by path."""
    found = []
    for rule in app.url_map.iter_rules():
        if rule.endpoint in EXCLUDED_ENDPOINTS:
            continue
        path = openapi_path(rule.rule)
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            found.append((method, path, rule))
    return sorted(found, key=lambda r: (r[1], r[0]))


def openapi_path(rule: str) -> str:
    """A Werkzeug rule as an OpenAPI path: ``/v1/jobs/<job_id>/approvals/<int:approval_id>``
    becomes ``/v1/jobs/{job_id}/approvals/{approval_id}``."""
    return VARIABLE.sub(lambda m: "{" + m.group(2) + "}", rule)


def undocumented(app: Flask) -> list[str]:
    """Routes of the URL map without a :data:`OPERATIONS` entry (``"PUT /v1/..."``)."""
    return [f"{m} {p}" for m, p, _ in routes(app) if f"{m} {p}" not in OPERATIONS]


def stale(app: Flask) -> list[str]:
    """:data:`OPERATIONS` entries whose route no longer exists."""
    present = {f"{m} {p}" for m, p, _ in routes(app)}
    return sorted(set(OPERATIONS) - present)


def request_schema(name: str) -> dict:
    """``gateway/schemas/{name}.json`` as a component: internal ``#/...`` references made
    relative to ``#/components/schemas/request.{name}``."""
    prefix = f"#/components/schemas/request.{name}"

    def target(ref: str) -> str:
        if ref == validation.TEXT_SCHEMA_ID:  # the one text-field definition
            return "#/components/schemas/Text"
        return prefix + ref[1:] if ref.startswith("#/") else ref

    def rewrite(node):
        if isinstance(node, dict):
            return {k: (target(v) if k == "$ref" else rewrite(v)) for k, v in node.items()}
        if isinstance(node, list):
            return [rewrite(v) for v in node]
        return node

    return rewrite(copy.deepcopy(validation.schema(name)))


def build(app: Flask) -> dict:
    """The OpenAPI 3.1 document of ``app`` (a JSON-ready dict of its own: shares nothing with
    the module's constants)."""
    problems = problem_types()
    paths: dict[str, dict] = {}
    for method, path, rule in routes(app):
        view = app.view_functions[rule.endpoint]
        contract = OPERATIONS.get(f"{method} {path}", Contract())
        operation = _operation(method, path, rule, view, contract, problems)
        paths.setdefault(path, {})[method.lower()] = operation
    schemas = {f"request.{n}": request_schema(n) for n in validation.schema_names()}
    schemas["Text"] = {k: v for k, v in validation.schema("text").items() if k != "$id"}
    schemas.update(SCHEMAS)
    schemas["Problem"] = _problem_schema(problems)
    return copy.deepcopy(
        {
            "openapi": OPENAPI_VERSION,
            "info": {
                "title": "Publishing Gateway",
                "version": __version__,
                "summary": "Idempotent, reconciling writes from automations to WordPress",
                "description": "The project's API reference is docs/api.md; problem types are "
                "listed under x-problem-types (RFC 9457).",
                "license": {"name": "MIT", "identifier": "MIT"},
            },
            "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
            "paths": paths,
            "components": {
                "schemas": schemas,
                "securitySchemes": {
                    "bearerAuth": {
                        "type": "http",
                        "scheme": "bearer",
                        "description": "a token from 'gateway tokens create' (role workflow, "
                        "editor or admin; its tenant scopes every call)",
                    },
                    "editorSession": {
                        "type": "apiKey",
                        "in": "cookie",
                        "name": "session",
                        "description": "the review page's signed session, after POST /review/login",
                    },
                },
                "headers": HEADERS,
                "parameters": {
                    "X-Request-Id": _request_id_parameter(),
                    "Idempotency-Key": _request_key_parameter(),
                },
            },
            "x-problem-types": {
                slug: {"type": exc.PROBLEM_BASE + slug, **facts} for slug, facts in problems.items()
            },
        }
    )


def _request_id_parameter() -> dict:
    return {
        "name": "X-Request-Id",
        "in": "header",
        "required": False,
        "description": "an id to correlate this request (echoed in the response)",
        "schema": {"type": "string", "pattern": REQUEST_ID.pattern},
    }


def _request_key_parameter() -> dict:
    return {
        "name": "Idempotency-Key",
        "in": "header",
        "required": False,
        "description": "the client's own request key, kept per token: a retry with the same "
        "key and request gets the first 2xx answer (Idempotent-Replayed: true) and runs "
        "nothing; the same key with another request is 422 request-key-reused; a request "
        "refused (4xx) does not keep its key",
        "schema": {"type": "string", "pattern": request_keys.KEY.pattern},
    }


def _operation(method, path, rule, view, contract: Contract, problems: dict) -> dict:
    doc = inspect.getdoc(view) or ""
    summary, _, rest = doc.partition("\n")
    roles = getattr(view, "roles", None)
    description = rest.strip()
    if roles:
        description = f"Roles: {', '.join(roles)}.\n\n{description}".strip()
    api = path.startswith("/v1/") and contract.token  # webhooks are signed, not token-bound
    keyed = api and method in WRITE_METHODS  # Idempotency-Key (gateway.api.request_keys)
    operation = {
        "operationId": f"{method.lower()}_{rule.endpoint.replace('.', '_')}",
        "tags": [rule.endpoint.split(".")[0]],
        "summary": summary.strip() or rule.endpoint,
        "description": description,
        "security": [{"bearerAuth": []}] if api else _page_security(path),
        "parameters": _parameters(rule, contract, keyed),
        "responses": _responses(path, contract, problems, api, keyed),
    }
    if roles:
        operation["x-roles"] = list(roles)
    body = _request_body(path, contract)
    if body:
        operation["requestBody"] = body
    return operation


def _page_security(path: str) -> list:
    return [{"editorSession": []}] if path.startswith("/review") and path != "/review/login" else []


def _parameters(rule, contract: Contract, keyed: bool = False) -> list:
    found = [{"$ref": "#/components/parameters/X-Request-Id"}]
    if keyed:
        found.append({"$ref": "#/components/parameters/Idempotency-Key"})
    converters = {name: converter for converter, name in VARIABLE.findall(rule.rule)}
    for name in sorted(rule.arguments):
        if converters.get(name) == "int":  # gateway.api.routes.LedgerIdConverter
            schema = {"type": "integer", "minimum": 1, "maximum": validation.MAX_DB_INT}
        elif name in PATH_PATTERNS:
            schema = {"type": "string", "pattern": PATH_PATTERNS[name].pattern}
        else:
            schema = {"type": "string"}
        found.append({"name": name, "in": "path", "required": True, "schema": schema})
    for name, schema in (contract.query or {}).items():
        found.append({"name": name, "in": "query", "required": False, "schema": schema})
    if contract.fenced:
        found.append(
            {
                "name": "X-Fencing-Token",
                "in": "header",
                "required": False,
                "description": "the job lease's fencing token; required from workflow tokens "
                "while the job has an active lease (409 lease-required), refused when not the "
                "latest grant (409 stale-fencing-token)",
                "schema": {"type": "integer", "minimum": 1, "maximum": validation.MAX_DB_INT},
            }
        )
    return found


def _request_body(path: str, contract: Contract) -> dict | None:
    if contract.form is not None:
        fields = {name: {"type": "string"} for name in ("csrf_token", *contract.form)}
        form = {"type": "object", "required": ["csrf_token"], "properties": fields}
        return {
            "required": True,
            "content": {"application/x-www-form-urlencoded": {"schema": form}},
        }
    if contract.body is None:
        return None
    schema = {"$ref": f"#/components/schemas/request.{contract.body}"}
    content = {"application/json": {"schema": schema}}
    if contract.body == "media":
        content["multipart/form-data"] = {"schema": _multipart_media()}
    return {"required": contract.body != "empty", "content": content}


def _multipart_media() -> dict:
    text = {"type": "string"}
    return {
        "type": "object",
        "required": ["file"],
        "properties": {
            "file": {"type": "string", "contentMediaType": "application/octet-stream"},
            "alt_text": text,
            "caption": text,
            "title": text,
        },
    }


def _responses(path: str, contract: Contract, problems: dict, api: bool, keyed: bool) -> dict:
    echo = {"X-Request-Id": {"$ref": "#/components/headers/X-Request-Id"}}
    responses = {}
    for status in contract.ok:
        responses[str(status)] = _success(status, contract, echo)
    for status in contract.pages:
        responses[str(status)] = {
            "description": HTTP_STATUS_CODES[status] + " (an HTML page)",
            "headers": echo,
            "content": {"text/html": {"schema": {"type": "string"}}},
        }
    for status, slugs in _problem_slugs(path, contract, api, problems, keyed).items():
        problem = _problem_response(status, slugs, problems, echo)
        page = responses.get(str(status))
        if page:  # a page of the view and a problem of the framework share the status
            problem["description"] = f"{page['description']}; or {problem['description']}"
            problem["content"] = {**page["content"], **problem["content"]}
        responses[str(status)] = problem
    return dict(sorted(responses.items()))


def _success(status: int, contract: Contract, echo: dict) -> dict:
    if status == 303:
        return {"description": "See Other: the review page (or its sign-in)", "headers": echo}
    headers = dict(echo)
    if status == 204:
        return {"description": "No Content", "headers": headers}
    if (contract.replays or contract.replay_header) and status == 200:
        headers["Idempotent-Replayed"] = {"$ref": "#/components/headers/Idempotent-Replayed"}
    schema = (
        {"$ref": f"#/components/schemas/{contract.returns}"}
        if contract.returns
        else {"type": "string"}
    )
    what = {201: "created (first execution)", 200: "OK"}.get(status, HTTP_STATUS_CODES[status])
    if contract.replays and status == 200:
        what = "OK: an earlier identical request's receipt, or the existing object"
    return {
        "description": what,
        "headers": headers,
        "content": {contract.media_type: {"schema": schema}},
    }


def _problem_slugs(path: str, contract: Contract, api: bool, problems: dict, keyed: bool) -> dict:
    slugs = ["ledger-unavailable", *contract.problems]
    if INT_PATH.search(path):  # an id that is not a whole number matches no route
        slugs.append("not-found")
    if api:
        slugs += [
            "unauthenticated",
            "unauthenticated-rate-limited",
            "forbidden",
            "rate-limited",
            "tenant-busy",
        ]
        if "{job_id}" in path:
            slugs += ["job-not-found", "validation-failed"]
        if "{slot}" in path or "{name}" in path:
            slugs.append("validation-failed")
        if contract.body:
            slugs += ["invalid-json", "payload-too-large", "validation-failed"]
        if contract.fenced:
            slugs += FENCED
        if contract.replays:
            slugs += LEDGER
        if keyed:
            slugs += ["request-key-reused", "request-key-in-progress", "validation-failed"]
    by_status: dict[int, list[str]] = {}
    for slug in dict.fromkeys(slugs):
        by_status.setdefault(problems[slug]["status"], []).append(slug)
    return dict(sorted(by_status.items()))


def _problem_response(status: int, slugs: list[str], problems: dict, echo: dict) -> dict:
    headers = dict(echo)
    if any(problems[s]["retryable"] for s in slugs):
        headers["Retry-After"] = {"$ref": "#/components/headers/Retry-After"}
    if status == 401:
        headers["WWW-Authenticate"] = {"$ref": "#/components/headers/WWW-Authenticate"}
    schema = {
        "allOf": [
            {"$ref": "#/components/schemas/Problem"},
            {"properties": {"type": {"enum": [exc.PROBLEM_BASE + s for s in slugs]}}},
        ]
    }
    return {
        "description": "; ".join(f"{s}: {problems[s]['title']}" for s in slugs),
        "headers": headers,
        "content": {PROBLEM: {"schema": schema}},
    }


def _problem_schema(problems: dict) -> dict:
    text, number = {"type": "string"}, {"type": "integer"}
    pointer = {"type": "object", "properties": {"pointer": text, "message": text}}
    return {
        "type": "object",
        "description": "RFC 9457 problem details; x-problem-types lists every type",
        "required": ["type", "title", "status", "detail", "retryable"],
        "properties": {
            "type": {"enum": [exc.PROBLEM_BASE + s for s in problems]},
            "title": text,
            "status": number,
            "detail": text,
            "instance": text,
            "retryable": {"type": "boolean"},
            "errors": {"type": "array", "items": pointer},
            **{name: {} for name in EXTENSIONS},
        },
    }
