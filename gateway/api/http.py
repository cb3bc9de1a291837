"""What every view shares: the running app's configuration, the validated JSON body, the role
check, and the one place where exceptions become RFC 9457 ``application/problem+json``
responses (:func:`problem_response`). The app's wiring (blueprints, authentication, hooks,
error handlers) is :mod:`gateway.api.routes`."""

from __future__ import annotations

import logging
import re
from functools import wraps

from flask import current_app
from flask import g
from flask import jsonify
from flask import request

from gateway.api import jsonio
from gateway.core import exceptions as exc
from gateway.ledger import models

log = logging.getLogger(__name__)
request_log = logging.getLogger("gateway.http")
PROBLEM_JSON = "application/problem+json"
# A client's X-Request-Id is echoed only when it is a plain token (no header injection, no
# unbounded log lines); otherwise the gateway makes one.
REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}(?![\s\S])")


def problem_response(error: exc.GatewayError):
    """Render ``error`` as RFC 9457 problem details, with ``Retry-After`` when retryable."""
    response = jsonify(error.problem(instance=request.path))
    response.status_code = error.status
    response.mimetype = PROBLEM_JSON
    if error.retry_after is not None:
        response.headers["Retry-After"] = str(error.retry_after)
    if error.status == 401:  # RFC 9110 section 11.6.1: a 401 names its scheme (RFC 6750)
        response.headers["WWW-Authenticate"] = 'Bearer realm="publishing-gateway"'
    return response


def config():
    """The running app's :class:`gateway.core.config.Config`."""
    return current_app.config["GATEWAY"]


def json_body(schema: str) -> dict:
    """The request's JSON object, validated against ``schemas/{schema}.json``.

    Raises:
        InvalidJSON (400): not JSON (the detail names the ``Content-Type`` sent when it is
            not JSON, e.g. a form), or nested too deep to parse.
        ValidationFailed (422): nested deeper than :data:`validation.MAX_JSON_DEPTH`, not
            an object, or the schema refuses it (:func:`validation.validate_body`: a worker
            does not check the same bytes twice).
    """
    from gateway.core import validation

    raw = request.get_data(cache=True)
    if not raw.strip():
        document = {}
    else:
        try:
            document = jsonio.loads(raw)
        except (ValueError, UnicodeDecodeError) as error:
            raise exc.InvalidJSON(f"the body is not valid JSON: {error}{_sent_as()}") from None
        except RecursionError:  # nesting deeper than the parser's stack
            raise exc.InvalidJSON(
                f"the body nests deeper than {validation.MAX_JSON_DEPTH} levels"
            ) from None
    return validation.validate_body(schema, raw, document)


def _sent_as() -> str:
    """What an unparseable body was labelled, when that explains it: a form
    (``application/x-www-form-urlencoded``, ``multipart/form-data``), another type, or none.
    ``""`` for a body labelled JSON (``application/json``, ``+json``)."""
    mimetype = request.mimetype
    if mimetype == "application/json" or mimetype.endswith("+json"):
        return ""
    what = f"Content-Type {mimetype}" if mimetype else "no Content-Type"
    return (
        f" (the request was sent with {what}; this route takes a JSON object sent as "
        "Content-Type: application/json)"
    )


def roles(*allowed: str):
    """Allow only tokens whose role is in ``allowed`` (403 ``forbidden`` otherwise, counted
    as an unauthorized call of the token's tenant)."""

    def decorate(view):
        @wraps(view)
        def wrapper(*args, **kwargs):
            if g.principal.role not in allowed:
                models.bump_counter("unauthorized_calls", tenant=g.principal.tenant)
                log.warning(
                    "refused %s %s: role %s (tenant %s)",
                    request.method,
                    request.path,
                    g.principal.role,
                    g.principal.tenant,
                )
                raise exc.Forbidden(
                    f"this call needs a token with one of the roles: {', '.join(allowed)}"
                )
            return view(*args, **kwargs)

        wrapper.roles = allowed  # read by gateway.api.openapi
        return wrapper

    return decorate
