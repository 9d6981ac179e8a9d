"""Plot the memory timelines of `_daemon_probe.py --malloc` runs side by side.

    .venv/bin/python benchmarks/plot_malloc.py OUT.png LABEL=RUN.jsonl [LABEL=RUN.jsonl ...]

Three panels over minutes: the anonymous RSS, the bytes in pymalloc's allocated blocks (Python's small
objects) with its arenas (1 MiB each), and glibc's bytes in use (mallinfo2). A run whose Python heap climbs
in a sawtooth until a full collection, and whose arenas step up with each new peak, shows it here.
"""

from __future__ import annotations

import json
import sys


def load(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main() -> int:
    if len(sys.argv) < 3 or any("=" not in a for a in sys.argv[2:]):
        print(__doc__.split("\n\n")[1].strip(), file=sys.stderr)
        return 2
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axs = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    for arg in sys.argv[2:]:
        label, path = arg.split("=", 1)
        rows = load(path)
        t = [r["t_s"] / 60 for r in rows]
        line, = axs[0].plot(t, [r["RssAnon"] / 1024 for r in rows], label=label)
        axs[1].plot(t, [r["py_alloc_bytes"] / 2**20 for r in rows], color=line.get_color(), label=f"{label}: in blocks")
        axs[1].step(t, [r["py_arenas"] for r in rows], where="post", color=line.get_color(), linestyle=":",
                    label=f"{label}: arenas (MiB)")
        axs[2].plot(t, [r["malloc_in_use_kib"] / 1024 for r in rows], color=line.get_color(), label=label)
    for ax, title in zip(axs, ("anonymous RSS (MiB)", "Python's small-object heap (MiB)", "glibc in use (MiB)")):
        ax.set_title(title)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    axs[-1].set_xlabel("minutes")
    fig.tight_layout()
    fig.savefig(sys.argv[1], dpi=110)
    print(f"wrote {sys.argv[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
