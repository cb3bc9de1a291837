"""The ``requests`` session of the REST client: the environment read once per host.

``requests`` looks at the environment on every call (``*_PROXY``/``NO_PROXY`` through
:func:`urllib.request.getproxies`, which walks all of ``os.environ``, then
``REQUESTS_CA_BUNDLE`` and ``CURL_CA_BUNDLE``): a measurable part of the gateway's CPU per
WordPress call. A gateway process does not change its environment while it runs, so the
merged settings are kept per scheme and host (and per ``stream``/``verify``/``cert``
argument); calls with their own ``proxies`` take ``requests``' path unchanged.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import requests


class Session(requests.Session):
    """A :class:`requests.Session` whose environment settings are computed once per host."""

    def __init__(self) -> None:
        super().__init__()
        self._settings: dict[tuple, dict] = {}

    def merge_environment_settings(self, url, proxies, stream, verify, cert) -> dict:
        """:meth:`requests.Session.merge_environment_settings`, cached per host (see module)."""
        if proxies or not self.trust_env:
            return super().merge_environment_settings(url, proxies, stream, verify, cert)
        parts = urlsplit(url)
        key = (parts.scheme, parts.netloc, stream, verify, cert)
        settings = self._settings.get(key)
        if settings is None:
            settings = super().merge_environment_settings(url, {}, stream, verify, cert)
            if len(self._settings) < 64:
                self._settings[key] = settings
        return {**settings, "proxies": dict(settings["proxies"])}
