"""Unit tests of hostctl.core.grouping.group_jobs on hand-built snapshots."""

from __future__ import annotations

import pytest

from hostctl.core.grouping import HOSTCTL_COMMANDS, group_jobs, is_hostctl_command, pids_needing_env
from hostctl.core.types import FlowKey, Job, JobSpec, ProcInfo, Snapshot, SockInfo
from hostctl.errors import ConfigError

# --------------------------------------------------------------------------
# builders


def proc(pid: int, ppid: int = 1, cmd: str = "", **env: str) -> ProcInfo:
    return ProcInfo(pid=pid, ppid=ppid, cmdline=cmd, env=dict(env))


def listen(addr: str, port: int, pid: int | None = None) -> SockInfo:
    return SockInfo(state="LISTEN", laddr=addr, lport=port, pid=pid)


def est(laddr: str, lport: int, raddr: str, rport: int, pid: int | None = None) -> SockInfo:
    return SockInfo(state="ESTABLISHED", laddr=laddr, lport=lport, raddr=raddr, rport=rport, pid=pid)


def snap(procs=(), socks=(), host_addr: str = "") -> Snapshot:
    return Snapshot(procs=tuple(procs), socks=tuple(socks), host_addr=host_addr)


def ids(jobs: list[Job]) -> list[str]:
    return [j.job_id for j in jobs]


def by_id(jobs: list[Job]) -> dict[str, Job]:
    return {j.job_id: j for j in jobs}


# A small host: init(1) -> PS (100, listens on 10.0.0.1:9000) with two workers
# connected from other hosts, and a local trainer (200) connecting out.
PS_HOST = snap(
    procs=[proc(1, 0, "/sbin/init"), proc(100, 1, "python ps.py --port 9000"),
           proc(200, 1, "python worker.py --ps 10.0.0.1:9000")],
    socks=[
        listen("10.0.0.1", 9000, 100),
        est("10.0.0.1", 9000, "10.0.0.2", 40000, 100),
        est("10.0.0.1", 9000, "10.0.0.3", 40001, 100),
        est("10.0.0.1", 41000, "10.0.0.9", 9000, 200),
        SockInfo(state="TIME_WAIT", laddr="10.0.0.1", lport=9000, raddr="10.0.0.4", rport=1, pid=None),
        SockInfo(state="SYN_SENT", laddr="10.0.0.1", lport=41001, raddr="10.0.0.9", rport=9000, pid=200),
    ],
)


# --------------------------------------------------------------------------
# ports


def test_port_spec_one_job_per_listening_port() -> None:
    jobs = group_jobs([JobSpec(ports=(9000,))], PS_HOST)
    # the local PS's job, and the job of the remote PS 10.0.0.9:9000 that 200 connects to
    assert ids(jobs) == ["ps:10.0.0.1:9000", "ps:10.0.0.9:9000"]
    j = jobs[0]
    assert j.job_id == "ps:10.0.0.1:9000"
    assert j.source == "port"
    assert j.listen_ports == (9000,)
    assert j.flows == (FlowKey("10.0.0.1", 9000, "10.0.0.2", 40000), FlowKey("10.0.0.1", 9000, "10.0.0.3", 40001))
    assert j.pids == (100,)
    assert j.role == "server"
    assert j.client_flows() == ()


def test_port_not_listening_is_absent() -> None:
    assert group_jobs([JobSpec(ports=(9999,))], PS_HOST) == []
    # an established socket on the port without a listener does not make a job
    s = snap(socks=[est("10.0.0.1", 9999, "10.0.0.2", 1234)])
    assert group_jobs([JobSpec(ports=(9999,))], s) == []


def test_port_spec_several_ports_several_jobs_sorted() -> None:
    s = snap(socks=[listen("10.0.0.1", 9001), listen("10.0.0.1", 9000), est("10.0.0.1", 9001, "10.0.0.5", 5000)])
    jobs = group_jobs([JobSpec(ports=(9001, 9000, 9002))], s)
    assert ids(jobs) == ["ps:10.0.0.1:9000", "ps:10.0.0.1:9001"]
    assert jobs[0].flows == ()
    assert jobs[1].flows == (FlowKey("10.0.0.1", 9001, "10.0.0.5", 5000),)
    assert all(j.pids == () for j in jobs)  # owners unknown (fast path snapshot)


def test_port_spec_named_one_port_and_several_ports() -> None:
    s = snap(socks=[listen("10.0.0.1", 9000), listen("10.0.0.1", 9001)])
    assert ids(group_jobs([JobSpec(name="resnet", ports=(9000,))], s)) == ["resnet"]
    jobs = group_jobs([JobSpec(name="resnet", ports=(9000, 9001, 9002))], s)
    assert ids(jobs) == ["resnet:9000", "resnet:9001"]
    assert {j.source for j in jobs} == {"config"}


def test_port_spec_model_bytes_copied() -> None:
    jobs = group_jobs([JobSpec(ports=(9000,), model_bytes=98_000_000)], PS_HOST)
    assert jobs[0].model_bytes == 98_000_000


@pytest.mark.parametrize("wild", ["0.0.0.0", "::"])
def test_wildcard_listener_uses_host_addr(wild: str) -> None:
    s = snap(socks=[listen(wild, 9000), est("10.0.0.1", 9000, "10.0.0.2", 40000)], host_addr="192.168.1.5")
    assert ids(group_jobs([JobSpec(ports=(9000,))], s)) == ["ps:192.168.1.5:9000"]


