"""The control-socket fuzzer's client (run inside the daemon's network namespace, as root or as
another user): N hostile requests, one connection each; prints a JSON summary of how they ended.

    python -m tests.integration._control_fuzz SEED N JOB [--stop]

--stop also sends ``stop`` commands (for a user who may not stop the daemon: each must be refused)."""

from __future__ import annotations

import json
import random
import socket
import sys
import time

from hostctl import consts

ODD = [0, -1, 2**63, -(2**70), 1.5, 1e308, float("inf"), float("nan"), True, None, "", "x" * 5000, "é",
       [], [1, [2]], {}, {"a": {"b": None}}]


def request(rng: random.Random, job: str, stop: bool) -> bytes:
    r = rng.random()
    if r < 0.2:  # bytes
        return bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300))) + rng.choice([b"", b"\n"])
    if r < 0.25:  # nested too deep for a recursive parser
        n = rng.randrange(1000, 30000)
        return b"[" * n + b"]" * n + b"\n"
    if r < 0.28:  # larger than the server reads
        return b'{"cmd": "status", "pad": "' + b"a" * 70_000 + b'"}\n'
    if r < 0.35:  # JSON that is not an object
        return json.dumps(rng.choice([[1, 2], "status", 5, None, 1.5, [{"cmd": "status"}]])).encode() + b"\n"
    cmds = ["status", "hint", "hint", "", "STATUS", "status ", 5, None, [], {}, "reload", "x" * 1000]
    if stop:
        cmds += ["stop", "stop"]
    m = {"cmd": rng.choice(cmds)}
    for k in rng.sample(["job", "bytes_per_iter", "iteration_start", "_peer", "extra", "cmd2"], rng.randrange(0, 5)):
        m[k] = rng.choice(ODD + [job, job, rng.randrange(1, 10**9), time.time() + rng.uniform(-100, 100)])
    try:
        text = json.dumps(m, allow_nan=True)
    except (ValueError, TypeError):
        text = "{}"
    if rng.random() < 0.1:
        text = text[:rng.randrange(len(text) + 1)]  # truncated
    return text.encode() + (b"\n" if rng.random() < 0.8 else b"")


def main() -> None:
    seed, n, job = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    stop = "--stop" in sys.argv
    rng = random.Random(seed)
    ends = {"ok": 0, "error": 0, "no reply": 0, "garbled": 0, "timeout": 0}
    errors: dict[str, int] = {}
    worst = 0.0
    for _ in range(n):
        data = request(rng, job, stop)
        t0 = time.monotonic()
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5.0)
        try:
            s.connect(consts.CONTROL_SOCKET)
            if data:
                s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            got = b""
            while chunk := s.recv(1 << 16):
                got += chunk
        except (TimeoutError, socket.timeout):
            ends["timeout"] += 1
            continue
        except (ConnectionResetError, BrokenPipeError):
            got = b""
        finally:
            s.close()
            worst = max(worst, time.monotonic() - t0)
        if not got:
            ends["no reply"] += 1
            continue
        try:
            reply = json.loads(got)
        except ValueError:
            ends["garbled"] += 1
            continue
        if reply.get("ok"):
            ends["ok"] += 1
        else:
            ends["error"] += 1
            key = str(reply.get("error"))[:40]
            errors[key] = errors.get(key, 0) + 1
    print(json.dumps({"ends": ends, "errors": errors, "worst_s": worst}))


if __name__ == "__main__":
    main()
