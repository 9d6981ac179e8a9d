/* hc_pace.c: per-flow monitor and pacer (BPF_PROG_TYPE_SOCK_OPS, cgroup v2 attach).
 *
 * Attached to the cgroup of the daemon's scope (the v2 root on a real host, an
 * emulated host's cgroup in the testbed). For the TCP flows the daemon selected
 * (by local port, remote endpoint, remote port, or by 4-tuple) it
 *   - counts bytes acked and sent, and records srtt, cwnd, retransmits, last activity;
 *   - cuts the flow's ACK progress into bursts (no progress for gap_ns, or for two ACK
 *     steps at the applied pacing rate if longer, ends one) and reports each completed
 *     burst in the hc_bursts ring buffer;
 *   - applies the flow's maximum pacing rate with bpf_setsockopt(SO_MAX_PACING_RATE):
 *     TCP's internal pacing then enforces it, no fq qdisc needed (ENVIRONMENT.md).
 * A flow that matches no selector is never touched: no pacing, no map entry.
 *
 * The program runs only on sock_ops callbacks. At ESTABLISHED it checks the selectors
 * (4-tuple, then local port, then remote endpoint = remote address + port, then remote port);
 * a selected flow gets RTT and STATE callbacks (every state change; RTT about once per
 * round trip: the kernel calls it from tcp_rtt_estimator only when snd_una has passed
 * the snd_nxt of its previous call, NOT on every ACK), and on each one the counters are
 * updated and the wanted rate is applied if it differs from the applied one. So the
 * ACKs of the last window a flow sent before it goes idle often come with no callback:
 * hc_flow.bytes_acked then lags the socket by up to that window until the flow sends
 * again (hc_flow.bytes_sent, taken at the same callback, includes it), and a burst's
 * bytes are cut at bytes_sent, not at the ACK that happens to come next (see below).
 * With HP_CTL_TRACK_ALL set (the daemon selects flows by 4-tuple, learnt after the
 * connection exists), every flow of the cgroup gets RTT callbacks so that it can be
 * selected later; unselected flows then cost five hash lookups per callback and are
 * otherwise untouched. A port selector whose slot is HP_SLOT_WATCH selects nothing but asks
 * for those callbacks for the flows of that port only: a worker's first connection to a PS
 * (remote side) is what makes the daemon's job (and its remote-endpoint selector), and a PS's
 * connections accepted before the daemon has found its job (local side) get their job's
 * served-port selector only then; both must be selectable after they are established,
 * without TRACK_ALL's cost on every flow.
 *
 * Fail open: the daemon refreshes hc_pace_ctl.heartbeat_ns every slot. When
 * now - heartbeat_ns > lease_ns (daemon killed or stuck), or HP_CTL_RELEASE is set
 * (orderly stop), each flow's rate goes back to what it was before hostctl touched it
 * (orig_rate_Bps, normally ~0U = unlimited) at its next callback. A flow that sends
 * gets ACKs, so a throttled flow is released within about one round trip (at its
 * throttled rate) after the lease expires.
 *
 * Maps (pinned under <bpffs>/hostctl/<scope>/ by the daemon; hostctl/datapath/pacer.py
 * mirrors every struct of hostctl.h and tests/unit/test_bpf_layout.py checks sizes and offsets):
 *   name           type     key                   -> value                 max_entries       writer
 *   hc_pace_flows  hash     struct hc_flow_key    -> struct hc_flow        HC_MAX_FLOWS      this program (daemon deletes closed flows)
 *   hc_rates       hash     struct hc_flow_key    -> struct hc_rate        HC_MAX_FLOWS      daemon
 *   hc_sel_flows   hash     struct hc_flow_key    -> __u32 job slot        HC_MAX_FLOWS      daemon
 *   hc_sel_ports   hash     struct hc_port_key    -> __u32 job slot        HC_MAX_PORTS      daemon
 *   hc_sel_remotes hash     struct hc_remote_key  -> __u32 job slot        HC_MAX_REMOTES    daemon
 *   hc_slot_rate   array    __u32 job slot        -> struct hc_rate        HC_MAX_SLOTS      daemon (a job-wide default rate)
 *   hc_pace_ctl    array    __u32 0 or 1          -> struct hc_pace_ctl    2                 0: daemon, 1: this program
 *   hc_bursts      ringbuf  struct hc_burst records                        HC_RINGBUF_PAGES  this program
 * Structs, sizes and the HP_* values are in hostctl.h (shared with tl_classify.c and the daemon).
 * hc_pace_ctl holds two entries of the same struct: HP_CTL_KEY_CONTROL (heartbeat, lease, gap,
 * flags), written only by the daemon, and HP_CTL_KEY_COUNTERS (flows_full ... setopt_errors),
 * written only by this program. The daemon writes its entry whole (a map update cannot
 * write part of a value), so counters kept in the same entry would lose every increment
 * made between its read and its write.
 * Rate of a selected flow: hc_rates[flow] if present, else hc_slot_rate[slot] if not 0,
 * else unlimited (orig_rate_Bps). Rates are bytes/s in a __u32 (bpf_setsockopt takes an
 * int: at most 2^32-1 B/s, about 34 Gbit/s; ~0U means unlimited).
 *
 * Flow map full: the flow is not paced and not counted, its callbacks are switched
 * off, and hc_pace_ctl.flows_full counts it (once per flow).
 * Compile-time settings (cflags from pacer.cflags()): HC_MAX_FLOWS, HC_MAX_PORTS,
 * HC_MAX_REMOTES, HC_MAX_SLOTS, HC_RINGBUF_PAGES.
 */
