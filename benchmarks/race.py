"""Race: ``--concurrency`` (50) identical ``PUT /v1/jobs/{id}/draft`` requests released at
once by a barrier, 4 gateway workers, PostgreSQL ledger, WordPress behind
:class:`gateway_tools.fault_proxy.FaultProxy` (no faults: it only counts what reaches
WordPress). Repeated for ``--rounds`` fresh jobs.

Per round: WordPress writes (``POST /wp/v2/posts`` forwarded by the proxy; goal 1), the
status codes the clients saw (goal 0 × 5xx; 409 ``operation-in-progress`` is the documented
answer for a request that arrives while the first is still in WordPress), and latency
(p50/p99 over every request of every round). Each client has its own keep-alive session.

    python benchmarks/race.py [--rounds 3] [--concurrency 50] [--database postgresql]
"""

from __future__ import annotations

import argparse
import collections
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import common
from common import say

from gateway_tools.fault_proxy import FaultProxy

POSTS = r"^/wp-json/wp/v2/posts/?$"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=50)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--database", default="postgresql")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    if args.smoke:
        args.rounds, args.concurrency = 1, 10
    if args.database == "postgresql" and not common.pg_available():
        say("PostgreSQL is not reachable: race measured on SQLite instead")
        args.database = "sqlite"

    site = common.load_site()
    info = common.machine(args.database)
    common.print_machine(info)
    rid = common.run_id()
    proxy = FaultProxy(site["url"]).start()
    latencies: list[float] = []
    rounds = []
    try:
        with common.Gateway(site, args.database, workers=args.workers, site_url=proxy.url) as gw:
            say(f"gateway {gw.url} ({args.workers} workers) -> proxy {proxy.url} -> WordPress")
            sessions = [gw.session() for _ in range(args.concurrency)]
            # warm-up: every worker detects the companion plugin and opens its session
            for i in range(args.workers * 2):
                job_id = f"{rid}-warm{i}"
                sessions[0].put(
                    f"{gw.url}/v1/jobs/{job_id}", json={"site": "wordpress", "task_version": 1}
                )
                sessions[0].put(f"{gw.url}/v1/jobs/{job_id}/draft", json=common.draft_body(job_id))
            for r in range(args.rounds):
                job_id = f"{rid}-race{r}"
                sessions[0].put(
                    f"{gw.url}/v1/jobs/{job_id}", json={"site": "wordpress", "task_version": 1}
                )
                body = common.draft_body(job_id)
                proxy.reset_log()
                barrier = threading.Barrier(args.concurrency)

                def fire(i: int, job_id=job_id, body=body, barrier=barrier):
                    s = sessions[i]
                    barrier.wait()
                    t0 = time.perf_counter()
                    resp = s.put(f"{gw.url}/v1/jobs/{job_id}/draft", json=body, timeout=120)
                    elapsed = time.perf_counter() - t0
                    slug = ""
                    if resp.status_code >= 400:
                        try:
                            slug = resp.json().get("type", "").rsplit("/", 1)[-1]
                        except ValueError:
                            slug = "non-json"
                    return resp.status_code, slug, elapsed, resp.json().get("post_id")

                t0 = time.perf_counter()
                with ThreadPoolExecutor(args.concurrency) as pool:
                    answers = list(pool.map(fire, range(args.concurrency)))
                wall = time.perf_counter() - t0
                writes = proxy.count(method="POST", path=POSTS, forwarded=True)
                statuses = collections.Counter(
                    f"{code} {slug}".strip() for code, slug, _, _ in answers
                )
                post_ids = sorted({p for code, _, _, p in answers if code < 300 and p})
                latencies.extend(e for _, _, e, _ in answers)
                five = sum(1 for code, *_ in answers if code >= 500)
                rounds.append(
                    {
                        "wordpress_writes": writes,
                        "statuses": dict(statuses),
                        "five_xx": five,
                        "post_ids": post_ids,
                        "wall_s": round(wall, 3),
                        "latency": common.summary([e for _, _, e, _ in answers]),
                    }
                )
                say(
                    f"  round {r}: WordPress writes {writes}, 5xx {five}, statuses "
                    f"{dict(statuses)}, posts {post_ids}, wall {wall:.2f} s"
                )
    finally:
        proxy.stop()
    lat = common.summary(latencies)
    result = {
        "machine": info,
        "concurrency": args.concurrency,
        "gateway_workers": args.workers,
        "rounds": rounds,
        "max_wordpress_writes_per_round": max(r["wordpress_writes"] for r in rounds),
        "total_5xx": sum(r["five_xx"] for r in rounds),
        "latency": lat,
        "goal": "1 WordPress write per round, 0 x 5xx; p99 reported",
    }
    say(
        f"race            writes/round {[r['wordpress_writes'] for r in rounds]}, "
        f"5xx {result['total_5xx']}, p50 {lat['median_ms']:.1f} ms, p99 {lat['p99_ms']:.1f} ms"
    )
    common.write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
