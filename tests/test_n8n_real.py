"""The exported workflows in a real n8n (1.123.81 on Node.js 20) against a real
``gateway serve`` and the real test WordPress.

The test imports a Header Auth credential holding a workflow token, the three workflows and two
small caller workflows it writes itself (Manual Trigger -> Set with a job id, an article and three
base64 images -> Execute Workflow ``article_pipeline`` by id: ``n8n execute`` cannot pass input),
then runs ``n8n execute``:

1. the pipeline once: one post with three attachments in WordPress, every field verified by
   read-back, one notification to the editors' webhook (a local receiver);
2. the same job again (an operator's re-run): still one post and three attachments;
3. a second job with the gateway's site behind the fault proxy, which lets WordPress commit the
   draft but drops its response and fails the gateway's first lookup: the gateway answers 503,
   n8n's Retry On Fail retries, reconciliation finds the post: one post, not two;
4. ``recover_job`` directly (``settings.errorWorkflow`` does not fire under ``n8n execute``);
5. ``publish_approved`` directly: without an editor's approval nothing is published.

Counts come from WordPress itself (the companion plugin's lookup by operation key, as admin).
When the n8n cache is absent, ``scripts/install_n8n.sh`` installs it first (~3 minutes); if that
fails the test is skipped, except under ``CI=true`` where it fails.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import time
import uuid
from importlib import resources

import pytest
import requests
from n8n_support import CREDENTIAL_ID
from n8n_support import CREDENTIAL_NAME
from n8n_support import N8N_VERSION
from n8n_support import WORKFLOW_IDS
from n8n_support import N8n
from n8n_support import Receiver
from n8n_support import install
from n8n_support import installed
from n8n_support import load_workflow
from support import AUTHOR_PASSWORD_ENV
from support import SECRET_KEY
from support import SITE_NAME
from support import TENANT
from support import admin_session
from support import gateway_command

from gateway.testing.fault_proxy import Fault

pytestmark = [pytest.mark.n8n, pytest.mark.wordpress]

TIMES: dict[str, float] = {}


@pytest.fixture(scope="session")
def n8n_binary():
    """The cached n8n binary, installed on first use."""
    was_installed = installed()
    try:
        binary, seconds = install()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as error:
        if os.environ.get("CI") == "true":
            pytest.fail(f"n8n {N8N_VERSION} could not be installed: {error}")
        pytest.skip(f"n8n {N8N_VERSION} could not be installed: {error}")
    TIMES["install" if not was_installed else "install (cached)"] = seconds
    return binary


def demo_article() -> tuple[dict, list[dict]]:
    """The shipped sample article (Chinese, English, an emoji) and its three images, base64."""
    data = resources.files("gateway").joinpath("demo_data")
    article = json.loads(data.joinpath("article.json").read_text("utf-8"))
    images = [
        {
            "slot": image["slot"],
            "alt_text": image["alt_text"],
            "title": image["title"],
            "filename": image["file"],
            "content_base64": base64.b64encode(data.joinpath(image["file"]).read_bytes()).decode(),
        }
        for image in article.pop("images")
    ]
    return article, images


def caller_workflow(workflow_id: str, job_id: str, article: dict, images: list[dict]) -> dict:
    """Manual Trigger -> Set (raw JSON input) -> Execute Workflow ``article_pipeline`` by id."""
    payload = {"job_id": job_id, "article": article, "images": images}
    return {
        "id": workflow_id,
        "name": f"test caller {workflow_id}",
        "active": False,
        "settings": {"executionOrder": "v1"},
        "connections": {
            "Start": {"main": [[{"node": "Input", "type": "main", "index": 0}]]},
            "Input": {"main": [[{"node": "Run pipeline", "type": "main", "index": 0}]]},
        },
        "nodes": [
            {
                "id": str(uuid.uuid4()),
                "name": "Start",
                "type": "n8n-nodes-base.manualTrigger",
                "typeVersion": 1,
                "position": [0, 0],
                "parameters": {},
            },
            {
                "id": str(uuid.uuid4()),
                "name": "Input",
                "type": "n8n-nodes-base.set",
                "typeVersion": 3.4,
                "position": [220, 0],
                "parameters": {"mode": "raw", "jsonOutput": json.dumps(payload), "options": {}},
            },
            {
                "id": str(uuid.uuid4()),
                "name": "Run pipeline",
                "type": "n8n-nodes-base.executeWorkflow",
                "typeVersion": 1.2,
                "position": [440, 0],
                "parameters": {
                    "source": "database",
                    "workflowId": {
                        "__rl": True,
                        "mode": "id",
                        "value": WORKFLOW_IDS["article_pipeline"],
                    },
                    "options": {"waitForSubWorkflow": True},
                },
            },
        ],
    }


def keys(job_id: str, slots: list[str]) -> tuple[str, list[str]]:
    prefix = f"{TENANT}/{job_id}/v1"
    return f"{prefix}/draft", [f"{prefix}/media/{slot}" for slot in slots]


def wordpress_counts(site: dict, job_id: str, slots: list[str]) -> tuple[int, int]:
    """(posts, attachments) in WordPress carrying the job's operation keys."""
    draft_key, media_keys = keys(job_id, slots)
    answer = admin_session(site).get(
        site["url"].rstrip("/") + "/wp-json/publishing-gateway/v1/objects",
        params={"keys": ",".join([draft_key, *media_keys])},
        timeout=30,
    )
    answer.raise_for_status()
    objects = answer.json()["objects"]
    posts = [o for o in objects if o["operation_key"] == draft_key]
    attachments = [o for o in objects if o["operation_key"] in media_keys]
    return len(posts), len(attachments)


