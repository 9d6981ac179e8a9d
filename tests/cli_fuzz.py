"""Command-line fuzzing of `hostctl` and `switchemu`: seeded random argument vectors, each run
in this process through the CLI's real entry point (``main()``, with sys.argv set), as a user
would type them. Every case must end in a result or in a clear error, never in a traceback or
a hang:

- exit 0 (or, with no arguments at all, the help and exit 2), or
- exactly one line ``hostctl: error: ...`` / ``switchemu: error: ...``, last on stderr (the
  parser's errors too: an unknown flag, a value of the wrong type), and
- no "Traceback" anywhere, no exception out of ``main()``, done within WATCHDOG_S.

The flags are read from the CLIs themselves (every option of every command), so a flag added
later is fuzzed too; each gets values from a pool for its meaning (valid rates, ports, paths,
endpoints ...) mixed with values of other types and hostile strings, so that cases get past
the parser into the code behind it.

Safety: nothing here may change the host. hostctl's commands that change state (stop, clean)
are never generated; `start` always gets --dry-run, and should a case lose it (taken as
another flag's value), ``require_root`` is replaced by a guard that ends the case before the
daemon touches anything ("would start"). The lab's commands get only --help or a bad flag.
switchemu's server binds for real (loopback and ipc endpoints in the work folder only), then
returns at once instead of serving; its metrics server is not started. Endpoints are all on
loopback or ipc in the work folder; client timeouts are at most 50 ms, or bad values.

Run: python -m tests.cli_fuzz {hostctl,switchemu} --cases N --seed S --workdir DIR
(prints a JSON summary; the failing argv vectors are in it, for replay with --replay)."""

from __future__ import annotations

import argparse
import contextlib
import inspect
import io
import json
import os
import random
import shlex
import signal
import socket
import subprocess
import sys
import time
import traceback
import typing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WATCHDOG_S = 10.0
STATE_CHANGING = {"hostctl": {"stop", "clean"}, "switchemu": set()}
LAB = {"bench", "bench-compare", "bench-pacing", "demo", "sim", "testbed"}

# strings no flag expects (the shell passes any bytes but NUL)
HOSTILE = ["", " ", "-", "--", "-x", "--no-such-flag", "é" * 300, "a" * 5000, "\n", "\t9000", "$(id)", "%s%n",
           "../../etc/passwd", "１２３", "٣", "²", "1e9999", "-0", "0x1F", "1_000", "9" * 400, "nan", "inf",
           "-inf", "None", "null", "true", "[1, 2]", "{}", "\\", "'", '"', "\u202e",
           "\udcff"]  # the last: a byte 0xff in argv, as Python decodes it
BY_TYPE = {
    int: ["0", "1", "-1", "7", "65535", "65536", "2147483648", "-9223372036854775809", "9" * 30, "1.5", "x", "",
          "0x10", " 5", "1e3"],
    float: ["0", "1", "-1", "0.001", "0.06", "1e308", "1e309", "nan", "inf", "-inf", "1,5", "x", "", "1e-320",
            "5e-324"],
    str: ["x", "", "1", "-1", "abc"],
}


class WouldStart(BaseException):
    """A case that lost --dry-run reached the daemon's start: stopped before it touched anything."""


class Hang(BaseException):
    """The watchdog fired."""


