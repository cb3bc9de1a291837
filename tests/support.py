"""Shared test helpers (no fixtures: those live in ``conftest.py``): constants of the test
tenant, request bodies and images, operation keys built with the product's own function, a
client (:class:`Gateway`) that drives the gateway as n8n would, and small WordPress checks."""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import io
import ipaddress
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from gateway.ledger import models
from gateway.ledger import oauth_models
from gateway.ledger.db import database
from gateway.ledger.models import Job
from gateway.operations.perform import operation_key
from gateway.tenancy import sites
from gateway.tenancy import tokens
from gateway_tools.fault_proxy import Fault

ROOT = Path(__file__).resolve().parents[1]
# The WordPress release line under test (wp_test_site/wordpress_line.sh): each line has its own
# runtime folder, so two lines can be up at once.
WP_LINE = os.environ.get("WP_TEST_SITE_WORDPRESS", "bookworm")
RUNTIME = ROOT / "wp_test_site" / (".runtime" if WP_LINE == "bookworm" else f".runtime-{WP_LINE}")
SITE_JSON = RUNTIME / "site.json"
# The second site of the same line (WP_TEST_SITE_INSTANCE, wordpress_line.sh) where a test that
# changes the whole site runs alone (``site_exclusive``, ``no_companion``: tests/conftest.py).
EXCLUSIVE = "exclusive"
UP_SH = ROOT / "wp_test_site" / "up.sh"
TENANT = "acme"
SITE_NAME = "blog"
SECRET_KEY = "test-secret"
AUTHOR_PASSWORD_ENV = "GW_TEST_AUTHOR_APP_PASSWORD"

# An offline "site" for tests that never reach WordPress (port 9: discard, nothing listens).
OFFLINE_SITE = {
    "url": "http://127.0.0.1:9",
    "users": {
        role: {"username": role, "app_password": f"offl {role[:4]:x<4} xxxx xxxx xxxx xxxx"}
        for role in ("admin", "editor", "author")
    },
}


