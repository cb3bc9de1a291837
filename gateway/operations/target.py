"""Where a job's side effects go (:class:`Target`), built in one place (:func:`target_for`)."""

from __future__ import annotations

from functools import cached_property

from gateway.core.config import Config
from gateway.ledger.models import Job
from gateway.ledger.models import Site
from gateway.operations import refusals
from gateway.tenancy import site_slots
from gateway.tenancy import sites
from gateway.tenancy import tenant_shares
from gateway.tenancy.sites import Companion
from gateway.wordpress import Transport
from gateway.wordpress.errors import WordPressError


class Target:
    """Where a job's side effects go: the job, its site, a client and the site's guarantees.

    The site row, the client (which decrypts the site's application password) and the
    companion-plugin detection are made on first use, so a replay answered from the ledger
    costs none of them. ``fenced``: the caller works under the job's lease (workflow tokens,
    the agent worker) and sent ``fencing_token``; editors are not fenced. Build one with
    :func:`target_for`.
    """

    def __init__(
        self,
        config: Config,
        job: Job,
        fencing_token: int | None = None,
        fenced: bool = False,
        site: Site | None = None,
    ):
        self.config = config
        self.job = job
        self.fencing_token = fencing_token
        self.fenced = fenced  # a workflow's call: the job's lease applies (editors are not)
        self._site = site

    @property
    def site(self) -> Site:
        """The job's site as stored now, read once per target (raises SiteNotFound when it
        was removed)."""
        if self._site is None:
            self._site = sites.get_site(self.job.tenant, self.job.site)
        return self._site

    def hold_request(self) -> None:
        """Take the tenant's request share for the current request
        (:func:`gateway.tenancy.tenant_shares.enter_request`, in memory): at the first step
        that waits on something outside the gateway (WordPress, an image download), never
        for what the ledger answers alone (a replay, a refusal, a job's state).

        Raises:
            TenantBusy (429): the tenant is at its request share in this worker.
        """
        tenant_shares.enter_request(self.config, self.job.tenant)

    def hold_slot(self) -> None:
        """Take the tenant's request share (:meth:`hold_request`) and its share of the site
        (:mod:`gateway.tenancy.tenant_shares`, in memory), then one of the site's concurrency
        slots (:mod:`gateway.tenancy.site_slots`) for the caller's scope, the one place every
        path to WordPress takes them: before a side effect is claimed, and before a client is
        made.

        Raises:
            TenantBusy (429): the tenant is at its request share in this worker, or its
                callers on this site in this worker are at ``GATEWAY_TENANT_SITE_CALLS``.
            SiteBusy (429): every slot of the site is held.
        """
        self.hold_request()
        tenant_shares.hold_site(self.config, self.job.tenant, self.site.id)
        site_slots.hold(self.config, self.site.id)

    @cached_property
    def client(self) -> Transport:
        """A client of the site's transport (REST or XML-RPC) with its credentials as stored
        now; inside a caller's scope this takes one of the site's concurrency slots first
        (:meth:`hold_slot`: 429 ``site-busy`` when none is free, before any WordPress call over
        either transport)."""
        self.hold_slot()
        return sites.client_for(self.site, self.config.secret_key, self.config.wp_timeout)

    @cached_property
    def companion(self) -> Companion:
        """What the site guarantees (companion plugin detection, cached per process).

        Raises:
            WordPressUnavailable (503) / UpstreamRefused (502): WordPress could not be asked
                (:func:`gateway.operations.refusals.unreachable`); never a guess that the
                plugin is absent.
        """
        try:
            return sites.companion(self.site, self.client, strict=True)
        except WordPressError as error:
            raise refusals.unreachable(error) from error


def target_for(
    config: Config, job: Job, fencing_token: int | None = None, fenced: bool = False
) -> Target:
    """The WordPress target of ``job``: its site as stored now (credentials and the companion
    plugin's guarantees are resolved on first use). ``fenced``: the caller works under the
    job's lease (workflow tokens, the agent worker) and sent ``fencing_token``. A job read
    with its site (:func:`gateway.jobs.records.get_job` ``with_site``) hands that row on:
    the site is not read again.

    Raises:
        SiteNotFound: the job's site was removed (on first use of ``site``).
    """
    return Target(config, job, fencing_token, fenced, site=getattr(job, "site_row", None))
