"""The real switchemu in process, for unit tests of the daemon's MLCC control: a SwitchState (the switch's
load table, progress store and notification queues, with its real request handling) and clients that speak
the real wire format to it synchronously, without sockets. Load is labelled by job and host exactly as the
switch labels it, because it is the switch's own code."""

from __future__ import annotations

import itertools
import time

from hostctl.core import wire
from hostctl.core.topology import Topology
from hostctl.policy.switchclient import ExchangeResult, SwitchClient
from switchemu.server import SwitchState

RATE = "500mbit"
CAP_Bps = 62_500_000


def two_racks(hosts_per_rack: int = 3, uplink: str = RATE) -> Topology:
    """Two racks (h0.. in rack 0 at 10.0.0.x, the rest in rack 1 at 10.0.1.x) under one aggregation
    switch; every link runs at 500 Mbit/s unless ``uplink`` says otherwise."""
    r0 = ", ".join(f'"h{i}=10.0.0.{i + 1}"' for i in range(hosts_per_rack))
    r1 = ", ".join(f'"h{i}=10.0.1.{i + 1}"' for i in range(hosts_per_rack, 2 * hosts_per_rack))
    return Topology.from_toml(f"""
format = 1
[defaults]
host_rate = "{RATE}"
[[switch]]
name = "tor0"
hosts = [{r0}]
parent = "agg"
uplink_rate = "{uplink}"
[[switch]]
name = "tor1"
hosts = [{r1}]
parent = "agg"
uplink_rate = "{uplink}"
[[switch]]
name = "agg"
""")


def addr(i: int, hosts_per_rack: int = 3) -> str:
    return f"10.0.{0 if i < hosts_per_rack else 1}.{i + 1}"


class Fabric:
    """One switchemu process serving every switch (``--name all``), on a clock the test sets."""

    def __init__(self, topo: Topology, *, slot_s: float = 0.06, horizon: int = 10, now: float = 1_000_000.0):
        self.state = SwitchState(topo, "all", slot_s=slot_s, horizon=horizon, max_skew_s=0.005)
        self.now = now
        self.slot_s = slot_s

    def wall(self) -> float:
        return self.now

    def client(self, host: str | None = None) -> LocalClient:
        return LocalClient(self, host)

    def step(self, slots: int = 1) -> None:
        self.now += slots * self.slot_s


class LocalClient(SwitchClient):
    """A SwitchClient whose one endpoint is the Fabric's SwitchState, called in process."""

    def __init__(self, fabric: Fabric, host: str | None = None) -> None:  # (no sockets: not super().__init__)
        self.fabric = fabric
        self.endpoints = ["local"]
        self.version = {"local": wire.WIRE_VERSION}
        self.host = host
        self.horizon = fabric.state.horizon
        self.topo = None
        self.late_replies = 0
        self._ids = itertools.count(1)
        self._warned: set = set()

    def close(self) -> None:
        pass

    def exchange(self, slot: int, *, updates=(), fetches=(), progress=(), get_progress=(), notify=(),
                 timeout_s: float = 0.02) -> ExchangeResult:
        kinds = {}
        if updates:
            kinds["update_schedule"] = list(updates)
        if progress:
            kinds["report_progress"] = list(progress)
        if notify:
            kinds["notify"] = list(notify)
        if fetches or self.host is not None:
            kinds["fetch_feedback"] = list(fetches)
        if get_progress:
            kinds["get_progress"] = list(get_progress)
        res = ExchangeResult(slot)
        frames, pend = self._frames(kinds, slot, self.version["local"])
        if not frames:
            return res
        t0 = time.perf_counter()
        for frame in self.fabric.state.handle_message(frames, self.fabric.now):
            self._take(res, "local", frame, pend)
        res.latency_s["local"] = time.perf_counter() - t0
        self._mark_incomplete(res)
        return res
