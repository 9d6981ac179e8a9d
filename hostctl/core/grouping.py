"""Job grouping: turn operator job specs plus a Snapshot into Jobs (pure).

No I/O, no clocks, no system libraries: the input is a `Snapshot` taken by
`hostctl.discovery`, the output depends only on it, and it is deterministic
(jobs sorted by job_id, every tuple sorted).

Selectors (one per `JobSpec`):

* ``ports``: a listed port selects flows by local OR remote port, so the same
  spec works on a parameter-server host and on its workers' hosts:

  - each listed port with a LISTEN socket is one job (a parameter server, role
    "server"). Its flows are the ESTABLISHED sockets whose local port is that port.
    Where a port is listened on at several specific addresses (containers of one
    host, each serving the same port at its own address), each address is one job,
    with the flows whose local address is that one.
  - each remote endpoint (address, listed port) that ESTABLISHED sockets of this
    host connect to is one job (the workers of a remote parameter server, role
    "client"), unless the endpoint is served locally (the other end of the
    connection is a socket of this snapshot, or a listener here has that address and
    port: a loopback connection to a local PS belongs to the PS's job only). Its
    flows are those sockets; ``Job.remote_endpoints`` holds the endpoint, which the
    classifier matches for new connections too, and behind NAT. A host that serves
    9400 and is the worker of another host's 9400 has both jobs.
* ``pids``: each listed pid (present in the snapshot) plus all its descendants
  is one job. A listed pid that descends from another listed pid of the same
  spec is part of that ancestor's job.
* ``match``: a regex searched (`re.search`) in each command line. The topmost
  matching process of each process tree plus all its descendants forms a tree;
  trees with the same launch id (below) form one job, other trees are one job each.

hostctl is never part of a job: processes running a hostctl command (see
`is_hostctl_command`) and all their descendants, and the pids the caller passes
in ``exclude`` (discovery passes its own pid), are left out of pid and match
jobs. A child of an ``exclude`` pid is selected only by its own pid or command line.

Launch ids (pid and match jobs) come from the launcher environment of a tree (the
first of its root and then its other members, lowest pid first, that has the key):

* ``torchelastic:<run id>`` from TORCHELASTIC_RUN_ID (torchrun's ``--rdzv-id``),
  unless the run id is torchrun's default ``none`` (or empty), which every launch
  without ``--rdzv-id`` shares. When processes of the snapshot with one run id
  have different master endpoints, they belong to different launches that reuse
  a run id: each tree gets the master id below instead;
* ``master:<addr>:<port>`` from MASTER_ADDR and MASTER_PORT, which torchrun's
  workers get on every node of a launch alike (static rendezvous: --master-addr and
  --master-port; c10d: the address of node 0 and a port its agent picked for the
  current rendezvous round).

Job ids (the same on every host carrying the job, whenever the inputs allow it):

* port jobs: the spec name (``name:port`` if the spec lists several ports),
  else ``ps:<addr>:<port>``; for a remote endpoint, ``<addr>`` is the remote
  address, which is the id the PS host gives its listener when it listens on that
  address or that address is its host_addr (a named spec's jobs for a port, on
  this host and on other hosts, all have the one name);
* pid/match jobs: the spec name (``name:<n>``, n = 0, 1, ... in order of the
  unnamed ids when one named spec yields several jobs), else
  ``torchelastic:<run id>``, ``master:<addr>:<port>``, ``ps:<addr>:<port>`` of
  the lowest listening port, else ``pid:<root pid>``.

``<addr>`` is the listening address, or ``Snapshot.host_addr`` for a wildcard
listener, or the local address of one of the port's established flows when
host_addr is empty, else ``0.0.0.0``. IPv6 addresses are bracketed
(``ps:[fd00::1]:9000``).

Jobs that end up with the same id (e.g. a ``--ports`` spec and a ``--match``
spec that find the same PS) are merged. Then a listening endpoint (address and
port, the address "*" for a wildcard listener), a remote endpoint or a flow claimed
by several jobs stays with the first job in job_id order only; a flow whose local
endpoint is a listening endpoint of an earlier job (or whose local port is that
job's wildcard listener's) is claimed by that job too. A job left with neither
listening ports nor flows by this de-duplication is dropped, because it was
fully covered by an earlier job; a pid/match job that had no sockets to begin
with is kept. A remote endpoint stays with a job only while the job keeps one of its flows.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from hostctl.core.types import FlowKey, Job, JobSpec, ProcInfo, Snapshot, SockInfo
from hostctl.errors import ConfigError

# Environment keys discovery has to read (and only these).
ENV_RUN_ID = "TORCHELASTIC_RUN_ID"
ENV_MASTER_ADDR = "MASTER_ADDR"
ENV_MASTER_PORT = "MASTER_PORT"
LAUNCHER_ENV_KEYS: tuple[str, ...] = (ENV_RUN_ID, ENV_MASTER_ADDR, ENV_MASTER_PORT)
# Run ids that name no launch: torchrun's default --rdzv-id, shared by every launch without one.
ANONYMOUS_RUN_IDS = frozenset({"", "none"})

# The hostctl CLI's commands (tests/unit/test_grouping.py checks this against hostctl.cli).
HOSTCTL_COMMANDS = frozenset({"start", "stop", "status", "clean", "flows", "testbed", "bench",
                              "bench-compare", "bench-pacing", "demo", "sim"})
_HOSTCTL_MODULES = frozenset({"hostctl", "hostctl.cli"})

LISTEN = "LISTEN"
ESTABLISHED = "ESTABLISHED"
_WILDCARDS = frozenset({"", "0.0.0.0", "::", "::0", "0:0:0:0:0:0:0:0"})
_V4_MAPPED_PREFIX = "::ffff:"


# --------------------------------------------------------------------------
# Small helpers (public ones are used by hostctl.discovery too)


def compile_match(pattern: str) -> re.Pattern[str]:
    """Compile a ``match`` selector; a bad regex is a ConfigError naming it."""
    try:
        return re.compile(pattern)
    except re.error as e:
        raise ConfigError(
            f"bad match regex {pattern!r}: {e}; write a Python regular expression, "
            "e.g. 'train\\.py' (escape special characters such as ( [ . + *)"
        ) from None


def normalize_addr(addr: str) -> str:
    """'::ffff:10.0.0.1' -> '10.0.0.1' (IPv4 traffic of a dual-stack socket); others as is."""
    if addr.lower().startswith(_V4_MAPPED_PREFIX) and "." in addr:
        return addr[len(_V4_MAPPED_PREFIX):]
    return addr


def is_wildcard(addr: str) -> bool:
    """True for an unspecified listening address (0.0.0.0, ::)."""
    return addr in _WILDCARDS


def id_addr(addr: str) -> str:
    """Address as written inside a job id: IPv6 in brackets."""
    return f"[{addr}]" if ":" in addr else addr


def ps_job_id(addr: str, port: int) -> str:
    """Id of an unnamed parameter-server job: 'ps:10.0.0.1:9000', 'ps:[fd00::1]:9000'."""
    return f"ps:{id_addr(addr)}:{port}"


def is_hostctl_command(cmdline: str) -> bool:
    """True when a command line runs a hostctl command: the word ``hostctl`` (any
    directory: ``/usr/bin/hostctl``, ``.venv/bin/hostctl``) or ``-m hostctl[.cli]``
    followed by one of HOSTCTL_COMMANDS. Also holds for wrappers that carry that
    command in their own arguments (``sudo hostctl start ...``, ``timeout 9 hostctl
    flows ...``, ``sh -c 'hostctl flows ...'``, ``watch hostctl status``). A training
    script that merely lives under a ``hostctl`` folder (``python /opt/hostctl/train.py``)
    is not one. Arguments are split at blanks (the command line as /proc joins it)."""
    words = cmdline.replace("'", " ").replace('"', " ").split()
    for i, w in enumerate(words[:-1]):
        nxt = words[i + 1]
        if w.rsplit("/", 1)[-1] == "hostctl" and nxt in HOSTCTL_COMMANDS:
            return True
        if w == "-m" and nxt in _HOSTCTL_MODULES and i + 2 < len(words) and words[i + 2] in HOSTCTL_COMMANDS:
            return True
    return False


def _run_id(env: Mapping[str, str]) -> str | None:
    """The run id of a launcher env, None when absent or anonymous (``none``)."""
    run = env.get(ENV_RUN_ID, "").strip()
    return None if run.lower() in ANONYMOUS_RUN_IDS else run


def _master(env: Mapping[str, str]) -> str | None:
    """MASTER_ADDR:MASTER_PORT of a launcher env as written in ids, None without both."""
    addr, port = env.get(ENV_MASTER_ADDR), env.get(ENV_MASTER_PORT)
    return f"{id_addr(addr)}:{port}" if addr and port else None


def _selector_kind(spec: JobSpec) -> str:
    kinds = [k for k, used in (("port", bool(spec.ports)), ("pid", bool(spec.pids)),
                               ("match", spec.match is not None)) if used]
    label = f"job {spec.name!r}" if spec.name else "job spec"
    if len(kinds) != 1:
        got = ", ".join(kinds) if kinds else "none"
        raise ConfigError(
            f"{label} must use exactly one of ports, pids or match (got: {got}); split it into several jobs"
        )
    return kinds[0]


def _flow(s: SockInfo) -> FlowKey:
    """Egress-oriented key of an established socket (local side first)."""
    return FlowKey(normalize_addr(s.laddr), s.lport, normalize_addr(s.raddr), s.rport)


# --------------------------------------------------------------------------
# Indexes over a snapshot


class _Index:
    """Lookup tables over one Snapshot (built once per group_jobs call)."""

    def __init__(self, snap: Snapshot, exclude: Iterable[int] = ()) -> None:
        self.host_addr = snap.host_addr
        self.procs: dict[int, ProcInfo] = {p.pid: p for p in snap.procs}
        self.children: dict[int, list[int]] = {}
        for p in snap.procs:
            if p.ppid != p.pid:
                self.children.setdefault(p.ppid, []).append(p.pid)
        for kids in self.children.values():
            kids.sort()
        # hostctl's own processes (module doc) are dropped: they are never members of a job
        self.excluded: set[int] = set(exclude)
        for p in snap.procs:
            if p.pid not in self.excluded and is_hostctl_command(p.cmdline):
                self.excluded |= self.tree(p.pid)
        if self.excluded:
            self.procs = {pid: p for pid, p in self.procs.items() if pid not in self.excluded}
            self.children = {ppid: [k for k in kids if k not in self.excluded]
                             for ppid, kids in self.children.items() if ppid not in self.excluded}
        self.run_masters: dict[str, set[str]] = {}  # run id -> master endpoints of its processes
        for p in self.procs.values():
            run, master = _run_id(p.env), _master(p.env)
            if run and master:
                self.run_masters.setdefault(run, set()).add(master)
        self.listeners: dict[int, list[SockInfo]] = {}  # port -> LISTEN sockets
        self.est_by_lport: dict[int, list[SockInfo]] = {}
        self.est_by_rport: dict[int, list[SockInfo]] = {}
        self.est_keys: set[FlowKey] = set()  # every established socket's flow (for "served locally")
        self.listen_by_pid: dict[int, list[SockInfo]] = {}
        self.est_by_pid: dict[int, list[SockInfo]] = {}
        for s in snap.socks:
            if s.state == LISTEN:
                self.listeners.setdefault(s.lport, []).append(s)
                if s.pid is not None and s.pid in self.procs:
                    self.listen_by_pid.setdefault(s.pid, []).append(s)
            elif s.state == ESTABLISHED:
                self.est_by_lport.setdefault(s.lport, []).append(s)
                self.est_by_rport.setdefault(s.rport, []).append(s)
                self.est_keys.add(_flow(s))
                if s.pid is not None and s.pid in self.procs:
                    self.est_by_pid.setdefault(s.pid, []).append(s)

    def served_locally(self, flow: FlowKey) -> bool:
        """The remote end of `flow` is this host: its socket is in the snapshot, or a listener
        here has the remote address (or is a wildcard listener and the address is loopback or
        host_addr) and port."""
        if FlowKey(flow.raddr, flow.rport, flow.laddr, flow.lport) in self.est_keys:
            return True
        for s in self.listeners.get(flow.rport, ()):
            addr = normalize_addr(s.laddr)
            if addr == flow.raddr or (is_wildcard(addr) and (
                    flow.raddr == self.host_addr or flow.raddr.startswith("127.") or flow.raddr == "::1")):
                return True
        return False

    def tree(self, root: int) -> set[int]:
        """`root` and all its descendants (by ppid) present in the snapshot."""
        out = {root}
        todo = [root]
        while todo:
            for kid in self.children.get(todo.pop(), ()):
                if kid not in out:
                    out.add(kid)
                    todo.append(kid)
        return out

    def ancestors(self, pid: int) -> list[int]:
        """Parents of `pid`, nearest first (stops at unknown pids and on cycles)."""
        out: list[int] = []
        seen = {pid}
        proc = self.procs.get(pid)
        while proc is not None and proc.ppid not in seen and proc.ppid in self.procs:
            out.append(proc.ppid)
            seen.add(proc.ppid)
            proc = self.procs.get(proc.ppid)
        return out

    def tops(self, selected: set[int]) -> list[int]:
        """Members of `selected` none of whose ancestors is in `selected` (sorted).
        A ppid cycle (possible with pid reuse during a non-atomic scan) has no
        such member: its lowest pid becomes a top, so nothing selected is lost."""
        tops = [p for p in selected if not any(a in selected for a in self.ancestors(p))]
        covered: set[int] = set().union(*(self.tree(t) for t in tops))
        for p in sorted(selected):
            if p not in covered:
                tops.append(p)
                covered |= self.tree(p)
        return sorted(tops)

    def listen_addr(self, port: int, listeners: Iterable[SockInfo], flows: Iterable[FlowKey]) -> str:
        """Address naming a listening port in a job id (see module doc)."""
        specific = sorted({normalize_addr(s.laddr) for s in listeners if not is_wildcard(s.laddr)},
                          key=lambda a: (":" in a, a))
        if specific:
            return specific[0]
        if self.host_addr:
            return self.host_addr
        local = sorted({f.laddr for f in flows if f.lport == port}, key=lambda a: (":" in a, a))
        return local[0] if local else "0.0.0.0"

    def launcher_id(self, root: int, members: set[int]) -> str | None:
        """Launch id (module doc) of a tree: 'torchelastic:<id>' or 'master:<addr>:<port>',
        each from the env of the root, else of the lowest-pid member that has it; None when
        no launcher env is seen. A run id that processes with different master endpoints
        share (`run_masters`) names no launch."""
        order = [root] + sorted(members - {root})
        envs: list[Mapping[str, str]] = [self.procs[p].env for p in order if p in self.procs]
        run = next((r for r in map(_run_id, envs) if r), None)
        master = next((m for m in map(_master, envs) if m), None)
        if run and (master is None or len(self.run_masters.get(run, ())) <= 1):
            return f"torchelastic:{run}"
        return f"master:{master}" if master else None


# --------------------------------------------------------------------------
# Draft jobs (mutable while grouping)


@dataclass
class _Draft:
    job_id: str
    source: str
    root: int = 0  # root pid (pid/match jobs), for ordering only
    pids: set[int] = field(default_factory=set)
    listen_ports: set[int] = field(default_factory=set)
    flows: set[FlowKey] = field(default_factory=set)
    listen_eps: set[tuple[str, int]] = field(default_factory=set)  # (address or "*", port) of its listeners
    remotes: set[tuple[str, int]] = field(default_factory=set)  # remote endpoints (worker side)
    model_bytes: int | None = None
    comm: str | None = None
    ring_size: int | None = None

    def absorb(self, other: _Draft) -> None:
        self.pids |= other.pids
        self.listen_ports |= other.listen_ports
        self.listen_eps |= other.listen_eps
        self.flows |= other.flows
        self.remotes |= other.remotes
        for name in ("model_bytes", "comm", "ring_size"):
            if getattr(self, name) is None:
                setattr(self, name, getattr(other, name))


def _ep(s: SockInfo) -> tuple[str, int]:
    """A listener's endpoint: (address, port), "*" for the wildcard address."""
    return ("*" if is_wildcard(s.laddr) else normalize_addr(s.laddr), s.lport)


