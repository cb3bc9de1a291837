"""``gateway serve`` (granian): a SIGTERM lets the requests being served finish before the
workers exit - here a draft whose WordPress call is held 2 s by the fault proxy."""

from __future__ import annotations

import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from servers import Server
from support import SITE_NAME
from support import draft_body
from support import gateway_command
from support import new_job_id

from gateway_tools.fault_proxy import Fault
from gateway_tools.fault_proxy import FaultProxy


@pytest.mark.wordpress
def test_sigterm_lets_a_request_waiting_for_wordpress_finish(wp_site, ledger_url, tmp_path):
    with FaultProxy(upstream=wp_site["url"], timeout=30) as proxy:
        posts = {"method": "POST", "path": r"^/wp-json/wp/v2/posts/?$"}
        proxy.add_fault(Fault(kind="delay", seconds=2, times=1, **posts))
        server = Server(wp_site, ledger_url, tmp_path, site_url=proxy.url).start(workers=1)
        try:
            job_id = new_job_id()
            job = {"site": SITE_NAME, "task_version": 1}
            assert server.call("PUT", f"/v1/jobs/{job_id}", json=job).status_code == 201
            with ThreadPoolExecutor(1) as pool:
                path = f"/v1/jobs/{job_id}/draft"
                draft = pool.submit(server.call, "PUT", path, json=draft_body())
                deadline = time.monotonic() + 20
                while proxy.count(**posts) == 0 and time.monotonic() < deadline:
                    time.sleep(0.05)
                server.process.send_signal(signal.SIGTERM)  # WordPress holds the POST now
                answer = draft.result(timeout=30)
            assert answer.status_code == 201, answer.text
            assert server.process.wait(timeout=30) == 0
        finally:
            server.kill()


@pytest.mark.wordpress
def test_a_second_serve_or_mcp_on_a_busy_port_exits_2_naming_the_port(
    wp_site, ledger_url, tmp_path
):
    """granian listens with SO_REUSEPORT: without the probe a second ``gateway serve`` on the
    port would start and take half the connections. It exits 2 with one line naming the port,
    and so does ``gateway mcp --transport http``; the first server serves on."""
    first = Server(wp_site, ledger_url, tmp_path).start(workers=1)
    try:
        port = first.url.rsplit(":", 1)[1]
        for args in (
            ["serve", "--port", port, "--workers", "1", "--sweep-interval", "0"],
            ["mcp", "--transport", "http", "--port", port, "--gateway-url", first.url],
        ):
            second = subprocess.run(
                [*gateway_command(), *args],
                env=first.env,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            lines = second.stderr.strip().splitlines()
            assert second.returncode == 2, (args, second.stderr)
            assert len(lines) == 1 and f"port {port} " in lines[0], lines
            assert "Traceback" not in second.stderr
        assert requests.get(first.url + "/healthz", timeout=10).ok
        job_id = new_job_id()
        job = {"site": SITE_NAME, "task_version": 1}
        assert first.call("PUT", f"/v1/jobs/{job_id}", json=job).status_code == 201
    finally:
        first.kill()
