"""MLCC and its simulator baselines as network policies of the cluster simulator (docs/sim-mlcc.md).

``ClusterSim`` calls a policy object through a few hooks (``NetPolicy``): a job's exchange as phases,
a flow's cap or class when it starts, a hold before an exchange, a look before each re-solve, and a
periodic tick that returns the jobs whose caps changed (their components are re-solved). Rates still
come from the one kernel (``hostctl_lab.sim.kernel``): max-min fair under the caps the policy set.

- ``mlcc`` (local view) and ``mlcc-switch`` (switch view): every slot (``slot_s``, 60 ms), every host
  with a flow that sends runs the daemon's decision, ``hostctl.core.mlccplan.plan_slot``, on its
  connections (one per job and receiver: a pacer's rate lives as long as the socket), and every flow is
  capped at its connection's applied rate until the next slot, a flow that starts mid-slot included
  (the pacer keeps the socket's last rate; a connection never planned is uncapped). ``mlcc`` plans the
  host's NIC alone with no other host's load (the daemon without switchemu: ``FabricView.empty``);
  ``mlcc-switch`` plans every link of the paths, around what the other hosts published in the slot
  before (``hostctl_lab.mlcctable.ScheduleTable``, what switchemu would answer), in arrival order, with
  Algorithm 2's roles (the daemon's default ``deps=True`` in switch mode): ring flows depend on the
  flow into their sender, a PS's broadcast flows on its aggregation flows. New caps within the daemon's
  ``RATE_DEADBAND`` (3%) of the current one are not written, as the daemon does.
- ``mcs``: multi-stage coflow scheduling on one logical switch (each host's egress and ingress port;
  no routing). Start-after dependencies: a ring all-reduce is 2(S-1) stages of S flows of size/S (a
  worker forwards a chunk only after it received it completely; every stage is one coflow), a PS
  broadcasts after the aggregation completes (the simulator's PS model already does). At every coflow
  start or end the scheduler orders the coflows smallest effective bottleneck first on the logical
  switch, gives each its MADD rates (every flow of a coflow ends together) on what the coflows before
  it left, then gives what is left to flows in that order (work conservation); the rates are the
  flows' caps, and the real fabric shares itself max-min under them.
- ``ccml``: host-side interleaving from profiled iteration times. When a job starts, its iteration is
  profiled alone (compute + its exchange alone on the fabric: T, period P). At the end of each compute
  the job starts its exchange at once unless that falls in the predicted communication window of a job
  it shares a server with (windows repeat every P from the job's last exchange start, T long): then it
  waits for the end of that window (and of any window it runs into, up to one period P of its own).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hostctl.core.mlcc import MlccParams, Role
from hostctl.core.mlcchost import wait_floor_Bps
from hostctl.core.mlccplan import FabricView, plan_slot
from hostctl.errors import ConfigError
from hostctl.policy.mlcc import RATE_DEADBAND
from hostctl_lab.mlcctable import ScheduleTable

POLICIES = ("mlcc", "mlcc-switch", "mcs", "ccml")
K_SLOTS = 10  # the paper's horizon


class NetPolicy:
    """The hooks ClusterSim calls (defaults: no effect)."""

    tick_s: float | None = None  # period of tick() (None: no tick)
    fast_forward_ok = True  # a job alone on its links may be fast-forwarded (ClusterSim.try_fast_forward)
    steady_ok = False  # --steady may park a component (its jobs' state here survives parked()/unparked())

    def __init__(self, sim) -> None:
        self.sim = sim

    def exchange(self, spec, servers):
        """An iteration's exchange as phases (None: ClusterSim's own, cluster.exchange)."""
        return None

    def job_started(self, i: int) -> None: ...

    def job_finished(self, i: int) -> None: ...

    def hold(self, i: int) -> bool:
        """At the end of job i's compute: True if the policy delays its exchange (it queues the event)."""
        return False

    def flow_started(self, f) -> None: ...

    def flow_ended(self, f) -> None: ...

    def before_resolve(self) -> None: ...

    def tick(self) -> set[int]:
        return set()

    def parked(self, jobs: tuple) -> None:
        """--steady took these jobs off the fabric (their flows with them, not ended)."""

    def unparked(self, jobs: tuple) -> None:
        """... and put them back, their flows as they were."""

    def next_tick(self) -> float | None:
        """After tick(): when the next tick is due, or None while ticks would change nothing until a flow
        starts (the sim then calls wake() before that flow's flow_started)."""
        return None

    def wake(self, now: float) -> float:
        """A flow starts at ``now`` while ticks sleep: the policy's clock set to now; the next tick's time."""
        raise NotImplementedError


