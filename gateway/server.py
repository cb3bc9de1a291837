"""``gateway serve``: granian (a Rust HTTP server) running the app factory as a WSGI app in
each worker process, on a pool of Python threads per worker.

Why granian and not gunicorn: on this stack it costs less CPU per request (its HTTP parsing
and connection handling are Rust, outside the GIL): ``benchmarks/stack_floor.py`` measures it
(docs/performance.md). Follows granian's embedding API (``granian.server.Server``, its
``on_startup``/``on_shutdown`` hooks and ``serve(target_loader=...)``).

* **Workers.** ``workers`` processes forked from this one, each loading
  :func:`gateway.app.create_app` after the fork (no ledger connection crosses it), each
  serving at most ``threads`` requests at once on its blocking threads (more wait in the
  worker); a worker that dies is replaced. ``GATEWAY_WORKER_THREADS`` tells each worker its
  thread count, from which the per-tenant request share is set
  (:mod:`gateway.tenancy.tenant_shares`). Each worker also runs one notification delivery
  thread (:func:`gateway.actions.deliveries.deliver_forever`, started as the worker loads
  the app), so no API request ever waits for a tenant's receiver.
* **The main process** runs one background reconciliation sweep for the whole server (a
  short child process every ``sweep_interval``), when ``GATEWAY_OPENAI_API_KEY`` is set one
  agent worker (``gateway worker``, a child process), and when ``GATEWAY_MCP_LISTEN`` is set
  the remote MCP listener (:mod:`gateway.remote.listener`, a child process served by uvicorn:
  granian serves one interface per server, and the API stays WSGI), restarted when it dies:
  all started by the server's startup hook and stopped by its shutdown hook, after the
  workers have stopped.
* **Stopping.** SIGTERM or SIGINT: the workers stop accepting, finish the requests they are
  serving and exit; a worker still busy after ``GATEWAY_WP_TIMEOUT + 5`` seconds is killed
  (granian's ``workers_kill_timeout``, gunicorn's ``graceful_timeout`` before).
* **What bounds a stuck request.** granian has no equivalent of gunicorn's worker ``timeout``
  (which killed a worker silent for that long): nothing kills a worker in the middle of a
  request. What bounds one instead is every wait a request can make: each WordPress call
  (connect and read, ``GATEWAY_WP_TIMEOUT``, REST and XML-RPC), the download of a media source
  or a notification (``actions/egress.py``: a deadline for the whole transfer, not per read),
  the ledger's busy timeout (SQLite, 15 s) and its connection pool's wait (30 s); a busy site
  slot is refused at once (:mod:`gateway.tenancy.site_slots`), never waited for. A request
  killed halfway would leave a SENT row for reconciliation; one that runs out of time ends
  with UNKNOWN itself.

Logs: one line per request and per WordPress call (:mod:`gateway.core.logs`), JSON by default,
granian's own lines (start, workers, stop) in the same format; granian's access log stays off
(the gateway's request line replaces it, with request id, tenant, job and operation key).
Metrics: a fresh prometheus_client multiprocess directory per server start
(:mod:`gateway.operator.metrics`), removed when the server stops.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from granian.constants import HTTPModes
from granian.constants import Interfaces
from granian.server import Server

from gateway.core import config as config_module
from gateway.core import listening
from gateway.core import logs

#: The server ``gateway serve`` runs on (the stack floor of ``benchmarks/stack_floor.py`` uses
#: the same).
SERVER = "granian"
APP_FACTORY = "gateway.app:create_app"
LISTENER_MAX_PAUSE = 30.0  # seconds at most between restarts of a listener that keeps dying
#: The one line of a server that leaves the listener off (issue 58): a second gateway on one
#: machine starts without it rather than not at all.
LISTENER_OFF = (
    "the remote MCP listener is off: %s:%s (GATEWAY_MCP_LISTEN's default) is in use, by "
    "another gateway's listener or another program; this gateway serves its API without "
    "/mcp (set GATEWAY_MCP_LISTEN to a free host:port for one)"
)


class Background:
    """What the main process runs beside the workers: the sweep thread, the agent worker and
    the remote MCP listener (``listener``: its command, None for none; ``yields``: its
    ``(host, port)`` when that is the default, given up if another process binds it first).

    :meth:`start` is the server's startup hook, :meth:`stop` its shutdown hook (called after
    the workers have stopped)."""

    def __init__(
        self,
        sweep_interval: float,
        agent_worker: bool,
        metrics_dir: str | None,
        listener: list[str] | None = None,
        yields: tuple[str, int] | None = None,
    ):
        self.sweep_interval = sweep_interval
        self.agent_worker = agent_worker
        self.metrics_dir = metrics_dir
        self.listener = listener
        self.yields = yields
        self._worker: subprocess.Popen | None = None
        self._listener: subprocess.Popen | None = None
        self._stop = threading.Event()

    def start(self) -> None:
        """Start the agent worker and the listener (child processes, the listener watched by
        a thread that restarts it) and the sweep thread, as configured."""
        if self.agent_worker:
            # Its own process, like the sweep: the main process never holds a ledger connection.
            self._worker = subprocess.Popen([sys.executable, "-m", "gateway.cli", "worker"])
        if self.listener:
            self._listener = subprocess.Popen(self.listener)
            threading.Thread(
                target=self._watch_listener, name="gateway-listener", daemon=True
            ).start()
        if self.sweep_interval > 0:
            threading.Thread(
                target=sweep_forever,
                args=(self.sweep_interval, self._stop),
                name="gateway-sweep",
                daemon=True,
            ).start()

    def _watch_listener(self) -> None:
        """Restart the listener when it exits before :meth:`stop`: after 1 s, doubling up to
        :data:`LISTENER_MAX_PAUSE` while it keeps dying within a minute of its start."""
        log = logging.getLogger("gateway.listener")
        pause = 1.0
        while not self._stop.wait(0.5):
            process = self._listener
            if process is None or process.poll() is None:
                continue
            if self.yields and _busy(*self.yields):  # another server's since our probe
                log.warning(LISTENER_OFF, *self.yields)
                return
            log.error("the remote MCP listener exited (%s); restarting it in %.0f s",
                      process.returncode, pause)  # fmt: skip
            if self._stop.wait(pause):
                return
            started = time.monotonic()
            self._listener = subprocess.Popen(self.listener)
            while self._listener.poll() is None and not self._stop.wait(0.5):
                if time.monotonic() - started > 60:
                    pause = 1.0
                    break
            else:
                pause = min(LISTENER_MAX_PAUSE, pause * 2)

    def stop(self) -> None:
        """Stop the sweep, the agent worker and the listener (SIGTERM, SIGKILL after 15 s)
        and remove the metrics directory."""
        self._stop.set()
        for child in (self._worker, self._listener):
            if child is not None and child.poll() is None:
                child.terminate()
                try:
                    child.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    child.kill()
        if self.metrics_dir:
            shutil.rmtree(self.metrics_dir, ignore_errors=True)


def load_worker_app(_target: str):
    """granian's target loader, called in each worker process after the fork (``_target``:
    :data:`APP_FACTORY`): the app from :func:`gateway.app.create_app`, and the worker's notification
    delivery thread on the app's own configuration (a daemon: it ends with the worker; a
    delivery cut short is resent with the same ``Idempotency-Key`` once its claim expires).

    Raises:
        ConfigError, LedgerError: as :func:`gateway.app.create_app` (the worker exits).
    """
    from gateway.actions import deliveries
    from gateway.app import create_app

    app = create_app()
    threading.Thread(
        target=deliveries.deliver_forever,
        args=(app.config["GATEWAY"], threading.Event()),
        name="gateway-notifications",
        daemon=True,
    ).start()
    return app


def sweep_forever(interval: float, stop: threading.Event) -> None:
    """Run ``gateway reconcile`` every ``interval`` seconds until ``stop`` is set.

    Each sweep is a short child process, so the main process - which forks the workers -
    never holds a database connection (a connection carried across fork() corrupts SQLite
    and confuses PostgreSQL)."""
    log = logging.getLogger("gateway.sweep")
    command = [sys.executable, "-m", "gateway.cli", "reconcile"]
    while not stop.wait(interval):
        try:
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                check=False,
                timeout=max(interval * 10, 300),
            )
        except subprocess.TimeoutExpired:
            log.error("sweep took too long; the next one starts on schedule")
            continue
        if done.returncode != 0:
            log.error("sweep failed: %s", done.stderr.strip()[-2000:])
        else:
            counts = json.loads(done.stdout or "{}")
            if counts.get("examined") or any((counts.get("notifications") or {}).values()):
                log.info("sweep: %s", done.stdout.strip())


def listener_port_free(remote) -> bool:
    """Whether the remote MCP listener (a :class:`gateway.core.mcp_listen.Listener`) can bind
    its port: True when free; False, after :data:`LISTENER_OFF` in the log, when it is busy and
    ``GATEWAY_MCP_LISTEN`` was left to its default, so that one gateway never blocks the next
    on one machine (issue 58).

    Raises:
        PortInUse: the port is busy and ``GATEWAY_MCP_LISTEN`` names it: a value chosen on
            purpose fails like a busy ``--port``.
    """
    if not _busy(remote.host, remote.port):
        return True
    if config_module.chosen("mcp_listen"):
        raise listening.PortInUse(
            f"the remote MCP listener (GATEWAY_MCP_LISTEN, empty = none): port {remote.port} "
            f"on {remote.host} is already in use; stop what listens there or choose another"
        )
    logging.getLogger("gateway.listener").warning(LISTENER_OFF, remote.host, remote.port)
    return False


def _busy(host: str, port: int) -> bool:
    try:
        listening.refuse_busy_port(host, port)
    except listening.PortInUse:
        return True
    return False


def metrics_directory() -> str:
    """A new, empty directory for prometheus_client's multiprocess files, named in
    ``PROMETHEUS_MULTIPROC_DIR`` for the workers forked after this call. A directory per
    server start, so figures of an earlier run or another server on this host never mix in."""
    path = tempfile.mkdtemp(prefix="gateway-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    return path


def run(
    host: str,
    port: int,
    workers: int = config_module.DEFAULT_WORKERS,
    sweep_interval: float = 60,
    agent_worker: bool = True,
    log_format: str = "json",
    threads: int = config_module.DEFAULT_THREADS,
    share_port: bool = False,
) -> None:
    """Run granian until stopped (SIGTERM or SIGINT): ``workers`` processes of ``threads``
    threads each, so at most ``workers * threads`` requests are served at once (the rest
    wait); ``sweep_interval`` in seconds (0: no sweep); ``log_format`` is ``json`` or ``text``;
    ``share_port``: listen beside whatever already listens on the port (granian's
    ``SO_REUSEPORT``) instead of refusing (:mod:`gateway.core.listening`).

    Raises:
        ConfigError: configuration is invalid (checked before any worker starts).
        LedgerError: no ledger, or an outdated one (``gateway init-db`` first).
        PortInUse: something listens on ``host:port`` already (without ``share_port``), or on
            ``GATEWAY_MCP_LISTEN``'s when it was set (:func:`listener_port_free`).
    """
    from gateway.core import mcp_listen

    cfg = config_module.load()
    remote = mcp_listen.of(cfg)
    logs.configure(log_format)
    from gateway.ledger import db
    from gateway.ledger import migrations

    db.bind(cfg.database_url)
    migrations.check(cfg.database_url)  # refuse before any worker starts: one line, no traceback
    db.close_all()  # no connection may cross the fork into the workers
    if not share_port:
        listening.refuse_busy_port(host, port)
    listener = yields = None
    if remote is not None and (share_port or listener_port_free(remote)):
        listener = [sys.executable, "-m", "gateway.remote.listener", "--log-format", log_format]
        listener += ["--review-url", mcp_listen.review_base(cfg, host, port)]
        if not config_module.chosen("mcp_listen"):
            yields = (remote.host, remote.port)
    agent = agent_worker and bool(cfg.openai_api_key)
    os.environ["GATEWAY_WORKER_THREADS"] = str(threads)  # each worker's tenant request share
    background = Background(sweep_interval, agent, metrics_directory(), listener, yields)
    server = Server(
        APP_FACTORY,
        address=host,
        port=port,
        interface=Interfaces.WSGI,
        http=HTTPModes.http1,
        websockets=False,
        workers=workers,
        blocking_threads=threads,
        # threads live as long as allowed: each keeps its keep-alive WordPress sessions
        blocking_threads_idle_timeout=600,
        respawn_failed_workers=True,
        workers_kill_timeout=int(cfg.wp_timeout + 5),
        log_dictconfig=logs.server_logconfig(log_format),
        log_access=False,  # the gateway's own request line replaces it
    )
    server.on_startup(background.start)
    server.on_shutdown(background.stop)
    server.serve(target_loader=load_worker_app)
