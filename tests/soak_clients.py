"""The soak's clients: n8n workflows that each run one job (the job, three images, the draft)
against a fleet of ``gateway serve`` processes, as n8n's "Retry On Fail" does: the same request
again after a connection error, a timeout, any 5xx, a 429 or a problem that says
``retryable: true``, on whichever process the load balancer (a random pick) hands it to.

Every answer is kept (:class:`Answer`) for the checker (``tests/soak_checker.py``). A few
runs are abandoned at their first failed request (an n8n execution killed), leaving their rows
to the sweep.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass

import requests
from support import SITE_NAME
from support import draft_body
from support import op_key
from support import png_bytes

__all__ = ["SLOTS", "Answer", "Client", "Job"]

SLOTS = ("hero", "one", "two")


@dataclass(frozen=True)
class Answer:
    """One attempt: ``step`` of job ``job_id`` (``job``, ``media:<slot>``, ``draft``) sent to
    node ``node``; ``status`` None when no HTTP answer came (refused, reset, timed out, with
    ``error``); the problem's slug and ``retryable`` when it was one; whether the answer had
    ``X-Request-Id`` and ``Retry-After``; ``phase`` ``nemesis`` or ``final``."""

    job_id: str
    step: str
    node: int
    status: int | None
    slug: str | None = None
    retryable: bool | None = None
    request_id: bool = False
    retry_after: bool = False
    error: str = ""
    phase: str = "nemesis"

    def worth_retrying(self) -> bool:
        """What n8n's Retry On Fail (and a careful workflow) sends again."""
        if self.status is None or self.status >= 500 or self.status == 429:
            return True
        return self.retryable is True

    def __str__(self) -> str:
        seen = self.slug or self.error[:120]
        return f"{self.step} of {self.job_id} on node {self.node}: {self.status} {seen}"


@dataclass
class Job:
    """One job of the run: its id, the run's token ``run`` (in its titles), the ``seed`` of its
    requests' bytes, and the steps its last workflow finished with a 2xx (``done``: it
    stopped at the first other, abandoned or past its deadline)."""

    job_id: str
    run: str
    seed: float
    done: tuple = ()

    def titles(self) -> dict:
        """step -> the title of its object, unique, with the run's token: the checker counts
        WordPress's objects by it as well as by operation key."""
        steps = [f"media:{slot}" for slot in SLOTS] + ["draft"]
        return {step: f"{self.run} {self.job_id} {step.removeprefix('media:')}" for step in steps}

    def keys(self) -> dict:
        """step -> operation key, for the steps that write WordPress."""
        keys = {f"media:{slot}": op_key(self.job_id, "media", slot) for slot in SLOTS}
        return {**keys, "draft": op_key(self.job_id, "draft")}

    def finished(self) -> bool:
        return "draft" in self.done


class Client:
    """Runs jobs against ``urls`` with ``headers`` (a workflow token), keeping every
    :class:`Answer` in :attr:`answers` (thread-safe). ``deadline`` (seconds) bounds one
    request's retries; ``abandon`` is the chance that a job's workflow stops at its first
    failed attempt."""

    def __init__(self, urls: list, headers: dict, deadline: float = 120, abandon: float = 0.0):
        self.urls = urls
        self.headers = headers
        self.deadline = deadline
        self.abandon = abandon
        self.answers: list[Answer] = []
        self.halted = threading.Event()  # set: every workflow gives up at its next attempt
        self._lock = threading.Lock()

    def run(self, job: Job, phase: str = "nemesis") -> Job:
        """The workflow for ``job`` (``phase`` ``final``: the heal's re-run, never abandoned):
        each step until it ends without a retryable answer; a step that ends otherwise than
        2xx ends the run. Returns ``job`` with the steps done."""
        # the requests' bytes from the job's seed alone: a re-run sends the same ones again
        content = random.Random(job.seed)
        quitter = content.random() < self.abandon and phase != "final"
        steps = list(self._steps(job, content))
        balancer = random.Random(f"{job.seed}/{phase}")  # which node, how long to wait
        done = []
        for step, method, path, kwargs in steps:
            if self.halted.is_set():
                break
            answer = self._send(job, step, method, path, kwargs, balancer, phase, quitter)
            if answer is None or not 200 <= answer.status < 300:
                break
            done.append(step)
        job.done = tuple(done)
        return job

    def _steps(self, job: Job, rng: random.Random):
        """(step, method, path, request keywords) of one job's workflow, in order."""
        base, titles = f"/v1/jobs/{job.job_id}", job.titles()
        yield "job", "PUT", base, {"json": {"site": SITE_NAME, "task_version": 1}}
        for slot in SLOTS:
            image = png_bytes(tuple(rng.randrange(256) for _ in range(3)), 2)
            form = {
                "files": {"file": (f"{slot}.png", image)},
                "data": {"title": titles[f"media:{slot}"]},
            }
            yield f"media:{slot}", "PUT", f"{base}/media/{slot}", form
        body = draft_body(
            title=titles["draft"],
            featured_media={"slot": "hero"},
            body_media=["one", "two"],
            content="<p>soak</p>{{media:one}}<p>again</p>{{media:two}}",
        )
        yield "draft", "PUT", f"{base}/draft", {"json": body}

    def _send(self, job, step, method, path, kwargs, rng, phase, quitter) -> Answer | None:
        """One request, sent again (the same bytes) while the answer is worth retrying and the
        deadline allows; the last answer, or None when the workflow gave up."""
        deadline = time.monotonic() + self.deadline
        while True:
            node = rng.randrange(len(self.urls))
            answer = self._attempt(job, step, node, method, path, kwargs, phase)
            if not answer.worth_retrying():
                return answer
            if quitter or time.monotonic() > deadline:
                return None
            if self.halted.wait(0.5 + rng.random()):  # Retry-After is a few seconds at most
                return None

    def _attempt(self, job, step, node, method, path, kwargs, phase) -> Answer:
        try:
            response = requests.request(
                method, self.urls[node] + path, headers=self.headers, timeout=(5, 60), **kwargs
            )
        except requests.RequestException as error:
            answer = Answer(job.job_id, step, node, None, error=repr(error), phase=phase)
        else:
            answer = Answer(
                job.job_id,
                step,
                node,
                response.status_code,
                *_problem(response),
                request_id="X-Request-Id" in response.headers,
                retry_after="Retry-After" in response.headers,
                phase=phase,
            )
        with self._lock:
            self.answers.append(answer)
        return answer


def _problem(response: requests.Response) -> tuple:
    """(slug, retryable) of a problem+json answer, else (None, None)."""
    if "json" not in response.headers.get("Content-Type", ""):
        return None, None
    try:
        body = response.json()
    except ValueError:
        return None, None
    if not isinstance(body, dict) or "type" not in body:
        return None, None
    return str(body["type"]).rsplit("/", 1)[-1], body.get("retryable")
