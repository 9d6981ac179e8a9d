"""LinuxDatapath: the TensorLights htb tree (pyroute2 netlink) plus the BPF
classifier (bcc), with a journal so that stop, crash + ``hostctl clean`` and a
restart all leave the interface exactly as it was.

Order of effects (each undo is recorded before the change it undoes):
  1. journal the previous egress tree (byte-exact, rtnl_raw.py) and our PID;
  2. replace the root qdisc with htb 6863: and create/replace the classes;
  3. load the classifier and attach it as the only filter of 6863: (direct-action).
Teardown reverses it: restore the previous tree (which removes ours and with it
the filter and the program), then drop the journal.

With ingress bands (plan.ingress_classes), after step 3:
  4. journal the IFB's name (``hcin<ifindex>``) and whether the NIC had a clsact qdisc;
  5. create the IFB with the htb tree of plan.ingress_classes and a second classifier
     instance (compiled for ingress) on it;
  6. add clsact to the NIC if absent and attach tl_redirect to its ingress hook
     (filter prio INGRESS_FILTER_PRIO), which redirects to the IFB while the lease holds
     and apply() has some job in a band (else there is nothing to order).
Undo removes the redirect filter (or the clsact qdisc, if hostctl added it) and the IFB.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import threading

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from hostctl import consts
from hostctl.core.pace import PaceTable
from hostctl.core.plan import QDISC_HANDLE, ClassifierTable, HtbClass, TcPlan, fmt_handle
from hostctl.core.types import FlowKey
from hostctl.datapath import ClassCounters, Counters, Drift, PacingReadout
from hostctl.datapath.journal import Journal, daemon_alive
from hostctl.datapath.rtnl_raw import TC_H_ROOT, RawRtnl, restore
from hostctl.errors import DatapathError, ProbeError

log = logging.getLogger("hostctl.datapath")
ETH_P_ALL = 0x0003
ARPHRD_ETHER = 1
# Devices whose packets start at the IP header at tc egress (tun, wireguard, ip tunnels, raw IP).
L3_DEVICE_TYPES = {65534, 768, 769, 776, 778, 823, 519}
TC_H_CLSACT_INGRESS = 0xFFFFFFF2  # parent of clsact's ingress filters (ffff:fff2)
TC_H_INGRESS = 0xFFFFFFF1  # parent of the ingress / clsact qdisc itself
INGRESS_FILTER_PRIO = 0x6863  # hostctl's redirect filter on the NIC's ingress hook
IFB_PREFIX = "hcin"
IFB_QUEUE_PKTS = 1000  # the IFB's txqueuelen: the limit of each htb leaf's default pfifo


def ifb_name(ifindex: int) -> str:
    """The IFB of a NIC (unique per network namespace, at most 15 characters)."""
    return f"{IFB_PREFIX}{ifindex}"


def _nl_error(what: str, e: NetlinkError) -> DatapathError:
    code = e.code if hasattr(e, "code") else 0
    hint = ""
    if code in (errno.ENOENT, errno.EOPNOTSUPP):
        hint = " (is sch_htb / cls_bpf built into this kernel? see docs/operations.md)"
    return DatapathError(f"{what}: {os.strerror(code) if code else e}{hint}")


def _ours(tree: list, handle: int = QDISC_HANDLE) -> bool:
    """A dumped egress tree (RawRtnl.dump) whose root is hostctl's htb ``handle``."""
    return bool(tree) and tree[0].kind == "htb" and tree[0].handle == handle


def link_info(iface: str) -> tuple[int, int]:
    """(ifindex, ARPHRD type) or a clear error."""
    with IPRoute() as ipr:
        idx = ipr.link_lookup(ifname=iface)
        if not idx:
            raise DatapathError(
                f"interface {iface!r} not found in this network namespace; list them with `ip link`"
            )
        link = ipr.get_links(idx[0])[0]
        return idx[0], int(link.get("ifi_type", ARPHRD_ETHER))


