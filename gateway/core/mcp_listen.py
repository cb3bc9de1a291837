"""Where the remote MCP listener listens and the URLs it names, from the configuration
(``GATEWAY_MCP_LISTEN``, ``GATEWAY_PUBLIC_URL``; :data:`gateway.core.config.SETTINGS`)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from gateway.core.config import Config
from gateway.core.config import ConfigError

MCP_PATH = "/mcp"
LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class Listener:
    """``host`` and ``port`` to bind; ``issuer``: the public base URL (the OAuth issuer,
    RFC 8414); ``resource``: ``<issuer>/mcp``, the protected resource (RFC 9728) every token
    must be issued for (RFC 8707)."""

    host: str
    port: int
    issuer: str
    resource: str

    @property
    def public_host(self) -> str:
        """The ``Host`` clients send through the public URL (``host[:port]``)."""
        return urlsplit(self.issuer).netloc

    @property
    def public_origin(self) -> str:
        """The public URL's origin (``scheme://host[:port]``)."""
        parts = urlsplit(self.issuer)
        return f"{parts.scheme}://{parts.netloc}"


def of(cfg: Config) -> Listener | None:
    """The listener ``cfg`` asks for, or None (``mcp_listen`` empty).

    Raises:
        ConfigError: bound to a non-loopback address without ``GATEWAY_PUBLIC_URL`` (the
            Host clients use, and the URL tokens are issued for, would be unknown).
    """
    if not cfg.mcp_listen:
        return None
    host, _, port = cfg.mcp_listen.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if host not in LOOPBACK and not cfg.public_url:
        raise ConfigError(
            f"GATEWAY_MCP_LISTEN binds {host}: set GATEWAY_PUBLIC_URL to the https:// address "
            "clients reach it at (the TLS proxy in front), or bind a loopback address"
        )
    where = f"[{host}]" if ":" in host else host
    issuer = cfg.public_url or f"http://{where}:{port}"
    return Listener(host, int(port), issuer, issuer + MCP_PATH)


def review_base(cfg: Config, host: str, port: int) -> str:
    """Where the review site (and so the OAuth consent page, ``/review/oauth``) is reached by
    an editor's browser: ``GATEWAY_PUBLIC_URL`` behind the TLS proxy, else the API's own
    address ``host:port`` (a wildcard bind read as loopback: the browser on this machine)."""
    if cfg.public_url:
        return cfg.public_url
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    where = f"[{host}]" if ":" in host else host
    return f"http://{where}:{port}"
