"""Overhead, media overhead and replay: one client, one keep-alive session per side, A/B
interleaved (the order flips every iteration), warm-up first.

A (gateway): ``PUT /v1/jobs/{id}/draft`` on a fresh job (the job is created untimed just
before), which makes WordPress's ``POST /wp/v2/posts`` and the ``context=edit`` read-back.
B (direct):  the same ``POST /wp/v2/posts`` (identical fields, operation-key and Rank Math meta
included) and ``GET /wp/v2/posts/{id}?context=edit`` with ``requests``.

Media: A = ``PUT /v1/jobs/{id}/media/hero`` (multipart, 1.4 KB PNG); B = ``POST /wp/v2/media``
(raw body, same query fields and meta) + ``GET /wp/v2/media/{id}?context=edit``.

Replay: the same draft request again right after A (served from the ledger, no WordPress
call); compared with B's ``POST /wp/v2/posts`` alone.

    python benchmarks/latency.py [--iterations 60] [--warmup 5] [--database sqlite] [--out f]
"""

# ruff: noqa: E501 - long report strings
from __future__ import annotations

import argparse
import sys
import time

import common
from common import say

from gateway.actions.drafts import post_fields
from gateway.wordpress import OPERATION_KEY_META
from gateway.wordpress.identifiers import attachment_slug


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iterations", type=int, default=80)
    ap.add_argument("--media-iterations", type=int, default=None)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--database", default="sqlite", help="sqlite | postgresql | URL")
    ap.add_argument("--smoke", action="store_true", help="a few iterations only")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    if args.smoke:
        args.iterations, args.warmup = 4, 1
    media_iterations = args.media_iterations or max(2, args.iterations // 2)

    site = common.load_site()
    info = common.machine(args.database)
    common.print_machine(info)
    rid = common.run_id()
    direct = common.DirectWordPress(site)
    png = common.image_bytes()
    with common.Gateway(site, args.database, workers=args.workers) as gw:
        client = gw.session()
        say(f"gateway {gw.url} ({args.workers} workers), WordPress {site['url']}")

        def new_job(name: str) -> str:
            job_id = f"{rid}-{name}"
            r = client.put(
                f"{gw.url}/v1/jobs/{job_id}", json={"site": "wordpress", "task_version": 1}
            )
            assert r.status_code in (200, 201), r.text
            return job_id

        def gateway_draft(i: int) -> tuple[float, float]:
            job_id = new_job(f"d{i}")
            body = common.draft_body(f"{rid} gw {i}")
            t0 = time.perf_counter()
            r = client.put(f"{gw.url}/v1/jobs/{job_id}/draft", json=body)
            t1 = time.perf_counter()
            assert r.status_code == 201, (r.status_code, r.text[:300])
            assert r.json()["verification"]["ok"], r.text[:500]
            t2 = time.perf_counter()
            r = client.put(f"{gw.url}/v1/jobs/{job_id}/draft", json=body)
            t3 = time.perf_counter()
            assert r.status_code == 200 and r.headers.get("Idempotent-Replayed") == "true"
            return t1 - t0, t3 - t2

        def direct_draft(i: int) -> tuple[float, float]:
            body = common.draft_body(f"{rid} direct {i}")
            fields = post_fields(
                f"{common.TENANT}-direct/{rid}-d{i}/v1/draft", body, 0, body["content"]
            )
            t0 = time.perf_counter()
            post = direct.create_post(fields)
            t1 = time.perf_counter()
            direct.get_post(post["id"])
            t2 = time.perf_counter()
            return t2 - t0, t1 - t0

        def gateway_media(i: int) -> float:
            job_id = new_job(f"m{i}")
            t0 = time.perf_counter()
            r = client.put(
                f"{gw.url}/v1/jobs/{job_id}/media/hero",
                files={"file": (f"bench-{rid}-gw-{i}.png", png)},
                data={"alt_text": "A hero image", "title": "Hero"},
            )
            t1 = time.perf_counter()
            assert r.status_code == 201, (r.status_code, r.text[:300])
            return t1 - t0

        def direct_media(i: int) -> float:
            key, name = (
                f"{common.TENANT}-direct/{rid}-m{i}/v1/media/hero",
                f"bench-{rid}-direct-{i}.png",
            )
            params = {
                "title": "Hero",
                "alt_text": "A hero image",
                f"meta[{OPERATION_KEY_META}]": key,
                "slug": attachment_slug(name, key),  # as the gateway does
            }
            t0 = time.perf_counter()
            obj = direct.upload_media(png, name, params)
            direct.get_media(obj["id"])
            return time.perf_counter() - t0

        say(f"warm-up: {args.warmup} of each")
        for i in range(args.warmup):
            gateway_draft(-1 - i)
            direct_draft(-1 - i)
            gateway_media(-1 - i)
            direct_media(-1 - i)

        gw_draft, gw_replay, wp_draft, wp_create = [], [], [], []
        say(f"drafts: {args.iterations} interleaved pairs")
        for i in range(args.iterations):
            order = (0, 1) if i % 2 == 0 else (1, 0)
            for side in order:
                if side == 0:
                    a, replay = gateway_draft(i)
                    gw_draft.append(a)
                    gw_replay.append(replay)
                else:
                    b, create = direct_draft(i)
                    wp_draft.append(b)
                    wp_create.append(create)
        gw_media, wp_media = [], []
        say(f"media: {media_iterations} interleaved pairs")
        for i in range(media_iterations):
            order = (0, 1) if i % 2 == 0 else (1, 0)
            for side in order:
                (gw_media if side == 0 else wp_media).append(
                    gateway_media(i) if side == 0 else direct_media(i)
                )

    s = {
        "gateway_draft": common.summary(gw_draft),
        "direct_draft": common.summary(wp_draft),
        "direct_create_only": common.summary(wp_create),
        "gateway_replay": common.summary(gw_replay),
        "gateway_media": common.summary(gw_media),
        "direct_media": common.summary(wp_media),
    }
    result = {
        "machine": info,
        "samples": s,
        "overhead": {
            "ratio_median": common.ratio(
                s["gateway_draft"]["median_ms"], s["direct_draft"]["median_ms"]
            ),
            "ratio_p95": common.ratio(s["gateway_draft"]["p95_ms"], s["direct_draft"]["p95_ms"]),
            "added_ms_median": round(
                s["gateway_draft"]["median_ms"] - s["direct_draft"]["median_ms"], 3
            ),
            "goal": "<= 1.10",
        },
        "media_overhead": {
            "ratio_median": common.ratio(
                s["gateway_media"]["median_ms"], s["direct_media"]["median_ms"]
            ),
            "ratio_p95": common.ratio(s["gateway_media"]["p95_ms"], s["direct_media"]["p95_ms"]),
            "added_ms_median": round(
                s["gateway_media"]["median_ms"] - s["direct_media"]["median_ms"], 3
            ),
            "goal": "<= 1.05",
        },
        "replay": {
            "median_ms": s["gateway_replay"]["median_ms"],
            "p95_ms": s["gateway_replay"]["p95_ms"],
            "ratio_to_direct_create": common.ratio(
                s["gateway_replay"]["median_ms"], s["direct_create_only"]["median_ms"]
            ),
            "goal": "median <= 2 ms; ratio <= 0.1",
        },
    }
    say("")
    for name, label in (
        ("gateway_draft", "gateway draft (create + read-back)"),
        ("direct_draft", "direct POST + GET context=edit"),
        ("direct_create_only", "direct POST /wp/v2/posts only"),
        ("gateway_replay", "gateway replayed draft"),
        ("gateway_media", "gateway media (upload + read-back)"),
        ("direct_media", "direct POST /wp/v2/media + GET"),
    ):
        say(f"  {label:38} {common.fmt(s[name])}")
    o, m, r = result["overhead"], result["media_overhead"], result["replay"]
    say(
        f"overhead        {o['ratio_median']:.3f} (p95 {o['ratio_p95']:.3f}, +{o['added_ms_median']:.2f} ms)  goal <= 1.10"
    )
    say(
        f"media overhead  {m['ratio_median']:.3f} (p95 {m['ratio_p95']:.3f}, +{m['added_ms_median']:.2f} ms)  goal <= 1.05"
    )
    say(
        f"replay          median {r['median_ms']:.2f} ms, ratio {r['ratio_to_direct_create']:.3f}  goal <= 2 ms, <= 0.1"
    )
    common.write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
