"""Outbound HTTP to URLs a tenant names - an image's ``source_url``, the tenant's notification
URL - under one guard (SSRF) and one clock.

* **Address guard** (:func:`resolve`, :func:`check_address`): the host is resolved once and
  every address it resolves to must be public. An IPv6 address that carries an IPv4 address
  is judged by the IPv4 address it carries: IPv4-mapped (``::ffff:0:0/96``), IPv4-translated
  (``::ffff:0:0:0/96``, RFC 2765), IPv4-compatible (``::/96``, RFC 4291 section 2.5.5.1),
  NAT64 with the well-known prefix (``64:ff9b::/96``, RFC 6052) and 6to4 (``2002::/16``,
  RFC 3056); the local-use NAT64 prefix (``64:ff9b:1::/48``, RFC 8215), where the embedded
  address cannot be located without the operator's prefix length, is refused whole.
  Loopback, private, shared, link-local, site-local, reserved, multicast and unspecified
  addresses are refused (``ipaddress``, plus an explicit multicast check: Python 3.11 counts
  ``224.0.0.1`` and ``ff02::1`` as global). A ``host:port`` listed verbatim in an
  allow-list may be loopback or private (a local receiver or image server); link-local,
  multicast and cloud metadata addresses never.
* **Pinned, deadline-bound request** (:func:`request`): the TCP connection goes to the checked
  address (``socket.create_connection``), TLS is verified for the host name of the URL
  (``ssl``: SNI and hostname check), and the whole exchange - connect, TLS handshake, request,
  status line, headers and body - ends by one deadline. A socket timeout restarts with every
  byte, so a server that drips one byte a second never trips it; here a timer shuts the
  socket down when the deadline passes, whatever read is under way (``socket.shutdown``
  interrupts a blocked ``recv`` in another thread). The answer's body is read up to a size
  cap, or only its first bytes (a probe: the connection is then closed). HTTP/1.1 itself is
  the standard library's ``http.client``.

Source: OWASP "Server Side Request Forgery Prevention Cheat Sheet"; IANA IPv4/IPv6
Special-Purpose Address Registries.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

DEFAULT_PORTS = {"https": 443, "http": 80}
# getaddrinfo(3): "the name server returned a temporary failure indication. Try again later."
TEMPORARY_RESOLVER_ERRORS = frozenset({socket.EAI_AGAIN})
# Cloud metadata services, refused even when listed: AWS/GCP/Azure, AWS IPv6, Alibaba.
METADATA = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)
NAT64 = ipaddress.ip_network("64:ff9b::/96")
NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")
COMPATIBLE = ipaddress.ip_network("::/96")
CHUNK = 16 * 1024


class Refused(Exception):
    """The URL or an address it resolves to may not be connected to (``why`` in words)."""


class ResolverUnavailable(Exception):
    """The host name cannot be resolved now (``EAI_AGAIN``): not a property of the URL."""


class Failed(Exception):
    """The request did not complete: no connection, TLS, a malformed answer, the deadline."""


class TooLarge(Exception):
    """The answer's body is larger than the cap."""


@dataclass(frozen=True)
class Resolved:
    """A checked URL: scheme, host name, port, the address to connect to, the path with query."""

    scheme: str
    host: str
    port: int
    ip: str
    path: str

    @property
    def host_header(self) -> str:
        """``Host`` as the URL names it (RFC 9110 section 7.2), IPv6 literals bracketed."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == DEFAULT_PORTS[self.scheme] else f"{host}:{self.port}"


@dataclass(frozen=True)
class Answer:
    """An HTTP answer: status, headers (lower-case names) and the body read (capped)."""

    status: int
    headers: dict[str, str]
    content: bytes


def embedded_ipv4(address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, translated, compatible, NAT64 with
    the well-known prefix, 6to4), else None. ``::`` and ``::1`` carry none."""
    if address.version == 4:
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    low = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address in NAT64 or address in TRANSLATED:
        return low
    if address in COMPATIBLE and int(address) > 1:
        return low
    return None


