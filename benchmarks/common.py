"""Shared helpers of the benchmark scripts: the machine, statistics, a real ``gateway serve``
against the test WordPress, PostgreSQL scratch databases, the sample draft and JSON output.

Nothing here is a test: the scripts print figures and write JSON; they fail only when they
cannot measure (no WordPress, the gateway does not start).
"""

from __future__ import annotations

import json
import os
import platform
import re
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
SITE_JSON = ROOT / "wp_test_site" / ".runtime" / "site.json"
PG_ADMIN_URL = os.environ.get("BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
TENANT = "bench"
RUNTIME = ROOT / "wp_test_site" / ".runtime"


def web_server() -> tuple[str, int]:
    """How the test WordPress is served and how many PHP processes serve it at most
    (wp_test_site/up.sh: nginx + PHP-FPM, pm.max_children; else php -S with
    PHP_CLI_SERVER_WORKERS=4)."""
    conf = RUNTIME / "php-fpm.conf"
    if (RUNTIME / "nginx.conf").exists() and conf.exists():
        for line in conf.read_text().splitlines():
            if line.replace(" ", "").startswith("pm.max_children="):
                return "nginx + PHP-FPM", int(line.split("=", 1)[1])
    return "php -S", 4


def say(text: str = "") -> None:
    print(text, flush=True)


def load_site() -> dict:
    if not SITE_JSON.exists():
        raise SystemExit(f"no test WordPress at {SITE_JSON}: run 'bash wp_test_site/up.sh'")
    return json.loads(SITE_JSON.read_text())


def run_id() -> str:
    return time.strftime("%H%M%S") + "-" + secrets.token_hex(3)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --------------------------------------------------------------------------- machine
def machine(database: str) -> dict:
    """What the figures were measured on (printed with them and stored in the JSON)."""
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "php_workers": web_server()[1],
        "wordpress": f"wp_test_site ({web_server()[0]}, MariaDB)",
        "database": database,
        "python": platform.python_version(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def print_machine(info: dict) -> None:
    say(
        f"machine: nproc={info['nproc']} ({info['cpu']}), PHP workers={info['php_workers']}, "
        f"ledger={info['database']}, python {info['python']}, "
        f"load avg at start {info['loadavg_at_start']}"
    )


# --------------------------------------------------------------------------- statistics
def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of ``values``."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 100))))
    return ordered[rank - 1]


def summary(seconds: list[float]) -> dict:
    """Median, p95, p99, mean (milliseconds) and n of a list of durations in seconds."""
    ms = [s * 1000 for s in seconds]
    if not ms:
        return {"n": 0}
    return {
        "n": len(ms),
        "median_ms": round(statistics.median(ms), 3),
        "p95_ms": round(percentile(ms, 95), 3),
        "p99_ms": round(percentile(ms, 99), 3),
        "mean_ms": round(statistics.fmean(ms), 3),
        "min_ms": round(min(ms), 3),
    }


def ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b else float("nan")


def fmt(s: dict) -> str:
    return f"median {s['median_ms']:8.2f} ms  p95 {s['p95_ms']:8.2f} ms  (n={s['n']})"


def write_json(path: str | None, data: dict) -> None:
    if not path:
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    say(f"wrote {path}")


# --------------------------------------------------------------------------- payloads
def draft_body(tag: str) -> dict:
    """A realistic draft without media: the demo article's text (Chinese, English, emoji),
    placeholders removed, about 2 KB of block content."""
    data = resources.files("gateway_tools").joinpath("demo_data")
    article = json.loads(data.joinpath("article.json").read_text("utf-8"))
    content = re.sub(r"\{\{media:[^}]+\}\}", "", article["content"])
    paragraphs = "\n\n".join(
        f"<!-- wp:paragraph -->\n<p>Paragraph {i}: idempotent publishing keeps one draft per "
        f"job, whatever the network does. 幂等发布网关 {tag}</p>\n<!-- /wp:paragraph -->"
        for i in range(8)
    )
    return {
        "title": f"{article['title']} [{tag}]",
        "content": content + "\n\n" + paragraphs,
        "excerpt": article["excerpt"],
        "seo": dict(article["seo"]),
    }


def image_bytes() -> bytes:
    """A small real PNG (1.4 KB, the demo's hero image)."""
    return resources.files("gateway_tools").joinpath("demo_data", "hero.png").read_bytes()


# --------------------------------------------------------------------------- PostgreSQL
def pg_create(prefix: str = "bench") -> str:
    """Create a scratch database; returns its URL."""
    import psycopg2

    name = f"{prefix}_{os.getpid()}_{secrets.token_hex(3)}"
    conn = psycopg2.connect(PG_ADMIN_URL)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    conn.close()
    return PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name


def pg_drop(url: str) -> None:
    import psycopg2

    name = url.rsplit("/", 1)[1]
    conn = psycopg2.connect(PG_ADMIN_URL)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    conn.close()


def pg_available() -> bool:
    try:
        import psycopg2

        psycopg2.connect(PG_ADMIN_URL, connect_timeout=3).close()
        return True
    except Exception:  # noqa: BLE001 - any failure means "not available"
        return False


# --------------------------------------------------------------------------- WordPress
class DirectWordPress:
    """The B side: the same WordPress calls the gateway makes, with plain ``requests`` and one
    keep-alive session (author application password, like the gateway)."""

    def __init__(self, site: dict, user: str = "author"):
        self.base = site["url"].rstrip("/") + "/wp-json"
        creds = site["users"][user]
        self.session = requests.Session()
        self.session.auth = (creds["username"], creds["app_password"])

    def create_post(self, fields: dict) -> dict:
        r = self.session.post(self.base + "/wp/v2/posts", json=fields, timeout=60)
        r.raise_for_status()
        return r.json()

    def get_post(self, post_id: int) -> dict:
        r = self.session.get(
            f"{self.base}/wp/v2/posts/{post_id}", params={"context": "edit"}, timeout=60
        )
        r.raise_for_status()
        return r.json()

    def upload_media(self, content: bytes, filename: str, params: dict) -> dict:
        r = self.session.post(
            self.base + "/wp/v2/media",
            params=params,
            data=content,
            headers={
                "Content-Type": "image/png",
                "Content-Disposition": f'attachment; filename="{filename}"',
            },
            timeout=60,
        )
        r.raise_for_status()
        return r.json()

    def get_media(self, media_id: int) -> dict:
        r = self.session.get(
            f"{self.base}/wp/v2/media/{media_id}", params={"context": "edit"}, timeout=60
        )
        r.raise_for_status()
        return r.json()

    def update_media(self, media_id: int, fields: dict) -> dict:
        r = self.session.post(f"{self.base}/wp/v2/media/{media_id}", json=fields, timeout=60)
        r.raise_for_status()
        return r.json()


# --------------------------------------------------------------------------- the gateway
class Gateway:
    """A real ``gateway serve`` on its own ledger, with site ``wordpress`` (and any
    ``extra_sites``) registered for tenant ``bench`` and a workflow token.

    ``database``: ``sqlite`` (a temp file) or ``postgresql`` (a scratch database, dropped on
    close) or a full URL."""

    def __init__(
        self,
        site: dict,
        database: str = "sqlite",
        workers: int | None = None,
        site_url: str | None = None,
        env: dict | None = None,
        threads: int | None = None,
    ):
        self.site = site
        self.threads = threads
        self.workdir = Path(tempfile.mkdtemp(prefix="gateway-bench-"))
        self.pg_url = None
        if database == "sqlite":
            self.db_url = f"sqlite:///{self.workdir}/ledger.db"
        elif database == "postgresql":
            self.pg_url = self.db_url = pg_create()
        else:
            self.db_url = database
        self.secret = secrets.token_urlsafe(32)
        self.env = {
            **os.environ,
            "GATEWAY_DATABASE_URL": self.db_url,
            "GATEWAY_SECRET_KEY": self.secret,
            "GATEWAY_WP_TIMEOUT": "30",  # the fair shares stay as shipped (issue 39)
            "GATEWAY_MCP_LISTEN": "",  # the API's figures alone (several servers at once)
            **(env or {}),
        }
        self.workers = workers
        self.site_url = site_url or site["url"]
        self.process: subprocess.Popen | None = None
        self.url = ""
        self.token = ""

    def setup_ledger(self) -> None:
        from gateway.ledger import db
        from gateway.ledger import migrations
        from gateway.tenancy import sites
        from gateway.tenancy import tokens

        author = self.site["users"]["author"]
        db.bind(self.db_url)
        with db.database.connection_context():
            migrations.migrate()
            sites.add_site(
                self.secret,
                TENANT,
                "wordpress",
                self.site_url,
                author["username"],
                author["app_password"],
            )
            self.token = tokens.create_token(TENANT, "workflow", "bench")
        db.database.close()

    def start(self, setup: bool = True) -> Gateway:
        """Start ``gateway serve``; ``setup=False`` restarts it on the ledger it already has."""
        if setup:
            self.setup_ledger()
        port = free_port()
        self.log = open(self.workdir / "server.log", "ab")  # noqa: SIM115
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gateway.cli",
                "serve",
                "--port",
                str(port),
                # None: gateway serve's own defaults, as shipped
                *(["--workers", str(self.workers)] if self.workers else []),
                *(["--threads", str(self.threads)] if self.threads else []),
                "--sweep-interval",
                "0",
            ],
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=str(self.workdir),
        )
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if requests.get(self.url + "/healthz", timeout=2).ok:
                    break
            except requests.RequestException:
                time.sleep(0.2)
        else:
            raise RuntimeError(f"gateway serve did not start; see {self.workdir}/server.log")
        return self

    def session(self) -> requests.Session:
        """One keep-alive session of one client (n8n keeps its connection too)."""
        s = requests.Session()
        s.headers["Authorization"] = f"Bearer {self.token}"
        return s

    def worker_pids(self) -> list[int]:
        out = subprocess.run(
            ["pgrep", "-P", str(self.process.pid)], capture_output=True, text=True, check=False
        )
        return [int(p) for p in out.stdout.split()]

    def repoint(self, site_url: str) -> None:
        """Point site ``wordpress`` at ``site_url`` (e.g. a counting proxy) in the ledger;
        takes effect at the next :meth:`start`."""
        from gateway.ledger import db
        from gateway.tenancy import sites

        author = self.site["users"]["author"]
        db.bind(self.db_url)
        with db.database.connection_context():
            sites.add_site(
                self.secret,
                TENANT,
                "wordpress",
                site_url,
                author["username"],
                author["app_password"],
            )
        db.database.close()
        self.site_url = site_url

    def stop(self) -> None:
        """Stop the server, keeping its ledger (``start(setup=False)`` serves it again)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)
                self.process.wait(timeout=10)
        if getattr(self, "log", None) is not None:
            self.log.close()

    def close(self) -> None:
        self.stop()
        if self.pg_url:
            try:
                from gateway.ledger import db

                if not db.database.is_closed():
                    db.database.close()
            except Exception:  # noqa: BLE001
                pass
            pg_drop(self.pg_url)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Gateway:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
