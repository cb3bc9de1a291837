"""``README.md`` is executed: the ``sh`` blocks of "Running it for real" marked
``<!-- step: NAME -->`` run with bash, in order, as one terminal would (exports carry over),
against the real test WordPress, on a free port and in a temporary directory. Only the
variables of the "settings" block are substituted. A reader reaches a verified draft; the
placeholder block for one's own site, pasted unchanged, registers nothing; following the README
and then the walkthrough leaves exactly one gateway running; the README stays short."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from support import ROOT
from support import SITE_JSON
from support import TENANT
from support import admin_session
from support import free_port
from test_walkthrough import STEP
from test_walkthrough import Reader
from test_walkthrough import blocks as walkthrough_blocks
from test_walkthrough import check_doctor_text

README = ROOT / "README.md"
STEPS = ("settings", "ledger", "test-site", "serve", "draft", "stop", "own-site")
MAX_LINES = 260


DEFAULT_SITE_JSON = "wp_test_site/.runtime/site.json"


def readme_blocks() -> dict[str, str]:
    """Step name -> shell text of every marked ``sh`` block of "Running it for real"."""
    section = README.read_text(encoding="utf-8").split("## Running it for real", 1)[1]
    section = section.split("\n## ", 1)[0]
    found = STEP.findall(section)
    assert len(re.findall(r"^```sh$", section, re.M)) == len(found), (
        "every sh block of 'Running it for real' needs a '<!-- step: NAME -->' line"
    )
    assert tuple(step for step, _ in found) == STEPS
    # The README names the default line's site; a pass on another WordPress line (the CI
    # matrix, WP_TEST_SITE_WORDPRESS) runs the same blocks against its own site.
    ours = str(SITE_JSON.relative_to(ROOT))
    return {step: text.replace(DEFAULT_SITE_JSON, ours) for step, text in found}


def reader_for(tmp_path: Path, ledger_url: str) -> Reader:
    """A terminal with the settings block's variables set for this test."""
    declared = set(re.findall(r"^export ([A-Z_]+)=", readme_blocks()["settings"], re.M))
    settings = {
        "GW_DIR": str(tmp_path / "gw"),
        "GW_PORT": str(free_port()),
        "GATEWAY_DATABASE_URL": ledger_url,
    }
    assert declared == set(settings), "the settings block and this test name other variables"
    return Reader(tmp_path, settings)


def serving_gateways(port: int) -> list[int]:
    """Pids of the ``gateway serve`` main processes listening on ``port`` (the server's
    workers are forks with the same command line; only processes whose parent is not one
    count)."""
    marker = f"serve\0--port\0{port}\0"
    matching = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if marker in cmdline and "gateway" in cmdline:
            matching[int(entry.name)] = ppid
    return sorted(pid for pid, ppid in matching.items() if ppid not in matching)


QUICK = re.compile(
    r"`bash scripts/test\.sh --quick` runs only what needs (.*?) \(.*?about ([\d,]+) tests", re.S
)
# What each marker the quick path leaves out needs, as the README names it.
NEEDS = {"wordpress": "WordPress", "n8n": "n8n", "browser": "Chromium"}


def quick_selection() -> str:
    """The ``-m`` expression of ``scripts/test.sh --quick``, read from the script."""
    script = (ROOT / "scripts" / "test.sh").read_text(encoding="utf-8")
    branch = script.split('if [ "${1:-}" = "--quick" ]', 1)[1].split("\nfi\n", 1)[0]
    return re.search(r'-m "([^"]+)"', branch).group(1)


def test_readme_counts_the_quick_paths_tests():
    """Issue 58: the README's count for ``scripts/test.sh --quick`` is what ``pytest
    --collect-only`` finds for the script's own selection, within 5 % (a rounded figure that
    a new test or two does not falsify; no wall time is asserted), and the README names what
    each marker it leaves out needs."""
    needs, said = QUICK.search(README.read_text(encoding="utf-8")).groups()
    selection = quick_selection()
    left_out = set(re.findall(r"not (\w+)", selection))
    assert left_out == set(NEEDS), selection
    assert all(NEEDS[marker] in needs for marker in left_out), needs
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GATEWAY_TEST_"))}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
        + ["-n", "0", "-m", selection],
        cwd=ROOT,
        env=env,  # the quick path's: the SQLite ledger, no pass's timing file
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    found = re.search(r"^(\d+)(?:/\d+)? tests? collected", done.stdout, re.M)
    assert found, done.stdout[-2000:] + done.stderr[-2000:]
    collected, said = int(found.group(1)), int(said.replace(",", ""))
    assert abs(collected - said) <= said * 0.05, f"README says about {said}, {collected} collected"


