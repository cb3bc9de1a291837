"""Request digests and content digests: SHA-256 over canonical JSON (sorted keys, compact
separators, UTF-8, non-ASCII kept), as docs/api.md, "The ledger", defines them."""

from __future__ import annotations

import hashlib
import json


def canonical_json(value) -> str:
    """The canonical JSON text of ``value``: sorted keys, ``(",", ":")``, non-ASCII kept."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def sha256_hex(data: bytes | str) -> str:
    """Hex SHA-256 of ``data`` (text is encoded as UTF-8)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def request_digest(fields: dict) -> str:
    """The request digest stored once per operation key: SHA-256 of the canonical JSON of
    the request's semantic fields."""
    return sha256_hex(canonical_json(fields))
