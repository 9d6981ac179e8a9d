"""What each job got on the links it shares, slot by slot, from the daemons' MLCC traces.

Run a bench with ``HOSTCTL_MLCC_TRACE=DIR/trace-{pid}.jsonl`` in the environment (every daemon writes one
JSON line per slot: its flows, their job, kind, plan and the bytes of the iteration sent so far), then::

    python -m hostctl_lab.analysis.trace_share DIR/trace-*.jsonl --racks 2 --hosts-per-rack 3 --link 500mbit

For each link of the two-level testbed (host up/down, rack up/down; hosts 10.B.0.(i+1), racks of
``--hosts-per-rack`` consecutive hosts) and each slot, it sums every flow's sent bytes over the slot
(the ``sent`` counter's increase from one traced slot to the next) by job. It prints, per job and link
where the job was busy (a flow of it planned as "active" or "unknown"), the mean share of the link's
capacity the job got and the share the other jobs got in those slots (each beside what the pacers
allowed the busy flows: their applied rates x the slot, and what their plans gave the slot; beside the
job's own plan, what it had booked for those slots one slot before, which is all that a host planning
earlier in the slot could see of it, and how many of its bursts started unannounced, booked under a tenth
of the link one slot before), and how long after a job became
busy on a link it first got at least half of the link (the reaction time a strict order needs). And per
job, the share of its flows' planned slot-0 bytes that went unsent: slots where an "active" flow planned
at least ``UNSENT_MIN_Bps`` sent under 5% of its plan (a booking the other jobs planned around for nothing).
And per link, the booking the plans made: for each slot, the sum over the flows crossing the link of the
rate their latest plan gave that slot (every host re-plans every slot, so this is what switchemu samples
as the slot's final booking), and how many slots exceeded capacity by more than the flows' wait floors,
and how many of those one job's flows overbooked alone (an incast's hosts planning the same slot).

It reads only the traces (no planner code): a check of what the plans did, not of what they meant.
"""

from __future__ import annotations

import argparse
import glob
import json
import sys
from collections import defaultdict

from hostctl.core.units import parse_rate_bps
from hostctl.errors import ConfigError


UNSENT_MIN_Bps = 5e6  # a slot-0 plan below this is a floor or a tail, not a booking worth counting
UNSENT_FRAC = 0.05  # sent under this fraction of the slot-0 plan: the planned bytes went unsent
WAIT_FLOOR_Bps = 65536 / 0.06  # hostctl's wait floor at 60 ms slots (one 64 KiB packet per slot)


def host_of(addr: str) -> int:
    a = addr.split(".")
    return int(a[2]) * 250 + int(a[3]) - 1


def links_of(src: int, dst: int, hpr: int) -> list[str]:
    out = [f"h{src}:up"]
    if src // hpr != dst // hpr:
        out += [f"rack{src // hpr}:up", f"rack{dst // hpr}:down"]
    return out + [f"h{dst}:down"]


def parse_flow(fid: str) -> tuple[int, int]:
    # "laddr:lport>raddr:rport" (hostctl.core.deps.flow_name)
    left, right = fid.split(">")
    return host_of(left.rsplit(":", 1)[0]), host_of(right.rsplit(":", 1)[0])


def load(paths: list[str]) -> dict[int, dict[str, dict]]:
    """slot -> flow id -> the flow's trace record (the sending host's)."""
    by_slot: dict[int, dict[str, dict]] = defaultdict(dict)
    for p in paths:
        with open(p, encoding="utf-8") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                for fl in rec.get("flows", ()):
                    by_slot[int(rec["slot"])][fl["id"]] = fl
    return by_slot