def _by_address(listeners: list[SockInfo], established: list[SockInfo]
                ) -> list[tuple[list[SockInfo], list[SockInfo]]]:
    """A port's listeners and flows, split by listening address when several specific
    addresses listen on it (containers serving the same port, each at its own address): a
    flow goes with the listener of its local address. Wildcard listeners, and flows of no
    listener's address, go with the first address (one process listening on :: and on an
    IPv4 address is one job, as before)."""
    addrs = sorted({a for a, _p in map(_ep, listeners) if a != "*"}, key=lambda a: (":" in a, a))
    if len(addrs) <= 1:
        return [(listeners, established)]
    groups: dict[str, tuple[list[SockInfo], list[SockInfo]]] = {a: ([], []) for a in addrs}
    for s in listeners:
        groups[_ep(s)[0] if _ep(s)[0] in groups else addrs[0]][0].append(s)
    for s in established:
        a = normalize_addr(s.laddr)
        groups[a if a in groups else addrs[0]][1].append(s)
    return list(groups.values())


def _port_drafts(spec: JobSpec, idx: _Index, source: str) -> list[_Draft]:
    ports = sorted(set(spec.ports))
    out: list[_Draft] = []

    def draft(job_id: str, socks: list[SockInfo], flows: set[FlowKey], **kw) -> _Draft:
        pids = {s.pid for s in socks if s.pid is not None}
        return _Draft(job_id, source, pids=pids, flows=flows, model_bytes=spec.model_bytes, comm=spec.comm,
                      ring_size=spec.ring_size, **kw)

    for port in ports:
        named = (spec.name if len(ports) == 1 else f"{spec.name}:{port}") if spec.name else None
        for listeners, established in _by_address(idx.listeners.get(port, []), idx.est_by_lport.get(port, [])):
            if not listeners:
                continue  # not served here (or not yet)
            # this host serves the port (a PS; one per address when containers share the port)
            flows = {_flow(s) for s in established}
            job_id = named or ps_job_id(idx.listen_addr(port, listeners, flows), port)
            out.append(draft(job_id, [*listeners, *established], flows, listen_ports={port},
                             listen_eps={_ep(s) for s in listeners}))
        # this host connects to the port elsewhere (a PS's workers): one job per remote endpoint
        by_remote: dict[tuple[str, int], list[SockInfo]] = {}
        for s in idx.est_by_rport.get(port, ()):
            f = _flow(s)
            if f.lport != port and not idx.served_locally(f):
                by_remote.setdefault((f.raddr, port), []).append(s)
        for (raddr, _port), socks in sorted(by_remote.items()):
            out.append(draft(named or ps_job_id(raddr, port), socks, {_flow(s) for s in socks},
                             remotes={(raddr, port)}))
    return out


