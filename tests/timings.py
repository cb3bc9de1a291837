"""Per-test wall and CPU time, written for the CI's durations report (``scripts/test.sh``).

With ``GATEWAY_TEST_TIMES`` naming a file, every test's wall time (setup, call and teardown,
seconds, from pytest's own reports) and CPU time (seconds: user + system of the pytest process
and of the child processes it started and reaped during the test, ``resource.getrusage``) are
written there at the end of the session as tab-separated lines ``wall cpu nodeid``, slowest
first. Under pytest-xdist each worker measures its own tests and the controller writes the file
(the CPU figure travels in the report's ``user_properties``).

Not counted: the processes a test did not start (WordPress's PHP-FPM and MariaDB, n8n started by
a session fixture) and a served gateway that a module-scoped fixture reaps later - its CPU lands
on the test during which it was reaped.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

import pytest

_PROPERTY = "cpu seconds"
_CPU = pytest.StashKey[dict]()  # item -> {"setup" | "call" | "teardown": CPU seconds}


def _cpu_now() -> float:
    """CPU seconds (user + system) of this process and its reaped children so far."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _measured(item, when: str):
    started = _cpu_now()
    yield
    item.stash.setdefault(_CPU, {})[when] = _cpu_now() - started


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    yield from _measured(item, "setup")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    yield from _measured(item, "call")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    yield from _measured(item, "teardown")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    spent = item.stash.get(_CPU, {}).get(call.when)
    if spent is not None:
        outcome.get_result().user_properties.append((_PROPERTY, round(spent, 3)))


class _Collector:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.times: dict[str, list[float]] = {}

    def pytest_runtest_logreport(self, report):
        wall_cpu = self.times.setdefault(report.nodeid, [0.0, 0.0])
        wall_cpu[0] += report.duration
        wall_cpu[1] += sum(v for name, v in report.user_properties if name == _PROPERTY)

    def pytest_sessionfinish(self, session):
        rows = sorted(self.times.items(), key=lambda row: -row[1][0])
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "w") as out:
            for nodeid, (wall, cpu) in rows:
                out.write(f"{wall:.2f}\t{cpu:.2f}\t{nodeid}\n")


def pytest_configure(config):
    target = os.environ.get("GATEWAY_TEST_TIMES")
    if target and not hasattr(config, "workerinput"):  # the controller (or a run without xdist)
        config.pluginmanager.register(_Collector(Path(target)), "gateway-test-times")
