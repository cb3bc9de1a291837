"""The soak's checker: what WordPress holds, against the ledger and the clients' answers.

It counts, per operation (a job's image slot or its draft), the WordPress objects carrying its
operation key (the companion plugin's lookup) **or** its unique title (WordPress's own search,
which does not trust the key's meta), and reads the ledger's rows itself:

* **duplicates**: an operation with more than one object in WordPress;
* **lost**: an operation a client was told 2xx for, or that the ledger holds CONFIRMED, with
  no object in WordPress, or whose ledger ``remote_id`` is not the object WordPress holds;
* **open rows**: ledger rows the heal's sweep left ``PREPARED`` or ``SENT``, or ``UNKNOWN``
  without proving the object absent (:func:`left_open`);
* **stuck**: jobs not ``completed`` after the heal's re-run of every unfinished workflow;
* **bad 5xx**: any 5xx answer but the documented retryable problems of docs/api.md (each with
  ``X-Request-Id``, and ``Retry-After`` when retryable), and 502 ``upstream-refused``, the
  documented answer to the nemesis's firewall page.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

import psycopg2
from support import ROOT
from support import admin_session

__all__ = [
    "Verdict",
    "check",
    "documented_problems",
    "ledger_rows",
    "left_open",
    "objects_by_key",
    "objects_by_title",
]

_PROBLEM_ROW = re.compile(r"^\| `([a-z0-9-]+)` \| (\d{3}) \| ([^|]+?) \|")


def documented_problems(api_md: Path = ROOT / "docs" / "api.md") -> dict:
    """slug -> (status, retryable column) of docs/api.md's problem table."""
    found = {}
    for line in api_md.read_text().splitlines():
        if match := _PROBLEM_ROW.match(line):
            found[match[1]] = (int(match[2]), match[3].strip())
    return found


def allowed_5xx(answer, documented: dict) -> bool:
    """Whether a 5xx ``answer`` is one the contract allows under faults."""
    status, retryable = documented.get(answer.slug, (None, None))
    if status != answer.status or not answer.request_id:
        return False
    if answer.slug == "upstream-refused":  # a page in front of WordPress: a firewall's 403
        return True
    return retryable == "yes" and answer.retryable is True and answer.retry_after


def ledger_rows(url: str) -> list:
    """(operation_key, state, remote_id) of every operation row of the private ledger."""
    with psycopg2.connect(url) as connection, connection.cursor() as cursor:
        cursor.execute("SELECT operation_key, state, remote_id FROM operation")
        rows = cursor.fetchall()
    connection.close()
    return rows


def objects_by_key(site: dict, keys: list) -> dict:
    """{operation key: {object ids}}: the companion plugin's lookup of ``keys`` (100 a call),
    as the admin user."""
    session = admin_session(site)
    found: dict = {}
    for start in range(0, len(keys), 100):
        answer = session.get(
            site["url"].rstrip("/") + "/wp-json/publishing-gateway/v1/objects",
            params={"keys": ",".join(keys[start : start + 100])},
            timeout=60,
        )
        answer.raise_for_status()
        for item in answer.json()["objects"]:
            found.setdefault(item["operation_key"], set()).add(item["id"])
    return found


def objects_by_title(site: dict, run: str) -> dict:
    """{title: {object ids}}: WordPress's own search of posts (any status) and attachments
    for the run's token ``run`` (100 a page), as the admin user: no operation key trusted."""
    session = admin_session(site)
    found: dict = {}
    # ordered by id: a search's default order (relevance) has ties, which pages may split
    query = {"search": run, "context": "edit", "per_page": 100, "orderby": "id", "order": "asc"}
    for kind, extra in (("posts", {"status": "any"}), ("media", {})):
        page, pages = 1, 1
        while page <= pages:
            answer = session.get(
                site["url"].rstrip("/") + f"/wp-json/wp/v2/{kind}",
                params={**query, "page": page, **extra},
                timeout=60,
            )
            answer.raise_for_status()
            pages = int(answer.headers.get("X-WP-TotalPages", "1"))
            for item in answer.json():
                found.setdefault(item["title"]["raw"], set()).add(item["id"])
            page += 1
    return found


