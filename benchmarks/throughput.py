"""Throughput: distinct jobs per second through the gateway ÷ the same WordPress work done
directly, with ``--clients`` concurrent clients (default 8 = twice the 4 PHP workers, so that
WordPress, the physical limit, stays busy on both sides), each with its own keep-alive
session, against ``gateway serve`` as shipped: its default ``--workers``/``--threads`` and
fair shares (``--workers``/``--threads`` to try others). A 429 ``tenant-busy`` is retried
after its ``Retry-After``, as a client would, and counted. Rounds alternate A and B
(A B B A A B ...), each round runs ``--jobs`` jobs; the figure is the ratio of total jobs
over total time per side.

A job through the gateway is what n8n does for a text-only article: ``PUT /v1/jobs/{id}``
then ``PUT /v1/jobs/{id}/draft`` (create + read-back). Directly: ``POST /wp/v2/posts`` +
``GET /wp/v2/posts/{id}?context=edit``.

    python benchmarks/throughput.py [--rounds 4] [--jobs 40] [--clients 32] [--threads 16] [--out f]
"""

# ruff: noqa: E501 - long report strings
from __future__ import annotations

import argparse
import collections
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import common
import requests
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


class Rival:
    """A second tenant, ``rival``, on the same gateway: its site is the same WordPress behind a
    fault proxy that holds every draft 25 s (under the gateway's 30 s WordPress timeout), and
    ``clients`` threads send it drafts all along, each retrying a 429 after its
    ``Retry-After``. ``answers`` counts its status codes. ``clients`` 0: nothing at all."""

    def __init__(self, gw: common.Gateway, site: dict, clients: int):
        self.gw, self.site, self.clients = gw, site, clients
        self.answers: collections.Counter = collections.Counter()
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []

    def __enter__(self) -> Rival:
        if not self.clients:
            return self
        from gateway.ledger import db
        from gateway.tenancy import sites
        from gateway.tenancy import tokens
        from gateway_tools.fault_proxy import Fault
        from gateway_tools.fault_proxy import FaultProxy

        self.proxy = FaultProxy(upstream=self.site["url"], timeout=60).start()
        posts = r"^/wp-json/wp/v2/posts/?$"
        self.proxy.add_fault(Fault(kind="delay", seconds=25, method="POST", path=posts, times=None))
        author = self.site["users"]["author"]
        db.bind(self.gw.db_url)
        with db.database.connection_context():
            sites.add_site(
                self.gw.secret, "rival", "wordpress", self.proxy.url,
                author["username"], author["app_password"],
            )  # fmt: skip
            token = tokens.create_token("rival", "workflow", "bench-rival")
        db.database.close()
        for i in range(self.clients):
            thread = threading.Thread(target=self._drafts, args=(token, i), daemon=True)
            thread.start()
            self.threads.append(thread)
        return self

    def _drafts(self, token: str, i: int) -> None:
        s = requests.Session()
        s.headers["Authorization"] = f"Bearer {token}"
        n = 0
        while not self.stop.is_set():
            n += 1
            job = f"{common.run_id()}-rival{i}-{n}"
            try:
                s.put(f"{self.gw.url}/v1/jobs/{job}", json={"site": "wordpress", "task_version": 1})
                r = s.put(f"{self.gw.url}/v1/jobs/{job}/draft", json=common.draft_body(job))
            except requests.RequestException:
                self.answers["connection error"] += 1
                continue
            self.answers[str(r.status_code)] += 1
            if r.status_code == 429:
                self.stop.wait(float(r.headers.get("Retry-After", "1")))

    def __exit__(self, *exc) -> None:
        self.stop.set()
        if self.clients:
            self.proxy.stop()  # the held drafts end at once: their connections close


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--jobs", type=int, default=32, help="jobs per round and side")
    ap.add_argument(
        "--clients", type=int, default=8, help="2 x the PHP workers keeps WordPress busy"
    )
    ap.add_argument(
        "--workers", type=int, default=None, help="gateway workers (default: as shipped)"
    )
    ap.add_argument(
        "--threads", type=int, default=None, help="threads per worker (default: as shipped)"
    )
    ap.add_argument(
        "--hostile",
        type=int,
        default=0,
        metavar="N",
        help="a second tenant with N clients whose WordPress answers every draft 25 s late "
        "(a fault proxy), sending drafts all along: the measured tenant's throughput beside it",
    )
    ap.add_argument("--database", default="sqlite")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    if args.smoke:
        args.rounds, args.jobs, args.clients = 2, 4, 4

    site = common.load_site()
    info = common.machine(args.database)
    common.print_machine(info)
    rid = common.run_id()
    local = threading.local()

    busy = []  # 429 tenant-busy answers: retried after their Retry-After, as a client would
    with (
        common.Gateway(site, args.database, workers=args.workers, threads=args.threads) as gw,
        Rival(gw, site, args.hostile) as rival,
    ):
        say(
            f"gateway {gw.url} (--workers {args.workers or 'default'}, --threads "
            f"{args.threads or 'default'}), {args.clients} clients"
        )

        def send(s, path: str, body: dict, ok: tuple[int, ...]):
            while True:
                r = s.put(f"{gw.url}{path}", json=body)
                if r.status_code != 429:
                    assert r.status_code in ok, (r.status_code, r.text[:300])
                    return r
                busy.append(path)
                time.sleep(float(r.headers.get("Retry-After", "1")))

        def gateway_job(n: str) -> None:
            if not hasattr(local, "gw"):
                local.gw = gw.session()
            s = local.gw
            job_id = f"{rid}-t{n}"
            send(s, f"/v1/jobs/{job_id}", {"site": "wordpress", "task_version": 1}, (200, 201))
            send(s, f"/v1/jobs/{job_id}/draft", common.draft_body(f"{rid} {n}"), (201,))

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

    rival_answers = dict(rival.answers) if args.hostile else {}
    gw_rate = totals["gateway"][0] / totals["gateway"][1]
    wp_rate = totals["direct"][0] / totals["direct"][1]
    result = {
        "machine": info,
        "clients": args.clients,
        "gateway_workers": args.workers or "default",
        "gateway_threads": args.threads or "default",
        "tenant_busy_answers": len(busy),
        "hostile_clients": args.hostile,
        "hostile_answers": rival_answers,
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
        f"{result['gateway_cpu_ms_per_job']:.1f} ms per job; {len(busy)} answers 429 "
        f"(retried); whole-machine CPU per job "
        f"{result['machine_cpu_ms_per_job']} (all processes, {os.cpu_count()} cores)"
    )
    if args.hostile:
        say(f"beside a hostile tenant of {args.hostile} clients: its answers {rival_answers}")
    common.write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