def test_readme_stays_short():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_LINES, f"README.md has {lines} lines; move the details to docs/"


@pytest.mark.wordpress
def test_readme_reaches_a_verified_draft_on_the_test_wordpress(wp_site, ledger_url, tmp_path):
    steps = readme_blocks()
    reader = reader_for(tmp_path, ledger_url)
    outputs = {}
    try:
        for step in ("ledger", "test-site", "serve", "draft"):
            outputs[step] = reader.run(step, steps[step])
        job_id = reader.variable("JOB_ID")
        # pasted again (issue 44): the same job, answered from the ledger, no second post
        again = reader.run("draft-again", steps["draft"])
        pid = int((Path(reader.variable("GW_DIR")) / "serve.pid").read_text())
        reader.run("stop", steps["stop"])
    finally:
        reader.stop_everything()
    token_file = Path(reader.variable("GW_DIR")) / "token"
    assert token_file.stat().st_mode & 0o077 == 0, "the token file is readable by others"
    assert reader.variable("TOKEN") not in outputs["test-site"].stdout + outputs["draft"].stdout
    check_doctor_text(outputs["test-site"].stdout)
    assert outputs["draft"].stdout.strip().splitlines()[-1] == "verified draft: True"
    assert reader.variable("JOB_ID") == job_id
    replies = [json.loads(line) for line in again.stdout.splitlines() if line.startswith("{")]
    assert [r.get("replayed") for r in replies[1:]] == [True, True], again.stdout
    assert again.stdout.strip().splitlines()[-1] == "verified draft: True"
    _check_wordpress(wp_site, job_id)
    _wait_gone(pid)


@pytest.mark.wordpress
def test_readme_then_walkthrough_leaves_one_gateway(wp_site, ledger_url, tmp_path):
    steps = readme_blocks()
    walkthrough_serve = dict(walkthrough_blocks())["serve"]
    reader = reader_for(tmp_path, ledger_url)
    port = int(reader.variable("GW_PORT"))
    try:
        for step in ("ledger", "test-site", "serve"):
            reader.run(step, steps[step])
        first = serving_gateways(port)
        assert len(first) == 1, first
        again = reader.run("walkthrough-serve", walkthrough_serve)
        assert "already runs" in again.stdout, again.stdout
        assert serving_gateways(port) == first
        # a walkthrough with another GW_DIR on the same port is refused, never a second process
        refused = _foreign_serve(reader, tmp_path / "other", walkthrough_serve)
        assert refused.returncode != 0, refused.stdout
        assert "another gateway answers" in refused.stderr, refused.stderr
        assert serving_gateways(port) == first
        reader.run("stop", steps["stop"])
        _wait_gone(first[0])
    finally:
        reader.stop_everything()


@pytest.mark.wordpress
def test_two_gateways_from_the_readme_share_the_machine(wp_site, ledger_url, tmp_path):
    """Issue 58: the README's blocks pasted in two terminals (two ``GW_DIR``, two ``GW_PORT``)
    give two serving gateways, with the remote MCP listener at its default (``Reader`` drops
    conftest's ``GATEWAY_MCP_LISTEN=""``): whichever finds 127.0.0.1:8001 taken serves
    without it and says so in one line; a listener never runs in both."""
    steps = readme_blocks()
    readers = []
    try:
        for name in ("first", "second"):
            (tmp_path / name).mkdir()
            reader = reader_for(tmp_path / name, f"sqlite:///{tmp_path / name / 'ledger.db'}")
            assert "GATEWAY_MCP_LISTEN" not in reader.env  # the listener's default restored
            readers.append(reader)
            for step in ("ledger", "serve"):
                reader.run(step, steps[step])
        pids = [serving_gateways(int(r.variable("GW_PORT"))) for r in readers]
        assert [len(found) for found in pids] == [1, 1], pids
        for reader in readers:
            url = reader.variable("GATEWAY_URL")
            assert requests.get(url + "/healthz", timeout=30).json()["status"] == "ok"
        _wait_for_one_listener(readers, [found[0] for found in pids])
        for reader in readers:
            reader.run("stop", steps["stop"])
        for found in pids:
            _wait_gone(found[0])
    finally:
        for reader in readers:
            reader.stop_everything()


