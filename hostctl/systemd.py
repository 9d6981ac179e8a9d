"""What the daemon says to systemd, without a dependency on libsystemd.

* ``notify(...)``: sd_notify(3) by hand. With ``Type=notify`` systemd sets
  ``$NOTIFY_SOCKET`` (a path, or ``@name`` for an abstract socket) and waits for
  ``READY=1`` before units ordered ``After=hostctl.service`` start. The daemon sends
  ``READY=1`` once its tc tree, classifier and first job table are in place,
  ``RELOADING=1`` + ``MONOTONIC_USEC=`` and then ``READY=1`` around a reload (what
  ``Type=notify-reload`` expects), ``STOPPING=1`` when it starts tearing down, and
  ``STATUS=`` lines that ``systemctl status`` shows. Without ``$NOTIFY_SOCKET`` it is a no-op.
* ``log_handler(stream)``: when stderr is the journal (``$JOURNAL_STREAM`` names the
  device and inode of stderr), every line starts with a ``<N>`` syslog priority, which
  journald reads (``SyslogLevelPrefix=``, on by default), so ``journalctl -p warning``
  works; journald adds the time, so the line carries none. Elsewhere lines are
  ``TIME hostctl LEVEL message``.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping
from typing import TextIO

log = logging.getLogger("hostctl")

# logging level -> syslog priority (sd-daemon(3): <3> error, <4> warning, <6> info, <7> debug)
PRIORITIES = ((logging.CRITICAL, 2), (logging.ERROR, 3), (logging.WARNING, 4), (logging.INFO, 6))


def notify(*fields: str, env: Mapping[str, str] | None = None) -> bool:
    """Send one sd_notify message (fields joined by newlines); False when there is no
    $NOTIFY_SOCKET or sending failed (never raises: systemd's absence is not an error)."""
    addr = (os.environ if env is None else env).get("NOTIFY_SOCKET", "")
    if addr.startswith("@"):
        addr = "\0" + addr[1:]
    elif not addr.startswith("/"):  # unset, or a vsock address (VMs), which hostctl does not speak
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.connect(addr)
            s.sendall("\n".join(fields).encode())
        return True
    except OSError as e:
        log.debug("sd_notify to %r failed: %s", addr, e)
        return False


def monotonic_usec() -> str:
    """The MONOTONIC_USEC= field of a RELOADING=1 message (CLOCK_MONOTONIC, microseconds)."""
    return f"MONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}"


def syslog_priority(levelno: int) -> int:
    for level, prio in PRIORITIES:
        if levelno >= level:
            return prio
    return 7


class JournalFormatter(logging.Formatter):
    """``<N>message`` on every line of a record (journald treats each line as an entry)."""

    def format(self, record: logging.LogRecord) -> str:
        prefix = f"<{syslog_priority(record.levelno)}>"
        return "\n".join(prefix + line for line in super().format(record).split("\n"))


def stream_is_journal(stream: TextIO, env: Mapping[str, str] | None = None) -> bool:
    """True when ``stream`` is the journal stream systemd connected ($JOURNAL_STREAM = DEV:INODE)."""
    value = (os.environ if env is None else env).get("JOURNAL_STREAM", "")
    try:
        dev, ino = (int(x) for x in value.split(":"))
        st = os.fstat(stream.fileno())
    except (ValueError, OSError, AttributeError):
        return False
    return (st.st_dev, st.st_ino) == (dev, ino)


def log_handler(stream: TextIO, env: Mapping[str, str] | None = None) -> logging.Handler:
    h = logging.StreamHandler(stream)
    if stream_is_journal(stream, env):
        h.setFormatter(JournalFormatter("%(message)s"))
    else:
        h.setFormatter(logging.Formatter("%(asctime)s hostctl %(levelname)s %(message)s"))
    return h
