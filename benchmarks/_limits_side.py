"""The traffic of benchmarks/bench_limits.py, one side of it (asyncio: thousands of connections in one thread).

    _limits_side.py serve ADDR PORT BYTES PERIOD   a job's server: to every connection it accepts, BYTES every
                                                  PERIOD seconds (first at a random phase); PERIOD 0: BYTES once,
                                                  then it closes the connection (a short flow)
    _limits_side.py hold ADDR PORT N SECONDS      N connections to the server, all open for SECONDS, reading
    _limits_side.py churn ADDR PORT RATE SECONDS  RATE short connections per second for SECONDS: each connects,
                                                  reads to the end, closes

Prints "ready" once listening or connected, then one JSON line with its counts when done.
"""

from __future__ import annotations

import asyncio
import json
import random
import resource
import sys
import time


def _raise_nofile() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def serve(addr: str, port: int, nbytes: int, period: float) -> None:
    data = b"\1" * nbytes
    counts = {"accepted": 0, "errors": 0}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        counts["accepted"] += 1
        try:
            if period <= 0:
                writer.write(data)
                await writer.drain()
            else:
                await asyncio.sleep(random.uniform(0, period))
                while not reader.at_eof():
                    writer.write(data)
                    await writer.drain()
                    await asyncio.sleep(period)
        except (ConnectionError, OSError):
            counts["errors"] += 1
        finally:
            writer.close()

    srv = await asyncio.start_server(handle, addr, port, backlog=4096, reuse_address=True)
    print("ready", flush=True)
    async with srv:
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)  # until told to stop
    print(json.dumps(counts), flush=True)


async def _read_all(addr: str, port: int, counts: dict, until: list | None) -> None:
    """Connect, then read until the end or until[0] (monotonic; set later, once all are connected)."""
    try:
        reader, writer = await asyncio.open_connection(addr, port)
    except OSError:
        counts["connect_errors"] += 1
        return
    counts["connected"] += 1
    try:
        while True:
            timeout = None if not until else max(0.0, until[0] - time.monotonic())
            try:
                chunk = await asyncio.wait_for(reader.read(1 << 16), timeout)
            except asyncio.TimeoutError:
                break
            if not chunk:
                break
            counts["bytes"] += len(chunk)
    except OSError:
        counts["errors"] += 1
    finally:
        writer.close()


async def hold(addr: str, port: int, n: int, seconds: float) -> None:
    counts = {"connected": 0, "connect_errors": 0, "errors": 0, "bytes": 0}
    until: list[float] = []  # the clock starts once every connection is up
    tasks = []
    for i in range(n):
        tasks.append(asyncio.create_task(_read_all(addr, port, counts, until)))
        if i % 200 == 199:
            await asyncio.sleep(0.01)  # the server's backlog keeps up
    while counts["connected"] + counts["connect_errors"] < n:
        await asyncio.sleep(0.05)
    until.append(time.monotonic() + seconds)
    print("ready", flush=True)
    await asyncio.gather(*tasks)
    print(json.dumps(counts), flush=True)


async def churn(addr: str, port: int, rate: float, seconds: float) -> None:
    counts = {"connected": 0, "connect_errors": 0, "errors": 0, "bytes": 0}
    print("ready", flush=True)
    t0 = time.monotonic()
    tasks: set[asyncio.Task] = set()
    started = 0
    while (now := time.monotonic()) < t0 + seconds:
        due = int((now - t0) * rate)
        while started < due:
            t = asyncio.create_task(_read_all(addr, port, counts, None))
            tasks.add(t)
            t.add_done_callback(tasks.discard)
            started += 1
        await asyncio.sleep(0.002)
    if tasks:
        await asyncio.wait(tasks, timeout=30)
    counts["started"] = started
    counts["rate"] = counts["connected"] / seconds
    print(json.dumps(counts), flush=True)


def main() -> None:
    _raise_nofile()
    mode, addr, port, *rest = sys.argv[1:]
    if mode == "serve":
        asyncio.run(serve(addr, int(port), int(rest[0]), float(rest[1])))
    elif mode == "hold":
        asyncio.run(hold(addr, int(port), int(rest[0]), float(rest[1])))
    elif mode == "churn":
        asyncio.run(churn(addr, int(port), float(rest[0]), float(rest[1])))
    else:
        raise SystemExit(f"unknown mode {mode!r}: serve, hold or churn")


if __name__ == "__main__":
    main()
