"""Stack floor: CPU per job and replay time of the gateway and of its bare web stack.

What the gateway's own web stack costs before the gateway does anything, so that its CPU per
job and replay time can be told apart from Flask, the server and the HTTP client.

Several servers, all started first and then measured in interleaved rounds (the order rotates
every round, so drift in machine load hits every side alike), each with one worker of 4
threads and the same single keep-alive client:

* **gateway**: ``gateway serve`` (ledger, validation, logs, metrics): ``PUT`` job + ``PUT``
  draft (WordPress create + read-back), then the same draft request again (a replay).
* **floor**: ``benchmarks/floor_app.py`` on the server ``gateway serve`` runs on
  (:data:`gateway.server.SERVER`) with the gateway's own WordPress client: the same stack doing
  the same WordPress calls and nothing else (no ledger, no schema, no log line, no metric).
* **floor-gunicorn-requests**: the same app on gunicorn gthread with one ``requests.Session``,
  issue 18's floor, kept so that "floor ≤ 0.6 × today's floor" (issue 32) stays measurable.
* **gateway-before** with ``--baseline DIR``: ``gateway serve`` from another source tree
  (``git archive main | tar -x -C DIR``), for before/after ratios from one interleaved run.
* any ``--variant SERVER:CLIENT`` more (server ``gunicorn`` or ``granian``, client
  ``requests`` or ``gateway``), to compare stacks.

Reports per side and round the server's CPU per job (``/proc``, its process group), the replay's
server CPU and the replay's median wall time seen by the client; per figure the median over
rounds and the ratios gateway ÷ floor and floor ÷ today's floor (min / median / max over the
rounds, each ratio taken within one round).

    python benchmarks/stack_floor.py [--rounds 6] [--jobs 20] [--replays 100]
                                     [--variant granian:requests ...] [--baseline DIR]
                                     [--smoke] [--out f]
"""

# ruff: noqa: E501 - long report strings
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import common
import requests
from common import say
from throughput import cpu_seconds

from gateway import server as gateway_server

HERE = Path(__file__).resolve().parent
TODAY = "floor-gunicorn-requests"  # issue 18's floor: gunicorn gthread + requests.Session


def cpu_ns(pgrp: int) -> int:
    """On-CPU time of every thread of every live process in process group ``pgrp``, in
    nanoseconds (``/proc/PID/task/TID/schedstat``, first field): the 10 ms ticks of
    ``/proc/PID/stat`` are too coarse for a replay's half millisecond. A thread that ends between
    two readings takes its time with it, so the servers keep their threads (see
    :func:`server_command`) and :meth:`Side.measure` falls back to the ticks if a difference
    comes out negative."""
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgrp:
                continue
            for tid in os.listdir(f"/proc/{pid}/task"):
                total += int(open(f"/proc/{pid}/task/{tid}/schedstat").read().split()[0])
        except OSError:
            continue
    return total


class CPU:
    """CPU time of a process group between :meth:`start` and :meth:`ms` (fine, else ticks)."""

    def __init__(self, pgrp: int):
        self.pgrp = pgrp

    def start(self) -> None:
        self.ns0, self.ticks0 = cpu_ns(self.pgrp), cpu_seconds(self.pgrp)

    def ms(self) -> float:
        fine = (cpu_ns(self.pgrp) - self.ns0) / 1e6
        return fine if fine >= 0 else (cpu_seconds(self.pgrp) - self.ticks0) * 1000


def server_command(server: str, port: int, threads: int) -> list[str]:
    """The command serving ``floor_app:app`` on ``server`` with one worker of ``threads``."""
    if server == "gunicorn":
        return [sys.executable, "-m", "gunicorn", "--workers", "1", "--worker-class", "gthread",
                "--threads", str(threads), "--bind", f"127.0.0.1:{port}", "floor_app:app"]  # fmt: skip
    if server == "granian":
        return [sys.executable, "-m", "granian", "--interface", "wsgi", "--workers", "1",
                "--blocking-threads", str(threads), "--blocking-threads-idle-timeout", "600", "--host", "127.0.0.1", "--port", str(port),
                "--no-ws", "floor_app:app"]  # fmt: skip
    raise ValueError(f"unknown server {server!r}")


class FloorApp:
    """``benchmarks/floor_app.py`` on ``server`` (gunicorn gthread or granian WSGI threads),
    calling WordPress through ``client`` (``requests`` or ``gateway``)."""

    def __init__(self, server: str, client: str, threads: int = 4):
        self.server, self.client, self.threads = server, client, threads
        self.process: subprocess.Popen | None = None
        self.url = ""

    def __enter__(self) -> FloorApp:
        port = common.free_port()
        env = {**os.environ, "FLOOR_SITE_JSON": str(common.SITE_JSON), "FLOOR_CLIENT": self.client}
        self.process = subprocess.Popen(
            server_command(self.server, port, self.threads),
            cwd=HERE, env=env, start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                requests.put(self.url + "/v1/jobs/warm-up", json={}, timeout=2)
                return self
            except requests.RequestException:
                time.sleep(0.2)
        raise RuntimeError(f"the floor app did not start on {self.server}")

    def session(self) -> requests.Session:
        return requests.Session()

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=20)

    def __exit__(self, *exc_info) -> None:
        self.close()


