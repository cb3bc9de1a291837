"""Results sized for clients with caps (issue 52, item 4; docs/mcp.md, "Long texts").

Claude Code refuses a tool result past 25,000 tokens (anthropics/claude-code#45766), and a
job's answer carries its article several times (the draft receipt's ``sent`` and
``expected``, the verification's fields). A token is at least one byte of UTF-8, so a result
of fewer than :data:`MAX_RESULT_BYTES` bytes is under that cap for any tokenizer, English or
Chinese alike. So every tool result and the job resource are :func:`fitted`: a text is
inline once at most (its repeats are *stubs* naming its SHA-256 and length: :func:`stub`),
and while the result is still too large, every text longer than :data:`INLINE_BYTES` (then
half that, and so on) is a stub too. The ``read_text`` tool returns a text by its digest in
pages (:func:`page`), each of which fits too. The gateway's own answers (the HTTP API) are
not changed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from functools import lru_cache

MAX_RESULT_BYTES = 24_000  # under 25,000 with the JSON-RPC envelope around it
INLINE_BYTES = 2_000  # a longer text is a stub, unless the result is small enough anyway
MIN_INLINE_BYTES = 64
PAGE_COST = 16_000  # bytes a page's text may cost in a result (its two copies, escaped)
READ_TOOL = "read_text"


def digest(text: str) -> str:
    """SHA-256 of ``text``'s UTF-8 bytes, lowercase hex."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def stub(text: str, job_id: str) -> dict:
    """What stands for ``text`` in a result: ``{"omitted": "text", "sha256", "chars",
    "utf8_bytes", "read_with": {"tool": "read_text", "arguments": {...}}}``."""
    sha = digest(text)
    return {
        "omitted": "text",
        "sha256": sha,
        "chars": len(text),
        "utf8_bytes": len(text.encode("utf-8", "surrogatepass")),
        "read_with": {
            "tool": READ_TOOL,
            "arguments": {"job_id": job_id, "sha256": sha, "offset": 0},
        },
    }


def compact(body, job_id: str, limit: int | None = INLINE_BYTES):
    """``body`` (parsed JSON) with every string longer than ``limit`` UTF-8 bytes (None: no
    limit), and every repeat of a string longer than :data:`MIN_INLINE_BYTES`, replaced by its
    :func:`stub`, at any depth; ``body`` is not changed. So a text is inline once at most."""
    seen: set[str] = set()

    def walk(node):
        if isinstance(node, list):
            return [walk(item) for item in node]
        if isinstance(node, dict):
            return {key: walk(value) for key, value in node.items()}
        if not isinstance(node, str):
            return node
        size = len(node.encode("utf-8", "surrogatepass"))
        if size <= MIN_INLINE_BYTES:
            return node
        if (limit is not None and size > limit) or node in seen:
            return stub(node, job_id)
        seen.add(node)
        return node

    return walk(body)


def fitted(body, job_id: str, size: Callable[[object], int]):
    """:func:`compact` ``body`` with the largest threshold - none, then :data:`INLINE_BYTES`
    halved each time down to :data:`MIN_INLINE_BYTES` - whose result's ``size`` (bytes, as
    the client gets it) is under :data:`MAX_RESULT_BYTES`: each text inline once at most,
    and every text inline that fits."""
    out = compact(body, job_id, None)
    limit = INLINE_BYTES
    while size(out) >= MAX_RESULT_BYTES and limit >= MIN_INLINE_BYTES:
        out = compact(body, job_id, limit)
        limit //= 2
    return out


def find(body, sha: str) -> str | None:
    """The first string in ``body`` (parsed JSON, any depth) whose :func:`digest` is
    ``sha``; None when there is none."""
    if isinstance(body, str):
        long = len(body.encode("utf-8", "surrogatepass")) > MIN_INLINE_BYTES
        return body if long and digest(body) == sha else None
    values = body.values() if isinstance(body, dict) else body if isinstance(body, list) else ()
    for value in values:
        found = find(value, sha)
        if found is not None:
            return found
    return None


@lru_cache(maxsize=512)
def _cost(char: str) -> int:
    """The bytes ``char`` costs in a tool result: escaped once in ``structuredContent``,
    twice in the text content that repeats it as JSON."""
    once = json.dumps(char, ensure_ascii=False)[1:-1]
    twice = json.dumps(once, ensure_ascii=False)[1:-1]
    return len(once.encode("utf-8", "surrogatepass")) + len(twice.encode("utf-8", "surrogatepass"))


def page(text: str, offset: int) -> dict:
    """The page of ``text`` from character ``offset``: as many characters as cost at most
    :data:`PAGE_COST` bytes in a result (:func:`_cost`). Returns ``{"sha256", "chars",
    "offset", "next_offset" (None: the last page), "text"}``.

    Raises:
        ValueError: ``offset`` is past the end of ``text``.
    """
    if not 0 <= offset <= len(text):
        raise ValueError(f"offset {offset} is past the text's {len(text)} characters")
    end, spent = offset, 0
    while end < len(text) and spent + _cost(text[end]) <= PAGE_COST:
        spent += _cost(text[end])
        end += 1
    return {
        "sha256": digest(text),
        "chars": len(text),
        "offset": offset,
        "next_offset": end if end < len(text) else None,
        "text": text[offset:end],
    }
