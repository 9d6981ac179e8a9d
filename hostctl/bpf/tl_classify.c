/* tl_classify.c: TensorLights band classifier (tc cls_bpf, classic mode) on the
 * egress htb qdisc that hostctl installs (handle 6863:).
 *
 * For every egress packet: find the DL job that owns it (by connection 4-tuple,
 * else by local source port = a served listening port, else by remote endpoint =
 * the address and port of a server the job's workers connect to), count it for that job,
 * and return the job's band classid (classic cls_bpf: the return value is the
 * classid). Packets of no job, and all packets once the daemon's heartbeat is
 * older than the lease (daemon dead or stuck: fail open), return 0 (no match),
 * which sends them to htb's default class: plain FIFO sharing, nothing
 * prioritised or demoted. While the lease holds, TCP segments without data
 * (pure ACKs, SYN, FIN, RST) go to the control class, whether they belong to a
 * job or not (control_class()); a job's are counted for it first.
 *
 * Why not direct-action + skb->tc_classid: on this kernel (6.18) htb ignored the
 * classid written that way (all packets landed in the default class, measured
 * with iperf3); the classic return value works (docs/operations.md).
 *
 * Maps (all written by the daemon, hostctl/datapath/classifier.py):
 *   name          type   key                   -> value                  max_entries      reader
 *   hc_flows      hash   struct hc_flow_key    -> __u32 job slot          HC_MAX_FLOWS     this program
 *   hc_ports      hash   __u32 local port      -> __u32 job slot          HC_MAX_PORTS     this program
 *   hc_remotes    hash   struct hc_remote_key  -> __u32 job slot          HC_MAX_REMOTES   this program
 *   hc_job_class  array  __u32 job slot        -> struct hc_job_class     HC_MAX_SLOTS     this program
 *   hc_job_stats  array  __u32 job slot        -> struct hc_job_stats     HC_MAX_SLOTS     daemon (written here)
 *   hc_ctl        array  __u32 0 config, 1 counters -> struct hc_ctl      2                both (tl_redirect too)
 * Structs and sizes are in hostctl.h (shared with hc_pace.c and the daemon).
 * hc_remotes (remote address + remote port) classifies a worker's connections to its
 * PS from their first packet (the daemon writes no 4-tuple for them), and still does
 * when the worker sits in a container behind masquerading NAT (source address and
 * port are rewritten, the destination is not).
 * A rotation rewrites only hc_job_class entries (one 8-byte value per job, atomic
 * per entry): no packet is dropped and shaping never stops.
 *
 * Compile-time settings (cflags, built by classifier.cflags()): HC_MAX_FLOWS,
 * HC_MAX_PORTS, HC_MAX_REMOTES, HC_MAX_SLOTS, L2_HLEN (14 on Ethernet/veth,
 * 0 on L3 devices),
 * CONTROL_CLASSID (the class of TCP segments without data: control_class() below;
 * 0 = no control class: those of no job stay in the default class, a job's in its band).
 *
 * Overhead: at most three hash lookups and three array lookups per egress packet, plus
 * four bpf_skb_load_bytes calls; no per-packet allocation.
 *
 * Ingress bands (compiled with -DHC_INGRESS=1, a second instance with its own
 * maps; hostctl/datapath/linux.py): tl_redirect runs direct-action on the NIC's
 * clsact ingress hook and redirects every packet to the IFB device whose index
 * is in hc_ctl.ifb_ifindex; the IFB carries an htb tree like the egress one, and
 * tl_classify classifies there with local and remote swapped (an ingress packet's
 * destination is the local end, so hc_remotes matches the source of a PS's packets
 * to a worker). Fail open: once the lease has expired (or before ifb_ifindex is
 * set) tl_redirect returns TC_ACT_OK and packets skip the IFB, so a dead daemon
 * leaves no ingress shaping behind. In this instance hc_job_stats count received
 * bytes (the field names say tx).
 */
#include <uapi/linux/bpf.h>
#include <uapi/linux/pkt_cls.h>
#include <uapi/linux/if_ether.h>

