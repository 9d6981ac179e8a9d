"""The daemon's control socket: JSON over an abstract unix socket.

Abstract unix sockets belong to the network namespace they were bound in, so
`hostctl status` / `hostctl stop` run with `ip netns exec NS` reach the daemon of
that namespace and no other. One request and one reply per connection:
  {"cmd": "status"}  -> {"ok": true, "status": {...}}
  {"cmd": "stop"}    -> {"ok": true}
  {"cmd": "hint", "job": J, "bytes_per_iter": N, "iteration_start": unix_s} -> {"ok": true}
Root (uid 0) and the daemon's own uid may send anything; other users may send
``status`` (read-only: `hostctl status` works for every local user) and ``hint`` (a
training process running as its own user; the handler checks that they own the job,
SO_PEERCRED). ``stop`` and every other command are refused to them with a line that
says so.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import struct
import threading
from collections.abc import Callable

from hostctl import consts
from hostctl.errors import HostctlError, NotRunningError

log = logging.getLogger("hostctl.control")
MAX_REQUEST = 65536


class ControlServer:
    # Commands any local user may send: status is read-only, hint's handler checks that the caller
    # owns a process of the job. Everything else (stop, ...) changes the host: root or the daemon's uid.
    OPEN_CMDS = frozenset({"status", "hint"})

    def __init__(self, handlers: dict[str, Callable[[dict], dict]], address: str = consts.CONTROL_SOCKET):
        self.handlers = handlers
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.bind(address)
        except OSError as e:
            self.sock.close()
            raise HostctlError(
                "another hostctl daemon already runs in this network namespace "
                "(its control socket is bound); see `hostctl status`, stop it with `hostctl stop`"
            ) from e
        self.sock.listen(16)
        self.sock.settimeout(0.5)
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, name="hostctl-control", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return
            with conn:
                try:
                    self._handle(conn)
                except Exception as e:  # never let a client kill the server
                    log.warning("control request failed: %s", e)

    def _handle(self, conn: socket.socket) -> None:
        conn.settimeout(2.0)
        pid, uid, gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        privileged = uid in (0, os.geteuid())
        data = b""
        while not data.endswith(b"\n") and len(data) < MAX_REQUEST:
            chunk = conn.recv(4096)
            if not chunk:
                break
            data += chunk
        if not data:
            return  # a liveness probe (is_running) connects and closes: nothing to answer
        try:
            req = json.loads(data)
            handler = self.handlers[req["cmd"]]
        except (ValueError, KeyError, TypeError, RecursionError):  # (RecursionError: JSON nested too deep)
            conn.sendall(json.dumps({"ok": False, "error": "bad request"}).encode())
            return
        if not privileged and req["cmd"] not in self.OPEN_CMDS:
            conn.sendall(json.dumps({"ok": False, "error": f"permission denied: {req['cmd']} changes the host and "
                                     f"needs root (uid {uid} may read status); run it with sudo"}).encode())
            return
        req["_peer"] = {"pid": pid, "uid": uid, "privileged": privileged}
        try:
            reply = handler(req)
        except ValueError as e:  # the request was understood but refused: say why
            conn.sendall(json.dumps({"ok": False, "error": str(e)}).encode())
            return
        conn.sendall(json.dumps({"ok": True, **reply}, default=str).encode())

    def close(self) -> None:
        self._stop.set()
        self.sock.close()
        if self.thread.is_alive():
            self.thread.join(timeout=2)


def request(cmd: str, timeout_s: float = 3.0, address: str = consts.CONTROL_SOCKET, **kw) -> dict:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout_s)
    try:
        try:
            s.connect(address)
        except (FileNotFoundError, ConnectionRefusedError):
            raise NotRunningError(
                "no hostctl daemon runs in this network namespace (start one with `hostctl start`)"
            ) from None
        s.sendall(json.dumps({"cmd": cmd, **kw}).encode() + b"\n")
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except (TimeoutError, socket.timeout):
        raise HostctlError("the hostctl daemon did not answer within "
                           f"{timeout_s:g}s; it may be stuck: `hostctl clean` removes its changes") from None
    finally:
        s.close()
    try:
        reply = json.loads(data)
    except ValueError:
        raise HostctlError("the hostctl daemon sent a garbled reply") from None
    if not reply.get("ok"):
        raise HostctlError(f"the hostctl daemon refused: {reply.get('error')}")
    return reply


def is_running(address: str = consts.CONTROL_SOCKET) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(address)
        return True
    except OSError:
        return False
    finally:
        s.close()
