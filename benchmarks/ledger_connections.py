"""Experiment: what a ledger connection per request costs. Two ``gateway serve`` processes on
the same kind of ledger, one stock (the gateway opens and closes the ledger connection in
every request: ``before_request`` / ``teardown_request``) and one started through
``pooled_serve.py`` (peewee's pool keeps one connection per worker). A/B interleaved with the
order flipped every iteration: a draft create + read-back, then ``--replays`` replays of it.

    python benchmarks/ledger_connections.py [--iterations 30] [--database sqlite|postgresql]
"""

# ruff: noqa: E501 - long report strings
from __future__ import annotations

import argparse
import sys
import time

import common
from common import say


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--replays", type=int, default=5)
    ap.add_argument("--database", default="sqlite")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    if args.smoke:
        args.iterations, args.replays = 3, 2
    if args.database == "postgresql" and not common.pg_available():
        say("PostgreSQL is not reachable: skipped")
        common.write_json(args.out, {"skipped": "no PostgreSQL"})
        return 0
    site = common.load_site()
    info = common.machine(args.database)
    common.print_machine(info)
    rid = common.run_id()
    stock = common.Gateway(site, args.database, workers=args.workers)
    pooled = common.Gateway(site, args.database, workers=args.workers, pooled_ledger=True)
    try:
        stock.start()
        pooled.start()
        sides = {"stock": (stock, stock.session()), "pooled": (pooled, pooled.session())}
        draft = {k: [] for k in sides}
        replay = {k: [] for k in sides}

        def one(name: str, i: int, record: bool) -> None:
            gw, s = sides[name]
            job_id = f"{rid}-{name}-{i}"
            r = s.put(f"{gw.url}/v1/jobs/{job_id}", json={"site": "wordpress", "task_version": 1})
            assert r.status_code in (200, 201), r.text[:200]
            body = common.draft_body(f"{rid} {name} {i}")
            t0 = time.perf_counter()
            r = s.put(f"{gw.url}/v1/jobs/{job_id}/draft", json=body)
            t1 = time.perf_counter()
            assert r.status_code == 201, r.text[:300]
            times = []
            for _ in range(args.replays):
                t2 = time.perf_counter()
                r = s.put(f"{gw.url}/v1/jobs/{job_id}/draft", json=body)
                times.append(time.perf_counter() - t2)
                assert r.status_code == 200
            if record:
                draft[name].append(t1 - t0)
                replay[name].extend(times)

        for i in range(3):  # warm-up: every worker of both servers
            for name in sides:
                one(name, -1 - i, False)
        for i in range(args.iterations):
            for name in ("stock", "pooled") if i % 2 == 0 else ("pooled", "stock"):
                one(name, i, True)
    finally:
        stock.close()
        pooled.close()
    result = {
        "machine": info,
        "draft": {k: common.summary(v) for k, v in draft.items()},
        "replay": {k: common.summary(v) for k, v in replay.items()},
    }
    for what in ("draft", "replay"):
        a, b = result[what]["stock"], result[what]["pooled"]
        result[what]["saved_ms_median"] = round(a["median_ms"] - b["median_ms"], 3)
        say(f"  {what:6} stock  {common.fmt(a)}")
        say(
            f"  {what:6} pooled {common.fmt(b)}  (saves {result[what]['saved_ms_median']:.2f} ms median)"
        )
    common.write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