def left_open(rows: list, held: dict, sweep: dict) -> tuple[list, int]:
    """(rows the heal's sweep left open, rows it proved absent). ``rows``: the ledger right
    after the sweep (:func:`ledger_rows`); ``held``: :func:`objects_by_key` of its UNKNOWN
    rows; ``sweep``: the sweep's counts. Open: PREPARED or SENT; UNKNOWN while WordPress holds
    the object; UNKNOWN at all when the sweep could not ask WordPress or prove an object
    (``unreachable``, ``refused``). An UNKNOWN row proven absent waits, by design, for the
    client's same request (docs/api.md, "Recover"): not open."""
    unproven = sweep.get("unreachable", 0) + sweep.get("refused", 0)
    found, absent = [], 0
    for key, state, _ in rows:
        if state in ("PREPARED", "SENT") or (state == "UNKNOWN" and (key in held or unproven)):
            found.append((key, state))
        elif state == "UNKNOWN":
            absent += 1
    return found, absent


@dataclass
class Verdict:
    """The counts of a run and one line per finding (:attr:`findings`)."""

    duplicates: int = 0
    lost: int = 0
    open_rows: Counter = field(default_factory=Counter)
    stuck: int = 0
    bad_5xx: int = 0
    blind: int = 0  # objects found by key the title search did not find: a checker fault
    findings: list = field(default_factory=list)

    def ok(self) -> bool:
        found = self.duplicates or self.lost or self.open_rows or self.stuck or self.bad_5xx
        return not (found or self.blind)

    def counts(self) -> str:
        rows = sum(self.open_rows.values())
        detail = f" ({', '.join(f'{n} {s}' for s, n in sorted(self.open_rows.items()))})"
        return (
            f"duplicates={self.duplicates} lost={self.lost} "
            f"open_rows={rows}{detail if rows else ''} stuck={self.stuck} bad_5xx={self.bad_5xx}"
            + (f" checker_blind={self.blind}" if self.blind else "")
        )


def check(jobs, answers, rows, open_rows, statuses, wordpress, documented) -> Verdict:
    """The verdict of a run: ``jobs`` (soak_clients.Job), every ``answers``
    (soak_clients.Answer), the ledger ``rows`` after the re-run (:func:`ledger_rows`), the
    ``open_rows`` the heal's sweep left ((key, state): :func:`left_open`), ``statuses``
    ({job id: status} from GET /v1/jobs after the re-run), ``wordpress``
    (:func:`objects_by_key` of every key, :func:`objects_by_title` of the run) and
    ``documented`` (:func:`documented_problems`)."""
    verdict = Verdict()
    by_key, by_title = wordpress
    ledger = {key: (state, remote_id) for key, state, remote_id in rows}
    told_ok = {(a.job_id, a.step) for a in answers if a.status and 200 <= a.status < 300}
    for job in jobs:
        titles = job.titles()
        for step, key in job.keys().items():
            title = titles[step]
            if by_key.get(key, set()) - by_title.get(title, set()):
                verdict.blind += 1  # the title search would miss a duplicate: the checker's own
                verdict.findings.append(f"checker blind: {key} in WordPress, not as {title!r}")
            objects = by_key.get(key, set()) | by_title.get(title, set())
            state, remote_id = ledger.get(key, (None, None))
            if len(objects) > 1:
                verdict.duplicates += 1
                verdict.findings.append(f"duplicate: {key} ({title}): objects {sorted(objects)}")
            confirmed = (job.job_id, step) in told_ok or state == "CONFIRMED"
            if confirmed and (not objects or (remote_id and remote_id not in objects)):
                verdict.lost += 1
                verdict.findings.append(
                    f"lost: {key}: ledger {state} {remote_id}, WordPress {sorted(objects)}"
                )
    for key, state in open_rows:
        verdict.open_rows[state] += 1
        verdict.findings.append(f"open after the sweep: {key} {state}")
    last = {a.job_id: a for a in answers}
    for job in jobs:
        status = statuses.get(job.job_id)
        if status != "completed" or not job.finished():
            verdict.stuck += 1
            verdict.findings.append(
                f"stuck: {job.job_id} {status}, steps done {job.done}, last {last.get(job.job_id)}"
            )
    for answer in answers:
        if answer.status and answer.status >= 500 and not allowed_5xx(answer, documented):
            verdict.bad_5xx += 1
            verdict.findings.append(f"bad 5xx: {answer} request id {answer.request_id}")
    return verdict
