"""The Datapath contract: one scenario, run against FakeDatapath and the real LinuxDatapath,
and what each reports compared.

The real one runs on the worker's veth of a namespace pair (tests/conftest.py ``pair``,
unique names, removed even on failure), in a child process entered into that namespace
with ``nsenter`` (it keeps the host's cgroup2 and bpffs) and moved into a fresh cgroup
(``cgroup``), so that the TCP connection it opens to a listener in the PS namespace is
seen by the pacer. The fake runs the same ``scenario`` function in this process, with
the same flow key. Both give a report (``scenario``'s return value) and the reports are
compared whole, except where the fake cannot model the kernel: byte, packet and timing
counts. For those the report keeps the shape (which keys, which fields, grows or not),
not the value; the comments at ``_shape`` and ``Conn`` say which.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from hostctl.core.pace import PaceTable
from hostctl.core.plan import ClassifierTable, band_classid, build_tc_plan
from hostctl.core.types import FlowKey
from tests.conftest import PY, sh

pytestmark = [pytest.mark.root, pytest.mark.netns, pytest.mark.bpf]

PORT = 5390
SLOT_A, SLOT_B = 1, 2
RATE1_BPS_BYTES = 5_000_000  # 40 Mbit/s, then
RATE2_BPS_BYTES = 2_500_000  # 20 Mbit/s
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _shape(counters: dict) -> dict:
    """A counter map as its keys and field names: the fake has no real byte counts."""
    return {str(k): sorted(vars(v)) for k, v in sorted(counters.items())}


def scenario(dp, conn, root_qdisc, entries, tamper) -> dict:
    """The daemon's sequence of calls (setup, apply, pace, reads, update, teardown, close) on ``dp``.
    ``conn`` opens and drives the one TCP flow (``key``, ``open()``, ``send(n)``, ``settle(pred)``);
    ``root_qdisc()`` says the interface's root qdisc kind; ``entries()`` the classifier's entries
    (the kernel maps of the real one: the Datapath protocol has no read for them); ``tamper(what)``
    is another agent: "filter" deletes the classifier's filter, "root" replaces the root qdisc (with tbf:
    this kernel has no fq_codel), "mtu" sets the device's MTU to 1400."""
    rep: dict = {"root_before": root_qdisc()}
    plan = build_tc_plan(conn.iface, 1_000_000_000, 2, 100_000_000, True)
    dp.setup(plan)
    dp.setup(plan)  # idempotent
    rep["root_after_setup"] = root_qdisc()
    key = conn.key
    other = FlowKey(key.laddr, key.lport + 1, key.raddr, key.rport + 1)
    table = ClassifierTable(slots={"a": SLOT_A, "b": SLOT_B},
                            slot_classid={SLOT_A: band_classid(0), SLOT_B: band_classid(1)},
                            flows={key: SLOT_A, other: SLOT_B})
    rep["apply_writes"] = [dp.apply(table), dp.apply(table)]
    rep["entries"] = [entries()]
    moved = ClassifierTable(slots=table.slots, slot_classid={SLOT_A: band_classid(1), SLOT_B: band_classid(0)},
                            flows={key: SLOT_A})  # a rotation, and one flow gone
    rep["apply_writes"].append(dp.apply(moved))
    rep["entries"].append(entries())
    dp.heartbeat()

    # drift: another agent changes the tree; check() says what, setup() again puts it back, the
    # classifier's entries (its maps) survive
    rep["check"] = [[d.what for d in dp.check()]]
    tamper("filter")
    rep["check"].append([d.what for d in dp.check()])
    dp.setup(plan)
    rep["check"].append([d.what for d in dp.check()])
    tamper("root")
    rep["check"].append([d.what for d in dp.check()])
    rep["root_tampered"] = root_qdisc()
    dp.setup(plan)
    rep["check"].append([d.what for d in dp.check()])
    rep["root_after_reconcile"] = root_qdisc()
    rep["entries"].append(entries())
    tamper("mtu")  # a change of the device that leaves the tree in place: said by one check
    rep["check"] += [[d.what for d in dp.check()], [d.what for d in dp.check()]]
    tamper("pins")  # the pacer's pins removed by hand: said until setup() pins them again
    rep["check"] += [[d.what for d in dp.check()], [d.what for d in dp.check()]]
    dp.setup(plan)
    rep["check"].append([d.what for d in dp.check()])

    # pacing: one flow established before the pacer has any selector (adopted by the first table),
    # the other selected by its remote port at connection time; rates per flow
    early = conn.open_early()
    base = PaceTable(ports={(PORT, "remote"): SLOT_A})
    dp.pace(base)
    dp.heartbeat()
    conn.send(100_000, early)
    rep["early"] = list(conn.settle(lambda: _beat_and_flow(dp, early), lambda f: f.slot == SLOT_A).key)
    conn.open()
    rep["pace_writes"] = [dp.pace(PaceTable(ports=base.ports, flow_rates={key: RATE1_BPS_BYTES}))]
    conn.send(200_000)
    first = conn.settle(lambda: _beat_and_flow(dp, key), lambda f: f.rate_Bps == RATE1_BPS_BYTES and f.bytes_acked)
    rep["pace_writes"].append(dp.pace(PaceTable(ports=base.ports, flow_rates={key: RATE2_BPS_BYTES})))
    conn.send(200_000)
    second = conn.settle(lambda: _beat_and_flow(dp, key), lambda f: f.rate_Bps == RATE2_BPS_BYTES)
    dp.heartbeat()
    readout = dp.read_pacing()
    rep["flows"] = sorted([str(r.key), r.slot, r.rate_Bps == r.orig_rate_Bps] for r in readout.flows)
    rep["rates"] = [first.rate_Bps, second.rate_Bps]
    rep["acked_grows"] = second.bytes_acked >= first.bytes_acked > 0  # values: the fake's are made up
    rep["ctl"] = sorted(readout.ctl)
    rep["adopted"] = readout.ctl["adopted"]

    counters = dp.read_counters({SLOT_A, SLOT_B})
    rep["classes"] = _shape(counters.classes)
    rep["jobs"] = _shape(counters.jobs)
    rep["jobs_no_slots"] = _shape(dp.read_counters().jobs)
    rep["failopen_pkts"] = counters.failopen_pkts

    dp.teardown()
    dp.teardown()  # idempotent
    rep["root_after_teardown"] = root_qdisc()
    dp.close()
    return rep


