"""Batch scale: ``--jobs`` (1,000) jobs of job + one image + draft, ``--clients`` (32)
concurrent clients, a gateway with ``--workers`` (4) workers, on each ledger of
``--databases`` (SQLite and PostgreSQL); then the same jobs replayed; and the same WordPress
work sent directly.

A job through the gateway is what n8n does for an article with a hero image:
``PUT /v1/jobs/{id}``, ``PUT /v1/jobs/{id}/media/hero`` (multipart, 1.4 KB PNG), then
``PUT /v1/jobs/{id}/draft`` with the image as featured media and as a body block
(``{{media:hero}}``). Directly: ``POST /wp/v2/media`` + ``GET ?context=edit``, then
``POST /wp/v2/posts`` (same fields, featured image, image block) + ``GET ?context=edit``, then
the image attached to its post as the gateway does it, ``POST /wp/v2/media/{id}`` ``{"post"}``
+ ``GET ?context=edit``: six WordPress calls. The gateway makes seven: the same six and the
draft verification's read of the image's metadata (``GET /wp/v2/media?include=``).

Per ledger:

- **first pass** (A/B in halves: gateway half 1, direct half 1, direct half 2, gateway half 2,
  so drift in machine load hits both sides alike): errors (non-2xx or exceptions; goal 0),
  p50/p99 per call, jobs/s per side, the gateway's RSS summed over its workers (from
  ``/proc``) before the first job and after the last;
- **duplicates** counted in WordPress: every operation key of the pass (draft and media) is
  looked up through the companion plugin (``GET /publishing-gateway/v1/objects``); an
  object too many for a key is a duplicate (goal 0), a key without object is missing (goal 0);
- **replay**: the gateway is restarted on the same ledger with its site pointed at
  :class:`gateway_tools.fault_proxy.FaultProxy` (which only counts), and every call of
  every job is sent again: all must be answered from the ledger, so the proxy must see
  **0 requests** of any kind (reads included) and every answer must be the stored one
  (``Idempotent-Replayed: true`` on media and draft); p50/p99 of the replayed calls.

    python benchmarks/batch_scale.py [--jobs 1000] [--clients 32] [--workers 4]
                                     [--databases sqlite,postgresql] [--out f]
"""

# ruff: noqa: E501 - long report strings
from __future__ import annotations

import argparse
import collections
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import common
from common import say

from gateway.actions.drafts import image_block
from gateway.actions.drafts import post_fields
from gateway.wordpress import OPERATION_KEY_META
from gateway.wordpress.client import WordPressClient
from gateway.wordpress.identifiers import attachment_slug
from gateway_tools.fault_proxy import FaultProxy


def rss_mib(pids: list[int]) -> float:
    """Sum of VmRSS of ``pids`` (MiB), from /proc."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return round(total / 1024, 1)


def job_body(tag: str) -> dict:
    """The draft of one batch job: the sample draft with the hero image featured and in
    the body."""
    body = common.draft_body(tag)
    body["content"] = "{{media:hero}}\n\n" + body["content"]
    body["featured_media"] = {"slot": "hero"}
    body["body_media"] = ["hero"]
    return body


class Calls:
    """Thread-safe per-call durations and errors."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seconds: dict[str, list[float]] = collections.defaultdict(list)
        self.errors: collections.Counter = collections.Counter()
        self.examples: list[str] = []

    def timed(self, name: str, fn, ok=lambda r: r.status_code < 300):
        t0 = time.perf_counter()
        try:
            r = fn()
        except Exception as e:  # noqa: BLE001 - an error is a figure here, not a crash
            elapsed = time.perf_counter() - t0
            with self.lock:
                self.errors[f"{name} {type(e).__name__}"] += 1
                self.examples.append(f"{name}: {e!r}"[:300])
            return None
        elapsed = time.perf_counter() - t0
        with self.lock:
            self.seconds[name].append(elapsed)
            if not ok(r):
                self.errors[f"{name} {r.status_code}"] += 1
                if len(self.examples) < 5:
                    self.examples.append(f"{name} {r.status_code}: {r.text[:300]}")
                return None
        return r

    def report(self) -> dict:
        calls = {k: common.summary(v) for k, v in sorted(self.seconds.items())}
        return {
            "calls": {
                k: {"n": s["n"], "p50_ms": s["median_ms"], "p99_ms": s["p99_ms"]}
                for k, s in calls.items()
            },
            "errors": sum(self.errors.values()),
            "errors_by_kind": dict(self.errors),
            "error_examples": self.examples[:5],
        }


