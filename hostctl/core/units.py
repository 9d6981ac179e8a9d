"""Parsing of rates, sizes, durations and port lists (pure).

Rates are returned in bits per second (`_bps`). Conversion to bytes per second
is explicit at the call sites that need it (htb takes bytes/s: `bps // 8`).
"""

from __future__ import annotations

import math
import re

from hostctl.errors import ConfigError

_RATE_UNITS = {
    "": 1, "bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12,
    "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
    "bps": 8, "kbps": 8 * 10**3, "mbps": 8 * 10**6, "gbps": 8 * 10**9,  # tc convention: Xbps = bytes/s
}
_SIZE_UNITS = {
    "": 1, "b": 1, "k": 1024, "kb": 1000, "kib": 1024, "m": 1024**2, "mb": 10**6, "mib": 1024**2,
    "g": 1024**3, "gb": 10**9, "gib": 1024**3,
}


def parse_rate_bps(text: str | int | float, *, what: str = "rate") -> int:
    """'200mbit' -> 200_000_000 (bits/s). Units follow tc: bit/kbit/mbit/gbit (bits),
    kbps/mbps/gbps (bytes per second). A bare number is bits/s."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
        unit = m.group(2).lower() if m else ""
        if not m or unit not in _RATE_UNITS:
            raise ConfigError(
                f"bad {what} {text!r}: write a number with a tc unit, e.g. 200mbit, 10gbit, 500kbit"
            )
        value = float(m.group(1)) * _RATE_UNITS[unit]
    if not math.isfinite(value) or value > 10**15:
        raise ConfigError(f"bad {what} {text!r}: must be a finite rate below 1000tbit")
    if value < 8_000:
        raise ConfigError(f"bad {what} {text!r}: must be at least 8kbit")
    return int(value)


def parse_fraction_or_rate(text: str, *, what: str) -> tuple[float | None, int | None]:
    """'10%' -> (0.10, None); '50mbit' -> (None, 50_000_000)."""
    s = str(text).strip()
    if s.endswith("%"):
        try:
            pct = float(s[:-1])
        except ValueError:
            raise ConfigError(f"bad {what} {text!r}: write a percentage like 10% or a rate like 50mbit") from None
        if not 0 <= pct <= 100:
            raise ConfigError(f"bad {what} {text!r}: percentage must be within 0%..100%")
        return pct / 100.0, None
    return None, parse_rate_bps(s, what=what)


def parse_size_bytes(text: str | int, *, what: str = "size") -> int:
    """'4MiB' -> 4194304; '98MB' -> 98_000_000; 123 -> 123."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise ConfigError(f"bad {what} {text!r}: must not be negative")
        return text
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        raise ConfigError(f"bad {what} {text!r}: write bytes with a unit, e.g. 98MB, 4MiB, 1.2GB")
    value = float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()]
    if not math.isfinite(value) or value > 2**62:
        raise ConfigError(f"bad {what} {text!r}: too large")
    return int(value)


def parse_ports(text: str, *, what: str = "--ports") -> tuple[int, ...]:
    """'9000-9002,9100' -> (9000, 9001, 9002, 9100). Sorted, unique."""
    ports: set[int] = set()
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise ConfigError(f"bad {what} entry {part!r}: use ports and ranges like 9000-9005,9100")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        if not (1 <= lo <= 65535 and 1 <= hi <= 65535) or hi < lo:
            raise ConfigError(f"bad {what} entry {part!r}: ports are 1..65535 and ranges go low-high")
        if hi - lo > 4096:
            raise ConfigError(f"bad {what} entry {part!r}: a range may span at most 4096 ports")
        ports.update(range(lo, hi + 1))
    if not ports:
        raise ConfigError(f"{what} is empty: give ports like 9000-9005,9100")
    return tuple(sorted(ports))


def parse_pids(text: str, *, what: str = "--pids") -> tuple[int, ...]:
    out = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        if not re.fullmatch(r"[0-9]{1,9}", part) or int(part) <= 0:
            raise ConfigError(f"bad {what} entry {part!r}: give process ids like 1234,5678")
        out.append(int(part))
    if not out:
        raise ConfigError(f"{what} is empty: give process ids like 1234,5678")
    return tuple(sorted(set(out)))


def _human(value: float, units: tuple[tuple[str, float], ...], base: str) -> str:
    """Three significant digits, stepping up a unit before rounding would print 1000."""
    for unit, div in units:
        if value >= div * 0.9995:
            v = value / div
            return f"{v:.0f}{unit}" if v >= 999.5 else f"{v:.3g}{unit}"
    return f"{value:.0f}{base}"


def format_rate(bps: float) -> str:
    return _human(bps, (("Tbit", 1e12), ("Gbit", 1e9), ("Mbit", 1e6), ("kbit", 1e3)), "bit")


def format_bytes(n: float) -> str:
    return _human(n, (("TiB", 1024.0**4), ("GiB", 1024.0**3), ("MiB", 1024.0**2), ("KiB", 1024.0)), "B")
