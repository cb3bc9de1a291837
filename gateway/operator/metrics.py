"""Prometheus metrics (``prometheus_client``), from two sources:

* **the ledger**, read at scrape time by a custom collector: operations by state, open review
  items, acceptance counters. The ledger is shared by every worker and instance, so these are
  whole-system figures whichever worker answers.
* **this server's traffic**: requests by route, method and status with a latency histogram,
  and WordPress calls by outcome with a latency histogram. These happen in the server's
  workers, each its own process, so they use prometheus_client's *multiprocess mode*:
  ``gateway serve`` creates an empty directory per server start and names it in
  ``PROMETHEUS_MULTIPROC_DIR`` before any worker imports this module; each worker writes its
  values to memory-mapped files there and :class:`MultiProcessCollector` sums them at scrape
  time, so any worker's answer covers all of them (also workers that were replaced). Counting
  in the ledger instead would add a write to every request and every WordPress call; a
  per-process registry would answer with one worker's share only.

Without the variable (tests, ``flask`` development) the same metrics live in this process.

Calls without a valid token are counted here (``gateway_unauthenticated_calls``), never in the
ledger: a flood of them writes nothing. Tenant names are labels of several families; without
``GATEWAY_METRICS_TOKEN`` (an open ``/metrics``) every family is exposed with the ``tenant``
label summed away (:class:`WithoutTenants`), so an open endpoint names no tenant.
"""

from __future__ import annotations

import os

import prometheus_client
from peewee import fn
from prometheus_client import Histogram
from prometheus_client import multiprocess
from prometheus_client.core import CounterMetricFamily
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import CollectorRegistry

from gateway.core.states import REVIEW_UNRESOLVED
from gateway.ledger import models
from gateway.ledger.models import AgentWorkerState
from gateway.ledger.models import Counter
from gateway.ledger.models import Operation
from gateway.ledger.models import Review
from gateway.operator.report import REFUSAL_COUNTERS


class LedgerCollector:
    """Operations by tenant, action and state; open review items; acceptance counters, in
    all and per tenant."""

    def collect(self):
        operations = GaugeMetricFamily(
            "gateway_operations",
            "Ledger rows by tenant, action and state",
            labels=["tenant", "action", "state"],
        )
        query = (
            Operation.select(
                Operation.tenant,
                Operation.action,
                Operation.state,
                fn.COUNT(Operation.id).alias("n"),
            )
            .group_by(Operation.tenant, Operation.action, Operation.state)
            .tuples()
        )
        for tenant, action, state, count in query:
            operations.add_metric([tenant, action, state], count)
        yield operations
        reviews = GaugeMetricFamily(
            "gateway_open_reviews", "Open review items by tenant", labels=["tenant"]
        )
        for tenant, count in (
            Review.select(Review.tenant, fn.COUNT(Review.id))
            .where(Review.status.in_(REVIEW_UNRESOLVED))
            .group_by(Review.tenant)
            .tuples()
        ):
            reviews.add_metric([tenant], count)
        yield reviews
        for name in REFUSAL_COUNTERS:
            counter = CounterMetricFamily(f"gateway_{name}", name.replace("_", " "))
            counter.add_metric([], models.counter(name))
            yield counter
            # A tenant's share: refusals of its own tokens (a 401 has no tenant to count for).
            per_tenant = CounterMetricFamily(
                f"gateway_tenant_{name}",
                name.replace("_", " ") + " of each tenant's own tokens",
                labels=["tenant"],
            )
            prefix = models.counter_name(name, "")
            rows = Counter.select().where(Counter.name.startswith(prefix))
            for row in rows:
                per_tenant.add_metric([row.name[len(prefix) :]], row.value)
            yield per_tenant
        yield _agent_worker_paused()


def _agent_worker_paused() -> GaugeMetricFamily:
    """1 while OpenAI refuses the gateway's key (the agent workers are paused), labelled with
    the HTTP status OpenAI answered; 0 otherwise (:mod:`gateway.agents.openai_key`)."""
    gauge = GaugeMetricFamily(
        "gateway_agent_worker_paused",
        "1 while the agent workers are paused because OpenAI refused the gateway's key",
        labels=["status"],
    )
    row = AgentWorkerState.get_or_none(AgentWorkerState.name == "openai")
    if row is not None and row.paused_reason is not None:
        gauge.add_metric([str(row.paused_status or "")], 1)
    else:
        gauge.add_metric([""], 0)
    return gauge


MULTIPROCESS_DIR = "PROMETHEUS_MULTIPROC_DIR"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