def default_route_iface() -> str | None:
    with IPRoute() as ipr:
        for r in ipr.get_default_routes(family=socket.AF_INET):
            oif = r.get("RTA_OIF") or r.get_attr("RTA_OIF")
            if oif:
                links = ipr.get_links(oif)
                if links:
                    return links[0].get_attr("IFLA_IFNAME")
    return None


def nic_speed_bps(iface: str) -> int | None:
    """Line rate from sysfs (Mbit/s there), None where the driver reports none (veth)."""
    try:
        with open(f"/sys/class/net/{iface}/speed") as f:
            mbit = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return mbit * 1_000_000 if mbit > 0 else None


class LinuxDatapath:
    def __init__(self, iface: str, *, policy: str = "", lease_s: float = consts.DEFAULT_LEASE_S,
                 state_dir: str | None = None, pace_cgroup: str | None = None,
                 phase_gap_s: float = consts.DEFAULT_PHASE_GAP_S, track_all: bool = True) -> None:
        self.iface = iface
        self.policy = policy
        self.lease_s = lease_s
        self.pace_cgroup = pace_cgroup  # None: no pacing datapath
        self.phase_gap_s = phase_gap_s
        self.track_all = track_all  # jobs found by pid/command line: their flows are selected late
        self.pacer = None
        self.state_dir = state_dir or consts.state_dir()
        self.ifindex, self.link_type = link_info(iface)
        self.ipr = IPRoute()
        self.classifier = None
        self.in_classifier = None  # ingress bands: the classifier on the IFB (with tl_redirect)
        self.ifb_index = 0
        self.plan: TcPlan | None = None
        self.journal: Journal | None = None
        self._link = None  # the device's state at the last check() (RawRtnl.link): up/down and MTU changes
        self._pace_path = ""  # the pacer's cgroup directory (to see it come back after it was removed)
        self._pacer_job: tuple[threading.Thread, list] | None = None  # a pacer being built again (on a thread)

    # -- setup ---------------------------------------------------------------
    def setup(self, plan: TcPlan) -> None:
        if self.plan is None:
            self._take_over()
        else:
            self._follow_link()
        self._ensure_qdisc(plan)
        for cls in plan.classes:
            self._ensure_class(cls)
        if self.plan is not None and self.plan.classify and not plan.classify:
            self._detach_classifier()
        if plan.classify and self.classifier is None:
            self._attach_classifier(plan)
        elif plan.classify and not self._filter_attached(plan):  # another agent removed it (check())
            self._attach_filter(plan)
        if plan.ingress_classes:
            self._setup_ingress(plan)
        elif self.in_classifier is not None:
            self._remove_ingress()
        if self.pace_cgroup is not None:
            self._setup_pacer(first=self.plan is None)
        # classes of an older plan that the new one no longer has (fewer bands)
        if self.plan is not None:
            keep = {c.classid for c in plan.classes}
            for cls in reversed(self.plan.classes):
                if cls.classid not in keep:
                    self._delete_class(cls.classid)
        self.plan = plan

    def _setup_pacer(self, first: bool) -> None:
        """The pacer: attached at the first setup; later (check() found it) released when its cgroup
        was removed or replaced, attached again when a cgroup is back under the path, its pins put
        back when they were removed or the bpf filesystem unmounted."""
        from hostctl.datapath.pacer import Pacer

        def make() -> Pacer:
            return Pacer(self.pace_cgroup, lease_s=self.lease_s, gap_s=self.phase_gap_s, track_all=self.track_all)

        p = self.pacer
        if p is not None and (state := p.cgroup_state()) != "ok":
            log.warning("the pacer's cgroup %s is %s: releasing its flows (%s)", p.cgroup,
                        "gone" if state == "gone" else "a new cgroup", p.close())
            self.pacer = p = None
        if p is None and first:
            self._use_pacer(make())
        elif p is None:
            if self._pacer_job is None and os.path.isdir(self._pace_path):
                # bcc compiles for seconds: on a thread (ctypes lets go of the GIL), so that the daemon's
                # slots and heartbeats go on; heartbeat() puts the pacer in use when it is ready
                box: list = []
                job = threading.Thread(target=lambda: box.append(_try(make)), daemon=True, name="hostctl-pacer")
                self._pacer_job = (job, box)
                job.start()
        elif missing := p.repin():
            log.info("pinned %s again at %s", ", ".join(missing), p.pin_dir)

    def _use_pacer(self, p) -> None:
        self.pacer, self._pace_path = p, p.cgroup
        log.info("pacing flows of cgroup %s (pinned at %s)", p.cgroup,
                 p.pin_dir or "nothing: private /sys, found by program id")

    def _pacer_ready(self, wait: bool = False) -> None:
        """A pacer built on a thread (_setup_pacer) put in use once it is ready (or its error logged)."""
        job, box = self._pacer_job
        if wait:
            job.join()
        if job.is_alive():
            return
        self._pacer_job = None
        res = box[0] if box else RuntimeError("the thread ended without a result")
        if isinstance(res, BaseException):
            log.error("attaching the pacer to %s again failed: %s", self._pace_path, res)
        else:
            self._use_pacer(res)

    def _pacer_drift(self) -> list[Drift]:
        """check()'s part for the pacer: its cgroup (gone, replaced, back) and its pins."""
        p = self.pacer
        if p is None:
            if self._pacer_job is not None:
                return []  # being attached again (on a thread)
            if self.pace_cgroup is not None and self._pace_path and os.path.isdir(self._pace_path):
                return [Drift("cgroup", f"the pacer's cgroup {self._pace_path} exists again", "back")]
            return []
        state = p.cgroup_state()
        if state != "ok":
            what = "was removed" if state == "gone" else "is a new cgroup (the old one was removed)"
            return [Drift("cgroup", f"the pacer's cgroup {p.cgroup} {what}", state)]
        missing = p.missing_pins()
        if not missing:
            return []
        from hostctl.datapath import bpfsys

        root = os.path.dirname(os.path.dirname(p.pin_dir))
        why = (f"the bpf filesystem is not mounted at {root}" if not bpfsys.is_bpffs(root)
               else f"{', '.join(missing)} removed from {p.pin_dir}")
        return [Drift("pins", f"the pacer's pins are gone ({why})")]

    def check(self) -> list[Drift]:
        """Datapath.check: the device (gone, renamed, another one under the name; up/down and MTU
        changes), then the root qdisc, each class and the classifier filter of the plan, and the ingress
        side (the IFB, its root, the NIC's redirect filter). One RTM_GETLINK, one tree dump, one filter dump."""
        if self.plan is None:
            return []
        out = self._pacer_drift() if self.pace_cgroup is not None else []
        with RawRtnl() as rt:
            mine = rt.link(self.ifindex)
            named = mine if mine is not None and mine.name == self.iface else rt.link(name=self.iface)
            if named is None:
                if mine is None:
                    return out + [Drift("gone", f"{self.iface} is gone (its tc tree and filters went with it)")]
                return out + [Drift("renamed", f"{self.iface} is now called {mine.name}", mine.name)]
            if named.ifindex != self.ifindex:
                return out + [Drift("replaced",
                                    f"{self.iface} is a new device (ifindex {self.ifindex} -> {named.ifindex})")]
            last, self._link = self._link, named
            if last is not None and last.up != named.up:
                out.append(Drift("up" if named.up else "down", f"{self.iface} is {'up' if named.up else 'down'}"))
            if last is not None and last.mtu != named.mtu:
                out.append(Drift("mtu", f"{self.iface}'s MTU changed from {last.mtu} to {named.mtu}"))
            return out + self._tree_drift(rt) + self._ingress_drift(rt)

    def _tree_drift(self, rt: RawRtnl) -> list[Drift]:
        """check()'s part for hostctl's own tc objects on the interface."""
        plan = self.plan
        out = []
        qd = f"{plan.qdisc_handle >> 16:x}:"  # (tc's notation of a qdisc)
        tree = rt.dump(self.ifindex)
        if not _ours(tree, plan.qdisc_handle):
            now = f"{tree[0].kind} {tree[0].handle >> 16:x}:" if tree and tree[0].handle else "the kernel default"
            out.append(Drift("root", f"the root qdisc is {now}, not hostctl's htb {qd}"))
        else:
            have = {o.handle for o in tree if o.what == "class"}
            out += [Drift("class", f"class {fmt_handle(c.classid)} ({c.name}) is gone")
                    for c in plan.classes if c.classid not in have]
            if plan.classify and self.classifier is not None and not rt.filter_count(self.ifindex, plan.qdisc_handle):
                out.append(Drift("filter", f"the classifier is detached from {qd}"))
        return out

    def _ingress_drift(self, rt: RawRtnl) -> list[Drift]:
        """check()'s part for the ingress side (the IFB, its tree, the NIC's redirect filter)."""
        if self.in_classifier is None:
            return []
        ifb = ifb_name(self.ifindex)
        dev = rt.link(name=ifb)
        if dev is None:
            return [Drift("ingress", f"the IFB {ifb} is gone")]
        t = rt.dump(dev.ifindex)
        if not t or t[0].kind != "htb" or {c.classid for c in self.plan.ingress_classes} - {
                o.handle for o in t if o.what == "class"}:
            return [Drift("ingress", f"the tree on {ifb} changed")]
        if not rt.filter_count(self.ifindex, TC_H_CLSACT_INGRESS):
            return [Drift("ingress", f"the ingress redirect of {self.iface} is gone")]
        return []

    def _follow_link(self) -> None:
        """Before setting up again: the device renamed (follow it: its tree is in place) or another device
        under the name (restore the old one if it is still there, set up on the new one from scratch)."""
        with RawRtnl() as rt:
            mine, named = rt.link(self.ifindex), rt.link(name=self.iface)
            if named is not None and named.ifindex == self.ifindex:
                return
            if named is None and mine is None:
                raise DatapathError(f"{self.iface} is gone: hostctl sets it up again when it is back")
            if named is None:  # renamed: the same device under another name
                old, self.iface = self.iface, mine.name
                if self.journal is not None:
                    self.journal.remove(self.state_dir)
                    self.journal.iface = mine.name
                    self.journal.save(self.state_dir)
                log.warning("%s is now called %s: hostctl follows the device (its tree is in place); name it %s "
                            "in the config", old, mine.name, mine.name)
                return
            if mine is not None and self.journal is not None:  # our old device, renamed: give it its tree back
                if _ours(rt.dump(self.ifindex)):
                    restore(rt, self.ifindex, self.journal.previous)
                    log.warning("%s (ifindex %d) now has another name: restored its previous tree", mine.name,
                                self.ifindex)
        if self.journal is not None and self.journal.ingress_ifb:
            clean_ingress(self.ipr, None, self.journal.ingress_ifb, remove_clsact=False)  # the old IFB
        if self.in_classifier is not None:
            self.in_classifier.close()
            self.in_classifier, self.ifb_index = None, 0
        if self.journal is not None:
            self.journal.remove(self.state_dir)
            self.journal = None
        old = self.ifindex
        self.ifindex, self.link_type = link_info(self.iface)
        self._link = None
        self._take_over()
        log.warning("%s is a new device (ifindex %d -> %d): setting hostctl's tree up on it", self.iface, old,
                    self.ifindex)

    def _take_over(self) -> None:
        """Record the interface's current egress tree before touching it."""
        old = Journal.load(self.iface, self.state_dir)
        if old is not None:
            if old.pid != os.getpid() and daemon_alive(old.pid):
                raise DatapathError(
                    f"hostctl (pid {old.pid}) already controls {self.iface} in this network "
                    f"namespace; stop it first with `hostctl stop`"
                )
            log.warning("found the journal of a hostctl that died (pid %d); restoring %s first",
                        old.pid, self.iface)
            clean_interface(self.iface, self.state_dir)
        with RawRtnl() as rt:
            previous = rt.dump(self.ifindex)
            if _ours(previous):
                log.warning("%s has a hostctl qdisc but no journal; the kernel default will "
                            "be restored on stop", self.iface)
                previous = []
            elif previous and previous[0].handle != 0:
                nfilt = sum(rt.filter_count(self.ifindex, o.handle) for o in previous)
                if nfilt:
                    log.warning("%s: the current root qdisc %s has %d filter(s); they are not "
                                "restored on stop (qdiscs and classes are)", self.iface,
                                previous[0].kind, nfilt)
        self.journal = Journal(self.iface, self.ifindex, os.getpid(), QDISC_HANDLE, previous, self.policy)
        self.journal.save(self.state_dir)
        if previous and previous[0].handle != 0:
            log.info("%s: saved previous root qdisc %s %s (%d objects)", self.iface,
                     previous[0].kind, fmt_handle(previous[0].handle), len(previous))

    def _ensure_qdisc(self, plan: TcPlan, index: int | None = None) -> None:
        index = index or self.ifindex
        with RawRtnl() as rt:
            tree = rt.dump(index)
        if _ours(tree, plan.qdisc_handle):
            return
        try:
            self.ipr.tc("replace", "htb", index=index, handle=plan.qdisc_handle,
                        parent=TC_H_ROOT, default=plan.default_classid & 0xFFFF, r2q=10)
        except NetlinkError as e:
            raise _nl_error(f"cannot install the htb root qdisc on {self._dev(index)}", e) from e

    def _ensure_class(self, c: HtbClass, index: int | None = None) -> None:
        index = index or self.ifindex
        try:
            self.ipr.tc("replace-class", "htb", index=index, handle=c.classid, parent=c.parent,
                        rate=f"{c.rate_bps}bit", ceil=f"{c.ceil_bps}bit", prio=c.prio,
                        quantum=c.quantum_bytes, burst=c.burst_bytes, cburst=c.cburst_bytes)
        except NetlinkError as e:
            raise _nl_error(f"cannot set htb class {fmt_handle(c.classid)} on {self._dev(index)}", e) from e

    def _dev(self, index: int) -> str:
        return self.iface if index == self.ifindex else ifb_name(self.ifindex)

    # -- ingress bands ----------------------------------------------------------
    def _ingress_qdisc(self) -> str | None:
        """Kind of the NIC's ingress-side qdisc ("clsact", "ingress") or None."""
        for q in self.ipr.get_qdiscs(index=self.ifindex):
            if q["parent"] == TC_H_INGRESS:
                return q.get_attr("TCA_KIND")
        return None

    def _setup_ingress(self, plan: TcPlan) -> None:
        """Steps 4-6 of the module docstring; idempotent (a second call only re-sets the classes)."""
        name = ifb_name(self.ifindex)
        if self.in_classifier is not None:
            with RawRtnl() as rt:
                if self._ingress_drift(rt):
                    self._remove_ingress()  # another agent changed it: build it again
        if self.in_classifier is None:
            kind = self._ingress_qdisc()
            if kind not in (None, "clsact"):
                raise DatapathError(
                    f"{self.iface} has an {kind!r} qdisc on its ingress; ingress bands need clsact there. "
                    f"Remove it (tc qdisc del dev {self.iface} ingress) or drop --ingress-rate")
            assert self.journal is not None
            self.journal.ingress_ifb = name
            self.journal.ingress_clsact = kind is None
            self.journal.save(self.state_dir)
            stale = self.ipr.link_lookup(ifname=name)
            if stale:
                log.warning("removing a leftover %s (no journal claimed it)", name)
                self.ipr.link("del", index=stale[0])
            try:
                self.ipr.link("add", ifname=name, kind="ifb")
                self.ifb_index = self.ipr.link_lookup(ifname=name)[0]
                _quiet_ipv6(name)
                self.ipr.link("set", index=self.ifb_index, state="up", txqlen=IFB_QUEUE_PKTS)
            except NetlinkError as e:
                raise _nl_error(f"cannot create the IFB device {name} (is the ifb module available?)", e) from e
        self._ensure_qdisc(plan, self.ifb_index)
        for cls in plan.ingress_classes:
            self._ensure_class(cls, self.ifb_index)
        if self.in_classifier is not None:
            return
        from hostctl.datapath.classifier import Classifier

        l2 = 0 if self.link_type in L3_DEVICE_TYPES else 14
        self.in_classifier = Classifier(l2_hlen=l2, lease_s=self.lease_s, ingress=True)
        try:
            self.ipr.tc("replace-filter", "bpf", index=self.ifb_index, handle=1, parent=plan.qdisc_handle,
                        prio=plan.filter_prio, protocol=ETH_P_ALL, fd=self.in_classifier.fd,
                        name=self.in_classifier.name)
            assert self.journal is not None
            if self.journal.ingress_clsact:  # the NIC had none (checked above, in this same call)
                self.ipr.tc("add", "clsact", index=self.ifindex)
            redirect = self.in_classifier.redirect
            self.ipr.tc("replace-filter", "bpf", index=self.ifindex, handle=1, parent=TC_H_CLSACT_INGRESS,
                        prio=INGRESS_FILTER_PRIO, protocol=ETH_P_ALL, fd=redirect.fd, name=redirect.name,
                        direct_action=True)
        except NetlinkError as e:
            raise _nl_error(f"cannot attach the ingress classifier of {self.iface}", e) from e
        log.info("%s: ingress bands through %s at %s bit/s", self.iface, name, plan.ingress_rate_bps)

    def _remove_ingress(self) -> None:
        assert self.journal is not None
        clean_ingress(self.ipr, self.ifindex, self.journal.ingress_ifb, self.journal.ingress_clsact)
        self.journal.ingress_ifb, self.journal.ingress_clsact = "", False
        self.journal.save(self.state_dir)
        self.in_classifier.close()
        self.in_classifier = None
        self.ifb_index = 0

    def _delete_class(self, classid: int) -> None:
        try:
            self.ipr.tc("del-class", "htb", index=self.ifindex, handle=classid)
        except NetlinkError as e:
            if e.code not in (errno.ENOENT, errno.EINVAL):
                raise _nl_error(f"cannot delete class {fmt_handle(classid)}", e) from e

    def _attach_classifier(self, plan: TcPlan) -> None:
        from hostctl.datapath.classifier import Classifier

        l2 = 0 if self.link_type in L3_DEVICE_TYPES else 14
        self.classifier = Classifier(l2_hlen=l2, lease_s=self.lease_s)
        try:
            self._attach_filter(plan)
        except DatapathError:
            self.classifier.close()
            self.classifier = None
            raise

    def _attach_filter(self, plan: TcPlan) -> None:
        """The classifier's program as the filter of the root qdisc (its maps, and so the jobs'
        entries, are the program's: they survive a detach and a re-attach)."""
        try:
            self.ipr.tc("replace-filter", "bpf", index=self.ifindex, handle=1, parent=plan.qdisc_handle,
                        prio=plan.filter_prio, protocol=ETH_P_ALL, fd=self.classifier.fd,
                        name=self.classifier.name)
        except NetlinkError as e:
            raise _nl_error(f"cannot attach the BPF classifier to {self.iface}", e) from e

    def _filter_attached(self, plan: TcPlan) -> bool:
        with RawRtnl() as rt:
            return rt.filter_count(self.ifindex, plan.qdisc_handle) > 0

    def _detach_classifier(self) -> None:
        if self.plan is None or self.classifier is None:
            return
        try:
            self.ipr.tc("del-filter", "bpf", index=self.ifindex, handle=1, parent=self.plan.qdisc_handle,
                        prio=self.plan.filter_prio, protocol=ETH_P_ALL)
        except NetlinkError as e:
            if e.code not in (errno.ENOENT, errno.EINVAL):
                raise _nl_error("cannot detach the BPF classifier", e) from e
        self.classifier.close()
        self.classifier = None

    # -- per tick --------------------------------------------------------------
    def apply(self, table: ClassifierTable) -> int:
        if self.in_classifier is not None:
            self.in_classifier.apply(table)
            # redirect only while some job is in a band: with nothing to order (fifo, a lone job)
            # received traffic skips the IFB and its shaping costs nothing
            want = self.ifb_index if any(table.slot_classid.values()) else 0
            if want != self.in_classifier.ifb_ifindex:
                self.in_classifier.redirect_to(want)
        if self.classifier is None:
            return 0
        return self.classifier.apply(table)

    def heartbeat(self) -> None:
        if self._pacer_job is not None:
            self._pacer_ready()
        if self.classifier is not None:
            self.classifier.heartbeat()
        if self.in_classifier is not None:
            self.in_classifier.heartbeat()
        if self.pacer is not None:
            self.pacer.heartbeat()

    def pace(self, table: PaceTable) -> int:
        return self.pacer.apply(table) if self.pacer is not None else 0

    def read_pacing(self) -> PacingReadout:
        if self.pacer is None:
            return PacingReadout()
        return PacingReadout(self.pacer.flows(), self.pacer.bursts(), self.pacer.ctl(), self._link_tx_bytes())

    def _link_tx_bytes(self) -> int | None:
        """The interface's transmitted bytes (sysfs; None where it cannot be read): the cross traffic
        that MLCC's û subtracts is what the NIC sent beyond the DL flows."""
        try:
            with open(f"/sys/class/net/{self.iface}/statistics/tx_bytes", "rb") as f:
                return int(f.read())
        except (OSError, ValueError):
            return None

    def forget(self, keys: list[FlowKey]) -> None:
        if self.pacer is not None and keys:
            self.pacer.forget(keys)

    def read_counters(self, slots: set[int] | None = None) -> Counters:
        classes = self._class_counters(self.ifindex)
        jobs = {}
        failopen = 0
        if self.classifier is not None:
            jobs = self.classifier.job_counters(slots or set())
            failopen = self.classifier.failopen_pkts()
        if self.in_classifier is None:
            return Counters(classes, jobs, failopen)
        return Counters(classes, jobs, failopen + self.in_classifier.failopen_pkts(),
                        self._class_counters(self.ifb_index), self.in_classifier.job_counters(slots or set()))

    def _class_counters(self, index: int) -> dict[int, ClassCounters]:
        classes: dict[int, ClassCounters] = {}
        try:
            for msg in self.ipr.get_classes(index=index):
                if msg["handle"] >> 16 != QDISC_HANDLE >> 16:
                    continue
                st = msg.get_attr("TCA_STATS2")
                basic = st.get_attr("TCA_STATS_BASIC") if st else None
                queue = st.get_attr("TCA_STATS_QUEUE") if st else None
                classes[msg["handle"]] = ClassCounters(
                    msg["handle"],
                    int(basic["bytes"]) if basic else 0, int(basic["packets"]) if basic else 0,
                    int(queue["drops"]) if queue else 0, int(queue["overlimits"]) if queue else 0,
                    int(queue["backlog"]) if queue else 0,
                )
        except NetlinkError as e:
            raise _nl_error(f"cannot read class counters of {self._dev(index)}", e) from e
        return classes

    # -- teardown ----------------------------------------------------------------
    def teardown(self) -> None:
        if self._pacer_job is not None:  # a pacer being attached: wait for it, then release it below
            self._pacer_ready(wait=True)
        if self.pacer is not None:  # first: give every flow its rate back
            log.info("%s", self.pacer.close())
            self.pacer = None
        if self.plan is not None or self.journal is not None:
            clean_interface(self.iface, self.state_dir)
        for c in (self.classifier, self.in_classifier):
            if c is not None:
                c.close()
        self.classifier = self.in_classifier = None
        self.ifb_index = 0
        self.plan = None
        self.journal = None

    def close(self) -> None:
        self.ipr.close()