def _wait_for_one_listener(readers: list[Reader], pids: list[int]) -> None:
    """Within 30 s, each gateway either runs a listener (a child process) or has said in one
    line of its ``serve.log`` that it runs none; at most one runs a listener, and when the
    first does, the second said so."""
    deadline = time.monotonic() + 30
    while True:
        said = [_listener_off_lines(r) for r in readers]
        running = [_listener_children(pid) for pid in pids]
        if all(bool(n) != bool(c) for n, c in zip(said, running, strict=True)):
            break
        assert time.monotonic() < deadline, (said, running)
        time.sleep(0.3)
    assert all(n <= 1 for n in said), said  # one line, not one per restart
    if running[0]:  # the first owns the default port: the metadata (RFC 9728) answers there
        metadata = "http://127.0.0.1:8001/.well-known/oauth-protected-resource/mcp"
        deadline = time.monotonic() + 30
        while True:
            try:
                answer = requests.get(metadata, timeout=5)
                break
            except requests.ConnectionError:
                assert time.monotonic() < deadline, "the first gateway's listener never answered"
                time.sleep(0.3)
        assert answer.json()["resource"] == "http://127.0.0.1:8001/mcp"


def _listener_off_lines(reader: Reader) -> int:
    log = (Path(reader.variable("GW_DIR")) / "serve.log").read_text(encoding="utf-8")
    return log.count("the remote MCP listener is off: 127.0.0.1:8001")


def _listener_children(pid: int) -> list[int]:
    """Pids of ``pid``'s live child processes running the remote MCP listener."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, IndexError):
            continue
        if stat[0] != "Z" and int(stat[1]) == pid and b"gateway.remote.listener" in cmdline:
            found.append(int(entry.name))
    return found


def test_readme_placeholder_block_registers_no_site(ledger_url, tmp_path):
    steps = readme_blocks()
    reader = reader_for(tmp_path, ledger_url)
    reader.run("ledger", steps["ledger"])
    pasted = reader.run("own-site", steps["own-site"], check=False)
    assert pasted.returncode != 0, pasted.stdout
    assert "first replace the values marked REPLACE" in pasted.stderr
    listed = reader.run("list", "gateway sites list")  # every tenant's sites
    assert json.loads(listed.stdout) == []


def _foreign_serve(reader: Reader, workdir: Path, text: str):
    """Run ``text`` in a second terminal like ``reader``'s but with its own ``GW_DIR``."""
    workdir.mkdir()
    other = Reader(workdir, {})
    other.state.write_text(
        reader.state.read_text(encoding="utf-8") + f"export GW_DIR='{workdir / 'gw'}'\n",
        encoding="utf-8",
    )
    try:
        return other.run("foreign-serve", text, check=False)
    finally:
        other.stop_everything()


def _wait_gone(pid: int) -> None:
    """Wait until ``pid`` has exited (a zombie not yet reaped by its new parent counts as
    exited); granian's workers take a while to stop on a loaded machine, hence 60 s."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (ProcessLookupError, FileNotFoundError):
            return
        if state == "Z":
            return
        time.sleep(0.2)
    raise AssertionError(f"gateway serve (pid {pid}) still runs after the README's stop step")


def _check_wordpress(site: dict, job_id: str) -> None:
    """What a reader would check in WordPress: one draft titled as sent and one attachment,
    both carrying the README job's operation keys."""
    session = admin_session(site)
    base = site["url"].rstrip("/")
    keys = [f"{TENANT}/{job_id}/v1/draft", f"{TENANT}/{job_id}/v1/media/hero"]
    answer = session.get(
        base + "/wp-json/publishing-gateway/v1/objects", params={"keys": ",".join(keys)}, timeout=30
    )
    answer.raise_for_status()
    objects = answer.json()["objects"]
    assert sorted(o["type"] for o in objects) == ["attachment", "post"], objects
    post_id = next(o["id"] for o in objects if o["type"] == "post")
    post = session.get(
        f"{base}/wp-json/wp/v2/posts/{post_id}", params={"context": "edit"}, timeout=30
    ).json()
    assert post["status"] == "draft" and post["title"]["raw"] == "Hello from the README"
