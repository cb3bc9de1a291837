"""Request digests and content digests: SHA-256 over canonical JSON (sorted keys, compact
separators, UTF-8, non-ASCII kept), as docs/api.md, "The ledger", defines them."""

from __future__ import annotations

import hashlib
import json


def _numbers_spelled_once(value):
    """``value`` with every integral float as an int: JSON's ``1``, ``1.0`` and ``1e0`` are
    one number, and a client's serializer must not change a digest by spelling it otherwise.
    Other floats keep Python's shortest round-trip spelling (``0.10`` and ``0.1`` agree)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _numbers_spelled_once(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_numbers_spelled_once(v) for v in value]
    return value


def canonical_json(value) -> str:
    """The canonical JSON text of ``value``: sorted keys, ``(",", ":")``, non-ASCII kept,
    integral numbers written as integers."""
    return json.dumps(
        _numbers_spelled_once(value), ensure_ascii=False, sort_keys=True, separators=(",", ":")
    )


def sha256_hex(data: bytes | str) -> str:
    """Hex SHA-256 of ``data`` (text is encoded as UTF-8)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def request_digest(fields: dict) -> str:
    """The request digest stored once per operation key: SHA-256 of the canonical JSON of
    the request's semantic fields."""
    return sha256_hex(canonical_json(fields))
