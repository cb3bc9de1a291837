"""Reconcile: ``--rows`` (1,000) UNKNOWN draft operations reconciled by one
:func:`gateway.recovery.reconciliation.sweep`, with WordPress behind
:class:`gateway_tools.fault_proxy.FaultProxy` so that every WordPress query is counted.

How the 1,000 operations are made cheaply: they are ledger rows (one job each, state
UNKNOWN, a stored draft intent), inserted directly. ``--found`` of them (default 100) name
posts that really exist: those posts are created directly in WordPress (4 threads, author
password) with the operation-key meta, exactly as the gateway would have written them before
losing the response. The rest are absent in WordPress (the write never arrived). A lookup
costs the same for a present or an absent key (one key in a batched ``IN`` query), so absent
rows measure the lookup cost without creating 1,000 posts per run; the present rows measure
what a found operation adds (its read-back). Two scenarios run on separate ledgers:

* ``all_absent``: ``--rows`` rows, none in WordPress -> lookups only;
* ``mixed``: ``--rows`` rows, ``--found`` of them in WordPress.

    python benchmarks/reconcile.py [--rows 1000] [--found 100]
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import secrets
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import common
from common import say

from gateway.wordpress import OPERATION_KEY_META
from gateway_tools.fault_proxy import FaultProxy


def classify(path: str, method: str) -> str:
    if "/publishing-gateway/v1/objects" in path:
        return "lookup"
    if "/publishing-gateway/v1/status" in path:
        return "companion_status"
    if method != "GET":
        return "write"
    if "/wp/v2/posts/" in path or "/wp/v2/media/" in path:
        return "read_back"
    return "other"


def scenario(site: dict, proxy: FaultProxy, rows: int, found: int, rid: str, database: str) -> dict:
    # The sweep runs here without the app: the composition root fills the action registry
    # (without it every row is "no registered action": unreachable, 0 WordPress queries).
    from gateway import composition  # noqa: F401
    from gateway.core.config import Config
    from gateway.ledger import db
    from gateway.ledger import migrations
    from gateway.ledger.models import Job
    from gateway.ledger.models import Operation
    from gateway.recovery.reconciliation import sweep
    from gateway.tenancy import sites

    workdir = Path(tempfile.mkdtemp(prefix="reconcile-bench-"))
    pg_url = common.pg_create("reconcile") if database == "postgresql" else None
    url = pg_url or f"sqlite:///{workdir}/ledger.db"
    secret = secrets.token_urlsafe(32)
    name = f"{rid}-f{found}"
    keys = [f"{common.TENANT}/{name}-{i:05d}/v1/draft" for i in range(rows)]
    body = common.draft_body(name)
    try:
        # 1. the posts WordPress committed before the responses were "lost"
        direct = [common.DirectWordPress(site) for _ in range(4)]

        def create(i: int) -> None:
            direct[i % 4].create_post(
                {
                    "title": f"{body['title']} {i}",
                    "content": body["content"],
                    "excerpt": body["excerpt"],
                    "status": "draft",
                    "meta": {OPERATION_KEY_META: keys[i]},
                }
            )

        t0 = time.perf_counter()
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(create, range(found)))
        create_s = time.perf_counter() - t0

        # 2. the ledger: one job and one UNKNOWN draft row per key
        database_obj = db.bind(url)
        database_obj.connect(reuse_if_open=True)
        migrations.migrate()
        author = site["users"]["author"]
        sites.add_site(
            secret,
            common.TENANT,
            "wordpress",
            proxy.url,
            author["username"],
            author["app_password"],
        )
        old = db.utcnow() - dt.timedelta(minutes=10)
        intent = {
            "sent": {k: body[k] for k in ("title", "content", "excerpt", "seo")},
            "expected": {"featured_media": 0, "body_media": []},
            "update_of": None,
        }
        with db.atomic():
            Job.insert_many(
                [
                    {
                        "tenant": common.TENANT,
                        "job_id": k.split("/")[1],
                        "site": "wordpress",
                        "task_version": 1,
                        "created_at": old,
                        "updated_at": old,
                    }
                    for k in keys
                ]
            ).execute()
            for lo in range(0, rows, 500):
                Operation.insert_many(
                    [
                        {
                            "operation_key": k,
                            "tenant": common.TENANT,
                            "job_id": k.split("/")[1],
                            "task_version": 1,
                            "action": "draft",
                            "binds": "post",
                            "request_hash": "0" * 64,
                            "state": "UNKNOWN",
                            "intent": intent,
                            "attempts": 1,
                            "created_at": old,
                            "updated_at": old,
                            "sent_at": old,
                        }
                        for k in keys[lo : lo + 500]
                    ]
                ).execute()

        # 3. one sweep, every WordPress request counted
        sites.forget_companion()
        config = Config(database_url=url, secret_key=secret, wp_timeout=30)
        proxy.reset_log()
        t0 = time.perf_counter()
        counts = sweep(config, older_than=0)
        elapsed = time.perf_counter() - t0
        kinds = collections.Counter(classify(r.path, r.method) for r in proxy.requests)
        confirmed = Operation.select().where(Operation.state == "CONFIRMED").count()
        return {
            "rows": rows,
            "found_in_wordpress": found,
            "create_found_posts_s": round(create_s, 2),
            "sweep_s": round(elapsed, 3),
            "sweep_counts": counts,
            "confirmed_rows": confirmed,
            "wordpress_queries": sum(kinds.values()),
            "wordpress_queries_by_kind": dict(kinds),
        }
    finally:
        db.database.close()
        if pg_url:
            common.pg_drop(pg_url)
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--found", type=int, default=100)
    ap.add_argument("--database", default="sqlite")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    if args.smoke:
        args.rows, args.found = 100, 5
    site = common.load_site()
    info = common.machine(args.database)
    common.print_machine(info)
    rid = common.run_id()
    proxy = FaultProxy(site["url"]).start()
    result = {"machine": info, "goal": "WordPress queries <= 20 for 1,000 rows"}
    try:
        for label, found in (("all_absent", 0), ("mixed", args.found)):
            s = scenario(site, proxy, args.rows, found, rid, args.database)
            result[label] = s
            say(
                f"  {label:10} {s['rows']} UNKNOWN rows, {found} in WordPress: sweep "
                f"{s['sweep_s']:.2f} s, WordPress queries {s['wordpress_queries']} "
                f"{s['wordpress_queries_by_kind']}, confirmed {s['confirmed_rows']}, "
                f"counts {s['sweep_counts']}"
            )
    finally:
        proxy.stop()
    a, m = result["all_absent"], result["mixed"]
    say(
        f"reconcile       {args.rows} rows: {a['wordpress_queries']} WordPress queries "
        f"({a['sweep_s']:.2f} s) when all absent; {m['wordpress_queries']} "
        f"({m['sweep_s']:.2f} s) with {m['found_in_wordpress']} found  goal <= 20"
    )
    wrong = [
        f"{label}: {s['confirmed_rows']} of {s['found_in_wordpress']} found rows confirmed, "
        f"{s['sweep_counts'].get('unreachable', 0)} unreachable"
        for label, s in (("all_absent", a), ("mixed", m))
        if s["confirmed_rows"] != s["found_in_wordpress"] or s["sweep_counts"].get("unreachable")
    ]
    result["reconciled"] = not wrong  # summarize.py's row needs it as well as the query count
    common.write_json(args.out, result)
    if wrong:  # the query count means nothing when the sweep did not do its work
        say("reconcile did not reconcile: " + "; ".join(wrong))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
