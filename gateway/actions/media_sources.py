"""Images from a URL: ``PUT /v1/jobs/{id}/media/{slot}`` with ``{"source_url": ...}``. The
gateway downloads the image itself, and safely, before it goes the way of any other upload.

* Scheme: ``https`` unless ``GATEWAY_MEDIA_URL_SCHEMES`` allows others; no user info in the URL.
* Host: when ``GATEWAY_MEDIA_URL_ALLOW_HOSTS`` is set, only its ``host:port`` entries, compared
  exactly as written in the URL (the default port added when the URL has none).
* Address: the host is resolved ONCE (a temporary resolver failure, ``EAI_AGAIN``, is a
  retryable 503 ``media-source-unavailable``: it says nothing about the URL); every address
  it resolves to must be global (:mod:`gateway.actions.egress`: loopback, private, shared,
  link-local, site-local, reserved, multicast and unspecified refused; an IPv6 address that
  carries an IPv4 address - mapped, translated, compatible, NAT64, 6to4 - is judged by the
  IPv4 address it carries), and the connection is made to that checked address (TLS
  verified for the host name through SNI), so a second DNS answer cannot send the request
  elsewhere. Decimal,
  octal and hex spellings of an address (``2130706433``, ``0177.0.0.1``, ``0x7f.1``) resolve
  to what they mean and are judged by it. A ``host:port`` listed verbatim in the allow-list
  may be loopback or private (a local image server); link-local and metadata addresses never.
  All of it before any connection, and again for every redirect (at most :data:`REDIRECTS`).
* Size and time: at most ``GATEWAY_MEDIA_URL_MAX_BYTES``; the whole download, redirects
  included, within ``GATEWAY_MEDIA_URL_TIMEOUT`` seconds, enforced on every read (a server
  that drips one byte a second is cut off at the deadline, not after each chunk).

The bytes are then sniffed and decoded like an upload (:func:`gateway.actions.media.sniff`).
:func:`probe` asks the same questions of a URL with only its first bytes read (``POST
/v1/articles/validate``, before any upload).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from urllib.parse import urljoin
from urllib.parse import urlsplit

import certifi

from gateway.actions import egress
from gateway.core import exceptions as exc
from gateway.core.config import Config

log = logging.getLogger(__name__)

REDIRECTS = 3
PROBE_BYTES = 4096  # a probe reads at most this much of an image: enough for its signature
ALLOW_SETTING = "GATEWAY_MEDIA_URL_ALLOW_HOSTS"
check_address = egress.check_address  # the guard every outbound URL shares


@dataclass(frozen=True)
class Download:
    """A downloaded image: the bytes, the URL it finally came from, its file name."""

    content: bytes
    final_url: str
    filename: str


@dataclass(frozen=True)
class Probe:
    """What a probe found: the body's first bytes, the URL they came from (after redirects),
    the ``Content-Length`` the server declared (None: not declared)."""

    first_bytes: bytes
    final_url: str
    declared_bytes: int | None


def _refused(url: str, why: str) -> exc.GatewayError:
    return exc.MediaUrlRefused(
        f"the image URL is not allowed: {why}; nothing was downloaded",
        errors=[{"pointer": "/source_url", "message": why}],
    )


def _resolved(url: str, config: Config) -> egress.Resolved:
    try:
        return egress.resolve(
            url, config.media_url_schemes, config.media_url_allow_hosts, ALLOW_SETTING
        )
    except egress.Refused as refusal:
        raise _refused(url, str(refusal)) from None
    except egress.ResolverUnavailable as failure:
        raise exc.MediaSourceUnavailable(
            f"the host name cannot be resolved now ({failure}); nothing was downloaded or "
            "written, try again",
            retry_after=5,
        ) from None


def resolve(url: str, config: Config) -> tuple[str, str, int, str]:
    """Check ``url`` and resolve its host once: ``(scheme, host, port, checked_ip)``.

    Raises:
        MediaUrlRefused (422): scheme, host or any resolved address not allowed
            (:func:`gateway.actions.egress.check_address`), or the host does not resolve (no
            such name, ``EAI_NONAME``; no address, ``EAI_NODATA``).
        MediaSourceUnavailable (503, retryable): the resolver failed for now (``EAI_AGAIN``):
            not a property of the URL (getaddrinfo(3)).
    """
    where = _resolved(url, config)
    return where.scheme, where.host, where.port, where.ip


def download(url: str, config: Config) -> Download:
    """Download the image at ``url`` under the rules of this module.

    Raises:
        MediaUrlRefused (422): the URL (or a redirect) is not allowed, or the image is larger
            than ``media_url_max_bytes``.
        MediaDownloadFailed (502, retryable): no connection, TLS, the deadline
            (``media_url_timeout``, redirects included), a non-200 answer.
        MediaSourceUnavailable (503, retryable): the resolver failed for now.
    """
    answer, final_url = _fetch(url, config, None)
    name = urlsplit(final_url).path.rsplit("/", 1)[-1] or "image"
    return Download(answer.content, final_url, name)


def probe(url: str, config: Config) -> Probe:
    """What :func:`download` would meet at ``url``, with nothing downloaded but the first
    :data:`PROBE_BYTES` bytes: the same guard, redirects, deadline and answers; an image
    whose ``Content-Length`` exceeds ``media_url_max_bytes`` is refused from its headers (an
    answer without one is measured only as far as those first bytes). For ``POST
    /v1/articles/validate``.

    Raises:
        what :func:`download` raises, for the same reasons.
    """
    answer, final_url = _fetch(url, config, PROBE_BYTES)
    declared = answer.headers.get("content-length", "")
    return Probe(answer.content, final_url, int(declared) if declared.isdigit() else None)


def _fetch(url: str, config: Config, first_bytes: int | None) -> tuple[egress.Answer, str]:
    """The 200 answer at ``url`` (redirects followed, each checked again) and the URL it came
    from; its body whole (up to ``media_url_max_bytes``) or its first ``first_bytes``."""
    deadline = time.monotonic() + config.media_url_timeout
    for _ in range(REDIRECTS + 1):
        where = _resolved(url, config)
        try:
            answer = egress.request(
                where,
                "GET",
                deadline,
                config.media_url_max_bytes,
                cafile=certifi.where(),
                first_bytes=first_bytes,
            )
        except egress.TooLarge:
            raise _too_large(config) from None
        except egress.Failed as failure:
            why = str(failure)
            if time.monotonic() >= deadline:
                why = f"the download took longer than {config.media_url_timeout:g} s"
            raise _failed(why) from None
        location = answer.headers.get("location")
        if answer.status in (301, 302, 303, 307, 308) and location:
            url = urljoin(url, location)
            continue
        if answer.status != 200:
            raise _failed(f"the image server answered {answer.status}")
        return answer, url
    raise _refused(url, f"more than {REDIRECTS} redirects")


def _too_large(config: Config) -> exc.GatewayError:
    return exc.MediaUrlRefused(
        f"the image is larger than {config.media_url_max_bytes} bytes",
        errors=[{"pointer": "/source_url", "message": "image too large"}],
    )


def _failed(why: str) -> exc.GatewayError:
    return exc.MediaDownloadFailed(f"the image could not be downloaded: {why}", retry_after=5)