def _tree_draft(idx: _Index, root: int, members: set[int], source: str, spec: JobSpec) -> _Draft:
    """A pid/match job over process set `members`; its id is the unnamed id."""
    listeners = [s for p in members for s in idx.listen_by_pid.get(p, ())]
    established = [s for p in members for s in idx.est_by_pid.get(p, ())]
    flows = {_flow(s) for s in established}
    ports = {s.lport for s in listeners}
    job_id = idx.launcher_id(root, members)
    if job_id is None and ports:
        low = min(ports)
        job_id = ps_job_id(idx.listen_addr(low, [s for s in listeners if s.lport == low], flows), low)
    if job_id is None:
        job_id = f"pid:{root}"
    return _Draft(job_id, source, root=root, pids=set(members), listen_ports=ports, flows=flows,
                  listen_eps={_ep(s) for s in listeners},
                  model_bytes=spec.model_bytes, comm=spec.comm, ring_size=spec.ring_size)


def _pid_drafts(spec: JobSpec, idx: _Index, source: str) -> list[_Draft]:
    listed = {p for p in spec.pids if p in idx.procs}
    return [_tree_draft(idx, top, idx.tree(top), source, spec) for top in idx.tops(listed)]


def _match_drafts(spec: JobSpec, idx: _Index, source: str) -> list[_Draft]:
    assert spec.match is not None
    rx = compile_match(spec.match)
    matched = {p.pid for p in idx.procs.values() if rx.search(p.cmdline)}
    groups: dict[str, list[int]] = {}  # launch id -> tops of its trees
    trees: dict[int, set[int]] = {}
    for top in idx.tops(matched):
        trees[top] = idx.tree(top)
        key = idx.launcher_id(top, trees[top]) or f"tree:{top}"
        groups.setdefault(key, []).append(top)
    out = []
    for tops in groups.values():
        members = set().union(*(trees[t] for t in tops))
        out.append(_tree_draft(idx, min(tops), members, source, spec))
    return out