def make(network: str, sim, slot_s: float = 0.06) -> NetPolicy | None:
    if network not in POLICIES:
        return None
    if not (isinstance(slot_s, (int, float)) and 0 < slot_s < math.inf):
        raise ConfigError(f"--slot must be a positive number of seconds, got {slot_s!r}")
    if network == "mcs":
        return Mcs(sim)
    if network == "ccml":
        return Ccml(sim)
    return Mlcc(sim, switch=network == "mlcc-switch", slot_s=float(slot_s))


def left_now(f, now: float) -> float:
    """Bytes a flow has left now (its bytes are brought up to date only at solves)."""
    return max(0.0, f.left - f.rate * (now - f.t))


# ------------------------------------------------------------------------------------------------ MLCC
@dataclass
class Conn:
    """One connection (job, sender, receiver): its iteration's bytes, path, Algorithm 2's role."""

    job: int
    src: int
    dst: int
    iter_bytes: float
    links: np.ndarray
    role: int = Role.NONE.value
    slack: float = 0.0
    refs: tuple = ()  # connections whose reports make the reference (ring: the predecessor)
    notifiers: tuple = ()  # connections whose notifications set the ceiling


class Mlcc(NetPolicy):
    sleep_ticks = True  # False: tick through idle slots (the tests compare both)

    def __init__(self, sim, *, switch: bool, slot_s: float = 0.06, K: int = K_SLOTS) -> None:
        super().__init__(sim)
        self.switch = switch
        self.tick_s = slot_s
        self.params = MlccParams(slot_s=slot_s, K=K)
        self.floor = wait_floor_Bps(slot_s)
        self.table = ScheduleTable(K) if switch else None
        # switch view: a job alone on its links still publishes, and the arrival order the table keeps
        # depends on when its exchanges were busy: no fast-forward (exact, slower)
        self.fast_forward_ok = not switch
        # local view: a host plans its own connections only, and all of a host's sending jobs share its
        # NIC, so they park together; a parked connection is held (not planned, its pacer rate kept).
        # The switch view's table and arrival order span components: no --steady there
        self.steady_ok = not switch
        self.held: dict[tuple, object] = {}  # connection -> its flow, while its job is parked
        self.deps = switch  # the daemon runs Algorithm 2 in switch mode (deps=True by default)
        self.conns: dict[int, dict[tuple, Conn]] = {}  # host -> its connections (of running jobs)
        self.key: dict[tuple, tuple] = {}  # (job, src, last link of the path) -> connection
        self.flow: dict[tuple, object] = {}  # connection -> its flow now
        self.applied: dict[tuple, float] = {}  # connection -> the rate its pacer holds
        self.reports: dict[tuple, tuple] = {}  # connection -> (iteration, F, slot-0 rate) of the last slot
        self.notes: dict[tuple, tuple] = {}  # connection -> (iteration, ceiling it told its receiver)
        self.planned: dict[int, int] = {}  # host -> the slot it was last planned in
        self.slot = 0
        self.stats = {"plans": 0, "lazy_plans": 0, "shortcuts": 0, "cap_writes": 0, "max_nic_overbook": 0.0}

    # -- jobs and flows
    def job_started(self, i: int) -> None:
        sim = self.sim
        j = sim.jobs[i]
        made: dict[tuple, Conn] = {}
        for p, pairs in enumerate(j.phases):
            for a, b, nb in pairs:
                c = made.get((i, a, b))
                if c is None:
                    path = sim.fab.path(a, b)
                    role = Role.RING.value if j.spec.kind != "ps" else (Role.AGGREGATION.value if p == 0
                                                                         else Role.BROADCAST.value)
                    c = made[(i, a, b)] = Conn(i, a, b, 0.0, path, role)
                    self.key[(i, a, int(path[-1]))] = (i, a, b)
                c.iter_bytes += nb
        into = {c.dst: k for k, c in made.items() if c.role == Role.RING.value}
        S = len(j.servers)
        for k, c in made.items():
            if c.role == Role.RING.value:
                pred = into.get(c.src)
                c.refs = c.notifiers = (pred,) if pred is not None else ()
                c.slack = c.iter_bytes / (2 * (S - 1)) if S > 1 else c.iter_bytes
            elif c.role == Role.AGGREGATION.value:  # reference: the PS's broadcast flows (F_b^max)
                c.refs = tuple(x for x, d in made.items() if d.role == Role.BROADCAST.value and d.src == c.dst)
            else:  # broadcast: reference and ceiling from the PS's aggregation flows (F_a^min)
                c.refs = c.notifiers = tuple(x for x, d in made.items()
                                             if d.role == Role.AGGREGATION.value and d.dst == c.src)
        for k, c in made.items():
            self.conns.setdefault(c.src, {})[k] = c

    def job_finished(self, i: int) -> None:
        for s in self.sim.jobs[i].servers:
            hc = self.conns.get(s)
            if hc is None:
                continue
            for k in [k for k in hc if k[0] == i]:
                del hc[k]
                for d in (self.applied, self.reports, self.notes, self.flow, self.held):
                    d.pop(k, None)
            if not hc:
                del self.conns[s]
        for k in [k for k in self.key if k[0] == i]:
            del self.key[k]

    def conn_of(self, f) -> tuple:
        return self.key[(f.job, f.src, int(f.path[-1]))]

    def flow_started(self, f) -> None:
        k = self.conn_of(f)
        self.flow[k] = f
        if self.planned.get(f.src, -1) != self.slot and k in self.applied:
            # the host had nothing to send at this slot's start, so it did not plan here: its plan of the
            # slot (every flow idle) is made now, with the table of the slot
            self.plan_host(f.src, lazy=True)
        f.cap = self.applied.get(k, math.inf)  # a connection never planned: uncapped (no pacer rate yet)

    def flow_ended(self, f) -> None:
        k = self.conn_of(f)
        if self.flow.get(k) is f:
            del self.flow[k]

    def parked(self, jobs: tuple) -> None:
        js = set(jobs)
        for k in [k for k in self.flow if k[0] in js]:
            self.held[k] = self.flow.pop(k)

    def unparked(self, jobs: tuple) -> None:
        js = set(jobs)
        for k in [k for k in self.held if k[0] in js]:
            self.flow[k] = self.held.pop(k)

    # -- the slot
    def next_tick(self) -> float | None:
        """Slot k starts at k x slot_s. With no flow anywhere a tick plans nothing (every host is
        skipped) and, once the switch view's table is empty, publishes nothing new: the ticks sleep
        until the next flow starts, and the slot count goes on from wake() (the same plans as ticking
        through: tests/unit/test_sim_mlcc.py)."""
        if self.sleep_ticks and not self.flow and (self.table is None or self.table.empty()):
            return None
        return (self.slot + 1) * self.tick_s

    def wake(self, now: float) -> float:
        # the last slot whose tick (at k x slot_s) is before now; a tick due at now itself comes after this
        # flow, as when ticking through it comes after an event queued before the tick was (a compute end)
        k = int(math.floor(now / self.tick_s))
        while (k + 1) * self.tick_s < now:
            k += 1
        while k > 0 and k * self.tick_s >= now:
            k -= 1
        self.slot = max(self.slot, k)
        return (self.slot + 1) * self.tick_s

    def tick(self) -> set[int]:
        self.slot += 1
        dirty: set[int] = set()
        entries: list = []
        for h in sorted(self.conns):
            hc = self.conns[h]
            if not any(k in self.flow for k in hc):
                continue  # nothing to send: planned lazily if a flow starts this slot
            if not self.switch and len(hc) == 1:
                # local view, one connection: the plan is the NIC's capacity whatever its bytes (Algorithm 1
                # on a free link: the whole link, or a plan that ends in slot 0, paced at the headroom);
                # tests/unit/test_sim_mlcc.py checks this against plan_slot
                self.shortcut(h, dirty)
                continue
            entries += self.plan_host(h, dirty=dirty)
        if self.table is not None:
            self.table.publish(entries)
        return dirty

    def shortcut(self, h: int, dirty: set) -> None:
        """A host with one connection, local view: its applied rate is its NIC's capacity."""
        self.planned[h] = self.slot
        self.stats["shortcuts"] += 1
        (k, c), = self.conns[h].items()
        rate = float(self.sim.fab.capacity[int(c.links[0])])
        self.applied[k] = rate
        f = self.flow.get(k)
        if f is not None and abs(rate - f.cap) > RATE_DEADBAND * min(rate, f.cap):
            f.cap = rate
            self.stats["cap_writes"] += 1
            dirty.add(c.job)

    def plan_host(self, h: int, *, dirty: set | None = None, lazy: bool = False) -> list:
        """Host h's decision for the current slot (plan_slot), its caps written; returns its schedules
        (job, host, links, K rates) for the table."""
        sim, now, t = self.sim, self.sim.now, self.params.slot_s
        self.planned[h] = self.slot
        self.stats["lazy_plans" if lazy else "plans"] += 1
        ks = list(self.conns[h])
        cs = [self.conns[h][k] for k in ks]
        n = len(ks)
        flows = [None if lazy else self.flow.get(k) for k in ks]
        G = np.array([left_now(f, now) if f is not None else 0.0 for f in flows])
        moving = np.array([f is not None for f in flows])
        sent = np.array([c.iter_bytes - g if f is not None else c.iter_bytes for c, f, g in zip(cs, flows, G)])
        jobs = list(dict.fromkeys(c.job for c in cs))
        jix = {j: x for x, j in enumerate(jobs)}
        fj = np.array([jix[c.job] for c in cs], dtype=np.int64)
        cap_of = sim.fab.capacity
        if self.switch:
            nic = int(cs[0].links[0])
            cols = [nic] + sorted({int(x) for c in cs for x in c.links} - {nic})
            col = {x: y for y, x in enumerate(cols)}
            P = max(len(c.links) for c in cs)
            path = np.array([[col[int(x)] for x in c.links] + [-1] * (P - len(c.links)) for c in cs],
                            dtype=np.int64)
            cap = cap_of[cols]
            view = self.table.view(h, jobs, cols, cap)
            wave = self.table.wave(jobs)[fj]
        else:
            cols = [int(cs[0].links[0])]
            path = np.zeros((n, 1), dtype=np.int64)
            cap = cap_of[cols]
            view = FabricView.empty(cap, len(jobs), self.params.K)
            wave = None
        B = np.array([float(cap_of[c.links].min()) for c in cs])
        kw = {}
        if self.deps:
            kw = self.dep_inputs(cs, ks, sent, G)
        d = plan_slot(G, B, sent, fj, path, view, moving=moving, params=self.params, floor_Bps=self.floor,
                      wave=wave, idle_share=True, **kw)
        r0 = d.slot.rates_Bps[:, 0]
        active = d.slot.kind != "idle"
        over = float(r0[active].sum()) - float(cap[0]) - self.floor * int(active.sum())
        self.stats["max_nic_overbook"] = max(self.stats["max_nic_overbook"], over / float(cap[0]))
        for k, c, rate in zip(ks, cs, d.applied_Bps.tolist()):
            self.applied[k] = rate
            f = self.flow.get(k)
            if f is not None and dirty is not None and abs(rate - f.cap) > RATE_DEADBAND * min(rate, f.cap):
                f.cap = rate
                self.stats["cap_writes"] += 1
                dirty.add(c.job)
        if self.deps:
            # which iteration a report's bytes belong to: the current one while the job exchanges (or the
            # connection sends); the one before while the job computes (an idle connection reports the
            # bytes of the exchange it finished)
            rep = d.reports.tolist()
            nb = d.slot.notify_bytes.tolist() if d.slot.notify_bytes is not None else [math.nan] * n
            for k, c, f, F, r, note in zip(ks, cs, flows, rep, r0.tolist(), nb):
                j = sim.jobs[c.job]
                it = j.done_iters if f is not None or (j.open_flows > 0 and not lazy) else j.done_iters - 1
                self.reports[k] = (it, F, r)
                if note == note:
                    self.notes[k] = (it, note)
                else:
                    self.notes.pop(k, None)
        return [(c.job, h, c.links, d.slot.rates_Bps[x]) for x, c in enumerate(cs)]

    def dep_inputs(self, cs: list[Conn], ks: list, sent: np.ndarray, G: np.ndarray) -> dict:
        """Algorithm 2's inputs, as the daemon builds them from the peers' reports and notifications of
        the last slot (a report's F extrapolated one slot at its rate, core.deps' reference rules), of
        the same iteration only (a report of the iteration before is about other bytes)."""
        t = self.params.slot_s
        ref, ceil = [], []
        for c in cs:
            it = self.sim.jobs[c.job].done_iters
            vals = []
            for x in c.refs:
                rp = self.reports.get(x)
                vals.append(rp[1] + rp[2] * t if rp is not None and rp[0] == it else math.nan)
            if c.role == Role.AGGREGATION.value:  # F_b^max over the PS's sending broadcast flows, 0 if none
                v = [x for x in vals if x == x]
                ref.append(max(v) if v else 0.0)
            else:  # ring: F_pred; broadcast: F_a^min (unknown if one is)
                ref.append(min(vals) if vals and all(x == x for x in vals) else math.nan)
            cl = [self.notes[x][1] for x in c.notifiers if x in self.notes and self.notes[x][0] == it]
            ceil.append(min(cl) if cl else math.inf)
        return {"role": [c.role for c in cs], "ref_bytes": ref, "slack_bytes": [c.slack for c in cs],
                "ceiling_bytes": ceil}


