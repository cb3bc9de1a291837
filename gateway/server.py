"""``gateway serve``: gunicorn with the app factory loaded in each worker after the fork.

Follows gunicorn's "Custom Application" pattern (``gunicorn.app.base.BaseApplication``). The
worker timeout stays above ``GATEWAY_WP_TIMEOUT`` so that gunicorn never kills a worker that is
still waiting for WordPress (which would leave a SENT row for reconciliation). One background
reconciliation sweep runs in the master process for the whole server, not one per worker, and
so does one agent worker (``gateway worker``, a child process) when ``GATEWAY_OPENAI_API_KEY`` is
set. Each worker also runs one notification delivery thread
(:func:`gateway.actions.notifications.deliver_forever`, started by ``post_worker_init``), so
no API request ever waits for a tenant's receiver. ``GATEWAY_WORKER_THREADS`` tells each worker
its thread count, from which the per-tenant request share is set
(:mod:`gateway.tenancy.tenant_shares`).

Logs: one line per request and per WordPress call (:mod:`gateway.core.logs`), JSON by default,
gunicorn's own lines in the same format; gunicorn's access log is off because the gateway's
request line replaces it (with request id, tenant, job and operation key). Metrics: a fresh
prometheus_client multiprocess directory per server start (:mod:`gateway.operator.metrics`), removed
when the server stops.
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

from gunicorn.app.base import BaseApplication
from gunicorn.config import KNOWN_SETTINGS

from gateway.core import config as config_module
from gateway.core import logs


class GatewayServer(BaseApplication):
    """A gunicorn application serving :func:`gateway.app.create_app`."""

    def __init__(
        self,
        options: dict,
        sweep_interval: float,
        agent_worker: bool = False,
        metrics_dir: str | None = None,
    ):
        self.options = options
        self.sweep_interval = sweep_interval
        self.agent_worker = agent_worker
        self._worker: subprocess.Popen | None = None
        self.metrics_dir = metrics_dir
        self._stop = threading.Event()
        super().__init__()

    def load_config(self):
        for key, value in self.options.items():
            self.cfg.set(key, value)
        self.cfg.set("when_ready", self._when_ready)
        self.cfg.set("on_exit", self._on_exit)
        self.cfg.set("post_worker_init", _start_delivery)

    def _on_exit(self, _server):
        self._stop.set()
        if self._worker is not None and self._worker.poll() is None:
            self._worker.terminate()
            try:
                self._worker.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._worker.kill()
        if self.metrics_dir:
            shutil.rmtree(self.metrics_dir, ignore_errors=True)

    def _when_ready(self, _server):
        if self.agent_worker:
            # Its own process, like the sweep: the master never holds a ledger connection.
            self._worker = subprocess.Popen([sys.executable, "-m", "gateway.cli", "worker"])
        if self.sweep_interval > 0:
            threading.Thread(
                target=sweep_forever,
                args=(self.sweep_interval, self._stop),
                name="gateway-sweep",
                daemon=True,
            ).start()

    def load(self):
        from gateway.app import create_app

        return create_app()


def _start_delivery(worker) -> None:
    """gunicorn's ``post_worker_init``: the worker's notification delivery thread, on the
    worker's own configuration (a daemon: it ends with the worker; a delivery cut short is
    resent with the same ``Idempotency-Key`` once its claim expires)."""
    from gateway.actions import notifications

    config = worker.wsgi.config["GATEWAY"]
    threading.Thread(
        target=notifications.deliver_forever,
        args=(config, threading.Event()),
        name="gateway-notifications",
        daemon=True,
    ).start()


def sweep_forever(interval: float, stop: threading.Event) -> None:
    """Run ``gateway reconcile`` every ``interval`` seconds until ``stop`` is set.

    Each sweep is a short child process, so the master - which forks the workers - never
    holds a database connection (a connection carried across fork() corrupts SQLite and
    confuses PostgreSQL)."""
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
    workers: int,
    sweep_interval: float,
    agent_worker: bool = True,
    log_format: str = "json",
    threads: int = 4,
) -> None:
    """Run gunicorn until stopped: ``workers`` processes of ``threads`` threads each, so at
    most ``workers * threads`` requests are served at once (the rest wait in the socket's
    backlog); ``log_format`` is ``json`` or ``text``.

    Raises:
        ConfigError: configuration is invalid (checked before any worker starts).
        LedgerError: no ledger, or an outdated one (``gateway init-db`` first).
    """
    cfg = config_module.load()
    logs.configure(log_format)
    from gateway.ledger import db
    from gateway.ledger import migrations

    db.bind(cfg.database_url)
    migrations.check(cfg.database_url)  # refuse before any worker starts: one line, no traceback
    db.close_all()  # no connection may cross the fork into the workers
    options = {
        "bind": f"{host}:{port}",
        "workers": workers,
        "worker_class": "gthread",  # keep-alive for n8n and clients; a few threads per worker
        "threads": threads,
        "keepalive": 5,
        "timeout": int(cfg.wp_timeout * 2 + 30),
        "graceful_timeout": int(cfg.wp_timeout + 5),
        "preload_app": False,
        "accesslog": None,  # the gateway's own request line replaces it
        "errorlog": "-",
        "loglevel": "info",
        "logconfig_dict": logs.gunicorn_logconfig(log_format),
    }
    if "control_socket_disable" in {setting.name for setting in KNOWN_SETTINGS}:
        # gunicorn >= 25.1 opens one control socket per user by default: several gateway
        # servers on one host would fight over its path.
        options["control_socket_disable"] = True
    agent = agent_worker and bool(cfg.openai_api_key)
    os.environ["GATEWAY_WORKER_THREADS"] = str(threads)  # each worker's tenant request share
    GatewayServer(options, sweep_interval, agent, metrics_directory()).run()
