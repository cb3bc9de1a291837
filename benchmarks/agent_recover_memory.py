"""Peak memory of an agent session's state rebuild (``POST /v1/jobs/{id}/recover``) at 250 and
2,500 saved items. Goal: the peak at 2,500 within 1.5x the peak at 250 (the rebuild streams
the items page by page and keeps only gateway-tool calls and the last turn).

The session lives in the OpenAI stand-in (a real HTTP server answering in the SDK's format),
served from a child process so that only the gateway's side is measured; one tenth of the
items are gateway-tool calls with their outputs, the rest messages and reasoning. The peak is
Python's ``tracemalloc`` peak during :func:`gateway.agents.sessions.rebuild` (SDK parsing,
paging and the join with a real SQLite ledger), median of 3 runs.

    .venv/bin/python benchmarks/agent_recover_memory.py [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import socket
import statistics
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

from gateway.agents import sessions
from gateway.agents import tools
from gateway.core.config import Config
from gateway.ledger import db
from gateway.ledger import migrations
from gateway.ledger.models import AgentSession
from gateway.ledger.models import Job
from gateway_tools.openai_standin import OpenAIStandIn

SIZES = (250, 2500)
RUNS = 3


def measure(config: Config, size: int, sid: str) -> dict:
    job = Job.create(tenant="bench", job_id=f"mem-{size}-{sid}", site="blog", session_id=sid)
    AgentSession.create(session_id=sid, tenant="bench", job_id=job.job_id, task_version=1)
    oai = sessions.client(config)
    sessions.rebuild(config, job, oai)  # warm-up: imports, connection, model caches
    peaks = []
    for _ in range(RUNS):
        tracemalloc.start()
        summary = sessions.rebuild(config, job, oai)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    assert summary["items_read"] == size
    return {"items": size, "pages": summary["pages"], "peak_bytes": int(statistics.median(peaks))}


def _serve(standin: OpenAIStandIn) -> None:
    standin.start()
    threading.Event().wait()


def _wait_for(port: int) -> None:
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("the stand-in did not start")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="agent-mem-"))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    standin = OpenAIStandIn(port=port)
    sids = {}
    for size in SIZES:
        sids[size] = standin.create_session(tools=tools.definitions())
        standin.add_items(sids[size], size, tool_calls=size // 20)  # call + output = 1/10
    child = multiprocessing.get_context("fork").Process(target=_serve, args=(standin,))
    child.start()
    try:
        _wait_for(port)
        config = Config(
            database_url=f"sqlite:///{workdir}/ledger.db",
            openai_api_key=standin.api_key,
            openai_base_url=standin.base_url,
        )
        db.bind(config.database_url)
        migrations.migrate()
        with db.database.connection_context():
            results = [measure(config, size, sids[size]) for size in SIZES]
    finally:
        child.terminate()
        child.join(10)
    ratio = results[1]["peak_bytes"] / results[0]["peak_bytes"]
    figure = {
        "figure": "agent recover peak memory",
        "results": results,
        "ratio_2500_to_250": round(ratio, 2),
        "goal": "<= 1.5",
        "met": ratio <= 1.5,
    }
    for r in results:
        print(
            f"{r['items']:>5} items, {r['pages']:>2} pages: peak {r['peak_bytes'] / 1024:.0f} KiB"
        )
    print(f"ratio 2,500 / 250: {ratio:.2f} (goal <= 1.5): {'met' if figure['met'] else 'NOT met'}")
    if args.out:
        Path(args.out).write_text(json.dumps(figure, indent=2) + "\n")


if __name__ == "__main__":
    main()
