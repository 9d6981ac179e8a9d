"""DL-style workload programs: real processes exchanging real TCP traffic.

A testbed starts one process per worker and per parameter server, usually each
in its own network namespace. All namespaces share one machine and so one
CLOCK_MONOTONIC: every timestamp below is ``time.monotonic()`` seconds and is
comparable across processes.

Programs (``python -m hostctl_lab.workloads.<name> --help`` for the flags):

- ``ps``:        synchronous parameter-server job (``server`` and ``worker``).
- ``allreduce``: ring all-reduce over persistent TCP connections (``worker``).
- ``torchjob``:  a real PyTorch ``gloo`` all_reduce job (needs the ``torch`` extra).
- ``summary``:   turns the worker records of one job into the job JSON.

In every program the traffic a host *sends* to its peers leaves from the
socket that was *accepted* on the program's listening port, so its egress
flows have the listening port as source port (that is how the traffic
controller classifies them by ``--ports``). Listening sockets stay open until
the program ends, so port-based discovery sees them for the whole job.

Worker record (one JSON object per worker, written atomically to ``--out`` at
the end, also after an error; ``-`` means stdout)::

    {
      "job": str,                 # --job
      "kind": "ps" | "allreduce" | "torch",
      "role": "worker",
      "rank": int,
      "t_start": float,           # after connecting, before the first iteration
      "t_end": float,             # after the last iteration (or when the error hit)
      "iter_end": [float] * N,    # end of iteration i = release of its barrier
      "barrier_enter": [float] * N,
      "barrier_exit": [float] * M,  # see below
      "barrier_wait_s": [float] * N,  # derived: the wait at barrier i, in seconds
      "compute_wall_s": [float] * N,  # how long each compute step took (longer than --compute
                                  #   when the host's processor is shared: --compute-cgroup)
      "bytes_sent": int | None,   # application bytes after the handshake
      "bytes_received": int | None,
      "errors": [str]             # empty when the job completed
    }

Barriers by kind:

- ``ps``: ``barrier_enter[i]`` = the last gradient shard of iteration i had
  arrived at its server (servers report it with the next header; the worker's
  own "sends returned" time is in ``gradient_sent[i]``, and when the whole
  update had arrived, i.e. its compute began, in ``compute_start[i]``);
  ``barrier_exit`` has N+1 entries: ``barrier_exit[i]`` = the last server's
  header of iteration i arrived (``barrier_exit[0]`` is the job start, and for
  i >= 1 it is the release of barrier i-1), ``barrier_exit[N]`` = the last
  "done" header arrived. Wait i = ``barrier_exit[i+1] - barrier_enter[i]``;
  ``iter_end[i] = barrier_exit[i+1]``.
- ``allreduce`` and ``torch``: ``barrier_enter[i]`` = after the compute step,
  ``barrier_exit[i]`` = the all-reduce finished (N entries). Wait i =
  ``barrier_exit[i] - barrier_enter[i]``; ``iter_end[i] = barrier_exit[i]``.

A record of a failed worker has the lists only up to where it got, a
non-empty "errors", and the process exits 1 (143 after SIGTERM). Exit 2 means
bad arguments (one line on stderr). A ps server writes a record with
``"role": "server"``, ``"rank": null`` and its ``port``, ``workers``,
``shard_bytes`` when given ``--out``; ``summary`` ignores those.
"""
