"""The public id of an event row (issue 57): what a delivery carries as ``webhook-id`` and
the feed and the API show as ``event_id``.

``evt_`` followed by the first 32 hex digits of the SHA-256 of the row's key
(``{tenant}/{job_id}/v{task_version}/notify/{event}[/{timeline entry id}]``): stable across
attempts, processes and databases, so receivers deduplicate on it. Source: docs/api.md,
"Events"; Standard Webhooks 1.0, "webhook-id" (a unique identifier, the same on every attempt).
"""

from __future__ import annotations

import hashlib

PREFIX = "evt_"


def event_id(key: str) -> str:
    """``evt_`` + the first 32 lowercase hex digits of SHA-256(``key`` as UTF-8), e.g.
    ``event_id("acme/j1/v1/notify/approved") == "evt_" + 32 hex digits``."""
    return PREFIX + hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]
