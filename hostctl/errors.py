"""Typed errors. Every user-facing failure is a HostctlError whose message names
the problem and the fix; the CLI prints it as one line and exits non-zero."""


class HostctlError(Exception):
    """Base class; `str(e)` is shown to the operator as is."""

    exit_code = 1


class ConfigError(HostctlError):
    """Bad flag, config key or value."""

    exit_code = 2


class ProbeError(HostctlError):
    """A kernel feature or tool hostctl needs is missing."""

    exit_code = 3


class DatapathError(HostctlError):
    """A kernel change failed (netlink, BPF)."""

    exit_code = 4


class NotRunningError(HostctlError):
    """No daemon is running in this network namespace."""

    exit_code = 5
