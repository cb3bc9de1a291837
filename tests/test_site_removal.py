"""``gateway sites remove`` and a re-added site (issue 44, item 3): a site with unfinished jobs is
not removed unless forced, a removed site's jobs are refused at their next write, and adding a
name again says what changed. The command line runs in-process (click's runner) against the
ledger of the test's own gateway, whose site points where nothing listens: no WordPress call."""

from __future__ import annotations

import json

from support import SECRET_KEY
from support import TENANT
from support import gateway_cli
from support import new_job_id
from support import problem_slug

PASSWORD_ENV = "GW_TEST_REMOVAL_PASSWORD"


def _cli(ledger_url: str, *args: str, key: bool = True):
    env = {"GATEWAY_DATABASE_URL": ledger_url, PASSWORD_ENV: "pass word"}
    return gateway_cli(list(args), {**env, **({"GATEWAY_SECRET_KEY": SECRET_KEY} if key else {})})


def _add(ledger_url: str, username: str, transport: str = "rest"):
    return _cli(
        ledger_url,
        *("sites", "add", "--tenant", TENANT, "--name", "blog", "--url", "http://127.0.0.1:9"),
        *("--username", username, "--app-password-env", PASSWORD_ENV, "--transport", transport),
        "--no-check",  # nothing listens at port 9
    )


def test_a_site_with_an_unfinished_job_is_removed_only_when_forced(offline_gw, ledger_url):
    job_id = new_job_id()
    assert offline_gw.put_job(job_id).status_code == 201  # in progress on site "blog"
    refused = _cli(ledger_url, "sites", "remove", "--tenant", TENANT, "--name", "blog", key=False)
    assert refused.exit_code == 2, refused.output
    assert f"1 unfinished job(s) ({job_id})" in refused.stderr and "--force" in refused.stderr
    assert offline_gw.put_job(new_job_id()).status_code == 201  # still there

    forced = _cli(
        ledger_url, "sites", "remove", "--tenant", TENANT, "--name", "blog", "--force", key=False
    )
    assert forced.exit_code == 0, forced.output
    removed = json.loads(forced.stdout)
    assert removed["removed"] is True and job_id in removed["unfinished_jobs"]
    assert json.loads(_cli(ledger_url, "sites", "list", key=False).stdout) == []
    answer = offline_gw.put_job(new_job_id())
    assert answer.status_code == 422 and problem_slug(answer) == "site-not-found"
    assert "its sites: none" in answer.get_json()["detail"]

    again = _cli(ledger_url, "sites", "remove", "--tenant", TENANT, "--name", "blog", key=False)
    assert again.exit_code == 2 and "not configured" in again.stderr


def test_re_adding_a_site_says_what_changed(offline_gw, ledger_url):
    same = _add(ledger_url, offline_gw.author["username"])
    assert same.exit_code == 0, same.output
    assert json.loads(same.stdout)["changed"] == {} and "updated" not in same.stderr
    moved = _add(ledger_url, "editor", transport="xmlrpc")
    assert moved.exit_code == 0, moved.output
    assert json.loads(moved.stdout)["changed"] == {
        "username": [offline_gw.author["username"], "editor"],
        "transport": ["rest", "xmlrpc"],
    }
    assert "username 'author' -> 'editor'" in moved.stderr
    assert "transport 'rest' -> 'xmlrpc'" in moved.stderr