CONTRACT_LEASE_S = 120.0


def _beat_and_flow(dp, key: FlowKey):
    """One poll of the daemon's loop: heartbeat, then read (as the daemon does; with the contract's
    long lease it is not needed for the comparison, but the scenario keeps the daemon's habit)."""
    dp.heartbeat()
    return _flow(dp, key)


def _flow(dp, key: FlowKey):
    return next((r for r in dp.read_pacing().flows if r.key == key), None)


class Conn:
    """The real flow: a TCP connection from this (worker) namespace to the listener in the PS one."""

    def __init__(self, iface: str, laddr: str, raddr: str) -> None:
        self.iface = iface
        self.sock = socket.socket()
        self.sock.bind((laddr, 0))
        self.key = FlowKey(laddr, self.sock.getsockname()[1], raddr, PORT)
        self.early: socket.socket | None = None

    def open(self) -> None:
        self.sock.connect((self.key.raddr, PORT))

    def open_early(self) -> FlowKey:
        """A second connection, opened now (before the pacer has a selector for it)."""
        self.early = socket.create_connection((self.key.raddr, PORT))
        laddr, lport = self.early.getsockname()[:2]
        return FlowKey(laddr, lport, self.key.raddr, PORT)

    def send(self, n: int, key: FlowKey | None = None) -> None:
        (self.early if key is not None and key != self.key else self.sock).sendall(b"\0" * n)

    @staticmethod
    def settle(read, ok, timeout: float = 5.0):
        """The kernel applies a rate at the flow's next callback: poll until it shows."""
        deadline = time.monotonic() + timeout
        while (f := read()) is None or not ok(f):
            if time.monotonic() > deadline:
                raise AssertionError(f"the flow did not settle: {f}")
            time.sleep(0.05)
        return f


class FakeConn:
    """The fake's flow: the same key; connect/transfer stand for the kernel's callbacks."""

    def __init__(self, dp, iface: str, key: FlowKey, early_port: int) -> None:
        self.dp, self.iface, self.key, self.now, self.early_port = dp, iface, key, 0, early_port

    def open(self) -> None:
        self.dp.connect(self.key)

    def open_early(self) -> FlowKey:
        k = self.early = FlowKey(self.key.laddr, self.early_port, self.key.raddr, PORT)
        self.dp.connect(k)
        return k

    def send(self, n: int, key: FlowKey | None = None) -> None:
        self.now += 1_000_000
        self.dp.transfer(key or self.key, n, self.now - 1_000_000, self.now)

    @staticmethod
    def settle(read, ok):
        f = read()
        assert f is not None and ok(f), f
        return f


def _entries(flows, slot_classid) -> dict:
    """Classifier entries, comparable: [flow, slot] and [slot, classid] pairs (classid 0 = none)."""
    return {"flows": sorted([str(f), s] for f, s in flows), "classes": sorted([s, c] for s, c in slot_classid if c)}


def _kernel_entries(dp) -> dict:
    from hostctl.datapath.pacer import key_of

    c = dp.classifier
    return _entries([(key_of(k), v.value) for k, v in c.flows.items()],
                    [(k.value, v.classid) for k, v in c.job_class.items()])


