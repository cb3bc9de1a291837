"""Real ``gateway serve`` processes for tests: started, SIGKILLed and restarted on one ledger,
called like n8n calls them (retrying on a lost connection or a retryable status)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import requests
from support import SECRET_KEY
from support import SITE_NAME
from support import TENANT
from support import free_port
from support import gateway_cli_ok
from support import gateway_command
from support import problem_slug

PASSWORD_ENV = "GW_TEST_AUTHOR_APP_PASSWORD"


class Server:
    """A ``gateway serve`` process that can be SIGKILLed and restarted on the same ledger."""

    def __init__(
        self,
        site: dict,
        ledger_url: str,
        workdir: Path,
        site_url: str | None = None,
        transport: str = "rest",
        wp_timeout: float = 20,
    ):
        self.env = {
            **os.environ,
            "GATEWAY_DATABASE_URL": ledger_url,
            "GATEWAY_SECRET_KEY": SECRET_KEY,
            # long enough for a loaded CI machine: a test whose point is a timeout sets its own
            "GATEWAY_WP_TIMEOUT": str(wp_timeout),
            "GATEWAY_INFLIGHT_WINDOW": "3",
            PASSWORD_ENV: site["users"]["author"]["app_password"],
        }
        self.workdir = workdir
        self.process: subprocess.Popen | None = None
        self.url = ""
        self._cli("init-db")
        self._cli(
            "sites",
            "add",
            "--tenant",
            TENANT,
            "--name",
            SITE_NAME,
            "--url",
            site_url or site["url"],
            "--username",
            site["users"]["author"]["username"],
            "--app-password-env",
            PASSWORD_ENV,
            "--transport",
            transport,
            # a fixture: the site may be a fault proxy or an address where nothing listens
            # (sites add's own check is test_cli's)
            "--no-check",
        )
        # Token names are unique per tenant: several servers may share one ledger.
        name = f"n8n-{uuid.uuid4().hex[:8]}"
        out = self._cli(
            "tokens", "create", "--tenant", TENANT, "--role", "workflow", "--name", name
        )
        self.headers = {"Authorization": "Bearer " + out.strip().splitlines()[-1]}

    def _cli(self, *args: str) -> str:
        """A setup command (``init-db``, ``sites add``, ``tokens create``) run in-process:
        what these tests check is the served process, not the command line's."""
        return gateway_cli_ok(list(args), self.env)

    def start(
        self,
        crash_point: str = "",
        workers: int | None = 2,
        sweep_interval: float = 0,
        wp_timeout: float | None = None,
        threads: int | None = None,
        port: int | None = None,
    ) -> Server:
        """Start ``gateway serve`` (``workers``/``threads`` None: its defaults, as shipped);
        ``wp_timeout`` (seconds) overrides the constructor's for this process only, for a call
        that must reach its crash point after WordPress answers; ``port`` None: a free one
        (a restart after :meth:`kill` may give the same one again)."""
        port = port or free_port()
        env = {**self.env, "GATEWAY_CRASH_POINTS": crash_point}
        if wp_timeout is not None:
            env["GATEWAY_WP_TIMEOUT"] = str(wp_timeout)
        log = open(self.workdir / f"serve-{port}.log", "ab")  # noqa: SIM115 - a restart adds
        self.process = subprocess.Popen(
            [
                *gateway_command(),
                "serve",
                "--port",
                str(port),
                *(["--workers", str(workers)] if workers else []),  # None: as shipped
                *(["--threads", str(threads)] if threads else []),
                "--sweep-interval",
                str(sweep_interval),
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if requests.get(self.url + "/healthz", timeout=2).ok:
                    return self
            except requests.RequestException:
                time.sleep(0.2)
        self.kill()  # never leave a half-started server behind
        raise AssertionError("gateway serve did not start")

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def has_connection_from(self, port: int) -> bool:
        """Whether one of this server's processes (its session: the main process and its
        workers) has the TCP socket whose local port is ``port``, e.g. the sender's end of a
        POST a local receiver holds (read from /proc: Linux)."""
        sockets = {f"socket:[{inode}]" for inode in _inodes_of_local_port(port)}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                session = int(stat.read_text().rsplit(")", 1)[1].split()[3])
                if session == self.process.pid and any(
                    os.readlink(fd) in sockets for fd in (stat.parent / "fd").iterdir()
                ):
                    return True
            except OSError:  # the process ended meanwhile
                continue
        return False

    def call(self, method: str, path: str, **kwargs) -> requests.Response:
        return requests.request(method, self.url + path, headers=self.headers, timeout=30, **kwargs)

    def retry(self, method: str, path: str, tries: int = 10, **kwargs) -> requests.Response:
        """Retry like n8n: on a lost connection or a retryable status, wait and send again."""
        for _ in range(tries):
            try:
                answer = self.call(method, path, **kwargs)
            except requests.ConnectionError:
                time.sleep(1)
                continue
            if not _worth_retrying(answer):
                return answer
            time.sleep(min(float(answer.headers.get("Retry-After", "1")), 3))
        return answer


def _inodes_of_local_port(port: int) -> set[str]:
    """The inodes of the TCP sockets (IPv4 and IPv6) whose local port is ``port``."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def _worth_retrying(answer: requests.Response) -> bool:
    """What a careful n8n workflow retries: 409/503 (in flight, outcome unknown, ledger or
    site busy) except a review an editor must resolve, and any problem that says
    ``retryable: true`` (a 429/503 from in front of WordPress answers 502 with it)."""
    if answer.status_code in (409, 503) and problem_slug(answer) != "needs-review":
        return True
    if "json" not in answer.headers.get("Content-Type", ""):
        return False
    body = answer.json()
    return isinstance(body, dict) and body.get("retryable") is True
