"""The soak's nemesis (as Jepsen names it): a seeded schedule of faults applied, one after the
other, to a fleet of ``gateway serve`` processes, their private PostgreSQL cluster
(``tests/private_postgres.py``) and the fault proxy in front of the test WordPress
(``gateway_tools/fault_proxy.py``), while the clients of ``tests/soak_clients.py`` work.

The schedule is drawn from one ``random.Random(seed)`` before anything runs, so a seed names
the same faults in the same order; when each lands among the clients' requests depends on the
machine (as in Jepsen, a replay repeats the schedule, not the interleaving).
"""

from __future__ import annotations

import copy
import os
import random
import signal
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from private_postgres import PrivatePostgres
from servers import Server
from support import free_port

from gateway_tools.fault_proxy import Fault
from gateway_tools.fault_proxy import FaultProxy

__all__ = ["Event", "Fleet", "Nemesis", "schedule", "session_processes"]

WRITES = {"media": r"^/wp-json/wp/v2/media/?$", "draft": r"^/wp-json/wp/v2/posts/?$"}
LOOKUP = r"^/wp-json/publishing-gateway/v1/objects"

# kind -> weight: about a third of the events are WordPress faults, as many kill a process
KINDS = {
    "wordpress-fault": 6,
    "wordpress-partition": 1,
    "kill-gateway": 3,
    "stop-gateway": 2,
    "kill-postgres": 3,
}


@dataclass(frozen=True)
class Event:
    """One step of the nemesis: wait ``gap`` seconds, then do ``kind`` (:data:`KINDS`) to
    node ``node`` (a gateway process, for the gateway kinds), for ``pause`` seconds (how long
    a killed process stays down, a stopped one stopped, WordPress unreachable), or add
    ``fault`` to the proxy (``wordpress-fault``)."""

    gap: float
    kind: str
    node: int = 0
    pause: float = 0.0
    fault: Fault | None = None

    def __str__(self) -> str:
        what = f"{self.fault.kind}({self.fault.status})" if self.fault else f"node {self.node}"
        return f"+{self.gap:.1f}s {self.kind} {what} {self.pause:.1f}s"


def schedule(rng: random.Random, seconds: float, nodes: int, mean_gap: float = 2.5) -> list:
    """Events whose gaps add up to about ``seconds`` (exponential gaps of mean ``mean_gap``
    seconds), each drawn from ``rng`` alone."""
    events, elapsed = [], 0.0
    kinds, weights = list(KINDS), list(KINDS.values())
    while True:
        gap = min(rng.expovariate(1 / mean_gap), 3 * mean_gap)
        elapsed += gap
        if elapsed > seconds:
            return events
        kind = rng.choices(kinds, weights)[0]
        node, pause = rng.randrange(nodes), round(rng.uniform(0.5, 4.0), 1)
        fault = wordpress_fault(rng) if kind == "wordpress-fault" else None
        events.append(Event(round(gap, 2), kind, node, pause, fault))


def wordpress_fault(rng: random.Random) -> Fault:
    """One fault on the next one or two matching WordPress calls: a create (post or media)
    or the companion plugin's lookup, which reconciliation reads."""
    kind = rng.choice(
        ["drop_response", "delay", "status_after_forward", "status_without_forward",
         "throttle", "upstream_page", "php_notice"]
    )  # fmt: skip
    status = {
        "status_after_forward": rng.choice([500, 502]),
        "status_without_forward": rng.choice([500, 502]),
        "throttle": rng.choice([429, 503]),
        "upstream_page": 403,  # a firewall's HTML page
    }.get(kind)
    extra = {"status": status} if status else {}
    if kind == "delay":
        extra["seconds"] = 4.0  # past the gateway's 3 s WordPress timeout
    if rng.random() < 0.2:
        method, path = "GET", LOOKUP
    else:
        method, path = "POST", WRITES[rng.choice(list(WRITES))]
    return Fault(kind=kind, method=method, path=path, times=rng.randint(1, 2), **extra)


