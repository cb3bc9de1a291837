"""The format of gateway-marked blocks in a post's content: each named block sits between
markers that carry its name and the digest of its HTML (:mod:`gateway.actions.blocks` writes
them; read-back verification leaves them out of the content it compares)::

    <!-- gateway:block name=resources digest=0123456789abcdef -->
    <!-- wp:html -->
    ...html...
    <!-- /wp:html -->
    <!-- /gateway:block name=resources -->

WordPress keeps HTML comments for authors (kses re-emits ``<!--...-->``, collapsing runs of
``-``; a name containing ``--`` is therefore written with ``%2D`` for ``-``). Pure text
functions: no ledger, no WordPress.
"""

from __future__ import annotations

import re

from gateway.core.digests import sha256_hex

_ANY_BLOCK = re.compile(
    r"\n*<!-- gateway:block name=(?P<name>\S+) digest=(?P<digest>[0-9a-f]{16}) -->"
    r".*?<!-- /gateway:block name=(?P=name) -->",
    re.DOTALL,
)


def marker_name(name: str) -> str:
    """The name as written in a marker: kses collapses ``--`` inside comments."""
    return name.replace("-", "%2D") if "--" in name else name


def html_digest(html: str) -> str:
    """The first 16 hex digits of the SHA-256 of the block's HTML (UTF-8)."""
    return sha256_hex(html)[:16]


def render(name: str, html: str) -> str:
    """The marked block as it is appended to the content."""
    label = marker_name(name)
    return (
        f"<!-- gateway:block name={label} digest={html_digest(html)} -->\n"
        f"<!-- wp:html -->\n{html}\n<!-- /wp:html -->\n"
        f"<!-- /gateway:block name={label} -->"
    )


def blocks_in(content: str) -> list[dict]:
    """Marked blocks of ``content``: ``[{"name" (as in the marker), "digest", "text"}]``."""
    return [
        {"name": m.group("name"), "digest": m.group("digest"), "text": m.group(0)}
        for m in _ANY_BLOCK.finditer(content)
    ]


def strip_blocks(content: str) -> str:
    """``content`` without gateway-marked blocks and trailing whitespace (what verification
    compares with the draft baseline)."""
    return _ANY_BLOCK.sub("", content).rstrip()


def has_block(content: str, name: str, digest: str) -> bool:
    """Whether ``content`` holds the block ``name`` with HTML digest ``digest``."""
    label = marker_name(name)
    return any(b["name"] == label and b["digest"] == digest for b in blocks_in(content))


def with_block(content: str, name: str, html: str) -> str:
    """``content`` with block ``name`` set to ``html``: replaced in place where marked (extra
    copies of the name are removed), appended at the end otherwise."""
    label, block, done = marker_name(name), render(name, html), False

    def replace(match: re.Match) -> str:
        nonlocal done
        if match.group("name") != label:
            return match.group(0)
        if done:
            return ""
        done = True
        return "\n\n" + block

    updated = _ANY_BLOCK.sub(replace, content)
    return updated if done else content.rstrip("\n") + "\n\n" + block
