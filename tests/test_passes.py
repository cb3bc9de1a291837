"""The CI passes' selection (``tests/passes.py``) stays complete: every module its tables name
exists, a test that races writers or checks SQL is in the PostgreSQL pass whatever its module's
entry says, and the modules that are about the ledger's SQL or WordPress's answers are wholly in
their pass. No WordPress, no ledger."""

from __future__ import annotations

import ast
import types
from pathlib import Path

import passes
import pytest

TESTS = Path(__file__).parent


# Sample test bodies, never run: passes.races_writers reads their source.
def _with_a_pool():
    with ThreadPoolExecutor(4) as pool:  # noqa: F821
        pool.submit(print)


def _with_a_barrier():
    threading.Barrier(2)  # noqa: F821


def _with_raw_sql():
    database.execute_sql("SELECT 1")  # noqa: F821


def _with_served_processes():
    servers.start(workers=2)  # noqa: F821


def _plain():
    assert 1 + 1 == 2


def _item(module: str, function, fixtures=()) -> types.SimpleNamespace:
    """A stand-in for a collected item of ``tests/<module>.py`` whose test is ``function``."""
    return types.SimpleNamespace(
        path=TESTS / f"{module}.py", function=function, fixturenames=list(fixtures)
    )


def test_every_module_the_tables_name_exists():
    for table in (passes.NOT_DIALECT, passes.NOT_WORDPRESS_VERSION):
        missing = sorted(m for m in table if not (TESTS / f"{m}.py").is_file())
        assert not missing, f"tests/passes.py names modules that do not exist: {missing}"
        assert all(reason.strip() for reason in table.values()), "a module without a reason"


@pytest.mark.parametrize(
    "racing", [_with_a_pool, _with_a_barrier, _with_raw_sql, _with_served_processes]
)
def test_a_test_that_races_writers_runs_in_the_postgresql_pass_whatever_its_module(racing):
    assert "dialect" in passes.classify(_item("test_logic", racing), uses_wordpress=False)
    assert "dialect" not in passes.classify(_item("test_logic", _plain), uses_wordpress=False)


def test_a_served_gateway_of_several_processes_puts_a_test_in_the_postgresql_pass():
    item = _item("test_terms", _plain, ["gateway_server"])
    assert "dialect" in passes.classify(item, uses_wordpress=True)


def test_a_new_module_runs_in_both_matrix_passes_until_someone_says_why_not():
    item = _item("test_not_yet_classified", _plain)
    assert passes.classify(item, uses_wordpress=True) == ["dialect", "wordpress_version"]
    assert passes.classify(item, uses_wordpress=False) == ["dialect"]


@pytest.mark.parametrize(
    ("module", "mark"),
    [
        ("test_concurrency", "dialect"),
        ("test_transitions", "dialect"),
        ("test_migrations", "dialect"),
        ("test_statements", "dialect"),
        ("test_ledger_faults", "dialect"),
        ("test_crash_walk", "dialect"),
        ("test_main_job", "wordpress_version"),
        ("test_faults", "wordpress_version"),
        ("test_action_recovery", "wordpress_version"),
        ("test_transports", "wordpress_version"),
        ("test_doctor", "wordpress_version"),
    ],
)
def test_the_modules_about_the_axis_of_a_pass_are_wholly_in_it(module, mark):
    excluded = passes.NOT_DIALECT if mark == "dialect" else passes.NOT_WORDPRESS_VERSION
    assert module not in excluded, f"{module} is what the {mark} pass is for"


def test_a_test_that_drives_chromium_is_marked_browser():
    item = _item("test_review_page", _plain, ["wp_site", "browser"])
    assert "browser" in passes.classify(item, uses_wordpress=True)
    assert "browser" not in passes.classify(_item("test_logic", _plain), uses_wordpress=False)


def test_every_function_that_starts_chromium_is_a_browser_fixture():
    """Issue 58: a browser test outside the marker would fail ``scripts/test.sh --quick`` on a
    fresh clone, which installs no Chromium."""
    starters = set()
    for path in TESTS.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and any(
                isinstance(call, ast.Call) and getattr(call.func, "id", "") == "chromium_driver"
                for call in ast.walk(node)
            ):
                starters.add(node.name)
    assert starters and starters <= passes.BROWSER_FIXTURES, starters