def test_wildcard_listener_without_host_addr_uses_flow_laddr_then_zero() -> None:
    s = snap(socks=[listen("0.0.0.0", 9000), est("10.0.0.7", 9000, "10.0.0.2", 40000)])
    assert ids(group_jobs([JobSpec(ports=(9000,))], s)) == ["ps:10.0.0.7:9000"]
    s = snap(socks=[listen("0.0.0.0", 9000)])
    assert ids(group_jobs([JobSpec(ports=(9000,))], s)) == ["ps:0.0.0.0:9000"]


def test_specific_listener_preferred_over_wildcard() -> None:
    s = snap(socks=[listen("::", 9000), listen("10.0.0.1", 9000)], host_addr="192.168.1.5")
    assert ids(group_jobs([JobSpec(ports=(9000,))], s)) == ["ps:10.0.0.1:9000"]


def test_ipv6_id_bracketed() -> None:
    s = snap(socks=[listen("fd00::1", 9000), est("fd00::1", 9000, "fd00::2", 40000)])
    jobs = group_jobs([JobSpec(ports=(9000,))], s)
    assert ids(jobs) == ["ps:[fd00::1]:9000"]
    assert jobs[0].flows == (FlowKey("fd00::1", 9000, "fd00::2", 40000),)


def test_ipv4_mapped_addresses_normalized() -> None:
    s = snap(socks=[listen("::ffff:10.0.0.1", 9000), est("::ffff:10.0.0.1", 9000, "::ffff:10.0.0.2", 40000)])
    jobs = group_jobs([JobSpec(ports=(9000,))], s)
    assert ids(jobs) == ["ps:10.0.0.1:9000"]
    assert jobs[0].flows == (FlowKey("10.0.0.1", 9000, "10.0.0.2", 40000),)


def test_loopback_flows_kept() -> None:
    s = snap(socks=[listen("127.0.0.1", 9000, 10), est("127.0.0.1", 9000, "127.0.0.1", 50000, 10),
                    est("127.0.0.1", 50000, "127.0.0.1", 9000, 11)])
    jobs = group_jobs([JobSpec(ports=(9000,))], s)
    assert jobs[0].job_id == "ps:127.0.0.1:9000"
    assert jobs[0].flows == (FlowKey("127.0.0.1", 9000, "127.0.0.1", 50000),)
    assert jobs[0].pids == (10,)  # the client side (pid 11) is not on port 9000


# --------------------------------------------------------------------------
# pids


TREE = snap(
    procs=[
        proc(1, 0, "/sbin/init"),
        proc(500, 1, "bash run.sh"),
        proc(501, 500, "python train.py"),
        proc(502, 501, "python train.py dataloader"),
        proc(600, 1, "python other.py"),
    ],
    socks=[
        est("10.0.0.1", 45000, "10.0.0.9", 9000, 501),
        est("10.0.0.1", 45001, "10.0.0.9", 9000, 502),
        est("10.0.0.1", 46000, "10.0.0.8", 9000, 600),
    ],
)


def test_pid_spec_includes_descendants_role_client() -> None:
    jobs = group_jobs([JobSpec(pids=(500,))], TREE)
    assert len(jobs) == 1
    j = jobs[0]
    assert j.job_id == "pid:500"
    assert j.source == "pid"
    assert j.pids == (500, 501, 502)
    assert j.listen_ports == ()
    assert j.flows == (FlowKey("10.0.0.1", 45000, "10.0.0.9", 9000), FlowKey("10.0.0.1", 45001, "10.0.0.9", 9000))
    assert j.role == "client"
    assert j.client_flows() == j.flows


def test_pid_spec_each_listed_pid_is_a_job_missing_pid_absent() -> None:
    jobs = group_jobs([JobSpec(pids=(600, 500, 777))], TREE)
    assert ids(jobs) == ["pid:500", "pid:600"]
    assert by_id(jobs)["pid:600"].flows == (FlowKey("10.0.0.1", 46000, "10.0.0.8", 9000),)


def test_pid_spec_listed_descendant_merged_into_ancestor() -> None:
    jobs = group_jobs([JobSpec(pids=(500, 502))], TREE)
    assert ids(jobs) == ["pid:500"]
    assert jobs[0].pids == (500, 501, 502)


def test_pid_spec_without_sockets_kept() -> None:
    s = snap(procs=[proc(1, 0), proc(42, 1, "python idle.py")])
    jobs = group_jobs([JobSpec(pids=(42,))], s)
    assert ids(jobs) == ["pid:42"]
    assert jobs[0].role == "client" and jobs[0].flows == ()


def test_pid_spec_server_role_and_ps_id() -> None:
    jobs = group_jobs([JobSpec(pids=(100,))], PS_HOST)
    j = jobs[0]
    assert j.job_id == "ps:10.0.0.1:9000"
    assert j.source == "pid"
    assert j.listen_ports == (9000,)
    assert j.role == "server"


