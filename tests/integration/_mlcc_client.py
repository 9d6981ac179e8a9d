"""A host's mlcc controller against a switchemu over TCP, for tests that cut the network between
them (run inside the host's network namespace): one tick per 60 ms slot for SECONDS, one JSON line
per slot on stdout: {"t": monotonic, "mode": ..., "silent": n}.

    python -m tests.integration._mlcc_client ENDPOINT SRC DST SECONDS"""

from __future__ import annotations

import json
import sys
import time

from hostctl.core.types import FlowKey
from hostctl.policy.mlcc import FlowIn, MlccControl
from hostctl.policy.switchclient import SwitchClient

SLOT_S = 0.06
C = 125_000_000 // 8


def main() -> None:
    ep, src, dst, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    c = MlccControl(C, SLOT_S, switch=SwitchClient([ep]), fetch_timeout_s=0.02, publish_timeout_s=0.01)
    fl = [FlowIn(FlowKey(src, 5000, dst, 9000), "ja", 1e6, 0.0, 0.0)]
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            time.sleep(SLOT_S - time.time() % SLOT_S + 0.002)
            c.tick(fl)
            print(json.dumps({"t": time.monotonic(), "mode": c.mode, "silent": c.silent}), flush=True)
    finally:
        c.close()


if __name__ == "__main__":
    main()
