"""Reads of the job's post that a cache in front of the REST API cannot fool.

Every REST read already goes past a URL-keyed cache (``Cache-Control: no-cache`` and a query
parameter used once; :mod:`gateway.wordpress.rest_root`), and a read whose answer shows a cache
hit is asked again as a POST. A cache that drops query strings and says nothing of itself is
caught here, by what the read answers: where it disagrees with what WordPress answered to the
gateway's own write (the read-back right after a draft: an older ``modified_gmt``, or the same
second with other values than the write echoed) or with the draft's receipt (verification,
approval, repair: the fields do not verify), the post is read once more as a POST WordPress
serves as GET (no cache stores a POST; ``X-HTTP-Method-Override``, which
``WP_REST_Server::serve_request`` honours). That answer is WordPress's. When even that one is
older than the write, a cache stands in front of everything: :class:`CachedAnswer` names it and
how to exclude REST from it, and nothing is confirmed, verified or repaired on it.

Public reports: litespeedtech/lscache_wp#413 and #732 (LiteSpeed's REST cache keeps GET answers
by URL whatever ``no-cache`` says). XML-RPC reads are POSTs already (docs/transports.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from gateway.operations.verification import snapshot
from gateway.wordpress import Transport
from gateway.wordpress.errors import CachedAnswer
from gateway.wordpress.rest_root import EXCLUDE_REST

log = logging.getLogger(__name__)


def older(live: dict, written_gmt: str | None) -> bool:
    """True when ``live``'s ``modified_gmt`` is earlier than ``written_gmt`` (WordPress's
    ``Y-m-d\\TH:i:s`` in UTC, which compares as text); False when either is unknown."""
    modified = live.get("modified_gmt")
    return bool(modified and written_gmt and modified < written_gmt)


def behind_write(live: dict, written: dict) -> bool:
    """True when ``live`` is not what WordPress answered to the write (``written``, the
    ``context=edit`` post of the write's answer): older, or of the same second with other
    values of the fields the gateway compares (:func:`snapshot`)."""
    if older(live, written.get("modified_gmt")):
        return True
    same = live.get("modified_gmt") == written.get("modified_gmt")
    return same and snapshot(live) != snapshot(written)


def read_post(
    client: Transport,
    post_id: int,
    agrees: Callable[[dict], bool],
    stale: Callable[[dict], bool],
) -> dict:
    """The post ``post_id`` as WordPress holds it (``context=edit``).

    Args:
        client: the site's transport.
        agrees: whether a read is what the caller expects; when not, the post is read again
            as a POST served as GET and that read is the answer.
        stale: whether a read is proven older than the gateway's own write: true of the
            second read too, it raises.

    Raises:
        CachedAnswer: even the second read is older than the write (a cache in front of
            everything); the usual WordPress errors of ``client.get_post``.
    """
    live = client.get_post(post_id)
    if agrees(live):
        return live
    second = client.get_post(post_id, direct=True)
    if snapshot(second) != snapshot(live):
        log.warning("post %s: a cache answered its GET with another copy; read by POST", post_id)
    if stale(second):
        raise CachedAnswer(
            f"post {post_id} read back older than what WordPress answered to the gateway's "
            f"write (modified_gmt {second.get('modified_gmt')}), even read as a POST: a cache "
            f"in front of the REST API answers for WordPress; {EXCLUDE_REST}",
            method="GET",
            url=client.url(f"/wp/v2/posts/{post_id}"),
            status=200,
            evidence=f"modified_gmt {second.get('modified_gmt')} older than the write's",
        )
    return second


def after_write(client: Transport, post_id: int, written: dict | None) -> dict:
    """The read-back right after a write whose answer was ``written`` (None: a post found by
    reconciliation, nothing to compare: one plain read)."""
    if not written:
        return client.get_post(post_id)
    return read_post(
        client,
        post_id,
        agrees=lambda live: not behind_write(live, written),
        stale=lambda live: behind_write(live, written),
    )


def against_receipt(
    client: Transport, post_id: int, verifies: Callable[[dict], bool], written_gmt: str | None
) -> dict:
    """A later read of the job's post (verification, approval, repair): read again as POST
    when it does not ``verifies``; :class:`CachedAnswer` when that read is older than the
    draft's write (``written_gmt``: its receipt's ``modified_gmt``)."""
    return read_post(client, post_id, agrees=verifies, stale=lambda live: older(live, written_gmt))