def test_pid_spec_both_role() -> None:
    s = snap(procs=[proc(1, 0), proc(10, 1, "python ps_and_worker.py")],
             socks=[listen("10.0.0.1", 9000, 10), listen("10.0.0.1", 9005, 10),
                    est("10.0.0.1", 9000, "10.0.0.2", 40000, 10),
                    est("10.0.0.1", 41000, "10.0.0.3", 9000, 10)])
    j = group_jobs([JobSpec(pids=(10,))], s)[0]
    assert j.job_id == "ps:10.0.0.1:9000"  # lowest listening port
    assert j.listen_ports == (9000, 9005)
    assert j.role == "both"
    assert j.client_flows() == (FlowKey("10.0.0.1", 41000, "10.0.0.3", 9000),)


def test_pid_spec_ps_id_wildcard_uses_host_addr() -> None:
    s = snap(procs=[proc(1, 0), proc(10, 1, "ps")], socks=[listen("0.0.0.0", 9100, 10)], host_addr="10.1.1.1")
    assert ids(group_jobs([JobSpec(pids=(10,))], s)) == ["ps:10.1.1.1:9100"]


def test_pid_spec_launcher_env_ids() -> None:
    s = snap(procs=[proc(1, 0), proc(10, 1, "torchrun train.py"),
                    proc(11, 10, "python train.py", TORCHELASTIC_RUN_ID="abc", MASTER_ADDR="10.0.0.1",
                         MASTER_PORT="29500"),
                    proc(20, 1, "python train.py", MASTER_ADDR="fd00::1", MASTER_PORT="29500")])
    jobs = group_jobs([JobSpec(pids=(10, 20))], s)
    assert ids(jobs) == ["master:[fd00::1]:29500", "torchelastic:abc"]
    assert by_id(jobs)["torchelastic:abc"].pids == (10, 11)


def test_pid_spec_named_single_and_several() -> None:
    assert ids(group_jobs([JobSpec(name="bert", pids=(500,))], TREE)) == ["bert"]
    jobs = group_jobs([JobSpec(name="bert", pids=(600, 500), model_bytes=7)], TREE)
    # suffixes follow the order of the unnamed ids (pid:500 < pid:600)
    assert ids(jobs) == ["bert:0", "bert:1"]
    assert by_id(jobs)["bert:0"].pids == (500, 501, 502)
    assert by_id(jobs)["bert:1"].pids == (600,)
    assert {j.source for j in jobs} == {"config"}
    assert {j.model_bytes for j in jobs} == {7}


def test_ppid_cycle_does_not_hang() -> None:
    s = snap(procs=[proc(5, 6, "a"), proc(6, 5, "a")])
    jobs = group_jobs([JobSpec(match="a")], s)
    assert len(jobs) >= 1
    assert set().union(*(j.pids for j in jobs)) == {5, 6}


# --------------------------------------------------------------------------
# match


def test_match_grouped_by_torchelastic_run_id() -> None:
    s = snap(procs=[
        proc(1, 0, "/sbin/init"),
        # two separate launchers of the same elastic run (e.g. restarted agent)
        proc(10, 1, "python -m torch.distributed.run train.py"),
        proc(11, 10, "python train.py --local_rank=0", TORCHELASTIC_RUN_ID="r1"),
        proc(20, 1, "python -m torch.distributed.run train.py"),
        proc(21, 20, "python train.py --local_rank=1", TORCHELASTIC_RUN_ID="r1"),
        # another run
        proc(30, 1, "python -m torch.distributed.run train.py"),
        proc(31, 30, "python train.py", TORCHELASTIC_RUN_ID="r2", MASTER_ADDR="10.0.0.1", MASTER_PORT="1"),
        proc(40, 1, "python unrelated.py"),
    ], socks=[est("10.0.0.1", 50000, "10.0.0.2", 29500, 11), est("10.0.0.1", 50001, "10.0.0.2", 29500, 21)])
    jobs = group_jobs([JobSpec(match=r"train\.py")], s)
    assert ids(jobs) == ["torchelastic:r1", "torchelastic:r2"]
    r1 = by_id(jobs)["torchelastic:r1"]
    assert r1.pids == (10, 11, 20, 21)
    assert len(r1.flows) == 2
    assert r1.source == "match"
    assert by_id(jobs)["torchelastic:r2"].pids == (30, 31)


def test_match_grouped_by_master_addr_port() -> None:
    s = snap(procs=[
        proc(1, 0),
        proc(10, 1, "python train.py --rank 0", MASTER_ADDR="10.0.0.1", MASTER_PORT="29500"),
        proc(11, 1, "python train.py --rank 1", MASTER_ADDR="10.0.0.1", MASTER_PORT="29500"),
        proc(12, 1, "python train.py --rank 0", MASTER_ADDR="10.0.0.1", MASTER_PORT="29501"),
        proc(13, 1, "python train.py", MASTER_ADDR="10.0.0.1"),  # no port: not a launcher identity
    ])
    jobs = group_jobs([JobSpec(match="train.py")], s)
    assert ids(jobs) == ["master:10.0.0.1:29500", "master:10.0.0.1:29501", "pid:13"]
    assert by_id(jobs)["master:10.0.0.1:29500"].pids == (10, 11)


def test_run_id_preferred_over_master() -> None:
    s = snap(procs=[proc(1, 0),
                    proc(10, 1, "train", TORCHELASTIC_RUN_ID="x", MASTER_ADDR="h", MASTER_PORT="1"),
                    proc(11, 1, "train", MASTER_ADDR="h", MASTER_PORT="1")])
    assert ids(group_jobs([JobSpec(match="train")], s)) == ["master:h:1", "torchelastic:x"]


