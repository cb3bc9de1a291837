"""``docs/walkthrough.md`` is executed: every ``sh`` block, in order, with bash, against a real
``gateway serve`` (started by the walkthrough's own commands) and the real test WordPress. Only
the variables of its "settings" block are substituted (the test site's URL and author password
from ``wp_test_site/.runtime/site.json``, a free port, a fresh ledger, a temporary directory);
each step's outcome is checked as a reader would check it: status codes, the replay header, the
problem type, one post and one attachment in WordPress, the served OpenAPI document."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import requests
from openapi_check import Conformance
from support import ROOT
from support import TENANT
from support import admin_session
from support import free_port

WALKTHROUGH = ROOT / "docs" / "walkthrough.md"
STEP = re.compile(r"<!-- step: ([a-z-]+) -->\n```sh\n(.*?)\n```", re.S)
STEPS = (
    "settings",
    "ledger",
    "site",
    "serve",
    "job",
    "media",
    "draft",
    "verify",
    "replay",
    "changed",
    "new-version",
    "ledger-rows",
    "stop",
)
RESPONSE = re.compile(r"^HTTP/[\d.]+ (\d{3})[^\n]*\n(.*?)\r?\n\r?\n(.*?)(?=^HTTP/|\Z)", re.S | re.M)


def blocks() -> list[tuple[str, str]]:
    """``(step, shell text)`` of every ``sh`` block, in document order."""
    text = WALKTHROUGH.read_text(encoding="utf-8")
    found = STEP.findall(text)
    fences = re.findall(r"^```sh$", text, re.M)
    assert len(fences) == len(found), "every sh block needs a '<!-- step: NAME -->' line"
    return found


def responses(output: str) -> list[tuple[int, dict, object]]:
    """The ``curl -i`` responses in ``output``: ``(status, headers, JSON body or text)``."""
    found = []
    for status, head, body in RESPONSE.findall(output):
        headers = {}
        for line in head.splitlines():
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = body
        found.append((int(status), headers, parsed))
    return found


class Reader:
    """Runs the walkthrough's blocks like one terminal: exported variables carry over."""

    def __init__(self, workdir: Path, settings: dict):
        self.state = workdir / "state.sh"
        self.state.write_text(
            "".join(f"export {k}={_quote(v)}\n" for k, v in settings.items()), encoding="utf-8"
        )
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
        self.groups: list[int] = []
        self.workdir = workdir
        self.conformance: Conformance | None = None

    def run(
        self, step: str, text: str, check: bool = True, interactive: bool = False
    ) -> subprocess.CompletedProcess:
        """Run one block; with ``check`` (the default) its exit status must be 0. Stopped at
        its first failing command, unless ``interactive``: then every line runs, as when
        pasted into a terminal (no ``set -e`` there), and the status is the last line's."""
        script = self.workdir / f"{step}.sh"
        script.write_text(
            f"{'' if interactive else 'set -eo pipefail'}\n. {_quote(str(self.state))}\n"
            f"{text}\nstatus=$?\nexport -p > {_quote(str(self.state))}\nexit $status\n",
            encoding="utf-8",
        )
        process = subprocess.Popen(
            ["bash", str(script)],
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # the server it may start stays in this group
        )
        self.groups.append(process.pid)
        out, err = process.communicate(timeout=120)
        done = subprocess.CompletedProcess(process.args, process.returncode, out, err)
        assert done.returncode == 0 or not check, f"step {step} failed:\n{out}\n{err}"
        return done

    def variable(self, name: str) -> str:
        done = subprocess.run(
            ["bash", "-c", f'. {_quote(str(self.state))}; printf %s "${name}"'],
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout

    def stop_everything(self) -> None:
        """End whatever a failed run left behind (the server the walkthrough started)."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            alive = [g for g in self.groups if _signal_group(g, sig)]
            if not alive:
                return
            time.sleep(3)


def _signal_group(group: int, sig: int) -> bool:
    try:
        os.killpg(group, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _quote(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"


@pytest.mark.wordpress
def test_walkthrough_runs_against_the_test_wordpress(wp_site, ledger_url, tmp_path):
    assert shutil.which("curl"), "the walkthrough needs curl (scripts/setup.sh installs it)"
    assert (ROOT / ".venv" / "bin" / "activate").exists(), "run bash scripts/setup.sh first"
    found = blocks()
    assert tuple(step for step, _ in found) == STEPS
    declared = set(re.findall(r"^export ([A-Z_]+)=", found[0][1], re.M))
    author = wp_site["users"]["author"]
    settings = {
        "WP_URL": wp_site["url"],
        "WP_USER": author["username"],
        "WP_APP_PASSWORD": author["app_password"],
        "GW_PORT": str(free_port()),
        "GW_DIR": str(tmp_path / "gw"),
        "GATEWAY_DATABASE_URL": ledger_url,
    }
    assert declared == set(settings), "the settings block and this test name other variables"
    reader = Reader(tmp_path, settings)
    outputs = {}
    try:
        for step, text in found[1:]:
            outputs[step] = reader.run(step, text)
            CHECKS[step](outputs[step], reader)
    finally:
        reader.stop_everything()
    job_id = reader.variable("JOB_ID")
    draft = responses(outputs["draft"].stdout)[0][2]
    _check_wordpress(wp_site, job_id, draft["post_id"])


def test_step_2_pasted_with_its_placeholders_runs_no_token_and_no_doctor(ledger_url, tmp_path):
    """Issue 58: step 2 is pasted into an interactive shell, where ``false`` stops nothing; with
    step 1's placeholders still in, it says so and nothing else runs: no token is made and
    ``doctor`` never reports on another site of the ledger as if this one had passed."""
    found = dict(blocks())
    reader = Reader(tmp_path, {"GW_DIR": str(tmp_path / "gw"), "GATEWAY_DATABASE_URL": ledger_url})
    settings = "\n".join(
        line
        for line in found["settings"].splitlines()
        if not line.startswith(("export GW_DIR=", "export GATEWAY_DATABASE_URL="))
    )
    reader.run("settings", settings)
    reader.run("ledger", found["ledger"])
    pasted = reader.run("site", found["site"], check=False, interactive=True)
    assert pasted.returncode != 0, pasted.stdout
    assert pasted.stderr.strip() == (
        "first replace the values marked <...> in step 1: no site registered"
    ), pasted.stderr
    assert pasted.stdout == ""  # no doctor report
    assert not (tmp_path / "gw" / "token").exists()
    assert reader.variable("TOKEN") == ""


def _only(done, status: int) -> tuple[dict, object]:
    found = responses(done.stdout)
    assert [r[0] for r in found] == [status], done.stdout
    return found[0][1], found[0][2]


def _conforms(reader: Reader, method: str, path: str, status: int, headers: dict, body):
    """Check a response against the OpenAPI document the running server serves."""
    if reader.conformance is None:
        url = reader.variable("GATEWAY_URL")
        reader.conformance = Conformance(requests.get(url + "/openapi.json", timeout=30).json())
    reader.conformance.check(method, path, status, headers.get("content-type", ""), body)


def check_ledger(done, _reader):
    assert "ledger created" in done.stderr, done.stderr


def check_site(done, reader):
    token_file = Path(reader.variable("GW_DIR")) / "token"
    assert token_file.stat().st_mode & 0o077 == 0, "the token file is readable by others"
    assert len(reader.variable("TOKEN")) >= 40
    assert reader.variable("TOKEN") not in done.stdout + done.stderr
    assert not (ROOT / "token.txt").exists()
    check_doctor_text(done.stdout)
    # pasted twice (issue 44): the token kept, not emptied by a refused second create
    token = reader.variable("TOKEN")
    again = reader.run("site-again", dict(blocks())["site"])
    assert reader.variable("TOKEN") == token == token_file.read_text(encoding="utf-8").strip()
    check_doctor_text(again.stdout)


def check_doctor_text(output: str) -> None:
    """``gateway doctor``'s short text: no failed check, and the guarantees of the test site
    (REST with the companion plugin) said from checks that ran."""
    assert not re.search(r"^FAIL ", output, re.M), output
    assert re.search(r"^guarantees: .*lookup_by_operation_key yes, guard yes", output, re.M), output


def check_serve(done, reader):
    assert '"status":"ok"' in done.stdout.replace(" ", "")
    assert re.search(r"OpenAPI 3\.1\.0 \d+ paths", done.stdout), done.stdout


def check_job(done, reader):
    headers, body = _only(done, 201)
    assert body["job_id"] == reader.variable("JOB_ID") and body["status"] == "in_progress"
    _conforms(reader, "PUT", f"/v1/jobs/{body['job_id']}", 201, headers, body)


def check_media(done, reader):
    headers, body = _only(done, 201)
    assert body["state"] == "CONFIRMED" and body["media_id"] > 0, body
    _conforms(reader, "PUT", f"/v1/jobs/{reader.variable('JOB_ID')}/media/hero", 201, headers, body)


def check_draft(done, reader):
    headers, body = _only(done, 201)
    assert body["state"] == "CONFIRMED" and body["verification"]["ok"] is True, body
    assert "idempotent-replayed" not in headers
    _conforms(reader, "PUT", f"/v1/jobs/{reader.variable('JOB_ID')}/draft", 201, headers, body)


def check_verify(done, reader):
    headers, body = _only(done, 200)
    assert body["ok"] is True, body
    job = reader.variable("JOB_ID")
    _conforms(reader, "GET", f"/v1/jobs/{job}/verification", 200, headers, body)


def check_replay(done, reader):
    headers, body = _only(done, 200)
    assert headers.get("idempotent-replayed") == "true", headers
    assert body["replayed"] is True
    _conforms(reader, "PUT", f"/v1/jobs/{reader.variable('JOB_ID')}/draft", 200, headers, body)


def check_changed(done, reader):
    headers, body = _only(done, 422)
    assert headers["content-type"].startswith("application/problem+json")
    assert body["type"].endswith("/operation-key-reused"), body
    _conforms(reader, "PUT", f"/v1/jobs/{reader.variable('JOB_ID')}/draft", 422, headers, body)


def check_new_version(done, reader):
    found = responses(done.stdout)
    assert [r[0] for r in found] == [200, 201], done.stdout
    assert found[0][2]["task_version"] == 2
    assert found[1][2]["verification"]["ok"] is True


def check_ledger_rows(done, reader):
    rows = [line.split() for line in done.stdout.strip().splitlines()]
    job = reader.variable("JOB_ID")
    assert [(r[0], r[1]) for r in rows] == [
        ("CONFIRMED", f"{TENANT}/{job}/v1/media/hero"),
        ("CONFIRMED", f"{TENANT}/{job}/v1/draft"),
        ("CONFIRMED", f"{TENANT}/{job}/v1/attach/hero"),
        ("CONFIRMED", f"{TENANT}/{job}/v2/draft"),
    ], done.stdout
    assert rows[1][2] == rows[3][2], "version 2 must update the same post"
    assert rows[2][2] == rows[0][2], "the image is attached to the post"


def check_stop(done, reader):
    pid = int((Path(reader.variable("GW_DIR")) / "serve.pid").read_text())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    raise AssertionError("gateway serve still runs after the walkthrough's kill")


CHECKS = {
    "ledger": check_ledger,
    "site": check_site,
    "serve": check_serve,
    "job": check_job,
    "media": check_media,
    "draft": check_draft,
    "verify": check_verify,
    "replay": check_replay,
    "changed": check_changed,
    "new-version": check_new_version,
    "ledger-rows": check_ledger_rows,
    "stop": check_stop,
}


def _check_wordpress(site: dict, job_id: str, post_id: int) -> None:
    """What a user would check in WordPress: one draft post and one attachment carry the
    walkthrough's operation keys."""
    session = admin_session(site)
    keys = [f"{TENANT}/{job_id}/v1/draft", f"{TENANT}/{job_id}/v1/media/hero"]
    answer = session.get(
        site["url"].rstrip("/") + "/wp-json/publishing-gateway/v1/objects",
        params={"keys": ",".join(keys)},
        timeout=30,
    )
    answer.raise_for_status()
    objects = answer.json()["objects"]
    assert sorted(o["type"] for o in objects) == ["attachment", "post"], objects
    assert [o["id"] for o in objects if o["type"] == "post"] == [post_id]
    post = session.get(
        f"{site['url'].rstrip('/')}/wp-json/wp/v2/posts/{post_id}",
        params={"context": "edit"},
        timeout=30,
    ).json()
    assert post["status"] == "draft" and post["title"]["raw"] == "Hello again"