def png_bytes(rgb: tuple[int, int, int] = (200, 30, 30), size: int = 2) -> bytes:
    """A real ``size`` x ``size`` RGB PNG of one colour (zlib + struct, no Pillow)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)  # 8-bit RGB
    rows = b"".join(b"\x00" + bytes(rgb) * size for _ in range(size))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


# A 4x4 red baseline JPEG (written once by PHP's GD, quality 30).
JPEG_BYTES = base64.b64decode(
    "/9j/4AAQSkZJRgABAQEAYABgAAD//gA7Q1JFQVRPUjogZ2QtanBlZyB2MS4wICh1c2luZyBJSkcgSlBFRyB2NjIp"
    "LCBxdWFsaXR5ID0gMzAK/9sAQwAbEhQXFBEbFxYXHhwbIChCKyglJShROj0wQmBVZWRfVV1baniZgWpxkHNbXYW1"
    "hpCeo6utq2eAvMm6pseZqKuk/9sAQwEcHh4oIyhOKytOpG5dbqSkpKSkpKSkpKSkpKSkpKSkpKSkpKSkpKSkpKSk"
    "pKSkpKSkpKSkpKSkpKSkpKSkpKSk/8AAEQgABAAEAwEiAAIRAQMRAf/EAB8AAAEFAQEBAQEBAAAAAAAAAAABAgME"
    "BQYHCAkKC//EALUQAAIBAwMCBAMFBQQEAAABfQECAwAEEQUSITFBBhNRYQcicRQygZGhCCNCscEVUtHwJDNicoIJ"
    "ChYXGBkaJSYnKCkqNDU2Nzg5OkNERUZHSElKU1RVVldYWVpjZGVmZ2hpanN0dXZ3eHl6g4SFhoeIiYqSk5SVlpeY"
    "mZqio6Slpqeoqaqys7S1tre4ubrCw8TFxsfIycrS09TV1tfY2drh4uPk5ebn6Onq8fLz9PX29/j5+v/EAB8BAAMB"
    "AQEBAQEBAQEAAAAAAAABAgMEBQYHCAkKC//EALURAAIBAgQEAwQHBQQEAAECdwABAgMRBAUhMQYSQVEHYXETIjKB"
    "CBRCkaGxwQkjM1LwFWJy0QoWJDThJfEXGBkaJicoKSo1Njc4OTpDREVGR0hJSlNUVVZXWFlaY2RlZmdoaWpzdHV2"
    "d3h5eoKDhIWGh4iJipKTlJWWl5iZmqKjpKWmp6ipqrKztLW2t7i5usLDxMXGx8jJytLT1NXW19jZ2uLj5OXm5+jp"
    "6vLz9PX29/j5+v/aAAwDAQACEQMRAD8Ap0UUVznrn//Z"
)


def new_job_id() -> str:
    """A job id no other test (or earlier run against the same WordPress) uses."""
    return f"T-{uuid.uuid4().hex}"


def op_key(job_id: str, action: str, slot: str | None = None, version: int = 1) -> str:
    """The operation key the gateway uses (docs/api.md, "The ledger"), built by the product's
    own :func:`gateway.operations.perform.operation_key`."""
    job = Job(tenant=TENANT, job_id=job_id, task_version=version)
    return operation_key(job, action, slot)


def draft_body(**overrides) -> dict:
    """A valid draft request without media."""
    body = {
        "title": "Gateway test post",
        "content": "<p>Hello from the gateway tests.</p>",
        "excerpt": "A short summary.",
        "seo": {
            "title": "Gateway SEO title",
            "description": "Gateway SEO description",
            "focus_keyword": "gateway",
        },
    }
    body.update(overrides)
    return body


def problem_slug(response) -> str:
    """The problem type slug of a problem+json response (Flask or requests)."""
    body = response.get_json() if hasattr(response, "get_json") else response.json()
    return body["type"].rsplit("/", 1)[-1]


def site_runtime(instance: str = "") -> Path:
    """The runtime folder of the test site ``instance`` of this line ("": the shared one;
    ``wp_test_site/wordpress_line.sh``)."""
    return RUNTIME.with_name(f"{RUNTIME.name}-{instance}") if instance else RUNTIME


def _read_site(instance: str = "") -> dict | None:
    """The running test site ``instance``'s ``site.json``, with ``instance`` added, or None
    when it is not up (its REST index does not answer 200)."""
    try:
        site = json.loads((site_runtime(instance) / "site.json").read_text())
        answer = requests.get(site["url"].rstrip("/") + "/wp-json/", timeout=10)
    except (OSError, ValueError, KeyError, requests.RequestException):
        return None
    return {**site, "instance": instance} if answer.status_code == 200 else None


def admin_session(site: dict) -> requests.Session:
    """A plain session with the ADMIN application password, for direct WordPress checks."""
    session = requests.Session()
    admin = site["users"]["admin"]
    session.auth = (admin["username"], admin["app_password"])
    return session


def new_wp_user(site: dict, role: str) -> tuple[int, requests.Session]:
    """A new WordPress user of ``role`` (created by the admin over REST, a fresh name per call:
    the passes share the site) and a session signed in with its own application password.
    Returns ``(user id, session)``."""
    admin = admin_session(site)
    base = site["url"].rstrip("/") + "/wp-json/wp/v2/users"
    name = f"gw-{role}-{uuid.uuid4().hex[:10]}"
    body = {"username": name, "email": f"{name}@example.invalid", "password": uuid.uuid4().hex}
    created = admin.post(base, json={**body, "roles": [role]}, timeout=30)
    assert created.status_code == 201, created.text
    user_id = created.json()["id"]
    made = admin.post(f"{base}/{user_id}/application-passwords", json={"name": name}, timeout=30)
    assert made.status_code == 201, made.text
    session = requests.Session()
    session.auth = (name, made.json()["password"])
    return user_id, session


def sqlite_path(url: str) -> Path | None:
    """The file of a ``sqlite:///`` ledger URL (None for PostgreSQL)."""
    return Path(url[len("sqlite:///") :]) if url.startswith("sqlite:///") else None