def _finite_over(text: str, limit: float) -> bool:
    try:
        v = float(text)
    except ValueError:
        return False
    return v == v and limit < v < float("inf")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_files(work: str) -> dict[str, list[str]]:
    """Files and folders the path flags point at, all in ``work`` (the run's cwd)."""
    os.makedirs(work, exist_ok=True)

    def write(name: str, data: str | bytes) -> str:
        path = os.path.join(work, name)
        with open(path, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        return path

    configs = [
        write("rr.toml", 'policy = "rr"\nports = "9000-9005"\niface = "lo"\nlink_rate = "1gbit"\n'),
        write("mlcc.toml", 'policy = "mlcc"\niface = "lo"\nlink_rate = "10gbit"\n[[jobs]]\nname = "bert"\n'
                           'ports = "29500"\nmodel_size = "1.3GB"\ncomm = "ring"\nring_size = 8\n'),
        write("cap.toml", 'policy = "cap"\ncap = "1gbit"\nmatch = "torchrun"\n'),
        write("garbage.toml", bytes(range(256)) * 3),
        write("empty.toml", ""),
        write("latin1.toml", "policy = 'r\xe9'\n".encode("latin-1")),
        write("deep.toml", "a = " + "[" * 2000 + "]" * 2000 + "\n"),
    ]
    folder = os.path.join(work, "a-folder")
    os.makedirs(folder, exist_ok=True)
    topo = os.path.join(ROOT, "examples", "switch-topology.toml")
    lingjun = os.path.join(os.path.dirname(ROOT), "shared", "data", "lingjun-2023", "topo.csv")
    topologies = [topo, write("bad-topo.toml", "format = 1\n[[switch]]\nname = 5\n"), write("topo.csv", "a,b,c\n1,2\n"),
                  configs[3], configs[4]]
    if os.path.exists(lingjun):
        topologies.append(lingjun)
    keys = os.path.join(work, "keys")
    if not os.path.isdir(keys):
        import zmq.auth

        os.makedirs(os.path.join(keys, "clients"))
        zmq.auth.create_certificates(keys, "server")
        zmq.auth.create_certificates(keys, "client")
        os.replace(os.path.join(keys, "client.key"), os.path.join(keys, "clients", "client.key"))
    empty_keys = os.path.join(work, "no-keys")
    os.makedirs(empty_keys, exist_ok=True)
    missing = os.path.join(work, "missing", "nothing.toml")
    return {"configs": configs + [folder, missing, "/dev/null"], "topologies": topologies + [folder, missing],
            "curve": [keys, os.path.join(keys, "client.key_secret"), empty_keys, missing, configs[0]],
            "folders": [folder, missing]}


def value_pools(work: str, files: dict[str, list[str]], switch: str) -> dict[str, list[str]]:
    """Meaningful values per flag name (a few valid, many nearly valid); ``switch``: the endpoint of
    a running switchemu (for probe and status)."""
    from hostctl.policy import POLICIES

    port = free_port()
    loop = [f"tcp://127.0.0.1:{port}", f"ipc://{work}/sw.sock", f"tcp://127.0.0.1:{port},ipc://{work}/sw2.sock",
            "tcp://127.0.0.1:*", "tcp://", "tcp://127.0.0.1", "tcp://127.0.0.1:99999", "tcp://127.0.0.1:0",
            "udp://127.0.0.1:5555", "inproc://x", f"tcp://[::1]:{port}", f"tcp://localhost:{port}",
            "ipc://", f"ipc://{work}/" + "s" * 200, "127.0.0.1:5555", ",", f"tcp://127.0.0.1:{port},"]
    rates = ["1gbit", "10gbit", "9.7gbit", "100mbit", "500kbit", "1gbps", "0", "0bit", "-1gbit", "1e400gbit",
             "10 gbit", "10GBIT", "1.5", "1tbit", "8bit", "nanbit", "infgbit", "9" * 40 + "gbit"]
    shares = ["10%", "50%", "97%", "0%", "100%", "101%", "-5%", "nan%", "1e3%", "%", "1gbit", "300mbit", "0.5"]
    return {
        "--policy": [*POLICIES, "bogus", "RR", " rr"],
        "--iface": ["lo", "lo", "hc-nope0", "eth0", "a" * 20, "../x", "lo:0", "lo "],
        "--link-rate": rates, "--cap": rates + shares[:3], "--other-rate": shares, "--ingress-rate": shares,
        "--ports": ["9000", "9000-9005,9100", "29500", "0", "65536", "9005-9000", "1-65535", "9000,,9001", "a",
                    "9000-", "-9000", "9000 9001"],
        "--pids": ["1", str(os.getpid()), "0", "-1", "999999999", "1,2,3", "1-3", "4194305", "1,,2"],
        "--match": ["python", "torchrun|horovodrun", "(", "[a-", ".*", "a{99999}", "(?P<x>", "\\", "^$"],
        "--config": files["configs"], "--topology": files["topologies"], "--curve-keys": files["curve"],
        "--cgroup": ["/", "/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/nonexistent", "relative", "/proc",
                     "/sys/fs/cgroup/../../etc"],
        "--switch": loop, "--bind": loop, "--connect": [switch, *loop],
        "--job-order": ["none", "fixed", "rotate", "smallest", "flat", "FIXED", "random"],
        "--container-addr": ["pod", "host", "both", ""],
        "--metrics-addr": ["127.0.0.1", "::1", "localhost", "0.0.0.0", "300.1.1.1", "not an address"],
        "--log-level": ["DEBUG", "info", "WARNING", "ERROR", "CRITICAL", "TRACE", "10", "debug "],
        "--name": ["all", "tor0", "tor1", "agg", "nope", "ALL"],
        "--csv-rates": ["25gbit,100gbit,400gbit", "1gbit,1gbit", "a,b,c", "0,0,0", "25gbit,100gbit,400gbit,1"],
        "--client": ["client", "gpu01", "server", "a b", "-x", "a" * 70, "é"],
        "--timeout": ["0.01", "0.02", "0", "-1", "nan", "inf", "-inf", "1e-9", "x", "3601"],
        "--slot-ms": ["60", "1", "0.5", "10000", "10001", "0", "-60", "nan", "inf"],
        "--max-skew-ms": ["5", "0", "59.9", "60", "-1", "nan", "inf"],
        "--booking-tolerance": ["0.01", "0", "10", "11", "-0.1", "nan", "inf"],
        "--horizon": ["10", "1", "0", "1000", "1001", "-1", "100000000"],
        "--bands": ["6", "1", "7", "0", "8", "-1"], "--top": ["20", "0", "-1", "1000000"],
        "--metrics-port": ["9101", "0", "65535", "65536", "-1"],
        "--rr-interval": ["20", "0.001", "0", "-1", "1e9"], "--rescan": ["1", "0.01", "0", "3600", "1e9"],
        "--lease": ["1", "0.05", "0", "1e9"], "--slot": ["0.06", "0.001", "0", "10", "1e-9"],
        "--phase-gap": ["0.02", "0", "1", "-0.1"], "--plan-offset": ["0", "0.007", "0.06", "1", "-0.01"],
        "FOLDER": [*files["folders"], os.path.join(work, "k1"), "k2", "", "/proc/nope/keys", "a-folder/rr"],
    }


def flags_of(app) -> dict[str | None, list[dict]]:
    """{command name (None: the group itself): [{"opts", "secondary", "flag", "type", "argument"}]} read
    from the typer app: the option strings from click, the Python type from the callback's annotations."""
    import typer.main

    group = typer.main.get_command(app)
    callbacks = {None: app.registered_callback.callback if app.registered_callback else None}
    for c in app.registered_commands:
        callbacks[c.name or c.callback.__name__.replace("_", "-")] = c.callback
    out = {}
    for name, cmd in [(None, group), *group.commands.items()]:
        hints = {}
        cb = callbacks.get(name)
        if cb is not None:
            try:
                hints = typing.get_type_hints(cb)
            except Exception:  # a lab command's annotations: not needed, those get --help only
                hints = {}
        params = []
        for p in cmd.params:
            t = hints.get(p.name, str)
            args = [a for a in typing.get_args(t) if a is not type(None)]
            base = args[0] if args else t
            params.append({"opts": list(p.opts), "secondary": list(getattr(p, "secondary_opts", [])),
                           "flag": bool(getattr(p, "is_flag", False)), "type": base if base in BY_TYPE else str,
                           "argument": p.param_type_name == "argument", "name": p.name})
        out[name] = params
    return out


class Fuzzer:
    def __init__(self, cli: str, work: str, seed: int, switch: str = "tcp://127.0.0.1:1") -> None:
        self.cli = cli
        self.rng = random.Random(seed)
        self.seed, self.switch = seed, switch
        self.work = work
        self.files = make_files(work)
        self.pools = value_pools(work, self.files, switch)
        if cli == "hostctl":
            from hostctl import cli as mod
        else:
            import switchemu.cli as mod
        self.mod = mod
        self.flags = flags_of(mod.app)
        self.commands = [c for c in self.flags if c is None or c not in STATE_CHANGING[cli]]
        self.folders = 0

    def pool(self, p: dict) -> list[str]:
        key = "FOLDER" if p["argument"] else p["opts"][0]
        return self.pools.get(key, [])

    def value(self, p: dict) -> str:
        v = self._value(p)
        while p["opts"][0] == "--timeout" and _finite_over(v, 0.05):  # a client asked to wait long: it does
            v = self._value(p)
        return v

    def _value(self, p: dict) -> str:
        r = self.rng.random()
        named = self.pool(p)
        if named and r < 0.65:
            return self.rng.choice(named)
        if r < 0.85:
            return self.rng.choice(BY_TYPE[p["type"]])
        return self.rng.choice(HOSTILE)

    def argv(self) -> list[str]:
        rng = self.rng
        r = rng.random()
        if r < 0.01:
            return [rng.choice(["--help", "--version", "-h", "help", "--no-such-flag"])]
        if r < 0.02:
            return [rng.choice(HOSTILE + ["no-such-command", "star", "STATUS"])]
        lab = [c for c in self.commands if c in LAB]
        if lab and r < 0.1:
            cmd = rng.choice(lab)
        else:  # the group itself less often where it has only --version/--help (hostctl)
            cmds = [c for c in self.commands if c not in LAB]
            cmd = rng.choice([c for c in cmds if c is not None] if self.flags[None] and len(self.flags[None]) < 2
                             and rng.random() < 0.9 else cmds)
        if cmd in LAB:
            return [cmd, rng.choice(["--help", "--no-such-flag", "-x"])]
        params = self.flags[cmd]
        base = self.base(cmd) if rng.random() < 0.5 else []  # most of a valid command, then fewer flags
        argv: list[str] = [] if cmd is None else [cmd]
        for p in rng.sample(params, min(len(params), rng.randint(0, 3 if base else 7))):
            if p["argument"]:
                argv.append(self.value(p))
                continue
            opt = rng.choice(p["opts"] + p["secondary"])
            if p["flag"]:
                argv.append(opt)
                continue
            v = self.value(p)
            m = rng.random()
            if m < 0.05:
                argv.append(opt)  # the value left out (the next flag, if any, becomes the value)
            elif m < 0.15 and opt.startswith("--"):
                argv.append(f"{opt}={v}")
            else:
                argv += [opt, v]
            if rng.random() < 0.03:  # the same flag twice
                argv += [opt, self.value(p)]
        if rng.random() < 0.05:
            argv.insert(rng.randint(len(argv) > 0 and cmd is not None, len(argv)), rng.choice(HOSTILE))
        at = 0 if cmd is None else 1
        argv[at:at] = base
        if cmd == "start":  # between two flags; one case in 20 anywhere (it may become a value: "would start")
            at = [i for i in range(1, len(argv) + 1) if i == len(argv) or argv[i].startswith("-")]
            argv.insert(rng.randint(1, len(argv)) if rng.random() < 0.05 else rng.choice(at), "--dry-run")
        if cmd in ("probe", "status") and self.cli == "switchemu":
            argv[1:1] = ["--timeout", "0.01"]  # not the default 2 s of waiting for no switch (a later one wins)
        return argv

    def base(self, cmd: str | None) -> list[str]:
        """Flags that make ``cmd`` valid (the random ones after them may win: the last given counts)."""
        rng, pools = self.rng, self.pools
        if self.cli == "hostctl":
            if cmd == "start":
                return ["--iface", "lo", "--link-rate", "1gbit", "--policy", rng.choice(pools["--policy"][:-3]),
                        "--ports", "9000-9001"]
            return ["--ports", "9000-9001"] if cmd == "flows" else []
        if cmd is None:
            return ["--bind", rng.choice(pools["--bind"][:3]), "--topology", rng.choice(pools["--topology"][:2]),
                    "--name", rng.choice(["all", "tor0", "agg"])]
        if cmd in ("probe", "status"):
            return ["--connect", rng.choice(pools["--connect"][:2])]
        if cmd == "keygen":
            self.folders += 1
            return [f"keys-{self.folders}"]
        return []

    # -- one case, in this process, through the real entry point --------------------------------
    def run(self, argv: list[str]) -> dict:
        # as a terminal's: stdout strict UTF-8 (a surrogate from a non-UTF-8 argv byte fails there),
        # stderr with backslashreplace (what Python gives stderr)
        out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict", write_through=True)
        err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace", write_through=True)
        sys.argv = [self.cli, *argv]
        code: object = 0
        exc = None
        t0 = time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, WATCHDOG_S)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    self.mod.main()
                except SystemExit as e:
                    code = e.code
        except WouldStart:
            code = "would start"
        except BaseException as e:  # noqa: BLE001 - every other way out is what this looks for
            exc = "".join(traceback.format_exception(e))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        return {"argv": argv, "code": code, "out": out.buffer.getvalue().decode("utf-8", "replace"),
                "err": err.buffer.getvalue().decode("utf-8", "replace"), "exc": exc,
                "s": time.monotonic() - t0}

    def judge(self, r: dict) -> str | None:
        """None when the case ended as it should, else what was wrong."""
        if r["exc"] is not None:
            return "Hang (watchdog)" if "Hang" in r["exc"].splitlines()[-1] else "uncaught exception"
        text = r["out"] + r["err"]
        if "Traceback" in text:
            return "a traceback was printed"
        code = r["code"]
        if code in (0, None, "would start"):
            return None
        if isinstance(code, str):  # sys.exit("text"): Python prints it, exit 1
            return None if code.startswith(f"{self.cli}: error: ") else f"exit with a message: {code!r}"
        if not isinstance(code, int):
            return f"exit code {code!r}"
        lines = [ln for ln in r["err"].splitlines() if ln.strip()]
        if code == 2 and not r["argv"] and "Usage:" in r["out"]:
            return None  # no arguments: the help
        if not lines or not lines[-1].startswith(f"{self.cli}: error: "):
            return f"exit {code} without a '{self.cli}: error:' line"
        if sum(ln.startswith(f"{self.cli}: error: ") for ln in lines) != 1:
            return "more than one error line"
        return None


