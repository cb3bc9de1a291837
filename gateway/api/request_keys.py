"""The ``Idempotency-Key`` header of write requests (docs/api.md, "Client request keys"): a
client's own key, kept per token by :mod:`gateway.tenancy.request_keys`. Registered by
:mod:`gateway.api.routes`: :func:`start` after authentication, :func:`finish` on the answer.

A request's fingerprint is SHA-256 of the canonical JSON of its method, path and body: a JSON
body as parsed (key order and number spelling do not matter), a multipart body as its form
fields plus each file's name and SHA-256, any other body as its bytes' SHA-256.
"""

from __future__ import annotations

import hashlib
import logging

from flask import g
from flask import jsonify
from flask import request

from gateway.api import jsonio
from gateway.api.http import config
from gateway.core.digests import request_digest
from gateway.ledger import db
from gateway.tenancy import request_keys

log = logging.getLogger(__name__)
WRITE_METHODS = frozenset(("POST", "PUT", "PATCH", "DELETE"))


def _body_fingerprint():
    if request.mimetype == "multipart/form-data":
        files = {}
        for name, upload in request.files.items():
            files[name] = [upload.filename, hashlib.sha256(upload.read()).hexdigest()]
            upload.seek(0)
        return {"form": request.form.to_dict(), "files": files}
    raw = request.get_data(cache=True)
    if not raw.strip():
        return None
    try:
        return {"json": jsonio.loads(raw)}
    except (ValueError, UnicodeDecodeError, RecursionError):
        return {"sha256": hashlib.sha256(raw).hexdigest()}


def fingerprint() -> str:
    """The fingerprint of the current request (see the module docstring)."""
    return request_digest(
        {"method": request.method, "path": request.path, "body": _body_fingerprint()}
    )


def start():
    """Before the view of an authenticated write request that carries ``Idempotency-Key``:
    claim the key, or answer with the answer stored under it (``Idempotent-Replayed: true``).
    Returns that answer, or None to let the view run.

    Raises:
        ValidationFailed (422): a malformed key.
        RequestKeyReused (422), RequestKeyInProgress (409): see
            :func:`gateway.tenancy.request_keys.claim`.
    """
    key = request.headers.get(request_keys.HEADER)
    if key is None or request.method not in WRITE_METHODS or "token_hash" not in g:
        return None  # webhooks and pages have no token: their own rules apply
    request_keys.check_key(key)
    settings = config()
    found = request_keys.claim(
        g.token_hash,
        key,
        fingerprint(),
        lease_seconds=settings.inflight_window + 2 * settings.wp_timeout,
        retention_hours=settings.request_key_hours,
    )
    if isinstance(found, request_keys.Stored):
        response = jsonify(found.body)
        response.status_code = found.status
        response.headers["Idempotent-Replayed"] = "true"
        return response
    g.request_key = found
    return None


def finish(response):
    """After the view: store a 2xx JSON answer under the claimed key (``g.stored_answer`` in
    its place when the view set one: an answer showing a secret once, which the ledger never
    keeps), or leave the key OPEN for the next identical request. A ledger that cannot take
    it now leaves the claim to expire (its lease); the answer goes out either way."""
    held = g.pop("request_key", None)
    stored = g.pop("stored_answer", None)  # a view's answer without what it shows once
    if held is None:
        return response
    body = response.get_json(silent=True) if response.is_json else None
    if stored is not None and body is not None:
        body = stored
    try:
        request_keys.finish(held, response.status_code, body)
    except db.LEDGER_ERRORS as error:
        log.error("could not store the answer under request key %r: %s", held.key, error)
    return response
