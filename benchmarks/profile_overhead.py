"""Profile the overhead path (create draft + read-back, then its replay) inside one process
with pyinstrument: the Flask app is driven through its test client, so the profile shows the
gateway's own work and the time spent waiting on WordPress (socket reads) side by side.

    pip install pyinstrument
    python benchmarks/profile_overhead.py [--drafts 30] [--database sqlite] [--html out.html]

Prints the call tree (wall clock) and a summary of where the time went; ``--out`` writes
the summary as JSON.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path

import common
from common import say


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--drafts", type=int, default=30)
    ap.add_argument("--database", default="sqlite")
    ap.add_argument("--html")
    ap.add_argument("--out")
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args(argv)
    if args.smoke:
        args.drafts = 3
    try:
        from pyinstrument import Profiler
    except ImportError:
        say("pyinstrument is not installed (pip install pyinstrument): profile skipped")
        common.write_json(args.out, {"skipped": "pyinstrument not installed"})
        return 0

    site = common.load_site()
    workdir = Path(tempfile.mkdtemp(prefix="gateway-profile-"))
    pg_url = common.pg_create() if args.database == "postgresql" else None
    db_url = pg_url or f"sqlite:///{workdir}/ledger.db"
    secret = secrets.token_urlsafe(32)
    os.environ.update({"GATEWAY_DATABASE_URL": db_url, "GATEWAY_SECRET_KEY": secret})
    try:
        from gateway import create_app
        from gateway.ledger import db
        from gateway.ledger import migrations
        from gateway.tenancy import sites
        from gateway.tenancy import tokens

        app = create_app(check_ledger=False)  # migrated just below
        author = site["users"]["author"]
        with db.database.connection_context():
            migrations.migrate()
            sites.add_site(
                secret,
                common.TENANT,
                "wordpress",
                site["url"],
                author["username"],
                author["app_password"],
            )
            token = tokens.create_token(common.TENANT, "workflow", "profile")
        client = app.test_client()
        headers = {"Authorization": f"Bearer {token}"}
        rid = common.run_id()

        def one(i: int):
            job_id = f"{rid}-p{i}"
            client.put(
                f"/v1/jobs/{job_id}", json={"site": "wordpress", "task_version": 1}, headers=headers
            )
            body = common.draft_body(f"{rid} profile {i}")
            r = client.put(f"/v1/jobs/{job_id}/draft", json=body, headers=headers)
            assert r.status_code == 201, r.get_data(as_text=True)[:300]
            r = client.put(f"/v1/jobs/{job_id}/draft", json=body, headers=headers)
            assert r.status_code == 200

        for i in range(2):  # warm-up: imports, schema compilation, companion detection
            one(-1 - i)
        profiler = Profiler(interval=0.0005)
        t0 = time.perf_counter()
        profiler.start()
        for i in range(args.drafts):
            one(i)
        profiler.stop()
        elapsed = time.perf_counter() - t0
        say(profiler.output_text(unicode=True, color=False, show_all=False))
        if args.html:
            Path(args.html).write_text(profiler.output_html())
            say(f"wrote {args.html}")
        # A flat split: time under the WordPress client vs everything else.
        session = profiler.last_session
        frames = session.root_frame()
        wp = _time_under(frames, "gateway/wordpress/client.py", "call")
        sql = _time_under_any(frames, ("peewee.py",), "execute_sql")
        summary = {
            "drafts": args.drafts,
            "wall_s": round(elapsed, 3),
            "per_draft_ms": round(elapsed / args.drafts * 1000, 2),
            "wordpress_call_ms_per_draft": round(wp / args.drafts * 1000, 2),
            "sql_execute_ms_per_draft": round(sql / args.drafts * 1000, 2),
            "rest_ms_per_draft": round((elapsed - wp - sql) / args.drafts * 1000, 2),
        }
        say(
            f"per draft (create + read-back + replay + job PUT): {summary['per_draft_ms']} ms; "
            f"WordPress calls {summary['wordpress_call_ms_per_draft']} ms, "
            f"SQL {summary['sql_execute_ms_per_draft']} ms, "
            f"everything else {summary['rest_ms_per_draft']} ms"
        )
        common.write_json(args.out, summary)
    finally:
        try:
            from gateway.ledger import db

            db.database.close()
        except Exception:  # noqa: BLE001
            pass
        if pg_url:
            common.pg_drop(pg_url)
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


def _time_under(frame, file_part: str, function: str) -> float:
    """Total time of the outermost frames matching ``file_part``/``function``."""
    if frame is None:
        return 0.0
    if function == frame.function and file_part in (frame.file_path or ""):
        return frame.time
    return sum(_time_under(c, file_part, function) for c in frame.children)


def _time_under_any(frame, files: tuple, function: str) -> float:
    if frame is None:
        return 0.0
    if function == frame.function and any(f in (frame.file_path or "") for f in files):
        return frame.time
    return sum(_time_under_any(c, files, function) for c in frame.children)


if __name__ == "__main__":
    sys.exit(main())
