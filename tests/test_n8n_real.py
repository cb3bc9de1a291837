"""The exported workflows in a real n8n (1.123.81 on Node.js 20) against a real
``gateway serve`` and the real test WordPress, set up and run with the commands of
``n8n_workflows/README.md`` (each command the module runs is checked to be in the README).

One ``n8n start`` serves every test of the module (``stack``), driven through its webhooks; the
gateway runs with a short in-flight window and ``GATEWAY_RESUME_AFTER=8`` on a tenant of its own
(so the README's fixed sample job id never meets an earlier run's posts in the shared test
WordPress). Editors' notifications go to a local receiver (the tenant's notification URL) that
counts POSTs and their ``Idempotency-Key``; images by URL come from a local server whose answers
the tests switch (404, held). Counts come from WordPress itself (the companion plugin's lookup
by operation key, as admin). SQLite pass only (marker ``n8n``).

When the n8n cache is absent, ``scripts/install_n8n.sh`` installs it first (~3 minutes); if that
fails the tests are skipped, except under ``CI=true`` where they fail.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import signal
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
import requests
from n8n_support import N8N_VERSION
from n8n_support import ROOT
from n8n_support import WORKFLOW_IDS
from n8n_support import N8n
from n8n_support import Receiver
from n8n_support import install
from n8n_support import installed
from support import AUTHOR_PASSWORD_ENV
from support import SECRET_KEY
from support import SITE_NAME
from support import admin_session
from support import free_port
from support import gateway_command

from gateway_tools.fault_proxy import Fault

pytestmark = [pytest.mark.n8n, pytest.mark.wordpress]

README = (ROOT / "n8n_workflows" / "README.md").read_text("utf-8")
EXAMPLES = ROOT / "n8n_workflows" / "examples"
SAMPLE = json.loads((EXAMPLES / "article.json").read_text("utf-8"))
TIMES: dict[str, float] = {}
RESUME_AFTER = 8  # GATEWAY_RESUME_AFTER: longer than a failed run's last image retry
RECOVER = (
    'curl -sS --fail-with-body -X POST "http://127.0.0.1:${N8N_PORT:-5678}/webhook/recover-job"'
)


@pytest.fixture(scope="session")
def n8n_binary():
    """The cached n8n binary, installed on first use."""
    was_installed = installed()
    try:
        binary, seconds = install()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as error:
        if os.environ.get("CI") == "true":
            pytest.fail(f"n8n {N8N_VERSION} could not be installed: {error}")
        pytest.skip(f"n8n {N8N_VERSION} could not be installed: {error}")
    TIMES["install" if not was_installed else "install (cached)"] = seconds
    return binary


# --------------------------------------------------------------------------- local servers


class Images:
    """Images by URL: ``/{name}`` answers the demo image, 404 while ``name`` is in
    ``missing``, and waits while ``name`` is in ``held`` (until :meth:`release`)."""

    def __init__(self) -> None:
        data = ROOT / "gateway_tools" / "demo_data"
        self.files = {p.name: p.read_bytes() for p in data.iterdir() if p.suffix != ".json"}
        self.missing: set[str] = set()
        self.held: dict[str, threading.Event] = {}
        self.requests: list[str] = []
        images = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's naming
                name = self.path.strip("/").split("/")[-1]
                images.requests.append(name)
                if name in images.held:
                    images.held[name].wait(120)
                if name in images.missing or name not in images.files:
                    self.send_response(404)
                    self.send_header("Content-Type", "text/html")
                    self.end_headers()
                    self.wfile.write(b"<html><title>Not Found</title></html>")
                    return
                body = images.files[name]
                self.send_response(200)
                self.send_header(
                    "Content-Type", "image/png" if name.endswith("png") else "image/jpeg"
                )
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/img/{name}"

    def hold(self, name: str) -> None:
        self.held[name] = threading.Event()

    def release(self, name: str) -> None:
        self.held.pop(name).set()

    def close(self) -> None:
        for event in self.held.values():
            event.set()
        self.server.shutdown()
        self.server.server_close()


class Gateway:
    """``gateway serve`` on a fixed port (n8n's ``GATEWAY_URL``), restartable on one ledger."""

    def __init__(self, folder: Path, site: dict, tenant: str, editors_url: str) -> None:
        self.folder = folder
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = folder / "gateway-serve.log"
        self.env = {
            **os.environ,
            "GATEWAY_DATABASE_URL": f"sqlite:///{folder / 'ledger.db'}",
            "GATEWAY_SECRET_KEY": SECRET_KEY,
            "GATEWAY_WP_TIMEOUT": "10",
            "GATEWAY_INFLIGHT_WINDOW": "3",
            "GATEWAY_RESUME_AFTER": str(RESUME_AFTER),
            # the editors' receiver is on loopback: listed, so the address guard lets it pass
            "GATEWAY_NOTIFICATION_URL_ALLOW_HOSTS": editors_url.split("/")[2],
            AUTHOR_PASSWORD_ENV: site["users"]["author"]["app_password"],
        }
        self.process: subprocess.Popen | None = None
        self.cli("init-db")
        self.cli(
            "sites", "add", "--tenant", tenant, "--name", SITE_NAME, "--url", site["url"],
            "--username", site["users"]["author"]["username"],
            "--app-password-env", AUTHOR_PASSWORD_ENV,
        )  # fmt: skip
        self.token = self.cli(
            "tokens", "create", "--tenant", tenant, "--role", "workflow", "--name", "n8n"
        ).split()[-1]
        self.editor = self.cli(
            "tokens", "create", "--tenant", tenant, "--role", "editor", "--name", "ed"
        ).split()[-1]
        self.cli("notifications", "set-url", "--tenant", tenant, "--url", editors_url)

    def cli(self, *args: str) -> str:
        done = subprocess.run(
            [*gateway_command(), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, f"gateway {' '.join(args)}: {done.stderr}"
        return done.stdout

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [*gateway_command(), "serve", "--port", str(self.port), "--workers", "2",
                 "--sweep-interval", "0"],
                env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        wait_for(lambda: self._healthy(), 60, "gateway serve did not answer /healthz")

    def _healthy(self) -> bool:
        assert self.process.poll() is None, self.log()
        try:
            return requests.get(self.url + "/healthz", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=20)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]

    def get(self, path: str, token: str | None = None) -> dict:
        answer = requests.get(
            self.url + path, headers={"Authorization": f"Bearer {token or self.token}"}, timeout=60
        )
        answer.raise_for_status()
        return answer.json()

    def job(self, job_id: str) -> dict:
        return self.get(f"/v1/jobs/{job_id}")

    def requests_logged(self) -> list[dict]:
        """The gateway's JSON ``request`` lines (one per answered request), in order."""
        found = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # n8n's or a killed worker's partial line
            if isinstance(record, dict) and record.get("message") == "request":
                found.append(record)
        return found

    def calls(self, method: str, path: str) -> list[str]:
        """Statuses of ``METHOD path`` (no query string) in the request lines, in order."""
        return [
            str(r["status"])
            for r in self.requests_logged()
            if r.get("method") == method and r.get("path") == path
        ]


def wait_for(check, seconds: float, message: str, interval: float = 0.5):
    deadline = time.monotonic() + seconds
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(message)
        time.sleep(interval)


# --------------------------------------------------------------------------- the stack


@dataclass
class Stack:
    n8n: N8n
    gateway: Gateway
    editors: Receiver
    images: Images
    site: dict
    tenant: str
    webhooks: str  # http://127.0.0.1:{port}/webhook

    def readme(self, command: str, timeout: float = 300) -> subprocess.CompletedProcess:
        """Run one command exactly as ``n8n_workflows/README.md`` writes it."""
        assert command in README, f"not in n8n_workflows/README.md: {command}"
        return subprocess.run(
            ["bash", "-c", command],
            env=self.n8n.env() | {"PATH": f"{self.n8n.binary.parent}:{self.n8n.env()['PATH']}"},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def post(self, name: str, body=None, timeout: float = 300) -> requests.Response:
        return requests.post(f"{self.webhooks}/{name}", json=body, timeout=timeout)

    def counts(self, job_id: str, slots: list[str]) -> tuple[int, int]:
        """(posts, attachments) in WordPress carrying the job's operation keys."""
        prefix = f"{self.tenant}/{job_id}/v1"
        draft, media = f"{prefix}/draft", [f"{prefix}/media/{slot}" for slot in slots]
        answer = admin_session(self.site).get(
            self.site["url"].rstrip("/") + "/wp-json/publishing-gateway/v1/objects",
            params={"keys": ",".join([draft, *media])},
            timeout=30,
        )
        answer.raise_for_status()
        objects = answer.json()["objects"]
        return (
            len([o for o in objects if o["operation_key"] == draft]),
            len([o for o in objects if o["operation_key"] in media]),
        )

    def told(self, job_id: str, event: str) -> list[dict]:
        return [m for m in self.editors.messages if (m["job_id"], m["event"]) == (job_id, event)]

    def wait_phase(self, job_id: str, phase: str, seconds: float = 120) -> dict:
        return wait_for(
            lambda: (job := self.gateway.job(job_id))["phase"] == phase and job,
            seconds,
            f"job {job_id} did not reach {phase}: {self.gateway.log()[-3000:]}",
            interval=1,
        )


@pytest.fixture(scope="module")
def stack(n8n_binary, wp_site, tmp_path_factory):
    started = time.monotonic()
    folder = tmp_path_factory.mktemp("n8n-stack")
    tenant = f"n8n-{uuid.uuid4().hex[:8]}"
    editors, images = Receiver(), Images()
    editors.__enter__()
    gateway = Gateway(folder, wp_site, tenant, editors.url)
    gateway.start()
    home = folder / "n8n"
    home.mkdir()
    state = folder / "state"
    state.mkdir()
    (state / "n8n.token").write_text(gateway.token + "\n")
    n8n_port = free_port()
    n8n = N8n(
        n8n_binary,
        home,
        {"GATEWAY_URL": gateway.url, "N8N_PORT": str(n8n_port), "state": str(state)},
    )
    built = Stack(
        n8n, gateway, editors, images, wp_site, tenant, f"http://127.0.0.1:{n8n_port}/webhook"
    )
    process = log = None
    try:
        t0 = time.monotonic()
        for command in (
            'sed "s|<token>|$(cat "$state/n8n.token")|" n8n_workflows/examples/credentials.json > "$state/n8n-credentials.json"',  # noqa: E501 - the README's line
            'n8n import:credentials --input="$state/n8n-credentials.json" && rm "$state/n8n-credentials.json"',  # noqa: E501 - the README's line
            "n8n import:workflow --separate --input=n8n_workflows/",
            "n8n import:workflow --input=n8n_workflows/examples/sample_caller.json",
            'for id in pgwArticlePipe01 pgwRecoverJob001 pgwPublishAppr01; do n8n update:workflow --id="$id" --active=true; done',  # noqa: E501 - the README's line
        ):  # fmt: skip
            done = built.readme(command)
            assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        assert not (state / "n8n-credentials.json").exists()
        TIMES["import + activate (README commands)"] = time.monotonic() - t0
        t0 = time.monotonic()
        log = open(folder / "n8n-start.log", "wb")  # noqa: SIM115 - closed below
        assert "\nn8n start\n" in README
        process = subprocess.Popen(
            [str(n8n_binary), "start"], env=n8n.env(), cwd=home, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip

        def webhooks_ready():
            assert process.poll() is None, (folder / "n8n-start.log").read_text()[-4000:]
            try:  # an empty body: refused by the pipeline itself (422), so the webhook is live
                return built.post("article-pipeline", timeout=10).status_code == 422
            except requests.RequestException:
                return False

        wait_for(webhooks_ready, 180, "n8n start did not register the webhooks", interval=1)
        TIMES["n8n start"] = time.monotonic() - t0
        yield built
    finally:
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
        if log is not None:
            log.close()
        gateway.kill()
        images.close()
        editors.__exit__(None, None, None)
        TIMES["module total"] = time.monotonic() - started
        print("\nn8n timings: " + ", ".join(f"{k}: {v:.1f} s" for k, v in TIMES.items()))


def slots_of(payload: dict) -> list[str]:
    return [image["slot"] for image in payload["images"]]


def article(job_id: str, images: list[dict]) -> dict:
    return {**SAMPLE, "job_id": job_id, "images": images}


# --------------------------------------------------------------------------- the tests


def test_readme_path_three_runs_one_ready_notification_then_published_once(stack):
    t0 = time.monotonic()
    job_id, slots = SAMPLE["job_id"], slots_of(SAMPLE)
    first = stack.readme(
        "curl -sS --fail-with-body -H 'Content-Type: application/json' --data "
        "@n8n_workflows/examples/article.json "
        '"http://127.0.0.1:${N8N_PORT:-5678}/webhook/article-pipeline"'
    )
    assert first.returncode == 0, first.stdout + first.stderr
    answer = json.loads(first.stdout)
    assert answer["job_id"] == job_id
    assert answer["follow"] == f"{stack.gateway.url}/v1/jobs/{job_id}"
    stack.wait_phase(job_id, "approval_pending")
    wait_for(lambda: stack.told(job_id, "ready_for_approval"), 60, "editors were not told")

    # the same article twice more: the webhook again while the caller workflow runs
    again = stack.post("article-pipeline", SAMPLE)
    assert again.status_code == 202, again.text
    caller = stack.readme("n8n execute --id=pgwSampleCaller1")
    assert caller.returncode == 0, caller.stdout[-3000:] + caller.stderr[-3000:]
    path = f"/v1/jobs/{job_id}/notifications"
    wait_for(lambda: len(stack.gateway.calls("POST", path)) >= 3, 120, "three runs did not end")
    assert stack.counts(job_id, slots) == (1, 3)
    ready = stack.told(job_id, "ready_for_approval")
    assert len(ready) == 1, stack.editors.messages
    key = f"{stack.tenant}/{job_id}/v1/notify/ready_for_approval"
    assert {h["idempotency-key"] for h in stack.editors.headers} == {key}
    assert "authorization" not in stack.editors.headers[0]  # never the gateway token
    verification = stack.gateway.get(f"/v1/jobs/{job_id}/verification")
    assert verification["ok"] is True, verification
    assert ready[0]["post_id"] == verification["post_id"]

    # publish_approved: nothing without an approval; after it, published once
    publish = 'curl -sS --fail-with-body -X POST "http://127.0.0.1:${N8N_PORT:-5678}/webhook/publish-approved"'
    assert stack.readme(publish).returncode == 0
    assert stack.gateway.job(job_id)["phase"] == "approval_pending"
    expires = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).isoformat()
    approval = requests.post(
        f"{stack.gateway.url}/v1/jobs/{job_id}/approvals",
        json={"task_version": 1, "content_sha256": verification["content_sha256"],
              "post_id": verification["post_id"], "expires_at": expires},
        headers={"Authorization": f"Bearer {stack.gateway.editor}"}, timeout=60,
    )  # fmt: skip
    assert approval.status_code == 201, approval.text
    for _ in range(2):
        assert stack.readme(publish).returncode == 0
    assert stack.gateway.job(job_id)["phase"] == "published"
    assert len(stack.told(job_id, "published")) == 1
    TIMES["README path, 3 runs, publish"] = time.monotonic() - t0


def test_a_missing_or_malformed_payload_creates_no_job(stack):
    t0 = time.monotonic()
    before = stack.gateway.get("/v1/jobs?limit=500")["jobs"]
    named_null = {"job_id": "null", "article": SAMPLE["article"], "images": SAMPLE["images"]}
    no_images = {"job_id": "no-images", "article": SAMPLE["article"]}
    for body in (None, {}, {"job_id": None}, named_null, no_images):
        answer = stack.post("article-pipeline", body)
        assert answer.status_code == 422, (body, answer.text)
        problem = answer.json()
        assert problem["job_created"] is False and problem["errors"], problem
    assert "job_id" in stack.post("article-pipeline", {"job_id": None}).json()["detail"]
    bare = stack.n8n.execute(WORKFLOW_IDS["article_pipeline"])  # `n8n execute`, no input
    assert bare.returncode != 0, bare.describe()
    assert "No job created" in bare.stdout + bare.stderr, bare.describe()
    after = stack.gateway.get("/v1/jobs?limit=500")["jobs"]
    assert after == before
    assert stack.gateway.calls("PUT", "/v1/jobs/null") == []
    TIMES["missing payload"] = time.monotonic() - t0


def run_recover_job_until(stack, job_id: str, phase: str, tries: int = 4) -> None:
    """``POST /webhook/recover-job`` until the job reaches ``phase`` (a run of the error
    workflow may have resumed it already, or the gateway may answer ``wait``)."""
    for _ in range(tries):
        time.sleep(RESUME_AFTER + 0.5)  # the job must be idle that long to be resumed
        done = stack.readme(RECOVER)
        assert done.returncode == 0, done.stdout + done.stderr
        if stack.gateway.job(job_id)["phase"] == phase:
            return
    raise AssertionError(f"recover_job did not finish {job_id}: {stack.gateway.job(job_id)}")


def test_a_404_image_leaves_a_job_recover_job_finishes_once_the_url_works(stack):
    t0 = time.monotonic()
    job_id = f"img404-{uuid.uuid4().hex[:8]}"
    images = [
        {"slot": "hero", "url": stack.images.url("hero.png"), "alt_text": "Hero"},
        {"slot": "diagram", "url": stack.images.url("diagram.jpg"), "alt_text": "Diagram"},
        {**SAMPLE["images"][2]},  # ledger: base64
    ]
    stack.images.missing.add("diagram.jpg")
    answer = stack.post("article-pipeline", article(job_id, images))
    assert answer.status_code == 202, answer.text
    # the run stops on the 404 and its error workflow, recover_job, asks to resume: "wait"
    resumes = f"/v1/jobs/{job_id}/resume"
    wait_for(lambda: stack.gateway.calls("POST", resumes), 90, "the run did not stop")
    job = stack.gateway.job(job_id)
    assert job["phase"] != "approval_pending" and job["status"] == "in_progress", job
    stack.images.missing.discard("diagram.jpg")
    run_recover_job_until(stack, job_id, "approval_pending")
    assert stack.counts(job_id, slots_of({"images": images})) == (1, 3)
    assert len(stack.told(job_id, "ready_for_approval")) == 1
    TIMES["404 image, recovered"] = time.monotonic() - t0


def test_a_gateway_restart_mid_run_is_finished_by_recover_job(stack):
    t0 = time.monotonic()
    job_id = f"restart-{uuid.uuid4().hex[:8]}"
    # by URL: an image sent as base64 and not yet uploaded could not be resumed (the gateway
    # keeps no image bytes; that job goes to a person)
    images = [
        {"slot": name.split(".")[0], "url": stack.images.url(name), "alt_text": name}
        for name in ("hero.png", "diagram.jpg", "ledger.png")
    ]
    stack.images.hold("hero.png")
    seen = len(stack.images.requests)
    answer = stack.post("article-pipeline", article(job_id, images))
    assert answer.status_code == 202, answer.text
    reached = lambda: "hero.png" in stack.images.requests[seen:]  # noqa: E731
    wait_for(reached, 60, "the run did not reach the images")
    saved = lambda: stack.gateway.calls("PUT", f"/v1/jobs/{job_id}/resume-point")  # noqa: E731
    assert wait_for(saved, 15, "the resume point was not saved") == ["201"]
    stack.gateway.kill()  # mid-run: the job exists, nothing is uploaded yet
    stack.images.release("hero.png")
    time.sleep(15)  # the run's retries (5 tries, 2 s apart) give up while the gateway is down
    before_restart = stack.gateway.log_path.read_text(errors="replace")
    stack.gateway.start()
    run_recover_job_until(stack, job_id, "approval_pending")
    # the run had stopped before its draft: the draft came from the resumed run
    assert f"/v1/jobs/{job_id}/draft" not in before_restart
    assert stack.counts(job_id, slots_of({"images": images})) == (1, 3)
    assert len(stack.told(job_id, "ready_for_approval")) == 1
    TIMES["gateway restart, recovered"] = time.monotonic() - t0


def test_a_lost_draft_response_is_retried_after_retry_after_and_reconciled(stack, proxy):
    """The draft's response is lost after WordPress committed it and the gateway's first
    lookup fails: 503 ``outcome-unknown`` (retryable, ``Retry-After``); the pipeline waits and
    calls again, reconciliation finds the post: one post, not two."""
    t0 = time.monotonic()
    job_id = f"lost-{uuid.uuid4().hex[:8]}"
    site = stack.site
    add_site = ("sites", "add", "--tenant", stack.tenant, "--name", SITE_NAME,
                "--username", site["users"]["author"]["username"],
                "--app-password-env", AUTHOR_PASSWORD_ENV)  # fmt: skip
    stack.gateway.cli(*add_site, "--url", proxy.url)
    try:
        proxy.add_fault(
            Fault(kind="drop_response", method="POST", path=r"^/wp-json/wp/v2/posts/?$", times=1)
        )
        proxy.add_fault(
            Fault(kind="status_without_forward", status=503, method="GET",
                  path=r"^/wp-json/publishing-gateway/v1/objects", times=1)
        )  # fmt: skip
        answer = stack.post("article-pipeline", {**SAMPLE, "job_id": job_id})
        assert answer.status_code == 202, answer.text
        stack.wait_phase(job_id, "approval_pending")
    finally:
        stack.gateway.cli(*add_site, "--url", site["url"])
    creates = proxy.count(method="POST", path=r"^/wp-json/wp/v2/posts/?$", forwarded=True)
    assert creates == 1, f"post creations that reached WordPress: {creates}"
    assert stack.counts(job_id, slots_of(SAMPLE)) == (1, 3)
    statuses = stack.gateway.calls("PUT", f"/v1/jobs/{job_id}/draft")
    assert statuses[0] == "503" and statuses[-1] in ("200", "201"), statuses
    assert len(stack.told(job_id, "ready_for_approval")) == 1
    TIMES["lost draft response"] = time.monotonic() - t0


def test_a_wrong_token_fails_both_scheduled_workflows(stack):
    """Last: it replaces the credential."""
    t0 = time.monotonic()
    wrong = [{"id": "pgwGatewayToken1", "name": "Publishing Gateway token",
              "type": "httpHeaderAuth", "data": {"name": "Authorization",
                                                 "value": "Bearer not-a-valid-token"}}]  # fmt: skip
    stack.n8n.import_credentials(wrong)
    for name in ("recover-job", "publish-approved"):
        command = f'curl -sS --fail-with-body -X POST "http://127.0.0.1:${{N8N_PORT:-5678}}/webhook/{name}"'
        done = stack.readme(command)
        assert done.returncode == 22, (name, done.returncode, done.stdout, done.stderr)
        assert "500" in done.stderr or "Error" in done.stdout, (done.stdout, done.stderr)
    refused = [s for s in stack.gateway.calls("GET", "/v1/jobs") if s == "401"]
    assert len(refused) >= 2, "both lists should have been refused"
    # the pipeline stops at the first 401 (retryable: false): the job is asked for once
    job_id = f"wrong-token-{uuid.uuid4().hex[:8]}"
    answer = stack.post("article-pipeline", {**SAMPLE, "job_id": job_id})
    assert answer.status_code == 502, answer.text
    assert answer.json()["gateway_status"] == 401 and answer.json()["job_created"] is False
    # the request line is written as the answer goes out: wait for it
    logged = wait_for(
        lambda: stack.gateway.calls("PUT", f"/v1/jobs/{job_id}"), 15, "the refused PUT logged"
    )
    assert logged == ["401"]
    TIMES["wrong token"] = time.monotonic() - t0


def test_article_pipeline_base64_helper_is_the_sample():
    """The sample's images are the demo images (what the other tests count)."""
    data = ROOT / "gateway_tools" / "demo_data"
    for image in SAMPLE["images"]:
        assert base64.b64decode(image["content_base64"]) == (data / image["filename"]).read_bytes()
