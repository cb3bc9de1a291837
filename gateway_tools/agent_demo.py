"""``gateway demo --agent``: the main job driven by a scripted agent session.

The sample article goes to the test WordPress through a real ``gateway serve``, but this time
an agent session does the work: a local stand-in for the OpenAI Agents API
(:mod:`gateway_tools.openai_standin`) plays a scripted agent that calls the gateway's tools
(three ``upload_media``, ``put_draft``, ``verify``, ``request_approval``). The gateway learns of
each required action by a signed webhook, and ``gateway worker`` processes answer them through
the ledger. The worker that runs ``put_draft`` is killed (SIGKILL) after WordPress stored the
post and before the tool result was submitted; a restarted worker finds the stored receipt,
makes no second post, and submits the result once with the idempotency key derived from the
operation key. The report counts posts, attachments and accepted submissions.

Then two sessions of their own show what section 11 and 12 of the seed ask for: one last seen
``in_progress`` whose ``action_required`` webhook is lost (never delivered) - the poll of
``gateway worker`` answers it anyway; and one whose binding workflow token is revoked with
``gateway tokens revoke`` - the worker stops it with a reason, cancels its turn and writes
nothing to WordPress.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time

import requests

from gateway.agents import submissions
from gateway_tools import demo as base_demo
from gateway_tools.demo import TENANT
from gateway_tools.demo import Demo
from gateway_tools.demo import say
from gateway_tools.openai_standin import OpenAIStandIn

LEASE_SECONDS = 2


class AgentDemo(Demo):
    """The main job, an agent session and a worker crash; see the module docstring."""

    def __init__(self, site: dict, standin: OpenAIStandIn):
        super().__init__(site)
        self.standin = standin
        self.env.update(
            {
                "GATEWAY_OPENAI_API_KEY": standin.api_key,
                "GATEWAY_OPENAI_BASE_URL": standin.base_url,
                "GATEWAY_OPENAI_WEBHOOK_SECRET": standin.webhook_secret,
                "GATEWAY_AGENT_LEASE_SECONDS": str(LEASE_SECONDS),
                "GATEWAY_AGENT_STALE_AFTER": "3600",  # webhooks drive this demo, not the poll
            }
        )

    def serve_args(self) -> list[str]:
        return ["--no-agent-worker"]  # the demo runs (and kills) the worker itself

    def worker(self, crash_point: str = "", **settings: str) -> dict | None:
        """One ``gateway worker --once`` process (``settings``: more ``GATEWAY_*`` variables);
        its counts, or None when it was killed at ``crash_point``."""
        env = {**self.env, "GATEWAY_CRASH_POINTS": crash_point, **settings}
        done = subprocess.run(
            [sys.executable, "-m", "gateway.cli", "worker", "--once"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode == -9:
            return None
        if done.returncode != 0:
            raise RuntimeError(f"gateway worker failed: {done.stderr[-2000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])

    def cli(self, *args: str) -> str:
        """One ``gateway`` command with the demo's environment; its stdout."""
        done = subprocess.run(
            [sys.executable, "-m", "gateway.cli", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"gateway {args[0]} failed: {done.stderr[-2000:]}")
        return done.stdout

    def polling_worker(self) -> dict:
        """One ``gateway worker --once`` whose poll retrieves sessions seen a second ago."""
        return self.worker(GATEWAY_AGENT_STALE_AFTER="1", GATEWAY_AGENT_RETRY_AFTER="1")

    def bind(self, gw, job_id: str, token: str | None = None) -> str:
        tools = gw.call("GET", "/v1/agent-tools").json()["tools"]
        sid = self.standin.create_session(tools=tools)
        headers = {"Authorization": f"Bearer {token}"} if token else None
        answer = gw.call(
            "PUT",
            f"/v1/jobs/{job_id}",
            json={"site": "wordpress", "task_version": 1, "session_id": sid},
            **({"headers": headers} if headers else {}),
        )
        if answer.status_code not in (200, 201):
            raise RuntimeError(f"binding {sid} failed: {answer.text[:500]}")
        return sid

    def lost_webhook(self, gw) -> dict:
        """A session last seen in_progress asks for put_draft; its webhook never comes."""
        job_id = f"agent-lost-webhook-{self.run_id}"
        sid = self.bind(gw, job_id)
        say(f"\n[lost webhook] job {job_id}, session {sid}")
        self.standin.set_status(sid, "in_progress")
        say(f"  worker sees it in_progress: {_counts(self.polling_worker())}")
        body = _draft(f"Lost webhook {self.run_id}", "<p>Answered by the poll.</p>")
        self.standin.require(sid, self.standin.function_call("put_draft", body))
        say("  the agent asks for put_draft; its action_required webhook is lost (not sent)")
        for _ in range(5):
            time.sleep(1.2)  # the session's next retrieve falls due
            counts = self.polling_worker()
            say(f"  worker (poll): {_counts(counts)}")
            if self.standin.events(sid):
                break
        return {"job_id": job_id, "session_id": sid, "job": gw.job(job_id).json()}

    def revoked_binding(self, gw) -> dict:
        """A session bound by a workflow token that is revoked before the worker answers."""
        job_id = f"agent-revoked-{self.run_id}"
        name = f"agent-binder-{self.run_id}"
        created = self.cli(
            "tokens", "create", "--tenant", TENANT, "--role", "workflow", "--name", name
        )
        sid = self.bind(gw, job_id, created.strip().splitlines()[-1])
        say(f"\n[revoked binding] job {job_id}, session {sid} bound by token {name}")
        body = _draft(f"Never written {self.run_id}", "<p>Not allowed.</p>")
        self.standin.require(sid, self.standin.function_call("put_draft", body))
        revoked = self.cli("tokens", "revoke", "--tenant", TENANT, "--name", name).strip()
        say(f"  gateway tokens revoke --name {name}: {revoked}")
        say(f"  webhook action_required -> {self.webhook(gw.base_url, sid)}")
        say(f"  worker: {_counts(self.polling_worker())}")
        return {"job_id": job_id, "session_id": sid, "job": gw.job(job_id).json()}

    def transcript(self, sid: str, calls: list[dict]) -> None:
        """Each tool call of the session with its arguments (shortened) and what the gateway
        answered, as the session received it."""
        results = {
            e["call_id"]: e for e in self.standin.events(sid, "agent.session.input.tool_result")
        }
        say("  tool calls, as the session saw them:")
        for call in calls:
            args = ", ".join(
                f"{k}={_short(v, 72 if k == 'title' else 40)}" for k, v in call["arguments"].items()
            )
            event = results.get(call["call_id"])
            said = _outcome(event) if event else "not answered"
            say(f"    {call['name']}({args if len(args) <= 140 else args[:138] + ' …'})")
            say(f"      -> {said}")

    def webhook(self, base: str, sid: str) -> int:
        body, headers = self.standin.webhook("agent.session.action_required", sid)
        return requests.post(base + "/v1/webhooks/openai", data=body, headers=headers).status_code

    def run_job(self, gw, article: dict, images: dict) -> dict:
        job_id = f"agent-article-{self.run_id}"
        tools = gw.call("GET", "/v1/agent-tools").json()["tools"]
        sid = self.standin.create_session(tools=tools)
        say(f"\n[1/1] job {job_id}, agent session {sid} ({len(tools)} gateway tools)")
        answer = gw.call(
            "PUT",
            f"/v1/jobs/{job_id}",
            json={"site": "wordpress", "task_version": 1, "session_id": sid},
        )
        say(f"  job + session -> {answer.status_code}")
        uploads = [
            self.standin.function_call(
                "upload_media",
                {
                    "slot": img["slot"],
                    "filename": img["file"],
                    "content_base64": base64.b64encode(images[img["file"]]).decode(),
                    "alt_text": img["alt_text"],
                    "title": img["title"],
                },
            )
            for img in article["images"]
        ]
        self.standin.require(sid, *uploads)
        draft = self.standin.function_call("put_draft", base_demo.draft_body(article))
        self.standin.then(sid, draft)
        verify = self.standin.function_call("verify", {})
        approval = self.standin.function_call("request_approval", {})
        self.standin.then(sid, verify)
        self.standin.then(sid, approval)
        base = gw.base_url
        say(f"  webhook action_required -> {self.webhook(base, sid)}")
        say(f"  worker: {_counts(self.worker())}")
        say(f"  webhook action_required (put_draft) -> {self.webhook(base, sid)}")
        crashed = self.worker(crash_point="before_tool_result")
        say(f"  worker answering put_draft: {_counts(crashed)}")
        say("    (after WordPress stored the post, before the tool result was submitted)")
        time.sleep(LEASE_SECONDS + 0.5)  # the dead worker's lease expires
        say("  a new worker process starts")
        for number in range(1, 7):
            counts = self.worker()
            say(f"  worker pass {number}: {_counts(counts)}")
            if self.standin.session(sid).status == "idle":
                break
            say(f"  webhook action_required -> {self.webhook(base, sid)}")
        replan = dict(base_demo.draft_body(article), title=article["title"] + " (re-planned)")
        refused_call = self.standin.function_call("put_draft", replan)
        self.standin.require(sid, refused_call)
        say("  the agent re-plans put_draft with another title under the same task version")
        say(f"  webhook action_required -> {self.webhook(base, sid)}")
        say(f"  worker: {_counts(self.worker())}")
        self.transcript(sid, [*uploads, draft, verify, approval, refused_call])
        recover = gw.recover(job_id).json()
        return {
            "job_id": job_id,
            "session_id": sid,
            "draft_call": draft["call_id"],
            "recover": recover,
            "job": gw.job(job_id).json(),
            "lost": self.lost_webhook(gw),
            "revoked": self.revoked_binding(gw),
        }

    def agent_report(self, job: dict, started: float) -> int:
        say("\nReport")
        job_id, sid = job["job_id"], job["session_id"]
        slots = [o["slot"] for o in job["job"]["operations"] if o["action"] == "media"]
        draft_key = f"{TENANT}/{job_id}/v1/draft"
        media_keys = [f"{TENANT}/{job_id}/v1/media/{s}" for s in slots]
        counts = self.count([draft_key, *media_keys])
        self.check(
            f"posts carrying the draft key in WordPress: {counts[draft_key]}",
            counts[draft_key] == 1,
        )
        attachments = sum(counts[k] for k in media_keys)
        self.check(f"attachments carrying the media keys: {attachments}", attachments == 3)
        results = self.standin.events(sid, "agent.session.input.tool_result")
        self.check(
            f"tool results accepted by the session: {len(results)} for 7 calls",
            len(results) == 7 and len({r["call_id"] for r in results}) == 7,
        )
        refused = [r for r in results if not r.get("success")]
        self.check(
            "the re-planned put_draft was refused (operation-key-reused, bump the version), "
            f"{counts[draft_key]} post",
            len(refused) == 1 and "operation-key-reused" in refused[0].get("error", ""),
        )
        [drafted] = [r for r in results if r["call_id"] == job["draft_call"]] or [{}]
        replayed = json.loads(drafted.get("output") or "{}").get("replayed")
        self.check(
            "the restarted worker answered put_draft from the stored receipt (no second write)",
            replayed is True,
        )
        key = submissions.idempotency_key(f"{TENANT}/{job_id}/v1/tool_result/{job['draft_call']}")
        sent = [p["key"] for p in self.standin.event_posts(sid)]
        self.check(
            f"put_draft's result submitted once, Idempotency-Key {key[:16]}...",
            sent.count(key) == 1,
        )
        agent = job["recover"].get("agent") or {}
        calls = agent.get("tool_calls", {})
        self.check(
            f"recover read {agent.get('items_read')} saved items in {agent.get('pages')} page(s): "
            f"{len(calls.get('completed', []))} tool calls completed, "
            f"{len(calls.get('unknown', []))} unknown",
            len(calls.get("completed", [])) == 6,
        )
        self.check(
            f"job phase {job['job']['phase']} (verified by read-back; no publish)",
            job["job"]["phase"] == "approval_pending",
        )
        lost, revoked = job["lost"], job["revoked"]
        lost_key = f"{TENANT}/{lost['job_id']}/v1/draft"
        answered = self.standin.events(lost["session_id"], "agent.session.input.tool_result")
        self.check(
            f"lost webhook: the poll answered put_draft of a session last seen in_progress "
            f"({len(answered)} result, {self.count([lost_key])[lost_key]} post, 0 webhooks)",
            len(answered) == 1
            and answered[0]["success"] is True
            and self.count([lost_key])[lost_key] == 1,
        )
        revoked_key = f"{TENANT}/{revoked['job_id']}/v1/draft"
        agent = revoked["job"].get("agent") or {}
        cancels = self.standin.events(revoked["session_id"], "agent.session.input.cancel")
        self.check(
            f"revoked binding token: stopped ({agent.get('stopped_reason')}), its turn "
            f"cancelled at OpenAI ({len(cancels)}), "
            f"{self.count([revoked_key])[revoked_key]} posts written",
            bool(agent.get("stopped_reason"))
            and "revoked" in agent["stopped_reason"]
            and len(cancels) == 1
            and self.count([revoked_key])[revoked_key] == 0
            and not self.standin.events(revoked["session_id"], "agent.session.input.tool_result"),
        )
        self.check(
            "the OpenAI key appears in no answer of the gateway",
            self.standin.api_key not in json.dumps(job),
        )
        failed = [label for label, ok in self.checks if not ok]
        say(
            f"  time: {time.monotonic() - started:.1f} s; checks: "
            f"{len(self.checks) - len(failed)}/{len(self.checks)} ok"
        )
        say(
            "RESULT: "
            + (
                "OK: one post and 3 media for the agent's job, a worker crash between the "
                "WordPress write and the submission recovered without a second post or a "
                "second submission; a lost webhook answered by the poll; a revoked binding "
                "token stopped its session with nothing written"
                if not failed
                else "FAILED: " + "; ".join(failed)
            )
        )
        return 1 if failed else 0


def _counts(counts: dict | None) -> str:
    """A worker pass's counts in words (``3 answered, 1 event``), nothing for zeros."""
    if counts is None:
        return "SIGKILLed"
    said = [f"{v} {k}" for k, v in counts.items() if isinstance(v, int) and v]
    return ", ".join(said) or "nothing to do"


def _short(value, limit: int = 48) -> str:
    """An argument as a reader needs it: base64 by its size, long text cut at a word."""
    if isinstance(value, str) and len(value) > 200 and value.isascii() and " " not in value:
        return f"<{len(value) * 3 // 4 // 1024} KiB base64>"
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 2].rsplit(" ", 1)[0] + " …"