def install_guards() -> None:
    """What keeps a case from changing the host (see the module's docstring)."""
    def would_start() -> None:
        raise WouldStart

    def watchdog(_sig, _frame) -> None:
        raise Hang

    import hostctl.datapath.linux as linux

    linux.require_root = would_start
    signal.signal(signal.SIGALRM, watchdog)
    import switchemu.server as server

    server.SwitchServer.serve = lambda self, stop: None
    server.start_metrics = lambda state, port, addr: None
    # typer builds the click command from the functions' signatures at every call (26 ms, once per
    # real run); the same app gives the same command, so build it once per app here
    import typer.main

    built: dict[int, object] = {}
    get = typer.main.get_command

    def get_once(app):
        if id(app) not in built:
            built[id(app)] = get(app)
        return built[id(app)]

    typer.main.get_command = get_once


def fuzz(cli: str, cases: int, seed: int, work: str, replay: list[list[str]] | None = None) -> dict:
    install_guards()
    os.chdir(work)
    with contextlib.ExitStack() as stack:
        switch = stack.enter_context(a_switch(work)) if cli == "switchemu" else "tcp://127.0.0.1:1"
        return _fuzz(Fuzzer(cli, work, seed, switch), cases, replay)


@contextlib.contextmanager
def a_switch(work: str):
    """A real switchemu (its own process, on loopback) for probe and status to reach; ended by PID."""
    from hostctl.policy.switchclient import SwitchClient

    ep = f"tcp://127.0.0.1:{free_port()}"
    log = open(os.path.join(work, "switchemu.log"), "w")
    p = subprocess.Popen([sys.executable, "-m", "switchemu.cli", "--bind", ep, "--topology",
                          os.path.join(ROOT, "examples", "switch-topology.toml"), "--name", "all"],
                         stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        with SwitchClient([ep]) as c:
            while c.probe(slot_s=0.06, timeout_s=0.2).error:
                if p.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the switch for probe/status did not start (see {log.name})")
        yield ep
    finally:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        log.close()


def _fuzz(fz: Fuzzer, cases: int, replay: list[list[str]] | None) -> dict:
    cli = fz.cli
    results = {"cli": cli, "cases": 0, "seed": fz.seed, "outcomes": {}, "by_command": {},
               "failures": [], "slowest": []}
    times = []
    t0 = time.monotonic()
    for argv in (replay if replay is not None else (fz.argv() for _ in range(cases))):
        r = fz.run(argv)
        results["cases"] += 1
        bad = fz.judge(r)
        kind = "failed" if bad else ("exit 0" if r["code"] in (0, None) else f"exit {r['code']}"
                                     if isinstance(r["code"], int) else str(r["code"]))
        cmd = next((a for a in argv if a in fz.flags), "(group)" if argv and argv[0].startswith("-") else "(other)")
        per = results["by_command"].setdefault(cmd, {})
        for d in (results["outcomes"], per):
            d[kind] = d.get(kind, 0) + 1
        times.append((r["s"], argv))
        if bad:
            results["failures"].append({"why": bad, "argv": argv, "shell": shlex.join([cli, *argv]),
                                        "exit": repr(r["code"]), "stderr": r["err"][-2000:],
                                        "exception": (r["exc"] or "")[-3000:]})
    results["seconds"] = round(time.monotonic() - t0, 1)
    # and afterwards a good command still works: a plan from hostctl, an answer from the switch (which
    # took every probe and status above)
    good = (["start", "--dry-run", "--iface", "lo", "--link-rate", "1gbit", "--ports", "9000"] if cli == "hostctl"
            else ["probe", "--connect", fz.switch, "--timeout", "5"])
    r = fz.run(good)
    ok = r["code"] in (0, None) and fz.judge(r) is None
    results["answers_after"] = ok and ("plan" in json.loads(r["out"]) if cli == "hostctl" else
                                       "fetch round trip" in r["out"])
    results["answers_after_output"] = (r["out"] + r["err"])[-500:]
    results["slowest"] = [{"s": round(s, 3), "argv": a} for s, a in sorted(times, key=lambda x: -x[0])[:5]]
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cli", choices=["hostctl", "switchemu"])
    ap.add_argument("--cases", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--replay", help="a JSON file with a list of argv lists (e.g. a summary's failures)")
    ap.add_argument("--out", help="write the JSON summary here too")
    a = ap.parse_args()
    replay = None
    if a.replay:
        with open(a.replay) as f:
            data = json.load(f)
        replay = [x["argv"] if isinstance(x, dict) else x for x in (data.get("failures", data)
                                                                     if isinstance(data, dict) else data)]
    work, out = os.path.abspath(a.workdir), a.out and os.path.abspath(a.out)  # the cases run in work
    os.makedirs(work, exist_ok=True)
    res = fuzz(a.cli, a.cases, a.seed, work, replay)
    text = json.dumps(res, indent=1, default=str)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
