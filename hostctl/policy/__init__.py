"""Policies: one table, one driver protocol.

A policy is a row of ``POLICIES``: how it orders the jobs in priority bands (a band rule of
hostctl.core.bands), how it paces their flows (``rates``: none, ``cap`` or ``mlcc``), whether it
plans with switchemu, which job orders it takes and whether it can order received traffic too.
Everything else asks this table: the config's checks (``Policy.check``), the daemon and
``hostctl start --dry-run`` (both run the policy's driver, ``make_driver``), the CLI's help and
the lab's bench (``VARIANTS``: a policy with options, such as ``mlcc-fixed``). No code outside this
package compares policy names.

The driver (``Driver``) is what the daemon runs: on a change of the jobs (or a rotation) it
returns the band assignment and the classifier table; on every slot it has the pacing
policies' rates planned and written (``PaceControl`` with the policy's ``Rates``: hostctl.policy.cap,
hostctl.policy.mlcc); it reports its status and closes.

Adding a policy touches this package and hostctl/core only. A policy that paces every job's
flows at a fixed share of the link, say, is a new ``Rates`` class (plan() returns per-flow rates,
computed by a pure function in hostctl/core) in a new module here, one entry in ``RATES``
below, and a row::

    Policy("share", "each job paced at an equal share of the link", rates="share"),

Its name is then accepted by ``hostctl start --policy``, the config file, ``--dry-run``, and the
bench (as the variant of the same name).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from hostctl.core.bands import FABRIC
from hostctl.core.joborder import JOB_ORDERS
from hostctl.errors import ConfigError

if TYPE_CHECKING:
    from hostctl.config import Config
    from hostctl.core.plan import ClassifierTable
    from hostctl.core.types import Job

BASELINE = "fifo"  # the policy every other is compared with: shaping, no bands, no pacing


@dataclass(frozen=True)
class Policy:
    name: str
    summary: str
    bands: str = "fifo"  # band rule (hostctl.core.bands): fifo (no bands), one, rr or fabric (mlcc's job order)
    rates: str | None = None  # pacing: None, or a key of RATES (cap, mlcc)
    switch: bool = False  # plans with switchemu when given --switch (else on this host's NIC)
    ingress: bool = False  # can order received traffic by its bands too (--ingress-rate)
    job_orders: tuple[str, ...] = ("none",)  # --job-order values it takes
    default_order: str = "none"  # the job order --job-order none stands for
    needs_jobs: bool = True  # refuses to start without job selectors
    parts: tuple[str, ...] = ()  # a hybrid: the bench policies it combines (the bench compares it with each)

    @property
    def pacing(self) -> bool:
        """Runs the sock_ops pacing datapath and the slot loop."""
        return self.rates is not None

    @property
    def plans_mlcc(self) -> bool:
        """Its flows' rates are planned by mlcc's planner (spread planning offsets, all flows)."""
        return self.rates == "mlcc"

    @property
    def classifies(self) -> bool:
        """Steers jobs into priority bands (the tc classifier)."""
        return self.bands != "fifo"

    def fabric_order(self, job_order: str) -> str:
        """The job order the planner is given and, for band rule fabric, the bands follow."""
        return self.default_order if job_order == "none" else job_order

    def band_order(self, job_order: str) -> str | None:
        """The job order of the bands when they follow mlcc's (band rule fabric), else None."""
        return self.fabric_order(job_order) if self.bands == FABRIC else None

    def band_rotates(self, job_order: str) -> bool:
        """The band assignment changes at wall-clock multiples of rr_interval: rr, and the fabric
        band rule under job order rotate (the planner's order rotates at the same boundaries)."""
        return self.bands == "rr" or (self.bands == FABRIC and self.fabric_order(job_order) == "rotate")

    def check(self, cfg: Config) -> None:
        """The policy's own checks of a config; one ConfigError line naming the fix."""
        if self.rates == "cap" and not cfg.cap_bps and not cfg.job_caps_bps():
            raise ConfigError(f"policy {self.name} needs a rate: give --cap RATE (e.g. --cap 2gbit), "
                              "or cap = in [[jobs]]")
        if self.switch and cfg.curve_keys and not cfg.switch:
            raise ConfigError("curve_keys needs switch endpoints (--switch)")
        if cfg.job_order != "none":
            self._check_order(cfg)
        if cfg.ingress_rate is not None and not self.ingress:
            if not self.classifies:
                raise ConfigError(f"ingress_rate orders received traffic by the bands of {names_with('ingress')}; "
                                  f"policy {self.name} has no bands: drop --ingress-rate")
            raise ConfigError(f"ingress_rate is for {names_with('ingress')}; policy {self.name} orders egress only "
                              "(its bands are on the NIC's egress): drop --ingress-rate")
        if self.needs_jobs and not cfg.jobs:
            raise ConfigError(f"policy {self.name} needs DL jobs to control: give --ports, --pids, --match "
                              "or [[jobs]] in --config")

    def _check_order(self, cfg: Config) -> None:
        if cfg.job_order in self.job_orders and (self.bands == FABRIC or cfg.switch):
            return
        if self.bands == FABRIC:  # its bands need an order
            given = [o for o in self.job_orders if o != "none"]
            raise ConfigError(f"--policy {self.name} puts the jobs in bands in mlcc's job order: give --job-order "
                              f"{', '.join(given[:-1])} or {given[-1]}, not {cfg.job_order} (no order)")
        planners = " or ".join(p.name for p in POLICIES.values() if len(p.job_orders) > 1 and p.bands != FABRIC)
        followers = " or ".join(p.name for p in POLICIES.values() if len(p.job_orders) > 1 and p.bands == FABRIC)
        raise ConfigError(f"job order {cfg.job_order!r} orders jobs on the fabric's links through the switches: it "
                          f"needs --policy {planners} with --switch ENDPOINT (or --policy {followers}, whose bands "
                          "follow it)")