def test_match_process_trees_without_env() -> None:
    s = snap(procs=[
        proc(1, 0, "/sbin/init"),
        proc(10, 1, "mpirun python hvd.py"),
        proc(11, 10, "python hvd.py"),  # matching child: belongs to 10's job
        proc(12, 11, "python -c loader"),  # non-matching descendant: still in the job
        proc(20, 1, "python hvd.py"),  # another tree
    ], socks=[est("10.0.0.1", 50000, "10.0.0.2", 1234, 12)])
    jobs = group_jobs([JobSpec(match="hvd")], s)
    assert ids(jobs) == ["pid:10", "pid:20"]
    assert by_id(jobs)["pid:10"].pids == (10, 11, 12)
    assert by_id(jobs)["pid:10"].flows == (FlowKey("10.0.0.1", 50000, "10.0.0.2", 1234),)
    assert by_id(jobs)["pid:20"].pids == (20,)
    # no process is counted twice
    all_pids = [p for j in jobs for p in j.pids]
    assert len(all_pids) == len(set(all_pids))


def test_match_env_found_on_child_of_launcher() -> None:
    # torchrun itself has no TORCHELASTIC_RUN_ID; its workers do
    s = snap(procs=[proc(1, 0), proc(10, 1, "torchrun train.py"),
                    proc(11, 10, "python train.py", TORCHELASTIC_RUN_ID="job7")])
    jobs = group_jobs([JobSpec(match="train.py")], s)
    assert ids(jobs) == ["torchelastic:job7"]
    assert jobs[0].pids == (10, 11)


def test_match_ps_id_from_listening_port() -> None:
    s = snap(procs=[proc(1, 0), proc(10, 1, "python ps.py")],
             socks=[listen("0.0.0.0", 9001, 10), listen("0.0.0.0", 9000, 10)], host_addr="10.0.0.1")
    jobs = group_jobs([JobSpec(match="ps.py")], s)
    assert ids(jobs) == ["ps:10.0.0.1:9000"]
    assert jobs[0].listen_ports == (9000, 9001)
    assert jobs[0].role == "server"


def test_match_named_several_jobs_suffixed() -> None:
    s = snap(procs=[proc(1, 0), proc(10, 1, "train", TORCHELASTIC_RUN_ID="b"),
                    proc(20, 1, "train", TORCHELASTIC_RUN_ID="a")])
    jobs = group_jobs([JobSpec(name="gpt", match="train")], s)
    assert ids(jobs) == ["gpt:0", "gpt:1"]
    assert by_id(jobs)["gpt:0"].pids == (20,)  # torchelastic:a < torchelastic:b
    assert by_id(jobs)["gpt:1"].pids == (10,)
    assert ids(group_jobs([JobSpec(name="gpt", match="train", model_bytes=5)], snap(procs=[proc(10, 1, "train")]))) \
        == ["gpt"]


def test_match_nothing() -> None:
    assert group_jobs([JobSpec(match="no-such-process")], TREE) == []


def test_match_uses_search_not_fullmatch() -> None:
    assert ids(group_jobs([JobSpec(match="other")], TREE)) == ["pid:600"]
    assert group_jobs([JobSpec(match="^other")], TREE) == []


@pytest.mark.parametrize("bad", ["train(", "[a-", "*x"])
def test_bad_regex_is_config_error(bad: str) -> None:
    with pytest.raises(ConfigError) as e:
        group_jobs([JobSpec(match=bad)], TREE)
    assert repr(bad) in str(e.value)
    assert "regex" in str(e.value)


def test_spec_without_selector_or_with_two_is_config_error() -> None:
    with pytest.raises(ConfigError):
        group_jobs([JobSpec(name="x")], TREE)
    with pytest.raises(ConfigError):
        group_jobs([JobSpec(ports=(1,), pids=(2,))], TREE)


# --------------------------------------------------------------------------
# dedup, merging, determinism


def test_flow_claimed_by_two_jobs_goes_to_first_id() -> None:
    # "a" (pid 502 and its child 503) sorts before "pid:500", whose tree also holds 502 and 503
    s = snap(procs=list(TREE.procs) + [proc(503, 502, "x")],
             socks=list(TREE.socks) + [est("10.0.0.1", 47000, "10.0.0.7", 1, 503)])
    jobs = group_jobs([JobSpec(pids=(500,)), JobSpec(name="a", pids=(502,))], s)
    assert ids(jobs) == ["a", "pid:500"]
    assert by_id(jobs)["a"].flows == (FlowKey("10.0.0.1", 45001, "10.0.0.9", 9000),
                                      FlowKey("10.0.0.1", 47000, "10.0.0.7", 1))
    assert by_id(jobs)["pid:500"].flows == (FlowKey("10.0.0.1", 45000, "10.0.0.9", 9000),)
    # pids may overlap, flows never do
    assert by_id(jobs)["pid:500"].pids == (500, 501, 502, 503)


def test_fully_covered_job_dropped() -> None:
    jobs = group_jobs([JobSpec(match="dataloader"), JobSpec(pids=(500,))], TREE)
    flows = [f for j in jobs for f in j.flows]
    assert len(flows) == len(set(flows))
    jobs = group_jobs([JobSpec(pids=(502,)), JobSpec(pids=(500,))], TREE)
    # pid:500 < pid:502: 500's job claims 502's flow; 502's job had a flow and lost it
    assert ids(jobs) == ["pid:500"]