class DriverStatements:
    """Every statement the ledger's database driver executes, counted below peewee and below
    the gateway's plain SQL (so nothing reaches the database uncounted): pass
    :meth:`options` to :func:`gateway.ledger.db.bind`, and each new connection reports its
    statements here (SQLite: ``sqlite3``'s trace callback, which sees every statement the
    engine runs; PostgreSQL: a ``psycopg2`` cursor class counting ``execute``)."""

    CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE")

    def __init__(self):
        self.log: list[str] = []

    def options(self, url: str) -> dict:
        """The driver options of ``db.bind(url, **options)`` that count into :attr:`log`."""
        log = self.log
        if url.startswith("sqlite"):
            import sqlite3

            class TracedConnection(sqlite3.Connection):
                def __init__(self, *args, **kwargs):
                    super().__init__(*args, **kwargs)
                    self.set_trace_callback(log.append)

            return {"factory": TracedConnection}
        import psycopg2.extensions

        class CountingCursor(psycopg2.extensions.cursor):
            def execute(self, query, vars=None):
                log.append(str(query))
                return super().execute(query, vars)

            def executemany(self, query, vars_list):
                vars_list = list(vars_list)
                log.extend([str(query)] * len(vars_list))
                return super().executemany(query, vars_list)

        return {"cursor_factory": CountingCursor}

    def clear(self) -> None:
        self.log.clear()

    def _kind(self, sql: str) -> str:
        return sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""

    def transactions(self) -> list[str]:
        """The transaction-control statements (BEGIN, COMMIT, ROLLBACK, savepoints)."""
        return [s for s in self.log if self._kind(s) in self.CONTROL]

    def probes(self) -> list[str]:
        """``SELECT 1``: peewee's PostgreSQL pool checks each connection it hands out again
        with one (``/healthz`` asks it too); never a ledger statement."""
        return [s for s in self.log if s.strip() == "SELECT 1"]

    def data(self) -> list[str]:
        """The ledger's own statements: not transaction control, not a probe, not a new
        connection's set-up (``PRAGMA``)."""
        return [
            s
            for s in self.log
            if self._kind(s) not in (*self.CONTROL, "PRAGMA") and s.strip() != "SELECT 1"
        ]


class Gateway:
    """Drives the gateway through Flask's test client like n8n would, for tenant ``acme``
    whose site ``blog`` uses the WordPress **author** user over ``transport``."""

    def __init__(self, app, client, site: dict, url: str | None = None, transport="rest"):
        self.app = app
        self.client = client
        self.site = site
        self.transport = transport
        self.wp_url = site["url"].rstrip("/")
        self.author = site["users"]["author"]
        self._made: dict[tuple[str, str], int] = {}
        self.add_site(url or self.wp_url)
        self.token = self.make_token("workflow")
        self.wp = admin_session(site)

    # setup -----------------------------------------------------------------

    def add_site(self, url: str, transport: str | None = None, tenant: str = TENANT):
        """Register (or update: bumps ``credential_version``) the tenant's site."""
        self.transport = transport or self.transport
        with self.app.app_context(), database.connection_context():
            return sites.add_site(
                SECRET_KEY,
                tenant,
                SITE_NAME,
                url,
                self.author["username"],
                self.author["app_password"],
                self.transport,
            )

    def make_token(self, role: str, tenant: str = TENANT, name: str | None = None) -> str:
        """A token named ``test-{role}`` (``test-{role}-2``... when the tenant has one:
        token names are unique per tenant)."""
        self._made[(tenant, role)] = self._made.get((tenant, role), 0) + 1
        count = self._made[(tenant, role)]
        name = name or (f"test-{role}" if count == 1 else f"test-{role}-{count}")
        with self.app.app_context(), database.connection_context():
            return tokens.create_token(tenant, role, name)

    def headers(self, token: str | None = None) -> dict:
        return {"Authorization": f"Bearer {token or self.token}"}

    # verbs -----------------------------------------------------------------

    def put_job(self, job_id: str, task_version: int = 1, site: str = SITE_NAME, token=None):
        return self.client.put(
            f"/v1/jobs/{job_id}",
            json={"site": site, "task_version": task_version},
            headers=self.headers(token),
        )

    def put_media(
        self, job_id: str, slot: str, content: bytes, filename: str = "image.png", **fields
    ):
        return self.client.put(
            f"/v1/jobs/{job_id}/media/{slot}",
            data={"file": (io.BytesIO(content), filename), **fields},
            content_type="multipart/form-data",
            headers=self.headers(),
        )

    def put_draft(self, job_id: str, body, token=None):
        kwargs = {"data": body} if isinstance(body, str | bytes) else {"json": body}
        if "data" in kwargs:
            kwargs["content_type"] = "application/json"
        return self.client.put(f"/v1/jobs/{job_id}/draft", headers=self.headers(token), **kwargs)

    def job(self, job_id: str):
        return self.client.get(f"/v1/jobs/{job_id}", headers=self.headers())

    def operations(self, job_id: str) -> list[dict]:
        answer = self.job(job_id)
        assert answer.status_code == 200, answer.get_json()
        return answer.get_json()["operations"]

    def verification(self, job_id: str):
        return self.client.get(f"/v1/jobs/{job_id}/verification", headers=self.headers())

    def recover(self, job_id: str):
        return self.client.post(f"/v1/jobs/{job_id}/recover", headers=self.headers())

    # WordPress, directly -----------------------------------------------------

    def lookup(self, keys) -> list[dict]:
        """Objects carrying any of ``keys`` (companion plugin lookup, as admin)."""
        keys = [keys] if isinstance(keys, str) else list(keys)
        answer = self.wp.get(
            f"{self.wp_url}/wp-json/publishing-gateway/v1/objects",
            params={"keys": ",".join(keys)},
            timeout=30,
        )
        answer.raise_for_status()
        return answer.json()["objects"]

    def posts_titled(self, title: str) -> list[dict]:
        """Posts of any status whose raw title is exactly ``title`` (REST search, as admin):
        how a user counts drafts when the companion plugin is off."""
        answer = self.wp.get(
            f"{self.wp_url}/wp-json/wp/v2/posts",
            params={"search": title, "context": "edit", "status": "any", "per_page": 100},
            timeout=30,
        )
        answer.raise_for_status()
        return [p for p in answer.json() if p["title"]["raw"] == title]

    def count_objects(self, keys, post_type: str | None = None) -> int:
        return len([o for o in self.lookup(keys) if post_type is None or o["type"] == post_type])

    def wp_post(self, post_id: int) -> dict:
        answer = self.wp.get(
            f"{self.wp_url}/wp-json/wp/v2/posts/{post_id}", params={"context": "edit"}, timeout=30
        )
        answer.raise_for_status()
        return answer.json()

    def wp_media(self, media_id: int) -> dict:
        answer = self.wp.get(
            f"{self.wp_url}/wp-json/wp/v2/media/{media_id}", params={"context": "edit"}, timeout=30
        )
        answer.raise_for_status()
        return answer.json()

    def wp_update_post(self, post_id: int, fields: dict) -> dict:
        answer = self.wp.post(
            f"{self.wp_url}/wp-json/wp/v2/posts/{post_id}", json=fields, timeout=30
        )
        answer.raise_for_status()
        return answer.json()