#include <uapi/linux/bpf.h>
#include <uapi/linux/tcp.h>
#include <linux/socket.h>

#include "hostctl.h"  /* structs, sizes, HP_* values */

#define HP_TCP_CLOSE 7

BPF_HASH(hc_pace_flows, struct hc_flow_key, struct hc_flow, HC_MAX_FLOWS);
BPF_HASH(hc_rates, struct hc_flow_key, struct hc_rate, HC_MAX_FLOWS);
BPF_HASH(hc_sel_flows, struct hc_flow_key, __u32, HC_MAX_FLOWS);
BPF_HASH(hc_sel_ports, struct hc_port_key, __u32, HC_MAX_PORTS);
BPF_HASH(hc_sel_remotes, struct hc_remote_key, __u32, HC_MAX_REMOTES);
BPF_ARRAY(hc_slot_rate, struct hc_rate, HC_MAX_SLOTS);
BPF_ARRAY(hc_pace_ctl, struct hc_pace_ctl, 2);
BPF_RINGBUF_OUTPUT(hc_bursts, HC_RINGBUF_PAGES);

/* One 4-byte context load per field: the verifier refuses the 8-byte loads clang
 * would otherwise merge neighbouring address words into. */
#define CTX32(field) (*(volatile __u32 *)&skops->field)

static __always_inline int flow_key(struct bpf_sock_ops *skops, struct hc_flow_key *k)
{
    if (skops->family == 2 /* AF_INET */) {
        __u32 l = CTX32(local_ip4), r = CTX32(remote_ip4);
        k->laddr[10] = 0xff; k->laddr[11] = 0xff;
        k->raddr[10] = 0xff; k->raddr[11] = 0xff;
        __builtin_memcpy(&k->laddr[12], &l, 4);
        __builtin_memcpy(&k->raddr[12], &r, 4);
    } else if (skops->family == 10 /* AF_INET6 */) {
        __u32 w[8];
        w[0] = CTX32(local_ip6[0]); w[1] = CTX32(local_ip6[1]);
        w[2] = CTX32(local_ip6[2]); w[3] = CTX32(local_ip6[3]);
        w[4] = CTX32(remote_ip6[0]); w[5] = CTX32(remote_ip6[1]);
        w[6] = CTX32(remote_ip6[2]); w[7] = CTX32(remote_ip6[3]);
        __builtin_memcpy(k->laddr, &w[0], 16);
        __builtin_memcpy(k->raddr, &w[4], 16);
    } else {
        return -1;
    }
    k->lport = (__u16)skops->local_port;
    k->rport = (__u16)bpf_ntohl(skops->remote_port);
    return 0;
}

/* 1: selected (*slot set); 2: not selected but watched (a port selector with HP_SLOT_WATCH,
 * local or remote: the search goes on past it, so a watch never hides a selector that comes
 * later in the order); 0: neither. */
static __always_inline int select_slot(struct hc_flow_key *k, __u32 *slot)
{
    int watched = 0;
    __u32 *s = hc_sel_flows.lookup(k);
    if (!s) {
        struct hc_port_key pk = {.port = k->lport, .side = HP_SIDE_LOCAL};
        s = hc_sel_ports.lookup(&pk);
        if (s && *s == HP_SLOT_WATCH) {
            watched = 1;
            s = 0;
        }
        if (!s) {
            struct hc_remote_key rk = {};
            __builtin_memcpy(rk.raddr, k->raddr, 16);
            rk.rport = k->rport;
            s = hc_sel_remotes.lookup(&rk);
        }
        if (!s) {
            pk.port = k->rport;
            pk.side = HP_SIDE_REMOTE;
            s = hc_sel_ports.lookup(&pk);
        }
    }
    if (s && *s == HP_SLOT_WATCH) {
        watched = 1;
        s = 0;
    }
    if (!s)
        return watched ? 2 : 0;
    *slot = *s;
    return 1;
}