def test_listen_port_claimed_once_and_its_flows_follow() -> None:
    s = snap(procs=[proc(1, 0), proc(100, 1, "python ps.py")],
             socks=[listen("10.0.0.1", 9000, 100), est("10.0.0.1", 9000, "10.0.0.2", 40000, 100)])
    # named port job "a-ps" sorts before the match job "ps:10.0.0.1:9000"... which has the same
    # sockets: the match job is fully covered and dropped
    jobs = group_jobs([JobSpec(match="ps.py"), JobSpec(name="a-ps", ports=(9000,))], s)
    assert ids(jobs) == ["a-ps"]
    assert jobs[0].listen_ports == (9000,)
    assert jobs[0].flows == (FlowKey("10.0.0.1", 9000, "10.0.0.2", 40000),)
    # the other way round: "z-ps" sorts after, and loses everything
    jobs = group_jobs([JobSpec(match="ps.py"), JobSpec(name="z-ps", ports=(9000,))], s)
    assert ids(jobs) == ["ps:10.0.0.1:9000"]
    assert jobs[0].source == "match"


def test_listen_port_of_earlier_job_claims_flows_of_later_job() -> None:
    # a flow accepted on port 9000 but owned (after fork) by an unrelated process
    s = snap(procs=[proc(1, 0), proc(100, 1, "ps"), proc(300, 1, "helper")],
             socks=[listen("10.0.0.1", 9000, 100), est("10.0.0.1", 9000, "10.0.0.2", 40000, 300),
                    est("10.0.0.1", 51000, "10.0.0.3", 80, 300)])
    jobs = group_jobs([JobSpec(name="a", ports=(9000,)), JobSpec(name="b", pids=(300,))], s)
    assert ids(jobs) == ["a", "b"]
    assert by_id(jobs)["b"].flows == (FlowKey("10.0.0.1", 51000, "10.0.0.3", 80),)
    assert by_id(jobs)["b"].role == "client"


def test_same_id_from_two_specs_merged() -> None:
    jobs = group_jobs([JobSpec(ports=(9000,)), JobSpec(pids=(100,), model_bytes=3)], PS_HOST)
    assert ids(jobs) == ["ps:10.0.0.1:9000", "ps:10.0.0.9:9000"]  # the second: worker 200's remote PS
    j = jobs[0]
    assert j.source == "port"  # first spec wins
    assert j.model_bytes == 3
    assert j.pids == (100,)
    assert len(j.flows) == 2


def test_result_sorted_and_deterministic() -> None:
    specs = [JobSpec(pids=(600,)), JobSpec(match="run.sh"), JobSpec(ports=(9000,))]
    s = snap(procs=TREE.procs + PS_HOST.procs[1:], socks=TREE.socks + PS_HOST.socks)
    a = group_jobs(specs, s)
    b = group_jobs(list(reversed(specs)), snap(procs=reversed(s.procs), socks=reversed(s.socks)))
    assert ids(a) == sorted(ids(a))
    assert [(j.job_id, j.pids, j.listen_ports, j.flows, j.role) for j in a] == \
        [(j.job_id, j.pids, j.listen_ports, j.flows, j.role) for j in b]


def test_no_specs_no_jobs() -> None:
    assert group_jobs([], PS_HOST) == []


def test_pids_needing_env_covers_trees_only() -> None:
    assert pids_needing_env([JobSpec(ports=(9000,))], TREE.procs) == set()
    assert pids_needing_env([JobSpec(pids=(501,))], TREE.procs) == {501, 502}
    assert pids_needing_env([JobSpec(match="other")], TREE.procs) == {600}
    with pytest.raises(ConfigError):
        pids_needing_env([JobSpec(match="(")], TREE.procs)


def test_same_port_at_several_addresses_is_one_job_per_address() -> None:
    """Containers of one host serving the same port, each at its own address (discovery
    reports a container's wildcard listener with the container's address)."""
    s = snap(socks=[listen("10.1.0.3", 9000, pid=30), listen("10.1.0.2", 9000, pid=20),
                    est("10.1.0.2", 9000, "10.9.0.1", 40000, pid=20),
                    est("10.1.0.3", 9000, "10.9.0.1", 40001, pid=30)])
    for spec in (JobSpec(ports=(9000,)), JobSpec(pids=(20, 30))):
        snapshot = snap(procs=[proc(20), proc(30)], socks=s.socks) if spec.pids else s
        jobs = by_id(group_jobs([spec], snapshot))
        assert sorted(jobs) == ["ps:10.1.0.2:9000", "ps:10.1.0.3:9000"]
        assert jobs["ps:10.1.0.2:9000"].flows == (FlowKey("10.1.0.2", 9000, "10.9.0.1", 40000),)
        assert jobs["ps:10.1.0.3:9000"].flows == (FlowKey("10.1.0.3", 9000, "10.9.0.1", 40001),)
        assert all(j.listen_ports == (9000,) and j.role == "server" for j in jobs.values())