def _judge(address, listed: bool) -> str | None:
    if address in METADATA:
        return f"{address} is a cloud metadata address"
    if address.is_link_local:
        return f"{address} is a link-local address"
    if address.is_multicast:
        return f"{address} is a multicast address"
    if address.is_unspecified:
        return f"{address} is the unspecified address"
    if listed and (address.is_loopback or address.is_private):
        return None
    site_local = address.version == 6 and address.is_site_local
    if not address.is_global or address.is_reserved or site_local:
        return f"{address} is not a public address"
    return None


def check_address(address, listed: bool) -> str | None:
    """Why ``address`` may not be connected to, or None. ``listed``: the URL's ``host:port``
    is in the allow-list verbatim (then loopback and private pass; link-local, multicast and
    metadata never). An address carrying an IPv4 address is judged by that address."""
    if address.version == 6 and address in NAT64_LOCAL:
        return f"{address} is in the local-use NAT64 prefix 64:ff9b:1::/48"
    inner = embedded_ipv4(address)
    if inner is None:
        return _judge(address, listed)
    why = _judge(inner, listed)
    return f"{address} carries the IPv4 address {inner}: {why}" if why else None


def _address(text: str):
    return ipaddress.ip_address(text.split("%", 1)[0])  # drop an IPv6 zone id