def _try(fn):
    """fn()'s value, or the exception it raised (for a thread's result)."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - handed to the caller
        return e


def _quiet_ipv6(dev: str) -> None:
    """No IPv6 on a device of ours that carries no addresses (the IFB): otherwise the kernel sends
    router solicitations and MLD reports from it when it comes up and seconds later, and they show
    up in its htb classes as traffic nobody sent."""
    try:
        with open(f"/proc/sys/net/ipv6/conf/{dev}/disable_ipv6", "w") as f:
            f.write("1")
    except OSError:  # no IPv6 in this kernel or namespace: nothing to quiet
        pass


def clean_ingress(ipr: IPRoute, ifindex: int | None, ifb: str, remove_clsact: bool) -> list[str]:
    """Undo ingress bands on a NIC: hostctl's redirect filter (or the clsact qdisc that
    hostctl added) and the IFB. ifindex None: the NIC is gone (and its filters with it), only
    the IFB is left. Idempotent; returns what was removed."""
    done = []
    try:
        if ifindex is None:
            pass
        elif remove_clsact:
            ipr.tc("del", "clsact", index=ifindex)
            done.append("clsact")
        else:
            ipr.tc("del-filter", "bpf", index=ifindex, handle=1, parent=TC_H_CLSACT_INGRESS,
                   prio=INGRESS_FILTER_PRIO, protocol=ETH_P_ALL)
            done.append("ingress redirect")
    except NetlinkError as e:
        if e.code not in (errno.ENOENT, errno.EINVAL):
            raise _nl_error("cannot remove hostctl's ingress redirect", e) from e
    idx = ipr.link_lookup(ifname=ifb) if ifb else []
    if idx:
        ipr.link("del", index=idx[0])
        done.append(ifb)
    return done


def clean_interface(iface: str, state_dir: str | None = None) -> str:
    """Undo hostctl on one interface (journal first, else by our qdisc handle and IFB name).

    Idempotent; returns a one-line description of what was done."""
    journal = Journal.load(iface, state_dir)
    try:
        ifindex, _ = link_info(iface)
    except DatapathError:
        if journal is not None:
            with IPRoute() as ipr:  # the NIC took its filters with it; the IFB may remain
                clean_ingress(ipr, None, journal.ingress_ifb, remove_clsact=False)
            journal.remove(state_dir)
            return f"{iface}: gone; dropped its journal"
        return f"{iface}: not found"
    with IPRoute() as ipr:
        if journal is not None:
            ingress = clean_ingress(ipr, ifindex, journal.ingress_ifb, journal.ingress_clsact) \
                if journal.ingress_ifb else []
        elif ipr.link_lookup(ifname=ifb_name(ifindex)):  # no journal: by name and filter prio
            ingress = clean_ingress(ipr, ifindex, ifb_name(ifindex), remove_clsact=False)
        else:
            ingress = []
    extra = f"; removed {', '.join(ingress)}" if ingress else ""
    return _clean_egress(iface, ifindex, journal, state_dir) + extra


def _clean_egress(iface: str, ifindex: int, journal: Journal | None, state_dir: str | None) -> str:
    with RawRtnl() as rt:
        tree = rt.dump(ifindex)
        ours = _ours(tree)
        if journal is not None:
            if ours or not tree or tree[0].handle == 0:
                restore(rt, ifindex, journal.previous)
                what = (f"restored {journal.previous[0].kind} {fmt_handle(journal.previous[0].handle)}"
                        if journal.previous and journal.previous[0].handle else "restored the kernel default qdisc")
            else:
                what = f"left the root qdisc {tree[0].kind} alone (not hostctl's)"
            journal.remove(state_dir)
            return f"{iface}: {what}"
        if ours:
            rt.delete_root(ifindex)
            return f"{iface}: removed hostctl's qdisc (no journal: kernel default restored)"
    return f"{iface}: nothing of hostctl's"


def clean_all(state_dir: str | None = None, iface: str | None = None) -> list[str]:
    """``hostctl clean``: every journalled interface of this netns (or one), and every
    pacer whose daemon is gone (pacers are per cgroup, not per namespace)."""
    from hostctl.datapath.pacer import clean_pacers

    done = clean_pacers()
    if iface:
        return done + [clean_interface(iface, state_dir)]
    tc = [clean_interface(j.iface, state_dir) for j in Journal.all(state_dir)]
    return done + (tc or ["nothing journalled in this network namespace"])


def require_root() -> None:
    if os.geteuid() != 0:
        raise ProbeError("hostctl changes the kernel's traffic control: run it as root")