class Side:
    """One measured server: its client session and the jobs it has made (for replays)."""

    def __init__(self, name: str, server, replay_path: str):
        self.name, self.server, self.replay_path = name, server, replay_path
        self.client = server.session()
        self.bodies: dict[str, dict] = {}
        self.made = 0

    def job(self, job_id: str) -> None:
        url, client = self.server.url, self.client
        r = client.put(f"{url}/v1/jobs/{job_id}", json={"site": "wordpress", "task_version": 1})
        assert r.status_code in (200, 201), r.text[:300]
        self.bodies[job_id] = common.draft_body(job_id)
        r = client.put(f"{url}/v1/jobs/{job_id}/draft", json=self.bodies[job_id])
        assert r.status_code == 201, (r.status_code, r.text[:300])

    def measure(self, tag: str, jobs: int, replays: int) -> dict:
        """CPU per job (ms), replay CPU (ms) and replay wall times of one round."""
        cpu = CPU(self.server.process.pid)
        ids = [f"{tag}-{self.name}-{self.made + i}" for i in range(jobs)]
        self.made += jobs
        cpu.start()
        for job_id in ids:
            self.job(job_id)
        cpu_ms = cpu.ms() / jobs
        times = []
        cpu.start()
        for k in range(replays):
            job_id = ids[k % jobs]
            t0 = time.perf_counter()
            r = self.client.put(
                f"{self.server.url}/v1/jobs/{job_id}/{self.replay_path}", json=self.bodies[job_id]
            )
            times.append(time.perf_counter() - t0)
            assert r.status_code == 200, r.text[:300]
        return {
            "cpu_ms_per_job": round(cpu_ms, 2),
            "replay_cpu_ms": round(cpu.ms() / replays, 3),
            "replay_median_ms": round(statistics.median(times) * 1000, 3),
        }


FIGURES = ("cpu_ms_per_job", "replay_cpu_ms", "replay_median_ms")


def spread(values: list[float]) -> dict:
    return {
        "min": round(min(values), 3),
        "median": round(statistics.median(values), 3),
        "max": round(max(values), 3),
    }


def ratios(rounds: list[dict], a: str, b: str) -> dict:
    """Per figure, ``a ÷ b`` within each round: min / median / max over the rounds."""
    return {f: spread([r[a][f] / r[b][f] for r in rounds]) for f in FIGURES}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--jobs", type=int, default=20, help="jobs per round and side")
    ap.add_argument("--replays", type=int, default=100, help="replays per round and side")
    ap.add_argument("--variant", action="append", default=[], help="more floors, SERVER:CLIENT")
    ap.add_argument("--no-gateway", action="store_true", help="measure floors only")
    ap.add_argument("--baseline", help="a source tree whose gateway to measure too (before)")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    if args.smoke:
        args.rounds, args.jobs, args.replays = 1, 3, 10
    site = common.load_site()
    info = common.machine("sqlite")
    common.print_machine(info)
    rid = common.run_id()
    floors = {"floor": (gateway_server.SERVER, "gateway"), TODAY: ("gunicorn", "requests")}
    for variant in args.variant:
        server, client = variant.split(":")
        floors[f"floor-{server}-{client}"] = (server, client)
    opened = []
    try:
        sides = []
        if not args.no_gateway:
            gateway = common.Gateway(site, "sqlite", workers=1, threads=4).start()
            opened.append(gateway.close)
            sides.append(Side("gateway", gateway, "draft"))
        if args.baseline:
            env = {"PYTHONPATH": str(Path(args.baseline).resolve())}
            before = common.Gateway(site, "sqlite", workers=1, threads=4, env=env).start()
            opened.append(before.close)
            sides.append(Side("gateway-before", before, "draft"))
        for name, (server, client) in floors.items():
            app = FloorApp(server, client).__enter__()
            opened.append(app.close)
            sides.append(Side(name, app, "replay"))
        for side in sides:  # warm-up: imports, statement shapes, keep-alive connections
            side.measure(f"{rid}-warm", 3, 10)
        rounds = []
        for number in range(args.rounds):
            shift = number % len(sides)
            order = sides[shift:] + sides[:shift]
            if number % 2:
                order.reverse()
            rounds.append(
                {s.name: s.measure(f"{rid}-{number}", args.jobs, args.replays) for s in order}
            )
            say(f"  round {number + 1}: " + "; ".join(
                f"{n} {r['cpu_ms_per_job']:.1f} / {r['replay_cpu_ms']:.2f} / {r['replay_median_ms']:.2f} ms"
                for n, r in rounds[-1].items()))  # fmt: skip
    finally:
        for close in reversed(opened):
            close()
    names = [s.name for s in sides]
    result = {
        "machine": info,
        "rounds": args.rounds,
        "jobs": args.jobs,
        "replays": args.replays,
        "server": gateway_server.SERVER,
        "floors": {n: {"server": s, "client": c} for n, (s, c) in floors.items()},
        "sides": {n: {f: spread([r[n][f] for r in rounds]) for f in FIGURES} for n in names},
        "ratios": {
            f"{a} ÷ {b}": ratios(rounds, a, b)
            for a, b in [("gateway", "floor"), ("floor", TODAY), ("gateway", TODAY)]
            + [("gateway", "gateway-before"), ("gateway-before", TODAY)]
            + [(n, TODAY) for n in names if n not in ("gateway", "floor", TODAY)]
            if a in names and b in names
        },
        "per_round": rounds,
    }
    for name in names:
        m = result["sides"][name]
        say(f"stack floor     {name:28s} CPU per job {m['cpu_ms_per_job']['median']:6.2f} ms, replay CPU "
            f"{m['replay_cpu_ms']['median']:5.2f} ms, replay median {m['replay_median_ms']['median']:5.2f} ms")  # fmt: skip
    for pair, figures in result["ratios"].items():
        say(f"  {pair:40s} " + ", ".join(
            f"{f} {v['min']:.2f}/{v['median']:.2f}/{v['max']:.2f}" for f, v in figures.items()))  # fmt: skip
    common.write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