static __always_inline void set_rate(struct bpf_sock_ops *skops, struct hc_flow *f, struct hc_pace_ctl *cnt,
                                     __u32 want)
{
    if (want == f->rate_Bps)
        return;
    int rate = (int)want;  /* optlen must be 4 (a 64-bit value gives -EINVAL) */
    if (bpf_setsockopt(skops, SOL_SOCKET, SO_MAX_PACING_RATE, &rate, sizeof(rate)) == 0) {
        f->rate_Bps = want;
        f->flags &= ~HP_F_SETOPT_ERR;
    } else {
        f->flags |= HP_F_SETOPT_ERR;
        f->setopt_errors++;
        __sync_fetch_and_add(&cnt->setopt_errors, 1);
    }
}

int hc_pace(struct bpf_sock_ops *skops)
{
    __u32 ctl_key = HP_CTL_KEY_CONTROL, cnt_key = HP_CTL_KEY_COUNTERS;
    struct hc_pace_ctl *ctl = hc_pace_ctl.lookup(&ctl_key);
    struct hc_pace_ctl *cnt = hc_pace_ctl.lookup(&cnt_key);
    if (!ctl || !cnt)
        return 1;
    __u32 op = skops->op;
    if (op != BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB && op != BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB &&
        op != BPF_SOCK_OPS_RTT_CB && op != BPF_SOCK_OPS_STATE_CB)
        return 1;

    struct hc_flow_key key = {};
    if (flow_key(skops, &key) < 0)
        return 1;
    __u64 now = bpf_ktime_get_ns();
    struct hc_flow *f = hc_pace_flows.lookup(&key);
    if (f && (op == BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB || op == BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB)) {
        /* A row found at ESTABLISHED belongs to an earlier connection with the same
         * 4-tuple (closed, not yet forgotten by the daemon): start this one afresh. */
        hc_pace_flows.delete(&key);
        f = 0;
    }
    if (!f) {
        if (op == BPF_SOCK_OPS_STATE_CB)
            return 1;
        __u32 slot;
        int sel = select_slot(&key, &slot);
        if (sel != 1) {
            if (op != BPF_SOCK_OPS_RTT_CB && (sel == 2 || (ctl->flags & HP_CTL_TRACK_ALL)))
                bpf_sock_ops_cb_flags_set(skops, BPF_SOCK_OPS_RTT_CB_FLAG);
            return 1;
        }
        struct hc_flow nf = {};
        nf.slot = slot;
        nf.first_ns = now;
        nf.last_ns = 0;
        nf.bytes_acked = skops->bytes_acked;
        nf.burst_base_acked = skops->bytes_acked;
        nf.rate_Bps = HP_UNLIMITED;
        nf.orig_rate_Bps = HP_UNLIMITED;
        int orig = 0;
        if (bpf_getsockopt(skops, SOL_SOCKET, SO_MAX_PACING_RATE, &orig, sizeof(orig)) == 0)
            nf.orig_rate_Bps = (__u32)orig;
        nf.rate_Bps = nf.orig_rate_Bps;
        if (hc_pace_flows.insert(&key, &nf) != 0) {
            /* full (or a racing insert): leave the flow alone for good */
            if (!hc_pace_flows.lookup(&key)) {
                __sync_fetch_and_add(&cnt->flows_full, 1);
                bpf_sock_ops_cb_flags_set(skops, 0);
                return 1;
            }
        }
        bpf_sock_ops_cb_flags_set(skops, BPF_SOCK_OPS_RTT_CB_FLAG | BPF_SOCK_OPS_STATE_CB_FLAG);
        f = hc_pace_flows.lookup(&key);
        if (!f)
            return 1;
    }
    f->callbacks++;

    if (op == BPF_SOCK_OPS_STATE_CB) {
        if (skops->args[1] == HP_TCP_CLOSE)
            f->flags |= HP_F_CLOSED;
        return 1;
    }

    /* counters and bursts */
    __u64 acked = skops->bytes_acked;
    if (acked > f->bytes_acked) {
        /* A paced flow's ACKs come one step (this ACK's advance) per step/rate: a gap
         * shorter than two steps at the applied rate is pacing, not idleness. */
        __u64 gap = ctl->gap_ns;
        if (f->rate_Bps != HP_UNLIMITED && f->rate_Bps) {
            __u64 pace_gap = (acked - f->bytes_acked) * 2000000000ULL / f->rate_Bps;
            if (pace_gap > gap)
                gap = pace_gap;
        }
        if (f->last_ns && now - f->last_ns > gap) {
            /* Every byte sent by the previous callback went out before the pause: it belongs
             * to the burst that ends, even when its ACK came with no callback (the last
             * window of a burst usually does, see the top) and is only seen now. */
            __u64 end_acked = f->bytes_sent < acked ? f->bytes_sent : acked;
            if (end_acked < f->bytes_acked)
                end_acked = f->bytes_acked;
            struct hc_burst b = {};
            b.key = key;
            b.start_ns = f->burst_start_ns;
            b.end_ns = f->last_ns;  /* last progress seen; the burst's last ACK may be later */
            b.bytes = end_acked - f->burst_base_acked;
            b.slot = f->slot;
            if (hc_bursts.ringbuf_output(&b, sizeof(b), 0) != 0)
                __sync_fetch_and_add(&cnt->bursts_lost, 1);
            f->bursts++;
            f->burst_base_acked = end_acked;
            f->burst_start_ns = now;
        } else if (!f->last_ns) {
            f->burst_start_ns = now;
        }
        f->last_ns = now;
        f->bytes_acked = acked;
    }
    f->bytes_sent = acked + (__u32)(skops->snd_nxt - skops->snd_una);
    f->srtt_us = skops->srtt_us >> 3;
    f->snd_cwnd = skops->snd_cwnd;
    f->total_retrans = skops->total_retrans;

    /* rate */
    __u32 want = f->orig_rate_Bps;
    if ((ctl->flags & HP_CTL_RELEASE) || HC_LEASE_EXPIRED(now, ctl->heartbeat_ns, ctl->lease_ns)) {
        if (want != f->rate_Bps)
            __sync_fetch_and_add(&cnt->failopen_events, 1);
    } else {
        struct hc_rate *r = hc_rates.lookup(&key);
        if (r && r->rate_Bps) {
            want = r->rate_Bps;
        } else {
            __u32 slot = f->slot;
            struct hc_rate *sr = hc_slot_rate.lookup(&slot);
            if (sr && sr->rate_Bps)
                want = sr->rate_Bps;
        }
    }
    set_rate(skops, f, cnt, want);
    return 1;
}

