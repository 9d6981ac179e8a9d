"""Independent view of kernel state: stdlib only, shells out to iproute2.

Must not import hostctl (a test of hostctl must not trust hostctl's own reading).
tc 6.1 prints htb classes as text even with -j, so classes are parsed from text.
"""

from __future__ import annotations

import json
import re
import subprocess

_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9}


def _tc(ns: str, *args: str) -> str:
    return subprocess.run(["ip", "netns", "exec", ns, "tc", *args], check=True,
                          capture_output=True, text=True).stdout


def rate_bps(text: str) -> int:
    m = re.fullmatch(r"([0-9.]+)([KMG]?bit)", text, re.I)
    assert m, text
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def qdiscs(ns: str, dev: str) -> list[dict]:
    out = json.loads(_tc(ns, "-j", "qdisc", "show", "dev", dev) or "[]")
    for q in out:  # counters and refcounts are not configuration
        q.pop("refcnt", None)
        q.get("options", {}).pop("direct_packets_stat", None)
    return out


def root_qdisc(ns: str, dev: str) -> dict:
    return next(q for q in qdiscs(ns, dev) if q.get("root"))


def htb_classes(ns: str, dev: str) -> dict[str, dict]:
    out = {}
    for line in _tc(ns, "-d", "class", "show", "dev", dev).splitlines():
        m = re.match(r"class htb (\S+) (?:root|parent (\S+)) (?:leaf \S+ )?(?:prio (\d+) )?"
                     r"(?:quantum (\d+) )?rate (\S+) ceil (\S+)", line)
        if m:
            out[m.group(1)] = {"parent": m.group(2), "prio": int(m.group(3)) if m.group(3) else None,
                               "quantum": int(m.group(4)) if m.group(4) else None,
                               "rate_bps": rate_bps(m.group(5)), "ceil_bps": rate_bps(m.group(6))}
    return out


def filters(ns: str, dev: str, parent: str) -> list[dict]:
    return [f for f in json.loads(_tc(ns, "-j", "filter", "show", "dev", dev, "parent", parent) or "[]")
            if "options" in f]


def class_bytes(ns: str, dev: str) -> dict[str, int]:
    """classid -> bytes sent, from `tc -s class show`."""
    out: dict[str, int] = {}
    cur = None
    for line in _tc(ns, "-s", "class", "show", "dev", dev).splitlines():
        m = re.match(r"class \S+ (\S+)", line)
        if m:
            cur = m.group(1)
            continue
        m = re.match(r"\s*Sent (\d+) bytes", line)
        if m and cur:
            out[cur] = int(m.group(1))
            cur = None
    return out