def target(url: str, schemes: frozenset[str], allow_hosts: frozenset[str], setting: str):
    """``(scheme, host, port, path, listed)`` of an allowed URL (before any lookup).

    Raises:
        Refused: malformed, a scheme not in ``schemes``, credentials in the URL, no host, or
            (``allow_hosts`` not empty) a ``host:port`` not listed (``setting`` names the
            allow-list in the message).
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        raise Refused(f"malformed URL ({error})") from None
    scheme = parts.scheme.lower()
    if scheme not in schemes or scheme not in DEFAULT_PORTS:
        allowed = ", ".join(sorted(schemes))
        raise Refused(f"scheme {scheme or '(none)'!r} is not allowed (allowed: {allowed})")
    if parts.username is not None or parts.password is not None:
        raise Refused("credentials in the URL are not allowed")
    host = parts.hostname
    if not host:
        raise Refused("the URL has no host")
    written = parts.netloc.rsplit("@", 1)[-1]
    if port is None:
        port = DEFAULT_PORTS[scheme]
        written = f"{written}:{port}"
    listed = written in allow_hosts
    if allow_hosts and not listed:
        raise Refused(f"host {written!r} is not in {setting}")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return scheme, host, port, path, listed


def resolve(
    url: str, schemes: frozenset[str], allow_hosts: frozenset[str], setting: str
) -> Resolved:
    """Check ``url`` (:func:`target`) and resolve its host ONCE; every address it resolves to
    must pass :func:`check_address`. Decimal, octal and hex spellings of an IPv4 address
    resolve to what they mean and are judged by it.

    Raises:
        Refused: see :func:`target`; an address refused (a loopback or private one, which
            listing would allow, with the hint to add ``host:port`` to ``setting``); the host
            does not resolve (``EAI_NONAME``, ``EAI_NODATA``).
        ResolverUnavailable: a temporary resolver failure (``EAI_AGAIN``, getaddrinfo(3)).
    """
    scheme, host, port, path, listed = target(url, schemes, allow_hosts, setting)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        if error.errno in TEMPORARY_RESOLVER_ERRORS:
            raise ResolverUnavailable(f"{host!r}: a temporary DNS failure ({error})") from None
        raise Refused(f"host {host!r} does not resolve ({error})") from None
    except UnicodeError as error:
        raise Refused(f"host {host!r} does not resolve ({error})") from None
    addresses = [_address(info[4][0]) for info in infos]
    for address in addresses:
        why = check_address(address, listed)
        if why and not listed and check_address(address, True) is None:
            # loopback or private: a local server the operator may list on purpose
            why += f"; to allow a local server, add '{host}:{port}' to {setting}"
        if why:
            raise Refused(why)
    return Resolved(scheme, host, port, str(addresses[0]), path)


def open_connection(ip: str, port: int, timeout: float) -> socket.socket:
    """The TCP connection to the checked address (one place, so tests can see every
    connection made)."""
    return socket.create_connection((ip, port), timeout=timeout)


class _Deadline:
    """Shuts ``sock`` down (through a duplicate, which survives the TLS wrap) at the deadline:
    a blocked read in the requesting thread then ends at once."""

    def __init__(self, sock: socket.socket, seconds: float):
        self.passed = False
        self._watch = sock.dup()
        self._timer = threading.Timer(max(0.0, seconds), self._cut)
        self._timer.daemon = True
        self._timer.start()

    def _cut(self) -> None:
        self.passed = True
        try:
            self._watch.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        self._timer.cancel()
        self._watch.close()


def request(
    where: Resolved,
    method: str,
    deadline: float,
    max_bytes: int,
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
    cafile: str | None = None,
    first_bytes: int | None = None,
) -> Answer:
    """One HTTP request to ``where`` (connected to ``where.ip``, TLS verified for
    ``where.host``), ended by ``deadline`` (a :func:`time.monotonic` instant) whatever the
    server does, its body read up to ``max_bytes`` (a 3xx answer's body is not read).
    ``first_bytes``: read only the body's first ``first_bytes`` bytes (fewer when it is
    shorter) and close the connection: a probe, which still refuses a body whose declared
    ``Content-Length`` is larger than ``max_bytes``, or whose first bytes already are.

    Raises:
        Failed: no connection, TLS failure, a malformed answer, or the deadline passed.
        TooLarge: the body (declared, or read without ``first_bytes``) is larger than
            ``max_bytes``.
    """
    left = deadline - time.monotonic()
    if left <= 0:
        raise Failed("the deadline passed before connecting")
    try:
        sock = open_connection(where.ip, where.port, left)
    except OSError as error:
        raise Failed(f"no connection: {type(error).__name__}: {str(error)[:80]}") from None
    clock = _Deadline(sock, deadline - time.monotonic())
    try:
        return _exchange(sock, where, method, headers, body, (max_bytes, first_bytes), cafile)
    except (OSError, ValueError, http.client.HTTPException) as error:
        if clock.passed:
            raise Failed("the deadline passed") from None
        raise Failed(f"{type(error).__name__}: {str(error)[:120]}") from None
    finally:
        clock.close()
        sock.close()
        if clock.passed:  # a body cut short by the deadline reads as a short body
            raise Failed("the deadline passed")


def _exchange(sock, where: Resolved, method, headers, body, limits, cafile) -> Answer:
    if where.scheme == "https":
        context = ssl.create_default_context(cafile=cafile)
        sock = context.wrap_socket(sock, server_hostname=where.host)
    connection = http.client.HTTPConnection(where.host, where.port)
    connection.sock = sock  # the pinned, already connected socket
    try:
        return _read(connection, where, method, headers, body, *limits)
    finally:
        connection.close()


def _read(connection, where: Resolved, method, headers, body, max_bytes, first_bytes) -> Answer:
    sent = {"Host": where.host_header, "User-Agent": "publishing-gateway", **(headers or {})}
    connection.request(method, where.path, body=body, headers=sent)
    response = connection.getresponse()
    found = {name.lower(): value for name, value in response.getheaders()}
    if 300 <= response.status < 400:
        return Answer(response.status, found, b"")
    declared = found.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise TooLarge(f"the answer declares {declared} bytes")
    if first_bytes is not None:
        head = _first(response, min(first_bytes, max_bytes + 1))
        if len(head) > max_bytes:  # a cap below first_bytes: known too large already
            raise TooLarge(f"the answer is larger than {max_bytes} bytes")
        return Answer(response.status, found, head)
    chunks, size = [], 0
    while True:
        chunk = response.read(CHUNK)
        if not chunk:
            break
        size += len(chunk)
        if size > max_bytes:
            raise TooLarge(f"the answer is larger than {max_bytes} bytes")
        chunks.append(chunk)
    return Answer(response.status, found, b"".join(chunks))


def _first(response, limit: int) -> bytes:
    """The body's first ``limit`` bytes (fewer when it is shorter); the rest is never read."""
    chunks, size = [], 0
    while size < limit:
        chunk = response.read(limit - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)
