"""The lab of hostctl, a distribution of its own (lab/pyproject.toml, ``hostctl-lab``): everything that
emulates, loads and measures a cluster, and nothing a training host runs.

- ``topology``: ``LabFabric``, the emulated cluster a scenario runs on (hosts, racks, link rates).
- ``testbed``:  network namespaces and emulated switches on one machine (``hostctl testbed``).
- ``workloads``: DL-style programs (parameter server, ring all-reduce, PyTorch) making real TCP traffic.
- ``tools``:    small traffic tools (``bulk``).
- ``bench``:    scenarios, the runner, reports and plots (``hostctl bench``, ``bench-compare``,
                ``bench-pacing``, ``demo``).
- ``fluid``:    fluid models of the scenarios (``python -m hostctl_lab.fluid.mlcc``, ``.mixed``, ``.placement1``).
- ``analysis``: lower bounds and trace analysis (``python -m hostctl_lab.analysis.opt_tworack``,
                ``.trace_share``, ``.slot_replay``, ``.ps_phases``).
- ``cli``:      the lab's commands, registered on hostctl's typer app by ``hostctl.cli``.

The product (``hostctl``) never imports this package, except for that guarded registration.
"""
