"""A real PyTorch data-parallel job: torch.distributed gloo all_reduce over TCP.

  python -m hostctl_lab.workloads.torchjob --job NAME --rank K --world W --master ADDR:PORT
         --iface IFACE --model-bytes B --compute SECONDS --iterations N --out FILE
         [--connect-timeout 60]

Sets GLOO_SOCKET_IFNAME=IFACE (in a network namespace gloo otherwise picks
127.0.0.1 and the ranks cannot reach each other), torch.set_num_threads(1),
then ``init_process_group("gloo", init_method="tcp://ADDR:PORT", rank, world)``
(rank 0 hosts the rendezvous store on ADDR:PORT). The model is a float32
tensor of B/4 elements. Per iteration: sleep --compute seconds; barrier_enter;
``dist.all_reduce(tensor)``; barrier_exit = iter_end. Barrier wait =
barrier_exit - barrier_enter. t_start is taken after the process group is up.

gloo picks its own algorithm and connections, so the record's bytes_sent and
bytes_received are null. Needs the ``torch`` extra (``pip install './lab[torch]'``);
without torch: one line on stderr, exit 2.

Exit 0 when done, 1 after an error (a peer died, timeout: the record has
"errors"), 143 after SIGTERM, 2 on bad arguments or missing torch.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys

from hostctl_lab.workloads.common import (
    EXIT_USAGE, ArgParser, add_compute_args, check_out_path, compute_then_collective, install_sigterm, new_record, nonneg_int,
    parse_hostport, pos_float, pos_int, run_recorded,
)
from hostctl_lab.workloads.compute import compute_from_args

PROG = "hostctl_lab.workloads.torchjob"
NO_TORCH = "torch is not installed: pip install './lab[torch]' (torch==2.13.0, CPU build)"


def _parser() -> ArgParser:
    ap = ArgParser(prog=PROG, description="PyTorch gloo all_reduce job (a real DL framework's traffic).")
    ap.add_argument("--job", required=True)
    ap.add_argument("--rank", type=nonneg_int, required=True)
    ap.add_argument("--world", type=pos_int, required=True)
    ap.add_argument("--master", type=parse_hostport, required=True, metavar="ADDR:PORT",
                    help="rendezvous: rank 0 listens here, the others connect")
    ap.add_argument("--iface", required=True, help="network interface gloo uses (GLOO_SOCKET_IFNAME)")
    ap.add_argument("--model-bytes", type=pos_int, required=True, help="tensor size in bytes (float32: B/4 elements)")
    add_compute_args(ap)
    ap.add_argument("--iterations", type=pos_int, required=True)
    ap.add_argument("--out", required=True, help="record file ('-' = stdout)")
    ap.add_argument("--connect-timeout", type=pos_float, default=60.0,
                    help="seconds for the rendezvous and each collective (default 60)")
    return ap


def _import_torch():
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return None, None
    return torch, dist


def run(a: argparse.Namespace, torch, dist) -> int:
    rec = new_record(a.job, "torch", a.rank)
    rec["bytes_sent"] = rec["bytes_received"] = None

    def body() -> None:
        addr, port = a.master
        host = f"[{addr}]" if ":" in addr else addr
        dist.init_process_group("gloo", init_method=f"tcp://{host}:{port}", rank=a.rank,
                                world_size=a.world, timeout=datetime.timedelta(seconds=a.connect_timeout))
        tensor = torch.zeros(max(1, a.model_bytes // 4), dtype=torch.float32)
        compute_then_collective(rec, a.iterations, a.compute_step, a.compute, lambda: dist.all_reduce(tensor))

    def cleanup() -> None:
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - best effort after a failure
                pass

    # gloo reports a dead peer or a timeout as RuntimeError (DistBackendError, DistStoreError)
    return run_recorded(f"{PROG} {a.job}/{a.rank}", rec, a.out, body, cleanup, expected=(RuntimeError,))


def main(argv: list[str] | None = None) -> int:
    ap = _parser()
    a = ap.parse_args(argv)
    if a.rank >= a.world:
        ap.error(f"--rank {a.rank} must be below --world {a.world}")
    check_out_path(ap, a.out)
    if not os.path.exists(f"/sys/class/net/{a.iface}"):
        ap.error(f"--iface {a.iface}: no such network interface here")
    os.environ["GLOO_SOCKET_IFNAME"] = a.iface
    torch, dist = _import_torch()
    if torch is None:
        sys.stderr.write(NO_TORCH + "\n")
        return EXIT_USAGE
    torch.set_num_threads(1)
    a.compute_step = compute_from_args(ap, a)
    install_sigterm()
    return run(a, torch, dist)


if __name__ == "__main__":
    sys.exit(main())
