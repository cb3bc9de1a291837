"""Merge the per-script JSON files of one ``benchmarks/run`` into one results file and print
the figures as a Markdown table (the README's performance section is pasted from it).

    python benchmarks/summarize.py DIR OUT.json
"""

# ruff: noqa: E501 - long report strings
from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def load(directory: Path, name: str) -> dict | None:
    path = directory / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    directory, out = Path(argv[0]), Path(argv[1])
    parts = {
        n: load(directory, n)
        for n in (
            "latency",
            "throughput",
            "race",
            "ledger_scale",
            "reconcile",
            "batch_scale",
            "stack_floor",
            "profile",
        )
    }
    rows = []  # (figure, compared, measured, goal, met)
    lat = parts["latency"]
    if lat:
        s = lat["samples"]
        o, m, r = lat["overhead"], lat["media_overhead"], lat["replay"]
        rows.append(
            (
                "overhead",
                "gateway draft create + read-back ÷ direct POST + GET context=edit",
                f"{o['ratio_median']:.2f} (p95 {o['ratio_p95']:.2f}); {s['gateway_draft']['median_ms']:.1f} vs "
                f"{s['direct_draft']['median_ms']:.1f} ms median, +{o['added_ms_median']:.1f} ms",
                "≤ 1.10",
                o["ratio_median"] <= 1.10,
            )
        )
        rows.append(
            (
                "media overhead",
                "gateway image ÷ direct upload + read-back",
                f"{m['ratio_median']:.2f} (p95 {m['ratio_p95']:.2f}); {s['gateway_media']['median_ms']:.1f} vs "
                f"{s['direct_media']['median_ms']:.1f} ms median",
                "≤ 1.05",
                m["ratio_median"] <= 1.05,
            )
        )
        rows.append(
            (
                "replay",
                "replayed draft (ledger only) ÷ direct create",
                f"median {r['median_ms']:.2f} ms (p95 {r['p95_ms']:.2f}); ratio {r['ratio_to_direct_create']:.3f}",
                "≤ 2 ms; ≤ 0.1",
                r["median_ms"] <= 2 and r["ratio_to_direct_create"] <= 0.1,
            )
        )
    race = parts["race"]
    if race:
        writes = [x["wordpress_writes"] for x in race["rounds"]]
        statuses: dict[str, int] = {}
        for x in race["rounds"]:
            for k, v in x["statuses"].items():
                statuses[k] = statuses.get(k, 0) + v
        rows.append(
            (
                "race",
                f"{race['concurrency']} identical requests × {len(writes)} rounds, "
                f"{race['gateway_workers']} workers, {race['machine']['database']}",
                f"WordPress writes per round {writes}; 5xx {race['total_5xx']}; statuses {statuses}; "
                f"p50 {race['latency']['median_ms']:.0f} ms, p99 {race['latency']['p99_ms']:.0f} ms",
                "1 write, 0 × 5xx",
                max(writes) == 1 and min(writes) == 1 and race["total_5xx"] == 0,
            )
        )
    tp = parts["throughput"]
    if tp:
        rows.append(
            (
                "throughput",
                f"jobs/s through the gateway ÷ direct, {tp['clients']} clients",
                f"{tp['ratio']:.2f} ({tp['gateway_jobs_per_s']:.1f} vs {tp['direct_jobs_per_s']:.1f} jobs/s)",
                "≥ 0.95",
                tp["ratio"] >= 0.95,
            )
        )
        rows.append(
            (
                "gateway CPU per job",
                "PUT job + PUT draft, gateway workers' CPU from /proc during the throughput run",
                f"{tp['gateway_cpu_ms_per_job']:.1f} ms",
                "≤ 3 ms",
                tp["gateway_cpu_ms_per_job"] <= 3,
            )
        )
    ls = parts["ledger_scale"]
    if ls:
        cells = "; ".join(
            f"{e['database']} {e['rows']:,}: p50 {e['lookup_p50_ms']:.2f} / p99 {e['lookup_p99_ms']:.2f} ms, "
            f"RSS {e['rss_mb']:.0f} MiB"
            for e in ls["sizes"]
        )
        rows.append(
            (
                "ledger scale",
                "operation lookup by key",
                cells,
                "p99 ≤ 1 ms, flat; RSS flat",
                ls["worst_p99_ms"] <= 1.0,
            )
        )
    rec = parts["reconcile"]
    if rec:
        a, m = rec["all_absent"], rec["mixed"]
        rows.append(
            (
                "reconcile",
                f"{a['rows']} UNKNOWN operations, one sweep",
                f"all absent: {a['wordpress_queries']} queries {a['wordpress_queries_by_kind']}, "
                f"{a['sweep_s']:.2f} s; {m['found_in_wordpress']} found: {m['wordpress_queries']} queries "
                f"{m['wordpress_queries_by_kind']}, {m['sweep_s']:.2f} s",
                "≤ 20 queries",
                a["wordpress_queries"] <= 20 and m["wordpress_queries"] <= 20,
            )
        )
    bs = parts["batch_scale"]
    for led in (bs or {}).get("ledgers", []):
        g, d, p = led["gateway"], led["direct"], led["replay"]

        def calls(side: dict) -> str:
            return ", ".join(
                f"{k} {c['p50_ms']:.0f}/{c['p99_ms']:.0f}" for k, c in side["calls"].items()
            )

        rows.append(
            (
                f"batch scale ({led['database']})",
                f"{led['jobs']} jobs (job + image + draft), {led['clients']} clients, "
                f"{bs['gateway_workers']} workers; replayed; same jobs direct",
                f"errors {g['errors']}, duplicates {led['duplicates']}, missing {led['missing']}; "
                f"{g['jobs_per_s']:.1f} vs {d['jobs_per_s']:.1f} jobs/s direct (ratio "
                f"{led['throughput_ratio']:.2f}); p50/p99 ms gateway {calls(g)}; direct {calls(d)}; "
                f"RSS (workers) {led['rss_mib_start']:.0f} → {led['rss_mib_end']:.0f} MiB; replay: "
                f"errors {p['errors']}, WordPress requests {p['wordpress_requests']}, {calls(p)}",
                "0 errors, 0 duplicates; replay 0 WordPress writes",
                g["errors"] == 0
                and led["duplicates"] == 0
                and led["missing"] == 0
                and p["errors"] == 0
                and p["wordpress_writes"] == 0,
            )
        )
    fl = parts["stack_floor"]
    if fl:
        g, f = fl["gateway"], fl["floor"]
        rows.append(
            (
                "stack floor",
                "the same job and replay, one client, on the gateway and on a bare Flask + "
                "gunicorn + requests app making the same WordPress calls (benchmarks/floor_app.py)",
                f"CPU per job: gateway {g['cpu_ms_per_job']:.1f} ms, floor {f['cpu_ms_per_job']:.1f} ms "
                f"(gateway's own work {fl['gateway_own_cpu_ms_per_job']:.1f} ms); replay median: gateway "
                f"{g['replay']['median_ms']:.2f} ms, floor {f['replay']['median_ms']:.2f} ms",
                "no goal: it says how far the CPU (≤ 3 ms) and replay (≤ 2 ms) goals can go",
                None,
            )
        )
    machine = next((p["machine"] for p in parts.values() if p and "machine" in p), {})
    result = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine,
        "table": [
            {
                "figure": f,
                "compared": c,
                "measured": v,
                "goal": g,
                "met": None if ok is None else bool(ok),
            }
            for f, c, v, g, ok in rows
        ],
        "parts": parts,
    }
    out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    print(
        f"\nmachine: nproc {machine.get('nproc')} ({machine.get('cpu')}), PHP workers "
        f"{machine.get('php_workers')}, load avg at start {machine.get('loadavg_at_start')}\n"
    )
    print("| figure | compared | measured | goal | met |")
    print("|---|---|---|---|---|")
    for f, c, v, g, ok in rows:
        met = "—" if ok is None else "yes" if ok else "**no**"
        print(f"| {f} | {c} | {v} | {g} | {met} |")
    prof = parts["profile"]
    if prof and "per_draft_ms" in prof:
        print(
            f"\nprofile (in-process, per job: PUT job + draft + replay): {prof['per_draft_ms']} ms, "
            f"of which WordPress calls {prof['wordpress_call_ms_per_draft']} ms, SQL "
            f"{prof['sql_execute_ms_per_draft']} ms, other {prof['rest_ms_per_draft']} ms"
        )
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
