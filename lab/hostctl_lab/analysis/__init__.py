"""Analysis tools: the two-rack lower bounds, trace shares, slot replays, PS phases
(run them with ``python -m hostctl_lab.analysis.<name> --help``)."""