def _name_drafts(name: str, drafts: list[_Draft]) -> None:
    """Give a named pid/match spec's jobs their config name (name:<n> when several)."""
    if len(drafts) == 1:
        drafts[0].job_id = name
        return
    drafts.sort(key=lambda d: (d.job_id, d.root))
    for n, d in enumerate(drafts):
        d.job_id = f"{name}:{n}"


def _merge_same_id(drafts: Iterable[_Draft]) -> dict[str, _Draft]:
    """Same id -> same job; the first draft keeps its source and root."""
    by_id: dict[str, _Draft] = {}
    for d in drafts:
        if d.job_id in by_id:
            by_id[d.job_id].absorb(d)
        else:
            by_id[d.job_id] = d
    return by_id


def _role(listen_ports: set[int], flows: set[FlowKey]) -> str:
    if not listen_ports:
        return "client"
    return "server" if all(f.lport in listen_ports for f in flows) else "both"


# --------------------------------------------------------------------------
# Entry point


def pids_needing_env(specs: Sequence[JobSpec], procs: Iterable[ProcInfo], exclude: Iterable[int] = ()) -> set[int]:
    """Pids whose launcher env (LAUNCHER_ENV_KEYS) group_jobs may look at:
    the trees of listed pids and of matching processes (without hostctl's own, as
    group_jobs with the same `exclude`). Lets discovery read /proc/<pid>/environ only
    where needed. Raises ConfigError for a bad regex."""
    idx = _Index(Snapshot(procs=tuple(procs), socks=()), exclude)
    out: set[int] = set()
    for spec in specs:
        kind = _selector_kind(spec)
        if kind == "pid":
            selected = {p for p in spec.pids if p in idx.procs}
        elif kind == "match":
            assert spec.match is not None
            rx = compile_match(spec.match)
            selected = {p.pid for p in idx.procs.values() if rx.search(p.cmdline)}
        else:
            continue
        for top in idx.tops(selected):
            out |= idx.tree(top)
    return out


