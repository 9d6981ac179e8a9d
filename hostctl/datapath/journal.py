"""What hostctl changed on an interface, written before each change.

One JSON file per interface under the per-netns state folder
(``/run/hostctl/ns<inode>/<iface>.json``). It holds the previous egress qdisc tree
(raw, see rtnl_raw.py), the handle of the qdisc hostctl created, the PID of the
daemon and, with ingress bands, the IFB device hostctl made and whether it added
the NIC's clsact qdisc (else only its own ingress filter is removed).
``hostctl clean`` uses it to restore the interface after a crash.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from hostctl import consts
from hostctl.datapath.rtnl_raw import TcObject


@dataclass
class Journal:
    iface: str
    ifindex: int
    pid: int
    qdisc_handle: int
    previous: list[TcObject] = field(default_factory=list)
    policy: str = ""
    ingress_ifb: str = ""  # IFB device hostctl created ("" = no ingress bands)
    ingress_clsact: bool = False  # hostctl added the NIC's clsact qdisc (remove it on undo)

    @staticmethod
    def path(iface: str, directory: str | None = None) -> str:
        return os.path.join(directory or consts.state_dir(), f"{iface}.json")

    def save(self, directory: str | None = None) -> None:
        d = directory or consts.state_dir()
        os.makedirs(d, mode=0o700, exist_ok=True)
        p = self.path(self.iface, d)
        tmp = p + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"iface": self.iface, "ifindex": self.ifindex, "pid": self.pid,
                       "qdisc_handle": self.qdisc_handle, "policy": self.policy,
                       "previous": [o.to_json() for o in self.previous],
                       "ingress_ifb": self.ingress_ifb, "ingress_clsact": self.ingress_clsact}, f, indent=1)
        os.replace(tmp, p)

    @classmethod
    def load(cls, iface: str, directory: str | None = None) -> "Journal | None":
        try:
            with open(cls.path(iface, directory)) as f:
                d = json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return None
        return cls(d["iface"], int(d["ifindex"]), int(d["pid"]), int(d["qdisc_handle"]),
                   [TcObject.from_json(o) for o in d.get("previous", [])], d.get("policy", ""),
                   str(d.get("ingress_ifb", "")), bool(d.get("ingress_clsact", False)))

    @classmethod
    def all(cls, directory: str | None = None) -> list["Journal"]:
        d = directory or consts.state_dir()
        try:
            names = sorted(n for n in os.listdir(d) if n.endswith(".json"))
        except FileNotFoundError:
            return []
        return [j for n in names if (j := cls.load(n[:-5], d)) is not None]

    def remove(self, directory: str | None = None) -> None:
        try:
            os.unlink(self.path(self.iface, directory))
        except FileNotFoundError:
            pass


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def daemon_alive(pid: int) -> bool:
    """True if ``pid`` is a live hostctl process (guards against PID reuse)."""
    if pid <= 0 or not pid_alive(pid):
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"hostctl" in f.read()
    except OSError:
        return False