def _outcome(event: dict) -> str:
    """What one tool result said: the ledger's answer, or the refusal and its hint."""
    try:
        output = json.loads(event.get("output") or event.get("error") or "{}")
    except ValueError:
        output = {}
    if not event.get("success"):
        problem = output.get("type", "").rsplit("/", 1)[-1] or "refused"
        return f"REFUSED {problem}: {output.get('hint') or output.get('detail', '')}"[:150]
    facts = [f"{k} {output[k]}" for k in ("state", "media_id", "post_id") if output.get(k)]
    how = [k for k in ("replayed", "reconciled", "created") if output.get(k)]
    if "ok" in output and "fields" in output:
        facts.append(f"verification ok={output['ok']}")
    return ", ".join(facts + how) or "ok"


def _draft(title: str, content: str) -> dict:
    """A complete draft without images."""
    seo = {"title": title, "description": f"{title}.", "focus_keyword": "gateway"}
    return {"title": title, "content": content, "excerpt": f"{title}.", "seo": seo}


def run_agent_demo(site_json: str | None = None, keep: bool = False) -> int:
    """Run the agent demo against the site in ``site_json``; 0 = every check ok, 1 = a check
    failed. The demo's ledger directory is removed afterwards unless ``keep``.

    Raises:
        DemoUnavailable: the test WordPress is not up, or ``gateway serve`` did not start.
    """
    site = base_demo.load_site(site_json)
    started = time.monotonic()
    say(f"Publishing Gateway agent demo against WordPress at {site['url']}")
    with OpenAIStandIn() as standin:
        say(f"  OpenAI Agents API stand-in at {standin.base_url}")
        demo = AgentDemo(site, standin)
        finished = False
        try:
            gw = demo.setup()
            article, images = base_demo.load_article()
            job = demo.run_job(gw, article, images)
            status = demo.agent_report(job, started)
            finished = True
            return status
        finally:
            demo.close(keep or not finished)  # a demo that broke off keeps its logs