REQUESTS = prometheus_client.Counter(
    "gateway_http_requests",
    "HTTP requests answered, by route template, method and status",
    ["route", "method", "status"],
    registry=None,
)
REQUEST_SECONDS = Histogram(
    "gateway_http_request_duration_seconds",
    "Time to answer an HTTP request, by route template, method and status",
    ["route", "method", "status"],
    buckets=LATENCY_BUCKETS,
    registry=None,
)
WORDPRESS_CALLS = prometheus_client.Counter(
    "gateway_wordpress_calls",
    "WordPress calls by method (REST: the HTTP method; XML-RPC: the method name, e.g. "
    "wp.newPost) and outcome (ok, refused, unknown, unavailable)",
    ["method", "outcome"],
    registry=None,
)
WORDPRESS_SECONDS = Histogram(
    "gateway_wordpress_call_duration_seconds",
    "Time of one WordPress call (REST or XML-RPC), by outcome",
    ["outcome"],
    buckets=LATENCY_BUCKETS,
    registry=None,
)
UNAUTHENTICATED_CALLS = prometheus_client.Counter(
    "gateway_unauthenticated_calls",
    "Calls without a valid token (no ledger write), by answer: refused (401) or limited (429 "
    "unauthenticated-rate-limited: GATEWAY_UNAUTHENTICATED_RATE, or a body sent before any "
    "token is checked past its cap, gateway/tenancy/tokenless.py)",
    ["answer"],
    registry=None,
)
TENANT_BUSY = prometheus_client.Counter(
    "gateway_tenant_busy",
    "Requests refused with 429 tenant-busy, by tenant and share (requests, site_calls)",
    ["tenant", "share"],
    registry=None,
)
_TRAFFIC = (
    REQUESTS,
    REQUEST_SECONDS,
    WORDPRESS_CALLS,
    WORDPRESS_SECONDS,
    UNAUTHENTICATED_CALLS,
    TENANT_BUSY,
)


def observe_request(route: str, method: str, status: int, seconds: float) -> None:
    """Count one answered request (``route`` is the URL rule, e.g. ``/v1/jobs/<job_id>``)."""
    labels = (route, method, str(status))
    REQUESTS.labels(*labels).inc()
    REQUEST_SECONDS.labels(*labels).observe(seconds)


def observe_wordpress(
    method: str, _route: str, _status: int | None, outcome: str, seconds: float
) -> None:
    """A :data:`gateway.wordpress.client.OBSERVERS` entry: count one WordPress call."""
    WORDPRESS_CALLS.labels(method, outcome).inc()
    WORDPRESS_SECONDS.labels(outcome).observe(seconds)


def count_unauthenticated(answer: str) -> None:
    """Count one call without a valid token (``answer``: ``refused`` or ``limited``)."""
    UNAUTHENTICATED_CALLS.labels(answer).inc()


def count_tenant_busy(tenant: str, share: str) -> None:
    """Count one 429 ``tenant-busy`` of ``tenant`` (``share``: requests, site_calls)."""
    TENANT_BUSY.labels(tenant, share).inc()


class WithoutTenants:
    """Wraps a registry: every family it collects, with the ``tenant`` label summed away
    (samples equal in every other label are added up)."""

    def __init__(self, inner: CollectorRegistry):
        self.inner = inner

    def collect(self):
        for family in self.inner.collect():
            merged: dict[tuple, object] = {}
            for sample in family.samples:
                labels = {k: v for k, v in sample.labels.items() if k != "tenant"}
                key = (sample.name, tuple(sorted(labels.items())))
                if key in merged and sample.name.endswith("_created"):
                    continue  # a creation time, not a count: the first one stands
                if key in merged:
                    merged[key] = merged[key]._replace(value=merged[key].value + sample.value)
                else:
                    merged[key] = sample._replace(labels=labels)
            family.samples = list(merged.values())
            yield family


def registry(with_tenants: bool = True) -> CollectorRegistry:
    """What ``GET /metrics`` exposes: the ledger collector plus the traffic metrics, summed
    over every worker of this server in multiprocess mode. No per-process default metrics
    (they would differ between workers). ``with_tenants=False`` (no metrics token set): the
    same figures without the ``tenant`` label."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(LedgerCollector())
    if os.environ.get(MULTIPROCESS_DIR):
        multiprocess.MultiProcessCollector(reg)
    else:
        for metric in _TRAFFIC:
            reg.register(metric)
    if with_tenants:
        return reg
    outer = CollectorRegistry(auto_describe=False)
    outer.register(WithoutTenants(reg))
    return outer