def analyse(by_slot: dict[int, dict[str, dict]], hpr: int, cap_Bps: float, slot_s: float) -> dict:
    slots = sorted(by_slot)
    # bytes each flow sent in slot s: sent(s + 1) - sent(s) (a new iteration restarts the counter)
    per = defaultdict(lambda: defaultdict(float))  # (link, slot) -> job -> bytes
    applied = defaultdict(lambda: defaultdict(float))  # (link, slot) -> job -> bytes its pacer allowed
    plan0 = defaultdict(lambda: defaultdict(float))  # (link, slot) -> job -> bytes its busy flows' plans gave the slot
    ahead = defaultdict(lambda: defaultdict(float))  # (link, slot) -> job -> bytes booked for it one slot before
    busy = defaultdict(set)  # (link, slot) -> jobs with a planned flow
    for s in slots:
        nxt = by_slot.get(s + 1)
        for fid, fl in by_slot[s].items():
            src, dst = parse_flow(fid)
            ls = links_of(src, dst, hpr)
            if fl["kind"] in ("active", "unknown"):  # busy (idle flows send nothing)
                for ln in ls:
                    busy[(ln, s)].add(fl["job"])
                    if fl.get("applied") is not None:
                        applied[(ln, s)][fl["job"]] += float(fl["applied"]) * slot_s
                        plan0[(ln, s)][fl["job"]] += float(fl["plan"][0]) * slot_s
            if len(fl.get("plan", ())) > 1:  # what this plan booked for the next slot, ahead of it
                for ln in ls:
                    ahead[(ln, s + 1)][fl["job"]] += float(fl["plan"][1]) * slot_s
            if nxt is None or fid not in nxt:
                continue
            a, b = float(fl.get("sent") or 0.0), float(nxt[fid].get("sent") or 0.0)
            d = b - a if b >= a else b
            if d > 0:
                for ln in ls:
                    per[(ln, s)][fl["job"]] += d
    planned, unsent = defaultdict(float), defaultdict(float)  # job -> slot-0 bytes planned, of which unsent
    for s in slots:
        nxt = by_slot.get(s + 1)
        if nxt is None:
            continue
        for fid, fl in by_slot[s].items():
            if fl["kind"] != "active" or fid not in nxt:
                continue
            a, b = float(fl.get("sent") or 0.0), float(nxt[fid].get("sent") or 0.0)
            d = b - a if b >= a else b
            p = float(fl["plan"][0]) * slot_s
            planned[fl["job"]] += p
            if fl["plan"][0] >= UNSENT_MIN_Bps and d < UNSENT_FRAC * p:
                unsent[fl["job"]] += p
    cap_slot = cap_Bps * slot_s
    # (job, link) -> [own, others', slots, own applied, others' applied, own plan, others' plan, own booked ahead,
    #                 bursts, bursts whose first slot was booked ahead under a tenth of the link]
    share = defaultdict(lambda: [0.0, 0.0, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0, 0])
    react = defaultdict(list)  # (job, link) -> slots from busy to >= half the link
    for (ln, s), jobs in busy.items():
        if not ln.startswith("rack"):
            continue
        got = per.get((ln, s), {})
        for j in jobs:
            x = share[(j, ln)]
            x[0] += got.get(j, 0.0) / cap_slot
            x[1] += sum(v for k, v in got.items() if k != j) / cap_slot
            x[2] += 1
            ap = applied.get((ln, s), {})
            x[3] += ap.get(j, 0.0) / cap_slot
            x[4] += sum(v for k, v in ap.items() if k != j) / cap_slot
            p0 = plan0.get((ln, s), {})
            x[5] += p0.get(j, 0.0) / cap_slot
            x[6] += sum(v for k, v in p0.items() if k != j) / cap_slot
            x[7] += ahead.get((ln, s), {}).get(j, 0.0) / cap_slot
            if j not in busy.get((ln, s - 1), ()):  # became busy on the link in slot s
                x[8] += 1
                x[9] += ahead.get((ln, s), {}).get(j, 0.0) < 0.1 * cap_slot
                for k in range(0, 20):
                    if got_k := per.get((ln, s + k), {}).get(j, 0.0):
                        if got_k >= 0.5 * cap_slot:
                            react[(j, ln)].append(k)
                            break
                    if j not in busy.get((ln, s + k), ()):
                        break
    out: dict = {"links": {}, "unsent_plan_frac": {j: unsent[j] / p for j, p in sorted(planned.items()) if p},
                 "booking": booking(by_slot, hpr, cap_Bps)}
    for (j, ln), (own, oth, n, own_ap, oth_ap, own_p, oth_p, own_ahead, bursts, unannounced) in sorted(share.items()):
        r = react.get((j, ln), [])
        out["links"].setdefault(j, {})[ln] = {
            "busy_slots": n, "own_share": own / n, "others_share": oth / n,
            # what the pacers allowed the busy flows in those slots (applied rates x the slot), as shares
            "own_applied": own_ap / n, "others_applied": oth_ap / n,
            # what the busy flows' plans gave those slots, and what the job had booked for them one slot before
            # (what a host that planned earlier in the slot saw of it)
            "own_plan": own_p / n, "others_plan": oth_p / n, "own_booked_ahead": own_ahead / n,
            "bursts": bursts, "bursts_unannounced": unannounced,
            "bursts_reaching_half": len(r),
            "mean_slots_to_half": sum(r) / len(r) if r else None,
        }
    return out