def test_same_listener_found_twice_is_still_one_job() -> None:
    """A --ports and a --match spec finding the same PS under different ids: the endpoint
    goes to the first id, the second job is dropped as covered (as with one address)."""
    s = snap(procs=[proc(20, cmd="ps-server")],
             socks=[listen("0.0.0.0", 9000, pid=20), est("10.1.0.2", 9000, "10.9.0.1", 40000, pid=20)],
             host_addr="10.1.0.2")
    jobs = group_jobs([JobSpec(ports=(9000,)), JobSpec(name="zz", match="ps-server")], s)
    assert ids(jobs) == ["ps:10.1.0.2:9000"]


# --------------------------------------------------------------------------
# torchrun launch ids


def torchrun_tree(agent: int, port: int, run: str = "none", addr: str = "127.0.0.1") -> list[ProcInfo]:
    """A torchrun agent (no launcher env of its own) and its 2 workers, as torchrun starts them."""
    env = {"TORCHELASTIC_RUN_ID": run, "MASTER_ADDR": addr, "MASTER_PORT": str(port)}
    return [proc(agent, 1, f"/venv/bin/python3 /venv/bin/torchrun --nproc-per-node 2 --master-port {port} train.py"),
            proc(agent + 1, agent, "/venv/bin/python3 -u train.py", **env),
            proc(agent + 2, agent, "/venv/bin/python3 -u train.py", **env)]


@pytest.mark.parametrize("spec", [JobSpec(match="torchrun"), JobSpec(pids=(10, 20))])
def test_default_run_id_none_does_not_merge_launches(spec: JobSpec) -> None:
    # torchrun without --rdzv-id: TORCHELASTIC_RUN_ID=none in every launch
    s = snap(procs=[proc(1, 0), *torchrun_tree(10, 29510), *torchrun_tree(20, 29610)])
    jobs = group_jobs([spec], s)
    assert ids(jobs) == ["master:127.0.0.1:29510", "master:127.0.0.1:29610"]
    assert by_id(jobs)["master:127.0.0.1:29510"].pids == (10, 11, 12)
    assert by_id(jobs)["master:127.0.0.1:29610"].pids == (20, 21, 22)


@pytest.mark.parametrize("run", ["none", "None", "", " none "])
def test_anonymous_run_id_without_master_is_a_tree_job(run: str) -> None:
    s = snap(procs=[proc(1, 0), proc(10, 1, "train", TORCHELASTIC_RUN_ID=run),
                    proc(20, 1, "train", TORCHELASTIC_RUN_ID=run)])
    assert ids(group_jobs([JobSpec(match="train")], s)) == ["pid:10", "pid:20"]


def test_anonymous_run_id_same_master_is_one_launch() -> None:
    # a second tree of the same launch on this host (e.g. an agent restarted by hand)
    s = snap(procs=[proc(1, 0), *torchrun_tree(10, 29510), *torchrun_tree(20, 29510)])
    jobs = group_jobs([JobSpec(match="torchrun")], s)
    assert ids(jobs) == ["master:127.0.0.1:29510"]
    assert jobs[0].pids == (10, 11, 12, 20, 21, 22)


def test_run_id_shared_by_launches_with_different_masters_splits() -> None:
    # two jobs launched with the same --rdzv-id (copied from an example) on different endpoints
    s = snap(procs=[proc(1, 0), *torchrun_tree(10, 29400, "456", "10.0.0.1"),
                    *torchrun_tree(20, 29400, "456", "10.0.0.2"), *torchrun_tree(30, 29500, "789", "10.0.0.1")])
    jobs = group_jobs([JobSpec(match="torchrun")], s)
    assert ids(jobs) == ["master:10.0.0.1:29400", "master:10.0.0.2:29400", "torchelastic:789"]
    assert by_id(jobs)["master:10.0.0.2:29400"].pids == (20, 21, 22)
    # the same with a pid spec, and with one spec per launch (config [[jobs]] without names)
    assert ids(group_jobs([JobSpec(pids=(10, 20))], s)) == ["master:10.0.0.1:29400", "master:10.0.0.2:29400"]
    assert ids(group_jobs([JobSpec(pids=(10,)), JobSpec(pids=(20,))], s)) \
        == ["master:10.0.0.1:29400", "master:10.0.0.2:29400"]


def test_run_id_shared_with_same_master_stays_one_job() -> None:
    s = snap(procs=[proc(1, 0), *torchrun_tree(10, 29400, "job7", "10.0.0.1"),
                    *torchrun_tree(20, 29400, "job7", "10.0.0.1"),
                    proc(30, 1, "torchrun train.py"), proc(31, 30, "python train.py", TORCHELASTIC_RUN_ID="job7")])
    jobs = group_jobs([JobSpec(match="torchrun")], s)
    assert ids(jobs) == ["torchelastic:job7"]
    assert jobs[0].pids == (10, 11, 12, 20, 21, 22, 30, 31)


def test_run_id_found_past_an_anonymous_one() -> None:
    # the agent's own env says none (exported by hand), its workers carry the real id
    s = snap(procs=[proc(1, 0), proc(10, 1, "torchrun train.py", TORCHELASTIC_RUN_ID="none"),
                    proc(11, 10, "python train.py", TORCHELASTIC_RUN_ID="r9", MASTER_ADDR="h", MASTER_PORT="1")])
    assert ids(group_jobs([JobSpec(match="torchrun")], s)) == ["torchelastic:r9"]


# --------------------------------------------------------------------------
# hostctl is no job


