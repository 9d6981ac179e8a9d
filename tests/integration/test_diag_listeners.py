"""sock_diag socket dumps agree with /proc/net/tcp{,6} (no root needed)."""

import socket

from hostctl.core.types import JobSpec
from hostctl.discovery import (
    Discovery, port_bytecode, read_diag_listeners, read_diag_sockets, read_proc_sockets, take_socket_snapshot,
)


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
        d = Discovery([JobSpec(ports=(port, port + 1))])
        jobs = d.scan()
        assert [j.listen_ports for j in jobs] == [(port,)] and len(jobs[0].flows) == 1
        for _ in range(4):
            assert d.scan()[0].flows == jobs[0].flows
        # a new connection is seen at the next scan
        cli2 = socket.create_connection(("127.0.0.1", port))
        conn2, _ = srv.accept()
        assert len(d.scan()[0].flows) == 2
        for s in (cli2, conn2):
            s.close()
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


def test_port_filter_in_the_kernel_keeps_local_and_remote_ports():
    """read_diag_sockets(ports=...) gives exactly the sockets whose local or remote port is listed:
    the listener of a listed port, the accepted end (local port) and the client end (remote port)
    of its connections; not the sockets of an unlisted listener, whatever their ephemeral ports."""
    a, b = _listen(socket.AF_INET, "127.0.0.1"), _listen(socket.AF_INET, "127.0.0.1")
    pa, pb = a.getsockname()[1], b.getsockname()[1]
    clients = [socket.create_connection(("127.0.0.1", p)) for p in (pa, pa, pb)]
    accepted = [a.accept()[0], a.accept()[0], b.accept()[0]]
    try:
        def mine(socks):
            return {s for s in socks if pa in (s.lport, s.rport) or pb in (s.lport, s.rport)}

        got = read_diag_sockets(ports=[pa])
        assert got is not None
        want = {s for s in mine(read_diag_sockets()) if pa in (s.lport, s.rport)}
        assert mine(got) == want and len(want) == 5  # listener + 2 accepted + 2 clients
        assert {s for s in got if pb in (s.lport, s.rport)} == set()
        assert mine(read_diag_sockets(ports=[pa, pb, 1])) == mine(read_diag_sockets())
        assert read_diag_sockets(ports=[]) == []
        assert len(port_bytecode([pa, pb])) == 4 * 8 + 3 * 4  # four tests, three jumps
    finally:
        for s in clients + accepted + [a, b]:
            s.close()
