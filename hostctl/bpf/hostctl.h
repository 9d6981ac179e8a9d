/* hostctl.h: the contract between the two BPF programs and the daemon, in one place.
 *
 * tl_classify.c (tc cls_bpf band classifier) and hc_pace.c (sock_ops per-flow pacer)
 * include this file; hostctl/core/bpfabi.py reads its #define constants and struct
 * field lists (the Python sizes come from here), and tests/unit/test_bpf_layout.py
 * compiles its structs with gcc and checks the ctypes mirrors of hostctl/datapath/pacer.py
 * against them. Change a struct or a size here only.
 *
 * Map names: every map of both programs starts with hc_. The maps of each program,
 * with key, value and writer, are listed at the top of its .c file.
 *   tl_classify.c: hc_flows hc_ports hc_remotes hc_job_class hc_job_stats hc_ctl
 *   hc_pace.c:     hc_pace_flows hc_rates hc_sel_flows hc_sel_ports hc_sel_remotes
 *                  hc_slot_rate hc_pace_ctl hc_bursts
 *                  (and its adoption pass, bpf_iter__tcp, in the same file: same maps)
 * (a kernel map name holds at most 15 characters: keep new names that short.)
 *
 * Sizes (max_entries) are defaults: the loaders pass the same values with -D (a test
 * pacer may compile a smaller flow map).
 */
#ifndef HOSTCTL_H
#define HOSTCTL_H

/* -- sizes ----------------------------------------------------------------------- */
#ifndef HC_MAX_FLOWS
#define HC_MAX_FLOWS 16384     /* hc_flows; hc_pace_flows, hc_rates, hc_sel_flows */
#endif
#ifndef HC_MAX_PORTS
#define HC_MAX_PORTS 4096      /* hc_ports; hc_sel_ports */
#endif
#ifndef HC_MAX_REMOTES
#define HC_MAX_REMOTES 4096    /* hc_remotes; hc_sel_remotes */
#endif
#ifndef HC_MAX_SLOTS
#define HC_MAX_SLOTS 1024      /* job slots: hc_job_class, hc_job_stats; hc_slot_rate */
#endif
#ifndef HC_RINGBUF_PAGES
#define HC_RINGBUF_PAGES 64    /* hc_bursts */
#endif

/* -- hc_pace.c's values ------------------------------------------------------------ */
#define HP_UNLIMITED 0xffffffffU
#define HP_SLOT_WATCH 0xffffffffU  /* hc_sel_ports value: no slot, only callbacks (hc_pace.c) */
#define HP_ADOPT_TRACKED 0xfffffffeU  /* hc_adopt.slot: not selected, tracked for HP_CTL_TRACK_ALL */

/* hc_port_key.side */
#define HP_SIDE_LOCAL 0
#define HP_SIDE_REMOTE 1

/* hc_flow.flags */
#define HP_F_CLOSED 1        /* the socket reached TCP_CLOSE; the daemon may delete the entry */
#define HP_F_SETOPT_ERR 2    /* the last bpf_setsockopt failed */

/* hc_pace_ctl keys */
#define HP_CTL_KEY_CONTROL 0   /* the daemon's entry: heartbeat_ns, lease_ns, gap_ns, flags */
#define HP_CTL_KEY_COUNTERS 1  /* this program's entry: flows_full, failopen_events, bursts_lost, setopt_errors */

/* hc_pace_ctl.flags */
#define HP_CTL_TRACK_ALL 1   /* ask for RTT callbacks on every flow (late 4-tuple selection) */
#define HP_CTL_RELEASE 2     /* orderly stop: give every flow its original rate back */

/* -- keys shared by both programs ----------------------------------------------- */
struct hc_flow_key {
    __u8 laddr[16];  /* local address; IPv4 as ::ffff:a.b.c.d */
    __u8 raddr[16];  /* remote address; IPv4 as ::ffff:a.b.c.d */
    __u16 lport;     /* host byte order */
    __u16 rport;     /* host byte order */
    __u32 pad;
};

struct hc_remote_key {
    __u8 raddr[16];  /* remote address; IPv4 as ::ffff:a.b.c.d */
    __u16 rport;     /* host byte order */
    __u16 pad;
};

/* -- tl_classify.c's values ----------------------------------------------------- */
struct hc_job_class {
    __u32 classid;   /* htb classid (major<<16|minor); 0 = default class */
    __u32 pad;
};

struct hc_job_stats {
    __u64 tx_bytes;          /* egress bytes (skb->len, L2 included) */
    __u64 tx_packets;
    __u64 last_ns;           /* bpf_ktime_get_ns() of the last packet */
    __u64 burst_bytes;       /* bytes of the burst in progress */
    __u64 last_burst_bytes;  /* size of the last completed burst */
    __u64 bursts;            /* completed bursts (gap > burst_gap_ns ends one) */
};