# ------------------------------------------------------------------------------------------------ MCS
def ring_stages(spec, servers) -> list:
    """Ring all-reduce with start-after dependencies: 2(S-1) stages, each S flows of size/S (server k to
    k+1); a stage starts when the one before has ended."""
    ring = list(dict.fromkeys(spec.hosts)) if spec.hosts else list(servers)
    S = len(ring)
    stage = [(ring[k], ring[(k + 1) % S], spec.size / S) for k in range(S)]
    return [list(stage) for _ in range(2 * (S - 1))]


def madd_rates(coflows: list[list[tuple[int, int, float]]], egress: dict, ingress: dict) -> list[list[float]]:
    """Rates on one logical switch (ports: each host's egress and ingress, capacities in ``egress`` and
    ``ingress``) for coflows (lists of (src, dst, bytes left)) served in the order given: each coflow's
    MADD rates (bytes / its bottleneck time on what the coflows before it left; all its flows end
    together), then what is left goes to flows in order, each the least of its two ports' residuals."""
    eg, ing = dict(egress), dict(ingress)
    out = []
    for cf in coflows:
        load_e: dict[int, float] = {}
        load_i: dict[int, float] = {}
        for s, d, b in cf:
            load_e[s] = load_e.get(s, 0.0) + b
            load_i[d] = load_i.get(d, 0.0) + b
        gamma = 0.0
        for port, load, res in [(p, v, eg) for p, v in load_e.items()] + [(p, v, ing) for p, v in load_i.items()]:
            gamma = max(gamma, load / res[port] if res[port] > 0 else math.inf)
        rates = [b / gamma if 0 < gamma < math.inf else 0.0 for _, _, b in cf]
        for (s, d, _), r in zip(cf, rates):
            eg[s] = max(0.0, eg[s] - r)
            ing[d] = max(0.0, ing[d] - r)
        out.append(rates)
    for cf, rates in zip(coflows, out):  # work conservation: what is left, in coflow order
        for x, (s, d, b) in enumerate(cf):
            if b <= 0:
                continue
            extra = min(eg[s], ing[d])
            if extra > 0:
                rates[x] += extra
                eg[s] -= extra
                ing[d] -= extra
    return out


