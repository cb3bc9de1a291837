"""Profile ``gateway serve`` itself (one worker, granian, SQLite) with py-spy while a client
sends replays (``--mode replay``: the same draft again, a stored answer) or fresh jobs
(``--mode job``: ``PUT`` job + ``PUT`` draft, WordPress create + read-back).

Where ``profile_overhead.py`` drives the app in process (the Flask test client), this samples
the real server's worker process from outside (``py-spy record --nonblocking --format raw``,
idle threads left out), so granian's request handling, the JSON log line and the multiprocess
metrics are in the picture. The output is the share of the worker's samples under each
function (inclusive: a function's callees count for it), the frames whose own code was running
(self), and the request rate the client reached while sampled.

    pip install py-spy     # needs ptrace rights on the worker (root, or kernel.yama.ptrace_scope=0)
    python benchmarks/profile_server.py --mode replay --seconds 15 [--text out.txt] [--out out.json]

Without py-spy it says so and writes ``{"skipped": ...}`` (exit 0), like profile_overhead.py.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import common
from common import say

# "function (path:line)" -> "function (path)": one entry per function, not per line; the
# site-packages prefix is dropped so the library's module path reads like an import path.
_LINE = re.compile(r":\d+\)$")
_PACKAGES = re.compile(r" \(\S*/site-packages/")


def _frame(text: str) -> str:
    return _PACKAGES.sub(" (", _LINE.sub(")", text))


def aggregate(raw: str) -> dict:
    """``{"samples", "inclusive": [(share, frame)], "self": [(share, frame)]}`` of py-spy's raw
    (collapsed-stack) output: one line per distinct stack, ``frame;frame;... count``. Shares
    are fractions of all samples, largest first."""
    inclusive: collections.Counter = collections.Counter()
    own: collections.Counter = collections.Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [_frame(f) for f in stack.split(";") if f]
        for frame in set(frames):
            inclusive[frame] += n
        if frames:
            own[frames[-1]] += n
    share = lambda c: [(round(v / total, 4), k) for k, v in c.most_common()]  # noqa: E731
    return {"samples": total, "inclusive": share(inclusive), "self": share(own)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=("replay", "job"), default="replay")
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--rate", type=int, default=500, help="samples per second")
    ap.add_argument("--top", type=int, default=60)
    ap.add_argument("--text", help="write the report here too")
    ap.add_argument("--out")
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args(argv)
    if args.smoke:
        args.seconds = 2.0
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        say("py-spy is not installed (pip install py-spy): server profile skipped")
        common.write_json(args.out, {"skipped": "py-spy not installed"})
        return 0
    site = common.load_site()
    info = common.machine("sqlite")
    common.print_machine(info)
    rid = common.run_id()
    workdir = Path(tempfile.mkdtemp(prefix="profile-server-"))
    with common.Gateway(site, "sqlite", workers=1, threads=4) as gw:
        client = gw.session()
        counter = itertools.count()

        def job() -> tuple[str, dict]:
            job_id = f"{rid}-s{next(counter)}"
            answer = client.put(
                f"{gw.url}/v1/jobs/{job_id}", json={"site": "wordpress", "task_version": 1}
            )
            answer.raise_for_status()
            body = common.draft_body(f"{rid} server profile")
            answer = client.put(f"{gw.url}/v1/jobs/{job_id}/draft", json=body)
            if answer.status_code != 201:
                raise SystemExit(f"draft answered {answer.status_code}: {answer.text[:300]}")
            return job_id, body

        replayed = job()

        def one() -> None:
            if args.mode == "job":
                job()
                return
            job_id, body = replayed
            answer = client.put(f"{gw.url}/v1/jobs/{job_id}/draft", json=body)
            if answer.status_code != 200:
                raise SystemExit(f"replay answered {answer.status_code}: {answer.text[:300]}")

        for _ in range(3 if args.mode == "job" else 50):  # warm-up
            one()
        (worker,) = gw.worker_pids()[:1]
        raw = workdir / "raw.txt"
        sampler = subprocess.Popen(
            [spy, "record", "--pid", str(worker), "--format", "raw", "--output", str(raw)]
            + ["--rate", str(args.rate), "--duration", str(int(args.seconds) + 2)]
            + ["--nonblocking"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        stop = threading.Event()
        threading.Timer(1.0 + args.seconds, stop.set).start()
        time.sleep(1.0)  # py-spy attaches
        started, requests_sent = time.perf_counter(), 0
        while not stop.is_set():
            one()
            requests_sent += 1
        elapsed = time.perf_counter() - started
        sampler.wait(timeout=60)
    if not raw.exists():
        say(f"py-spy wrote nothing (ptrace refused?): exit {sampler.returncode}")
        common.write_json(args.out, {"skipped": "py-spy could not sample"})
        return 0
    profile = aggregate(raw.read_text())
    shutil.rmtree(workdir, ignore_errors=True)
    unit = "jobs" if args.mode == "job" else "replays"
    lines = [
        f"gateway serve, one worker, {args.mode}: {requests_sent} {unit} in {elapsed:.1f} s "
        f"({requests_sent / elapsed:.0f}/s), {profile['samples']} samples of the worker",
        "",
        "inclusive (share of the worker's samples under each function):",
        *(f"{share * 100:6.1f}%  {frame}" for share, frame in profile["inclusive"][: args.top]),
        "",
        "self (the frame running when sampled):",
        *(f"{share * 100:6.1f}%  {frame}" for share, frame in profile["self"][:25]),
    ]
    report = "\n".join(lines)
    say(report)
    if args.text:
        Path(args.text).parent.mkdir(parents=True, exist_ok=True)
        Path(args.text).write_text(report + "\n")
    common.write_json(
        args.out,
        {
            "machine": info,
            "mode": args.mode,
            "requests": requests_sent,
            "seconds": round(elapsed, 2),
            "samples": profile["samples"],
            "inclusive": profile["inclusive"][: args.top],
            "self": profile["self"][:25],
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
