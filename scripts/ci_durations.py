"""Append each pytest pass's slowest tests to the CI's durations report.

Usage: ``python scripts/ci_durations.py REPORT NAME=TIMES [NAME=TIMES ...]``. Each ``TIMES`` file
is what ``tests/timings.py`` wrote for one pass (``wall<TAB>cpu<TAB>nodeid`` lines, seconds).
For each pass it appends the pass's totals (tests, summed wall, summed CPU) and its 30 slowest
tests by wall time and by CPU time to ``REPORT`` (``.logs/ci-durations.txt``). A missing or empty
file is reported as such, not as an error: a pass that failed early still gets its line.
"""

from __future__ import annotations

import sys
from pathlib import Path

SLOWEST = 30


def _rows(path: Path) -> list[tuple[float, float, str]]:
    rows = []
    for line in path.read_text().splitlines():
        wall, cpu, nodeid = line.split("\t", 2)
        rows.append((float(wall), float(cpu), nodeid))
    return rows


def _table(title: str, rows: list[tuple[float, float, str]]) -> list[str]:
    lines = [f"  {title}", "    wall s   cpu s  test"]
    lines += [f"    {wall:6.1f}  {cpu:6.1f}  {nodeid}" for wall, cpu, nodeid in rows]
    return lines


def report(name: str, path: Path) -> list[str]:
    """The lines for one pass: its totals and its slowest tests (by wall, then by CPU)."""
    if not path.is_file() or not path.stat().st_size:
        return [f"pass {name}: no per-test times ({path} missing or empty)"]
    rows = _rows(path)
    lines = [
        f"pass {name}: {len(rows)} tests, {sum(r[0] for r in rows):.0f} s wall summed over "
        f"workers, {sum(r[1] for r in rows):.0f} s CPU (pytest and the processes it reaped)"
    ]
    lines += _table(f"{SLOWEST} slowest by wall", sorted(rows, key=lambda r: -r[0])[:SLOWEST])
    lines += _table(f"{SLOWEST} slowest by CPU", sorted(rows, key=lambda r: -r[1])[:SLOWEST])
    return lines


def main(argv: list[str]) -> int:
    target = Path(argv[0])
    lines = []
    for pair in argv[1:]:
        name, _, times = pair.partition("=")
        lines += ["", *report(name, Path(times))]
    with open(target, "a") as out:
        out.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