def sebf_order(coflows: list[list[tuple[int, int, float]]], egress: dict, ingress: dict) -> list[int]:
    """Smallest effective bottleneck first: coflow indices by their bottleneck time alone on the logical
    switch (ties: given order)."""
    def gamma(cf) -> float:
        le: dict[int, float] = {}
        li: dict[int, float] = {}
        for s, d, b in cf:
            le[s] = le.get(s, 0.0) + b
            li[d] = li.get(d, 0.0) + b
        return max([v / egress[p] for p, v in le.items()] + [v / ingress[p] for p, v in li.items()])
    return sorted(range(len(coflows)), key=lambda x: (gamma(coflows[x]), x))


class Mcs(NetPolicy):
    def __init__(self, sim) -> None:
        super().__init__(sim)
        fab = sim.fab
        self.egress = {h: float(fab.capacity[fab.topo.owned_links(fab.hosts[h])[0]]) for h in range(fab.n_hosts)}
        into: dict[int, float] = {}
        for h in range(fab.n_hosts):  # a host's ingress port: the last link of any path into it
            other = (h + 1) % fab.n_hosts
            into[h] = float(fab.capacity[fab.path(other, h)[-1]]) if fab.n_hosts > 1 else math.inf
        self.ingress = into
        self.pending: set[int] = set()
        self.dst: dict[tuple, int] = {}  # (job, src, last link) -> dst
        self.stats = {"allocations": 0}

    def exchange(self, spec, servers):
        return ring_stages(spec, servers) if spec.kind != "ps" else None

    def job_started(self, i: int) -> None:
        for pairs in self.sim.jobs[i].phases:
            for a, b, _ in pairs:
                self.dst[(i, a, int(self.sim.fab.path(a, b)[-1]))] = b

    def job_finished(self, i: int) -> None:
        self.pending.add(i)
        for k in [k for k in self.dst if k[0] == i]:
            del self.dst[k]

    def flow_started(self, f) -> None:
        self.pending.add(f.job)

    def flow_ended(self, f) -> None:
        c = self.sim.comp_of.get(f.job)  # (its component now: the job may end with this flow)
        self.pending.update(self.sim.comps[c] if c is not None else (f.job,))

    def before_resolve(self) -> None:
        """Coflows started or ended: re-allocate the components they are in."""
        if not self.pending:
            return
        sim = self.sim
        jobs = {i for i in self.pending if i in sim.comp_of}
        self.pending.clear()
        if not jobs:
            return
        self.stats["allocations"] += 1
        fl = sim.comp_flows(jobs)
        if not fl:
            return
        by_job: dict[int, list] = {}
        for f in fl:
            by_job.setdefault(f.job, []).append(f)
        ids = sorted(by_job, key=lambda i: (sim.jobs[i].spec.arrival_s, i))
        cfs = [[(f.src, self.dst[(i, f.src, int(f.path[-1]))], left_now(f, sim.now)) for f in by_job[i]]
               for i in ids]
        order = sebf_order(cfs, self.egress, self.ingress)
        rates = madd_rates([cfs[x] for x in order], self.egress, self.ingress)
        for x, rs in zip(order, rates):
            i = ids[x]
            for f, r in zip(by_job[i], rs):
                f.cap = r
            sim.dirty.add(i)