# rates kind -> "module:class" of its Rates (hostctl.policy.pacing.Rates), imported when a daemon runs it
RATES: dict[str, str] = {
    "cap": "hostctl.policy.cap:CapRates",
    "mlcc": "hostctl.policy.mlcc:MlccRates",
}

POLICIES: dict[str, Policy] = {p.name: p for p in (
    Policy("fifo", "the baseline: the same shaping, no bands, no pacing", needs_jobs=False),
    Policy("one", "TensorLights-One: strict priority bands, smaller model update first", bands="one", ingress=True),
    Policy("rr", "TensorLights-RR: priority bands whose order rotates every rr_interval", bands="rr", ingress=True),
    Policy("cap", "each job's flows paced to its rate cap", rates="cap"),
    Policy("mlcc", "MLCC: every flow's rate planned per 60 ms slot over K slots (switchemu or local)",
           rates="mlcc", switch=True, job_orders=JOB_ORDERS),
    Policy("mlcc-bands", "mlcc's plans plus TensorLights bands in mlcc's fabric job order", bands=FABRIC,
           rates="mlcc", switch=True, job_orders=("none", "fixed", "rotate", "smallest"), default_order="fixed",
           # mlcc's planner with --job-order fixed (bench policy mlcc-fixed; plain mlcc has no order) plus bands
           parts=("one", "mlcc-fixed", "mlcc")),
)}


def names_with(attr: str) -> str:
    """'policies a, b and c' (or 'policy a'): the policies whose row has ``attr`` true, for messages."""
    names = [p.name for p in POLICIES.values() if getattr(p, attr)]
    if len(names) == 1:
        return f"policy {names[0]}"
    return f"policies {', '.join(names[:-1])} and {names[-1]}"


def get(name: str) -> Policy:
    """The policy of that name; ConfigError naming the choices otherwise."""
    try:
        return POLICIES[name]
    except KeyError:
        raise ConfigError(f"unknown policy {name!r}: choose one of {', '.join(POLICIES)}") from None


# -- variants: a policy with options, as the lab's bench runs it ------------------------------------------