@pytest.mark.parametrize("cmd", [
    "/venv/bin/python3 /venv/bin/hostctl flows --match torchrun",
    "/usr/bin/python3 /usr/local/bin/hostctl start --policy rr --match torchrun",
    "hostctl flows --match x",
    "sudo hostctl start --match torchrun",
    "timeout 60 /venv/bin/hostctl flows --match torchrun --json",
    "sh -c hostctl flows --match torchrun; sleep 1",
    "watch -n1 hostctl status",
    "python3 -m hostctl.cli flows --match torchrun",
    "python -m hostctl start --pids 1",
])
def test_hostctl_commands_recognised(cmd: str) -> None:
    assert is_hostctl_command(cmd)


@pytest.mark.parametrize("cmd", [
    "python /opt/hostctl/train.py --match torchrun",
    "torchrun --nproc-per-node 2 /home/u/hostctl/examples/train.py",
    "python train.py --out /data/hostctl --epochs 3",
    "python train.py --name hostctl",
    "python -m hostctl_lab.workloads.ps worker --job j1",
    "hostctl",
    "",
])
def test_other_commands_not_hostctl(cmd: str) -> None:
    assert not is_hostctl_command(cmd)


def test_hostctl_commands_are_the_cli_commands() -> None:
    import typer.main

    from hostctl.cli import app

    assert HOSTCTL_COMMANDS == frozenset(typer.main.get_command(app).commands)


def test_hostctl_processes_and_their_children_are_no_job() -> None:
    s = snap(procs=[
        proc(1, 0, "/sbin/init"),
        *torchrun_tree(10, 29510),
        proc(50, 1, "sudo hostctl flows --match torchrun"),  # a wrapper that forks
        proc(51, 50, "/venv/bin/python3 /venv/bin/hostctl flows --match torchrun"),
        proc(60, 1, "/venv/bin/python3 /venv/bin/hostctl start --match torchrun"),  # a daemon ...
        proc(61, 60, "tc filter show dev eth0"),  # ... and its helper
        proc(70, 1, "python /opt/hostctl/train.py --launcher torchrun"),  # a job that lives under hostctl/
    ], socks=[listen("0.0.0.0", 9100, 60), est("10.0.0.1", 41000, "10.0.0.9", 29510, 11)])
    jobs = group_jobs([JobSpec(match="torchrun")], s)
    assert ids(jobs) == ["master:127.0.0.1:29510", "pid:70"]
    assert pids_needing_env([JobSpec(match="torchrun")], s.procs) == {10, 11, 12, 70}
    assert group_jobs([JobSpec(pids=(60, 51))], s) == []


def test_excluded_pid_is_no_job_but_its_children_may_be() -> None:
    # the calling process (a test runner or a script using hostctl as a library) and what it started
    s = snap(procs=[proc(1, 0), proc(5, 1, "python -m pytest -k torchrun"),
                    proc(10, 5, "torchrun --master-port 29510 train.py"),
                    proc(11, 10, "python train.py", MASTER_ADDR="h", MASTER_PORT="29510")])
    assert group_jobs([JobSpec(match="torchrun")], s)[0].pids == (5, 10, 11)  # 5 is the top
    jobs = group_jobs([JobSpec(match="torchrun")], s, exclude={5})
    assert ids(jobs) == ["master:h:29510"]
    assert jobs[0].pids == (10, 11)
    assert group_jobs([JobSpec(pids=(5,))], s, exclude={5}) == []
    assert pids_needing_env([JobSpec(match="torchrun")], s.procs, exclude={5}) == {10, 11}


# ports on a worker host: flows selected by remote port

# A worker host 10.0.0.5: process 300 uploads to two PS (10.0.0.1:9400, 10.0.0.2:9401) with two
# connections to the first; 301 connects to an unlisted port; 302 talks to a local PS on 9500.
WORKER_HOST = snap(
    procs=[proc(1, 0, "/sbin/init"), proc(300, 1, "python worker.py"), proc(301, 1, "ssh"),
           proc(302, 1, "python local.py")],
    socks=[
        est("10.0.0.5", 40000, "10.0.0.1", 9400, 300),
        est("10.0.0.5", 40001, "10.0.0.1", 9400, 300),
        est("10.0.0.5", 40002, "10.0.0.2", 9401, 300),
        est("10.0.0.5", 40003, "10.0.0.7", 22, 301),
        SockInfo(state="SYN_SENT", laddr="10.0.0.5", lport=40004, raddr="10.0.0.3", rport=9400, pid=300),
    ],
)


def test_worker_host_one_client_job_per_remote_endpoint() -> None:
    jobs = group_jobs([JobSpec(ports=(9400, 9401))], WORKER_HOST)
    assert ids(jobs) == ["ps:10.0.0.1:9400", "ps:10.0.0.2:9401"]
    a, b = jobs
    assert a.role == "client" and a.source == "port" and a.listen_ports == ()
    assert a.flows == (FlowKey("10.0.0.5", 40000, "10.0.0.1", 9400), FlowKey("10.0.0.5", 40001, "10.0.0.1", 9400))
    assert a.remote_endpoints == (("10.0.0.1", 9400),) and a.pids == (300,)
    assert b.flows == (FlowKey("10.0.0.5", 40002, "10.0.0.2", 9401),) and b.remote_endpoints == (("10.0.0.2", 9401),)
    assert a.client_flows() == a.flows  # no listening port covers them


