"""A bounded soak run: many distinct jobs through real ``gateway serve`` workers while about
one WordPress write in ten meets an injected fault of a mixed kind. Afterwards WordPress holds
exactly one post and three attachments per job, and one sweep leaves nothing UNKNOWN.

Size: ``SOAK_JOBS`` (default 200)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from servers import Server
from support import SITE_NAME
from support import draft_body
from support import gateway_command
from support import new_job_id
from support import op_key
from support import png_bytes

from gateway_tools.fault_proxy import Fault

pytestmark = [pytest.mark.wordpress, pytest.mark.soak]
WRITES = {"media": r"^/wp-json/wp/v2/media/?$", "draft": r"^/wp-json/wp/v2/posts/?$"}
SLOTS = ("hero", "one", "two")


def random_fault(rng: random.Random) -> Fault:
    """One fault of a mixed kind on the next create call of a random kind."""
    path = WRITES[rng.choice(list(WRITES))]
    kind = rng.choice(
        [
            "drop_response",
            "status_after_forward",
            "delay",
            "php_notice",
            "throttle",
            "status_without_forward",
        ]
    )
    extra = {
        "status_after_forward": {"status": rng.choice([500, 502])},
        "status_without_forward": {"status": 500},
        "delay": {"seconds": 4.0},
        "throttle": {"status": rng.choice([429, 503])},
    }.get(kind, {})
    return Fault(kind=kind, method="POST", path=path, times=1, **extra)


def run_job(server: Server, proxy, rng: random.Random, job_id: str) -> bool:
    """The n8n pipeline for one job; True when its draft ended CONFIRMED."""
    server.retry("PUT", f"/v1/jobs/{job_id}", json={"site": SITE_NAME, "task_version": 1})
    for slot in SLOTS:
        if rng.random() < 0.1:
            proxy.add_fault(random_fault(rng))
        image = png_bytes(tuple(rng.randrange(256) for _ in range(3)), 2)
        server.retry(
            "PUT",
            f"/v1/jobs/{job_id}/media/{slot}",
            tries=5,
            files={"file": (f"{slot}.png", image)},
        )
    if rng.random() < 0.1:
        proxy.add_fault(random_fault(rng))
    body = draft_body(
        title=f"Soak {job_id}",
        featured_media={"slot": "hero"},
        body_media=["one", "two"],
        content="<p>soak</p>{{media:one}}<p>again</p>{{media:two}}",
    )
    answer = server.retry("PUT", f"/v1/jobs/{job_id}/draft", tries=5, json=body)
    return answer.status_code in (200, 201)


def test_soak_mixed_faults_leave_no_duplicate_and_nothing_unknown(
    wp_site, ledger_url, tmp_path, proxy, gw
):
    size = int(os.environ.get("SOAK_JOBS", "200"))
    rng = random.Random(20261129)
    # 3 s WordPress timeout: the faults' retries (tries=5, then a re-run) absorb a slow answer
    server = Server(wp_site, ledger_url, tmp_path, site_url=proxy.url, wp_timeout=3).start(
        workers=4
    )
    started = time.monotonic()
    try:
        job_ids = [new_job_id() for _ in range(size)]
        seeds = [rng.random() for _ in job_ids]
        with ThreadPoolExecutor(max_workers=4) as pool:
            done = list(
                pool.map(
                    lambda pair: run_job(server, proxy, random.Random(pair[1]), pair[0]),
                    zip(job_ids, seeds, strict=True),
                )
            )
        proxy.clear_faults()
        for job_id, ok in zip(job_ids, done, strict=True):  # what recover_job + a re-run would do
            if not ok:
                run_job(server, proxy, random.Random(0), job_id)
        sweep = subprocess.run(
            [*gateway_command(), "reconcile", "--older-than", "0"],
            env=server.env,
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
        counts = json.loads(sweep.stdout)
        report = server.call("GET", "/v1/jobs?status=unknown&limit=500").json()
    finally:
        server.kill()
    draft_keys = [op_key(j, "draft") for j in job_ids]
    media_keys = [op_key(j, "media", s) for j in job_ids for s in SLOTS]
    keys = draft_keys + media_keys
    objects = [o for i in range(0, len(keys), 50) for o in gw.lookup(keys[i : i + 50])]
    posts = [o for o in objects if o["type"] == "post"]
    attachments = [o for o in objects if o["type"] == "attachment"]
    faults = sum(1 for r in proxy.requests if r.fault_kind)
    elapsed = time.monotonic() - started
    print(
        f"\nsoak: {size} jobs, {faults} faults injected, {len(posts)} posts, "
        f"{len(attachments)} attachments, sweep {counts}, {elapsed:.1f} s"
    )
    assert faults > 0
    assert len(posts) == size and len({o["operation_key"] for o in posts}) == size
    assert len(attachments) == 3 * size
    assert len({o["operation_key"] for o in attachments}) == 3 * size
    assert report["jobs"] == []
