"""The XML-RPC transport: the same verbs as :class:`gateway.wordpress.client.WordPressClient`,
over WordPress's XML-RPC API (``xmlrpc.php``) with ``python-wordpress-xmlrpc``, for sites that
cannot install the companion plugin.

Follows WordPress's XML-RPC API (``wp.newPost``, ``wp.editPost``, ``wp.getPost``,
``wp.getPosts``, ``wp.uploadFile``, ``wp.getProfile``; ``wp-includes/class-wp-xmlrpc-server.php``).
Objects are returned in the REST API's ``context=edit`` shape (``title.raw``, ``meta``,
``featured_media``...; :mod:`gateway.wordpress.xmlrpc_shapes`) so the domain never learns
which transport it talks to; failures map onto the same error tree
(:func:`gateway.wordpress.xmlrpc_errors.error_for`).

* **Identifier.** The operation key travels as the non-protected custom field
  ``gateway_operation_key`` (protected keys are dropped over XML-RPC without the plugin).
  Lookups also read ``_gateway_operation_key`` (REST with the plugin), so a site keeps its
  history when its transport is switched.
* **Attachments.** ``wp.uploadFile`` carries no custom field, so an upload is two calls: the
  file is named ``{stem}-gw{sha256(key)[:16]}.{ext}`` (WordPress also makes that the title),
  then ``wp.editPost`` on the attachment sets the key (and title, caption). A crash between the
  two leaves the token in the title: the lookup finds it, and :meth:`finish_upload` completes
  the second call. Alt text (``_wp_attachment_image_alt``) is protected: not writable here.
* **Lookups** scan ``wp.getPosts`` newest first (no author filter, no meta query), filter on
  our side and stop at ``since``; pages may be short (posts the user cannot edit are left out).
* **Terms** are read (``wp.getTerms``, ``wp.getTerm``), never created (``wp.newTerm`` needs
  ``edit_terms``); a ``future`` post, which ``wp.getPost`` calls ``publish``, is told apart.
* **Writes send only what was asked**: never a library ``WordPressPost`` (its ``title``
  defaults to "Untitled", and one read by ``GetPosts`` carries a thumbnail shape that an
  ``EditPost`` turns into "remove the featured image"). Custom fields are updated by their
  meta id (without it WordPress adds a second value).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import threading
import time
import xmlrpc.client

from gateway.wordpress.client import WordPressClient
from gateway.wordpress.client import notify
from gateway.wordpress.errors import WordPressError
from gateway.wordpress.errors import WordPressNotFound
from gateway.wordpress.errors import WordPressOutcomeUnknown
from gateway.wordpress.errors import WordPressRefused
from gateway.wordpress.identifiers import media_token
from gateway.wordpress.xmlrpc_compat import methods
from gateway.wordpress.xmlrpc_compat import wordpress_xmlrpc
from gateway.wordpress.xmlrpc_errors import error_for
from gateway.wordpress.xmlrpc_http import TimeoutTransport
from gateway.wordpress.xmlrpc_shapes import KEY_FIELD
from gateway.wordpress.xmlrpc_shapes import PROTECTED_KEY_FIELD
from gateway.wordpress.xmlrpc_shapes import iso
from gateway.wordpress.xmlrpc_shapes import key_of
from gateway.wordpress.xmlrpc_shapes import lookup_entry
from gateway.wordpress.xmlrpc_shapes import rest_shape
from gateway.wordpress.xmlrpc_shapes import term_shape
from gateway.wordpress.xmlrpc_shapes import xmlrpc_struct

POST_STATUSES = ["draft", "pending", "private", "publish", "future", "trash"]
ATTACHMENT_STATUSES = ["inherit", "trash"]
SCAN_PAGE = 100
SCAN_MAX_PAGES = 50  # 5,000 objects: past that, absence is not proven (OutcomeUnknown)
SCAN_EMPTY_PAGES = 3  # consecutive empty pages (others' posts only) taken as the end
SCAN_CLOCK_MARGIN = dt.timedelta(minutes=2)  # WordPress's clock may differ from ours (NTP)
POST_FIELDS = ["post", "terms", "custom_fields"]  # everything wp.getPost can tell
# What a scan needs per object (no content: a page of 100 stays small).
SCAN_FIELDS = ["post_title", "post_type", "post_status", "post_date_gmt", "custom_fields"]
# REST term routes -> taxonomies (the domain names terms by their REST route)
TERM_ROUTES = {"/wp/v2/categories": "category", "/wp/v2/tags": "post_tag"}
# REST attachment fields -> wp.editPost fields (alt text is protected meta: not here)
MEDIA_FIELDS = {"post": "post_parent", "title": "post_title", "caption": "post_excerpt"}


_local = threading.local()  # library clients per thread: each holds one kept-alive connection


class XmlRpcClient:
    """XML-RPC client for one site and user, with the verbs of the REST client.

    Args:
        base_url: the site's URL; the endpoint is ``{base_url}/xmlrpc.php``.
        username: the WordPress user.
        app_password: an application password (XML-RPC accepts them; memory only).
        timeout: seconds for one call (connect and each read), ``GATEWAY_WP_TIMEOUT``.
        rest_root: the site's REST root, for the one REST read (the index, :meth:`site_index`);
            None: ``{base_url}/wp-json/``.

    Every call is a POST to ``/xmlrpc.php``: no cache in front stores one, so its reads need
    none of the REST client's cache precautions.
    """

    transport = "xmlrpc"

    def __init__(
        self,
        base_url: str,
        username: str,
        app_password: str,
        timeout: float = 30,
        rest_root: str | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        self.username = username
        self._password = app_password
        self.timeout = timeout
        self.rest_root = rest_root
        self.endpoint = self.base_url + "/xmlrpc.php"
        self._rpc = None  # the library's Client, made on first use (it calls the site)
        self._http: TimeoutTransport | None = None

    def __repr__(self) -> str:  # never show the password
        return f"XmlRpcClient({self.base_url!r}, {self.username!r})"

    def url(self, _route: str = "/") -> str:
        """The XML-RPC endpoint (every call goes there)."""
        return self.endpoint

    @property
    def stray_output(self) -> bytes:
        """The whitespace and byte order marks the last answer (in this thread) carried before
        its XML, tolerated by the transport (``b""`` when clean or before any call)."""
        return self._http.stray_output if self._http is not None else b""

    def _client(self):
        """The library's client, kept per thread and site, user, password and timeout:
        ``wordpress_xmlrpc.Client()`` asks ``mt.supportedMethods`` when constructed, which
        would otherwise cost every request a round trip."""
        if self._rpc is not None:
            return self._rpc
        secret = hashlib.sha256(self._password.encode("utf-8")).hexdigest()
        key = (self.endpoint, self.username, secret, self.timeout)
        clients = getattr(_local, "clients", None)
        if clients is None:
            clients = _local.clients = {}
        if key not in clients:
            transport = TimeoutTransport(self.timeout, self.endpoint.startswith("https:"))
            try:
                client = wordpress_xmlrpc.Client(
                    self.endpoint, self.username, self._password, transport=transport
                )
            except Exception as error:  # noqa: BLE001 - mapped, nothing was written
                transport.close()
                raise error_for("mt.supportedMethods", self.endpoint, error, sent=False) from error
            clients[key] = (client, transport)
        self._rpc, self._http = clients[key]
        return self._rpc

    def _call(self, method, write: bool = False):
        """Run one library method; ``write`` marks a call that may change WordPress (fresh
        connection, and every failure after sending is an unknown outcome)."""
        started, status, failure = time.perf_counter(), None, None
        try:
            client = self._client()
            self._http.fresh_connection = write
            try:
                result = client.call(method)
            except Exception as error:  # noqa: BLE001 - every failure becomes a WordPressError
                self._http.close()
                raise error_for(method.method_name, self.endpoint, error, sent=True) from error
            status = 200  # WordPress answers every XML-RPC call, faults included, with 200
            return result
        except WordPressError as error:
            failure, status = error, error.status
            raise
        finally:  # logged and counted as a REST call: the method name stands for the route
            notify(method.method_name, "/xmlrpc.php", status, failure, started)

    # Posts (wp.newPost, wp.editPost, wp.getPost, wp.getPosts)
    def create_post(self, fields: dict) -> dict:
        """``wp.newPost`` with the REST ``fields`` (custom fields for ``meta``); returns the
        post read back with ``wp.getPost``. A failed read-back after the create is an unknown
        outcome (the lookup finds the post)."""
        struct = {"post_type": "post", **xmlrpc_struct(fields)}
        if not struct.get("post_thumbnail"):
            struct.pop("post_thumbnail", None)
        post_id = int(self._call(methods.posts.NewPost(struct), write=True))
        return self._read_after_write(post_id)

    def update_post(self, post_id: int, fields: dict) -> dict:
        """``wp.editPost`` sending only ``fields``; custom fields that exist are updated by
        their meta id. Returns the post read back."""
        struct = xmlrpc_struct(fields)
        if struct.get("custom_fields"):
            existing = {f["key"]: f["id"] for f in self._get(post_id).get("custom_fields") or []}
            for entry in struct["custom_fields"]:
                if entry["key"] in existing:
                    entry["id"] = existing[entry["key"]]
        if "post_thumbnail" in struct and not struct["post_thumbnail"]:
            struct["post_thumbnail"] = ""  # WordPress removes the featured image on a falsy id
        self._call(methods.posts.EditPost(post_id, struct), write=True)
        return self._read_after_write(post_id)

    def delete_post(self, post_id: int) -> None:
        """``wp.deletePost`` twice: the first moves a post to the trash, the second deletes
        the trashed post for good (``wp_delete_post``), as REST's ``force=true`` does."""
        for _ in range(2):
            self._call(methods.posts.DeletePost(post_id), write=True)

    def _read_after_write(self, post_id: int) -> dict:
        try:
            return self.get_post(post_id)
        except WordPressError as error:
            raise WordPressOutcomeUnknown(
                f"written, but not read back: {error.message}", method="wp.getPost", url=self.url()
            ) from error

    def _get(self, post_id: int) -> dict:
        return self._call(methods.posts.GetPost(post_id, POST_FIELDS, results_class=None))

    def get_post(self, post_id: int, direct: bool = False) -> dict:
        """``wp.getPost`` with custom fields, in the REST ``context=edit`` shape (a POST
        already: ``direct`` changes nothing).

        ``wp.getPost`` reports a scheduled (``future``) post as ``publish``
        (``_prepare_post``: "Consider future posts as published"), which would hide a missed
        schedule; a post it calls ``publish`` is looked for among the ``future`` posts
        (:meth:`_is_scheduled`, one more call) and reported as ``future`` when found."""
        item = rest_shape(self._get(post_id))
        if item["type"] == "post" and item["status"] == "publish" and self._is_scheduled(post_id):
            item["status"] = "future"
        return item

    def _is_scheduled(self, post_id: int) -> bool:
        """Whether ``post_id`` is among the posts ``wp.getPosts`` finds with
        ``post_status: future`` (the query itself tells them apart), newest first."""
        for page in range(SCAN_MAX_PAGES):
            query = {
                "post_type": "post",
                "post_status": "future",
                "number": SCAN_PAGE,
                "offset": page * SCAN_PAGE,
            }
            items = self._call(methods.posts.GetPosts(query, ["post_id"], results_class=None))
            if any(int(item["post_id"]) == post_id for item in items or []):
                return True
            if len(items or []) < SCAN_PAGE:
                return False
        raise WordPressOutcomeUnknown(
            f"more than {SCAN_MAX_PAGES * SCAN_PAGE} scheduled posts: status of {post_id} unknown",
            method="wp.getPosts",
            url=self.url(),
        )

    def find_posts_by_title(self, title: str) -> list[dict]:
        """Posts (any editable status) found by ``wp.getPosts`` search for ``title``; the
        caller compares the titles as readers see them
        (``gateway.operations.duplicates.as_read``)."""
        query = {"post_type": "post", "post_status": POST_STATUSES, "s": title, "number": 100}
        items = self._call(methods.posts.GetPosts(query, POST_FIELDS, results_class=None))
        return [rest_shape(item) for item in items or []]

    def get_many(self, route: str, ids: list[int]) -> dict[int, dict]:
        """Read objects one ``wp.getPost`` each (XML-RPC has no ``include=``); ids that
        cannot be read are absent from the result."""
        found: dict[int, dict] = {}
        for object_id in ids:
            try:
                found[int(object_id)] = self.get_post(object_id)
            except WordPressNotFound:
                continue
        return found

    # Media (wp.uploadFile + wp.editPost on the attachment)
    def upload_media(self, content: bytes, filename: str, mime_type: str, fields: dict) -> dict:
        """``wp.uploadFile`` under a file name carrying :func:`media_token`, then
        ``wp.editPost`` on the attachment setting the key, title and caption.

        Raises:
            WordPressRefused: ``alt_text`` was given (protected meta, not writable here).
            WordPressOutcomeUnknown: the upload or the follow-up may have happened.
        """
        if fields.get("alt_text"):
            raise WordPressRefused(
                "alt text cannot be written over XML-RPC", code="transport_limit"
            )
        key = (fields.get("meta") or {}).get(PROTECTED_KEY_FIELD, "")
        stem, _, ext = filename.rpartition(".")
        name = f"{stem}-{media_token(key)}.{ext}" if key else filename
        data = {"name": name, "type": mime_type, "bits": xmlrpc.client.Binary(content)}
        uploaded = self._call(methods.media.UploadFile(data), write=True)
        media_id = int(uploaded["id"])  # WordPress answers with the id as a string
        try:
            self.finish_upload(media_id, key, fields, known_missing=True)
        except WordPressError as error:
            raise WordPressOutcomeUnknown(
                f"uploaded as {media_id}, identifier not written yet: {error.message}",
                method="wp.editPost",
                url=self.url(),
            ) from error
        return self._read_after_write(media_id)

    def finish_upload(self, media_id: int, key: str, fields: dict, known_missing=False) -> None:
        """Write the operation key (and title, caption) onto attachment ``media_id`` unless it
        already carries the key: the second call of an upload, also after a crash."""
        if not key or (not known_missing and self.carries(media_id, key)):
            return
        struct = {"custom_fields": [{"key": KEY_FIELD, "value": key}]}
        if fields.get("title"):
            struct["post_title"] = fields["title"]
        if fields.get("caption"):
            struct["post_excerpt"] = fields["caption"]
        self._call(methods.posts.EditPost(media_id, struct), write=True)

    def update_media(self, media_id: int, fields: dict) -> dict:
        """``wp.editPost`` on the attachment: ``post`` (parent), ``title``, ``caption`` (the
        attachment's excerpt). Returns the attachment read back, in the REST shape.

        Raises:
            WordPressRefused: ``alt_text`` or another field XML-RPC cannot write (the domain
                refuses alt text before this, 422 ``transport-limit``).
        """
        unknown = sorted(set(fields) - set(MEDIA_FIELDS))
        if unknown:
            raise WordPressRefused(
                f"not writable over XML-RPC: {', '.join(unknown)}", code="transport_limit"
            )
        struct = {MEDIA_FIELDS[k]: v for k, v in fields.items()}
        self._call(methods.posts.EditPost(media_id, struct), write=True)
        return self._read_after_write(media_id)

    def fetch_file(
        self, url: str, content_types: tuple[str, ...], max_bytes: int, deadline: float = 20.0
    ):
        """``GET url`` of an uploaded file: served over plain HTTP by the site, so the REST
        client's :meth:`~gateway.wordpress.client.WordPressClient.fetch_file` does it, with
        the same credentials and rules (no redirects, type and size limits, ``deadline``)."""
        rest = WordPressClient(
            self.base_url, self.username, self._password, self.timeout, self.rest_root
        )
        return rest.fetch_file(url, content_types, max_bytes, deadline)

    def site_index(self) -> dict:
        """``{"url", "home"}`` of the install from its REST index (at the site's REST root),
        read as the REST client reads it (the index needs no plugin and no login)."""
        rest = WordPressClient(
            self.base_url, self.username, self._password, self.timeout, self.rest_root
        )
        return rest.site_index()

    # Terms (wp.getTerms, wp.getTerm; wp.newTerm needs edit_terms, which authors lack)
    def search_terms(self, route: str, search: str, page: int, per_page: int = 100) -> list[dict]:
        """One page of ``wp.getTerms`` with ``search`` (name LIKE), empty terms included, in
        the REST term shape; ``route`` names the taxonomy as the REST client's does."""
        query = {
            "search": search,
            "number": per_page,
            "offset": (page - 1) * per_page,
            "hide_empty": False,
            "orderby": "name",
            "order": "ASC",
        }
        taxonomy = TERM_ROUTES[route]
        items = self._call(methods.taxonomies.GetTerms(taxonomy, query, results_class=None))
        return [term_shape(item) for item in items or []]

    def get_term(self, route: str, term_id: int) -> dict:
        """``wp.getTerm`` in the REST term shape."""
        taxonomy = TERM_ROUTES[route]
        return term_shape(
            self._call(methods.taxonomies.GetTerm(taxonomy, term_id, results_class=None))
        )

    def create_term(self, route: str, name: str) -> dict:
        """Never sent (raises WordPressRefused ``transport_limit``): ``wp.newTerm`` needs
        ``edit_terms``; the domain refuses new terms on XML-RPC sites before any write."""
        raise WordPressRefused(
            f"terms cannot be created over XML-RPC by this user ({name!r})",
            code="transport_limit",
        )

    def carries(self, object_id: int, key: str) -> bool:
        """Whether object ``object_id`` carries ``key`` in either identifier field."""
        return key_of(self._get(object_id)) == key

    def get_media(self, media_id: int) -> dict:
        """The attachment (``wp.getPost``) in the REST ``context=edit`` shape."""
        return self.get_post(media_id)

    # Identifiers
    def companion_status(self) -> None:
        """The companion plugin is not used over XML-RPC."""
        return None

    def wordpress_version(self) -> str | None:
        """The version WordPress reports (``"7.1.4"``): ``wp.getOptions`` of
        ``software_version`` (WordPress XML-RPC API); None when the option is not given.

        Raises:
            WordPressError: the call failed.
        """
        options = self._call(methods.options.GetOptions(["software_version"]))
        for option in options or []:
            if getattr(option, "name", None) == "software_version" and option.value:
                return str(option.value)
        return None

    def set_operation_key(self, object_id: int, key: str, object_type: str) -> None:
        """Put ``key`` on ``object_id`` (any ``object_type``: an editor adopted it), once."""
        if not self.carries(object_id, key):
            self.update_post(object_id, {"meta": {KEY_FIELD: key}})

    def find_by_operation_keys(self, keys: list[str], since=None, types=None) -> list[dict]:
        """Objects carrying one of ``keys`` (either identifier field), and attachments whose
        title still holds a key's :func:`media_token` (entry ``"complete": False``).

        Scans ``wp.getPosts`` newest first per type in ``types`` (default post and
        attachment) down to ``since`` (naive UTC datetime, minus a clock margin).

        Raises:
            WordPressOutcomeUnknown: the scan limit was reached before ``since``.
        """
        wanted = set(keys)
        tokens = {media_token(k): k for k in keys}
        found: list[dict] = []
        for post_type in types or ("post", "attachment"):
            for item in self._scan(post_type, since):
                key = key_of(item)
                complete = True
                if key is None and post_type == "attachment":
                    title = item.get("post_title") or ""
                    key = next((k for t, k in tokens.items() if t in title), None)
                    complete = False
                if key in wanted:
                    found.append(lookup_entry(item, key, complete))
        return found

    def _scan(self, post_type: str, since):
        statuses = ATTACHMENT_STATUSES if post_type == "attachment" else POST_STATUSES
        floor = (since - SCAN_CLOCK_MARGIN).isoformat() if since else ""
        empty = 0
        for page in range(SCAN_MAX_PAGES):
            query = {
                "post_type": post_type,
                "post_status": statuses,
                "number": SCAN_PAGE,
                "offset": page * SCAN_PAGE,
                "orderby": "date",
                "order": "DESC",
            }
            items = self._call(methods.posts.GetPosts(query, SCAN_FIELDS, results_class=None))
            if not items:
                empty += 1
                if empty >= SCAN_EMPTY_PAGES:
                    return
                continue
            empty = 0
            yield from items
            if floor and (iso(items[-1].get("post_date_gmt")) or "") < floor:
                return
        raise WordPressOutcomeUnknown(
            f"scan stopped after {SCAN_MAX_PAGES * SCAN_PAGE} {post_type} objects",
            method="wp.getPosts",
            url=self.url(),
        )

    def me(self) -> dict:
        """``wp.getProfile``: ``{"id", "slug", "roles"}`` of the authenticated user."""
        profile = self._call(methods.users.GetProfile(results_class=None))
        return {
            "id": int(profile["user_id"]),
            "slug": profile.get("username"),
            "roles": profile.get("roles") or [],
        }