@dataclass(frozen=True)
class Variant:
    """A bench policy: ``hostctl start --policy POLICY`` with options. A lab oracle (``fabric_prio``)
    runs fifo on the hosts and the job order in the emulated switches instead."""

    name: str
    policy: str
    switch: bool = False  # run switchemu and give the daemons --switch
    job_order: str | None = None  # --job-order
    deps: bool = True  # --no-deps when False
    ingress: bool = False  # --ingress-rate
    fabric_prio: bool = False  # lab oracle: strict job priority in the switches (Testbed.prioritize_fabric)
    summary: str = ""

    @property
    def spec(self) -> Policy:
        return POLICIES[self.policy]

    @property
    def parts(self) -> tuple[str, ...]:
        """The bench policies a hybrid combines (empty for the others and for a hybrid's variants)."""
        return self.spec.parts if self.name == self.policy else ()


def _variants() -> dict[str, Variant]:
    v: list[Variant] = []
    for p in POLICIES.values():
        # a policy that can plan with switchemu runs with it; the hybrid with mlcc-fixed's order, so that it
        # differs from mlcc-fixed by its bands only
        v.append(Variant(p.name, p.name, switch=p.switch,
                         job_order=p.default_order if p.default_order != "none" else None, summary=p.summary))
    v += [
        Variant("mlcc-local", "mlcc", summary="mlcc without switchemu (each host plans on its own NIC)"),
        Variant("mlcc-nodeps", "mlcc", switch=True, deps=False, summary="mlcc without Algorithm 2's dependency rules"),
        *(Variant(f"mlcc-{o}", "mlcc", switch=True, job_order=o, summary=f"mlcc with --job-order {o}")
          for o in ("fixed", "rotate", "smallest", "flat")),
        *(Variant(f"{p.name}-ingress", p.name, ingress=True, summary=f"{p.name} with ingress bands")
          for p in POLICIES.values() if p.ingress),
        Variant("fabric-prio", BASELINE, fabric_prio=True, job_order="fixed",
                summary="lab oracle: fifo hosts, strict job priority in the emulated switches in mlcc-fixed's order"),
    ]
    return {x.name: x for x in v}


VARIANTS: dict[str, Variant] = _variants()


def variant(name: str) -> Variant:
    try:
        return VARIANTS[name]
    except KeyError:
        raise ConfigError(f"unknown policy {name!r}; choose from {', '.join(VARIANTS)}") from None


# -- the driver ----------------------------------------------------------------------------------------------


class Driver(Protocol):
    """What the daemon runs for its policy (hostctl.policy.driver.HostDriver implements it)."""

    policy: Policy

    def epoch(self, wall: float) -> int:
        """The rotation count of the band order at this wall-clock time (0 if it never rotates)."""

    def classifier(self, jobs: Mapping[str, Job], epoch: int,
                   slots: Mapping[str, int]) -> tuple[dict[str, int], ClassifierTable]:
        """On a change of the jobs or of the epoch: job id -> band, and the classifier table (job
        slots kept from ``slots``)."""

    def on_slot(self, now: float, jobs: Mapping[str, Job]) -> None:
        """Pacing policies, every slot: plan the flows' rates and write them (PaceControl.tick)."""

    def describe(self, jobs: Mapping[str, Job]) -> dict | None:
        """--dry-run: what the pacing would be given now (None: no pacing)."""

    def status(self) -> dict | None:
        """The pacing status (None: no pacing)."""

    def close(self) -> None:
        """Release what the driver holds (the switch connection)."""


def make_driver(config: Config, datapath, *, link_rate_bps: int, switch=None,
                mono: Callable[[], float] | None = None, wall: Callable[[], float] | None = None) -> Driver:
    """The driver of config.policy. ``datapath``: where the pacing goes (None for --dry-run)."""
    from hostctl.policy.driver import HostDriver

    return HostDriver(config, datapath, link_rate_bps=link_rate_bps, switch=switch, mono=mono, wall=wall)