def one_ledger(site: dict, database: str, args, rid: str, png: bytes) -> dict:
    local = threading.local()
    gw_calls, wp_calls, replay_calls = Calls(), Calls(), Calls()
    job_ids = [f"{rid}-{database[:2]}{n}" for n in range(args.jobs)]
    half = args.jobs // 2
    result: dict = {"database": database, "jobs": args.jobs, "clients": args.clients}
    # Enough threads that every client is served at once, as PHP-FPM serves the direct side.
    threads = max(4, -(-args.clients // args.workers))
    gw = common.Gateway(site, database, workers=args.workers, threads=threads)
    proxy = None
    try:
        gw.start()
        say(f"[{database}] gateway {gw.url} ({args.workers} workers), {args.clients} clients")

        def gateway_job(job_id: str, calls: Calls = gw_calls, replay: bool = False) -> None:
            if getattr(local, "gw_url", None) != gw.url:
                local.gw, local.gw_url = gw.session(), gw.url
            s, base = local.gw, f"{gw.url}/v1/jobs/{job_id}"
            again = (lambda r: r.status_code == 200) if replay else (lambda r: r.status_code < 300)
            stored = (
                (lambda r: r.status_code == 200 and r.headers.get("Idempotent-Replayed") == "true")
                if replay
                else (lambda r: r.status_code == 201)
            )
            if not calls.timed(
                "job", lambda: s.put(base, json={"site": "wordpress", "task_version": 1}), again
            ):
                return
            if not calls.timed(
                "media",
                lambda: s.put(
                    base + "/media/hero",
                    files={"file": (f"batch-{job_id}.png", png)},
                    data={"alt_text": "A hero image", "title": "Hero"},
                ),
                stored,
            ):
                return
            calls.timed("draft", lambda: s.put(base + "/draft", json=job_body(job_id)), stored)

        def direct_job(job_id: str) -> None:
            if not hasattr(local, "wp"):
                local.wp = common.DirectWordPress(site)
            wp, key = local.wp, f"{common.TENANT}-direct/{job_id}/v1"
            name = f"batch-direct-{job_id}.png"
            params = {
                "title": "Hero",
                "alt_text": "A hero image",
                f"meta[{OPERATION_KEY_META}]": f"{key}/media/hero",
                "slug": attachment_slug(name, f"{key}/media/hero"),  # as the gateway does
            }
            media = wp_calls.timed("media_create", lambda: _raw(wp.upload_media, png, name, params))
            if media is None:
                return
            media = media.json()
            if not wp_calls.timed("media_read", lambda: _raw(wp.get_media, media["id"])):
                return
            body = job_body(f"direct {job_id}")
            block = image_block(media["id"], media.get("source_url") or "", "A hero image")
            fields = post_fields(
                f"{key}/draft", body, media["id"], body["content"].replace("{{media:hero}}", block)
            )
            post = wp_calls.timed("post_create", lambda: _raw(wp.create_post, fields))
            if post is None:
                return
            post_id = post.json()["id"]
            if not wp_calls.timed("post_read", lambda: _raw(wp.get_post, post_id)):
                return
            # The gateway attaches the image to its post (gateway/actions/attachments.py): so here.
            if not wp_calls.timed(
                "media_attach", lambda: _raw(wp.update_media, media["id"], {"post": post_id})
            ):
                return
            wp_calls.timed("attach_read", lambda: _raw(wp.get_media, media["id"]))

        with ThreadPoolExecutor(args.clients) as pool:
            # warm-up (not counted): every worker opens its WordPress session, detects the
            # companion plugin, compiles its schemas
            warm = Calls()
            list(
                pool.map(
                    lambda j: gateway_job(j, warm),
                    [f"{rid}-{database[:2]}w{i}" for i in range(args.workers * 2)],
                )
            )
            pids = gw.worker_pids()
            result["rss_mib_start"] = rss_mib(pids)
            walls = {"gateway": 0.0, "direct": 0.0}
            for side, part in (
                ("gateway", job_ids[:half]),
                ("direct", job_ids[:half]),
                ("direct", job_ids[half:]),
                ("gateway", job_ids[half:]),
            ):
                t0 = time.perf_counter()
                list(pool.map(gateway_job if side == "gateway" else direct_job, part))
                walls[side] += time.perf_counter() - t0
            result["rss_mib_end"] = rss_mib(pids)
            result["gateway_workers_pids_unchanged"] = sorted(pids) == sorted(gw.worker_pids())
        result["gateway"] = {
            **gw_calls.report(),
            "jobs_per_s": round(args.jobs / walls["gateway"], 2),
        }
        result["direct"] = {
            **wp_calls.report(),
            "jobs_per_s": round(args.jobs / walls["direct"], 2),
        }
        result["throughput_ratio"] = common.ratio(
            result["gateway"]["jobs_per_s"], result["direct"]["jobs_per_s"]
        )
        result["duplicates"], result["missing"] = count_in_wordpress(site, job_ids)

        # Replay: the same jobs again, WordPress behind a counting proxy.
        gw.stop()
        proxy = FaultProxy(site["url"]).start()
        gw.repoint(proxy.url)
        gw.start(setup=False)
        say(f"[{database}] replay through gateway {gw.url} -> proxy {proxy.url}")
        with ThreadPoolExecutor(args.clients) as pool:
            list(pool.map(lambda j: gateway_job(j, Calls(), True), job_ids[: args.workers * 2]))
            proxy.reset_log()
            t0 = time.perf_counter()
            list(pool.map(lambda j: gateway_job(j, replay_calls, True), job_ids))
            wall = time.perf_counter() - t0
        result["replay"] = {
            **replay_calls.report(),
            "jobs_per_s": round(args.jobs / wall, 2),
            "wordpress_requests": len(proxy.requests),
            "wordpress_writes": sum(1 for r in proxy.requests if r.method != "GET"),
        }
    finally:
        gw.close()
        if proxy is not None:
            proxy.stop()
    return result


def _raw(fn, *a):
    """Call a ``DirectWordPress`` method; returns a response-like object for ``Calls``."""
    return _Answer(fn(*a))


class _Answer:
    status_code = 200
    text = ""

    def __init__(self, body: dict) -> None:
        self.body = body

    def json(self) -> dict:
        return self.body


def count_in_wordpress(site: dict, job_ids: list[str]) -> tuple[int, int]:
    """``(duplicates, missing)`` among the gateway's operation keys of ``job_ids`` (draft and
    media), counted by the companion plugin's lookup in WordPress."""
    author = site["users"]["author"]
    client = WordPressClient(site["url"], author["username"], author["app_password"], 60)
    keys = [f"{common.TENANT}/{j}/v1/{a}" for j in job_ids for a in ("draft", "media/hero")]
    found = collections.Counter(o["operation_key"] for o in client.find_by_operation_keys(keys))
    duplicates = sum(max(0, found[k] - 1) for k in keys)
    missing = sum(1 for k in keys if found[k] == 0)
    return duplicates, missing


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--workers", type=int, default=4, help="gateway (server) workers")
    ap.add_argument("--databases", default="sqlite,postgresql")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    if args.smoke:
        args.jobs, args.clients, args.workers, args.databases = 3, 3, 1, "sqlite"
    databases = args.databases.split(",")
    if "postgresql" in databases and not common.pg_available():
        say("PostgreSQL is not reachable: batch scale measured on SQLite only")
        databases = [d for d in databases if d != "postgresql"] or ["sqlite"]

    site = common.load_site()
    info = common.machine(",".join(databases))
    common.print_machine(info)
    rid = common.run_id()
    png = common.image_bytes()
    ledgers = []
    for database in databases:
        r = one_ledger(site, database, args, rid, png)
        ledgers.append(r)
        g, d, p = r["gateway"], r["direct"], r["replay"]
        say(
            f"batch scale [{database}] {args.jobs} jobs, {args.clients} clients: errors "
            f"{g['errors']} (direct {d['errors']}), duplicates {r['duplicates']}, missing "
            f"{r['missing']}; {g['jobs_per_s']} vs {d['jobs_per_s']} jobs/s direct "
            f"(ratio {r['throughput_ratio']}); RSS {r['rss_mib_start']} -> {r['rss_mib_end']} MiB"
        )
        for side, calls in (("gateway", g), ("direct", d), ("replay", p)):
            say(
                f"  {side:8} "
                + ", ".join(
                    f"{k} p50 {c['p50_ms']:.1f} / p99 {c['p99_ms']:.1f} ms"
                    for k, c in calls["calls"].items()
                )
            )
        say(
            f"  replay: errors {p['errors']}, WordPress requests {p['wordpress_requests']} "
            f"(writes {p['wordpress_writes']}), {p['jobs_per_s']} jobs/s"
        )
        if g["error_examples"] or p["error_examples"]:
            say(f"  examples: {g['error_examples'] + p['error_examples']}")
    result = {
        "machine": info,
        "jobs": args.jobs,
        "clients": args.clients,
        "gateway_workers": args.workers,
        "ledgers": ledgers,
        "goal": "errors 0, duplicates 0, missing 0; replay: errors 0, WordPress requests 0",
    }
    common.write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
