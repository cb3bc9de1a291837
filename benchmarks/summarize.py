"""Merge the per-script JSON files of one ``benchmarks/run`` into one results file, print
the figures as a Markdown table with each row's goal and whether it was met, and (``--doc``)
write that table into ``docs/performance.md`` between its two marker lines.

Goals: issue 32's where it set one (overhead, throughput, and the stack floor's ratios: the
gateway to the floor on the same server and client, the floor to issue 18's gunicorn +
``requests`` floor), issue 18's for the rest; a row whose goal issue 32 replaced by a ratio says
so and has none.

    python benchmarks/summarize.py DIR OUT.json [--doc docs/performance.md]
"""

# ruff: noqa: E501 - long report strings
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

DOC_START = "<!-- results: written by benchmarks/run (summarize.py); do not edit by hand -->"
DOC_END = "<!-- end of results -->"


def load(directory: Path, name: str) -> dict | None:
    path = directory / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("directory", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--doc", type=Path, help="the Markdown file whose marked table to replace")
    args = ap.parse_args(argv)
    directory, out = args.directory, args.out
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
            "desk_scale",
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
                "≤ 1.05 (issue 32)",
                o["ratio_median"] <= 1.05,
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
                "— (issue 32: as a ratio to the floor, stack floor rows)",
                None,
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
                "≥ 0.90 (issue 32)",
                tp["ratio"] >= 0.90,
            )
        )
        rows.append(
            (
                "gateway CPU per job",
                "PUT job + PUT draft, gateway workers' CPU from /proc during the throughput run",
                f"{tp['gateway_cpu_ms_per_job']:.1f} ms",
                "— (issue 32: as a ratio to the floor, stack floor rows)",
                None,
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
                "operation lookup by key (hot_sql.operation_by_key, as the gateway runs it)",
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
                f"{m['wordpress_queries_by_kind']}, {m['sweep_s']:.2f} s, "
                f"{m['confirmed_rows']} confirmed",
                "≤ 20 queries, every found row confirmed",
                a["wordpress_queries"] <= 20
                and m["wordpress_queries"] <= 20
                and rec.get("reconciled", False),
            )
        )
    desk = parts["desk_scale"]
    if desk:
        first, last = desk["sizes"][0], desk["sizes"][-1]
        rows.append(
            (
                "desk scale",
                f"review desk's first page ({desk['real']} drafts read back) at {last['jobs']} ÷ at {first['jobs']} drafts",
                f"{desk['ratio']:.2f}; {last['first_page_ms']:.0f} vs {first['first_page_ms']:.0f} ms "
                f"(state filter {last['state_waiting_ms']:.0f} ms, title search {last['title_search_ms']:.0f} ms)",
                f"≤ {desk['goal']} (issue 56)",
                desk["met"],
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
    rows.extend(floor_rows(parts["stack_floor"]))
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
    print(table(rows))
    if args.doc:
        write_doc(args.doc, machine, rows)
    prof = parts["profile"]
    if prof and "per_draft_ms" in prof:
        print(
            f"\nprofile (in-process, per job: PUT job + draft + replay): {prof['per_draft_ms']} ms, "
            f"of which WordPress calls {prof['wordpress_call_ms_per_draft']} ms, SQL "
            f"{prof['sql_execute_ms_per_draft']} ms, other {prof['rest_ms_per_draft']} ms"
        )
    print(f"\nwrote {out}")
    return 0


def floor_rows(fl: dict | None) -> list[tuple]:
    """The stack floor's rows: its figures, then issue 32's four ratio goals, each the median
    over the rounds of the ratio taken within one round (min-max after it)."""
    if not fl:
        return []
    sides, ratios = fl["sides"], fl["ratios"]
    today = "floor-gunicorn-requests"

    def cell(side: str) -> str:
        m = sides[side]
        return (
            f"{side}: CPU per job {m['cpu_ms_per_job']['median']:.2f} ms, replay CPU "
            f"{m['replay_cpu_ms']['median']:.2f} ms, replay median {m['replay_median_ms']['median']:.2f} ms"
        )

    def ratio(pair: str, figure: str) -> tuple[float, str]:
        v = ratios[pair][figure]
        return v[
            "median"
        ], f"{v['median']:.2f} ({v['min']:.2f}–{v['max']:.2f} over {fl['rounds']} rounds)"

    floor = fl["floors"]["floor"]
    stack = f"{floor['server']} + the gateway's WordPress client"
    rows = [
        (
            "stack floor",
            f"the same job and replay, one client, {fl['rounds']} interleaved rounds: the gateway; "
            f"benchmarks/floor_app.py on {stack} (floor); on gunicorn gthread + requests "
            "(issue 18's floor); medians over rounds",
            "; ".join(cell(n) for n in sides),
            "— (figures for the ratios below)",
            None,
        )
    ]
    goals = [
        (
            "gateway CPU per job ÷ floor",
            "gateway ÷ floor",
            "cpu_ms_per_job",
            1.5,
            f"PUT job + PUT draft, server CPU (/proc), floor on {stack}",
        ),
        (
            "replay CPU ÷ floor",
            "gateway ÷ floor",
            "replay_cpu_ms",
            2.0,
            "server CPU per replayed draft ÷ the floor app's stored answer",
        ),
        (
            "replay median ÷ floor",
            "gateway ÷ floor",
            "replay_median_ms",
            1.3,
            "replay wall time seen by the client, median",
        ),
        (
            "floor ÷ issue 18's floor",
            f"floor ÷ {today}",
            "cpu_ms_per_job",
            0.6,
            f"floor CPU per job on {stack} ÷ on gunicorn gthread + requests",
        ),
    ]
    for name, pair, figure, goal, compared in goals:
        if pair in ratios:
            value, text = ratio(pair, figure)
            rows.append((name, compared, text, f"≤ {goal} (issue 32)", value <= goal))
    return rows


def table(rows: list[tuple]) -> str:
    """The Markdown table of ``rows`` (figure, compared, measured, goal, met)."""
    lines = ["| figure | compared | measured | goal | met |", "|---|---|---|---|---|"]
    for f, c, v, g, ok in rows:
        met = "—" if ok is None else "yes" if ok else "**no**"
        lines.append(f"| {f} | {c} | {v} | {g} | {met} |")
    return "\n".join(lines)


def write_doc(path: Path, machine: dict, rows: list[tuple]) -> None:
    """Replace what lies between :data:`DOC_START` and :data:`DOC_END` in ``path`` with this
    run's date, machine and table.

    Raises:
        ValueError: ``path`` lacks either marker line.
    """
    text = path.read_text(encoding="utf-8")
    if DOC_START not in text or DOC_END not in text:
        raise ValueError(f"{path} has no results markers ({DOC_START!r} ... {DOC_END!r})")
    head, rest = text.split(DOC_START, 1)
    tail = rest.split(DOC_END, 1)[1]
    body = (
        f"Run of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: nproc "
        f"{machine.get('nproc')} ({machine.get('cpu')}), PHP workers {machine.get('php_workers')}, "
        f"load average at start {machine.get('loadavg_at_start')}.\n\n{table(rows)}"
    )
    path.write_text(f"{head}{DOC_START}\n{body}\n{DOC_END}{tail}", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
