"""The soak's checker and schedule on made-up histories (no WordPress, no ledger): each finding
the soak reports is planted once and counted, so a soak that prints zeros can be believed; a
seed names one schedule."""

from __future__ import annotations

import random

import pytest
from nemesis import KINDS
from nemesis import schedule
from soak_checker import check
from soak_checker import documented_problems
from soak_checker import left_open
from soak_clients import Answer
from soak_clients import Job

DOCUMENTED = documented_problems()
STEPS = ("job", "media:hero", "media:one", "media:two", "draft")


def finished_job() -> Job:
    return Job("T-1", "soakrun", 0.5, done=STEPS)


def clean_run(job: Job) -> dict:
    """What a run without a finding hands the checker: one object per operation, found by
    key and by title, CONFIRMED in the ledger, each step told 2xx, the job completed."""
    keys, titles = job.keys(), job.titles()
    ids = {step: 100 + n for n, step in enumerate(keys)}
    return {
        "jobs": [job],
        "answers": [Answer(job.job_id, step, 0, 201, request_id=True) for step in STEPS],
        "rows": [(keys[step], "CONFIRMED", ids[step]) for step in keys],
        "open_rows": [],
        "statuses": {job.job_id: "completed"},
        "wordpress": (
            {keys[step]: {ids[step]} for step in keys},
            {titles[step]: {ids[step]} for step in keys},
        ),
        "documented": DOCUMENTED,
    }


def test_a_clean_run_has_no_finding():
    verdict = check(**clean_run(finished_job()))
    assert verdict.ok(), verdict.findings
    assert verdict.counts() == "duplicates=0 lost=0 open_rows=0 stuck=0 bad_5xx=0"


def test_a_second_object_is_a_duplicate_even_without_the_operation_key():
    job = finished_job()
    run = clean_run(job)
    run["wordpress"][1][job.titles()["draft"]].add(999)  # found by its title only
    verdict = check(**run)
    assert (verdict.duplicates, verdict.ok()) == (1, False)


@pytest.mark.parametrize("how", ["gone", "another object"])
def test_an_operation_told_2xx_without_its_object_is_lost(how):
    job = finished_job()
    run = clean_run(job)
    key, title = job.keys()["media:one"], job.titles()["media:one"]
    if how == "gone":
        del run["wordpress"][0][key], run["wordpress"][1][title]
    else:  # the ledger names an object WordPress does not hold for the operation
        run["rows"] = [(k, s, 555 if k == key else r) for k, s, r in run["rows"]]
    verdict = check(**run)
    assert (verdict.lost, verdict.ok()) == (1, False)


def test_an_object_the_title_search_misses_makes_the_checker_fail():
    job = finished_job()
    run = clean_run(job)
    del run["wordpress"][1][job.titles()["media:two"]]
    verdict = check(**run)
    assert (verdict.blind, verdict.ok()) == (1, False)


def test_rows_the_sweep_left_undecided_are_open():
    rows = [
        ("a", "PREPARED", None),
        ("b", "SENT", None),
        ("c", "UNKNOWN", None),  # WordPress holds it: the sweep should have confirmed it
        ("d", "UNKNOWN", None),  # proven absent: waits for the client's same request
        ("e", "CONFIRMED", 7),
    ]
    clean = {"unreachable": 0, "refused": 0}
    assert left_open(rows, {"c": {1}}, clean) == (
        [("a", "PREPARED"), ("b", "SENT"), ("c", "UNKNOWN")],
        1,
    )
    found, absent = left_open(rows, {}, {**clean, "unreachable": 1})  # nothing proven
    assert (("d", "UNKNOWN") in found, absent) == (True, 0)
    job = finished_job()
    verdict = check(**{**clean_run(job), "open_rows": [("a", "PREPARED")]})
    assert (verdict.open_rows["PREPARED"], verdict.ok()) == (1, False)


def test_a_job_not_completed_after_the_re_run_is_stuck():
    job = finished_job()
    verdict = check(**{**clean_run(job), "statuses": {job.job_id: "in_progress"}})
    assert (verdict.stuck, verdict.ok()) == (1, False)


@pytest.mark.parametrize(
    "answer, bad",
    [
        (Answer("T-1", "draft", 0, 503, "ledger-unavailable", True, True, True), False),
        (Answer("T-1", "draft", 0, 503, "outcome-unknown", True, True, True), False),
        (Answer("T-1", "draft", 0, 502, "upstream-refused", False, True, False), False),
        (Answer("T-1", "draft", 0, 500, "internal-server-error", False, True, False), True),
        (Answer("T-1", "draft", 0, 503, "ledger-unavailable", True, False, True), True),
        (Answer("T-1", "draft", 0, 503, "ledger-unavailable", True, True, False), True),
        (Answer("T-1", "draft", 0, 502, "wordpress-refused", False, True, False), True),
        (Answer("T-1", "draft", 0, 502), True),  # not a problem: a proxy's page
    ],
    ids=["ledger", "unknown", "firewall", "500", "no-request-id", "no-retry-after",
         "refused", "page"],
)  # fmt: skip
def test_a_5xx_is_bad_unless_documented_retryable(answer, bad):
    job = finished_job()
    run = clean_run(job)
    verdict = check(**{**run, "answers": [*run["answers"], answer]})
    assert verdict.bad_5xx == int(bad)


def test_the_problem_table_is_read_from_the_documentation():
    assert DOCUMENTED["ledger-unavailable"] == (503, "yes")
    assert DOCUMENTED["internal-server-error"] == (500, "no")
    assert DOCUMENTED["upstream-refused"][0] == 502


def test_a_seed_names_one_schedule_of_every_kind():
    first = schedule(random.Random(7), 600, 3)
    assert first == schedule(random.Random(7), 600, 3)
    assert first != schedule(random.Random(8), 600, 3)
    assert {event.kind for event in first} == set(KINDS)
    assert 150 < len(first) < 330  # a 2.5 s mean gap over 600 s
