"""Images from a URL: ``PUT /v1/jobs/{id}/media/{slot}`` with ``{"source_url": ...}``. The
gateway downloads the image itself, and safely, before it goes the way of any other upload.

* Scheme: ``https`` unless ``GATEWAY_MEDIA_URL_SCHEMES`` allows others; no user info in the URL.
* Host: when ``GATEWAY_MEDIA_URL_ALLOW_HOSTS`` is set, only its ``host:port`` entries, compared
  exactly as written in the URL (the default port added when the URL has none).
* Address: the host is resolved ONCE (a temporary resolver failure, ``EAI_AGAIN``, is a
  retryable 503 ``media-source-unavailable``: it says nothing about the URL); every address
  it resolves to must be global
  (``ipaddress``: loopback, private, shared, link-local, reserved, multicast and unspecified
  refused; an IPv4-mapped IPv6 address is judged as the IPv4 address it carries), and the
  connection is made to that checked address (``urllib3`` pool on the IP, TLS verified for the
  host name through SNI), so a second DNS answer cannot send the request elsewhere. Decimal,
  octal and hex spellings of an address (``2130706433``, ``0177.0.0.1``, ``0x7f.1``) resolve
  to what they mean and are judged by it. A ``host:port`` listed verbatim in the allow-list
  may be loopback or private (a local image server); link-local and metadata addresses never.
  All of it before any connection, and again for every redirect (at most :data:`REDIRECTS`).
* Size and time: at most ``GATEWAY_MEDIA_URL_MAX_BYTES``, read in chunks; the whole download
  within ``GATEWAY_MEDIA_URL_TIMEOUT`` seconds.

The bytes are then sniffed and decoded like an upload (:func:`gateway.actions.media.sniff`).
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import time
from dataclasses import dataclass
from urllib.parse import urljoin
from urllib.parse import urlsplit

import certifi
import urllib3

from gateway.core import exceptions as exc
from gateway.core.config import Config

log = logging.getLogger(__name__)

REDIRECTS = 3
# getaddrinfo(3): "the name server returned a temporary failure indication. Try again later."
TEMPORARY_RESOLVER_ERRORS = frozenset({socket.EAI_AGAIN})
DEFAULT_PORTS = {"https": 443, "http": 80}
# Cloud metadata services, refused even when listed: AWS/GCP/Azure, AWS IPv6, Alibaba.
METADATA = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)


@dataclass(frozen=True)
class Download:
    """A downloaded image: the bytes, the URL it finally came from, its file name."""

    content: bytes
    final_url: str
    filename: str


def _refused(url: str, why: str) -> exc.GatewayError:
    return exc.MediaUrlRefused(
        f"the image URL is not allowed: {why}; nothing was downloaded",
        errors=[{"pointer": "/source_url", "message": why}],
    )


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    address = ipaddress.ip_address(text.split("%", 1)[0])  # drop an IPv6 zone id
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped or address


def check_address(address, listed: bool) -> str | None:
    """Why ``address`` may not be connected to, or None. ``listed``: the URL's ``host:port``
    is in the allow-list verbatim (then loopback and private pass, link-local never)."""
    if address in METADATA:
        return f"{address} is a cloud metadata address"
    if address.is_link_local:
        return f"{address} is a link-local address"
    if address.is_global or (listed and (address.is_loopback or address.is_private)):
        return None
    return f"{address} is not a public address"


def _target(url: str, config: Config) -> tuple[str, str, int, str, bool]:
    """``(scheme, host, port, host_port_as_written, listed)`` of an allowed URL."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        raise _refused(url, f"malformed URL ({error})") from None
    scheme = parts.scheme.lower()
    if scheme not in config.media_url_schemes or scheme not in DEFAULT_PORTS:
        allowed = ", ".join(sorted(config.media_url_schemes))
        raise _refused(url, f"scheme {scheme or '(none)'!r} is not allowed (allowed: {allowed})")
    if parts.username is not None or parts.password is not None:
        raise _refused(url, "credentials in the URL are not allowed")
    host = parts.hostname
    if not host:
        raise _refused(url, "the URL has no host")
    written = parts.netloc.rsplit("@", 1)[-1]
    if port is None:
        port = DEFAULT_PORTS[scheme]
        written = f"{written}:{port}"
    listed = written in config.media_url_allow_hosts
    if config.media_url_allow_hosts and not listed:
        raise _refused(url, f"host {written!r} is not in GATEWAY_MEDIA_URL_ALLOW_HOSTS")
    return scheme, host, port, written, listed