# Tests that must hold over both WordPress transports. The XML-RPC variant runs in the SQLite
# pass only (deselected in the PostgreSQL pass by conftest.py): the transport does not touch
# the ledger code.
SQLITE_PASS_ONLY = pytest.mark.sqlite_pass


def transport_param(transport: str, *values, id: str | None = None):
    """A ``pytest.param`` whose first value is the transport (XML-RPC: SQLite pass only)."""
    marks = [SQLITE_PASS_ONLY] if transport == "xmlrpc" else []
    return pytest.param(transport, *values, marks=marks, id=id)


both_transports = pytest.mark.parametrize(
    "transport", [transport_param("rest"), transport_param("xmlrpc")], indirect=True
)
xmlrpc_only = pytest.mark.parametrize("transport", [transport_param("xmlrpc")], indirect=True)

COMPANION_SH = ROOT / "wp_test_site" / "companion.sh"


def mysql_query(site: dict, sql: str) -> str:
    """Run ``sql`` on the test site's own database (``site.json``'s ``database``) with the
    MariaDB client; returns its tab-separated output without column names."""
    client = shutil.which("mariadb") or shutil.which("mysql")
    assert client, "the MariaDB client comes with wp_test_site/up.sh"
    db = site["database"]
    done = subprocess.run(
        [client, "--no-defaults", "--protocol=TCP", f"-h{db['host']}", f"-P{db['port']}"]
        + ["-uroot", "-N", "-B", db["name"], "-e", sql],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.stdout.strip()


def site_state(site: dict) -> dict:
    """What a test may change of the whole shared site and must put back: the companion
    plugin's state, the site's timezone, the charset of the posts' title column."""
    settings = admin_session(site).get(
        site["url"].rstrip("/") + "/wp-json/wp/v2/settings", timeout=30
    )
    settings.raise_for_status()
    charset = mysql_query(
        site,
        "SELECT CHARACTER_SET_NAME FROM information_schema.COLUMNS WHERE "
        "TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'wp_posts' AND COLUMN_NAME = 'post_title'",
    )
    return {
        "companion": switch_companion("status", site),
        "timezone": settings.json().get("timezone"),
        "post_title_charset": charset,
    }


def hide_companion(proxy) -> None:
    """Make every site behind ``proxy`` (a :class:`FaultProxy`) look like one without the
    companion plugin: its routes (``/wp-json/publishing-gateway/...``) answer 404 from the
    proxy, for the rest of the test; this process's remembered detection is forgotten. The
    real plugin stays active for every other test (``no_companion`` switches it off for real)."""
    sites.forget_companion()
    proxy.add_fault(
        Fault(
            kind="status_without_forward",
            status=404,
            path=r"^/wp-json/publishing-gateway/",
            times=None,
        )
    )


def switch_companion(state: str, site: dict, *options: str) -> str:
    """``wp_test_site/companion.sh on|off|status|uninstall [--queries]`` on ``site`` (a test
    site's ``site.json`` as :func:`_read_site` reads it); returns ``active`` or ``inactive``
    (with ``--queries``: the JSON text companion.php prints)."""
    env = {**os.environ, "WP_TEST_SITE_WORDPRESS": WP_LINE}
    env["WP_TEST_SITE_INSTANCE"] = site.get("instance", "")
    done = subprocess.run(
        ["bash", str(COMPANION_SH), state, *options],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    sites.forget_companion()
    return done.stdout.strip()


# How each WordPress call looks on the wire, per transport, for faults and proxy counts.
# Every XML-RPC call is POST /xmlrpc.php: the method name in the body tells them apart.
CALLS = {
    "rest": {
        "create_post": {"method": "POST", "path": r"^/wp-json/wp/v2/posts/?$"},
        "upload": {"method": "POST", "path": r"^/wp-json/wp/v2/media/?$"},
        "lookup": {"path": r"/publishing-gateway/v1/objects"},
        "write": {"method": "POST"},
    },
    "xmlrpc": {
        "create_post": {"method": "POST", "rpc": r"wp\.newPost"},
        "upload": {"method": "POST", "rpc": r"wp\.uploadFile"},
        "edit": {"method": "POST", "rpc": r"wp\.editPost"},
        "lookup": {"method": "POST", "rpc": r"wp\.getPosts"},
        "write": {"method": "POST", "rpc": r"wp\.(newPost|editPost|uploadFile)"},
    },
}


def call_fault(transport: str, call: str, kind: str, **fields) -> Fault:
    """A :class:`Fault` of ``kind`` on WordPress call ``call`` (a :data:`CALLS` name)."""
    spec = dict(CALLS[transport][call])
    rpc = spec.pop("rpc", None)
    if rpc:
        spec.update(path=r"^/xmlrpc\.php$", body=rf"<methodName>{rpc}</methodName>")
    return Fault(kind=kind, **spec, **fields)


def call_count(proxy, transport: str, call: str, **criteria) -> int:
    """How many requests of WordPress call ``call`` the proxy saw (``criteria`` as in
    :meth:`FaultProxy.count`)."""
    spec = dict(CALLS[transport][call])
    rpc = spec.pop("rpc", None)
    if rpc:
        spec["rpc_method"] = rf"^{rpc}$"
    return proxy.count(**spec, **criteria)


def all_ledger_rows() -> str:
    """Every row of every ledger table as text (to search for leaked credentials)."""
    with database.connection_context():
        return json.dumps(
            [list(model.select().dicts()) for model in [*models.TABLES, *oauth_models.TABLES]],
            default=str,
        )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve_tls(server, folder: Path) -> str:
    """Serve ``server`` (an ``http.server`` server bound on 127.0.0.1) over TLS with a fresh
    self-signed certificate for ``localhost`` (made by openssl in ``folder``), on a daemon
    thread. Returns the certificate's path: the CA bundle a client must trust."""
    import ssl
    import threading

    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "2", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return str(cert)


def loopback_ca(folder: Path) -> tuple[str, str, str]:
    """A CA and a server certificate for ``127.0.0.1`` and ``localhost`` signed by it:
    (CA bundle, server certificate, server key) paths."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gateway test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return tuple(str(p) for p in paths)


def gateway_cli(args: list[str], env: dict, restore_binding: bool = True):
    """Run ``gateway ARGS`` in this process with click's ``CliRunner`` (the command line's own
    code, without a new interpreter's second of imports), ``env`` replacing every
    ``GATEWAY_*`` variable. Returns click's ``Result`` (``exit_code``, ``stdout``,
    ``stderr``, ``exception``). The ledger binding of the test's own app is restored after:
    the command binds :data:`gateway.ledger.db.database` to its ``GATEWAY_DATABASE_URL``
    (``restore_binding=False`` keeps the command's binding, for a test that reads that ledger).
    Tests that check the process boundary (exit codes of a real process, signals, ``serve``)
    run :func:`gateway_command` instead."""
    from click.testing import CliRunner
    from flask.cli import ScriptInfo

    from gateway.cli import _app_factory
    from gateway.cli import cli

    base = {k: None for k in os.environ if k.startswith("GATEWAY_")}
    previous = database.obj
    try:
        return CliRunner().invoke(
            cli,
            args,
            obj=ScriptInfo(create_app=_app_factory, set_debug_flag=False),
            env={**base, **env},
            prog_name="gateway",
        )
    finally:
        if restore_binding and database.obj is not previous:
            database.obj.close_all()
            database.initialize(previous)


def gateway_cli_process(args: list[str], env: dict) -> subprocess.CompletedProcess:
    """:func:`gateway_cli` answered as :func:`subprocess.run` would (``returncode``,
    ``stdout``, ``stderr``), for tests written against a process: an exception that escaped
    the command is put on stderr as ``Traceback`` with its text, as the interpreter would."""
    result = gateway_cli(args, env)
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += f"Traceback (in-process): {type(result.exception).__name__}: {result.exception}"
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, stderr)


def gateway_cli_ok(args: list[str], env: dict) -> str:
    """:func:`gateway_cli` that must succeed (exit 0): its stdout."""
    result = gateway_cli(args, env)
    assert result.exit_code == 0, f"gateway {' '.join(args)}: {result.output} {result.exception}"
    return result.stdout


def gateway_command() -> list[str]:
    script = shutil.which("gateway")
    return [script] if script else [sys.executable, "-m", "gateway.cli"]


@dataclass
class GatewayServer:
    """A running ``gateway serve`` (several workers) and its workflow token."""

    url: str
    token: str
    process: subprocess.Popen
    log_path: Path

    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.token}"}

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]


def metric_value(text: str, sample: str, **labels: str) -> float:
    """The value of ``sample`` (e.g. ``gateway_unauthenticated_calls_total``) with exactly
    ``labels`` in a Prometheus exposition ``text`` (0.0 when absent). In-process counters
    live as long as the test process: compare values before and after, not absolutes."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for found in family.samples:
            if found.name == sample and found.labels == labels:
                return found.value
    return 0.0


CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
CHROME_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
)


@contextlib.contextmanager
def chromium_driver(profile: Path, window: str = "1280,1900"):
    """Debian's headless Chromium through ``/usr/bin/chromedriver`` (selenium), with a fresh
    profile in ``profile`` (removed after) and a ``window`` of ``width,height`` pixels; pages
    load within 60 s. The caller checks that both programs are there."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROME_FLAGS, f"--window-size={window}", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


class TokenMemory:
    """The ``mcp`` SDK OAuth client's token storage (its ``TokenStorage`` protocol), in
    memory; ``on_secret(kind, value)``, when given, hears each token and client secret the
    client stores (the tests' log canary)."""

    def __init__(self, on_secret=None):
        self.tokens = None  # mcp.shared.auth.OAuthToken
        self.client = None  # mcp.shared.auth.OAuthClientInformationFull
        self.on_secret = on_secret or (lambda _kind, _value: None)

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens
        self.on_secret("access token", tokens.access_token)
        self.on_secret("refresh token", tokens.refresh_token)

    async def get_client_info(self):
        return self.client

    async def set_client_info(self, client_info):
        self.client = client_info
        self.on_secret("client secret", client_info.client_secret)


def in_thread(function, *args):
    """Run ``function`` as a fresh process would: on a new thread (no thread-local WordPress
    session, no peewee connection state, no context variables of an earlier life)."""
    result: dict = {}

    def run():
        try:
            result["value"] = function(*args)
        except BaseException as error:  # noqa: BLE001 - handed to the caller as it is
            result["error"] = error

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["value"]