def point_site_at(url: str, ledger_url: str, site: dict) -> None:
    """``gateway sites add`` again (the running server re-reads the site on every request)."""
    env = {
        **os.environ,
        "GATEWAY_DATABASE_URL": ledger_url,
        "GATEWAY_SECRET_KEY": SECRET_KEY,
        AUTHOR_PASSWORD_ENV: site["users"]["author"]["app_password"],
    }
    done = subprocess.run(
        [*gateway_command(), "sites", "add", "--tenant", TENANT, "--name", SITE_NAME,
         "--url", url, "--username", site["users"]["author"]["username"],
         "--app-password-env", AUTHOR_PASSWORD_ENV],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def check_success(execution, label: str) -> None:
    TIMES[label] = execution.seconds
    assert execution.returncode == 0, f"{label}: {execution.describe()}"
    assert execution.result is not None, f"{label}: no execution JSON: {execution.describe()}"
    assert execution.node_error() is None, f"{label}: {execution.node_error()}"


def test_article_pipeline_in_real_n8n(n8n_binary, wp_site, gateway_server, ledger_url, proxy,
                                      tmp_path):  # fmt: skip
    started = time.monotonic()
    article, images = demo_article()
    slots = [image["slot"] for image in images]
    run = uuid.uuid4().hex[:8]
    article["tags"] = [f"n8n {run}", "gateway"]  # names: created once, or matched
    job_a, job_b = f"n8n-{run}-a", f"n8n-{run}-b"
    folder = tmp_path / "n8n"
    folder.mkdir()
    with Receiver() as editors:
        n8n = N8n(
            n8n_binary,
            folder,
            {"GATEWAY_URL": gateway_server.url, "EDITOR_WEBHOOK_URL": editors.url},
        )
        t0 = time.monotonic()
        n8n.import_credentials(
            [
                {
                    "id": CREDENTIAL_ID,
                    "name": CREDENTIAL_NAME,
                    "type": "httpHeaderAuth",
                    "data": {"name": "Authorization", "value": f"Bearer {gateway_server.token}"},
                }
            ]
        )
        n8n.import_workflows(
            [
                *(load_workflow(name) for name in WORKFLOW_IDS),
                caller_workflow("pgwTestCallerA", job_a, article, images),
                caller_workflow("pgwTestCallerB", job_b, article, images),
            ]
        )
        TIMES["import (credential + 5 workflows)"] = time.monotonic() - t0

        # 1. straight through
        first = n8n.execute("pgwTestCallerA")
        check_success(first, "execute 1 (job A)")
        assert wordpress_counts(wp_site, job_a, slots) == (1, 3), first.describe()
        answer = requests.get(
            f"{gateway_server.url}/v1/jobs/{job_a}/verification",
            headers=gateway_server.headers(),
            timeout=60,
        )
        verification = answer.json()
        assert verification["ok"] is True, verification
        assert all(field["ok"] is True for field in verification["fields"].values()), verification
        assert verification["fields"]["tags"]["ok"] is True  # the names became the post's tags
        assert len(editors.messages) == 1, editors.messages
        assert editors.messages[0]["job_id"] == job_a
        assert editors.messages[0]["post_id"] == verification["post_id"]
        assert "authorization" not in editors.headers[0]  # never the gateway token
        post_id = verification["post_id"]

        # 2. an operator re-runs the same job: the gateway replays, WordPress is unchanged
        check_success(n8n.execute("pgwTestCallerA"), "execute 2 (job A again)")
        assert wordpress_counts(wp_site, job_a, slots) == (1, 3)
        assert len(editors.messages) == 2 and editors.messages[1]["post_id"] == post_id

        # 3. a new job behind the fault proxy: the draft's response is lost after WordPress
        # committed it and the gateway's first lookup fails (503 outcome-unknown), so n8n retries
        point_site_at(proxy.url, ledger_url, wp_site)
        proxy.add_fault(
            Fault(kind="drop_response", method="POST", path=r"^/wp-json/wp/v2/posts/?$", times=1)
        )
        proxy.add_fault(
            Fault(
                kind="status_without_forward",
                status=503,
                method="GET",
                path=r"^/wp-json/publishing-gateway/v1/objects",
                times=1,
            )
        )
        check_success(n8n.execute("pgwTestCallerB"), "execute 3 (job B, lost draft response)")
        creates = proxy.count(method="POST", path=r"^/wp-json/wp/v2/posts/?$", forwarded=True)
        lookups = proxy.count(method="GET", path=r"^/wp-json/publishing-gateway/v1/objects")
        assert creates == 1, f"post creations that reached WordPress: {creates}"
        assert lookups >= 2, "the gateway should have looked the lost draft up after a retry"
        assert wordpress_counts(wp_site, job_b, slots) == (1, 3)
        job = requests.get(
            f"{gateway_server.url}/v1/jobs/{job_b}", headers=gateway_server.headers(), timeout=60
        ).json()
        draft_row = next(o for o in job["operations"] if o["action"] == "draft")
        assert draft_row["state"] == "CONFIRMED", draft_row
        assert len(editors.messages) == 3 and editors.messages[2]["job_id"] == job_b
        # the gateway's access log: the draft was answered 503 once, then n8n's retry got 2xx
        statuses = re.findall(
            rf'"PUT /v1/jobs/{job_b}/draft HTTP/1.1" (\d{{3}})',
            gateway_server.log_path.read_text(errors="replace"),
        )
        if statuses:  # gunicorn's access log is on
            assert statuses[0] == "503" and statuses[-1] in ("200", "201"), statuses

        # 4. recover_job, run directly: nothing left to recover, no notification
        point_site_at(wp_site["url"], ledger_url, wp_site)
        check_success(n8n.execute(WORKFLOW_IDS["recover_job"]), "execute recover_job")
        assert wordpress_counts(wp_site, job_a, slots) == (1, 3)
        assert wordpress_counts(wp_site, job_b, slots) == (1, 3)
        assert len(editors.messages) == 3, editors.messages[3:]

        # 5. publish_approved, run directly: no editor approved yet, so nothing is published
        # (403 approval-required is skipped quietly) and nobody is notified
        check_success(n8n.execute(WORKFLOW_IDS["publish_approved"]), "execute publish_approved")
        assert len(editors.messages) == 3, editors.messages[3:]
        post = admin_session(wp_site).get(
            f"{wp_site['url'].rstrip('/')}/wp-json/wp/v2/posts/{post_id}",
            params={"context": "edit"},
            timeout=30,
        )
        assert post.json()["status"] == "draft"

    TIMES["test total (after install)"] = time.monotonic() - started
    print("\nn8n timings: " + ", ".join(f"{k}: {v:.1f} s" for k, v in TIMES.items()))
    assert time.monotonic() - started < 360, TIMES
