"""Keys derived from ``GATEWAY_SECRET_KEY``, one per use, for ``cryptography``'s Fernet
(AES-128-CBC + HMAC-SHA256): a well-kept library rather than our own construction.

Each use names its ``purpose`` (HKDF-SHA256's ``info``, RFC 5869): site credentials and the
consent page's pending request never share a key, so a value sealed for one is refused by
the other."""

from __future__ import annotations

import base64
from functools import lru_cache

from cryptography.fernet import Fernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

SALT = b"publishing-gateway"


@lru_cache(maxsize=8)
def fernet(secret_key: str, purpose: bytes) -> Fernet:
    """The Fernet of ``purpose`` (``b"site-credentials"``, ``b"oauth-pending"``) under
    ``secret_key``: a 32-byte key from HKDF-SHA256 (salt :data:`SALT`, info ``purpose``)."""
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=SALT, info=purpose).derive(
        secret_key.encode("utf-8")
    )
    return Fernet(base64.urlsafe_b64encode(key))