def resolve(url: str, config: Config) -> tuple[str, str, int, str]:
    """Check ``url`` and resolve its host once: ``(scheme, host, port, checked_ip)``.

    Raises:
        MediaUrlRefused (422): scheme, host or any resolved address not allowed, or the host
            does not resolve (no such name, ``EAI_NONAME``; no address, ``EAI_NODATA``).
        MediaSourceUnavailable (503, retryable): the resolver failed for now (``EAI_AGAIN``):
            not a property of the URL (getaddrinfo(3)).
    """
    scheme, host, port, _written, listed = _target(url, config)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        if error.errno in TEMPORARY_RESOLVER_ERRORS:
            raise exc.MediaSourceUnavailable(
                f"the host name {host!r} cannot be resolved now (a temporary DNS failure: "
                f"{error}); nothing was downloaded or written, try again",
                retry_after=5,
            ) from None
        raise _refused(url, f"host {host!r} does not resolve ({error})") from None
    except UnicodeError as error:
        raise _refused(url, f"host {host!r} does not resolve ({error})") from None
    addresses = [_address(info[4][0]) for info in infos]
    for address in addresses:
        why = check_address(address, listed)
        if why:
            raise _refused(url, why)
    return scheme, host, port, str(addresses[0])


def _pool(scheme: str, host: str, port: int, ip: str, timeout: float):
    limits = urllib3.Timeout(connect=timeout, read=timeout)
    if scheme == "https":
        return urllib3.HTTPSConnectionPool(
            ip, port, timeout=limits, retries=False, server_hostname=host,
            assert_hostname=host, cert_reqs="CERT_REQUIRED", ca_certs=certifi.where(),
        )  # fmt: skip
    return urllib3.HTTPConnectionPool(ip, port, timeout=limits, retries=False)


def download(url: str, config: Config) -> Download:
    """Download the image at ``url`` under the rules of this module.

    Raises:
        MediaUrlRefused (422): the URL (or a redirect) is not allowed, or the image is larger
            than ``media_url_max_bytes``.
        MediaDownloadFailed (502, retryable): no connection, a timeout, a non-200 answer.
    """
    deadline = time.monotonic() + config.media_url_timeout
    for _ in range(REDIRECTS + 1):
        scheme, host, port, ip = resolve(url, config)
        parts = urlsplit(url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        left = max(0.1, deadline - time.monotonic())
        host_header = host if port == DEFAULT_PORTS[scheme] else f"{host}:{port}"
        if ":" in host and not host.startswith("["):
            host_header = host_header.replace(host, f"[{host}]", 1)
        pool = _pool(scheme, host, port, ip, left)
        try:
            response = pool.urlopen(
                "GET", path, headers={"Host": host_header, "User-Agent": "publishing-gateway"},
                redirect=False, preload_content=False, assert_same_host=False,
            )  # fmt: skip
            if response.status in (301, 302, 303, 307, 308) and response.headers.get("Location"):
                url = urljoin(url, response.headers["Location"])
                response.release_conn()
                continue
            if response.status != 200:
                raise _failed(f"the image server answered {response.status}")
            content = _read_capped(response, config, deadline)
        except urllib3.exceptions.HTTPError as error:
            raise _failed(f"{type(error).__name__}: {str(error)[:120]}") from None
        finally:
            pool.close()
        name = urlsplit(url).path.rsplit("/", 1)[-1] or "image"
        return Download(content, url, name)
    raise _refused(url, f"more than {REDIRECTS} redirects")


def _read_capped(response, config: Config, deadline: float) -> bytes:
    declared = response.headers.get("Content-Length")
    if declared and declared.isdigit() and int(declared) > config.media_url_max_bytes:
        raise _too_large(config)
    chunks, size = [], 0
    for chunk in response.stream(64 * 1024):
        size += len(chunk)
        if size > config.media_url_max_bytes:
            raise _too_large(config)
        if time.monotonic() > deadline:
            raise _failed(f"the download took longer than {config.media_url_timeout:g} s")
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(config: Config) -> exc.GatewayError:
    return exc.MediaUrlRefused(
        f"the image is larger than {config.media_url_max_bytes} bytes",
        errors=[{"pointer": "/source_url", "message": "image too large"}],
    )


def _failed(why: str) -> exc.GatewayError:
    return exc.MediaDownloadFailed(f"the image could not be downloaded: {why}", retry_after=5)
