"""sock_diag listener dump agrees with /proc/net/tcp{,6} (no root needed)."""

import socket

from hostctl.core.types import JobSpec
from hostctl.discovery import Discovery, read_diag_listeners, read_proc_sockets


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
