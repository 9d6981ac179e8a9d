"""Typed errors. Every user-facing failure is a HostctlError whose message names
the problem and the fix; the CLI prints it as one line and exits non-zero."""

import sys


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


def safe_stdout() -> None:
    """A path or name from argv that is not UTF-8 (Python keeps such bytes as surrogates) is
    printed escaped instead of ending the command in UnicodeEncodeError: for the CLIs' main()."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")


def one_line(text: str) -> str:
    """``text`` as one line: a value the user gave may hold a newline or another control
    character, which the message then shows escaped (as repr would) instead of breaking it."""
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


def run_app(app, prog: str) -> None:
    """Run a typer ``app`` as the command ``prog`` and exit: a HostctlError is one line
    ``PROG: error: ...`` and its exit code; the parser's usage errors (an unknown flag, a value of the
    wrong type) one line naming the command's --help, exit 2; no arguments at all: the help (already
    printed), exit 2; Ctrl-C 130. Other exceptions pass through (the caller's own, e.g. SIGTERM's)."""
    from typer.exceptions import Abort, TyperException

    safe_stdout()
    try:
        rc = app(standalone_mode=False)
    except HostctlError as e:
        print(f"{prog}: error: {one_line(str(e))}", file=sys.stderr)
        sys.exit(e.exit_code)
    except TyperException as e:
        if type(e).__name__ == "NoArgsIsHelpError":
            sys.exit(2)
        ctx = getattr(e, "ctx", None)
        where = ctx.command_path if ctx is not None else prog
        print(f"{prog}: error: {one_line(e.format_message())} (see {where} --help)", file=sys.stderr)
        sys.exit(e.exit_code if isinstance(e.exit_code, int) and e.exit_code else 2)
    except (Abort, KeyboardInterrupt):
        sys.exit(130)
    sys.exit(rc if isinstance(rc, int) else 0)