def test_worker_job_id_equals_the_ps_hosts_job_id() -> None:
    """The PS host (10.0.0.1, wildcard listener, host_addr from its interface) and the worker host
    name the job alike, by the PS's address."""
    ps = snap(socks=[listen("0.0.0.0", 9400), est("10.0.0.1", 9400, "10.0.0.5", 40000)], host_addr="10.0.0.1")
    wk = snap(socks=[est("10.0.0.5", 40000, "10.0.0.1", 9400)], host_addr="10.0.0.5")
    spec = [JobSpec(ports=(9400,))]
    assert ids(group_jobs(spec, ps)) == ids(group_jobs(spec, wk)) == ["ps:10.0.0.1:9400"]
    # the same with a named spec: the name on both sides
    named = [JobSpec(name="resnet", ports=(9400,))]
    assert ids(group_jobs(named, ps)) == ids(group_jobs(named, wk)) == ["resnet"]
    two = [JobSpec(name="resnet", ports=(9400, 9401))]
    assert ids(group_jobs(two, ps)) == ids(group_jobs(two, wk)) == ["resnet:9400"]


def test_worker_ipv6_and_mapped_endpoints() -> None:
    s = snap(socks=[est("fd00::5", 40000, "fd00::1", 9400), est("::ffff:10.0.0.5", 40001, "::ffff:10.0.0.2", 9400)])
    jobs = group_jobs([JobSpec(ports=(9400,))], s)
    assert ids(jobs) == ["ps:10.0.0.2:9400", "ps:[fd00::1]:9400"]
    assert jobs[0].remote_endpoints == (("10.0.0.2", 9400),)
    assert jobs[1].remote_endpoints == (("fd00::1", 9400),)


def test_host_that_is_ps_and_worker_of_the_same_port_has_two_jobs() -> None:
    s = snap(socks=[listen("10.0.0.5", 9400), est("10.0.0.5", 9400, "10.0.0.8", 50000),
                    est("10.0.0.5", 40000, "10.0.0.1", 9400)])
    jobs = group_jobs([JobSpec(ports=(9400,))], s)
    assert ids(jobs) == ["ps:10.0.0.1:9400", "ps:10.0.0.5:9400"]
    client, server = jobs
    assert (client.role, client.listen_ports, client.remote_endpoints) == ("client", (), (("10.0.0.1", 9400),))
    assert (server.role, server.listen_ports, server.remote_endpoints) == ("server", (9400,), ())
    assert server.flows == (FlowKey("10.0.0.5", 9400, "10.0.0.8", 50000),)
    # a named spec names both: one job, serving 9400 and connecting to the other PS
    (j,) = group_jobs([JobSpec(name="a", ports=(9400,))], s)
    assert j.job_id == "a" and j.role == "both" and j.listen_ports == (9400,)
    assert j.remote_endpoints == (("10.0.0.1", 9400),) and len(j.flows) == 2


def test_connections_to_a_local_ps_are_the_local_ps_job_only() -> None:
    s = snap(socks=[
        listen("0.0.0.0", 9400), listen("10.0.0.5", 9401),
        # a local worker on loopback and on the host address: both ends are in the snapshot
        est("127.0.0.1", 40000, "127.0.0.1", 9400), est("127.0.0.1", 9400, "127.0.0.1", 40000),
        est("10.0.0.5", 40001, "10.0.0.5", 9401), est("10.0.0.5", 9401, "10.0.0.5", 40001),
        # the client end only (the server end not seen yet): the listener's address tells
        est("10.0.0.5", 40002, "10.0.0.5", 9401), est("127.0.0.1", 40003, "127.0.0.1", 9400),
    ], host_addr="10.0.0.5")
    jobs = group_jobs([JobSpec(ports=(9400, 9401))], s)
    assert ids(jobs) == ["ps:10.0.0.5:9400", "ps:10.0.0.5:9401"]
    assert all(j.role == "server" and j.remote_endpoints == () for j in jobs)


def test_worker_flows_of_unlisted_ports_and_other_states_are_ignored() -> None:
    assert group_jobs([JobSpec(ports=(22,))], WORKER_HOST)[0].remote_endpoints == (("10.0.0.7", 22),)
    assert group_jobs([JobSpec(ports=(9402,))], WORKER_HOST) == []  # the SYN_SENT to 10.0.0.3 is no job


def test_remote_endpoint_claimed_by_the_first_job() -> None:
    # the worker process is also found by --match: "master:..." sorts first and takes the flows,
    # the port job is covered and dropped with its endpoint
    procs = [proc(1, 0), proc(300, 1, "python worker.py", MASTER_ADDR="10.0.0.1", MASTER_PORT="29500")]
    s = snap(procs=procs, socks=[est("10.0.0.5", 40000, "10.0.0.1", 9400, 300)])
    jobs = group_jobs([JobSpec(match="worker"), JobSpec(ports=(9400,))], s)
    assert ids(jobs) == ["master:10.0.0.1:29500"]
    # with a name sorting first, the port spec's job keeps flows and endpoint
    jobs = group_jobs([JobSpec(match="worker"), JobSpec(name="a", ports=(9400,))], s)
    assert ids(jobs) == ["a"] and jobs[0].remote_endpoints == (("10.0.0.1", 9400),)