#include "hostctl.h"  /* structs and sizes */

/* Classic (not direct-action) mode: 0 = no match, the packet goes to htb's default class. */
#define NO_MATCH 0

#ifndef L2_HLEN
#define L2_HLEN 14
#endif
#ifndef CONTROL_CLASSID
#define CONTROL_CLASSID 0  /* htb classid of TCP segments without data; 0 = none */
#endif

/* Where the local end's address and port are: the source on egress, the
 * destination on ingress (IPv4 saddr at 12, daddr at 16; IPv6 at 8 and 24). */
#ifdef HC_INGRESS
#define LADDR4 16
#define RADDR4 12
#define LADDR6 24
#define RADDR6 8
#define LPORT 1
#else
#define LADDR4 12
#define RADDR4 16
#define LADDR6 8
#define RADDR6 24
#define LPORT 0
#endif

BPF_HASH(hc_flows, struct hc_flow_key, __u32, HC_MAX_FLOWS);
BPF_HASH(hc_ports, __u32, __u32, HC_MAX_PORTS);
BPF_HASH(hc_remotes, struct hc_remote_key, __u32, HC_MAX_REMOTES);
BPF_ARRAY(hc_job_class, struct hc_job_class, HC_MAX_SLOTS);
BPF_ARRAY(hc_job_stats, struct hc_job_stats, HC_MAX_SLOTS);
BPF_ARRAY(hc_ctl, struct hc_ctl, 2);

/* A TCP segment without data (a pure ACK, SYN, FIN, RST) goes to the control class
 * (prio 0): the ACKs of what this host receives must not queue behind the data it sends.
 * Of no job, they would wait in the default class below the bands (measured: a flow into
 * a PS host fell from 40-59 to 11-21 Mbit/s under `one`); of a job, in its band behind
 * higher bands' data, which stalled a lower job's gradients arriving at a PS host while a
 * higher job's update went out (docs/benchmarks.md, session 21). Segments with data stay
 * in their class. Returns NO_MATCH for a segment with data or without a control class. */
static __always_inline __u32 control_class(struct __sk_buff *skb, __u32 l4, __u32 l3_payload)
{
    __u8 doff;
    if (!CONTROL_CLASSID || bpf_skb_load_bytes(skb, l4 + 12, &doff, 1) < 0)
        return NO_MATCH;
    return l3_payload == (__u32)(doff >> 4) * 4 ? CONTROL_CLASSID : NO_MATCH;
}

/* A packet passed unclassified because the lease expired: counted in the counters' entry. */
static __always_inline void count_failopen(void)
{
    __u32 k = HC_CTL_KEY_COUNTERS;
    struct hc_ctl *cnt = hc_ctl.lookup(&k);
    if (cnt)
        __sync_fetch_and_add(&cnt->failopen_pkts, 1);
}