class Fleet:
    """``size`` ``gateway serve`` processes on one ledger (``base``'s: its site and token),
    each on a port of its own that a restart keeps, each in a session of its own (granian's
    main process and its workers), each with its temporary files in ``workdir/node-<i>``."""

    def __init__(self, base: Server, size: int, workdir: Path, **start):
        self.nodes: list[Server] = []
        self.ports = [free_port() for _ in range(size)]
        self.start_options = start
        for index in range(size):
            node = copy.copy(base)
            temp = workdir / f"node-{index}"
            temp.mkdir()
            node.env = {**base.env, "TMPDIR": str(temp)}  # granian's metrics files, per start
            self.nodes.append(node)
        self.urls = [f"http://127.0.0.1:{port}" for port in self.ports]
        self.headers = base.headers
        self.sessions: list[int] = []  # of every process started, killed ones too

    def start(self, index: int) -> None:
        self.nodes[index].start(port=self.ports[index], **self.start_options)
        self.sessions.append(self.nodes[index].process.pid)

    def start_all(self) -> None:
        """Start every node, at once (each start waits for its ``/healthz``)."""
        with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
            list(pool.map(self.start, range(len(self.nodes))))

    def kill(self, index: int) -> None:
        self.nodes[index].kill()

    def signal(self, index: int, signum: int) -> None:
        """``signum`` to every process of node ``index`` (SIGSTOP, SIGCONT)."""
        process = self.nodes[index].process
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signum)

    def running(self, index: int) -> bool:
        process = self.nodes[index].process
        return process is not None and process.poll() is None

    def destroy(self) -> None:
        """SIGKILL every node (a stopped one too) and wait up to 10 s until no process of any
        session it started is left (SIGKILL lands a moment after it is sent); idempotent."""
        for node in self.nodes:
            node.kill()
        deadline = time.monotonic() + 10
        while (left := self.leftovers()) and time.monotonic() < deadline:
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)

    def leftovers(self) -> list[int]:
        """Live processes of any session this fleet started (none after :meth:`destroy`)."""
        return [pid for session in self.sessions for pid in session_processes(session)]


class Nemesis:
    """Applies :func:`schedule`'s events in order on a thread of its own (:meth:`run`) until
    they run out or ``stop`` is set (then ``done`` is set); :meth:`heal` ends every fault.
    ``applied`` counts the events by kind, ``log`` lists them as applied."""

    def __init__(self, events: list, fleet: Fleet, postgres: PrivatePostgres, proxy: FaultProxy):
        self.events = events
        self.fleet = fleet
        self.postgres = postgres
        self.proxy = proxy
        self.stop = threading.Event()
        self.done = threading.Event()  # the schedule ran out, was stopped or failed
        self.applied: Counter = Counter()
        self.log: list[str] = []
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="nemesis", daemon=True)

    def run(self) -> Nemesis:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            for event in self.events:
                if self.stop.wait(event.gap):
                    return
                self._apply(event)
                self.applied[event.kind] += 1
                self.log.append(str(event))
        except BaseException as error:  # noqa: BLE001 - reported by heal() to the test
            self.error = error
        finally:
            self.done.set()

    def _apply(self, event: Event) -> None:
        if event.kind == "wordpress-fault":
            self.proxy.add_fault(event.fault)
        elif event.kind == "wordpress-partition":
            with self.proxy.unanswered_connects():
                self.stop.wait(event.pause)
        elif event.kind == "kill-gateway":
            self.fleet.kill(event.node)
            self.stop.wait(event.pause)
            self.fleet.start(event.node)
        elif event.kind == "stop-gateway":
            self.fleet.signal(event.node, signal.SIGSTOP)
            try:
                self.stop.wait(event.pause)
            finally:
                self.fleet.signal(event.node, signal.SIGCONT)
        elif event.kind == "kill-postgres":
            self.postgres.kill()
            self.stop.wait(event.pause)
            self.postgres.start()

    def halt(self) -> None:
        """Stop the schedule and wait for the event under way (a restart) to end."""
        self.stop.set()
        if self._thread.ident is not None:  # started
            self._thread.join(timeout=120)
        assert not self._thread.is_alive(), "the nemesis did not stop"

    def heal(self) -> None:
        """Stop the schedule and end every fault: no proxy fault left, PostgreSQL up, every
        node running and none stopped. Raises what the nemesis thread raised, if anything."""
        self.halt()
        self.proxy.clear_faults()
        if self.postgres.process is None or self.postgres.process.poll() is not None:
            self.postgres.start()
        for index in range(len(self.fleet.nodes)):
            self.fleet.signal(index, signal.SIGCONT)
            if not self.fleet.running(index):
                self.fleet.start(index)
        if self.error is not None:
            raise self.error


def session_processes(session: int) -> list[int]:
    """The live (not zombie) processes whose session id is ``session`` (Linux: ``/proc``)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # it ended meanwhile
            continue
        if int(fields[3]) == session and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found
