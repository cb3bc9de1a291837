"""Stack floor: CPU per job and replay time of the gateway and of its bare web stack.

What the gateway's own web stack costs before the gateway does anything, so that its CPU per
job and replay time can be told apart from Flask, gunicorn and ``requests``.

Two servers, one after the other, each with one gunicorn gthread worker of 4 threads and the
same single keep-alive client:

* **gateway**: ``gateway serve`` (ledger, validation, logs, metrics): ``PUT`` job + ``PUT``
  draft (WordPress create + read-back), then the same draft request again (a replay).
* **floor**: ``benchmarks/floor_app.py``, the same stack doing the same WordPress calls and
  nothing else (no ledger, no schema, no log line, no metric).

Reports per side the server's CPU per job (``/proc``, its process group) and the replay's
median wall time seen by the client; the difference is the gateway's own work.

    python benchmarks/stack_floor.py [--jobs 60] [--replays 300] [--smoke] [--out f]
"""

# ruff: noqa: E501 - long report strings
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import common
import requests
from common import say
from throughput import cpu_seconds

HERE = Path(__file__).resolve().parent


class FloorApp:
    """``benchmarks/floor_app.py`` under gunicorn, as ``gateway serve`` runs (gthread)."""

    def __init__(self, threads: int = 4):
        self.threads = threads
        self.process: subprocess.Popen | None = None
        self.url = ""

    def __enter__(self) -> FloorApp:
        port = common.free_port()
        env = {**os.environ, "FLOOR_SITE_JSON": str(common.SITE_JSON)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "--workers", "1", "--worker-class", "gthread",
             "--threads", str(self.threads), "--bind", f"127.0.0.1:{port}", "floor_app:app"],
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
        raise RuntimeError("the floor app did not start")

    def session(self) -> requests.Session:
        return requests.Session()

    def __exit__(self, *exc_info) -> None:
        self.process.terminate()
        self.process.wait(timeout=20)


def measure(server, jobs: int, replays: int, tag: str, replay_path: str) -> dict:
    """CPU per job and replay wall times of ``server`` (``url``, ``process``, ``session()``)."""
    client = server.session()
    bodies = {}

    def job(i: int) -> None:
        job_id = f"{tag}-{i}"
        r = client.put(
            f"{server.url}/v1/jobs/{job_id}", json={"site": "wordpress", "task_version": 1}
        )
        assert r.status_code in (200, 201), r.text[:300]
        bodies[job_id] = common.draft_body(f"{tag} {i}")
        r = client.put(f"{server.url}/v1/jobs/{job_id}/draft", json=bodies[job_id])
        assert r.status_code == 201, (r.status_code, r.text[:300])

    for i in range(3):  # warm-up: imports, statement shapes, keep-alive connections
        job(-1 - i)
    group = server.process.pid
    cpu0 = cpu_seconds(group)
    for i in range(jobs):
        job(i)
    cpu_ms = (cpu_seconds(group) - cpu0) / jobs * 1000
    times = []
    cpu0 = cpu_seconds(group)
    for k in range(replays):
        job_id = f"{tag}-{k % jobs}"
        t0 = time.perf_counter()
        r = client.put(f"{server.url}/v1/jobs/{job_id}/{replay_path}", json=bodies[job_id])
        times.append(time.perf_counter() - t0)
        assert r.status_code == 200, r.text[:300]
    replay_cpu_ms = (cpu_seconds(group) - cpu0) / replays * 1000
    return {
        "cpu_ms_per_job": round(cpu_ms, 2),
        "replay": common.summary(times),
        "replay_cpu_ms": round(replay_cpu_ms, 2),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=60)
    ap.add_argument("--replays", type=int, default=300)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    if args.smoke:
        args.jobs, args.replays = 3, 10
    site = common.load_site()
    info = common.machine("sqlite")
    common.print_machine(info)
    rid = common.run_id()
    with common.Gateway(site, "sqlite", workers=1) as gw:
        gateway = measure(gw, args.jobs, args.replays, f"{rid}-g", "draft")
    with FloorApp() as floor_app:
        floor = measure(floor_app, args.jobs, args.replays, f"{rid}-f", "replay")
    result = {
        "machine": info,
        "jobs": args.jobs,
        "replays": args.replays,
        "gateway": gateway,
        "floor": floor,
        "gateway_own_cpu_ms_per_job": round(gateway["cpu_ms_per_job"] - floor["cpu_ms_per_job"], 2),
    }
    say(
        f"stack floor     CPU per job: gateway {gateway['cpu_ms_per_job']:.1f} ms, floor "
        f"{floor['cpu_ms_per_job']:.1f} ms (Flask + gunicorn + requests, same WordPress calls); "
        f"replay median: gateway {gateway['replay']['median_ms']:.2f} ms, floor "
        f"{floor['replay']['median_ms']:.2f} ms"
    )
    common.write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
