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
from gateway.ledger import Operation
from gateway.ledger import Review


class LedgerCollector:
    """Operations by tenant, action and state; open review items; acceptance counters."""

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
        for name in ("unauthorized_calls", "rejected_checkpoint_advances"):
            counter = CounterMetricFamily(f"gateway_{name}", name.replace("_", " "))
            counter.add_metric([], ledger.counter(name))
            yield counter


def registry() -> CollectorRegistry:
    """A registry holding only the ledger collector (no per-process default metrics, which
    would differ between gunicorn workers)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(LedgerCollector())
    return reg
