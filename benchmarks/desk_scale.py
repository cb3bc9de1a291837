"""Desk scale (issue 56, item 5): the time of the editors' desk's first page (``GET /review``,
10 drafts, each read back live from WordPress) as the tenant's drafts grow 10 -> 100 ->
1,000 (``--jobs``), and of the same page narrowed by a state filter and by a title search.

How the jobs are made: 10 real drafts are written through the gateway (``PUT`` job + draft
against the test WordPress), so the first page's cards read real posts; the others are ledger
rows inserted directly (a verified job and its draft row with a stored intent, updated before
the real ones so they sort after them), as ``reconcile.py`` makes its rows. The page reads
WordPress only for the cards it shows, so the rows past the first page cost only SQL: the
figure is the ratio of the first page's median at the largest size to the one at 10 drafts
(goal: at most 1.5, i.e. no growth beyond noise).

The Flask app is driven through its test client in this process (as ``profile_overhead.py``),
signed in with an editor token through the sign-in form.

    python benchmarks/desk_scale.py [--jobs 1000] [--iterations 7]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import secrets
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import common
from common import say

REAL = 10  # one page of cards, each read back from WordPress
GOAL = 1.5


def _sign_in(client, token: str) -> None:
    page = client.get("/review/login").get_data(as_text=True)
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    answer = client.post("/review/login", data={"token": token, "csrf_token": csrf})
    assert answer.status_code == 303, answer.status_code


def _real_drafts(client, headers: dict, rid: str) -> list[str]:
    ids = []
    for i in range(REAL):
        job_id = f"{rid}-real-{i}"
        job = {"site": "wordpress", "task_version": 1}
        client.put(f"/v1/jobs/{job_id}", json=job, headers=headers)
        body = common.draft_body(f"{rid} desk {i}")
        answer = client.put(f"/v1/jobs/{job_id}/draft", json=body, headers=headers)
        assert answer.status_code == 201, answer.get_data(as_text=True)[:300]
        ids.append(job_id)
    return ids


def _fill(rid: str, start: int, stop: int) -> None:
    """Ledger rows of verified drafts ``start..stop-1``, older than the real ones."""
    from gateway.ledger import db
    from gateway.ledger.models import Job
    from gateway.ledger.models import Operation

    old = db.utcnow() - dt.timedelta(days=1)
    ids = [f"{rid}-row-{n:05d}" for n in range(start, stop)]
    intent = {"sent": {"title": "A filler draft", "content": "<p>x</p>"}}
    with db.database.atomic():
        for lo in range(0, len(ids), 500):
            chunk = ids[lo : lo + 500]
            Job.insert_many(
                {"tenant": common.TENANT, "job_id": j, "site": "wordpress", "phase": "verified",
                 "updated_at": old, "created_at": old}
                for j in chunk
            ).execute()  # fmt: skip
            Operation.insert_many(
                {"operation_key": f"{common.TENANT}/{j}/v1/draft", "tenant": common.TENANT,
                 "job_id": j, "task_version": 1, "action": "draft", "request_hash": "0" * 64,
                 "intent": intent}
                for j in chunk
            ).execute()  # fmt: skip


def _median_ms(client, query: str, iterations: int, expect: int) -> float:
    times = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        page = client.get(f"/review{query}")
        times.append(time.perf_counter() - t0)
        html = page.get_data(as_text=True)
        assert page.status_code == 200 and html.count('class="card draft"') == expect, query
    return round(statistics.median(times) * 1000, 1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--iterations", type=int, default=7)
    ap.add_argument("--out")
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args(argv)
    if args.smoke:
        args.jobs, args.iterations = 30, 2
    site = common.load_site()
    workdir = Path(tempfile.mkdtemp(prefix="gateway-desk-"))
    secret = secrets.token_urlsafe(32)
    os.environ.update(
        {"GATEWAY_DATABASE_URL": f"sqlite:///{workdir}/ledger.db", "GATEWAY_SECRET_KEY": secret}
    )
    try:
        from gateway import create_app
        from gateway.ledger import db
        from gateway.ledger import migrations
        from gateway.tenancy import sites
        from gateway.tenancy import tokens

        app = create_app(check_ledger=False)  # migrated just below
        author = site["users"]["author"]
        with db.database.connection_context():
            migrations.migrate()
            sites.add_site(
                secret, common.TENANT, "wordpress", site["url"], author["username"],
                author["app_password"],
            )  # fmt: skip
            workflow = tokens.create_token(common.TENANT, "workflow", "desk-bench")
            editor = tokens.create_token(common.TENANT, "editor", "desk-bench-editor")
        client = app.test_client()
        rid = common.run_id()
        _real_drafts(client, {"Authorization": f"Bearer {workflow}"}, rid)
        _sign_in(client, editor)
        common.print_machine(common.machine("sqlite"))
        sizes = sorted({REAL, min(100, args.jobs), args.jobs})
        rows, made = [], REAL
        for size in sizes:
            with app.app_context(), db.database.connection_context():
                _fill(rid, made, size)
            made = size
            _median_ms(client, "", 1, REAL)  # warm-up at this size
            row = {
                "jobs": size,
                "first_page_ms": _median_ms(client, "", args.iterations, REAL),
                "state_waiting_ms": _median_ms(client, "?state=waiting", args.iterations, REAL),
                "title_search_ms": _median_ms(client, f"?q={rid}+desk", args.iterations, REAL),
            }
            rows.append(row)
            say(
                f"{size:>6} drafts: first page {row['first_page_ms']} ms, state filter "
                f"{row['state_waiting_ms']} ms, title search {row['title_search_ms']} ms"
            )
        ratio = round(rows[-1]["first_page_ms"] / rows[0]["first_page_ms"], 3)
        say(f"first page at {rows[-1]['jobs']} / at {REAL} drafts: {ratio} (goal <= {GOAL})")
        common.write_json(
            args.out,
            {"sizes": rows, "ratio": ratio, "goal": GOAL, "met": ratio <= GOAL, "real": REAL},
        )
    finally:
        from gateway.ledger import db

        db.database.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
