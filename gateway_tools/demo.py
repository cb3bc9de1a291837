"""``gateway demo``: the main job end to end against the test WordPress.

A sample article (Chinese and English, an emoji in the SEO title, three real images) goes
through a real ``gateway serve`` exactly as an n8n workflow calls it: job -> three media ->
draft with featured image, body images, excerpt and Rank Math fields -> verification. A second
job then runs through the fault-injecting proxy, which lets WordPress commit the draft but drops
the response (and fails the first lookup): the demo retries as n8n would and shows that
reconciliation found the post instead of creating another.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path

import requests

from gateway.ledger import db
from gateway.ledger import migrations
from gateway.ledger.models import Job
from gateway.operations.perform import operation_key
from gateway.tenancy import sites
from gateway.tenancy import tokens
from gateway_tools.client import GatewayClient
from gateway_tools.fault_proxy import Fault
from gateway_tools.fault_proxy import FaultProxy

DEFAULT_SITE_JSON = Path("wp_test_site/.runtime/site.json")
TENANT = "demo"


class DemoUnavailable(Exception):
    """The demo cannot start (no test site); the message says what to run."""


def say(text: str) -> None:
    """One progress line, shown at once."""
    print(text, flush=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def load_article() -> tuple[dict, dict[str, bytes]]:
    """The shipped sample article and its images (``gateway_tools/demo_data``)."""
    data = resources.files("gateway_tools").joinpath("demo_data")
    article = json.loads(data.joinpath("article.json").read_text("utf-8"))
    images = {img["file"]: data.joinpath(img["file"]).read_bytes() for img in article["images"]}
    return article, images


def draft_body(article: dict) -> dict:
    """The draft request an n8n workflow would send for ``article``."""
    return {
        "title": article["title"],
        "content": article["content"],
        "excerpt": article["excerpt"],
        "featured_media": {"slot": article["featured_slot"]},
        "body_media": [
            i["slot"] for i in article["images"] if i["slot"] != article["featured_slot"]
        ],
        "seo": article["seo"],
    }


class Demo:
    """Runs the demo; see the module docstring."""

    def __init__(self, site: dict):
        self.site = site
        self.workdir = Path(tempfile.mkdtemp(prefix="gateway-demo-"))
        self.env = {
            **os.environ,
            "GATEWAY_DATABASE_URL": f"sqlite:///{self.workdir}/ledger.db",
            "GATEWAY_SECRET_KEY": secrets.token_urlsafe(32),
            "GATEWAY_WP_TIMEOUT": "10",
            "GATEWAY_MCP_LISTEN": "",  # the demo's own server: no listener beside a user's own
        }
        self.proxy = FaultProxy(site["url"])
        self.server: subprocess.Popen | None = None
        self.run_id = time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)
        self.checks: list[tuple[str, bool]] = []

    def check(self, label: str, ok: bool) -> bool:
        self.checks.append((label, ok))
        say(f"    {'ok ' if ok else 'FAIL'} {label}")
        return ok

    def serve_args(self) -> list[str]:
        """Extra ``gateway serve`` options (the agent demo runs its own worker)."""
        return []

    def setup(self) -> GatewayClient:
        self.proxy.start()
        author = self.site["users"]["author"]
        db.bind(self.env["GATEWAY_DATABASE_URL"])
        with db.database.connection_context():
            migrations.migrate()
            for name, url in (("wordpress", self.site["url"]), ("flaky", self.proxy.url)):
                sites.add_site(
                    self.env["GATEWAY_SECRET_KEY"],
                    TENANT,
                    name,
                    url,
                    author["username"],
                    author["app_password"],
                )
            token = tokens.create_token(TENANT, "workflow", "demo-n8n")
        port = _free_port()
        log = open(self.workdir / "server.log", "w")  # noqa: SIM115 - closed with the process
        self.server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gateway.cli",
                "serve",
                "--port",
                str(port),
                "--workers",
                "2",
                "--sweep-interval",
                "0",
                *self.serve_args(),
            ],
            env=self.env,
            stdout=log,
            stderr=log,
        )
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90  # a busy two-core machine starts the server slowly
        while not self._healthy(base):
            if time.monotonic() > deadline or self.server.poll() is not None:
                raise DemoUnavailable(
                    f"gateway serve did not start; its log: {self.workdir}/server.log"
                )
            time.sleep(0.2)
        say(
            f"  gateway serve (granian, 2 workers) at {base}, ledger {self.workdir}/ledger.db "
            "(removed at the end unless --keep)"
        )
        return GatewayClient(
            base,
            token,
            on_retry=lambda n, r: say(
                f"    retry {n} after {getattr(r, 'status_code', type(r).__name__)} "
                f"{_problem_slug(r)} (as n8n's Retry On Fail would)"
            ),
        )

    @staticmethod
    def _healthy(base: str) -> bool:
        try:
            return requests.get(base + "/healthz", timeout=5).ok
        except requests.RequestException:
            return False

    def count(self, keys: list[str]) -> dict[str, int]:
        """How many objects in WordPress carry each key (companion plugin lookup, admin)."""
        admin = self.site["users"]["admin"]
        found = requests.get(
            self.site["url"] + "/wp-json/publishing-gateway/v1/objects",
            params={"keys": ",".join(keys)},
            timeout=10,
            auth=(admin["username"], admin["app_password"]),
        ).json()
        counts = dict.fromkeys(keys, 0)
        for obj in found["objects"]:
            counts[obj["operation_key"]] += 1
        return counts

    def upload(self, gw: GatewayClient, job_id: str, article: dict, images: dict) -> dict:
        media = {}
        for img in article["images"]:
            r = gw.put_media(
                job_id,
                img["slot"],
                img["file"],
                images[img["file"]],
                alt_text=img["alt_text"],
                title=img["title"],
                tries=5,
            )
            body = r.json()
            media[img["slot"]] = body.get("media_id")
            say(
                f"  media {img['slot']:8} -> {r.status_code} attachment {body.get('media_id')}"
                f" ({body.get('mime_type')})"
            )
        return media

    def job_a(self, gw: GatewayClient, article: dict, images: dict) -> dict:
        job_id = f"article-{self.run_id}"
        say(f"\n[1/2] job {job_id}: straight through")
        say(f"  job -> {gw.put_job(job_id, 'wordpress').status_code}")
        media = self.upload(gw, job_id, article, images)
        r = gw.put_draft(job_id, draft_body(article), tries=5)
        draft = r.json()
        say(f"  draft -> {r.status_code} post {draft.get('post_id')}")
        replay = gw.put_draft(job_id, draft_body(article))
        say(
            f"  same draft again -> {replay.status_code}, Idempotent-Replayed: "
            f"{replay.headers.get('Idempotent-Replayed')} (no WordPress write)"
        )
        verification = gw.verification(job_id).json()
        say("  verification (read back from WordPress, context=edit):")
        normalized = verification.get("normalized") or {}
        for name, field in verification["fields"].items():
            shown = normalized[name]["sent"] if name in normalized else field["actual"]
            self.check(
                f"{name:18} {json.dumps(shown, ensure_ascii=False)[:60]}",
                field["ok"] is True,
            )
        if "title" in normalized:  # shown as sent; say once why WordPress holds other text
            say(
                "      (WordPress stores the title as "
                f"{json.dumps(normalized['title']['stored'], ensure_ascii=False)[:60]}: it "
                "escapes & at write time; not drift, see docs/api.md, Verification)"
            )
        self.check(
            "replay returned the same post", replay.json().get("post_id") == draft.get("post_id")
        )
        return {
            "job_id": job_id,
            "post_id": draft.get("post_id"),
            "media": media,
            "verified": verification["ok"] is True,
        }

    def job_b(self, gw: GatewayClient, article: dict, images: dict) -> dict:
        job_id = f"article-{self.run_id}-flaky"
        say(f"\n[2/2] job {job_id}: WordPress commits the draft, the response is lost")
        gw.put_job(job_id, "flaky")
        media = self.upload(gw, job_id, article, images)
        self.proxy.add_fault(
            Fault(kind="drop_response", method="POST", path=r"^/wp-json/wp/v2/posts/?$", times=1)
        )
        self.proxy.add_fault(
            Fault(
                kind="status_without_forward",
                status=503,
                method="GET",
                path=r"^/wp-json/publishing-gateway/v1/objects",
                times=1,
            )
        )
        say("  fault proxy: drop the response of POST /wp/v2/posts; fail the first lookup")
        r = gw.put_draft(job_id, draft_body(article), tries=5, wait=1.0)
        body = r.json()
        say(
            f"  draft -> {r.status_code} post {body.get('post_id')} "
            f"(reconciled by lookup: {body.get('reconciled')})"
        )
        writes = self.proxy.count(method="POST", path=r"^/wp-json/wp/v2/posts/?$", forwarded=True)
        self.check(f"create calls that reached WordPress: {writes}", writes == 1)
        row = next(o for o in gw.job(job_id).json()["operations"] if o["action"] == "draft")
        self.check(
            f"ledger: {row['state']} after {row['attempts']} send(s), remote id {row['remote_id']}",
            row["state"] == "CONFIRMED",
        )
        return {
            "job_id": job_id,
            "post_id": body.get("post_id"),
            "media": media,
            "status": r.status_code,
        }

    def report(self, a: dict, b: dict, started: float) -> int:
        say("\nReport")
        for job in (a, b):
            row = Job(tenant=TENANT, job_id=job["job_id"], task_version=1)
            keys = [operation_key(row, "draft")]
            media_keys = [operation_key(row, "media", s) for s in job["media"]]
            counts = self.count(keys + media_keys)
            posts = counts[keys[0]]
            attachments = sum(counts[k] for k in media_keys)
            say(
                f"  {job['job_id']}: post {job['post_id']}, media "
                f"{', '.join(f'{s}={i}' for s, i in job['media'].items())}"
            )
            self.check(f"posts carrying the draft key in WordPress: {posts}", posts == 1)
            self.check(f"attachments carrying the media keys: {attachments}", attachments == 3)
        self.check("every field of job 1 verified by read-back", a["verified"])
        failed = [label for label, ok in self.checks if not ok]
        say(
            f"  time: {time.monotonic() - started:.1f} s; checks: "
            f"{len(self.checks) - len(failed)}/{len(self.checks)} ok"
        )
        say(
            "RESULT: "
            + (
                "OK: 1 post per job, 3 media each, every field verified, lost "
                "response recovered without a duplicate"
                if not failed
                else "FAILED: " + "; ".join(failed)
            )
        )
        return 1 if failed else 0

    def close(self, keep: bool = False) -> None:
        """Stop the server and the proxy; remove the ledger directory unless ``keep``."""
        if self.server is not None:
            self.server.terminate()
            try:
                self.server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.server.kill()
        self.proxy.stop()
        if db.database.obj is not None:
            db.close_all()  # no open handle on the ledger file about to be removed
        if keep:
            say(f"ledger and server log kept in {self.workdir}")
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)


def _problem_slug(response) -> str:
    try:
        return response.json().get("type", "").rsplit("/", 1)[-1]
    except (AttributeError, ValueError):
        return ""


def load_site(site_json: str | None = None) -> dict:
    """The test site's ``site.json``.

    Raises:
        DemoUnavailable: no readable ``site.json`` (the test WordPress is not up).
    """
    path = Path(site_json) if site_json else DEFAULT_SITE_JSON
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        if not site_json and not Path("wp_test_site", "up.sh").is_file():
            raise DemoUnavailable(
                f"run 'gateway demo' from the root of the gateway's clone ({Path.cwd()} has "
                "no wp_test_site/), or name the test site's file with --site-json"
            ) from None
        raise DemoUnavailable(
            f"no test site at {path.resolve()}: run 'bash wp_test_site/up.sh' first"
        ) from None


def run_demo(site_json: str | None = None, keep: bool = False) -> int:
    """Run the demo against the site in ``site_json``; returns the exit status (0 = ok,
    1 = a check failed). The demo's ledger directory is removed afterwards unless ``keep``.

    Raises:
        DemoUnavailable: no readable ``site.json`` (the test WordPress is not up), or
            ``gateway serve`` did not start (its log is kept).
    """
    site = load_site(site_json)
    started = time.monotonic()
    say(f"Publishing Gateway demo against WordPress at {site['url']}")
    demo = Demo(site)
    finished = False
    try:
        gw = demo.setup()
        article, images = load_article()
        a = demo.job_a(gw, article, images)
        b = demo.job_b(gw, article, images)
        status = demo.report(a, b, started)
        finished = True
        return status
    finally:
        demo.close(keep or not finished)  # a demo that broke off keeps its logs
