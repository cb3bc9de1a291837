"""A port already in use is refused before a server starts listening on it.

granian binds its listening socket with ``SO_REUSEPORT``: a second ``gateway serve`` on a busy
port would start and share it with the first, the kernel spreading connections over both
(with another ledger behind the second, requests alternate between two gateways). So the port
is tried first with a plain socket (``SO_REUSEADDR`` only, as most servers bind), which the
kernel refuses while any socket listens there. An operator who wants port sharing on purpose
asks for it (``gateway serve --share-port``).
"""

from __future__ import annotations

import errno
import socket


class PortInUse(Exception):
    """Something already listens on the address; the message names it."""


def refuse_busy_port(host: str, port: int) -> None:
    """Fail when something already listens on ``host:port`` (TCP), before a server binds it.

    ``port`` 0 (the kernel picks one) is never busy. Binds a probe socket and closes it at
    once; a server started right after binds the port itself (POSIX ``bind(2)``, ``EADDRINUSE``).

    Raises:
        PortInUse: the address is in use (``EADDRINUSE``) or cannot be bound here
            (``EADDRNOTAVAIL``, ``EACCES``: a port below 1024 without the right).
    """
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise PortInUse(
                    f"port {port} on {host} is already in use (another gateway serve, or "
                    "another program); stop it or choose another --port"
                ) from None
            raise PortInUse(f"cannot listen on {host}:{port}: {error.strerror}") from None
