"""One parser of a media request, for every door: the HTTP view (``PUT
/v1/jobs/{id}/media/{slot}``, JSON or multipart), the agents' ``upload_media`` tool (the
action's ``send``, :func:`gateway.actions.media.send_request`) and the MCP server's
``upload_media`` tool (:mod:`gateway.mcp.tools`, which may import only ``gateway.core``).

A request names its image by **exactly one source**: its bytes (``content_base64`` in JSON, the
``file`` part of a multipart form; over MCP's stdio also a local ``path``) or a URL the gateway
downloads (``source_url``). Sending both or neither is 422 ``validation-failed`` at the pointer
``/content_base64``; bytes that are not base64 are refused at ``/content_base64``; no bytes at
all ("the file is empty") at the member that carried them: ``/content_base64``, ``/file`` or
``/path``. Nothing is claimed, downloaded or sent before this parser accepts the request.
Source: docs/api.md, "PUT /v1/jobs/{job_id}/media/{slot}"; the body's schema is
``gateway/schemas/media.json`` (checked before this parser runs).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from gateway.core import exceptions as exc

SOURCES = ("content_base64", "source_url")  # the JSON body's sources, in the order named
METADATA = ("alt_text", "caption", "title")


@dataclass(frozen=True)
class MediaRequest:
    """A media request the parser accepted.

    Attributes:
        content: the image's bytes (never empty), or None when ``source_url`` names it.
        source_url: the URL the gateway downloads the image from, or None.
        filename: the file name asked for (None: named ``{slot}.{ext}`` from the bytes).
        alt_text, caption, title: the attachment's metadata as sent (None: not sent).
    """

    content: bytes | None
    source_url: str | None
    filename: str | None = None
    alt_text: str | None = None
    caption: str | None = None
    title: str | None = None


def one_source(body: dict, sources: tuple[str, ...] = SOURCES) -> str:
    """The one member of ``sources`` that ``body`` holds (a member counts when present).

    Raises:
        ValidationFailed (422): none or more than one of them, pointer ``/content_base64``.
    """
    given = [name for name in sources if name in body]
    if len(given) != 1:
        names = f"{', '.join(sources[:-1])} and {sources[-1]}"
        raise exc.ValidationFailed(
            f"send exactly one of {names}",
            errors=[{"pointer": "/content_base64", "message": f"exactly one of {names} is "
                     "required"}],
        )  # fmt: skip
    return given[0]


def unset_empty_sources(arguments: dict, sources: tuple[str, ...] = SOURCES) -> dict:
    """A tool call's ``arguments`` without the ``sources`` sent as ``""`` when another of them
    carries a value: the client fills every optional it does not mean with ``""`` (Cursor,
    cursor/cursor#3614) and names its one source so. A lone ``""`` stays, for every door to
    refuse alike ("the file is empty"). The tools' door only (the MCP tools, the agents'
    function tools; docs/mcp.md, "What the tools accept"): the HTTP API stays strict."""
    if not any(arguments.get(name) not in (None, "") for name in sources):
        return arguments
    return {k: v for k, v in arguments.items() if not (k in sources and v == "")}


def not_empty(content: bytes, pointer: str) -> bytes:
    """``content``, unless it is empty.

    Raises:
        ValidationFailed (422): "the file is empty" at ``pointer``, the member that carried
            the bytes (``/content_base64``, ``/file`` or ``/path``).
    """
    if not content:
        raise exc.ValidationFailed(
            "the file is empty", errors=[{"pointer": pointer, "message": "empty"}]
        )
    return content


def decoded(text: str) -> bytes:
    """The bytes of ``content_base64`` (RFC 4648 base64, no other characters).

    Raises:
        ValidationFailed (422): not valid base64, or nothing (pointer ``/content_base64``).
    """
    try:
        content = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise exc.ValidationFailed(
            "content_base64 is not valid base64",
            errors=[{"pointer": "/content_base64", "message": "invalid base64"}],
        ) from None
    return not_empty(content, "/content_base64")


def parse(body: dict) -> MediaRequest:
    """The JSON media request ``body`` (already valid against ``media.json``: HTTP, agents).

    Raises:
        ValidationFailed (422): as :func:`one_source` and :func:`decoded`.
    """
    metadata = {name: body.get(name) for name in METADATA}
    if one_source(body) == "source_url":
        return MediaRequest(None, body["source_url"], body.get("filename"), **metadata)
    return MediaRequest(decoded(body["content_base64"]), None, body.get("filename"), **metadata)


def parse_upload(content: bytes, filename: str | None, fields: dict) -> MediaRequest:
    """A multipart upload: the ``file`` part's bytes and file name, and the form's metadata
    ``fields`` (already checked).

    Raises:
        ValidationFailed (422): the file is empty (pointer ``/file``).
    """
    metadata = {name: fields.get(name) for name in METADATA}
    return MediaRequest(not_empty(content, "/file"), None, filename, **metadata)
