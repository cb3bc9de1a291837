"""The fair shares' rule, in one worker's memory (gateway/tenancy/tenant_shares.py): a tenant
alone may hold every thread but one; while another tenant is in flight each is held to its
share; the site-call share binds only then. Each "request" runs in a context of its own, as
each of granian's threads does."""

from __future__ import annotations

import contextvars

import pytest

from gateway.core import config as config_module
from gateway.core import exceptions as exc
from gateway.tenancy import tenant_shares

THREADS = 4  # gateway serve's default --threads


@pytest.fixture
def config():
    return config_module.load({"GATEWAY_SECRET_KEY": "k", "GATEWAY_WORKER_THREADS": str(THREADS)})


class Requests:
    """Requests of one tenant held open, each in its own context (a thread's)."""

    def __init__(self, config, tenant: str):
        self.config, self.tenant, self.open = config, tenant, []

    def enter(self) -> None:
        context = contextvars.copy_context()
        context.run(tenant_shares.enter_request, self.config, self.tenant)  # may raise
        self.open.append(context)

    def refused(self) -> exc.TenantBusy:
        with pytest.raises(exc.TenantBusy) as raised:
            self.enter()
        return raised.value

    def leave(self, n: int = 1) -> None:
        for _ in range(n):
            self.open.pop().run(tenant_shares.leave_request)

    def close(self) -> None:
        self.leave(len(self.open))


@pytest.fixture
def tenants(config):
    opened: list[Requests] = []

    def open_for(tenant: str) -> Requests:
        opened.append(Requests(config, tenant))
        return opened[-1]

    yield open_for
    for requests in opened:
        requests.close()


def test_a_tenant_alone_holds_every_thread_but_the_reserve(tenants):
    acme = tenants("acme")
    for _ in range(THREADS - 1):
        acme.enter()
    refusal = acme.refused()
    assert refusal.status == 429 and refusal.retry_after == 1
    assert "alone" in refusal.detail
    acme.leave()
    acme.enter()  # a thread given back is taken again at once


def test_the_reserve_serves_a_second_tenant_and_then_each_is_held_to_its_share(tenants):
    acme, rival = tenants("acme"), tenants("rival")
    for _ in range(THREADS - 1):
        acme.enter()
    rival.enter()  # the reserve: at once, although acme holds three
    assert "another tenant" in acme.refused().detail  # acme is above its share of 2 now
    rival.enter()
    assert "another tenant" in rival.refused().detail  # rival is at its share
    acme.leave(2)  # acme's running requests end: it is below its share again
    acme.enter()
    acme.refused()
    rival.close()  # alone again: back to every thread but one
    acme.enter()
    acme.refused()


def test_the_site_call_share_binds_only_while_another_tenant_is_in_flight(config, tenants):
    def hold(tenant: str, n: int) -> list[contextvars.Context]:
        held = []
        for _ in range(n):
            context = contextvars.copy_context()
            context.run(tenant_shares.start_sites)
            context.run(tenant_shares.hold_site, config, tenant, 7)
            held.append(context)
        return held

    alone = hold("acme", 5)  # above GATEWAY_TENANT_SITE_CALLS (2): nobody else is here
    for context in alone:
        context.run(tenant_shares.release_sites)
    tenants("rival").enter()
    together = hold("acme", 2)
    with pytest.raises(exc.TenantBusy) as raised:
        hold("acme", 1)
    assert raised.value.extensions["share"] == "site_calls"
    for context in together:
        context.run(tenant_shares.release_sites)


def test_no_share_outside_gateway_serve():
    offline = config_module.load({"GATEWAY_SECRET_KEY": "k"})  # worker_threads 0
    acme = Requests(offline, "acme")
    for _ in range(20):
        acme.enter()
    acme.close()


def test_a_noted_caller_takes_its_share_only_at_the_slow_step(config, tenants):
    """Authentication only notes the tenant (no count); an OpenAI call's
    :func:`tenant_shares.enter_noted` takes the share; outside a request it is a no-op."""
    acme = tenants("acme")
    for _ in range(THREADS - 1):
        acme.enter()
    context = contextvars.copy_context()
    context.run(tenant_shares.note_caller, "acme")  # at authentication: nothing counted
    with pytest.raises(exc.TenantBusy):
        context.run(tenant_shares.enter_noted, config)
    acme.leave()
    context.run(tenant_shares.enter_noted, config)  # a thread is free now
    context.run(tenant_shares.leave_request)
    contextvars.copy_context().run(tenant_shares.enter_noted, config)  # no caller: no-op
    acme.enter()  # the share given back by leave_request is free again
