"""Prometheus metrics, read from the ledger at scrape time (``prometheus_client`` custom
collector). The ledger is shared by every gunicorn worker and gateway instance, so any worker
answers ``GET /metrics`` with the same, whole-system figures - no multiprocess directory needed.
"""

from __future__ import annotations

from peewee import fn
from prometheus_client.core import CounterMetricFamily
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import CollectorRegistry

from gateway import ledger
from gateway.ledger import Counter
from gateway.ledger import Operation
from gateway.ledger import Review
from gateway.report import REFUSAL_COUNTERS


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
            .where(Review.status == "open")
            .group_by(Review.tenant)
            .tuples()
        ):
            reviews.add_metric([tenant], count)
        yield reviews
        for name in REFUSAL_COUNTERS:
            counter = CounterMetricFamily(f"gateway_{name}", name.replace("_", " "))
            counter.add_metric([], ledger.counter(name))
            yield counter
            # A tenant's share: refusals of its own tokens (a 401 has no tenant to count for).
            per_tenant = CounterMetricFamily(
                f"gateway_tenant_{name}",
                name.replace("_", " ") + " of each tenant's own tokens",
                labels=["tenant"],
            )
            prefix = ledger.counter_name(name, "")
            rows = Counter.select().where(Counter.name.startswith(prefix))
            for row in rows:
                per_tenant.add_metric([row.name[len(prefix) :]], row.value)
            yield per_tenant


def registry() -> CollectorRegistry:
    """A registry holding only the ledger collector (no per-process default metrics, which
    would differ between gunicorn workers)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(LedgerCollector())
    return reg
