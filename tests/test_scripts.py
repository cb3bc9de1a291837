"""The setup scripts as a newcomer meets them: one line per step, full logs in a file, the
failing step's last lines and the log's path, ``down.sh --purge`` leaving nothing behind; and
the README's "Running it for real" keeping secrets out of the clone."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import time

import pytest
from support import ROOT
from support import SITE_JSON

STEP = "[wp_test_site] "


def _mariadb(port: str, sql: str) -> subprocess.CompletedProcess:
    client = shutil.which("mariadb") or shutil.which("mysql") or "mariadb"
    return subprocess.run(
        [client, "--no-defaults", "--protocol=TCP", "-h127.0.0.1", f"-P{port}", "-uroot"]
        + ["-N", "-e", sql],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def _database(runtime) -> tuple[str, str]:
    config = (runtime / "wordpress" / "wp-config.php").read_text()
    name = re.search(r"define\( 'DB_NAME', '([^']+)' \);", config).group(1)
    port = re.search(r"define\( 'DB_HOST', '[^:']+:(\d+)' \);", config).group(1)
    return name, port


@pytest.mark.wordpress
def test_up_prints_one_line_per_step_and_down_purge_leaves_nothing(wp_site, tmp_path):
    """A second checkout's test WordPress (its own database): a failing start shows the
    log's last lines and its path; a good start prints one line per step and the URL; and
    ``down.sh --purge`` drops the database and removes the runtime directory."""
    checkout = tmp_path / "checkout"
    shutil.copytree(
        ROOT / "wp_test_site",
        checkout / "wp_test_site",
        ignore=shutil.ignore_patterns(".runtime"),
    )
    (checkout / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "steps.sh", checkout / "scripts")
    runtime = checkout / "wp_test_site" / ".runtime"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WP_TEST_SITE_")}

    def script(name: str, *args: str, **extra) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", str(checkout / "wp_test_site" / name), *args],
            env={**env, **extra},
            capture_output=True,  # also proves no server keeps the caller's pipes open
            text=True,
            timeout=600,
            check=False,
        )

    busy_port = wp_site["url"].rsplit(":", 1)[1]
    try:
        failed = script("up.sh", WP_TEST_SITE_PORT=busy_port)  # the port is taken
        assert failed.returncode != 0 and failed.stdout == ""
        assert f"FAILED (exit {failed.returncode}); the last lines of {runtime}/up.log" in (
            failed.stderr
        )
        assert f"full log: {runtime}/up.log" in failed.stderr
        assert "Traceback" not in failed.stderr

        started = script("up.sh")
        assert started.returncode == 0, started.stderr
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+\n", started.stdout)
        lines = started.stderr.splitlines()
        assert 4 <= len(lines) <= 6 and all(line.startswith(STEP) for line in lines), lines
        assert lines[-1].startswith(STEP + "up in ")
        assert "installing WordPress" in (runtime / "up.log").read_text()
        name, port = _database(runtime)
        web_root = (runtime / "wordpress").resolve().parent  # nginx: outside the checkout
        shared = port == "3306"  # else a private mariadbd whose data lives in .runtime
        if shared:
            assert _mariadb(port, f"SHOW DATABASES LIKE '{name}'").stdout.strip() == name
    finally:
        purged = script("down.sh", "--purge")
    assert purged.returncode == 0, purged.stderr
    assert not runtime.exists() and not web_root.exists()
    running = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True)
    assert str(checkout) not in running.stdout  # no web server, PHP-FPM or mariadbd left
    if shared:
        assert f"dropped database {name}" in purged.stdout
        assert _mariadb(port, f"SHOW DATABASES LIKE '{name}'").stdout.strip() == ""
    # the shared test site of this checkout is untouched
    assert wp_site["url"] in SITE_JSON.read_text()


def test_an_ordinary_test_shares_the_test_site(wp_site, shared_wp_site):
    assert wp_site is shared_wp_site and wp_site["instance"] == ""


@pytest.mark.site_exclusive
def test_a_test_that_changes_the_whole_site_runs_on_a_site_of_its_own(wp_site, shared_wp_site):
    """The second site of the same line (tests/conftest.py ``exclusive_wp_site``): its own
    address and database, the same WordPress version."""
    assert wp_site["instance"] == "exclusive"
    assert wp_site["url"] != shared_wp_site["url"]
    assert wp_site["database"]["name"] != shared_wp_site["database"]["name"]
    assert wp_site["wordpress"]["version"] == shared_wp_site["wordpress"]["version"]


def _running_it_for_real() -> str:
    """Every ``sh`` block of the README's "Running it for real", joined."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Running it for real", 1)[1].split("\n## ", 1)[0]
    return "\n".join(re.findall(r"^```sh\n(.*?)^```", section, re.S | re.M))