def _tamper(dev: str, what: str) -> None:
    """Another agent's change to the real interface (tc, as an operator or a tool would)."""
    from hostctl.core.plan import QDISC_HANDLE, fmt_handle

    if what == "root":
        sh(["tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", "1gbit", "burst", "64k", "latency", "10ms"])
    elif what == "mtu":
        sh(["ip", "link", "set", "dev", dev, "mtu", "1400"])
    else:
        sh(["tc", "filter", "del", "dev", dev, "parent", fmt_handle(QDISC_HANDLE)])


def _unpin(pin_dir: str) -> None:
    """An operator's `rm -r` of the pacer's pins (the program stays attached: the cgroup holds it)."""
    for n in os.listdir(pin_dir):
        os.unlink(os.path.join(pin_dir, n))
    os.rmdir(pin_dir)


def _root_kind(dev: str) -> str:
    qd = json.loads(sh(["tc", "-j", "qdisc", "show", "dev", dev, "root"]).stdout or "[]")
    return qd[0]["kind"] if qd else "none"


def _linux_main(iface: str, laddr: str, raddr: str, cgroup: str, state_dir: str) -> None:
    """Runs in the worker's namespace (nsenter) and in ``cgroup``: prints the real report."""
    from hostctl.datapath.linux import LinuxDatapath

    with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))
    # the lease is not what this scenario compares (the fake has no clock; tests/integration/
    # test_classifier_lease.py tests it): long enough that no stall of a loaded machine expires it
    # (with the default 1 s, a CI run beside other work saw 2 packets fail open during setup)
    dp = LinuxDatapath(iface, pace_cgroup=cgroup, state_dir=state_dir, track_all=False, lease_s=CONTRACT_LEASE_S)
    conn = Conn(iface, laddr, raddr)
    try:
        rep = scenario(dp, conn, lambda: _root_kind(iface), lambda: _kernel_entries(dp),
                       lambda what: _unpin(dp.pacer.pin_dir) if what == "pins" else _tamper(iface, what))
    finally:
        dp.teardown()  # again, if the scenario failed half-way
        conn.sock.close()
        if conn.early is not None:
            conn.early.close()
    print(json.dumps({"key": list(conn.key), "report": rep}))


LISTENER = ("import socket,sys\ns=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
            "s.bind((sys.argv[1],int(sys.argv[2])));s.listen();print('up',flush=True)\n"
            "while True:\n c,_=s.accept()\n while c.recv(1<<16): pass\n c.close()\n")


def test_fake_and_linux_report_the_same(pair, cgroup, tmp_path):
    listener = pair.start(pair.ps, PY, "-c", LISTENER, pair.ps.addr, str(PORT))
    assert listener.stdout.readline().strip() == "up", listener.stderr.read()
    real = subprocess.run(pair.wk.nsenter(PY, "-m", "tests.integration.test_datapath_contract", pair.wk.dev,
                                          pair.wk.addr, pair.ps.addr, cgroup, str(tmp_path)),
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert real.returncode == 0, real.stderr[-3000:]
    out = json.loads(real.stdout.strip().splitlines()[-1])
    key = FlowKey(*out["key"])

    from hostctl.datapath.fake import FakeDatapath

    fake = FakeDatapath(previous_root=out["report"]["root_before"])
    early_port = FlowKey(*out["report"]["early"]).lport  # the real one's port, for the same report
    rep = scenario(fake, FakeConn(fake, pair.wk.dev, key, early_port), lambda: fake.root.split()[0],
                   lambda: _entries(fake.table.flows.items(), fake.table.slot_classid.items()),
                   lambda what: fake.tamper(what, root="tbf"))
    assert fake.closed
    # JSON turns tuples and int keys into lists and strings: compare both the same way
    assert json.loads(json.dumps(rep)) == out["report"]
    assert rep["root_after_teardown"] == rep["root_before"] == "noqueue"
    assert rep["rates"] == [RATE1_BPS_BYTES, RATE2_BPS_BYTES] and rep["acked_grows"]
    assert rep["adopted"] == 1 and len(rep["flows"]) == 2  # the early flow, adopted by the first table
    assert len(rep["entries"][0]["flows"]) == 2 and len(rep["entries"][1]["flows"]) == 1
    assert rep["check"] == [[], ["filter"], [], ["root"], [], ["mtu"], [], ["pins"], ["pins"], []]
    assert rep["entries"][2] == rep["entries"][1]
    assert (rep["root_tampered"], rep["root_after_reconcile"]) == ("tbf", "htb")
    assert rep["classes"] and set(rep["jobs"]) == {str(SLOT_A), str(SLOT_B)}


if __name__ == "__main__":
    _linux_main(*sys.argv[1:6])
