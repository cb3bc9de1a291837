"""What the MCP tests share: a real ``gateway serve`` that can be SIGKILLed and restarted on
the same port, ``gateway mcp`` over stdio (its pid recorded, to be SIGKILLed) and over
streamable HTTP, and the official SDK's clients (``stdio_client`` / ``streamable_http_client``
+ ``ClientSession``) to drive them."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx2
import pytest
import requests
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from servers import Server
from support import TENANT
from support import free_port
from support import gateway_command

from gateway_tools.fault_proxy import FaultProxy

TOOLS = (
    "start_job",
    "upload_media",
    "put_draft",
    "insert_block",
    "verify",
    "request_approval",
    "recover",
    "get_job",
    "read_text",
)
FOUR = ("operation_key", "state", "replayed", "reconciled")


class McpGateway(Server):
    """:class:`servers.Server` whose restarts keep their port, so an MCP server configured
    with the gateway's URL reaches the restarted one."""

    port = 0

    def start(self, crash_point: str = "", workers: int = 2, sweep_interval: float = 0):
        self.port = self.port or free_port()
        env = {**self.env, "GATEWAY_CRASH_POINTS": crash_point}
        log = open(self.workdir / f"serve-{time.monotonic_ns()}.log", "wb")  # noqa: SIM115
        self.process = subprocess.Popen(
            [*gateway_command(), "serve", "--port", str(self.port), "--workers", str(workers),
             "--sweep-interval", str(sweep_interval)],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if requests.get(self.url + "/healthz", timeout=2).ok:
                    return self
            except requests.RequestException:
                time.sleep(0.2)
        self.kill()
        raise AssertionError("gateway serve did not start")

    @property
    def token(self) -> str:
        return self.headers["Authorization"].removeprefix("Bearer ")

    def make_token(self, tenant: str = TENANT, role: str = "workflow") -> str:
        name = f"mcp-{time.monotonic_ns()}"
        out = self._cli("tokens", "create", "--tenant", tenant, "--role", role, "--name", name)
        return out.strip().splitlines()[-1]

    def logs(self) -> str:
        return "".join(p.read_text(errors="replace") for p in self.workdir.glob("serve-*.log"))


def mcp_command() -> list[str]:
    return [*gateway_command(), "mcp"]


MODERN = "2026-07-28"  # stateless: server/discover, no initialize
HANDSHAKE = "2025-11-25"  # the newest revision initialize negotiates


async def _connect(session: ClientSession, revision: str) -> None:
    """Open ``session`` at ``revision``: ``server/discover`` (2026-07-28) or ``initialize``."""
    if revision == MODERN:
        await session.discover()
    else:
        await session.initialize()
    assert session.protocol_version == revision, session.protocol_version


@contextlib.asynccontextmanager
async def stdio_session(
    gateway_url: str,
    token: str,
    workdir: Path,
    media_root: Path | None = None,
    revision: str = HANDSHAKE,
):
    """An SDK client session with ``gateway mcp`` over stdio at protocol ``revision``. The
    server's pid goes to ``workdir/mcp.pid`` (``exec`` keeps the shell's pid), its stderr to
    ``workdir/mcp.log``."""
    pidfile = workdir / "mcp.pid"
    env = {"GATEWAY_URL": gateway_url, "GATEWAY_TOKEN": token, "PIDFILE": str(pidfile),
           "PATH": os.environ.get("PATH", "")}  # fmt: skip
    if media_root is not None:
        env["GATEWAY_MCP_MEDIA_ROOTS"] = str(media_root)
    params = StdioServerParameters(
        command="sh",
        args=["-c", 'echo $$ > "$PIDFILE"; exec "$@"', "sh", *mcp_command()],
        env=env,
    )
    with open(workdir / "mcp.log", "a") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await _connect(session, revision)
                yield session


def kill_stdio_server(workdir: Path) -> None:
    """SIGKILL the ``gateway mcp`` of the last :func:`stdio_session`."""
    os.kill(int((workdir / "mcp.pid").read_text()), signal.SIGKILL)


class HttpMcp:
    """``gateway mcp --transport http`` on a free loopback port."""

    def __init__(self, gateway_url: str, workdir: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.log_path = workdir / "mcp-http.log"
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [*mcp_command(), "--transport", "http", "--port", str(self.port),
                 "--gateway-url", gateway_url],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                requests.get(self.url, timeout=2)
                return
            except requests.RequestException:
                time.sleep(0.2)
        self.stop()
        raise AssertionError("gateway mcp --transport http did not start")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)


@contextlib.asynccontextmanager
async def http_session(url: str, token: str, revision: str = HANDSHAKE):
    """An SDK client session over streamable HTTP at protocol ``revision`` with ``token`` as
    its bearer token."""
    timeout = httpx2.Timeout(60.0, read=300.0)
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await _connect(session, revision)
                yield session


def problem_of(result) -> dict:
    """The problem JSON of a tool error (the SDK prefixes ``Error executing tool NAME: ``)."""
    assert result.is_error, result
    text = result.content[0].text
    return json.loads(text[text.index("{") :])


def slug(problem: dict) -> str:
    return problem["type"].rsplit("/", 1)[-1]


def takes_array(schema: dict) -> bool:
    """Whether an advertised property takes an array (in a type list or an anyOf branch)."""
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    return "array" in kinds or any(takes_array(b) for b in schema.get("anyOf", []))


def count_objects(site: dict, keys: list[str]) -> dict[str, int]:
    """How many WordPress objects carry each operation key (companion plugin, as admin)."""
    admin = site["users"]["admin"]
    found = requests.get(
        site["url"].rstrip("/") + "/wp-json/publishing-gateway/v1/objects",
        params={"keys": ",".join(keys)},
        auth=(admin["username"], admin["app_password"]),
        timeout=30,
    )
    found.raise_for_status()
    counts = dict.fromkeys(keys, 0)
    for obj in found.json()["objects"]:
        counts[obj["operation_key"]] = counts.get(obj["operation_key"], 0) + 1
    return counts


# The fixtures of the MCP test modules (imported there by name).


@pytest.fixture(scope="module")
def shared_proxy(shared_wp_site):
    """One fault proxy in front of the test WordPress for the module's shared gateway."""
    with FaultProxy(upstream=shared_wp_site["url"], timeout=30) as fault_proxy:
        yield fault_proxy


@pytest.fixture(scope="module")
def gateway(shared_wp_site, shared_proxy, tmp_path_factory):
    """One ``gateway serve`` for the module (each test has its own job ids), on its own
    SQLite ledger, whose site ``blog`` is the test WordPress behind :func:`shared_proxy`."""
    workdir = tmp_path_factory.mktemp("mcp-gateway")
    ledger_url = f"sqlite:///{workdir / 'ledger.db'}"
    server = McpGateway(shared_wp_site, ledger_url, workdir, site_url=shared_proxy.url)
    server.start()
    yield server
    server.kill()


@pytest.fixture
def gw_proxy(shared_proxy):
    """The shared proxy with no faults and an empty request log for this test."""
    shared_proxy.clear_faults()
    shared_proxy.reset_log()
    yield shared_proxy
    shared_proxy.clear_faults()


FIXTURES = (shared_proxy, gateway, gw_proxy)  # a module binds them: its own gateway
