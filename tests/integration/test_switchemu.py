"""Real `switchemu` processes on loopback / ipc with real pyzmq clients (no root needed).

Every process started here is stopped by its PID in a fixture finalizer, even when a test fails.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import msgpack
import pytest
import zmq

from hostctl.core import wire
from hostctl.core.wire import Code
from hostctl.policy.switchclient import CurveClientKeys, SwitchClient

SWITCHEMU = os.path.join(sys.prefix, "bin", "switchemu")
SLOT_S = 0.06
K = 10

TOPO = """
[[switch]]
name = "sw0"
hosts = {count = 8, prefix = "h", first_addr = "10.100.0.1"}
host_rate = "1gbit"
"""


@pytest.fixture(scope="module", autouse=True)
def _installed():
    if not os.access(SWITCHEMU, os.X_OK):
        pytest.skip(f"{SWITCHEMU} not found: pip install -e . into the venv")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def slot_now() -> int:
    return int(time.time() // SLOT_S)


def metrics(port: int) -> dict[str, float]:
    out = {}
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line and not line.startswith("#"):
                k, _, v = line.rpartition(" ")
                out[k] = float(v)
    return out


class Procs:
    def __init__(self):
        self.procs: list[subprocess.Popen] = []

    def start(self, *args: str) -> subprocess.Popen:
        p = subprocess.Popen([SWITCHEMU, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.append(p)
        return p

    def stop_all(self):
        for p in self.procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
                p.wait(5)
            for f in (p.stdout, p.stderr):
                if f:
                    f.close()


@pytest.fixture
def procs():
    ps = Procs()
    try:
        yield ps
    finally:
        ps.stop_all()


@pytest.fixture
def topo_file(tmp_path):
    p = tmp_path / "topo.toml"
    p.write_text(TOPO)
    return str(p)


def wait_up(endpoint: str, proc: subprocess.Popen, curve: CurveClientKeys | None = None, timeout_s: float = 10.0):
    deadline = time.monotonic() + timeout_s
    with SwitchClient([endpoint], curve=curve) as c:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"switchemu exited {proc.returncode}: {proc.stderr.read()}")
            if c.probe(SLOT_S, timeout_s=0.5).error is None:
                return
        raise AssertionError("switchemu did not answer")


@pytest.fixture
def server(procs, topo_file, tmp_path):
    ep = f"ipc://{tmp_path}/sw0.sock"
    mport = free_port()
    p = procs.start("--bind", ep, "--topology", topo_file, "--metrics-port", str(mport), "--log-level", "WARNING")
    wait_up(ep, p)
    return ep, mport, p


def exchange_ok(c: SwitchClient, **kw):
    """An exchange that tolerates the connection still coming up (IMMEDIATE sockets) and a slot
    boundary passing between reading the clock and the switch handling the message (a stale slot:
    the switch applied nothing of it, since it checks all frames of one message against one clock)."""
    for _ in range(50):
        r = c.exchange(slot_now(), timeout_s=0.5, **kw)
        if not any("not connected" in e for e in r.errors.values()) and Code.STALE_SLOT not in r.error_codes.values():
            return r
        time.sleep(0.02)
    return r


def planned(rate: int, start: int, r, ep: str) -> list[int]:
    """The load a fetch in exchange ``r`` sees of a K-slot schedule of ``rate`` that starts at slot
    ``start``: the fetch's window begins at its request slot, and slots the switch has passed read 0.
    (The test cannot keep all its exchanges inside one 60 ms slot, so it expects what the clock did.)"""
    q, now = r.slot, r.slot_now[ep]
    return [rate if start <= s < start + K and s >= now else 0 for s in range(q, q + K)]


def sched(flow, src, dst, rate, job="j1", seq=1):
    return wire.FlowSchedule(flow, job, src, dst, seq, tuple([float(rate)] * K))


def test_round_trip_self_exclusion_progress_and_notification(server):
    ep, mport, _ = server
    with SwitchClient([ep], host="h0") as a, SwitchClient([ep], host="10.100.0.2") as b:
        r = exchange_ok(a, updates=[sched("f1", "h0", "h1", 1000), sched("f2", "h2", "h1", 300)],
                        fetches=[wire.FlowQuery("f1", "h0", "h1")],
                        progress=[wire.FlowProgress("f1", "j1", 4096, 1000.0)],
                        notify=[wire.Notification("h1", "f1", "j1", 4000)])
        assert r.ok, r.errors
        fl = r.feedback["f1"]
        want = planned(300, r.slot, r, ep)
        assert fl.complete and fl.load_Bps == {"sw0>h1": tuple(want)}  # own excluded, same-job f2 included
        assert fl.path_load_Bps == tuple(want) and want[-1] == 300
        assert r.capacities_Bps == {"sw0>h1": 10**9 // 8}
        # the same update twice is idempotent; a new schedule replaces the old one
        exchange_ok(a, updates=[sched("f2", "h2", "h1", 300)])
        r2 = exchange_ok(b, updates=[sched("f2", "h2", "h1", 50, seq=2)], fetches=[wire.FlowQuery("f3", "h1", "h1")],
                         get_progress=["f1", "nope"])
        assert r2.ok, r2.errors
        start_f2 = r2.slot
        assert [(n.to_host, n.flow_id, n.f_pred_bytes, n.from_host) for n in r2.notifications] == [("h1", "f1", 4000, "h0")]
        assert r2.progress["f1"].cum_bytes == 4096 and "nope" not in r2.progress
        while slot_now() <= start_f2:  # fetch from a later slot: the window moves, the schedule does not
            time.sleep(0.005)
        r3 = exchange_ok(a, fetches=[wire.FlowQuery("f1", "h0", "h1"), wire.FlowQuery("fx", "h0", "h99")])
        assert r3.slot > start_f2
        assert r3.feedback["f1"].load_Bps == {"sw0>h1": tuple(planned(50, start_f2, r3, ep))}
        assert r3.flow_status == {"fx": Code.UNKNOWN_HOST}
        r4 = exchange_ok(b)  # a notification is delivered once
        assert r4.notifications == []
    m = metrics(mport)
    assert m["switchemu_table_flows"] == 2


def test_status_and_metrics_report_the_booking(server, tmp_path):
    """Two flows book h1's downlink (125 MB/s) at 80 + 60 = 140 MB/s in one real update frame: status (client,
    CLI text and JSON) and the metrics report a peak of 1.12 x capacity, slots that ended overbooked with the
    excess and the two flows, and nothing for the other links; reset_booking starts the counters over."""
    ep, mport, _ = server
    with SwitchClient([ep], host="h0") as c:
        r = exchange_ok(c, updates=[sched("a", "h0", "h1", 80_000_000), sched("b", "h2", "h1", 60_000_000)])
        assert r.ok, r.errors
        start = r.slot
        while slot_now() < start + 3:  # let a few booked slots end
            time.sleep(0.01)
        st = c.status()
        assert st["switch"] == "sw0" and st["flows"] == 2 and st["K"] == K
        bk = st["booking"]
        assert bk["tolerance"] == 0.01 and set(bk["links"]) == {"sw0>h1"}
        b = bk["links"]["sw0>h1"]
        assert b["capacity_Bps"] == 125_000_000 and b["peak_Bps"] == 140_000_000 and b["peak_ratio"] == 1.12
        assert b["slot_peak_ratio"] == 1.12 and b["worst_excess_Bps"] == 15_000_000 and b["worst_flows"] == 2
        assert b["over_slots"] == b["slots"] >= 2 and start <= b["worst_slot"] < slot_now()
        assert bk["worst"] == {"link": "sw0>h1", **b}
        m = metrics(mport)
        assert m['switchemu_link_booking_peak_ratio{link="sw0>h1"}'] == 1.12
        assert m['switchemu_link_slot_booking_peak_ratio{link="sw0>h1"}'] == 1.12
        assert m['switchemu_link_booking_worst_excess_bytes_per_second{link="sw0>h1"}'] == 15e6
        assert m['switchemu_link_booking_worst_flows{link="sw0>h1"}'] == 2
        assert m['switchemu_link_overbooked_slots_total{link="sw0>h1"}'] >= 2
        assert m['switchemu_link_booked_slots_total{link="sw0>h1"}'] >= 2
        assert not any("sw0>h0" in k for k in m)
        assert m['switchemu_requests_total{type="status"}'] == 1
        js = _cli("status", "--connect", ep, "--json")
        assert js.returncode == 0, js.stderr
        assert json.loads(js.stdout)["booking"]["worst"]["peak_ratio"] == 1.12
        txt = _cli("status", "--connect", ep)
        assert txt.returncode == 0 and "worst sw0>h1: slot peak 1.120 x capacity" in txt.stdout, txt.stdout
        # reset: the counts start over, the peak from what is booked at that moment (60 MB/s)
        assert exchange_ok(c, updates=[sched("a", "h0", "h1", 0, seq=2), sched("b", "h2", "h1", 60_000_000, seq=2)]).ok
        over = c.status(reset_booking=True)["booking"]["links"]["sw0>h1"]["over_slots"]
        after = c.status()["booking"]["links"]["sw0>h1"]
        assert after["peak_Bps"] == 60_000_000 and after["over_slots"] == 0 < over
    bad = _cli("status", "--connect", f"ipc://{tmp_path}/nobody.sock", "--timeout", "0.3")
    assert bad.returncode == 1 and bad.stderr.startswith("switchemu: error: ") and len(bad.stderr.splitlines()) == 1


def test_a_version_1_client_is_served_in_version_1(server):
    """An older daemon (wire version 1) keeps working against this switch: same feedback, v1 replies."""
    ep, _, _ = server
    with SwitchClient([ep], host="h0") as new, SwitchClient([ep], host="h0") as old:
        old.version[ep] = 1
        exchange_ok(new, updates=[sched("g2", "h2", "h1", 300)])
        got = [exchange_ok(c, fetches=[wire.FlowQuery("g1", "h0", "h1")]) for c in (new, old)]
        assert all(r.ok for r in got), [r.errors for r in got]
        assert got[0].feedback["g1"].load_Bps.keys() == got[1].feedback["g1"].load_Bps.keys() == {"sw0>h1"}
        assert max(got[1].feedback["g1"].path_load_Bps) == 300 and old.version[ep] == 1


class OldSwitch:
    """A switch that speaks wire version 1 only, as switchemu did before version 2: a real ROUTER
    socket in a thread that answers every other version with unknown_version and hands version 1
    frames to a real SwitchState."""

    def __init__(self, topo_file: str, ep: str):
        from hostctl.core.topology import Topology
        from switchemu.server import SwitchState

        self.state = SwitchState(Topology.from_toml(open(topo_file).read()), "all", slot_s=SLOT_S, horizon=K)
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.linger = 0
        self.sock.bind(ep)
        self.versions_seen: list = []
        self._stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self._stop:
            if not self.sock.poll(20):
                continue
            rid, *parts = self.sock.recv_multipart()
            out = []
            for f in parts:
                m = msgpack.unpackb(f)
                self.versions_seen.append(m.get("v"))
                if m.get("v") == 1:
                    out += self.state.handle_message([f], time.time())
                else:
                    out.append(wire.error_reply(Code.UNKNOWN_VERSION, f"wire version {m.get('v')} is not supported "
                                                "(this switch speaks 1)", m.get("id"), slot_now()))
            self.sock.send_multipart([rid, *out])

    def close(self) -> None:
        self._stop = True
        self.thread.join(5)
        self.sock.close(0)
        self.ctx.term()


def test_client_falls_back_to_version_1_for_an_old_switch(topo_file, tmp_path, caplog):
    ep = f"ipc://{tmp_path}/old.sock"
    old = OldSwitch(topo_file, ep)
    try:
        with SwitchClient([ep], host="h0") as c:
            assert c.probe(SLOT_S, timeout_s=5).version == 1 and c.version[ep] == 1
            c.version[ep] = wire.WIRE_VERSION  # as a daemon starts: the first exchange is refused, once
            with caplog.at_level("WARNING", logger="hostctl"):
                first = c.exchange(slot_now(), fetches=[wire.FlowQuery("g1", "h0", "h1")], timeout_s=2)
            assert first.error_codes == {ep: Code.UNKNOWN_VERSION} and c.version[ep] == 1
            assert "does not speak wire version 2" in caplog.text
            exchange_ok(c, updates=[sched("g2", "h2", "h1", 300)])
            r = exchange_ok(c, fetches=[wire.FlowQuery("g1", "h0", "h1")])
            assert r.ok and max(r.feedback["g1"].path_load_Bps) == 300
    finally:
        old.close()
    assert set(old.versions_seen) == {1, 2} and old.versions_seen.count(2) == 2  # the probe's and the first


def test_stale_and_future_slots_get_error_codes(server):
    ep, mport, _ = server
    with SwitchClient([ep], host="h0") as c:
        exchange_ok(c)
        for off, code in ((-10, Code.STALE_SLOT), (10, Code.FUTURE_SLOT)):
            r = c.exchange(slot_now() + off, updates=[sched("f", "h0", "h1", 5)], timeout_s=1.0)
            assert r.error_codes == {ep: code}, r.errors
            assert abs(r.slot_now[ep] - slot_now()) <= 1
    m = metrics(mport)
    assert m['switchemu_errors_total{code="stale_slot"}'] >= 1 and m['switchemu_errors_total{code="future_slot"}'] >= 1


def _fuzz_messages(n_frames: int, rng: random.Random) -> list[list[bytes]]:
    valid = wire.encode_request(wire.Request("update_schedule", 1, slot_now(), "h0", (sched("f", "h0", "h1", 5),)))
    fetch = [wire.encode_request(wire.Request("fetch_feedback", 2, slot_now(), "h0", (wire.FlowQuery("f", "h0", "h1"),),
                                              v)) for v in wire.WIRE_VERSIONS]
    vals = [None, True, 1.5, -3, 2**64 - 1, "x", b"y", [], {}, {"v": 1}, {"v": 1, "type": "notify"},
            {"v": 1, "type": "fetch_feedback", "id": 3, "slot": 1, "flows": [{"flow": 1}]},
            {"v": 7, "type": "x", "id": -1}, [1, [2, [3]]], {"flows": [None] * 50}]
    out, frames = [], 0

    def one() -> bytes:
        k = rng.randrange(6)
        if k == 0:
            return rng.randbytes(rng.randrange(0, 200))
        if k == 1:
            return msgpack.packb(rng.choice(vals))
        if k == 2:
            return valid[:rng.randrange(len(valid))]
        if k == 3:
            b = bytearray(valid)
            b[rng.randrange(len(b))] = rng.randrange(256)
            return bytes(b)
        if k == 4:
            return msgpack.packb({"v": rng.choice([1, 2, 3]), "type": rng.choice(wire.REQUEST_TYPES),
                                  "id": rng.randrange(2**32), "slot": rng.randrange(2**40),
                                  rng.choice(["flows", "items"]): [rng.choice(vals)]})
        return rng.choice([valid, *fetch]) if rng.random() < 0.3 else b""

    while frames < n_frames:
        r = rng.random()
        if r < 0.002:
            msg = [b"\x00" * (wire.MAX_FRAME_BYTES + 10)]  # oversized frame: error reply
        elif r < 0.01:
            msg = [one() for _ in range(wire.MAX_PARTS + 1)]  # too many parts
        elif r < 0.2:
            msg = [one() for _ in range(rng.randrange(2, 6))]  # multi-part garbage
        else:
            msg = [one()]
        out.append(msg)
        parts = msg[1:] if len(msg) > 1 and msg[0] == b"" else msg
        frames += 1 if not parts or len(parts) > wire.MAX_PARTS else len(parts)
    return out


def _expected_frames(msg: list[bytes]) -> int:
    parts = msg[1:] if len(msg) > 1 and msg[0] == b"" else msg
    return 1 if not parts or len(parts) > wire.MAX_PARTS else len(parts)


def test_fuzz_10k_frames_server_survives_and_counters_add_up(server):
    ep, mport, proc = server
    before = metrics(mport)
    msgs = _fuzz_messages(10_000, random.Random(1234))
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.linger = 0
    s.connect(ep)
    try:
        got_frames = 0
        for i in range(0, len(msgs), 200):
            chunk = msgs[i:i + 200]
            for m in chunk:
                s.send_multipart(m)
            for m in chunk:
                assert s.poll(10_000), "no reply from the switch"
                reply = s.recv_multipart()
                if len(m) > 1 and m[0] == b"":
                    assert reply[0] == b""
                    reply = reply[1:]
                assert len(reply) == _expected_frames(m)
                for f in reply:
                    wire.decode_reply(f)  # every reply frame is well formed
                got_frames += len(reply)
    finally:
        s.close(0)
        ctx.term()
    assert got_frames >= 10_000
    assert proc.poll() is None
    with SwitchClient([ep], host="h0") as c:
        r = exchange_ok(c, updates=[sched("ok", "h0", "h1", 9)], fetches=[wire.FlowQuery("ok", "h0", "h1")])
        assert r.ok and r.feedback["ok"].complete, r.errors
    after = metrics(mport)

    def d(key):
        return after.get(key, 0) - before.get(key, 0)

    frames = d("switchemu_frames_total")
    replies = sum(d(k) for k in after if k.startswith("switchemu_requests_total"))
    errors = sum(d(k) for k in after if k.startswith("switchemu_errors_total"))
    assert frames == got_frames + 2  # + the final update and fetch
    assert frames == replies + errors
    assert d('switchemu_errors_total{code="malformed"}') > 1000
    assert d('switchemu_errors_total{code="oversized"}') > 0
    assert d('switchemu_errors_total{code="internal"}') == 0


def test_switch_restart_is_survived(procs, topo_file, tmp_path):
    ep = f"ipc://{tmp_path}/restart.sock"
    p = procs.start("--bind", ep, "--topology", topo_file, "--log-level", "WARNING")
    wait_up(ep, p)
    with SwitchClient([ep], host="h0") as c:
        assert exchange_ok(c, fetches=[wire.FlowQuery("f", "h0", "h1")]).ok
        os.kill(p.pid, signal.SIGTERM)
        assert p.wait(5) == 0
        t0 = time.monotonic()
        r = c.exchange(slot_now(), fetches=[wire.FlowQuery("f", "h0", "h1")], timeout_s=0.03)
        assert not r.ok and time.monotonic() - t0 < 0.5  # never blocks past the timeout
        p2 = procs.start("--bind", ep, "--topology", topo_file, "--log-level", "WARNING")
        wait_up(ep, p2)
        for _ in range(100):
            r = c.exchange(slot_now(), fetches=[wire.FlowQuery("f", "h0", "h1")], timeout_s=0.1)
            if r.ok:
                break
            time.sleep(0.05)
        assert r.ok, r.errors


def test_sigterm_exits_cleanly_with_a_summary(server):
    _, _, p = server
    os.kill(p.pid, signal.SIGTERM)
    assert p.wait(5) == 0


def _keygen(folder, *args: str) -> None:
    r = subprocess.run([SWITCHEMU, "keygen", str(folder), *args], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr


def test_curve_accepts_authorized_and_refuses_unknown_keys(procs, topo_file, tmp_path):
    keys, rogue = tmp_path / "keys", tmp_path / "rogue"
    _keygen(keys)
    _keygen(rogue)
    shutil.copy(keys / "server.key", rogue / "server.key")  # knows the server, but is not authorized
    ep = f"tcp://127.0.0.1:{free_port()}"
    mport = free_port()
    p = procs.start("--bind", ep, "--topology", topo_file, "--curve-keys", str(keys), "--metrics-port", str(mport),
                    "--log-level", "WARNING")
    good = CurveClientKeys.from_dir(str(keys))
    wait_up(ep, p, curve=good)
    with SwitchClient([ep], host="h0", curve=good) as c:
        assert exchange_ok(c, fetches=[wire.FlowQuery("f", "h0", "h1")]).ok
    with SwitchClient([ep], host="h0", curve=CurveClientKeys.from_dir(str(rogue))) as c:
        time.sleep(0.3)
        r = c.exchange(slot_now(), fetches=[wire.FlowQuery("f", "h0", "h1")], timeout_s=0.3)
        assert not r.ok and not r.feedback
    r = subprocess.run([SWITCHEMU, "probe", "--connect", ep, "--curve-keys", str(rogue), "--timeout", "0.5"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    r = subprocess.run([SWITCHEMU, "probe", "--connect", ep, "--curve-keys", str(keys)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert metrics(mport)["switchemu_auth_failures_total"] >= 1


def test_each_host_has_its_own_key_and_a_revoked_key_gets_no_more_replies(procs, topo_file, tmp_path):
    """A fleet's keys as docs/switchemu.md gives them: each host makes its own pair (--client-only: no
    server keys, no secret leaves the host), the switch authorizes the public halves in clients/. A key
    deleted from clients/ and SIGHUP: its open session gets no more replies, a new handshake is refused,
    the other hosts are served as before."""
    sw, ha, hb = tmp_path / "switch", tmp_path / "host-a", tmp_path / "host-b"
    _keygen(sw)
    _keygen(ha, "--client", "host-a", "--client-only")
    _keygen(hb, "--client", "host-b", "--client-only")
    assert sorted(os.listdir(ha)) == ["host-a.key", "host-a.key_secret"]
    assert os.stat(ha / "host-a.key_secret").st_mode & 0o777 == 0o600
    for h, name in ((ha, "host-a"), (hb, "host-b")):
        shutil.copy(sw / "server.key", h / "server.key")
        shutil.copy(h / f"{name}.key", sw / "clients" / f"{name}.key")
    ep = f"tcp://127.0.0.1:{free_port()}"
    mport = free_port()
    p = procs.start("--bind", ep, "--topology", topo_file, "--curve-keys", str(sw), "--metrics-port", str(mport),
                    "--log-level", "INFO")
    key_a, key_b = CurveClientKeys.from_dir(str(ha)), CurveClientKeys.from_dir(str(hb / "host-b.key_secret"))
    wait_up(ep, p, curve=key_a)
    q = [wire.FlowQuery("f", "h0", "h1")]
    with SwitchClient([ep], host="h0", curve=key_a) as a, SwitchClient([ep], host="h1", curve=key_b) as b:
        assert exchange_ok(a, fetches=q).ok and exchange_ok(b, fetches=q).ok  # b's session is open
        (sw / "clients" / "host-b.key").unlink()
        os.kill(p.pid, signal.SIGHUP)
        for _ in range(50):  # (the reload happens in the switch's loop, within its 100 ms poll)
            r = b.exchange(slot_now(), fetches=q, timeout_s=0.1)
            if not r.latency_s:
                break
        assert not r.latency_s and "timeout" in r.errors[ep]
        assert exchange_ok(a, fetches=q).ok
    r = subprocess.run([SWITCHEMU, "probe", "--connect", ep, "--curve-keys", str(hb), "--timeout", "0.5"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1  # a new handshake with the revoked key
    r = subprocess.run([SWITCHEMU, "probe", "--connect", ep, "--curve-keys", str(ha / "host-a.key_secret")],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    m = metrics(mport)
    assert m["switchemu_revoked_messages_total"] >= 1 and m["switchemu_auth_failures_total"] >= 1
    os.kill(p.pid, signal.SIGTERM)
    assert p.wait(5) == 0
    assert "reloaded 2 authorized client keys; 1 revoked" in p.stderr.read()


def test_probe_exit_codes(server, tmp_path):
    ep, _, _ = server
    r = subprocess.run([SWITCHEMU, "probe", "--connect", ep], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "fetch round trip" in r.stdout and " ms" in r.stdout, r.stderr
    # the same machine's clock: the offset is within the round trip (a few ms on a loaded CI machine)
    off = float(re.search(r"the switch's clock ([-+][\d.]+) ms from this host's", r.stdout).group(1))
    assert abs(off) < 50, r.stdout
    r = subprocess.run([SWITCHEMU, "probe", "--connect", f"ipc://{tmp_path}/nobody.sock", "--timeout", "0.3"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith("switchemu: error: no answer from") and len(r.stderr.splitlines()) == 1


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([SWITCHEMU, *args], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "COLUMNS": "100", "NO_COLOR": "1"})


@pytest.mark.parametrize("args, fragment", [
    (["--bind", "tcp://127.0.0.1:1", "--topology", "/nonexistent/topo.toml"], "does not exist"),
    (["--topology", "TOPO"], "give --bind"),
    (["--bind", "tcp://127.0.0.1:1"], "give --topology"),
    (["--bind", "tcp://127.0.0.1:1", "--topology", "TOPO", "--slot-ms", "abc"], "--slot-ms"),
    (["--bind", "tcp://127.0.0.1:1", "--topology", "TOPO", "--no-such-flag"], "--no-such-flag"),
    (["--bind", "tcp://127.0.0.1:1", "--topology", "TOPO", "--horizon", "0"], "--horizon"),
    (["--bind", "tcp://127.0.0.1:1", "--topology", "TOPO", "--name", "sw9"], "not in the topology"),
    (["--bind", "tcp://127.0.0.1:1", "--topology", "RACKS"], "--name"),
    (["--bind", "nonsense", "--topology", "TOPO"], "bad --bind 'nonsense'"),
    (["--bind", "tcp://127.0.0.1:99999", "--topology", "TOPO"], "bad --bind"),  # ZeroMQ: port 34463
    (["--bind", "tcp://203.0.113.1:5555", "--topology", "TOPO", "--name", "all"], "cannot bind"),  # not ours
    (["--bind", "tcp://127.0.0.1:1", "--topology", "TOPO", "--curve-keys", "/nonexistent"], "--curve-keys"),
    (["--bind", "tcp://127.0.0.1:1", "--topology", "BAD"], "host_rate"),
    (["probe"], "--connect"),
    (["status"], "--connect"),
    (["status", "--connect", "ipc:///x", "--top", "-1"], "--top"),
    (["--bind", "tcp://127.0.0.1:1", "--topology", "TOPO", "--booking-tolerance", "-1"], "--booking-tolerance"),
    # found by tests/cli_fuzz.py: tracebacks, a client that never gave up, a message broken over lines
    (["probe", "--connect", "tcp://"], "bad --connect 'tcp://'"),
    (["status", "--connect", "tcp://127.0.0.1:1\nx"], "bad --connect 'tcp://127.0.0.1:1\\nx'"),
    (["status", "--connect", "127.0.0.1:5555"], "give tcp://HOST:PORT"),
    (["status", "--connect", "ipc:///tmp/" + "s" * 200], "at most 107 bytes"),
    (["probe", "--connect", "tcp://127.0.0.1:1", "--timeout", "nan"], "--timeout must be within"),
    (["status", "--connect", "tcp://127.0.0.1:1", "--timeout", "inf"], "--timeout must be within"),
    (["probe", "--connect", "tcp://127.0.0.1:1", "--slot-ms", "1e-320"], "--slot-ms must be within"),
    (["--bind", "tcp://127.0.0.1:1\nx", "--topology", "TOPO", "--name", "all"], "bad --bind 'tcp://127.0.0.1:1\\nx'"),
    (["--bind", "tcp://127.0.0.1:1", "--topology", "DEEP"], "nested too deeply"),
])
def test_cli_errors_are_one_line(args, fragment, topo_file, tmp_path):
    racks = tmp_path / "racks.toml"
    racks.write_text('[[switch]]\nname="t0"\nparent="a"\nuplink_rate="1gbit"\n[[switch]]\nname="a"\n')
    bad = tmp_path / "bad.toml"
    bad.write_text('[[switch]]\nname="t0"\nhost_rate="fast"\n')
    deep = tmp_path / "deep.toml"
    deep.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    args = [{"TOPO": topo_file, "RACKS": str(racks), "BAD": str(bad), "DEEP": str(deep)}.get(a, a) for a in args]
    r = _cli(*args)
    out = f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    assert r.returncode != 0 and "Traceback" not in r.stdout + r.stderr, out
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("switchemu: error: ") and fragment in lines[0], out


@pytest.mark.parametrize("ep, fragment", [
    ("ipc:///tmp/" + "s" * 200, "at most 107 bytes"),  # longer than sun_path
    ("tcp://\udcff:5555", "not UTF-8"),  # a byte 0xff in argv or the config file's bytes
    ("tcp://", "Invalid argument"),
])
def test_a_client_on_an_endpoint_zeromq_refuses_gets_one_config_error(ep, fragment):
    from hostctl.errors import ConfigError

    with pytest.raises(ConfigError, match=f"cannot connect to switch endpoint .*{fragment}"):
        SwitchClient([ep])


def test_keygen_into_a_folder_whose_name_is_not_utf8(tmp_path):
    """A non-UTF-8 byte in a path (Python keeps it as a surrogate) is printed escaped, not a
    UnicodeEncodeError on a UTF-8 terminal's stdout (LC_ALL=C.UTF-8: strict)."""
    folder = os.fsencode(tmp_path) + b"/keys-\xff"
    r = subprocess.run([os.fsencode(SWITCHEMU), b"keygen", folder], capture_output=True, timeout=30,
                       env={**os.environ, "LC_ALL": "C.UTF-8", "PYTHONIOENCODING": ""})
    out = f"exit {r.returncode}\n{r.stdout!r}\n{r.stderr!r}"
    assert r.returncode == 0 and b"Traceback" not in r.stderr, out
    assert b"keys-\\udcff: wrote server and client keypairs" in r.stdout, out
    assert os.path.isfile(folder + b"/server.key_secret") and os.path.isfile(folder + b"/clients/client.key"), out
