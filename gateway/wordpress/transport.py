"""The one interface the domain calls, whichever way a site is reached: REST
(:class:`~gateway.wordpress.client.WordPressClient`) or XML-RPC
(:class:`~gateway.wordpress.xmlrpc.XmlRpcClient`). Both take and return objects in the REST
API's ``context=edit`` shape and raise only :mod:`gateway.wordpress.errors` exceptions.
"""

from __future__ import annotations

from typing import Protocol

from gateway.wordpress.client import WordPressClient
from gateway.wordpress.xmlrpc import XmlRpcClient

TRANSPORTS = ("rest", "xmlrpc")


class Transport(Protocol):
    """What the domain may ask of a site (see each implementation for the endpoints).

    Attributes:
        transport: ``rest`` or ``xmlrpc``.
        base_url, username, timeout: the site, the user, seconds per call.
    """

    transport: str
    base_url: str
    username: str

    def url(self, route: str = "/") -> str: ...
    def create_post(self, fields: dict) -> dict: ...
    def update_post(self, post_id: int, fields: dict) -> dict: ...
    def get_post(self, post_id: int, direct: bool = False) -> dict: ...
    def delete_post(self, post_id: int) -> object: ...
    def find_posts_by_title(self, title: str) -> list[dict]: ...
    def get_many(self, route: str, ids: list[int]) -> dict[int, dict]: ...
    def upload_media(self, content: bytes, filename: str, mime_type: str, fields: dict) -> dict: ...
    def finish_upload(self, media_id: int, key: str, fields: dict) -> None: ...
    def update_media(self, media_id: int, fields: dict) -> dict: ...
    def get_media(self, media_id: int) -> dict: ...
    def fetch_file(
        self, url: str, content_types: tuple[str, ...], max_bytes: int, deadline: float = 20.0
    ): ...
    def search_terms(
        self, route: str, search: str, page: int, per_page: int = 100
    ) -> list[dict]: ...
    def create_term(self, route: str, name: str) -> dict: ...
    def get_term(self, route: str, term_id: int) -> dict: ...
    def companion_status(self) -> dict | None: ...
    def wordpress_version(self) -> str | None: ...
    def find_by_operation_keys(self, keys: list[str], since=None, types=None) -> list[dict]: ...
    def set_operation_key(self, object_id: int, key: str, object_type: str) -> None: ...
    def me(self) -> dict: ...
    def site_index(self) -> dict: ...


def connect(
    transport: str,
    base_url: str,
    username: str,
    app_password: str,
    timeout: float,
    rest_root: str | None = None,
) -> Transport:
    """A client for ``transport`` (``rest`` or ``xmlrpc``) of the site at ``base_url`` whose
    REST API is at ``rest_root`` (None: ``{base_url}/wp-json/``); no network call is made here.

    Raises:
        ValueError: an unknown transport name.
    """
    if transport == "xmlrpc":
        return XmlRpcClient(base_url, username, app_password, timeout, rest_root)
    if transport == "rest":
        return WordPressClient(base_url, username, app_password, timeout, rest_root)
    raise ValueError(f"unknown transport {transport!r}; expected one of {TRANSPORTS}")