/* -- adoption: flows established before the program was attached --------------------------
 *
 * A flow gets the callbacks above only if a sock_ops program asked for them at its
 * ESTABLISHED callback. A connection established before hostctl attached (the daemon started
 * after the job, a systemd restart under a new cgroup, a flow no selector or watch matched when
 * it was established) never had that callback, so the pacer can neither count nor pace it.
 *
 * bpf_iter__tcp is a BPF iterator over the TCP sockets of the network namespace that reads it
 * (the daemon's). For each ESTABLISHED socket it makes the decision the ESTABLISHED callback
 * makes (select_slot, the same selectors; HP_CTL_TRACK_ALL) and, where that callback would have
 * asked for RTT callbacks, asks for them now: bpf_setsockopt(SOL_TCP, TCP_BPF_SOCK_OPS_CB_FLAGS)
 * (Linux 6.12+; the bit is OR-ed into the socket's flags, so another program's flags stay).
 * From the socket's next RTT callback on, hc_pace above treats it as any selected flow: the
 * row is created then (bytes acked from then on), the rate applied. A socket that already has
 * RTT callbacks is left alone. Each socket given callbacks is written to the iterator's output
 * as a struct hc_adopt (hostctl.h) for the daemon to count and log; one the kernel refused is
 * written twice, the second time with err set.
 *
 * The iterator walks every TCP socket of the namespace, not only those of the program's
 * cgroup: a socket of another cgroup that matches a selector gets RTT callbacks that run no
 * program of ours (the kernel runs the programs of the socket's own cgroup). The fields read
 * are those of struct sock_common, the part of the socket every kernel lays out the same way
 * (its head is declared below).
 */
#ifndef TCP_BPF_SOCK_OPS_CB_FLAGS
#define TCP_BPF_SOCK_OPS_CB_FLAGS 1008
#endif
#define HP_TCP_ESTABLISHED 1