def booking(by_slot: dict[int, dict[str, dict]], hpr: int, cap_Bps: float) -> dict:
    """Per link: slots with a booking, slots booked beyond capacity + the wait floors of the flows
    booked in them, of which one job's flows alone, and the worst booking / capacity."""
    plans: dict[str, dict[int, list]] = defaultdict(dict)  # flow -> slot planned in -> plan
    job: dict[str, str] = {}
    for s, flows in by_slot.items():
        for fid, fl in flows.items():
            plans[fid][s] = fl["plan"]
            job[fid] = fl["job"]
    on = defaultdict(list)
    for fid in plans:
        for ln in links_of(*parse_flow(fid), hpr):
            on[ln].append(fid)
    out = {}
    for ln, fids in sorted(on.items()):
        slots = over = alone = 0
        worst = 0.0
        for s in sorted(by_slot):
            got = []
            for fid in fids:
                p = plans[fid]
                last = max((x for x in p if s - len(p[x]) < x <= s), default=None)
                if last is not None and p[last][s - last] > 0:
                    got.append((job[fid], float(p[last][s - last])))
            if not got:
                continue
            slots += 1
            b = sum(v for _, v in got)
            worst = max(worst, b / cap_Bps)
            if b > cap_Bps + len(got) * WAIT_FLOOR_Bps:
                over += 1
                alone += len({j for j, v in got if v > WAIT_FLOOR_Bps * 1.01}) <= 1
        out[ln] = {"slots": slots, "over": over, "over_one_job": alone, "worst_ratio": worst}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="+", help="trace files (HOSTCTL_MLCC_TRACE), globs allowed")
    ap.add_argument("--hosts-per-rack", type=int, default=3)
    ap.add_argument("--link", default="500mbit", help="rack uplink rate (the share's denominator)")
    ap.add_argument("--slot", type=float, default=0.06)
    ap.add_argument("--out", help="write the result as JSON here")
    a = ap.parse_args(argv)
    paths = sorted({p for t in a.traces for p in glob.glob(t)})
    try:
        cap = parse_rate_bps(a.link, what="--link") / 8
    except ConfigError as e:
        print(f"trace_share: {e}", file=sys.stderr)
        return 2
    by_slot = load(paths)
    if not by_slot:
        print(f"trace_share: no trace records in {', '.join(paths) or 'no files'}", file=sys.stderr)
        return 2
    res = analyse(by_slot, a.hosts_per_rack, cap, a.slot)
    for j, per in res["links"].items():
        for ln, v in per.items():
            m = v["mean_slots_to_half"]
            print(f"{j:28s} {ln:11s} busy {v['busy_slots']:4d} slots: own {v['own_share']:.2f} of the link "
                  f"(paced at {v['own_applied']:.2f}), others {v['others_share']:.2f} (paced at "
                  f"{v['others_applied']:.2f}); planned {v['own_plan']:.2f} / others {v['others_plan']:.2f}, "
                  f"booked a slot ahead {v['own_booked_ahead']:.2f} ({v['bursts_unannounced']} of {v['bursts']} "
                  f"bursts unannounced); >= half after {'-' if m is None else f'{m:.2f}'} slots "
                  f"({v['bursts_reaching_half']} bursts)")
    for ln, v in res["booking"].items():
        if v["over"]:
            print(f"{ln:11s} booked beyond capacity + floors in {v['over']} of {v['slots']} slots "
                  f"({v['over_one_job']} by one job alone), worst {v['worst_ratio']:.2f}x")
    print("planned slot-0 bytes unsent: " + ", ".join(f"{j} {v:.2f}" for j, v in res["unsent_plan_frac"].items()))
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            json.dump({"traces": paths, "link_Bps": cap, "slot_s": a.slot, **res}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