/* hc_ctl's two entries: the daemon rewrites its whole entry at every heartbeat, so the programs'
 * counter lives in the other one (an increment between the daemon's read and write was lost). */
#define HC_CTL_KEY_CONFIG 0    /* the daemon's entry: heartbeat_ns, lease_ns, burst_gap_ns, ifb_ifindex */
#define HC_CTL_KEY_COUNTERS 1  /* the programs' entry: failopen_pkts (the other fields stay 0 there) */

struct hc_ctl {
    __u64 heartbeat_ns;   /* daemon's CLOCK_MONOTONIC at its last heartbeat */
    __u64 lease_ns;       /* fail open when now - heartbeat_ns > lease_ns; 0 = never */
    __u64 burst_gap_ns;   /* idle gap that separates two bursts of a job */
    __u64 failopen_pkts;  /* packets passed unclassified because the lease expired */
    __u32 ifb_ifindex;    /* HC_INGRESS: IFB to redirect ingress to; 0 = do not redirect */
    __u32 pad;
};

/* -- hc_pace.c's values (mirrored by hostctl/datapath/pacer.py) ---------------------- */
struct hc_port_key {
    __u16 port;      /* host byte order */
    __u8 side;       /* HP_SIDE_LOCAL (a served port) or HP_SIDE_REMOTE (a port connected to) */
    __u8 pad;
};

struct hc_rate {
    __u32 rate_Bps;  /* max pacing rate in bytes/s; 0 = not set (hc_slot_rate) */
    __u32 pad;
};

struct hc_flow {
    __u64 bytes_acked;       /* cumulative (tcp bytes_acked) */
    __u64 bytes_sent;        /* bytes_acked + bytes in flight (snd_nxt - snd_una) */
    __u64 first_ns;          /* bpf_ktime_get_ns() when the flow was selected */
    __u64 last_ns;           /* last callback that saw ACK progress */
    __u64 burst_start_ns;    /* first progress of the burst in progress */
    __u64 burst_base_acked;  /* bytes_acked before the burst in progress */
    __u64 bursts;            /* completed bursts */
    __u64 callbacks;         /* program runs for this flow */
    __u32 slot;              /* job slot (index into hc_slot_rate) */
    __u32 rate_Bps;          /* rate applied now (HP_UNLIMITED = none) */
    __u32 orig_rate_Bps;     /* SO_MAX_PACING_RATE before hostctl touched the flow */
    __u32 srtt_us;           /* smoothed RTT (skops->srtt_us is in 1/8 us: converted) */
    __u32 snd_cwnd;          /* segments */
    __u32 total_retrans;
    __u32 flags;             /* HP_F_* */
    __u32 setopt_errors;
};

/* One record per socket the adoption pass (hc_pace.c's bpf_iter__tcp) gave callbacks to,
 * written to the iterator's output for the daemon to count and log (a second one, err set,
 * when the kernel refused). */
struct hc_adopt {
    struct hc_flow_key key;
    __u32 slot;              /* the selected job slot, HP_SLOT_WATCH (watched), or HP_ADOPT_TRACKED */
    __s32 err;               /* 0; in a socket's second record, bpf_setsockopt's -errno */
};

struct hc_burst {
    struct hc_flow_key key;
    __u64 start_ns;
    __u64 end_ns;
    __u64 bytes;             /* bytes acked during the burst */
    __u32 slot;
    __u32 pad;
};

struct hc_pace_ctl {
    /* entry HP_CTL_KEY_CONTROL (the daemon writes; the counters stay 0 there) */
    __u64 heartbeat_ns;      /* daemon's CLOCK_MONOTONIC at its last heartbeat */
    __u64 lease_ns;          /* fail open when now - heartbeat_ns > lease_ns (0: never) */
    __u64 gap_ns;            /* no ACK progress for this long ends a burst */
    __u64 flags;             /* HP_CTL_* */
    /* entry HP_CTL_KEY_COUNTERS (this program writes; the fields above stay 0 there) */
    __u64 flows_full;        /* flows not tracked because hc_pace_flows was full */
    __u64 failopen_events;   /* rate changes made because the lease had expired */
    __u64 bursts_lost;       /* burst records dropped (ring buffer full) */
    __u64 setopt_errors;     /* failed bpf_setsockopt calls */
};

/* -- the lease ------------------------------------------------------------------- */
/* Expired when the daemon's last heartbeat is more than lease_ns old (lease_ns 0: never).
 * Signed: the daemon stamps heartbeat_ns with its own clock read, and a packet's
 * bpf_ktime_get_ns() can be a little earlier than the stamp it then reads; unsigned, that
 * difference wrapped to ~2^64 and a fresh lease counted as expired (measured: packets right
 * after a setup failed open in 4 of 9 runs of tests/integration/test_datapath_contract.py). */
#define HC_LEASE_EXPIRED(now, hb, lease) ((lease) && (__s64)((now) - (hb)) > (__s64)(lease))

#endif /* HOSTCTL_H */
