"""sock_diag socket dumps agree with /proc/net/tcp{,6} (no root needed)."""

import socket

from hostctl.core.types import JobSpec
from hostctl.discovery import Discovery, read_diag_listeners, read_diag_sockets, read_proc_sockets, take_socket_snapshot


def _listen(family, addr):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.bind((addr, 0))
    s.listen(4)
    return s


def test_diag_listeners_match_proc():
    socks = [_listen(socket.AF_INET, "127.0.0.1")]
    try:
        socks.append(_listen(socket.AF_INET6, "::1"))
    except OSError:
        pass  # no IPv6 loopback here
    try:
        diag = read_diag_listeners()
        assert diag is not None
        proc = {(s.laddr, s.lport) for s in read_proc_sockets() if s.state == "LISTEN"}
        got = {(s.laddr, s.lport) for s in diag}
        assert got == proc
        for s in socks:
            addr, port = s.getsockname()[:2]
            assert (addr, port) in got
    finally:
        for s in socks:
            s.close()


def test_port_discovery_sees_flows_and_new_listeners():
    srv = _listen(socket.AF_INET, "127.0.0.1")
    port = srv.getsockname()[1]
    cli = socket.create_connection(("127.0.0.1", port))
    conn, _ = srv.accept()
    try:
        d = Discovery([JobSpec(ports=(port, port + 1))], flows_every=3)
        jobs = d.scan()
        assert [j.listen_ports for j in jobs] == [(port,)] and len(jobs[0].flows) == 1
        for _ in range(4):  # flows come from the cached full snapshot between refreshes
            assert d.scan()[0].flows == jobs[0].flows
    finally:
        for s in (conn, cli, srv):
            s.close()
    assert Discovery([JobSpec(ports=(port,))]).scan() == []  # the listener is gone at once


def test_diag_sockets_match_proc_with_established_and_v4_mapped():
    """Listeners and established connections, IPv4 and an IPv4 client on a dual-stack IPv6
    listener (v4-mapped addresses, which both readers give as plain IPv4)."""
    srv = _listen(socket.AF_INET, "127.0.0.1")
    pairs = [(socket.create_connection(srv.getsockname()), srv)]
    try:
        dual = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        dual.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        dual.bind(("::", 0))
        dual.listen(4)
        pairs.append((socket.create_connection(("127.0.0.1", dual.getsockname()[1])), dual))
    except OSError:
        dual = None  # no IPv6 here
    accepted = [lst.accept()[0] for _, lst in pairs]
    try:
        ports = {lst.getsockname()[1] for _, lst in pairs}

        def mine(socks):
            return {s for s in socks if s.lport in ports or s.rport in ports}

        for _ in range(3):  # other tests' sockets may come and go between the two reads: retry
            diag = read_diag_sockets()
            assert diag is not None
            got, want = mine(diag), mine(read_proc_sockets())
            if got == want:
                break
        assert got == want
        assert {s.state for s in got} == {"LISTEN", "ESTABLISHED"}
        assert all(":" not in s.laddr and ":" not in s.raddr for s in got if s.state == "ESTABLISHED")
        assert len([s for s in got if s.state == "ESTABLISHED"]) == 2 * len(pairs)
        assert mine(take_socket_snapshot().socks) == got
    finally:
        for s in accepted + [c for c, _ in pairs] + [srv] + ([dual] if dual else []):
            s.close()
