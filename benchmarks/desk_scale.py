"""Desk scale (issue 56, item 5): the time of the editors' desk's first page (``GET /review``,
10 drafts, each read back live from WordPress) as the tenant's drafts grow 10 -> 100 ->
1,000 (``--jobs``), and of the same page narrowed by a state filter and by a title search.

How the jobs are made: one tenant per size, in one ledger. Each gets 10 real drafts written
through the gateway (``PUT`` job + draft against the test WordPress), so its first page's cards
read real posts; the rest of its drafts are ledger rows inserted directly (a verified job and
its draft row with a stored intent, updated before the real ones so they sort after them), as
``reconcile.py`` makes its rows. The sizes are measured interleaved, the order rotating and
flipping every round (the README's A/B rule: drift in the machine's load hits every size
alike). The page reads WordPress only for the cards it shows, so the rows past the first page
cost only SQL: the figure is the ratio of the first page's median at the largest size to the
one at 10 drafts (goal: at most 1.5, i.e. no growth beyond noise).

The Flask app is driven through its test client in this process (as ``profile_overhead.py``),
one client per tenant, each signed in with that tenant's editor token through the form.

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
        job = {"site": "wordpress", "task_version": 1}  # the tenant's own site "wordpress"
        client.put(f"/v1/jobs/{job_id}", json=job, headers=headers)
        body = common.draft_body(f"{rid} desk {i}")
        answer = client.put(f"/v1/jobs/{job_id}/draft", json=body, headers=headers)
        assert answer.status_code == 201, answer.get_data(as_text=True)[:300]
        ids.append(job_id)
    return ids


def _fill(tenant: str, rid: str, start: int, stop: int) -> None:
    """Ledger rows of ``tenant``'s verified drafts ``start..stop-1``, older than the real
    ones."""
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
                {"tenant": tenant, "job_id": j, "site": "wordpress", "phase": "verified",
                 "updated_at": old, "created_at": old}
                for j in chunk
            ).execute()  # fmt: skip
            Operation.insert_many(
                {"operation_key": f"{tenant}/{j}/v1/draft", "tenant": tenant,
                 "job_id": j, "task_version": 1, "action": "draft", "request_hash": "0" * 64,
                 "intent": intent}
                for j in chunk
            ).execute()  # fmt: skip


def _load_s(client, query: str) -> float:
    t0 = time.perf_counter()
    page = client.get(f"/review{query}")
    elapsed = time.perf_counter() - t0
    html = page.get_data(as_text=True)
    assert page.status_code == 200 and html.count('class="card draft"') == REAL, query
    return elapsed


def _tenant(app, secret: str, site: dict, size: int, rid: str):
    """A tenant with ``size`` drafts (:data:`REAL` of them real): its signed-in client."""
    from gateway.ledger import db
    from gateway.tenancy import sites
    from gateway.tenancy import tokens

    tenant, author = f"desk{size}", site["users"]["author"]
    with db.database.connection_context():
        sites.add_site(
            secret, tenant, "wordpress", site["url"], author["username"], author["app_password"]
        )
        workflow = tokens.create_token(tenant, "workflow", "desk-bench")
        editor = tokens.create_token(tenant, "editor", "desk-bench-editor")
    client = app.test_client()
    _real_drafts(client, {"Authorization": f"Bearer {workflow}"}, f"{rid}-{size}")
    with app.app_context(), db.database.connection_context():
        _fill(tenant, rid, REAL, size)
    _sign_in(client, editor)
    return client


QUERIES = {"first_page_ms": "", "state_waiting_ms": "?state=waiting"}


def _measure(clients: dict, iterations: int) -> list[dict]:
    """Every size's medians, the sizes interleaved: rotated and flipped every round."""
    queries = {**QUERIES, "title_search_ms": "?q=desk"}
    times = {(size, name): [] for size in clients for name in queries}
    order = list(clients)
    for i in range(iterations + 1):  # the first round warms up
        rotated = order[i % len(order) :] + order[: i % len(order)]
        for size in rotated if i % 2 == 0 else rotated[::-1]:
            for name, query in queries.items():
                elapsed = _load_s(clients[size], query)
                if i:
                    times[(size, name)].append(elapsed)
    return [
        {"jobs": size}
        | {name: round(statistics.median(times[(size, name)]) * 1000, 1) for name in queries}
        for size in order
    ]


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

        app = create_app(check_ledger=False)  # migrated just below
        with db.database.connection_context():
            migrations.migrate()
        rid = common.run_id()
        sizes = sorted({REAL, min(100, args.jobs), args.jobs})
        clients = {size: _tenant(app, secret, site, size, rid) for size in sizes}
        common.print_machine(common.machine("sqlite"))
        rows = _measure(clients, args.iterations)
        for row in rows:
            say(
                f"{row['jobs']:>6} drafts: first page {row['first_page_ms']} ms, state filter "
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
