"""Throughput: distinct jobs per second through the gateway ÷ the same WordPress work done
directly, with ``--clients`` concurrent clients (default 8 = twice the 4 PHP workers, so that
WordPress, the physical limit, stays busy on both sides; the gateway gets 8 sync workers for
the same reason: a worker is held while it does its own ledger work, and with only 4 the PHP
workers would idle meanwhile), each with its own keep-alive session. Rounds alternate A and B (A B B A A B ...), each round runs
``--jobs`` jobs; the figure is the ratio of total jobs over total time per side.

A job through the gateway is what n8n does for a text-only article: ``PUT /v1/jobs/{id}``
then ``PUT /v1/jobs/{id}/draft`` (create + read-back). Directly: ``POST /wp/v2/posts`` +
``GET /wp/v2/posts/{id}?context=edit``.

    python benchmarks/throughput.py [--rounds 4] [--jobs 40] [--clients 4] [--out f]
"""

# ruff: noqa: E501 - long report strings
from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import common
from common import say

from gateway.actions.drafts import post_fields


def cpu_seconds(pgrp: int) -> float:
    """utime + stime of every live process in process group ``pgrp`` (the gateway is started
    in its own session: main process and workers), from /proc, in seconds."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgrp:
            total += int(fields[11]) + int(fields[12])
    return total / tick


def system_busy_seconds() -> float:
    """Busy CPU time of the whole machine (all processes, all cores) from /proc/stat."""
    fields = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--jobs", type=int, default=32, help="jobs per round and side")
    ap.add_argument(
        "--clients", type=int, default=8, help="2 x the PHP workers keeps WordPress busy"
    )
    ap.add_argument("--workers", type=int, default=8, help="gateway (server) workers")
    ap.add_argument("--database", default="sqlite")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    if args.smoke:
        args.rounds, args.jobs, args.clients, args.workers = 2, 4, 4, 2

    site = common.load_site()
    info = common.machine(args.database)
    common.print_machine(info)
    rid = common.run_id()
    local = threading.local()

    with common.Gateway(site, args.database, workers=args.workers) as gw:
        say(f"gateway {gw.url} ({args.workers} workers), {args.clients} clients")

        def gateway_job(n: str) -> None:
            if not hasattr(local, "gw"):
                local.gw = gw.session()
            s = local.gw
            job_id = f"{rid}-t{n}"
            r = s.put(f"{gw.url}/v1/jobs/{job_id}", json={"site": "wordpress", "task_version": 1})
            assert r.status_code in (200, 201), r.text[:300]
            r = s.put(f"{gw.url}/v1/jobs/{job_id}/draft", json=common.draft_body(f"{rid} {n}"))
            assert r.status_code == 201, (r.status_code, r.text[:300])

        def direct_job(n: str) -> None:
            if not hasattr(local, "wp"):
                local.wp = common.DirectWordPress(site)
            body = common.draft_body(f"{rid} direct {n}")
            fields = post_fields(
                f"{common.TENANT}-direct/{rid}-t{n}/v1/draft", body, 0, body["content"]
            )
            post = local.wp.create_post(fields)
            local.wp.get_post(post["id"])

        sides = {"gateway": gateway_job, "direct": direct_job}
        totals = {name: [0, 0.0] for name in sides}
        server_pids = gw.process.pid
        gateway_cpu = 0.0
        system_cpu = {name: 0.0 for name in sides}
        rates = {name: [] for name in sides}
        with ThreadPoolExecutor(args.clients) as pool:
            # warm-up: every client thread once on each side
            for name, fn in sides.items():
                list(pool.map(fn, [f"w{name[0]}{i}" for i in range(args.clients)]))
            for r in range(args.rounds):
                order = ("gateway", "direct") if r % 2 == 0 else ("direct", "gateway")
                for name in order:
                    cpu0 = cpu_seconds(server_pids)
                    busy0 = system_busy_seconds()
                    t0 = time.perf_counter()
                    list(pool.map(sides[name], [f"{r}{name[0]}{i}" for i in range(args.jobs)]))
                    elapsed = time.perf_counter() - t0
                    system_cpu[name] += system_busy_seconds() - busy0
                    if name == "gateway":
                        gateway_cpu += cpu_seconds(server_pids) - cpu0
                    totals[name][0] += args.jobs
                    totals[name][1] += elapsed
                    rates[name].append(args.jobs / elapsed)
                    say(f"  round {r} {name:8} {args.jobs / elapsed:6.2f} jobs/s")

    gw_rate = totals["gateway"][0] / totals["gateway"][1]
    wp_rate = totals["direct"][0] / totals["direct"][1]
    result = {
        "machine": info,
        "clients": args.clients,
        "gateway_workers": args.workers,
        "jobs_per_round": args.jobs,
        "rounds": args.rounds,
        "gateway_jobs_per_s": round(gw_rate, 3),
        "direct_jobs_per_s": round(wp_rate, 3),
        "round_rates": {k: [round(x, 3) for x in v] for k, v in rates.items()},
        "ratio": common.ratio(gw_rate, wp_rate),
        "gateway_cpu_ms_per_job": round(gateway_cpu / totals["gateway"][0] * 1000, 2),
        "machine_cpu_ms_per_job": {
            k: round(v / totals[k][0] * 1000, 1) for k, v in system_cpu.items()
        },
        "goal": ">= 0.95",
    }
    say(
        f"throughput      gateway {gw_rate:.2f} jobs/s, direct {wp_rate:.2f} jobs/s, "
        f"ratio {result['ratio']:.3f}  goal >= 0.95; gateway CPU "
        f"{result['gateway_cpu_ms_per_job']:.1f} ms per job; whole-machine CPU per job "
        f"{result['machine_cpu_ms_per_job']} (all processes, {os.cpu_count()} cores)"
    )
    common.write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