int tl_classify(struct __sk_buff *skb)
{
    __u32 k = HC_CTL_KEY_CONFIG;
    struct hc_ctl *ctl = hc_ctl.lookup(&k);
    if (!ctl)
        return NO_MATCH;
    __u64 now = bpf_ktime_get_ns();
    if (HC_LEASE_EXPIRED(now, ctl->heartbeat_ns, ctl->lease_ns)) {
        count_failopen();
        return NO_MATCH;
    }

    struct hc_flow_key key = {};
    __u32 l4, l3_payload;  /* l3_payload: bytes after the IP header (TCP header + data) */
    if (skb->protocol == bpf_htons(ETH_P_IP)) {
        __u8 vihl, proto;
        __u16 frag, tot_len;
        if (bpf_skb_load_bytes(skb, L2_HLEN, &vihl, 1) < 0 ||
            bpf_skb_load_bytes(skb, L2_HLEN + 9, &proto, 1) < 0 ||
            bpf_skb_load_bytes(skb, L2_HLEN + 6, &frag, 2) < 0 ||
            bpf_skb_load_bytes(skb, L2_HLEN + 2, &tot_len, 2) < 0)
            return NO_MATCH;
        if (proto != 6 /* TCP */ || (bpf_ntohs(frag) & 0x1fff))
            return NO_MATCH;
        key.laddr[10] = 0xff; key.laddr[11] = 0xff;
        key.raddr[10] = 0xff; key.raddr[11] = 0xff;
        if (bpf_skb_load_bytes(skb, L2_HLEN + LADDR4, &key.laddr[12], 4) < 0 ||
            bpf_skb_load_bytes(skb, L2_HLEN + RADDR4, &key.raddr[12], 4) < 0)
            return NO_MATCH;
        l4 = L2_HLEN + (vihl & 0x0f) * 4;
        l3_payload = bpf_ntohs(tot_len) - (vihl & 0x0f) * 4;
    } else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
        __u8 nexthdr;
        __u16 payload_len;
        if (bpf_skb_load_bytes(skb, L2_HLEN + 6, &nexthdr, 1) < 0 || nexthdr != 6 ||
            bpf_skb_load_bytes(skb, L2_HLEN + 4, &payload_len, 2) < 0)
            return NO_MATCH;
        if (bpf_skb_load_bytes(skb, L2_HLEN + LADDR6, key.laddr, 16) < 0 ||
            bpf_skb_load_bytes(skb, L2_HLEN + RADDR6, key.raddr, 16) < 0)
            return NO_MATCH;
        l4 = L2_HLEN + 40;
        l3_payload = bpf_ntohs(payload_len);
    } else {
        return NO_MATCH;
    }
    __u16 ports[2];
    if (bpf_skb_load_bytes(skb, l4, ports, 4) < 0)
        return NO_MATCH;
    key.lport = bpf_ntohs(ports[LPORT]);
    key.rport = bpf_ntohs(ports[1 - LPORT]);

    __u32 *slotp = hc_flows.lookup(&key);
    if (!slotp) {
        __u32 port = key.lport;
        slotp = hc_ports.lookup(&port);
    }
    if (!slotp) {
        struct hc_remote_key rkey = {};
        __builtin_memcpy(rkey.raddr, key.raddr, 16);
        rkey.rport = key.rport;
        slotp = hc_remotes.lookup(&rkey);
        if (!slotp)
            return control_class(skb, l4, l3_payload);
    }
    __u32 slot = *slotp;

    struct hc_job_stats *st = hc_job_stats.lookup(&slot);
    if (st) {
        if (now - st->last_ns > ctl->burst_gap_ns) {
            if (st->burst_bytes) {
                st->last_burst_bytes = st->burst_bytes;
                __sync_fetch_and_add(&st->bursts, 1);
            }
            st->burst_bytes = 0;
        }
        st->last_ns = now;
        __sync_fetch_and_add(&st->burst_bytes, skb->len);
        __sync_fetch_and_add(&st->tx_bytes, skb->len);
        __sync_fetch_and_add(&st->tx_packets, 1);
    }

    /* A job's segment without data (the ACKs of the data it receives) skips the bands too:
     * in a band it would wait behind higher bands' data and stall this job's other direction. */
    __u32 ctl_class = control_class(skb, l4, l3_payload);
    if (ctl_class)
        return ctl_class;
    struct hc_job_class *jc = hc_job_class.lookup(&slot);
    if (!jc || !jc->classid)
        return NO_MATCH;
    return jc->classid;  /* classic cls_bpf mode: the return value is the classid */
}

#ifdef HC_INGRESS
int tl_redirect(struct __sk_buff *skb)
{
    __u32 k = HC_CTL_KEY_CONFIG;
    struct hc_ctl *ctl = hc_ctl.lookup(&k);
    if (!ctl || !ctl->ifb_ifindex)
        return TC_ACT_OK;
    if (HC_LEASE_EXPIRED(bpf_ktime_get_ns(), ctl->heartbeat_ns, ctl->lease_ns)) {
        count_failopen();
        return TC_ACT_OK;
    }
    return bpf_redirect(ctl->ifb_ifindex, 0);
}
#endif