def group_jobs(specs: Sequence[JobSpec], snap: Snapshot, exclude: Iterable[int] = ()) -> list[Job]:
    """Jobs present in `snap` according to `specs`, sorted by job_id. The processes in
    `exclude` (the caller's own pid) and hostctl's processes are in no pid or match job.

    Raises ConfigError for a bad regex or a spec without exactly one selector.
    """
    idx = _Index(snap, exclude)
    drafts: list[_Draft] = []
    for spec in specs:
        kind = _selector_kind(spec)
        source = "config" if spec.name else kind
        if kind == "port":
            drafts += _port_drafts(spec, idx, source)
            continue
        found = _pid_drafts(spec, idx, source) if kind == "pid" else _match_drafts(spec, idx, source)
        found = list(_merge_same_id(found).values())
        if spec.name and found:
            _name_drafts(spec.name, found)
        drafts += found

    by_id = _merge_same_id(drafts)

    # Each listening endpoint and flow goes to the first job in job_id order.
    claimed_eps: set[tuple[str, int]] = set()
    claimed_flows: set[FlowKey] = set()
    claimed_remotes: set[tuple[str, int]] = set()
    jobs: list[Job] = []
    for job_id in sorted(by_id):
        d = by_id[job_id]
        had_sockets = bool(d.listen_eps or d.flows)
        eps = d.listen_eps - claimed_eps
        ports = {p for _a, p in eps}
        flows = {f for f in d.flows if f not in claimed_flows and (f.laddr, f.lport) not in claimed_eps
                 and ("*", f.lport) not in claimed_eps}
        kept = {(f.raddr, f.rport) for f in flows} if d.remotes else set()
        remotes = {r for r in d.remotes if r not in claimed_remotes and r in kept}
        if had_sockets and not (ports or flows):
            continue  # fully covered by an earlier job
        claimed_eps |= eps
        claimed_flows |= flows
        claimed_remotes |= remotes
        jobs.append(Job(
            job_id=job_id,
            source=d.source,
            pids=tuple(sorted(d.pids)),
            listen_ports=tuple(sorted(ports)),
            flows=tuple(sorted(flows)),
            role=_role(ports, flows),
            remote_endpoints=tuple(sorted(remotes)),
            model_bytes=d.model_bytes,
            comm=d.comm,
            ring_size=d.ring_size,
        ))
    return jobs