def test_readme_keeps_tokens_and_keys_out_of_the_clone():
    """Every file the commands write (``> FILE``) and the ledger lie outside the work tree
    (under ``$GW_DIR``, the walkthrough's directory), written with umask 077 (mode 0600)."""
    commands = _running_it_for_real()
    assert "umask 077" in commands
    uncommented = re.sub(r"\s#\s.*$", "", commands, flags=re.M)
    unquoted = re.sub(r"'[^']*'", "''", uncommented)  # a '>' in quotes (HTML) writes nothing
    written = re.findall(r"(?<![0-9&])>\s*(?!&)([^\s;)]+)", unquoted)  # not 2>..., >&2
    targets = [t for t in written if t != "/dev/null"]
    assert targets and all(t.startswith('"$GW_DIR/') for t in targets), targets
    assert 'GATEWAY_DATABASE_URL="sqlite:///$GW_DIR/' in commands
    assert "$PWD" not in commands and "token.txt" not in commands
    state = re.search(r'^export GW_DIR="(\S+)"', commands, re.MULTILINE).group(1)
    assert not state.startswith(("$PWD", ".", "~/publishing-gateway")), state
    walkthrough = (ROOT / "docs" / "walkthrough.md").read_text()
    assert f'export GW_DIR="{state}"' in walkthrough  # one directory: one ledger, key, token


def test_a_long_step_prints_its_progress_and_its_time(tmp_path):
    """Issue 58: a step of the first command that takes minutes (pip, apt-get) is never
    silent: a line every ``STEP_TICK`` seconds with its time and the log's last line, then
    its total; the ticker holds none of the caller's pipes (``capture_output`` waits for
    them)."""
    script = tmp_path / "long.sh"
    script.write_text(
        f". {ROOT / 'scripts' / 'steps.sh'} {tmp_path / 'log.txt'} 'setup: '\n"
        "timed bash -c 'echo Collecting flask; sleep 1.3; echo Collecting mcp'\n"
        'result "done"\n',
        encoding="utf-8",
    )
    started = time.monotonic()
    done = subprocess.run(
        ["bash", str(script)],
        env={**os.environ, "STEP_TICK": "0.5"},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert time.monotonic() - started < 5, "a sleep kept the caller's pipe open"
    *ticks, last = done.stderr.splitlines()
    assert ticks and all(re.fullmatch(r"setup:   \.\.\. \d+ s: .*", t) for t in ticks), ticks
    assert any(t.endswith(": Collecting flask") for t in ticks), ticks  # what it is doing
    assert re.fullmatch(r"setup:   done in \d+ s", last), last
    assert done.stdout == "done\n"


@pytest.mark.wordpress
def test_up_waiting_for_another_up_says_so(wp_site):
    """Issue 58: an up.sh waiting on another one's lock (a first start installs packages for
    minutes) says so, then how long it waited; the site then is found up."""
    line = os.environ.get("WP_TEST_SITE_WORDPRESS", "bookworm")
    with open(ROOT / "wp_test_site" / f".up-{line}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # as another up.sh holds it
        waiting = subprocess.Popen(
            ["bash", str(ROOT / "wp_test_site" / "up.sh")],
            env={k: v for k, v in os.environ.items() if k != "WP_TEST_SITE_INSTANCE"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        first = waiting.stderr.readline()  # blocks until up.sh has said something
        fcntl.flock(lock, fcntl.LOCK_UN)
    out, rest = waiting.communicate(timeout=120)
    assert first.startswith("[wp_test_site] waiting for another up.sh of this site"), first
    assert re.search(r"^\[wp_test_site\] the other up.sh finished after \d+ s$", rest, re.M)
    assert waiting.returncode == 0 and out == f"already up at {wp_site['url']}\n", rest
