"""Results sized for clients with caps (issue 52, item 4; docs/mcp.md, "Long texts").

Claude Code refuses a tool result past 25,000 tokens (anthropics/claude-code#45766). A token
is at least one byte of UTF-8, so a result of fewer than :data:`MAX_RESULT_BYTES` bytes is
under that cap for any tokenizer, English or Chinese alike. A job's answer grows with its
article (the draft receipt's ``sent`` and ``baseline``, the verification's fields) and with
its images (a ledger row per upload and per attachment, each image's alt text and caption
in several places), so every tool result and the job resource are :func:`fitted`, as far as
the bound needs and no further:

* a text is inline once at most, and past a length a *stub* (:func:`stub`) naming its
  SHA-256 and length; a text is never replaced by a stub larger than itself;
* a list past a size keeps its first items, then one *more-items* marker
  (:func:`more_items`: the count, how many are shown, the digest of the whole list); an
  object past a size is an *object stub* (:func:`object_stub`);
* as a last resort the whole answer is an object stub, so a result never exceeds the bound.

Every stub's ``read_with`` names the ``read_text`` call that gives what it stands for in
pages (:func:`page`), each of which fits too: a text by characters, a list by items, an
object by members, their own long parts stubbed again. A stub names its value by digest
(:func:`digest`), found again in the job as it is when read (:func:`find`). The gateway's
own answers (the HTTP API) are not changed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from functools import lru_cache

MAX_RESULT_BYTES = 24_000  # under 25,000 with the JSON-RPC envelope around it
PAGE_COST = 20_000  # what a page's text or items may cost in a result (:func:`cost`)
# Stub a text costing more than this (None: only repeats), tried in this order ...
TEXT_LIMITS = (None, 4_000, 2_000, 1_000, 500, 250, 0)
# ... under each of these limits to a list's or object's cost, tried in this order.
CONTAINER_LIMITS = (None, 24_000, 16_000, 8_000, 4_000, 2_000, 1_000, 0)
READ_TOOL = "read_text"


def canonical(node) -> str:
    """``node`` (parsed JSON) as canonical JSON text: sorted keys, no spaces, UTF-8."""
    return json.dumps(node, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def digest(node) -> str:
    """SHA-256, lowercase hex, of a text's UTF-8 bytes, or of a list's or object's
    :func:`canonical` JSON."""
    text = node if isinstance(node, str) else canonical(node)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def cost(node) -> int:
    """The bytes ``node`` costs in a tool result: its JSON once in ``structuredContent``,
    and escaped once more in the text content that repeats it."""
    once = json.dumps(node, ensure_ascii=False)
    size = len(once.encode("utf-8", "surrogatepass"))
    return 2 * size + once.count('"') + once.count("\\")


def _read_with(job_id: str, sha: str, offset: int) -> dict:
    return {"tool": READ_TOOL, "arguments": {"job_id": job_id, "sha256": sha, "offset": offset}}


def stub(text: str, job_id: str) -> dict:
    """What stands for ``text``: ``{"omitted": "text", "sha256", "chars", "utf8_bytes",
    "read_with": {"tool": "read_text", "arguments": {"job_id", "sha256", "offset": 0}}}``."""
    sha = digest(text)
    return {
        "omitted": "text",
        "sha256": sha,
        "chars": len(text),
        "utf8_bytes": len(text.encode("utf-8", "surrogatepass")),
        "read_with": _read_with(job_id, sha, 0),
    }


def object_stub(node: dict, job_id: str) -> dict:
    """What stands for the object ``node``: ``{"omitted": "object", "sha256", "count" (its
    members), "read_with": {... "offset": 0}}``."""
    sha = digest(node)
    return {"omitted": "object", "sha256": sha, "count": len(node), "read_with": _read_with(
        job_id, sha, 0)}  # fmt: skip


def more_items(items: list, shown: int, job_id: str) -> dict:
    """The last item of a list cut after its first ``shown`` items: ``{"omitted": "items",
    "sha256" (of the whole list), "count" (its items), "shown", "read_with": {... "offset":
    shown}}``."""
    sha = digest(items)
    return {"omitted": "items", "sha256": sha, "count": len(items), "shown": shown,
            "read_with": _read_with(job_id, sha, shown)}  # fmt: skip


class _Compactor:
    """One pass over a body: texts costing more than ``text_limit`` or seen before, lists and
    objects (but the root) costing more than ``container_limit``, replaced as the module
    docstring says (None: no limit). :meth:`walk` returns ``(node, its cost)``."""

    def __init__(self, job_id: str, text_limit: int | None, container_limit: int | None):
        self.job_id, self.text_limit, self.limit = job_id, text_limit, container_limit
        self.seen: set[str] = set()
        self.added: list[str] = []  # the order texts went inline, to take back a cut part's

    def walk(self, node, root: bool = False) -> tuple[object, int]:
        if isinstance(node, str):
            return self._text(node)
        if isinstance(node, list):
            return self._list(node)
        if isinstance(node, dict):
            return self._object(node, root)
        return node, cost(node)

    def _text(self, text: str) -> tuple[object, int]:
        size = cost(text)
        over = self.text_limit is not None and size > self.text_limit
        if over or text in self.seen:
            stubbed = stub(text, self.job_id)
            if cost(stubbed) < size:
                return stubbed, cost(stubbed)
        if text not in self.seen:
            self.seen.add(text)
            self.added.append(text)
        return text, size

    def _forget_since(self, mark: int) -> None:
        self.seen.difference_update(self.added[mark:])
        del self.added[mark:]

    def _list(self, items: list) -> tuple[list, int]:
        out, total = [], 2
        for index, item in enumerate(items):
            mark = len(self.added)
            value, size = self.walk(item)
            if self.limit is not None and total + size > self.limit:
                self._forget_since(mark)
                marker = more_items(items, index, self.job_id)
                return [*out, marker], total + cost(marker)
            out.append(value)
            total += size + 4
        return out, total

    def _object(self, node: dict, root: bool) -> tuple[object, int]:
        mark = len(self.added)
        out, total = {}, 2
        for key, value in node.items():
            out[key], size = self.walk(value)
            total += cost(key) + size + 8
        if not root and self.limit is not None and total > self.limit:
            stubbed = object_stub(node, self.job_id)
            if cost(stubbed) < total:
                self._forget_since(mark)
                return stubbed, cost(stubbed)
        return out, total


def compact(body, job_id: str, text_limit: int | None, container_limit: int | None = None):
    """``body`` (parsed JSON, not changed) with its texts, lists and objects replaced as the
    module docstring says, for these limits (bytes of :func:`cost`; None: no limit)."""
    return _Compactor(job_id, text_limit, container_limit).walk(body, root=True)[0]


def fitted(body, job_id: str, size: Callable[[object], int], budget: int = MAX_RESULT_BYTES):
    """``body`` compacted as little as makes ``size(result)`` (bytes, as the client gets it)
    less than ``budget``: the first limit of :data:`CONTAINER_LIMITS` under which it can fit,
    with the first of :data:`TEXT_LIMITS` that does; else (last resort) the
    :func:`object_stub` of the whole body (a list: its :func:`more_items` from 0, a text:
    its :func:`stub`)."""
    if not isinstance(body, str | list | dict):
        return body
    for container_limit in CONTAINER_LIMITS:
        smallest = compact(body, job_id, TEXT_LIMITS[-1], container_limit)
        if size(smallest) >= budget:
            continue
        for text_limit in TEXT_LIMITS[:-1]:
            out = compact(body, job_id, text_limit, container_limit)
            if size(out) < budget:
                return out
        return smallest
    if isinstance(body, str):
        return stub(body, job_id)
    return object_stub(body, job_id) if isinstance(body, dict) else more_items(body, 0, job_id)


def find(body, sha: str):
    """A text, list or object in ``body`` (parsed JSON, any depth, ``body`` itself included)
    whose :func:`digest` is ``sha`` (any one: the same digest is the same value); None when
    there is none."""
    stack = [body]
    while stack:
        node = stack.pop()
        if isinstance(node, str | list | dict) and digest(node) == sha:
            return node
        if isinstance(node, dict | list):
            stack.extend(node.values() if isinstance(node, dict) else node)
    return None


def page(node, offset: int, job_id: str) -> dict:
    """The page from ``offset`` of what a stub named (a text, list or object of the job
    ``job_id``), costing at most about :data:`PAGE_COST` bytes in a result (:func:`cost`).

    A text's page is its characters from ``offset``: ``{"sha256", "chars", "offset",
    "next_offset" (None: the last page), "text"}``. A list's is its items from index
    ``offset``: ``{"sha256", "count", "offset", "next_offset", "items"}``, an object's its
    members in order: ``{... "entries": {...}}``; at least one item each, each item
    :func:`fitted` to the page (its own long parts stubbed again).

    Raises:
        ValueError: ``offset`` is past the end.
    """
    if not 0 <= offset <= len(node):
        raise ValueError(f"offset {offset} is past the end ({len(node)})")
    if isinstance(node, str):
        return _text_page(node, offset)
    members = list(node.items()) if isinstance(node, dict) else list(enumerate(node))
    taken, spent, end = [], 0, offset
    while end < len(members):
        name, value = members[end]
        value = fitted(value, job_id, cost, PAGE_COST // 2)
        spent += cost(value) + cost(name) + 8
        if taken and spent > PAGE_COST:
            break
        taken.append((name, value))
        end += 1
    out = {"sha256": digest(node), "count": len(node), "offset": offset,
           "next_offset": end if end < len(members) else None}  # fmt: skip
    if isinstance(node, dict):
        return {**out, "entries": dict(taken)}
    return {**out, "items": [value for _, value in taken]}


def _text_page(text: str, offset: int) -> dict:
    end, spent = offset, 0
    while end < len(text) and spent + _char_cost(text[end]) <= PAGE_COST:
        spent += _char_cost(text[end])
        end += 1
    return {
        "sha256": digest(text),
        "chars": len(text),
        "offset": offset,
        "next_offset": end if end < len(text) else None,
        "text": text[offset:end],
    }


@lru_cache(maxsize=4096)
def _char_cost(char: str) -> int:
    return cost(char) - 6  # without its quotes: 1 + 1 once, 2 + 2 escaped again


def shortened(body, budget: int = MAX_RESULT_BYTES):
    """``body`` that nothing can read again (a refusal's problem) with its texts cut to a
    length and its lists to a number of items, both halved until its :func:`cost` is under
    ``budget``; a cut text ends in "…", a cut list in ``{"omitted": "items", "count"}``."""
    chars, items = 4_000, 64
    while cost(body := _cut(body, chars, items)) >= budget and chars > 1:
        chars, items = chars // 2, max(items // 2, 1)
    return body


def _cut(node, chars: int, items: int):
    if isinstance(node, str):
        return node if len(node) <= chars else node[:chars] + "…"
    if isinstance(node, dict):
        return {key: _cut(value, chars, items) for key, value in node.items()}
    if not isinstance(node, list) or len(node) <= items:
        return [_cut(item, chars, items) for item in node] if isinstance(node, list) else node
    kept = [_cut(item, chars, items) for item in node[:items]]
    return [*kept, {"omitted": "items", "count": len(node)}]