struct bpf_iter_meta {
    struct seq_file *seq;
    __u64 session_id;
    __u64 seq_num;
};

/* The head of the kernel's struct sock_common (include/net/sock.h), the fields the pass reads at their
 * offsets, unchanged since Linux 4.x on 64-bit kernels with IPv6 and network namespaces. Declared here
 * rather than by including net/sock.h, which triples the program's compile time (1.3 -> 4 s). The
 * verifier checks every load against the running kernel's own type (BTF); tests/integration/test_pacer.py
 * checks the 4-tuples read against real IPv4 and IPv6 sockets. */
struct sock_common {
    __be32 skc_daddr;          /* 0 */
    __be32 skc_rcv_saddr;      /* 4 */
    __u32 skc_hash;            /* 8 */
    __be16 skc_dport;          /* 12 */
    __u16 skc_num;             /* 14 */
    unsigned short skc_family; /* 16 */
    unsigned char skc_state;   /* 18 */
    unsigned char skc_flags;   /* 19: skc_reuse, skc_reuseport, skc_ipv6only, skc_net_refcnt */
    int skc_bound_dev_if;      /* 20 */
    void *skc_bind_node[2];    /* 24: struct hlist_node */
    void *skc_prot;            /* 40 */
    void *skc_net;             /* 48: possible_net_t */
    __u8 skc_v6_daddr[16];     /* 56: struct in6_addr */
    __u8 skc_v6_rcv_saddr[16]; /* 72 */
};

struct bpf_iter__tcp {
    struct bpf_iter_meta *meta;
    struct sock_common *sk_common;
    uid_t uid;
};

int bpf_iter__tcp(struct bpf_iter__tcp *ctx)
{
    struct sock_common *skc = ctx->sk_common;
    if (!skc || skc->skc_state != HP_TCP_ESTABLISHED)
        return 0;
    __u32 ctl_key = HP_CTL_KEY_CONTROL;
    struct hc_pace_ctl *ctl = hc_pace_ctl.lookup(&ctl_key);
    if (!ctl)
        return 0;

    struct hc_adopt rec = {};
    if (skc->skc_family == 2 /* AF_INET */) {
        __u32 l = skc->skc_rcv_saddr, r = skc->skc_daddr;
        rec.key.laddr[10] = 0xff; rec.key.laddr[11] = 0xff;
        rec.key.raddr[10] = 0xff; rec.key.raddr[11] = 0xff;
        __builtin_memcpy(&rec.key.laddr[12], &l, 4);
        __builtin_memcpy(&rec.key.raddr[12], &r, 4);
    } else if (skc->skc_family == 10 /* AF_INET6 */) {
        __builtin_memcpy(rec.key.laddr, &skc->skc_v6_rcv_saddr, 16);
        __builtin_memcpy(rec.key.raddr, &skc->skc_v6_daddr, 16);
    } else {
        return 0;
    }
    rec.key.lport = skc->skc_num;
    rec.key.rport = bpf_ntohs(skc->skc_dport);

    __u32 slot = HP_ADOPT_TRACKED;
    int sel = select_slot(&rec.key, &slot);
    if (sel == 2)
        slot = HP_SLOT_WATCH;
    else if (sel == 0 && !(ctl->flags & HP_CTL_TRACK_ALL))
        return 0;

    int flags = 0;
    if (bpf_getsockopt(skc, SOL_TCP, TCP_BPF_SOCK_OPS_CB_FLAGS, &flags, sizeof(flags)) == 0 &&
        (flags & BPF_SOCK_OPS_RTT_CB_FLAG))
        return 0;  /* already has callbacks: established after the attach, or adopted before */
    /* The record goes out before the flags change. When the output buffer is full, the kernel drops
     * this socket's whole output and shows the socket again at the next read(): had the flags been
     * set first, that second visit would find them and the socket would never be reported. A
     * failure is a second record (err set): if that one overflows, the socket, its flags still
     * unset, is shown again and both records are written then. */
    rec.slot = slot;
    if (bpf_seq_write(ctx->meta->seq, &rec, sizeof(rec)) != 0)
        return 0;
    flags |= BPF_SOCK_OPS_RTT_CB_FLAG;
    rec.err = bpf_setsockopt(skc, SOL_TCP, TCP_BPF_SOCK_OPS_CB_FLAGS, &flags, sizeof(flags));
    if (rec.err)
        bpf_seq_write(ctx->meta->seq, &rec, sizeof(rec));
    return 0;
}
