"""``gateway serve`` (granian): a SIGTERM lets the requests being served finish before the
workers exit - here a draft whose WordPress call is held 2 s by the fault proxy."""

from __future__ import annotations

import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from servers import Server
from support import SITE_NAME
from support import draft_body
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