# ------------------------------------------------------------------------------------------------ CCML
class Ccml(NetPolicy):
    def __init__(self, sim) -> None:
        super().__init__(sim)
        self.prof: dict[int, tuple[float, float]] = {}  # job -> (T, period) profiled alone
        self.anchor: dict[int, float] = {}  # job -> its last exchange start
        self.waited: dict[int, int] = {}  # job -> the iteration it last waited in
        self.stats = {"holds": 0, "held_s": 0.0}

    def job_started(self, i: int) -> None:
        sim = self.sim
        j = sim.jobs[i]
        T = 0.0
        for pairs in j.phases:
            r = sim.rates([sim.fab.path(a, b) for a, b, _ in pairs], np.full(len(pairs), np.inf))
            T += float(max(nb / x for (_, _, nb), x in zip(pairs, r)))
        self.prof[i] = (T, j.spec.compute_s + T)

    def job_finished(self, i: int) -> None:
        for d in (self.prof, self.anchor, self.waited):
            d.pop(i, None)

    def window_end(self, k: int, t: float) -> float | None:
        """The end of job k's predicted window containing time t, or None."""
        a = self.anchor.get(k)
        if a is None:
            return None
        T, P = self.prof[k]
        if t < a:
            return None
        w = (t - a) % P
        return t - w + T if w < T * (1 - 1e-9) else None

    def hold(self, i: int) -> bool:
        sim = self.sim
        j = sim.jobs[i]
        now = sim.now
        if self.waited.get(i) == j.done_iters:  # it waited already in this iteration: go
            self.anchor[i] = now
            return False
        others = {k for s in j.servers for k in sim.host_jobs.get(s, ()) if k != i}
        T, P = self.prof[i]
        t = now
        while t < now + P:
            ends = [e for e in (self.window_end(k, t) for k in others) if e is not None]
            if not ends:
                break
            t = max(ends)
        if t >= now + P:
            t = now  # no gap within a period of its own: go now
        if t <= now + 1e-12:
            self.anchor[i] = now
            return False
        self.waited[i] = j.done_iters
        self.stats["holds"] += 1
        self.stats["held_s"] += t - now
        sim.compute_until(i, t)
        return True
